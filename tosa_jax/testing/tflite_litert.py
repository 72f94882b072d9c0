"""tosa_jax on TFLite models against the TFLite interpreter itself (LiteRT, reference kernels).

    python bench/tflite_litert.py [--samples 200] [--models cnn_int8 ...] [--markdown]

For each model in tests/fixtures/tflite (made by bench/make_tflite_models.py): a seeded
dataset of N(0, 1) samples (int8 models: quantized with the model's input scale and zero point),
LiteRT 2.3's output with ``OpResolverType.BUILTIN_REF`` (the reference kernels), and tosa_jax's
output of the same file (``tosa-converter-for-tflite`` -> ``tosa-opt`` -> tosa_jax). Printed per
model: samples whose output is bit-identical, elements that differ, the largest difference.

Two diagnoses say where a difference comes from:

* int8: the converted graph on the TOSA reference model (first 3 samples) must equal tosa_jax
  bit for bit, so any difference to LiteRT is the legalization's, not the runtime's; and the
  graph is run again with the RESCALEs after fully-connected layers (1x1 CONV2D on a 1x1 input,
  what TFLite's FULLY_CONNECTED legalizes to) switched from DOUBLE_ROUND to SINGLE_ROUND:
  LiteRT's reference FULLY_CONNECTED rounds once, its CONV_2D twice (column "FC single").
* float: GELU is legalized as the tanh approximation, while Keras/LiteRT's GELU is the erf
  form: ``op_gelu_fp32`` is compared with both formulas in numpy.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from tosa_jax.testing import FIXTURES

MODELS_DIR = FIXTURES / "tflite"
SEED = 1234


def litert(data: bytes):  # -> ai_edge_litert Interpreter
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=data,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


def dataset(it, n: int) -> np.ndarray:
    """Seeded N(0, 1) samples in the model's input shape, quantized for an int8 input."""
    ind = it.get_input_details()[0]
    xs = np.random.default_rng(SEED).standard_normal((n, *ind["shape"])).astype(np.float32)
    if ind["dtype"] == np.int8:
        scale, zp = ind["quantization"]
        xs = np.clip(np.round(xs / scale) + zp, -128, 127).astype(np.int8)
    return xs


def run_litert(it, xs: np.ndarray) -> np.ndarray:
    ind, outd = it.get_input_details()[0], it.get_output_details()[0]
    out = []
    for x in xs:
        it.set_tensor(ind["index"], x)
        it.invoke()
        out.append(it.get_tensor(outd["index"]).copy())
    return np.stack(out)


def run_tosa_jax(graph, xs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    import tosa_jax

    model = tosa_jax.load(graph)
    res = tosa_jax.evaluate(model, xs, metric=None, progress=False)
    return np.asarray(res.outputs[model.outputs[0].name]).reshape(shape)


def fc_single_round(graph) -> int:
    """Switch the RESCALEs right after fully-connected CONV2Ds to SINGLE_ROUND; how many."""
    block = graph.main
    fc_outputs = set()
    for op in block.operators:
        if op.op == "CONV2D":
            x, w = block.tensors[op.inputs[0]], block.tensors[op.inputs[1]]
            if tuple(x.shape[1:3]) == (1, 1) and tuple(w.shape[1:3]) == (1, 1):
                fc_outputs.add(op.outputs[0])
    n = 0
    for op in block.operators:
        if (op.op == "RESCALE" and op.inputs[0] in fc_outputs
                and op.attrs.get("rounding_mode") == "DOUBLE_ROUND"):
            op.attrs["rounding_mode"] = "SINGLE_ROUND"
            n += 1
    return n


def reference_agrees(tosa: bytes, graph, xs: np.ndarray, got: np.ndarray) -> bool:
    """The TOSA reference model on the converted graph equals tosa_jax (first samples)."""
    import tosa_reference_model as ref

    name = graph.main.inputs[0]
    for x, y in zip(xs, got):
        outs, status = ref.run(tosa, [x.reshape(graph.main.tensors[name].shape)])
        if (status != ref.GraphStatus.TOSA_VALID
                or not np.array_equal(np.asarray(outs[0]).reshape(y.shape), y)):
            return False
    return True


def gelu_check(xs: np.ndarray, lite: np.ndarray, ours: np.ndarray) -> str:
    x = xs.astype(np.float64)
    erf = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return (f"LiteRT vs erf GELU {np.abs(lite - erf).max():.2g}, vs tanh GELU "
            f"{np.abs(lite - tanh).max():.2g}; tosa_jax vs tanh GELU "
            f"{np.abs(ours - tanh).max():.2g}, vs erf {np.abs(ours - erf).max():.2g}")


def compare(path: Path, n: int) -> dict:
    import tosa_jax

    data = path.read_bytes()
    it = litert(data)
    xs = dataset(it, n)
    t0 = time.perf_counter()
    tosa = tosa_jax.convert(data, "tosa", progress=False)
    convert_s = time.perf_counter() - t0
    want = run_litert(it, xs)
    graph = tosa_jax.read(tosa)
    got = run_tosa_jax(graph, xs, want.shape)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    row = {"model": path.stem, "dtype": str(want.dtype), "samples": n,
           "exact_samples": int(np.sum(np.all(diff.reshape(n, -1) == 0, axis=1))),
           "differing": int(np.sum(diff > 0)), "elements": int(diff.size),
           "max_abs_diff": float(diff.max()), "convert_s": convert_s,
           "operators": dict(graph.operator_counts())}
    if want.dtype == np.int8:
        row["reference_model_equal"] = reference_agrees(tosa, graph, xs[:3], got[:3])
        row["fc_rescales"] = fc_single_round(graph)
        if row["fc_rescales"]:
            fixed = run_tosa_jax(graph, xs, want.shape)
            row["fc_single_round_exact"] = int(np.sum(np.all(
                (fixed == want).reshape(n, -1), axis=1)))
    if path.stem == "op_gelu_fp32":
        row["note"] = gelu_check(xs, want, got)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--models", nargs="+", help="stems in tests/fixtures/tflite (default: all)")
    args = ap.parse_args()
    paths = sorted(MODELS_DIR.glob("*.tflite"))
    if args.models:
        paths = [MODELS_DIR / f"{m}.tflite" for m in args.models]
    print(f"# {len(paths)} models, {args.samples} samples each; LiteRT BUILTIN_REF kernels; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    print("| model | type | bit-exact samples | differing elements | max abs diff "
          "| = TOSA ref model | FC single-round exact |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        r = compare(path, args.samples)
        ref = {True: "yes", False: "NO"}.get(r.get("reference_model_equal"), "-")
        fc = (f"{r['fc_single_round_exact']}/{r['samples']} ({r['fc_rescales']} RESCALEs)"
              if "fc_single_round_exact" in r else "-")
        print(f"| {r['model']} | {r['dtype']} | {r['exact_samples']}/{r['samples']} | "
              f"{r['differing']}/{r['elements']} | {r['max_abs_diff']:.3g} | {ref} | {fc} |",
              flush=True)
        if "note" in r:
            print(f"note {r['model']}: {r['note']}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
