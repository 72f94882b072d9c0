"""The oracles of tests/ and bench/: the official TOSA reference model (tosa-tools' CLI, the
test extra), run on a graph; an exact comparison against it; and, for floating-point networks,
the reference model in precise (FP64) mode with a whole-graph tolerance derived from the TOSA
1.0.2 per-operator accuracy rules.

The tolerance (``network_tolerance``)
--------------------------------------
The spec defines accuracy per operator (chapter "Floating-Point Precision Requirements"): a
graph is compliant when it gives the result of *some* sequence of per-operator compliant
implementations ("Operator sequence precision requirement"). The official verifier judges single
operators against the reference model run in FP64. For a whole graph we bound the output error to
first order by summing every operator's permitted error, each in units of ``ulp = 2**-23`` relative
to the output's magnitude ``S = max |ref_fp64|``:

* dot products (CONV2D, DEPTHWISE_CONV2D, MATMUL, and REDUCE_SUM, which the spec also treats as a
  dot product): ABS_BOUND ``2 * ksb`` in units of ``2**-24 * sum|a*b|``, i.e. ``ksb`` ulp, with
  ``ksb`` the kernel size (KH*KW*IC, KH*KW, C, the reduced axis length);
* ADD, SUB, MUL: correctly rounded, 0.5 ulp; RECIPROCAL 1 ulp; RSQRT 2 ulp; ERF 5 ulp;
* EXP ``3 + 2|x|``, SIGMOID ``2 (1 + |x|)``, TANH ``4 (3 + 2|x|)`` ulp, taken at ``|x| = X_MAX
  = 4`` (inputs of these networks are O(1): standard-normal inputs, LayerNorm-ed activations,
  softmax logits shifted by their maximum);
* data movement, comparisons, selects, CLAMP, REDUCE_MAX/ANY, constants: exact (0).

``T = B * 2**-23 * S`` with ``B`` the sum over *all* operators of the graph (an over-count of any
single path, which leaves room for the modest error amplification of LayerNorm/softmax). This is a
first-order, condition-number-one bound, not a proof; the tests show that the reference model's
own FP32 evaluation (compliant by definition) sits far inside it, and any real lowering bug (a
wrong constant, a different GELU, a missing epsilon) is orders of magnitude above it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import tosa_jax

ULP = 2.0**-23
X_MAX = 4.0
# Per-operator permitted error in ulp of the result (TOSA 1.0.2 precision requirements).
ELEMENTWISE_ULP = {
    "ADD": 0.5, "SUB": 0.5, "MUL": 0.5, "RECIPROCAL": 1.0, "RSQRT": 2.0, "ERF": 5.0,
    "EXP": 3.0 + 2.0 * X_MAX, "SIGMOID": 2.0 * (1.0 + X_MAX), "TANH": 4.0 * (3.0 + 2.0 * X_MAX),
}
EXACT_OPS = {
    "CONST", "CONST_SHAPE", "RESHAPE", "TRANSPOSE", "SLICE", "CONCAT", "PAD", "TILE", "IDENTITY",
    "CLAMP", "SELECT", "EQUAL", "GREATER", "GREATER_EQUAL", "LOGICAL_NOT", "LOGICAL_AND",
    "LOGICAL_OR", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL", "MAXIMUM", "MINIMUM",
    "ABS", "NEGATE", "CAST",
}


def dot_product_length(block: tosa_jax.ir.Block, op: tosa_jax.ir.Operator) -> int | None:
    """The spec's kernel size ``ksb`` of an accumulating operator, None for other operators."""
    shapes = [block.tensors[n].shape for n in op.inputs]
    if op.op == "CONV2D":                  # weight [OC, KH, KW, IC]
        return shapes[1][1] * shapes[1][2] * shapes[1][3]
    if op.op == "DEPTHWISE_CONV2D":        # weight [KH, KW, C, M]
        return shapes[1][0] * shapes[1][1]
    if op.op == "MATMUL":                  # A [N, H, C]
        return shapes[0][2]
    if op.op == "REDUCE_SUM":
        return shapes[0][op.attrs["axis"]]
    return None


def error_budget(graph: tosa_jax.Graph) -> tuple[float, dict[str, float]]:
    """``B``: the graph's summed per-operator error allowance in ulp, and its split by operator."""
    block = graph.main
    split: dict[str, float] = {}
    for op in block.operators:
        ks = dot_product_length(block, op)
        if ks is not None:
            allowance = float(ks)
        elif op.op in ELEMENTWISE_ULP:
            allowance = ELEMENTWISE_ULP[op.op]
        elif op.op in EXACT_OPS:
            allowance = 0.0
        else:
            raise NotImplementedError(f"no accuracy rule recorded for {op.op}: add it here")
        split[op.op] = split.get(op.op, 0.0) + allowance
    return sum(split.values()), split


def network_tolerance(graph: tosa_jax.Graph, ref64: np.ndarray) -> float:
    """``T = B * 2**-23 * max|ref64|``: the absolute error allowed against the FP64 reference."""
    budget, _ = error_budget(graph)
    return budget * ULP * float(np.max(np.abs(ref64)))


