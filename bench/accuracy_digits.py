"""Accuracy study on real data: a small CNN trained on scikit-learn's bundled digits set (8x8
grey images, 10 classes, no download), exported through the ExecuTorch Arm backend as
TOSA-1.0+FP and TOSA-1.0+INT (post-training quantization), evaluated on the held-out split.

One command runs it all (from the repository root)::

    /work/venv/bin/python bench/accuracy_digits.py [--work .cache/digits] [--json out.json]

Two processes, because torch/ExecuTorch and tosa_jax/the reference model live in different
virtualenvs:

1. ``--stage export``, run by ``$TOSA_JAX_ET_PYTHON`` (default /work/venv-et/bin/python; torch
   2.13, executorch 1.5.1, scikit-learn and tosa_jax: ``pip install -e '.[torch]'``): seeded
   75/25 stratified split, trains the CNN, reports PyTorch FP32 test accuracy, exports
   ``digits_fp32.tosa`` and ``digits_int8.tosa`` with ``tosa_jax.export_torch`` (symmetric
   int8 PTQ calibrated on 128 training images) and writes the test set (float32 and int8,
   quantized with the exported input scale/zero point), the labels, PyTorch's logits and
   ``meta.json`` into the work directory.
2. The rest, in the project env (this interpreter): tosa_jax FP and INT accuracy over the whole
   test split with ``tosa_jax.evaluate`` (vmapped batches), then the TOSA reference model's INT8
   output for every test sample (one ``tosa_reference_model`` call each) and the number of
   samples on which tosa_jax's int8 output is identical to it (must be all of them).

Prints a table with the wall time of every step and writes it as JSON. ``--skip-export`` reuses
the artefacts of an earlier run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WORK = REPO / ".cache" / "digits"
DEFAULT_ET_PYTHON = "/work/venv-et/bin/python"
SEED = 0
N_CALIB = 128
EPOCHS = 40


# ---- stage 1: torch / ExecuTorch (venv-et) ------------------------------------------------


def build_network():  # -> torch.nn.Module
    """The study's CNN (untrained)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    )


def export_inputs(xtr_t):  # -> (example, calibration samples)
    """The example input and the PTQ calibration batches the export uses."""
    import torch

    pick = torch.randperm(len(xtr_t), generator=torch.Generator().manual_seed(SEED + 1))
    return (xtr_t[:1],), [(xtr_t[i:i + 1],) for i in pick[:N_CALIB].tolist()]


