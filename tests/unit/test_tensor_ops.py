"""Tensor operators against the reference model: zero points with padding, transpose strides and
out_pad, depthwise layout, INT48 accumulation split into exact int32 pieces, pooling rounding,
and the statically checked ERROR_IFs. Every result is compared with jax_enable_x64 off and on."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaValidationError

RNG = np.random.default_rng(20240611)
RANGES = {"INT4": (-8, 7), "INT8": (-128, 127), "INT16": (-32768, 32767),
          "INT32": (-(1 << 31), (1 << 31) - 1), "INT48": (-(1 << 47), (1 << 47) - 1)}
NP = {"INT4": np.int8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT48": np.int64}


def rand(shape, dtype, lo=None, hi=None):
    a, b = RANGES[dtype]
    return RNG.integers(a if lo is None else lo, (b if hi is None else hi) + 1, size=shape,
                        dtype=np.int64).astype(NP[dtype])


def run_both(data: bytes, inputs: dict, out: str) -> list[np.ndarray]:
    results = []
    before = jax.config.jax_enable_x64
    try:
        for x64 in (False, True):
            jax.config.update("jax_enable_x64", x64)
            results.append(tosa_jax.load(data).run(inputs)[out])
    finally:
        jax.config.update("jax_enable_x64", before)
    return results


def check(reference, b: GraphBuilder, out: str, inputs: dict) -> None:
    data = tosa_jax.write(b.build([out]))
    expected = reference(data, inputs, [out])[out]
    for got in run_both(data, inputs, out):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64))


def conv_inputs(b, x, w, bias, zp, wzp, in_t, w_t, out_t, const_weight, inputs):
    """Add input, weight, bias and zero points to ``b``; returns the five input names."""
    xn = b.input("x", x.shape, in_t)
    inputs["x"] = x
    if const_weight:
        wn = b.const(w, w_t)
    else:
        wn = b.input("w", w.shape, w_t)
        inputs["w"] = w
    return [xn, wn, b.const(bias, out_t), b.const([zp], in_t), b.const([wzp], w_t)]


@pytest.mark.parametrize("const_weight", [True, False])
def test_conv2d_int8_zero_points_pad_stride_dilation(reference, const_weight):
    # Padding must read as input_zp (zero after subtraction), including with weight_zp != 0.
    x, w = rand((2, 7, 9, 5), "INT8"), rand((4, 3, 3, 5), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((1,), "INT32", -1000, 1000), -7, 5, "INT8", "INT8",
                        "INT32", const_weight, inputs)
    out = b.op("CONV2D", names, (2, 4, 7, 4), "INT32", pad=(1, 1, 0, 2), stride=(2, 1),
               dilation=(1, 2), acc_type="INT32", local_bound=False)
    check(reference, b, out, inputs)


def test_conv2d_int8_int4_weights(reference):
    # int4_t is [-7, 7] (the spec excludes -8; the reference model does not accept it).
    x, w = rand((1, 6, 6, 3), "INT8"), rand((5, 2, 3, 3), "INT4", -7, 7)
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((5,), "INT32", -99, 99), 12, 0, "INT8", "INT4", "INT32",
                        True, inputs)
    out = b.op("CONV2D", names, (1, 7, 6, 5), "INT32", pad=(1, 1, 1, 1), stride=(1, 1),
               dilation=(1, 1), acc_type="INT32", local_bound=False)
    check(reference, b, out, inputs)


def test_conv3d_int8_zero_points(reference):
    x, w = rand((1, 4, 5, 6, 3), "INT8"), rand((2, 2, 3, 2, 3), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((2,), "INT32", -99, 99), 100, -3, "INT8", "INT8", "INT32",
                        False, inputs)
    # OD = (4-1+1+0-1)/1+1 = 4; OH = (5-1+1+1-2*2)/2+1 = 2; OW = (6-1+0+1-1)/1+1 = 6
    out = b.op("CONV3D", names, (1, 4, 2, 6, 2), "INT32", pad=(1, 0, 1, 1, 0, 1),
               stride=(1, 2, 1), dilation=(1, 2, 1), acc_type="INT32", local_bound=False)
    check(reference, b, out, inputs)


def test_depthwise_conv2d_multiplier_layout(reference):
    # Weight [KH,KW,C,M]; output channel c*M+m; per-channel bias BC = C*M.
    x, w = rand((2, 6, 7, 4), "INT8"), rand((3, 2, 4, 3), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((12,), "INT32", -500, 500), -128, 127, "INT8", "INT8",
                        "INT32", False, inputs)
    # OH = (6-1+1+0-2*2)/1+1 = 3; OW = (7-1+1+0-1*1)/2+1 = 4
    out = b.op("DEPTHWISE_CONV2D", names, (2, 3, 4, 12), "INT32", pad=(1, 0, 1, 0),
               stride=(1, 2), dilation=(2, 1), acc_type="INT32", local_bound=False)
    check(reference, b, out, inputs)


@pytest.mark.parametrize("out_pad", [(0, 0, 0, 0), (-1, 2, -3, 1)])
def test_transpose_conv2d_stride_out_pad(reference, out_pad):
    # Stride holes and out-of-range rows contribute zero after input_zp is subtracted.
    x, w = rand((1, 4, 3, 2), "INT8"), rand((3, 3, 4, 2), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((3,), "INT32", -99, 99), 9, -4, "INT8", "INT8", "INT32",
                        True, inputs)
    oh = (4 - 1) * 2 + out_pad[0] + out_pad[1] + 3
    ow = (3 - 1) * 3 + out_pad[2] + out_pad[3] + 4
    out = b.op("TRANSPOSE_CONV2D", names, (1, oh, ow, 3), "INT32", out_pad=out_pad,
               stride=(2, 3), acc_type="INT32", local_bound=False)
    check(reference, b, out, inputs)


def test_transpose_conv2d_int16_int48(reference):
    x, w = rand((2, 3, 3, 3), "INT16"), rand((2, 2, 3, 3), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((2,), "INT48"), 0, 17, "INT16", "INT8", "INT48", False,
                        inputs)
    out = b.op("TRANSPOSE_CONV2D", names, (2, 7, 8, 2), "INT48", out_pad=(0, 1, 1, 0),
               stride=(2, 2), acc_type="INT48", local_bound=False)
    check(reference, b, out, inputs)


@pytest.mark.parametrize("op", ["CONV2D", "DEPTHWISE_CONV2D"])
def test_int16_int48_padding_and_weight_zp(reference, op):
    x = rand((1, 5, 6, 3), "INT16")
    x[0, 0, :, :] = -32768  # the extremes, where the high/low byte split matters
    x[0, 1, :, :] = 32767
    w = rand((2, 3, 3, 3) if op == "CONV2D" else (3, 3, 3, 2), "INT8")
    oc = 2 if op == "CONV2D" else 6
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, rand((oc,), "INT48"), 0, -128, "INT16", "INT8", "INT48",
                        op == "CONV2D", inputs)
    out = b.op(op, names, (1, 5, 3, oc), "INT48", pad=(1, 1, 1, 0), stride=(1, 2),
               dilation=(1, 1), acc_type="INT48", local_bound=False)
    check(reference, b, out, inputs)


def test_conv2d_int16_long_contraction_is_split(reference):
    # 40000 terms of up to 32768 * 255: far beyond int32, so the sum is cut into exact pieces.
    ic = 40000
    x = np.where(RNG.random((1, 2, 1, ic)) < 0.5, -32768, 32767).astype(np.int16)
    w = np.full((2, 1, 1, ic), 127, np.int8)
    w[1] = -128
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.array([1 << 40], np.int64), 0, -128, "INT16", "INT8",
                        "INT48", True, inputs)
    out = b.op("CONV2D", names, (1, 2, 1, 2), "INT48", pad=(0, 0, 0, 0), stride=(1, 1),
               dilation=(1, 1), acc_type="INT48", local_bound=False)
    check(reference, b, out, inputs)


def test_matmul_int8_zero_points(reference):
    a, m = rand((3, 5, 7), "INT8"), rand((3, 7, 4), "INT8")
    b = GraphBuilder()
    an, bn = b.input("a", a.shape, "INT8"), b.input("b", m.shape, "INT8")
    out = b.op("MATMUL", [an, bn, b.const([-128], "INT8"), b.const([77], "INT8")], (3, 5, 4),
               "INT32")
    check(reference, b, out, {"a": a, "b": m})


@pytest.mark.parametrize("c", [600, 33100])
def test_matmul_int16_int48(reference, c):
    # Byte halves: up to 33025 products sum exactly in int32; longer rows are cut into groups
    # that are added as Wide. The extremes make the sums reach ~2**45.
    a, m = rand((2, 3, c), "INT16"), rand((2, c, 4), "INT16")
    a[0, 0] = -32768
    m[0, :, 0] = -32768
    a[1, 1] = 32767
    m[1, :, 1] = -32768
    b = GraphBuilder()
    an, bn = b.input("a", a.shape, "INT16"), b.input("b", m.shape, "INT16")
    out = b.op("MATMUL", [an, bn, b.const([0], "INT16"), b.const([0], "INT16")], (2, 3, 4),
               "INT48")
    check(reference, b, out, {"a": a, "b": m})


@pytest.mark.parametrize("dtype,zps", [("INT8", (-20, 33)), ("INT16", (0, 0))])
def test_avg_pool2d_rounding_and_padding(reference, dtype, zps):
    x = rand((2, 7, 8, 3), dtype)
    b = GraphBuilder()
    xn = b.input("x", x.shape, dtype)
    # OH = (7+1+1-3)/2+1 = 4 (edge windows hold fewer values); OW = (8+1+0-2)/1+1 = 8
    out = b.op("AVG_POOL2D", [xn, b.const([zps[0]], dtype), b.const([zps[1]], dtype)],
               (2, 4, 8, 3), dtype, kernel=(3, 2), stride=(2, 1), pad=(1, 1, 1, 0),
               acc_type="INT32")
    check(reference, b, out, {"x": x})


@pytest.mark.parametrize("dtype,zps,kernel", [
    ("INT8", (-128, 127), (16, 16)), ("INT8", (127, -128), (7, 5)), ("INT8", (0, -7), (1, 13)),
    ("INT16", (0, 0), (9, 9))])
def test_avg_pool2d_large_windows_extreme_values(reference, dtype, zps, kernel):
    """Windows up to 16x16 with padding (partial windows: other counts, other reciprocals), the
    zero points at their type's ends, inputs at the ends of their range: the sums' range gives
    the short apply_scale_32 forms, with the output zero point added before the last shift."""
    lo, hi = RANGES[dtype]
    x = rand((2, 18, 17, 4), dtype)
    x[0, :, :, 0], x[0, :, :, 1], x[1, ::2, :, 2] = lo, hi, lo
    b = GraphBuilder()
    xn = b.input("x", x.shape, dtype)
    pad = (kernel[0] // 2, (kernel[0] - 1) // 2, kernel[1] // 2, (kernel[1] - 1) // 2)
    oh, ow = 18 + pad[0] + pad[1] - kernel[0] + 1, 17 + pad[2] + pad[3] - kernel[1] + 1
    out = b.op("AVG_POOL2D", [xn, b.const([zps[0]], dtype), b.const([zps[1]], dtype)],
               (2, oh, ow, 4), dtype, kernel=kernel, stride=(1, 1), pad=pad, acc_type="INT32")
    check(reference, b, out, {"x": x})


def test_max_pool2d_int16_padding(reference):
    x = rand((1, 5, 6, 2), "INT16", -32768, -32760)  # padding must never win
    b = GraphBuilder()
    xn = b.input("x", x.shape, "INT16")
    out = b.op("MAX_POOL2D", [xn], (1, 3, 6, 2), "INT16", kernel=(2, 3), stride=(2, 1),
               pad=(1, 0, 1, 1), nan_mode="PROPAGATE")
    check(reference, b, out, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_argmax_first_of_ties(reference, axis):
    x = rand((4, 5, 6), "INT16", -3, 2)  # many ties
    x[:, 0, :] = -32768
    b = GraphBuilder()
    xn = b.input("x", x.shape, "INT16")
    shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
    out = b.op("ARGMAX", [xn], shape, "INT32", axis=axis, nan_mode="PROPAGATE")
    check(reference, b, out, {"x": x})


def _error(b: GraphBuilder, out: str, inputs: dict, match: str) -> None:
    with pytest.raises(TosaValidationError, match=match):
        tosa_jax.load(b.build([out])).run(inputs)


def test_error_if_conv2d_output_shape_and_bias():
    x, w = rand((1, 5, 5, 2), "INT8"), rand((3, 3, 3, 2), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.zeros(3, np.int32), 0, 0, "INT8", "INT8", "INT32", True,
                        inputs)
    out = b.op("CONV2D", names, (1, 4, 3, 3), "INT32", pad=(0, 0, 0, 0), stride=(1, 1),
               dilation=(1, 1), acc_type="INT32", local_bound=False)
    _error(b, out, inputs, "OH")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.zeros(2, np.int32), 0, 0, "INT8", "INT8", "INT32", True,
                        inputs)
    out = b.op("CONV2D", names, (1, 3, 3, 3), "INT32", pad=(0, 0, 0, 0), stride=(1, 1),
               dilation=(1, 1), acc_type="INT32", local_bound=False)
    _error(b, out, inputs, "BC")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.zeros(3, np.int32), 0, 0, "INT8", "INT8", "INT32", True,
                        inputs)
    # (IH - 1 + 1 + 0 - 2) = 3 is not a multiple of stride_y = 2
    out = b.op("CONV2D", names, (1, 2, 3, 3), "INT32", pad=(1, 0, 0, 0), stride=(2, 1),
               dilation=(1, 1), acc_type="INT32", local_bound=False)
    _error(b, out, inputs, "idiv_check")


def test_error_if_zero_points_only_for_int8():
    x, w = rand((1, 3, 3, 2), "INT16"), rand((1, 1, 1, 2), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.zeros(1, np.int64), 5, 0, "INT16", "INT8", "INT48", True,
                        inputs)
    out = b.op("CONV2D", names, (1, 3, 3, 1), "INT48", pad=(0, 0, 0, 0), stride=(1, 1),
               dilation=(1, 1), acc_type="INT48", local_bound=False)
    _error(b, out, inputs, "input_zp")
    b = GraphBuilder()
    an, bn = b.input("a", (1, 2, 2), "INT16"), b.input("b", (1, 2, 2), "INT16")
    out = b.op("MATMUL", [an, bn, b.const([0], "INT16"), b.const([1], "INT16")], (1, 2, 2),
               "INT48")
    _error(b, out, {"a": np.zeros((1, 2, 2), np.int16), "b": np.zeros((1, 2, 2), np.int16)},
           "B_zp")


def test_error_if_pooling_and_transpose():
    x = rand((1, 4, 4, 1), "INT8")
    b = GraphBuilder()
    xn = b.input("x", x.shape, "INT8")
    out = b.op("MAX_POOL2D", [xn], (1, 5, 4, 1), "INT8", kernel=(2, 1), stride=(1, 1),
               pad=(2, 0, 0, 0), nan_mode="PROPAGATE")
    _error(b, out, {"x": x}, "pad_top >= kernel_y")
    w = rand((1, 2, 2, 1), "INT8")
    b, inputs = GraphBuilder(), {}
    names = conv_inputs(b, x, w, np.zeros(1, np.int32), 0, 0, "INT8", "INT8", "INT32", True,
                        inputs)
    out = b.op("TRANSPOSE_CONV2D", names, (1, 3, 5, 1), "INT32", out_pad=(-2, 0, 0, 0),
               stride=(1, 1), acc_type="INT32", local_bound=False)
    _error(b, out, inputs, "out_pad_top <= -KH")
    b = GraphBuilder()
    xn = b.input("x", x.shape, "INT8")
    out = b.op("ARGMAX", [xn], (1, 4, 4), "INT32", axis=1, nan_mode="PROPAGATE")
    _error(b, out, {"x": x}, "flatten")


@pytest.mark.parametrize("nan_mode", ["PROPAGATE", "IGNORE"])
@pytest.mark.parametrize("kernel,stride,pad", [((3, 3), (2, 2), (1, 0, 1, 1)),
                                               ((9, 8), (1, 3), (4, 0, 2, 1)),
                                               ((33, 34), (2, 3), (1, 0, 1, 1))])
def test_max_pool2d_fp32_special_values(reference, nan_mode, kernel, stride, pad):
    # NaN (in places and in all of one channel), infinities and signed zeros, bit for bit: of
    # equal values the first in the spec's order wins (-0.0 or +0.0). Small kernels run over
    # their taps, 33x34 (over tensor_ops._TAPS_MAX) as a reduce_window with the sign mended.
    x = RNG.standard_normal((2, 40, 41, 5)).astype(np.float32)
    for value, p in ((np.nan, 0.05), (np.inf, 0.01), (-np.inf, 0.05), (0.0, 0.2), (-0.0, 0.2)):
        x[RNG.random(x.shape) < p] = value
    x[0, :, :, 0] = np.nan
    x[1, :, :, 1] = -np.inf
    x[:, :, :, 2] = np.where(RNG.random(x.shape[:3]) < 0.5, 0.0, -0.0)
    oh = (40 + pad[0] + pad[1] - kernel[0]) // stride[0] + 1
    ow = (41 + pad[2] + pad[3] - kernel[1]) // stride[1] + 1
    b = GraphBuilder()
    xn = b.input("x", x.shape, "FP32")
    out = b.op("MAX_POOL2D", [xn], (2, oh, ow, 5), "FP32", kernel=kernel, stride=stride,
               pad=pad, nan_mode=nan_mode)
    data = tosa_jax.write(b.build([out]))
    expected = reference(data, {"x": x}, [out])[out]
    zeros = expected[:, :, :, 2]
    assert np.isnan(expected).any() and np.isneginf(expected).any()
    assert (zeros == 0).all() and np.signbit(zeros).any() and not np.signbit(zeros).all()
    for got in run_both(data, {"x": x}, out):
        np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))
