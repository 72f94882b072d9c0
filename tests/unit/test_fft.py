"""FFT2D and RFFT2D (EXT-FFT) against the reference model in precise (FP64) mode: forward and
inverse, H or W of 1, RFFT2D's half spectrum, results in FP32 with jax_enable_x64 off and on,
and the power-of-two ERROR_IF."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaValidationError
from tosa_jax.ir import Operator, Tensor
from tosa_jax.testing.reference import run_reference_fp

RNG = np.random.default_rng(20261121)


def fft_graph(op: str, shape: tuple[int, int, int], version=(1, 0, 0, False), **attrs) -> bytes:
    n, h, w = shape
    b = GraphBuilder(version)
    ins = [b.input("re", shape, "FP32")] + ([b.input("im", shape, "FP32")] if op == "FFT2D" else [])
    out_shape = (n, h, w) if op == "FFT2D" else (n, h, w // 2 + 1)
    for name in ("out_re", "out_im"):
        b.block.tensors[name] = Tensor(name, out_shape, "FP32")
    b.block.operators.append(Operator(op, ins, ["out_re", "out_im"], attrs))
    return tosa_jax.write(b.build(["out_re", "out_im"]))


def run_both(data: bytes, inputs: dict) -> list[dict]:
    results = []
    before = jax.config.jax_enable_x64
    try:
        for x64 in (False, True):
            jax.config.update("jax_enable_x64", x64)
            results.append(tosa_jax.load(data).run(inputs))
    finally:
        jax.config.update("jax_enable_x64", before)
    return results


def check(tmp_path, data: bytes, inputs: dict) -> None:
    path = tmp_path / "g.tosa"
    path.write_bytes(data)
    ref = run_reference_fp(path, inputs, ["out_re", "out_im"], precise=True)
    # each output is a dot product of length H*W of the inputs with unit-magnitude twiddles:
    # allow a few ulps of fp32 per term of sum |x|.
    n, h, w = next(iter(inputs.values())).shape
    mag = sum(np.abs(v.astype(np.float64)).sum(axis=(1, 2)) for v in inputs.values())
    tol = (mag * 8 * np.log2(2 * h * w) * np.finfo(np.float32).eps)[:, None, None]
    for got in run_both(data, inputs):
        for name in ("out_re", "out_im"):
            assert got[name].dtype == np.float32
            assert got[name].shape == ref[name].shape
            assert np.all(np.abs(got[name] - ref[name]) <= tol), name


@pytest.mark.parametrize("shape", [(2, 8, 16), (1, 1, 32), (1, 16, 1), (1, 1, 1), (3, 32, 4),
                                   (1, 2, 512)])
@pytest.mark.parametrize("inverse", [False, True])
def test_fft2d(tmp_path, shape, inverse):
    inputs = {"re": RNG.uniform(-10, 10, shape).astype(np.float32),
              "im": RNG.uniform(-10, 10, shape).astype(np.float32)}
    check(tmp_path, fft_graph("FFT2D", shape, inverse=inverse, local_bound=False), inputs)


@pytest.mark.parametrize("shape", [(2, 8, 16), (1, 1, 32), (1, 16, 1), (1, 1, 2), (1, 4, 2),
                                   (1, 512, 4)])
def test_rfft2d(tmp_path, shape):
    inputs = {"re": RNG.uniform(-100, 100, shape).astype(np.float32)}
    check(tmp_path, fft_graph("RFFT2D", shape, local_bound=True), inputs)


def test_rfft2d_real_columns_exactly_zero(tmp_path):
    # DC and Nyquist bins of a real input have no imaginary part: exactly 0, never -0 noise.
    x = RNG.uniform(-1, 1, (1, 4, 8)).astype(np.float32)
    got = tosa_jax.load(fft_graph("RFFT2D", x.shape)).run({"re": x})["out_im"]
    assert np.all(got[:, ::2, ::4] == 0)


@pytest.mark.parametrize("op,shape", [("FFT2D", (1, 6, 8)), ("RFFT2D", (1, 8, 12))])
def test_not_power_of_two(op, shape):
    data = fft_graph(op, shape, inverse=False) if op == "FFT2D" else fft_graph(op, shape)
    inputs = {"re": np.zeros(shape, np.float32)}
    if op == "FFT2D":
        inputs["im"] = np.zeros(shape, np.float32)
    with pytest.raises(TosaValidationError, match="power_of_two"):
        tosa_jax.load(data).run(inputs)


@pytest.mark.parametrize("op", ["FFT2D", "RFFT2D"])
def test_fft_in_a_tosa_1_1_graph(tmp_path, op):
    """ExecuTorch 1.5.1 emits FFT graphs stamped 1.1.0-draft: the same operators, 1.1's tables."""
    shape = (2, 8, 16)
    inputs = {"re": RNG.uniform(-10, 10, shape).astype(np.float32)}
    attrs = {"inverse": False, "local_bound": False} if op == "FFT2D" else {"local_bound": False}
    if op == "FFT2D":
        inputs["im"] = RNG.uniform(-10, 10, shape).astype(np.float32)
    check(tmp_path, fft_graph(op, shape, version=(1, 1, 0, True), **attrs), inputs)
