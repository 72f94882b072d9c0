"""Both engines on the same graphs and random inputs: does ``tosa_jax.reference_model.run`` return
the reference model binding's status (TOSA_VALID, TOSA_UNPREDICTABLE where the values break a
REQUIRE, TOSA_ERROR) and, where both say valid, its integer outputs bit for bit?

    python bench/requires_diff.py --tests DIR [DIR ...] [--json out.json]

Each graph (a conformance test's ``test.tosa`` under the DIRs) runs with two seeded input sets:
``small`` (integers in -3..3, floats ~N(0, 1)), and ``full`` (integers over their whole range and
floats ~N(0, 100), with extremes, zeros, infinities and NaNs mixed in), which break the
data-dependent REQUIREs (int32 overflow, indices out of range, POW's domain...). Graphs with a
WHILE_LOOP are left out (random counters loop for billions of iterations on both engines). The
binding aborts the process on some REQUIREs (a division by zero, an index out of range): the
graphs run in a worker process, restarted after such a crash, and the case is counted as one.
Input sets the binding refuses (its own conventions for INT48, FP8 inputs) are counted apart.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("small", "full")


def random_inputs(data: bytes, kind: str = "small", seed: int = 7,
                  bound: int = 3) -> list[np.ndarray]:
    """Seeded inputs for the graph's entry block: ``small`` integers within +-``bound`` (and
    their type), floats ~N(0, 1); ``full`` as the module docstring says. BF16/FP8 inputs (raw
    bits) are zeros. Also bench/engine_replay.py's inputs (``bound`` 1000)."""
    from tosa_jax import serialization
    from tosa_jax.ir import HOST_DTYPES

    block = serialization.read(data).main
    rng = np.random.default_rng(seed)
    xs = []
    for name in block.inputs:
        t = block.tensors[name]
        dt = HOST_DTYPES[t.dtype]
        if dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = (info.min, info.max) if kind == "full" else (max(info.min, -bound),
                                                                  min(info.max, bound))
            x = rng.integers(lo, hi, t.shape, endpoint=True, dtype=np.int64)
            if kind == "full":  # the extremes, more often than chance
                x = np.where(rng.random(t.shape) < 0.2,
                             rng.choice([info.min, info.max, 0, -1, 1], t.shape), x)
            xs.append(x.astype(dt))
        elif dt.kind == "b":
            xs.append(rng.integers(0, 2, t.shape).astype(bool))
        elif dt.kind == "V":  # BF16/FP8 as raw bits: zeros
            xs.append(np.zeros(t.shape, np.uint16 if dt.itemsize == 2 else np.uint8))
        else:
            x = rng.standard_normal(t.shape) * (100 if kind == "full" else 1)
            if kind == "full":
                x = np.where(rng.random(t.shape) < 0.1,
                             rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], t.shape), x)
            xs.append(x.astype(dt))
    return xs


def _status(fn: Any, data: bytes, xs: list[np.ndarray]) -> tuple[str, list[np.ndarray] | None]:
    try:
        outs, status = fn(data, xs)
        return status.name, [np.asarray(o) for o in outs]
    except Exception as e:  # a convention the binding refuses: counted apart
        return f"refused ({type(e).__name__})", None


def worker(listing: str, start: int) -> None:
    """Run the tests of ``listing`` from index ``start``; one JSON line per case (a ``start``
    line before each, so that the parent knows which case a crash cut off)."""
    import tosa_reference_model as trm

    from tosa_jax import reference_model as rm
    from tosa_jax import serialization

    for test in Path(listing).read_text().splitlines()[start:]:
        data = (Path(test) / "test.tosa").read_bytes()
        graph = serialization.read(data)
        loops = any(op.op == "WHILE_LOOP" for r in graph.regions for b in r.blocks
                    for op in b.operators)
        for kind in KINDS:
            rec: dict[str, Any] = {"test": test, "kind": kind}
            if loops:
                print(json.dumps({**rec, "skip": "WHILE_LOOP"}), flush=True)
                continue
            xs = random_inputs(data, kind)
            rec["tosa_jax"], g_outs = _status(rm.run, data, xs)
            print(json.dumps({**rec, "start": True}), flush=True)  # the binding may abort
            rec["ref"], r_outs = _status(trm.run, data, xs)
            if r_outs is not None and g_outs is not None and rec["ref"] == "TOSA_VALID" and all(
                    o.dtype.kind in "iub" for o in r_outs):
                rec["same"] = all(a.tobytes() == b.tobytes() for a, b in zip(r_outs, g_outs))
            print(json.dumps(rec), flush=True)


def run(tests: list[str], listing: Path) -> list[dict[str, Any]]:
    """Every case of ``tests`` through ``worker`` processes, restarted after a crash."""
    listing.write_text("\n".join(tests) + "\n")
    env = {**os.environ, "TOSA_JAX_RM_CACHE_SIZE": "4", "TOSA_MODEL_NO_BACKTRACE": "1"}
    records: list[dict[str, Any]] = []
    done = 0
    while done < len(tests):
        proc = subprocess.Popen([sys.executable, "-m", __name__, "--worker", str(listing),
                                 str(done)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env)
        assert proc.stdout is not None
        running = None
        for line in iter(proc.stdout.readline, ""):
            if not line.startswith("{"):
                continue  # the binding's own messages
            rec = json.loads(line)
            if rec.pop("start", False):
                running = rec
                continue
            records.append(rec)
            running = None
            done += rec["kind"] == KINDS[-1]
            if rec["kind"] == KINDS[-1]:
                print(f"\r{done}/{len(tests)} graphs", end="", file=sys.stderr, flush=True)
        proc.wait()
        if running is not None:  # the binding (or the process) died in this case
            records.append({**running, "crash": proc.returncode})
            done += 1
    print(file=sys.stderr)
    return records


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    disagree = []
    for r in records:
        if "skip" in r:
            counts["skipped (WHILE_LOOP)"] += 1
            continue
        if "crash" in r:
            counts[f"{r['kind']}: the binding aborted, tosa_jax {r['tosa_jax']}"] += 1
            continue
        key = f"{r['kind']}: ref {r['ref']}, tosa_jax {r['tosa_jax']}"
        if r.get("same") is not None:
            key += ", outputs " + ("identical" if r["same"] else "differ")
        counts[key] += 1
        if (r["ref"].startswith("TOSA") and r["tosa_jax"].startswith("TOSA")
                and r["ref"] != r["tosa_jax"]):
            disagree.append(r)
    return {"counts": dict(sorted(counts.items())), "status_differs": disagree}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", nargs="+", help="directories holding conformance tests")
    ap.add_argument("--json", help="write every record and the summary here")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return 0
    from tosa_jax.testing import find_tests

    tests = [str(t) for t in find_tests(*args.tests)]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        records = run(tests, Path(tmp) / "tests.txt")
    result = summary(records)
    for key, n in result["counts"].items():
        print(f"{n:6d}  {key}")
    for r in result["status_differs"]:
        print(f"status differs: {r['test']} ({r['kind']}): ref {r['ref']}, "
              f"tosa_jax {r['tosa_jax']}")
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
