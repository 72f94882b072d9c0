"""The Mali support rules (hw_models/support.py) against Arm's ML SDK model converter.

For each conformance test graph (a directory with desc.json): does ``model-converter`` (TOSA ->
VGF, the Mali / Vulkan ML path; PyPI ``ai-ml-sdk-model-converter``) lower it, and does our
Mali rule accept every operator of it? Tabulated per operator x element-type signature of the
tested operator, with each disagreement listed (the converter's first error line beside our
reason).

    python bench/mali_converter.py --tests .cache/conformance/<slice> [--json F]
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

import tosa_jax
from tosa_jax.hw_models import get_device
from tosa_jax.hw_models.support import unsupported_reasons


def converter() -> str:
    beside = Path(sys.executable).parent / "model-converter"
    exe = str(beside) if beside.exists() else shutil.which("model-converter")
    if exe is None:
        sys.exit("model-converter not found: pip install ai-ml-sdk-model-converter==0.11.0")
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", required=True)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    exe = converter()
    mali = get_device("mali-g710")
    tests = sorted(p.parent for p in Path(args.tests).rglob("desc.json"))
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for k, test in enumerate(tests, 1):
            desc = json.loads((test / "desc.json").read_text())
            path = test / desc["tosa_file"]
            g = tosa_jax.read(path)
            ours: list[str] = []
            for region in g.regions:
                for b in region.blocks:
                    for op in b.operators:
                        if op.op not in ("CONST", "CONST_SHAPE"):
                            ours += [f"{op.op}: {r}" for r in unsupported_reasons(mali, g, b, op)]
            proc = subprocess.run([exe, "-i", str(path), "-o", f"{tmp}/g.vgf"],
                                  capture_output=True, text=True, timeout=300)
            err = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "rror" in ln]
            op = test.parent.name.upper()
            sig = "/".join(sorted({t.dtype for t in g.main.tensors.values()}))
            rows.append({"test": test.name, "operator": op, "types": sig,
                         "converter": proc.returncode == 0, "ours": not ours,
                         "our_reason": ours[:1], "converter_error": err[:1]})
            if k % 50 == 0 or k == len(tests):
                print(f"[{k}/{len(tests)}] {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    table: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        c = table.setdefault((r["operator"], r["types"]), [0, 0, 0, 0])
        c[0] += 1
        c[1] += r["converter"]
        c[2] += r["ours"]
        c[3] += r["converter"] == r["ours"]
    print(f"{'operator':<22}{'types':<34}{'tests':>6}{'conv':>6}{'ours':>6}{'agree':>6}")
    for (op, sig), c in sorted(table.items()):
        flag = "" if c[3] == c[0] else "  <-- disagree"
        print(f"{op:<22}{sig[:33]:<34}{c[0]:>6}{c[1]:>6}{c[2]:>6}{c[3]:>6}{flag}")
    agree = sum(r["converter"] == r["ours"] for r in rows)
    print(f"\n{agree}/{len(rows)} graphs: our Mali rule and model-converter agree; "
          f"converter lowers {sum(r['converter'] for r in rows)}, our rule accepts "
          f"{sum(r['ours'] for r in rows)}")
    for r in rows:
        if r["converter"] != r["ours"]:
            print(f"  {r['test']}: converter {'yes' if r['converter'] else 'no'} "
                  f"{r['converter_error']}, ours {'yes' if r['ours'] else 'no'} {r['our_reason']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