def stage_export(work: Path) -> None:
    """Train, evaluate and export the CNN; write the artefacts stage 2 reads."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch import nn

    times: dict[str, float] = {}
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0 - 0.5) / 0.5  # 0..16 -> [-1, 1]
    y = digits.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=SEED, stratify=y)
    xtr_t = torch.from_numpy(xtr[:, None])
    xte_t = torch.from_numpy(xte[:, None])
    ytr_t = torch.from_numpy(ytr)

    torch.manual_seed(SEED)
    model = build_network()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(SEED)
    t0 = time.perf_counter()
    model.train()
    for _ in range(EPOCHS):
        perm = torch.randperm(len(xtr_t), generator=gen)
        for i in range(0, len(perm), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xtr_t[idx]), ytr_t[idx]).backward()
            opt.step()
    times["torch_train_s"] = time.perf_counter() - t0
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = model(xte_t).numpy().astype(np.float32)
    times["torch_eval_s"] = time.perf_counter() - t0
    torch_acc = float(np.mean(logits.argmax(1) == yte))
    print(f"PyTorch FP32 test accuracy {torch_acc:.4f} ({len(yte)} samples)", flush=True)

    from tosa_jax.frontends.pytorch import export_torch  # the one ExecuTorch pipeline

    example, calib = export_inputs(xtr_t)
    # the trained weights and the training split, for checks of other export paths
    torch.save(model.state_dict(), work / "digits_cnn.pt")
    np.save(work / "train_x_fp32.npy", xtr)
    meta: dict = {}
    for profile, stem in (("FP", "digits_fp32"), ("INT", "digits_int8")):
        t0 = time.perf_counter()
        exported = export_torch(model, example, quantize=profile == "INT", calibration=calib,
                                spec=f"TOSA-1.0+{profile}", progress=False)
        exported.save(work / f"{stem}.tosa")
        times[f"export_{profile.lower()}_s"] = time.perf_counter() - t0
        block = exported.graph.main
        (in_name,) = block.inputs
        in_shape, in_dtype = block.tensors[in_name].shape, block.tensors[in_name].dtype
        meta[profile] = {"input": in_name, "input_shape": list(in_shape), "input_dtype": in_dtype,
                         "outputs": list(block.outputs)}
        if profile == "INT":
            q = exported.input_qparams[0]
            assert q is not None, "the INT graph's input has no quantize op"
            meta[profile].update(scale=q.scale, zero_point=q.zero_point, qmin=q.qmin,
                                 qmax=q.qmax)
            # the quantization the graph's dropped quantize op would apply (round half even)
            xq = q.quantize(xte[:, None])
            np.save(work / "test_x_int8.npy", xq.reshape(len(xq), *in_shape[1:]))
        print(f"exported {stem}.tosa in {times[f'export_{profile.lower()}_s']:.1f} s", flush=True)
    fp_shape = meta["FP"]["input_shape"][1:]  # C=1, so NCHW and NHWC hold the same order
    np.save(work / "test_x_fp32.npy", xte[:, None].reshape(len(xte), *fp_shape))
    np.save(work / "test_y.npy", yte)
    np.save(work / "torch_logits.npy", logits)
    meta.update(torch_accuracy=torch_acc, times=times, train=len(ytr), test=len(yte),
                params=sum(p.numel() for p in model.parameters()), epochs=EPOCHS, seed=SEED)
    (work / "meta.json").write_text(json.dumps(meta, indent=1))


# ---- stage 2: tosa_jax and the reference model (project env) ------------------------------


def reference_int8(work: Path, meta: dict, xq: np.ndarray) -> tuple[np.ndarray, float]:
    """The reference model's int8 output for every sample (one CLI call each) and the seconds."""
    exe = Path(sys.executable).parent / "tosa_reference_model"
    inp, (out,) = meta["INT"]["input"], meta["INT"]["outputs"]
    outs = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for i, sample in enumerate(xq):
            np.save(d / "in.npy", sample[None])
            proc = subprocess.run(
                [str(exe), "--tosa_file", "digits_int8.tosa", "--flatbuffer_dir", str(work),
                 "--ifm_name", inp, "--ifm_file", str(d / "in.npy"), "--ofm_name", out,
                 "--ofm_file", "out.npy", "--output_dir", str(d)],
                capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"reference model failed on sample {i}:\n{proc.stdout[-2000:]}"
                                   f"\n{proc.stderr[-2000:]}")
            outs.append(np.load(d / "out.npy")[0])
    return np.stack(outs), time.perf_counter() - t0


def stage_evaluate(work: Path, batch_size: int) -> dict:
    """tosa_jax FP/INT accuracy and reference-model agreement; returns the results."""
    import tosa_jax

    meta = json.loads((work / "meta.json").read_text())
    y = np.load(work / "test_y.npy")
    xf = np.load(work / "test_x_fp32.npy")
    xq = np.load(work / "test_x_int8.npy")
    torch_logits = np.load(work / "torch_logits.npy")
    res: dict = {"samples": int(len(y)), "torch_accuracy": meta["torch_accuracy"],
                 "times": dict(meta["times"]), "params": meta["params"]}

    t0 = time.perf_counter()
    fp = tosa_jax.evaluate(tosa_jax.load(work / "digits_fp32.tosa"), xf, labels=y,
                           batch_size=batch_size, progress=False)
    res["times"]["tosa_jax_fp_s"] = time.perf_counter() - t0
    fp_out = fp.outputs[meta["FP"]["outputs"][0]].reshape(len(y), -1)
    res["tosa_jax_fp_accuracy"] = fp.metric
    res["fp_max_abs_vs_torch"] = float(np.max(np.abs(fp_out - torch_logits)))
    res["fp_argmax_agree_torch"] = int(np.sum(fp_out.argmax(1) == torch_logits.argmax(1)))

    t0 = time.perf_counter()
    q = tosa_jax.evaluate(tosa_jax.load(work / "digits_int8.tosa"), xq, labels=y,
                          batch_size=batch_size, progress=False)
    res["times"]["tosa_jax_int_s"] = time.perf_counter() - t0
    q_out = q.outputs[meta["INT"]["outputs"][0]].reshape(len(y), -1)
    res["tosa_jax_int_accuracy"] = q.metric
    res["int_argmax_agree_torch"] = int(np.sum(q_out.argmax(1) == torch_logits.argmax(1)))

    ref, secs = reference_int8(work, meta, xq)
    res["times"]["reference_int_s"] = secs
    ref = ref.reshape(len(y), -1)
    np.save(work / "reference_int8.npy", ref)  # tests/test_accuracy_digits.py compares with it
    same = np.all(ref == q_out, axis=1) & (ref.dtype == q_out.dtype)
    res["reference_int_accuracy"] = float(np.mean(ref.argmax(1) == y))
    res["int_identical_to_reference"] = int(np.sum(same))
    res["int_output_dtype"] = str(q_out.dtype)

    # INT8 against FP32 over the held-out set (tosa_jax.inspect.compare_models): top-1
    # agreement, output SQNR, and a per-layer table of the tensors both exports share.
    from tosa_jax import inspect as ti

    t0 = time.perf_counter()
    cmp = ti.compare_models(tosa_jax.load(work / "digits_int8.tosa"),
                            tosa_jax.load(work / "digits_fp32.tosa"), xf, samples_a=xq,
                            input_qparams=(meta["INT"]["scale"], meta["INT"]["zero_point"]),
                            batch_size=batch_size, progress=False)
    res["times"]["compare_models_s"] = time.perf_counter() - t0
    res["int_fp_agreement"] = cmp.agreement
    res["int_fp_output_sqnr_db"] = cmp.sqnr_db
    res["int_fp_output_method"] = cmp.output_method
    res["int_fp_per_layer"] = cmp.per_layer.to_dict()["rows"]
    print(cmp.per_layer.table())
    return res


