"""Saved TOSA graphs through both engines, one process each, as a test suite runs them.

``bench/executorch_suite.py --save-graphs DIR`` keeps every graph ExecuTorch's tests hand to the
engine; this replays them without torch or executorch: each graph once through
``tosa_reference_model.run`` and once through ``tosa_jax.reference_model.run`` (seeded random
inputs), in this process. Printed per graph: wall and CPU time inside each engine, and whether
integer outputs are bit-identical (float outputs: the largest difference). Run it twice with one
``TOSA_JAX_CACHE_DIR`` for the cold and the warm (compile cache) figures.

    python bench/engine_replay.py DIR [--glob 'models_*'] [--engine tosa_jax|ref|both]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from typing import Any

import numpy as np


def inputs_for(data: bytes, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs: integers within +-1000 (and their type), floats ~N(0, 1)."""
    from tosa_jax.testing.requires_diff import random_inputs

    return random_inputs(data, "small", seed, bound=1000)


def timed(engine: Any, data: bytes, xs: list[np.ndarray]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        outs, _ = engine.run(data, xs)
        outs = [np.asarray(o) for o in outs]
    except Exception as e:  # reported, not fatal: the other graphs still run
        outs = f"{type(e).__name__}: {str(e)[:80]}"
    return time.perf_counter() - wall, time.process_time() - cpu, outs


def compare(a: Any, b: Any) -> str:
    if isinstance(a, str) or isinstance(b, str):
        return "error"
    # the bytes, of rank-0 outputs too (a 0-d array cannot change its item size in place)
    if all(x.shape == y.shape and np.array_equal(x.reshape(-1).view(np.uint8),
                                                 y.reshape(-1).view(np.uint8))
           for x, y in zip(a, b)):
        return "bit-exact"
    if all(x.dtype.kind in "iub" for x in a):
        return "DIFFERS"
    diff = max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0))
               for x, y in zip(a, b) if x.dtype.kind == "f")
    return f"max |diff| {diff:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--glob", default="*.tosa")
    ap.add_argument("--engine", choices=["tosa_jax", "ref", "both"], default="both")
    args = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.directory, args.glob)))
    engines: dict[str, Any] = {}
    start = time.perf_counter()
    if args.engine in ("ref", "both"):
        import tosa_reference_model

        engines["ref"] = tosa_reference_model
    if args.engine in ("tosa_jax", "both"):
        from tosa_jax import reference_model

        engines["tosa_jax"] = reference_model
    print(f"imports {time.perf_counter() - start:.2f} s; {len(files)} graphs")
    totals = {e: [0.0, 0.0] for e in engines}
    print(f"{'graph':<70} " + " ".join(f"{e + ' ms (cpu)':>20}" for e in engines))
    for path in files:
        data = open(path, "rb").read()
        xs = inputs_for(data)
        results = {}
        for name, engine in engines.items():
            wall, cpu, outs = timed(engine, data, xs)
            totals[name][0] += wall
            totals[name][1] += cpu
            results[name] = (wall, cpu, outs)
        same = compare(results["ref"][2], results["tosa_jax"][2]) if len(results) == 2 else ""
        print(f"{os.path.basename(path)[:70]:<70} " + " ".join(
            f"{1e3 * w:10.1f} ({1e3 * c:7.1f})" for w, c, _ in results.values()) + f"  {same}")
    for name, (wall, cpu) in totals.items():
        print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU inside the engine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
