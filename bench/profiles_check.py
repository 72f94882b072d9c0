"""Check tosa_jax.profiles over conformance test directories (no execution).

    python bench/profiles_check.py --tests /tmp/neg /work/conf_full [--level 8K] [-j 2]

For every test (a directory with desc.json and its .tosa file):

* negative tests (``expected_failure``): the graph must be refused before execution: an ERROR_IF
  broken (``profiles.validate``), or a level check failing at ``--level`` (the conformance
  runner's default, EIGHTK, is what the reference model applies);
* positive tests: the graph must not be refused, and ``profiles.requirements`` must agree with
  the test's own ``test_requirements``: the same ``extensions_required``, and every profile of
  ``profiles_supported`` (any one of them suffices) among those tosa_jax finds sufficient. Where
  the spec's tables make the graph valid under more profiles than the test names (the generator
  labels some tests by their data type), the test is counted apart as "wider"; where the test
  names an extension its graph does not use (a "_dyn" variant whose CTC inputs all stayed
  constant), as "unused". Both are printed with the reason.

Prints counts, the tests that disagree (per operator / ERROR_IF kind) and the validation time;
``--json`` writes every result. Exit status 1 when any test disagrees.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import tosa_jax
from tosa_jax import profiles
from tosa_jax.testing import find_tests


def _names(items: list[str], prefix: str) -> set[str]:
    return {i.upper().removeprefix("TOSA-") for i in items if i.upper().startswith(prefix)}


def check_one(test_dir: str, level: str | None) -> dict[str, Any]:
    """Validate one test; returns what was found (picklable)."""
    d = Path(test_dir)
    desc = json.loads((d / "desc.json").read_text())
    negative = bool(desc.get("expected_failure", False))
    name = d.name
    out: dict[str, Any] = {"test": name, "dir": test_dir, "negative": negative,
                           "operator": desc.get("test_details", {}).get("operator", "?"),
                           "kind": name.split("_ERRORIF_")[1].split("_")[0]
                           if "_ERRORIF_" in name else None}
    try:
        graph = tosa_jax.read((d / desc["tosa_file"]).read_bytes())
    except tosa_jax.TosaError as e:
        out.update(refused=True, by="read", message=str(e), seconds=0.0)
        return out
    t0 = time.perf_counter()
    analysis = profiles.analyse(graph)
    req = profiles.requirements_of(analysis)
    problems = profiles.check_target(analysis, profiles.Target(level=level)) if level else []
    out["seconds"] = time.perf_counter() - t0
    if analysis.violations:
        out.update(refused=True, by="ERROR_IF", message=str(analysis.violations[0]))
    elif req.unsatisfiable:
        out.update(refused=True, by="profile", message=req.unsatisfiable[0])
    elif problems:
        out.update(refused=True, by="level", message=problems[0])
    else:
        out.update(refused=False, by=None, message="")
    if not negative:
        tr = desc.get("test_requirements", {})
        want_p = _names(tr.get("profiles_supported", []), "TOSA-PRO-")
        want_e = _names(tr.get("extensions_required", []), "TOSA-EXT-")
        got_p = set(req.profiles) if not req.all_profiles else {" and ".join(req.profiles)}
        got_e = set(req.extensions)
        out["requirements"] = req.summary()
        text = (f"desc: {' or '.join(sorted(want_p))}; "
                f"{' + '.join(sorted(want_e)) or 'no extension'} | tosa_jax: {req.summary()}")
        if got_e < want_e and want_p <= got_p:
            # the test names an extension its graph does not use (by the spec's tables)
            out["unused"] = f"{' + '.join(sorted(want_e - got_e))}: {text}"
        elif got_e != want_e or not want_p <= got_p:
            # name what the spec's tables refuse under the test's own profile and extensions
            why = [w for p in sorted(want_p) for w in profiles.check_target(
                analysis, profiles.Target(frozenset({p}), frozenset(want_e)))]
            out["mismatch"] = text + (f" | under the test's own: {why[0]}" if why else "")
        elif got_p != want_p:  # the spec's tables allow more profiles than the test names
            out["wider"] = text
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="+", required=True, help="directories holding tests")
    parser.add_argument("--level", default="8K",
                        help="level the negative tests assume (default 8K; 'off' for none)")
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--show", type=int, default=30, help="disagreements to print")
    args = parser.parse_args(argv)
    level = None if args.level.lower() == "off" else profiles.level_name(args.level)
    tests = find_tests(*args.tests)
    if not tests:
        print("no tests (desc.json) found", file=sys.stderr)
        return 2
    start = time.monotonic()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(check_one, map(str, tests), [level] * len(tests),
                                    chunksize=16))
    else:
        results = [check_one(str(t), level) for t in tests]
    wall = time.monotonic() - start

    neg = [r for r in results if r["negative"]]
    pos = [r for r in results if not r["negative"]]
    neg_missed = [r for r in neg if not r["refused"]]
    pos_refused = [r for r in pos if r["refused"]]
    mismatched = [r for r in pos if r.get("mismatch")]
    wider = Counter(f"{r['operator']}: {r['wider']}" for r in pos if r.get("wider"))
    unused = [r for r in pos if r.get("unused")]
    by = Counter(r["by"] for r in neg if r["refused"])
    print(f"{len(results)} tests under {', '.join(args.tests)} in {wall:.1f} s "
          f"(level for negatives: {level or 'off'})")
    print(f"negative: {len(neg)}, refused {len(neg) - len(neg_missed)} "
          f"({', '.join(f'{k}: {v}' for k, v in sorted(by.items()))}), "
          f"missed {len(neg_missed)}")
    print(f"positive: {len(pos)}, refused {len(pos_refused)}, requirements differing from "
          f"desc.json {len(mismatched)}, valid under more profiles than desc.json names "
          f"{sum(wider.values())}, desc.json names an extension the graph does not use "
          f"{len(unused)}")
    seconds = sorted(r["seconds"] for r in results)
    if seconds:
        print(f"analysis time per test: median {seconds[len(seconds) // 2] * 1e3:.2f} ms, "
              f"max {seconds[-1] * 1e3:.1f} ms")
    kinds: dict[str, list[str]] = defaultdict(list)
    for r in neg_missed:
        kinds[f"{r['operator']} {r['kind']}"].append(r["test"])
    for k, names in sorted(kinds.items())[: args.show]:
        print(f"MISSED {k}: {len(names)} e.g. {names[0]}")
    for r in pos_refused[: args.show]:
        print(f"REFUSED {r['test']}: {r['message'][:300]}")
    for text, n in sorted(wider.items())[: args.show]:
        print(f"WIDER ({n} tests) {text}")
    for r in unused[: args.show]:
        print(f"UNUSED {r['test']}: {r['unused']}")
    for r in mismatched[: args.show]:
        print(f"REQUIREMENTS {r['test']}: {r['mismatch']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 1 if neg_missed or pos_refused or mismatched else 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
