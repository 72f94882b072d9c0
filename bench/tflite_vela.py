"""Where would a TFLite model run on an Ethos-U? tosa_jax's placement (``hw_models.partition``
of the model legalized to TOSA) against Vela 5.2 compiling the TFLite file itself, and Vela
compiling the legalized TOSA file.

    python bench/tflite_vela.py [--target ethos-u55-128] [--models cnn_int8 ...]

Per model: Vela's NPU/CPU operator counts for the .tflite and for the converted .tosa (its
summary lines), our NPU/CPU operator counts (CONST/CONST_SHAPE excluded) and why each of our
CPU operators left the NPU (the support rule that refused it), grouped.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "tests" / "fixtures" / "tflite"


def vela_counts(path: Path, target: str, out: Path) -> tuple[int, int, list[str]]:
    """Vela's (NPU operators, CPU operators, operator types it put on the CPU)."""
    exe = Path(sys.executable).parent / "vela"
    proc = subprocess.run([str(exe), "--accelerator-config", target, "--output-dir", str(out),
                           str(path)], capture_output=True, text=True, timeout=900)
    text = proc.stdout + proc.stderr
    npu = re.search(r"NPU operators = (\d+)", text)
    cpu = re.search(r"CPU operators = (\d+)", text)
    if not (npu and cpu):
        raise RuntimeError(f"vela failed on {path}:\n{text[-2000:]}")
    cpu_ops = re.findall(r"Warning \(supported operators\) operator: (\w+)", text)
    return int(npu.group(1)), int(cpu.group(1)), cpu_ops


def ours(path: Path, target: str) -> tuple[int, int, collections.Counter]:
    from tosa_jax import hw_models
    from tosa_jax.frontends import read_source

    graph = read_source(path)
    pg = hw_models.partition(graph, target)
    npu = sum(1 for d in pg.placement.values() if d == target)
    cpu = len(pg.placement) - npu
    why = collections.Counter()
    for i, reasons in pg.reasons.items():
        if pg.placement[i] != target:
            why[f"{graph.main.operators[i].op}: {'; '.join(reasons)}"] += 1
    return npu, cpu, why


def main() -> None:
    import tosa_jax

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--models", nargs="+",
                    default=["cnn_int8", "mobilenet_int8", "lstm_int8", "gru_int8",
                             "transformer_int8"])
    args = ap.parse_args()
    print("| model | Vela on .tflite NPU/CPU | Vela on converted .tosa NPU/CPU "
          "| tosa_jax placement NPU/CPU | our CPU operators, why |")
    print("|---|---|---|---|---|")
    for name in args.models:
        path = MODELS_DIR / f"{name}.tflite"
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            vt = vela_counts(path, args.target, d / "tflite")
            tosa = d / f"{name}.tosa"
            tosa.write_bytes(tosa_jax.convert(path, "tosa", progress=False))
            try:
                vo = vela_counts(tosa, args.target, d / "tosa")
                vela_tosa = f"{vo[0]}/{vo[1]}"
            except RuntimeError as e:  # Vela's TOSA reader validates the whole graph first
                vela_tosa = "refused: " + str(e).strip().splitlines()[-1][:80]
        n, c, why = ours(path, args.target)
        vt_cpu = f" ({', '.join(sorted(set(vt[2])))})" if vt[2] else ""
        reasons = "; ".join(f"{k} (x{v})" for k, v in why.most_common()) or "-"
        print(f"| {name} | {vt[0]}/{vt[1]}{vt_cpu} | {vela_tosa} | {n}/{c} | {reasons} |",
              flush=True)


if __name__ == "__main__":
    main()
