"""Batch-1 latency of the fixture networks: tosa_jax against the TOSA reference model, measured in
one run on the same machine and the same input. Prints a table and writes JSON.

    python bench/latency.py [--repeat 50] [--json latency.json] [GRAPH.tosa ...]

The reference model runs in-process through its Python binding (``tosa_reference_model.run``), so
neither side pays for process start or file I/O. tosa_jax is timed in steady state (compiled,
warmed up) with ``block_until_ready``; its first call (trace + XLA compile) is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np

import tosa_jax
from tosa_jax.testing import median_ms

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def measure(path: Path, repeat: int) -> dict:
    import tosa_reference_model as ref

    data = path.read_bytes()
    model = tosa_jax.load(data)
    example = path.with_suffix(".input.npy")
    spec = model.inputs[0]
    x = (np.load(example) if example.exists() and len(model.inputs) == 1
         else np.zeros(spec.shape, spec.np_dtype))
    t0 = time.perf_counter()
    jax.block_until_ready(model(x))
    first_ms = (time.perf_counter() - t0) * 1e3
    ours_ms = median_ms(lambda: jax.block_until_ready(model(x)), repeat)[0]
    outs, status = ref.run(data, [x])
    want, got = np.asarray(outs[0]), np.asarray(model(x))
    exact = got.dtype.kind in "iub"
    # Integers must be identical; FP (reference in its FP32 mode) only a sanity bound here,
    # the spec's error bounds are checked by tests/test_networks_fp.py.
    same = want.shape == got.shape and (
        np.array_equal(want, got) if exact
        else np.allclose(want, got, rtol=0, atol=1e-4 * max(1.0, float(np.abs(want).max()))))
    if not same:
        raise SystemExit(f"{path.name}: tosa_jax and the reference model disagree")
    ref_ms = median_ms(lambda: ref.run(data, [x]), max(3, repeat // 10))[0]
    return {"graph": path.name, "tosa_jax_ms": ours_ms, "reference_ms": ref_ms,
            "speedup": ref_ms / ours_ms, "tosa_jax_first_call_ms": first_ms,
            "bit_exact": exact}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("graphs", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    graphs = args.graphs or sorted(FIXTURES.glob("*.tosa"))
    machine = (f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
               f"jax {jax.__version__} on {jax.devices()[0].platform}").strip()
    rows = [measure(g, args.repeat) for g in graphs]
    print(f"machine: {machine}")
    print(f"{'graph':<24}{'tosa_jax ms':>12}{'refmodel ms':>12}{'speedup':>9}{'1st call ms':>13}")
    for r in rows:
        print(f"{r['graph']:<24}{r['tosa_jax_ms']:>12.3f}{r['reference_ms']:>12.3f}"
              f"{r['speedup']:>8.1f}x{r['tosa_jax_first_call_ms']:>13.0f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
