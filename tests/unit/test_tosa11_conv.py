"""TOSA 1.1 CONV2D types as tosa-tools 2026.8 defines them: mixed-precision float operands,
acc_type per out_t, block-scaled weights and inputs.

Oracle: the reference model (tosa-tools 2026.8.0) on graphs written by tosa_jax and stamped
1.1.0-draft, for the values and for which type combinations are valid. The data are small
multiples of powers of two, so every product and partial sum is exact in the accumulator type
and any summation order gives the reference model's bits.
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import HOST_DTYPES, GraphBuilder
from tosa_jax.testing.reference import run_reference

V11 = (1, 1, 0, True)
V10 = (1, 0, 0, False)
NP = {"FP16": np.float16, "BF16": ml_dtypes.bfloat16, "FP32": np.float32,
      "FP8E4M3": ml_dtypes.float8_e4m3fn, "FP8E5M2": ml_dtypes.float8_e5m2}


def _conv_graph(version: tuple, x: np.ndarray, in_t: str, w: np.ndarray, w_t: str, out_t: str,
                acc: str, w_scales: np.ndarray | None = None) -> tuple[bytes, str]:
    """CONV2D of input ``x`` (a graph input) and constant weight ``w`` (block-scaled with
    ``w_scales``), 3x3 kernel, pad 1, stride 1, dilation 1, bias 0.5 per channel."""
    g = GraphBuilder(version)
    xi = g.input("x", x.shape, in_t)
    wc = g.const(w, w_t)
    if w_scales is not None:
        t = g.block.tensors[wc]
        t.scale_dtype, t.block_size, t.scale_data = "FP8UE8M0", 32, w_scales
    oc = w.shape[0]
    b = g.const(np.full(oc, 0.5, NP[out_t]), out_t)
    z1 = g.const(np.zeros(1, NP[in_t]), in_t)
    z2 = (g.const(np.zeros(1, np.float32), "FP32") if w_scales is not None
          else g.const(np.zeros(1, NP[w_t]), w_t))
    n, h, wd, _ = x.shape
    o = g.op("CONV2D", [xi, wc, b, z1, z2], (n, h, wd, oc), out_t, pad=(1, 1, 1, 1),
             stride=(1, 1), dilation=(1, 1), acc_type=acc)
    return tosa_jax.write(g.build([o])), o


def _small(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values in {-1, -0.5, 0, 0.5, 1}: exact in every float type here."""
    return (rng.integers(-2, 3, shape) * 0.5).astype(NP[dtype])


def _ref_in(x: np.ndarray) -> np.ndarray:
    """The reference model reads an FP8E5M2 input from uint8 bits (as the suite stores it)."""
    return x.view(np.uint8) if x.dtype == ml_dtypes.float8_e5m2 else x


