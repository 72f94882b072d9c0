"""Every conformance test graph read and re-written by tosa_jax, checked by three tools.

For each test directory (a ``desc.json`` and its .tosa) of a conformance suite or slice:

* the TOSA reference model runs the original and the re-written graph on the test's inputs:
  outputs must be identical (bit for bit, NaN where NaN);
* ``model-converter`` (Arm ML SDK, TOSA -> VGF) converts the re-written graph whenever it
  converts the original;
* Vela 5.2 (``--vela``; integer graphs only, U55-128 and U85-256) places the same operators on
  the NPU for both (a 20 s limit per compilation: Vela is slow on some huge shapes).

    python bench/writer_roundtrip.py --tests .cache/conformance/<slice> [--vela] [--json F]

Generate the CI slice first (``pytest tests/conformance`` does, or bench/conformance.py).
Prints one line per failure, a table per operator and progress every 25 tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tosa_jax
from tosa_jax.ir import FLOAT_TYPES
from tosa_jax.testing.reference import run_reference


def model_converter() -> str | None:
    beside = Path(sys.executable).parent / "model-converter"
    return str(beside) if beside.exists() else shutil.which("model-converter")


def converts(exe: str, data: bytes, tmp: Path) -> tuple[bool, str]:
    src = tmp / "g.tosa"
    src.write_bytes(data)
    proc = subprocess.run([exe, "-i", str(src), "-o", str(tmp / "g.vgf")], capture_output=True,
                          text=True, timeout=300)
    err = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
    return proc.returncode == 0, (err[0] if err else "")


def same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
                    or np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def check(test: Path, mc: str | None, vela: object | None, tmp: Path) -> dict:
    desc = json.loads((test / "desc.json").read_text())
    original = (test / desc["tosa_file"]).read_bytes()
    g = tosa_jax.read(original)
    again = tosa_jax.write(g)
    row: dict = {"test": test.name, "operator": test.parent.name.upper(), "problems": []}
    inputs = {n: np.load(test / f) for n, f in zip(desc.get("ifm_name", []),
                                                    desc.get("ifm_file", []))}
    outputs = list(desc.get("ofm_name", [])) or list(g.main.outputs)
    try:
        want = run_reference(original, inputs, outputs)
        row["reference_ran"] = True
    except AssertionError:
        want = None  # the reference model refuses the original (not a writer question)
        row["reference_ran"] = False
    if want is not None:
        try:
            got = run_reference(again, inputs, outputs)
            bad = [n for n in outputs if not same(got[n], want[n])]
            if bad:
                row["problems"].append(f"reference model: outputs {bad} differ")
        except AssertionError as e:
            row["problems"].append(f"reference model refuses the rewritten graph: {e}"[:300])
    if mc is not None:
        ok_orig, _ = converts(mc, original, tmp)
        ok_again, err = converts(mc, again, tmp)
        row["converter"] = [ok_orig, ok_again]
        if ok_orig and not ok_again:
            row["problems"].append(f"model-converter refuses the rewritten graph: {err}")
    if vela is not None:
        types = {t.dtype for r in g.regions for b in r.blocks for t in b.tensors.values()}
        if not types & set(FLOAT_TYPES) and len(g.regions) == 1:
            (tmp / "o.tosa").write_bytes(original)
            (tmp / "a.tosa").write_bytes(again)
            for acc in ("ethos-u55-128", "ethos-u85-256"):
                a = vela.verdict(tmp / "o.tosa", acc, timeout=20)
                b = vela.verdict(tmp / "a.tosa", acc, timeout=20)
                if (a.error or "").startswith("timeout") or (b.error or "").startswith("timeout"):
                    row.setdefault("vela_timeouts", []).append(acc)
                    continue
                row.setdefault("vela", []).append(acc)
                if a.on_npu != b.on_npu or a.compiled != b.compiled:
                    row["problems"].append(f"Vela {acc}: placement differs "
                                           f"({a.compiled}/{b.compiled}, {b.error})")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", required=True, help="directory of conformance tests")
    ap.add_argument("--vela", action="store_true", help="also compare Vela's placements")
    ap.add_argument("--no-converter", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tests")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args(argv)
    tests = sorted(p.parent for p in Path(args.tests).rglob("desc.json"))
    if args.limit:
        tests = tests[:args.limit]
    mc = None if args.no_converter else model_converter()
    if mc is None and not args.no_converter:
        print("model-converter not found (pip install ai-ml-sdk-model-converter==0.11.0): "
              "skipping that check", file=sys.stderr)
    worker = None
    if args.vela:
        from tosa_jax.hw_models.vela import VelaWorker
        worker = VelaWorker()
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for k, test in enumerate(tests, 1):
            try:
                row = check(test, mc, worker, Path(tmp))
            except Exception as e:  # a crash is a finding, not the end of the run
                row = {"test": test.name, "operator": test.parent.name.upper(),
                       "problems": [f"{type(e).__name__}: {e}"]}
            rows.append(row)
            for p in row["problems"]:
                print(f"FAIL {test.name}: {p}", flush=True)
            if k % 25 == 0 or k == len(tests):
                print(f"[{k}/{len(tests)}] {time.time() - t0:.0f} s, "
                      f"{sum(bool(r['problems']) for r in rows)} with problems", flush=True)
    if worker is not None:
        worker.close()
    by_op: dict[str, list[int]] = {}
    for r in rows:
        c = by_op.setdefault(r["operator"], [0, 0, 0, 0, 0])
        c[0] += 1
        c[1] += bool(r.get("reference_ran"))
        c[2] += bool(r.get("converter", [False, False])[0])
        c[3] += len(r.get("vela", []))
        c[4] += bool(r["problems"])
    print(f"\n{'operator':<24}{'tests':>6}{'refran':>7}{'mc-ok':>6}{'vela':>6}{'failed':>7}")
    for op, c in sorted(by_op.items()):
        print(f"{op:<24}{c[0]:>6}{c[1]:>7}{c[2]:>6}{c[3]:>6}{c[4]:>7}")
    tot = [sum(c[i] for c in by_op.values()) for i in range(5)]
    print(f"{'total':<24}{tot[0]:>6}{tot[1]:>7}{tot[2]:>6}{tot[3]:>6}{tot[4]:>7}")
    print("refran: reference model ran the original (outputs compared); mc-ok: model-converter "
          "converts the original (rewritten compared); vela: Vela compilations compared")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if tot[4] else 0


if __name__ == "__main__":
    sys.exit(main())
