"""Agreement of tosa_jax.hw_models.support with Vela 5.2 on which operators run on the NPU.

    python bench/vela_agreement.py [--tests /work/conf_full/operators] [--json out.json]
                                   [--accelerators ethos-u55-128,ethos-u65-256,ethos-u85-256]
                                   [--limit N] [--no-cache]

Cases: every positive single-operator conformance test under ``--tests`` (the PRO-INT and
EXT-INT16 suite: INT8/INT16/INT32/BOOL type signatures of every operator; a test whose graph
has several non-CONST operators counts once per operator) and every non-CONST operator of the
fixture networks ``tests/fixtures/*_int8.tosa``. For each case and accelerator, our verdict
(``unsupported_reasons(...) == []``) is compared with Vela's (``hw_models.vela.vela_verdict``:
the operator's Vela operations all in the NPU command stream, see that module for what this
means on U55/U65 where Vela refuses whole graphs). Operators whose Vela verdict is unknown (the
compilation ran past ``--timeout``, seen on graphs with axes near 65536; or a refused graph
whose message names another operator) are counted apart, not in the agreement. Vela's
verdicts are cached in
``.cache/vela_verdicts.json`` (keyed by file, size, mtime and accelerator), so re-runs after a
change of our rules only re-judge our side.

Prints agreement per accelerator with counts, the disagreements grouped by operator and type
signature with our reasons and Vela's error, and writes every case to ``--json``. Exit status 1
when an accelerator is under 99%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import tosa_jax
from tosa_jax.hw_models.devices import get_device
from tosa_jax.hw_models.support import unsupported_reasons
from tosa_jax.hw_models.vela import VelaWorker
from tosa_jax.testing import find_tests

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "vela_verdicts.json"
ACCELERATORS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
SKIP_OPS = ("CONST", "CONST_SHAPE")


def tosa_files(root: Path) -> list[Path]:
    """The graph of each positive conformance test under root."""
    return [t / json.loads((t / "desc.json").read_text()).get("tosa_file", "test.tosa")
            for t in find_tests(root, negative=False)]


def signature(block: Any, op: Any) -> str:
    """The element types of an operator's non-scalar-parameter inputs and outputs: 'i8xi8->i32'."""
    def short(t: str) -> str:
        return t.lower().replace("int", "i").replace("bool", "b").replace("shape", "s")
    ins = [short(block.tensors[i].dtype) for i in op.inputs[:2] if i in block.tensors]
    outs = [short(block.tensors[o].dtype) for o in op.outputs]
    return "x".join(ins) + "->" + ",".join(outs)