def _same_bits(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.dtype.itemsize == ref.dtype.itemsize
    view = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    np.testing.assert_array_equal(np.asarray(got).view(view), np.asarray(ref).view(view))


# in_t, weight_t, out_t, acc_type: combinations tosa-tools 2026.8 generates (and its reference
# model runs) beyond the draft tosa.xml's table (spec commit 653c153)
MIXED = [("FP8E4M3", "FP8E5M2", "FP16", "FP16"), ("FP8E5M2", "FP16", "FP16", "FP16"),
         ("BF16", "FP8E4M3", "BF16", "BF16"), ("FP8E4M3", "FP8E4M3", "BF16", "FP32"),
         ("FP8E5M2", "BF16", "BF16", "FP32"), ("BF16", "BF16", "BF16", "BF16"),
         ("FP16", "FP8E4M3", "FP32", "FP32")]


@pytest.mark.parametrize("in_t, w_t, out_t, acc", MIXED)
def test_mixed_precision_conv2d_against_the_reference(in_t: str, w_t: str, out_t: str,
                                                      acc: str) -> None:
    rng = np.random.default_rng(11)
    x = _small(rng, (1, 5, 4, 6), in_t)
    w = _small(rng, (3, 3, 3, 6), w_t)
    data, name = _conv_graph(V11, x, in_t, w, w_t, out_t, acc)
    ref = run_reference(data, {"x": _ref_in(x)}, [name])[name]
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run({"x": x})[name]
        _same_bits(got, ref)


# combinations the draft table lists (or that look plausible) but the reference model refuses
# ("Unsupported operation type"): tosa_jax refuses them too
REFUSED = [("BF16", "BF16", "FP16", "BF16"), ("FP16", "FP16", "BF16", "FP32"),
           ("FP16", "BF16", "FP16", "FP32"), ("FP8E4M3", "FP8E4M3", "BF16", "FP16"),
           ("FP32", "FP16", "FP16", "FP32")]


@pytest.mark.parametrize("in_t, w_t, out_t, acc", REFUSED)
def test_conv2d_type_combinations_the_reference_refuses(in_t: str, w_t: str, out_t: str,
                                                        acc: str) -> None:
    rng = np.random.default_rng(12)
    x = _small(rng, (1, 3, 3, 2), in_t)
    w = _small(rng, (2, 3, 3, 2), w_t)
    data, name = _conv_graph(V11, x, in_t, w, w_t, out_t, acc)
    with pytest.raises(Exception, match="Unsupported operation type"):
        run_reference(data, {"x": _ref_in(x)}, [name])
    with pytest.raises(tosa_jax.TosaValidationError, match="ERROR_IF"):
        tosa_jax.load(data)


def test_1_0_conv2d_keeps_the_1_0_table() -> None:
    """A TOSA 1.0 graph: fp8 operands of different types are no 1.0 CONV2D row."""
    rng = np.random.default_rng(13)
    x = _small(rng, (1, 3, 3, 2), "FP8E4M3")
    w = _small(rng, (2, 3, 3, 2), "FP8E5M2")
    data, _ = _conv_graph(V10, x, "FP8E4M3", w, "FP8E5M2", "FP16", "FP16")
    with pytest.raises(tosa_jax.TosaValidationError, match="ERROR_IF"):
        tosa_jax.load(data)


@pytest.mark.parametrize("value_t, in_t, out_t, acc", [
    ("FP6E2M3", "FP16", "FP16", "FP32"), ("FP8E4M3", "FP32", "FP32", "FP32"),
    ("FP4E2M1", "BF16", "BF16", "BF16"), ("MXINT8", "FP16", "FP16", "FP16")])
def test_block_scaled_weight_conv2d_against_the_reference(value_t: str, in_t: str, out_t: str,
                                                          acc: str) -> None:
    """A bs32 block-scaled constant weight (values times 2^scale of their block of 32 along IC),
    read as apply_mul_s<acc_t>(scale, value)."""
    rng = np.random.default_rng(14)
    # input and weight values in {-1, 0, 1}, scales 1 or 2: integer products of at most 2, and
    # partial sums far below 2^8, exact even in a bf16 accumulator
    x = rng.integers(-1, 2, (1, 4, 4, 32)).astype(NP[in_t])
    codes = rng.integers(-1, 2, (2, 3, 3, 32))
    if value_t == "MXINT8":  # the value of an MXINT8 code is code / 64
        w = (codes * 64).astype(np.int8)
    else:
        w = codes.astype(HOST_DTYPES[value_t])
    scales = np.exp2(rng.integers(0, 2, (2, 3, 3, 1))).astype(ml_dtypes.float8_e8m0fnu)
    data, name = _conv_graph(V11, x, in_t, w, value_t, out_t, acc, w_scales=scales)
    model = tosa_jax.load(data)
    assert "EXT-MX-COMMON" in model.requirements.summary()
    ref = run_reference(data, {"x": _ref_in(x)}, [name])[name]
    _same_bits(model.run({"x": x})[name], ref)


def _other_conv(op: str, x: np.ndarray, in_t: str, w: np.ndarray, w_t: str, out_t: str,
                acc: str) -> tuple[bytes, str]:
    """CONV3D (1x1x1 kernel) or TRANSPOSE_CONV2D (1x1 kernel) of input ``x``, constant ``w``."""
    g = GraphBuilder(V11)
    xi = g.input("x", x.shape, in_t)
    oc = w.shape[0]
    ins = [xi, g.const(w, w_t), g.const(np.zeros(oc, NP[out_t]), out_t),
           g.const(np.zeros(1, NP[in_t]), in_t), g.const(np.zeros(1, NP[w_t]), w_t)]
    attrs = (dict(pad=(0,) * 6, stride=(1, 1, 1), dilation=(1, 1, 1)) if op == "CONV3D"
             else dict(out_pad=(0,) * 4, stride=(1, 1)))
    o = g.op(op, ins, x.shape[:-1] + (oc,), out_t, acc_type=acc, **attrs)
    return tosa_jax.write(g.build([o])), o


@pytest.mark.parametrize("op, in_t, w_t, out_t, acc, valid", [
    ("CONV3D", "FP8E4M3", "FP8E4M3", "FP16", "FP16", True),
    ("TRANSPOSE_CONV2D", "FP8E5M2", "FP8E5M2", "FP32", "FP32", True),
    ("CONV3D", "FP16", "FP8E4M3", "FP16", "FP32", False),
    ("CONV3D", "BF16", "BF16", "FP32", "FP32", False),
    ("TRANSPOSE_CONV2D", "FP16", "FP8E4M3", "FP16", "FP32", False),
    ("TRANSPOSE_CONV2D", "FP32", "FP16", "FP32", "FP32", False)])
def test_conv3d_and_transpose_conv2d_keep_single_type_rows(op: str, in_t: str, w_t: str,
                                                           out_t: str, acc: str,
                                                           valid: bool) -> None:
    """The draft table's "Mixed precision" rows of CONV3D and TRANSPOSE_CONV2D are refused by
    the reference model, and by tosa_jax; their single-type rows run as the reference does."""
    rng = np.random.default_rng(15)
    shape = (1, 2, 3, 3, 8) if op == "CONV3D" else (1, 3, 3, 8)
    x = _small(rng, shape, in_t)
    w = _small(rng, (4,) + (1,) * (len(shape) - 2) + (8,), w_t)
    data, name = _other_conv(op, x, in_t, w, w_t, out_t, acc)
    if not valid:
        with pytest.raises(Exception, match="Unsupported operation type"):
            run_reference(data, {"x": _ref_in(x)}, [name])
        with pytest.raises(tosa_jax.TosaValidationError, match="ERROR_IF"):
            tosa_jax.load(data)
        return
    ref = run_reference(data, {"x": _ref_in(x)}, [name])[name]
    _same_bits(tosa_jax.load(data).run({"x": x})[name], ref)


def test_block_scaled_input_conv2d_against_the_reference() -> None:
    """A bs32_fp8ue8m0_fp8e4m3 graph input (a ``tosa_jax.BlockScaled`` pair; its zero point is
    FP32) with an FP16 weight: the input read as apply_mul_s<acc_t>(scale, value)."""
    rng = np.random.default_rng(16)
    xv = rng.integers(-1, 2, (1, 4, 4, 64)).astype(ml_dtypes.float8_e4m3fn)
    xs = np.exp2(rng.integers(0, 2, (1, 4, 4, 2))).astype(ml_dtypes.float8_e8m0fnu)
    w = rng.integers(-1, 2, (3, 3, 3, 64)).astype(np.float16)
    g = GraphBuilder(V11)
    xi = g.input("x", xv.shape, "FP8E4M3")
    t = g.block.tensors[xi]
    t.scale_dtype, t.block_size = "FP8UE8M0", 32
    ins = [xi, g.const(w, "FP16"), g.const(np.full(3, 0.5, np.float16), "FP16"),
           g.const(np.zeros(1, np.float32), "FP32"), g.const(np.zeros(1, np.float16), "FP16")]
    o = g.op("CONV2D", ins, (1, 4, 4, 3), "FP16", pad=(1, 1, 1, 1), stride=(1, 1),
             dilation=(1, 1), acc_type="FP32")
    data = tosa_jax.write(g.build([o]))
    ref = run_reference(data, {"x": xv}, [o], scales={"x": xs})[o]
    got = tosa_jax.load(data).run({"x": tosa_jax.BlockScaled(xv, xs)})[o]
    _same_bits(got, ref)
