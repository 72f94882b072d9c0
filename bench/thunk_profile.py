"""Where a graph's batch-1 call spends its time on the CPU, kernel by kernel: XLA's own trace of
each thunk of the optimized executable (loop fusions, YNNPACK and Eigen kernels), averaged over
calls, with each loop fusion's size in HLO instructions.

    python bench/thunk_profile.py .cache/zoo/unet_int8.tosa [--calls 50] [--top 25]

Inputs: ``<graph>.input.npy`` beside the graph, else zeros (``tosa_jax.testing.sample_inputs``).
XLA CPU records a trace event per thunk when ``--xla_cpu_enable_xprof_traceme`` is set before
its backend starts (this script sets it); ``jax.profiler`` collects them and
``jax.profiler.ProfileData`` reads them back, no TensorBoard needed. A fusion far slower per
element than its neighbours, or far larger, is where to look (2026-11-27: unet_int8's group
norms held each group's statistics chain, about 100 operations, recomputed for every element:
``tosa_jax.executor``'s shared values). Kernels that run on other threads overlap: their times
add up to more than the call's; the tracing itself adds a little to each kernel (compare
kernels with each other, not with the benchmark's figures). Every thunk named after an
instruction of the entry computation is listed: before 2026-11-28 (thirty-fifth session) only
fusions, products and copies were, and Eigen's convolutions were missing (unet_fp32: its 13
convolutions 432 us of a 1,540-1,600 us call, all listed kernels 921 us; the rest is the
executor's own time between kernels).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_enable_xprof_traceme=true").strip()

import jax  # noqa: E402  (after XLA_FLAGS: read when the backend starts)
import numpy as np  # noqa: E402

import tosa_jax  # noqa: E402
from tosa_jax.testing import sample_inputs  # noqa: E402


def fusion_sizes(hlo: str) -> dict[str, int]:
    """Instructions in each fusion's fused computation, by the fusion's name."""
    bodies = {m.group(1): m.group(2).count("\n") for m in re.finditer(
        r"^(%[\w.\-]+) [^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M)}
    return {m.group(1): bodies.get(m.group(2), 0) for m in re.finditer(
        r"%([\w.\-]+) = [^\n]* fusion\([^\n]*calls=(%[\w.\-]+)", hlo)}


def entry_instructions(hlo: str) -> set[str]:
    """The names of the entry computation's instructions: what its thunks are named after
    (fusions, library products and convolutions, copies...)."""
    entry = re.search(r"^ENTRY [^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M)
    return set() if entry is None else set(re.findall(r"^\s+(?:ROOT )?%([\w.\-]+) = ",
                                                       entry.group(1), re.M))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graph")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    model = tosa_jax.load(args.graph, cache=False)
    inputs = sample_inputs(model, args.graph)
    print(f"compiling {args.graph} ...", file=sys.stderr, flush=True)
    model.compile(*inputs)
    slot = next(iter(model._executables.values()))
    hlo = slot.exe.as_text()
    sizes = fusion_sizes(hlo)
    thunks = entry_instructions(hlo)
    for _ in range(10):
        jax.block_until_ready(model(*inputs))

    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.calls):
            jax.block_until_ready(model(*inputs))
        jax.profiler.stop_trace()
        trace = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
        profile = jax.profiler.ProfileData.from_file(trace)

    total: collections.Counter[str] = collections.Counter()
    calls: list[float] = []
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                if event.name == "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice":
                    calls.append(event.duration_ns / 1e3)
                elif event.name in thunks or event.name.startswith(("dot", "wrapped_", "copy")):
                    total[event.name] += event.duration_ns / 1e3 / args.calls
    print(f"{args.graph}: executable {np.median(calls):.1f} us a call (median of {len(calls)}), "
          f"{len(sizes)} fusions")
    print(f"{'us/call':>9} {'instr':>6}  kernel")
    for name, us in total.most_common(args.top):
        print(f"{us:9.1f} {sizes.get(name, 0):6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