def print_table(r: dict) -> None:
    """The results as a plain-text table."""
    t, n = r["times"], r["samples"]
    rows = [
        ("PyTorch FP32 (train)", "-", t["torch_train_s"]),
        ("PyTorch FP32 (test)", f"{r['torch_accuracy']:.4f}", t["torch_eval_s"]),
        ("ExecuTorch export FP", "-", t["export_fp_s"]),
        ("ExecuTorch export INT (PTQ)", "-", t["export_int_s"]),
        ("tosa_jax FP32", f"{r['tosa_jax_fp_accuracy']:.4f}", t["tosa_jax_fp_s"]),
        ("tosa_jax INT8", f"{r['tosa_jax_int_accuracy']:.4f}", t["tosa_jax_int_s"]),
        ("reference model INT8", f"{r['reference_int_accuracy']:.4f}", t["reference_int_s"]),
    ]
    if "compare_models_s" in t:
        rows.append(("compare_models INT8 vs FP32", f"{r['int_fp_agreement']:.4f}",
                     t["compare_models_s"]))
    print(f"\ndigits CNN ({r['params']} parameters), held-out split: {n} samples")
    print(f"{'step':30} {'accuracy':>9} {'wall s':>9}")
    for name, acc, secs in rows:
        print(f"{name:30} {acc:>9} {secs:9.2f}")
    print(f"tosa_jax INT8 == reference model INT8 ({r['int_output_dtype']}): "
          f"{r['int_identical_to_reference']}/{n} samples identical")
    print(f"tosa_jax FP32 vs PyTorch: max |logit diff| {r['fp_max_abs_vs_torch']:.3g}, "
          f"arg-max agrees on {r['fp_argmax_agree_torch']}/{n}; INT8 arg-max agrees with "
          f"PyTorch on {r['int_argmax_agree_torch']}/{n}")
    if "int_fp_agreement" in r:
        print(f"INT8 vs FP32 export (compare_models): top-1 agreement {r['int_fp_agreement']:.4f},"
              f" output SQNR {r['int_fp_output_sqnr_db']:.1f} dB ({r['int_fp_output_method']})")


def main() -> None:
    """Run both stages (stage 1 in the ExecuTorch env) and report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help=f"default {DEFAULT_WORK}")
    ap.add_argument("--stage", choices=["all", "export"], default="all")
    ap.add_argument("--skip-export", action="store_true", help="reuse the exported artefacts")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--json", type=Path, help="default WORK/results.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "export":
        stage_export(args.work)
        return
    if not args.skip_export:
        exe = os.environ.get("TOSA_JAX_ET_PYTHON", DEFAULT_ET_PYTHON)
        subprocess.run([exe, __file__, "--stage", "export", "--work", str(args.work)], check=True)
    res = stage_evaluate(args.work, args.batch_size)
    print_table(res)
    out = args.json or args.work / "results.json"
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
