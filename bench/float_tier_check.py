"""Check tosa_jax.float_tier on generated conformance tests: for every float-tier candidate
(at any size), is its quick executable proven, and do the quick and the optimized executables
give the same bits on the test's inputs? Also proves the optimized executable's own HLO.

    python bench/float_tier_check.py OUT/operators .cache/conformance/<slice>/operators

Generate tests first (``bench/conformance.py generate --profile tosa-pro-fp --operators conv2d
...``). Prints progress every 200 tests, then the counts and why candidates were refused; exits
1 when a proven candidate's two executables differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TOSA_JAX_NPEXEC", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import tosa_jax  # noqa: E402
from tosa_jax import float_tier  # noqa: E402


def check(test: Path, counts: Counter[str], refused: Counter[str]) -> None:
    desc = json.loads((test / "desc.json").read_text())
    if desc.get("expected_failure"):
        return
    counts["tests"] += 1
    model = tosa_jax.load(str(test / desc["tosa_file"]), cache=False)
    if not model.float_tier:
        return
    counts["candidates"] += 1
    # (a candidate's inputs are FP32 and integers: the .npy files as they are)
    feeds = {name: np.load(test / file) for name, file in zip(desc["ifm_name"],
                                                              desc["ifm_file"], strict=True)}
    args = tuple(jax.device_put(np.asarray(feeds[s.name], s.np_dtype)) for s in model.inputs)
    lowered = model._lower(args)
    quick = model._compile_tier(lowered, args, 0)
    why = float_tier.inexact(quick.as_text())
    if why is not None:
        refused[why.split(" (")[0]] += 1
        return
    counts["proven"] += 1
    optimized = model._compile_tier(lowered, args, 1)
    if float_tier.inexact(optimized.as_text()) is not None:
        counts["optimized not proven"] += 1
        print(f"optimized not proven: {test}", flush=True)
    same = [np.asarray(a).tobytes() == np.asarray(b).tobytes()
            for a, b in zip(jax.tree.leaves(quick(*args)), jax.tree.leaves(optimized(*args)),
                            strict=True)]
    if all(same):
        counts["identical"] += 1
    else:
        counts["DIFFERENT"] += 1
        print(f"DIFFERENT: {test}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", help="directories holding conformance tests")
    args = parser.parse_args()
    float_tier.MIN_MACS = 0  # the conformance graphs are small; the rule is the same
    tests = sorted({p.parent for root in args.roots for p in Path(root).rglob("desc.json")})
    counts: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    start = time.perf_counter()
    for i, test in enumerate(tests, 1):
        try:
            check(test, counts, refused)
        except Exception as exc:  # a test this check cannot run (its own runner judges it)
            counts["errors"] += 1
            print(f"error: {test}: {type(exc).__name__}: {exc}", flush=True)
        if i % 200 == 0:
            print(f"[{i}/{len(tests)} tests, {time.perf_counter() - start:.0f} s] {dict(counts)}",
                  file=sys.stderr, flush=True)
    print(dict(counts))
    print("refused:", dict(refused))
    return 1 if counts["DIFFERENT"] else 0


if __name__ == "__main__":
    sys.exit(main())
