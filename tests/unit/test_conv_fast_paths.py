"""The fast forms of the convolutions against the reference model (x64 off and on): few input
channels over an output of 256 positions or more as one matrix product over patches (im2col),
one-tap kernels (1x1, any stride and padding) as one matrix product over the input's channels,
and DEPTHWISE_CONV2D as a sum over its kernel taps, with zero points, padding, stride, dilation and
a channel multiplier; int8 exactly, int16 x int8 (INT48) exactly; FP32 stems within the
dot-product bound."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder

RNG = np.random.default_rng(20261121)


def _int(shape: tuple[int, ...], lo: int, hi: int, dtype: type) -> np.ndarray:
    return RNG.integers(lo, hi + 1, size=shape).astype(dtype)


def _check(reference, b: GraphBuilder, out: str, inputs: dict) -> None:
    data = tosa_jax.write(b.build([out]))
    expected = reference(data, inputs, [out])[out]
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run(inputs)[out]
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64))


def _graph(op: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray, zp: int, wzp: int,
           in_t: str, out_t: str, out_shape: tuple[int, ...], **attrs) -> tuple:
    b = GraphBuilder()
    names = [b.input("x", x.shape, in_t), b.const(w, "INT8"), b.const(bias, out_t),
             b.const([zp], in_t), b.const([wzp], "INT8")]
    out = b.op(op, names, out_shape, out_t, acc_type=out_t, local_bound=False, **attrs)
    return b, out


@pytest.mark.parametrize("stride,dilation", [((2, 2), (1, 1)), ((1, 1), (2, 1))])
def test_conv2d_few_channels_im2col(reference, stride, dilation) -> None:
    # 3 input channels, >= 2048 output positions: the patch-matrix form.
    x = _int((1, 128, 71, 3), -128, 127, np.int8)
    w = _int((5, 3, 3, 3), -128, 127, np.int8)
    pad = (2, 1, 1, 1)
    oh = (128 - 1 + 3 - 2 * dilation[0]) // stride[0] + 1
    ow = (71 - 1 + 2 - 2 * dilation[1]) // stride[1] + 1
    assert oh * ow >= 2048
    b, out = _graph("CONV2D", x, w, _int((5,), -999, 999, np.int32), -7, 3, "INT8", "INT32",
                    (1, oh, ow, 5), pad=pad, stride=stride, dilation=dilation)
    _check(reference, b, out, {"x": x})


def test_conv3d_few_channels_im2col(reference) -> None:
    # The patches are gathered one spatial axis at a time: three axes, stride and dilation.
    x = _int((2, 7, 21, 19, 2), -128, 127, np.int8)
    w = _int((3, 3, 2, 3, 2), -128, 127, np.int8)
    pad, stride, dilation = (1, 0, 0, 1, 2, 1), (1, 2, 1), (2, 1, 2)
    od = (7 - 1 + 1 - 2 * 2) // 1 + 1
    oh = (21 - 1 + 1 - 1 * 1) // 2 + 1
    ow = (19 - 1 + 3 - 2 * 2) // 1 + 1
    assert od * oh * ow >= 256
    b, out = _graph("CONV3D", x, w, _int((3,), -999, 999, np.int32), 5, -2, "INT8", "INT32",
                    (2, od, oh, ow, 3), pad=pad, stride=stride, dilation=dilation)
    _check(reference, b, out, {"x": x})


def test_conv2d_few_channels_int16(reference) -> None:
    x = _int((1, 64, 64, 2), -32768, 32767, np.int16)
    w = _int((4, 3, 3, 2), -128, 127, np.int8)
    b, out = _graph("CONV2D", x, w, np.zeros(4, np.int64), 0, 0, "INT16", "INT48",
                    (1, 64, 64, 4), pad=(1, 1, 1, 1), stride=(1, 1), dilation=(1, 1))
    _check(reference, b, out, {"x": x})


@pytest.mark.parametrize("stride,dilation,pad", [((1, 1), (1, 1), (1, 1, 1, 1)),
                                                 ((2, 1), (1, 2), (1, 1, 2, 2))])
def test_depthwise_taps(reference, stride, dilation, pad) -> None:
    x = _int((2, 9, 10, 5), -128, 127, np.int8)
    w = _int((3, 3, 5, 2), -128, 127, np.int8)
    oh = (9 - 1 + pad[0] + pad[1] - 2 * dilation[0]) // stride[0] + 1
    ow = (10 - 1 + pad[2] + pad[3] - 2 * dilation[1]) // stride[1] + 1
    b, out = _graph("DEPTHWISE_CONV2D", x, w, _int((10,), -999, 999, np.int32), 13, -5, "INT8",
                    "INT32", (2, oh, ow, 10), pad=pad, stride=stride, dilation=dilation)
    _check(reference, b, out, {"x": x})


@pytest.mark.parametrize("stride,pad", [((1, 1), (0, 0, 0, 0)), ((2, 2), (0, 0, 0, 0)),
                                        ((2, 3), (1, 1, 0, 1))])
def test_conv2d_pointwise(reference, stride, pad) -> None:
    # One tap: a matrix product; the padding carries the input zero point.
    x = _int((2, 11, 9, 6), -128, 127, np.int8)
    w = _int((7, 1, 1, 6), -128, 127, np.int8)
    oh = (11 - 1 + pad[0] + pad[1]) // stride[0] + 1
    ow = (9 - 1 + pad[2] + pad[3]) // stride[1] + 1
    b, out = _graph("CONV2D", x, w, _int((7,), -999, 999, np.int32), -9, 4, "INT8", "INT32",
                    (2, oh, ow, 7), pad=pad, stride=stride, dilation=(3, 2))
    _check(reference, b, out, {"x": x})


def test_conv2d_pointwise_int16(reference) -> None:
    x = _int((1, 9, 5, 300), -32768, 32767, np.int16)  # 300 terms: past INT32's headroom
    w = _int((3, 1, 1, 300), -128, 127, np.int8)
    b, out = _graph("CONV2D", x, w, _int((3,), -9999, 9999, np.int64), 0, 0, "INT16", "INT48",
                    (1, 5, 3, 3), pad=(0, 0, 0, 0), stride=(2, 2), dilation=(1, 1))
    _check(reference, b, out, {"x": x})


def test_conv2d_pointwise_fp32(reference) -> None:
    x = RNG.standard_normal((1, 17, 1, 64)).astype(np.float32)
    w = RNG.standard_normal((32, 1, 1, 64)).astype(np.float32)
    b = GraphBuilder()
    names = [b.input("x", x.shape, "FP32"), b.const(w, "FP32"),
             b.const(RNG.standard_normal(32).astype(np.float32), "FP32"),
             b.const([0.0], "FP32"), b.const([0.0], "FP32")]
    out = b.op("CONV2D", names, (1, 9, 1, 32), "FP32", acc_type="FP32", local_bound=False,
               pad=(0, 0, 0, 0), stride=(2, 1), dilation=(1, 1))
    data = tosa_jax.write(b.build([out]))
    expected = reference(data, {"x": x}, [out])[out]
    got = tosa_jax.load(data).run({"x": x})[out]
    # Dot-product compliance: each output is a 64-term sum; bound it by 64 ULPs of sum |x*w|.
    bound = 64 * np.finfo(np.float32).eps * (np.abs(x[:, ::2]) @ np.abs(w[:, 0, 0].T) + 1)
    assert np.all(np.abs(got.astype(np.float64) - expected) <= bound)


def test_conv2d_few_channels_strided(reference) -> None:
    # Strided, 3 channels, kernel sizes not multiples of the strides.
    x = _int((1, 141, 91, 3), -128, 127, np.int8)
    w = _int((6, 7, 5, 3), -128, 127, np.int8)
    b, out = _graph("CONV2D", x, w, _int((6,), -999, 999, np.int32), 11, -6, "INT8", "INT32",
                    (1, 71, 31, 6), pad=(3, 3, 2, 2), stride=(2, 3), dilation=(1, 1))
    _check(reference, b, out, {"x": x})


def test_conv3d_few_channels_strided(reference) -> None:
    x = _int((1, 9, 65, 65, 2), -32768, 32767, np.int16)
    w = _int((4, 3, 3, 3, 2), -128, 127, np.int8)
    b, out = _graph("CONV3D", x, w, np.zeros(4, np.int64), 0, 0, "INT16", "INT48",
                    (1, 5, 33, 33, 4), pad=(1, 1, 1, 1, 1, 1), stride=(2, 2, 2),
                    dilation=(1, 1, 1))
    _check(reference, b, out, {"x": x})


def test_conv2d_few_channels_small_image(reference) -> None:
    # 16x16 outputs: the patch-matrix form from 256 positions on.
    x = _int((2, 33, 33, 3), -128, 127, np.int8)
    w = _int((16, 3, 3, 3), -128, 127, np.int8)
    b, out = _graph("CONV2D", x, w, _int((16,), -999, 999, np.int32), -128, 0, "INT8",
                    "INT32", (2, 16, 16, 16), pad=(0, 0, 0, 0), stride=(2, 2), dilation=(1, 1))
    _check(reference, b, out, {"x": x})


@pytest.mark.parametrize("kernel,size,form", [(3, 65, "dot_general"),
                                              (7, 191, "conv_general_dilated")])
def test_conv2d_few_channels_fp32(reference, kernel, size, form) -> None:
    # A float stem's form follows the size of its patch matrix a sample (tensor_ops'
    # _IM2COL_MAX_FLOAT_PATCHES): a 3x3/2 kernel over 33x33 outputs on im2col (a matrix
    # product over 29 K patch elements), a 7x7/2 one over 96x96 outputs (1.4 M) as
    # XLA's convolution. Both within the dot-product bound of the reference model's result.
    from tosa_jax.testing import traced_primitives

    c, oc, pad = 3, 8, kernel // 2
    out_hw = (size - 1 + 2 * pad - (kernel - 1)) // 2 + 1
    x = RNG.standard_normal((2, size, size, c)).astype(np.float32)
    w = RNG.standard_normal((oc, kernel, kernel, c)).astype(np.float32)
    bias = RNG.standard_normal(oc).astype(np.float32)
    b = GraphBuilder()
    names = [b.input("x", x.shape, "FP32"), b.const(w, "FP32"), b.const(bias, "FP32"),
             b.const([0.0], "FP32"), b.const([0.0], "FP32")]
    out = b.op("CONV2D", names, (2, out_hw, out_hw, oc), "FP32", acc_type="FP32",
               local_bound=False, pad=(pad,) * 4, stride=(2, 2), dilation=(1, 1))
    data = tosa_jax.write(b.build([out]))
    assert form in traced_primitives(data, "cpu", x)
    expected = reference(data, {"x": x}, [out])[out]
    got = tosa_jax.load(data).run({"x": x})[out]
    # Each output is a sum of kernel * kernel * c products: that many ULPs of sum |x * w|.
    xp = np.pad(np.abs(x), ((0, 0), (pad, pad), (pad, pad), (0, 0))).astype(np.float64)
    mags = np.zeros(got.shape)
    for i in range(kernel):
        for j in range(kernel):
            win = xp[:, i:i + 2 * out_hw - 1:2, j:j + 2 * out_hw - 1:2, :]
            mags += win @ np.abs(w[:, i, j, :].T).astype(np.float64)
    bound = kernel * kernel * c * np.finfo(np.float32).eps * (mags + np.abs(bias))
    assert np.all(np.abs(got.astype(np.float64) - expected) <= bound + 1e-30)


@pytest.mark.parametrize("zp", [0, -128])
def test_one_row_int8_product(reference, zp: int) -> None:
    # Batch 1's classifier: a 1x1 CONV2D over one position, a product of one row. On XLA CPU
    # it is computed over two copies of the row (numerics.cpu_dot): with one, XLA's own loops
    # widen the int8 weight to int32, a constant four times larger in the executable (and
    # slower). Exact against the reference model; no int32 copy of the weight compiled.
    k, n = 256, 128
    from tosa_jax.lowering.numerics import ROW_DOT_MIN_MACS

    assert k * n >= ROW_DOT_MIN_MACS
    x = _int((1, 1, 1, k), -128, 127, np.int8)
    w = _int((n, 1, 1, k), -128, 127, np.int8)
    b, out = _graph("CONV2D", x, w, _int((n,), -999, 999, np.int32), zp, 0, "INT8", "INT32",
                    (1, 1, 1, n), pad=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1))
    _check(reference, b, out, {"x": x})
    model = tosa_jax.load(tosa_jax.write(b.build([out])), cache=False)
    model.compile(x)
    hlo = next(iter(model._executables.values())).exe.as_text()
    assert f"s32[{n},{k}]" not in hlo and f"s32[{k},{n}]" not in hlo


def test_batched_int8_product_of_transposed_heads(reference) -> None:
    # Attention heads: an int8 MATMUL whose A is a TRANSPOSE of the heads. XLA CPU folds the
    # transpose into the product and then widens both operands to int32 for a loop of its own;
    # numerics.cpu_dot computes the operands apart (fusion_boundary), and the product stays one
    # int8 library product. Exact against the reference model, no int32 operand compiled.
    from tosa_jax.lowering.numerics import ROW_DOT_MIN_MACS

    heads, rows, c, cols = 4, 32, 32, 20
    assert rows * c * cols >= ROW_DOT_MIN_MACS
    x = _int((rows, heads, c), -128, 127, np.int8)
    bmat = _int((heads, c, cols), -128, 127, np.int8)
    b = GraphBuilder()
    t = b.op("TRANSPOSE", [b.input("x", x.shape, "INT8")], (heads, rows, c), "INT8",
             perms=[1, 0, 2])
    out = b.op("MATMUL", [t, b.input("y", bmat.shape, "INT8"), b.const([-3], "INT8"),
                          b.const([5], "INT8")], (heads, rows, cols), "INT32")
    data = tosa_jax.write(b.build([out]))
    expected = reference(data, {"x": x, "y": bmat}, [out])[out]
    model = tosa_jax.load(data, cache=False)
    np.testing.assert_array_equal(model.run({"x": x, "y": bmat})[out], expected)
    model.compile(x, bmat)
    hlo = next(iter(model._executables.values())).exe.as_text()
    # one product, of int8 operands (its fusion's parameters), batched over the heads
    products = re.findall(r"\n%fused_computation[.\d]* \(param_0[.\d]*: (\w+)\[[^\n]*\n"
                          r"(?:  [^\n]*\n)*?  ROOT %dot[.\d]* = s32\[([\d,]+)\]", hlo)
    assert products == [("s8", f"{heads},{rows},{cols}")]
