"""Tracing + lowering cost per operator, as bench/benchmark.py measures it, in CPU and wall time.

Each graph runs in a fresh process: JAX's one-time set-up (a trivial jit), ``tosa_jax.load``,
then ``jax.jit(model.fn).lower(*x)`` as Model lowers it (this platform's forms alone, the
garbage collector held off, source locations dropped), timed with ``time.process_time`` (CPU:
robust to other load on the machine; JAX traces in one Python thread) and
``time.perf_counter`` (wall).
Operators: all but CONST / CONST_SHAPE, as the benchmark counts them.

    python bench/trace_cost.py tests/fixtures/*.tosa [--profile out.prof]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _worker(path: str, profile: str | None) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np

    import tosa_jax
    from tosa_jax.lowering.numerics import lowering_for
    from tosa_jax.model import no_gc, without_locations

    jax.jit(lambda v: v + 1).lower(np.int32(1)).compile()
    model = tosa_jax.load(path, cache=False)
    x = [jax.device_put(np.zeros(s.shape, s.np_dtype)) for s in model.inputs]
    jax.block_until_ready(x)
    f = jax.jit(model.fn)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    c0, t0 = time.process_time(), time.perf_counter()
    with no_gc(), lowering_for(jax.devices()[0].platform):  # as Model and the benchmark do
        without_locations(f.lower(*x))
    c1, t1 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    ops = sum(op.op not in ("CONST", "CONST_SHAPE") for op in model.graph.main.operators)
    return {"ops": ops, "cpu_ms": (c1 - c0) * 1e3, "wall_ms": (t1 - t0) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--profile", help="cProfile output of the lowering (one graph)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per graph (min)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.graphs[0], args.profile)))
        return
    print(f"{'graph':<22}{'ops':>5}{'cpu ms':>9}{'cpu/op':>8}{'wall ms':>9}{'wall/op':>8}",
          flush=True)
    for g in args.graphs:
        runs = []
        for _ in range(args.repeat):
            cmd = [sys.executable, __file__, "--worker", g]
            if args.profile:
                cmd += ["--profile", args.profile]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        r = min(runs, key=lambda r: r["cpu_ms"])
        wall = min(r["wall_ms"] for r in runs)
        print(f"{Path(g).stem:<22}{r['ops']:>5}{r['cpu_ms']:>9.0f}{r['cpu_ms'] / r['ops']:>8.2f}"
              f"{wall:>9.0f}{wall / r['ops']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
