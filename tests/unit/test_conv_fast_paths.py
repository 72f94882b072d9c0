"""The fast forms of the convolutions against the reference model (x64 off and on): few input
channels over a large output as one matrix product over patches (im2col), and
DEPTHWISE_CONV2D as a sum over its kernel taps, with zero points, padding, stride, dilation and
a channel multiplier; int8 exactly, int16 x int8 (INT48) exactly."""

from __future__ import annotations

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
