"""ExecuTorch-exported TOSA-1.0+FP networks (tests/fixtures/*_fp32.*, made by
bench/export_models.py --profile FP): a CNN, a transformer encoder block and a GRU.

(a) tosa_jax against the reference model in precise (FP64) mode, the verifier's compliance
    reference, within ``T = B * 2**-23 * max|ref64|`` (``network_tolerance`` in
    tosa_jax.testing.reference: B sums the spec's per-operator error allowances over the graph).
(b) tosa_jax against PyTorch's own float32 output of the same module on the same input (saved by
    the exporter), within ``2 T``: PyTorch evaluates the same real-valued function (its own
    kernels: fused attention, native GRU, erf GELU, different summation orders), so if both are
    within T of the exact result they are within 2 T of each other.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.reference import error_budget, network_tolerance, run_reference_fp

NETWORKS = ["cnn_fp32", "encoder_fp32", "gru_fp32"]


def _io(name: str, numpy_floats: bool = False) -> tuple[tosa_jax.Model, str, str]:
    model = tosa_jax.load(FIXTURES / f"{name}.tosa", numpy_floats=numpy_floats)
    ((inp,), (out,)) = model.inputs, model.outputs
    assert inp.dtype == out.dtype == "FP32"
    return model, inp.name, out.name


def _report(name: str, what: str, err: float, tol: float) -> None:
    print(f"{name}: max |{what}| = {err:.3g} (tolerance {tol:.3g}, {err / tol:.2%} of it)")


@pytest.mark.parametrize("engine", ["xla", "numpy"])
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name", NETWORKS)
def test_fp_network_vs_reference_fp64(name: str, x64: bool, engine: str) -> None:
    """The exporter's input and two more seeded inputs; x64 must not change the FP32 graph.
    ``numpy``: the graph's numpy program (``load(..., numpy_floats=True)``, tosa_jax.npexec)."""
    path = FIXTURES / f"{name}.tosa"
    with jax.enable_x64(x64):
        model, inp, out = _io(name, numpy_floats=engine == "numpy")
        shape = model.inputs[0].shape
        for seed in range(3):
            x = (np.load(FIXTURES / f"{name}.input.npy") if seed == 0 else
                 np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
            ref64 = run_reference_fp(path, {inp: x}, [out], precise=True)[out]
            assert ref64.dtype == np.float64
            got = model.run({inp: x})[out]
            assert ("numpy" in str(model.compile_source)) == (engine == "numpy")
            assert got.dtype == np.float32 and got.shape == ref64.shape
            tol = network_tolerance(model.graph, ref64)
            err = float(np.max(np.abs(got.astype(np.float64) - ref64)))
            _report(f"{name} seed {seed} x64={x64}", "tosa_jax - refmodel fp64", err, tol)
            assert np.all(np.isfinite(got))
            assert err <= tol, f"{name} seed {seed}: {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("name", NETWORKS)
def test_fp_network_reference_fp32_within_tolerance(name: str) -> None:
    """Calibration: the reference model's own FP32 run (compliant by definition) meets T."""
    path = FIXTURES / f"{name}.tosa"
    model, inp, out = _io(name)
    x = np.load(FIXTURES / f"{name}.input.npy")
    ref64 = run_reference_fp(path, {inp: x}, [out], precise=True)[out]
    ref32 = run_reference_fp(path, {inp: x}, [out], precise=False)[out]
    assert ref32.dtype == np.float32
    tol = network_tolerance(model.graph, ref64)
    err = float(np.max(np.abs(ref32.astype(np.float64) - ref64)))
    _report(name, "refmodel fp32 - refmodel fp64", err, tol)
    assert err <= tol


@pytest.mark.parametrize("name", NETWORKS)
def test_fp_network_vs_pytorch(name: str) -> None:
    path = FIXTURES / f"{name}.tosa"
    model, inp, out = _io(name)
    x = np.load(FIXTURES / f"{name}.input.npy")
    want = np.load(FIXTURES / f"{name}.torch.npy")
    got = model.run({inp: x})[out]
    assert got.shape == want.shape and want.dtype == np.float32
    ref64 = run_reference_fp(path, {inp: x}, [out], precise=True)[out]
    tol = 2 * network_tolerance(model.graph, ref64)
    err = float(np.max(np.abs(got - want)))
    _report(name, "tosa_jax - torch", err, tol)
    assert err <= tol, f"{name}: {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("name", NETWORKS)
def test_fp_tolerance_is_tight(name: str) -> None:
    """No blanket pass: T stays under 1e-4 of the output scale (B under ~840 ulp), well below the
    1e-3-and-up errors that a mis-lowered operator causes (a wrong constant, a tanh-approximate
    GELU, a missing epsilon)."""
    model, inp, out = _io(name)
    x = np.load(FIXTURES / f"{name}.input.npy")
    ref64 = run_reference_fp(FIXTURES / f"{name}.tosa", {inp: x}, [out], precise=True)[out]
    budget, split = error_budget(model.graph)
    print(f"{name}: B = {budget:g} ulp, by operator {split}")
    assert 0 < network_tolerance(model.graph, ref64) < 1e-4 * float(np.max(np.abs(ref64)))