def _key(path: Path, acc: str) -> str:
    st = path.stat()
    return f"{path}|{st.st_size}|{int(st.st_mtime)}|{acc}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", type=Path, default=Path("/work/conf_full/operators"))
    ap.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "fixtures")
    ap.add_argument("--accelerators", default=",".join(ACCELERATORS))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="only the first N tests (smoke run)")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--cached-only", action="store_true",
                    help="only the tests whose Vela verdicts are all cached (no Vela runs)")
    ap.add_argument("--timeout", type=float, default=5.0,
                    help="seconds per Vela compilation before it is abandoned (verdict unknown)")
    ap.add_argument("--retry-timeouts", action="store_true",
                    help="run Vela again where a cached compilation had timed out")
    ap.add_argument("--show", type=int, default=40, help="disagreement groups to print")
    args = ap.parse_args(argv)
    accs = [a.strip() for a in args.accelerators.split(",") if a.strip()]

    files = tosa_files(args.tests) if args.tests.exists() else []
    if args.limit:
        files = files[: args.limit]
    fixtures = sorted(args.fixtures.glob("*_int8.tosa"))
    cache: dict[str, Any] = {}
    if CACHE.exists() and not args.no_cache:
        cache = json.loads(CACHE.read_text())

    t0 = time.time()
    vela_s = 0.0
    cases: list[dict[str, Any]] = []
    worker = VelaWorker()
    for n, path in enumerate(files + fixtures):
        source = "fixture" if path in fixtures else "conformance"
        if args.cached_only and any(_key(path, a) not in cache for a in accs):
            continue
        data = path.read_bytes()
        graph = tosa_jax.read(data)
        block = graph.main
        for acc in accs:
            key = _key(path, acc)
            if args.retry_timeouts and key in cache and str(
                    cache[key]["error"]).startswith("timeout"):
                del cache[key]
            if key not in cache:
                t = time.time()
                v = worker.verdict(path, acc, args.timeout)
                vela_s += time.time() - t
                cache[key] = {"compiled": v.compiled, "error": v.error,
                              "on_npu": {str(k): x for k, x in v.on_npu.items()},
                              "vela_ops": {str(k): x for k, x in v.vela_ops.items()}}
            vv = cache[key]
            dev = get_device(acc)
            for k, op in enumerate(block.operators):
                if op.op in SKIP_OPS:
                    continue
                theirs = vv["on_npu"].get(str(k))
                reasons = unsupported_reasons(dev, graph, block, op)
                cases.append({
                    "source": source, "file": str(path), "index": k, "op": op.op,
                    "sig": signature(block, op), "accelerator": acc,
                    "ours": not reasons, "reasons": reasons, "vela": theirs,
                    "vela_error": vv["error"], "vela_ops": vv["vela_ops"].get(str(k), []),
                })
        if (n + 1) % 25 == 0 and not (args.no_cache or args.cached_only):
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            CACHE.write_text(json.dumps(cache))
        if (n + 1) % 500 == 0:
            print(f"... {n + 1}/{len(files) + len(fixtures)} files, {time.time() - t0:.0f} s",
                  file=sys.stderr)
    worker.close()
    if not (args.no_cache or args.cached_only):
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(cache))

    print(f"{len(files)} conformance tests + {len(fixtures)} fixture networks, "
          f"{time.time() - t0:.1f} s ({vela_s:.1f} s in Vela, rest cached or ours)")
    print(f"{'accelerator':16} {'cases':>6} {'agree':>6} {'%':>7} {'ours NPU/Vela CPU':>18} "
          f"{'ours CPU/Vela NPU':>18} {'Vela unknown':>13}")
    worst = 100.0
    summary: dict[str, Any] = {}
    for acc in accs:
        mine = [c for c in cases if c["accelerator"] == acc]
        known = [c for c in mine if c["vela"] is not None]
        agree = sum(c["ours"] == c["vela"] for c in known)
        fp = sum(c["ours"] and not c["vela"] for c in known)
        fn = sum(not c["ours"] and c["vela"] for c in known)
        pct = 100.0 * agree / max(1, len(known))
        worst = min(worst, pct)
        by_src = {s: (sum(c["ours"] == c["vela"] for c in known if c["source"] == s),
                      sum(1 for c in known if c["source"] == s))
                  for s in ("conformance", "fixture")}
        summary[acc] = {"cases": len(known), "agree": agree, "percent": pct,
                        "ours_npu_vela_cpu": fp, "ours_cpu_vela_npu": fn,
                        "vela_unknown": len(mine) - len(known), "by_source": by_src}
        print(f"{acc:16} {len(known):6} {agree:6} {pct:7.2f} {fp:18} {fn:18} "
              f"{len(mine) - len(known):13}")
        for s, (a, t) in by_src.items():
            print(f"    {s:12} {a}/{t}")

    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for c in cases:
        if c["vela"] is not None and c["ours"] != c["vela"]:
            why = c["reasons"][0] if c["reasons"] else (c["vela_error"] or "")
            groups[(c["accelerator"], c["op"], c["sig"], c["ours"], why[:90])].append(c)
    if groups:
        print("\nDisagreements (accelerator, operator, signature, ours, count, reason / Vela):")
    for (acc, op, sig, ours, why), cs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[
            : args.show]:
        side = "ours NPU, Vela CPU" if ours else "ours CPU, Vela NPU"
        ex = Path(cs[0]["file"]).parent.name
        print(f"  {acc} {op} {sig} [{side}] x{len(cs)}: {why}  (e.g. {ex})")
    counts = Counter((c["accelerator"], c["op"]) for c in cases)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "cases_per_op": {
            f"{a}:{o}": n for (a, o), n in counts.items()}, "cases": cases}, indent=1))
    return 0 if worst >= 99.0 else 1


if __name__ == "__main__":
    sys.exit(main())