def reference_model_path() -> str | None:
    """The tosa_reference_model of the running environment, if tosa-tools is installed."""
    beside = Path(sys.executable).parent / "tosa_reference_model"
    return str(beside) if beside.exists() else shutil.which("tosa_reference_model")


def _reference_model() -> str:
    """The reference model's path; without it a test is skipped (under pytest), a script
    stops with a message saying what to install."""
    exe = reference_model_path()
    if exe is None:
        why = "tosa-tools (tosa_reference_model) is not installed: pip install -e '.[test]'"
        if "pytest" in sys.modules:
            import pytest

            pytest.skip(why)
        raise FileNotFoundError(why)
    return exe


def run_reference(tosa: bytes | str | os.PathLike, inputs: dict[str, np.ndarray],
                  outputs: list[str], precise: bool | None = None,
                  scales: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run a graph on the reference model; returns its outputs by name (INT48 as int64).

    ``precise``: for FP graphs, True runs FP64 (``--precise_mode=1``, the verifier's compliance
    reference), False FP32 as the graph says; None leaves the option out.
    ``scales``: the scales of block-scaled inputs (TOSA 1.1), by input name; the reference model
    reads them from ``<input file stem>_scale.npy`` and writes a block-scaled output's scales
    to ``<output file stem>_scale.npy``, returned as ``<output name>_scale``."""
    exe = _reference_model()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = d / "graph.tosa"
        if isinstance(tosa, (bytes, bytearray)):
            path.write_bytes(tosa)
        else:
            shutil.copy(tosa, path)
        names, files = [], []
        for i, (name, arr) in enumerate(inputs.items()):
            np.save(d / f"in{i}.npy", arr)
            if scales and name in scales:
                np.save(d / f"in{i}_scale.npy", scales[name])
            names.append(name)
            files.append(str(d / f"in{i}.npy"))
        ofiles = [f"out{i}.npy" for i in range(len(outputs))]
        cmd = [exe, "--tosa_file", path.name, "--flatbuffer_dir", str(d),
               "--output_dir", str(d), "--ofm_name", ",".join(outputs),
               "--ofm_file", ",".join(ofiles)]
        if names:
            cmd += ["--ifm_name", ",".join(names), "--ifm_file", ",".join(files)]
        if precise is not None:
            cmd.append(f"--precise_mode={int(precise)}")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"reference model failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        result = {n: np.load(d / f) for n, f in zip(outputs, ofiles)}
        for n, f in zip(outputs, ofiles):
            if (d / f.replace(".npy", "_scale.npy")).exists():
                result[n + "_scale"] = np.load(d / f.replace(".npy", "_scale.npy"))
        return result


def run_reference_fp(tosa: str | os.PathLike, inputs: dict[str, np.ndarray],
                     outputs: list[str], precise: bool) -> dict[str, np.ndarray]:
    """The reference model on an FP graph: FP32 as the graph says, or FP64 (``precise``).
    Returns float32 or float64 arrays by output name."""
    return run_reference(tosa, inputs, outputs, precise=precise)


def check_exact(reference: Any, b: Any, outputs: list[str] | None = None,
                inputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run ``b`` (a GraphBuilder, built with ``outputs``, or a Graph) on ``reference`` (the
    reference model: ``run_reference``) and on tosa_jax (x64 off and on); demand identical
    results and dtypes (NaN equal to NaN). Returns the reference outputs."""
    import jax

    graph = b if isinstance(b, tosa_jax.Graph) else b.build(outputs)
    outputs = list(graph.main.outputs)
    data = tosa_jax.write(graph)
    ref = reference(data, inputs or {}, outputs)
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run(inputs or {})
        for name in outputs:
            assert got[name].dtype == ref[name].dtype, (name, x64)
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} x64={x64}")
    return ref


def check_exact_engines(reference: Any, b: Any, outputs: list[str] | None = None,
                        inputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """``check_exact`` on each engine a call of an integer graph can take: its numpy program
    (a first call, tosa_jax.npexec), XLA's quick tier (a first call without numpy programs,
    ``TOSA_JAX_NPEXEC=0`` for that moment) and the optimized executable (``Model.compile``).
    Returns the reference outputs."""
    graph = b if isinstance(b, tosa_jax.Graph) else b.build(outputs)
    inputs = inputs or {}
    check_exact(reference, graph, None, inputs)
    before = os.environ.get("TOSA_JAX_NPEXEC")
    os.environ["TOSA_JAX_NPEXEC"] = "0"
    try:
        want = check_exact(reference, graph, None, inputs)
        model = tosa_jax.load(graph, cache=False)
        model.compile(*(inputs[s.name] for s in model.inputs))
        got = model.run(inputs)
    finally:
        if before is None:
            del os.environ["TOSA_JAX_NPEXEC"]
        else:
            os.environ["TOSA_JAX_NPEXEC"] = before
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{name} (optimized)")
    return want
