"""No state leaks: load and call many small distinct graphs in one process; memory must plateau.

    python bench/leak.py [--graphs 1000] [--keep] [--clear-every N] [--json leak.json]

Each graph (built with ``tosa_jax.GraphBuilder``) has its own shapes and constants, so each one
traces and compiles its own XLA executable. A ``Model`` owns its jitted function, and that
function owns its compiled executables: dropping the Model releases them (``--keep`` holds every
Model instead, to show the difference). ``jax.clear_caches()`` (``--clear-every``) also empties
JAX's process-wide tracing and compilation caches. Prints resident memory (RSS) as it goes, and
the growth over the second half of the run, where a leak would show.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
import weakref
from pathlib import Path

import jax
import numpy as np

import tosa_jax


def rss_mib() -> float:
    """Resident memory of this process now, in MiB (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def small_graph(i: int) -> tosa_jax.Graph:
    """Graph ``i``: an int8 ADD, MUL and RESCALE chain; shapes and constants differ with ``i``."""
    rng = np.random.default_rng(i)
    shape = (1, 2 + i % 17, 3 + (i // 17) % 13)
    b = tosa_jax.GraphBuilder()
    x = b.input("x", shape, "INT8")
    x32 = b.op("CAST", [x], shape, "INT32")
    c = b.const(rng.integers(-1000, 1000, shape), "INT32")
    s = b.op("ADD", [x32, c], shape, "INT32")
    m = b.op("MUL", [s, b.const(np.full(shape, i % 100 + 1), "INT32"), b.const([1], "INT8")],
             shape, "INT32")
    y = b.op("RESCALE", [m, b.const([1 << 30], "INT32"), b.const([36], "INT8"),
                         b.const([0], "INT32"), b.const([0], "INT8")],
             shape, "INT8", scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
             input_unsigned=False, output_unsigned=False)
    return b.build([y])


def run(graphs: int, keep: bool = False, clear_every: int = 0, every: int = 50,
        quiet: bool = False) -> dict:
    """Load and call ``graphs`` distinct graphs; returns RSS samples and whether Models died."""
    kept: list[tosa_jax.Model] = []
    refs: list[weakref.ref] = []
    samples: list[tuple[int, float]] = [(0, rss_mib())]
    t0 = time.time()
    for i in range(graphs):
        model = tosa_jax.load(tosa_jax.write(small_graph(i)))
        spec = model.inputs[0]
        np.asarray(model(np.ones(spec.shape, spec.np_dtype)))
        if i % every == 0:
            refs.append(weakref.ref(model))
        if keep:
            kept.append(model)
        del model
        if clear_every and (i + 1) % clear_every == 0:
            jax.clear_caches()
        if (i + 1) % every == 0:
            gc.collect()
            samples.append((i + 1, rss_mib()))
            if not quiet:
                print(f"  {i + 1:5d} graphs  RSS {samples[-1][1]:8.1f} MiB", flush=True)
    gc.collect()
    if samples[-1][0] != graphs:  # a count that is no multiple of ``every``: end on a sample
        samples.append((graphs, rss_mib()))
    half = next(r for n, r in samples if n >= graphs // 2)
    return {
        "graphs": graphs, "keep": keep, "clear_every": clear_every,
        "rss_start_mib": round(samples[0][1], 1),
        "rss_after_first_50_mib": (round(samples[1][1], 1)
                                   if len(samples) > 1 and samples[1][0] == every else None),
        "rss_half_mib": round(half, 1), "rss_end_mib": round(samples[-1][1], 1),
        "growth_second_half_mib": round(samples[-1][1] - half, 1),
        "models_collected": sum(r() is None for r in refs), "models_sampled": len(refs),
        "seconds": round(time.time() - t0, 1),
        "samples": [(n, round(r, 1)) for n, r in samples],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=1000)
    ap.add_argument("--keep", action="store_true", help="hold every Model (the leaky baseline)")
    ap.add_argument("--clear-every", type=int, default=0, help="jax.clear_caches() every N")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = run(args.graphs, args.keep, args.clear_every)
    result["machine"] = f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus"
    result["jax"] = jax.__version__
    print(f"\n{result['graphs']} graphs in {result['seconds']} s: RSS {result['rss_start_mib']} "
          f"MiB at start, {result['rss_after_first_50_mib']} after 50, {result['rss_half_mib']} "
          f"at half, {result['rss_end_mib']} at the end: "
          f"{result['growth_second_half_mib']:+.1f} MiB over the second half; "
          f"{result['models_collected']}/{result['models_sampled']} sampled Models collected")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
