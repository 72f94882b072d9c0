"""EQUAL, GREATER, GREATER_EQUAL against the reference model: int32 extremes with broadcasting,
and fp32 NaN (false for every comparison)."""

from __future__ import annotations

import jax
import numpy as np

import tosa_jax
from tosa_jax.ir import GraphBuilder

OPS = ("EQUAL", "GREATER", "GREATER_EQUAL")


def _compare(reference, t: str, x: np.ndarray, y: np.ndarray) -> None:
    shape = np.broadcast_shapes(x.shape, y.shape)
    b = GraphBuilder()
    xi, yi = b.input("x", x.shape, t), b.input("y", y.shape, t)
    outs = [b.op(op, [xi, yi], shape, "BOOL", name=op.lower()) for op in OPS]
    data = tosa_jax.write(b.build(outs))
    ref = reference(data, {"x": x, "y": y}, outs)
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run({"x": x, "y": y})
        for name in outs:
            assert got[name].dtype == ref[name].dtype == np.bool_
            np.testing.assert_array_equal(got[name], ref[name])


def test_int32(reference) -> None:
    v = np.array([-(1 << 31), -(1 << 31) + 1, -1, 0, 1, (1 << 31) - 2, (1 << 31) - 1], np.int32)
    _compare(reference, "INT32", v.reshape(7, 1), v.reshape(1, 7))


def test_fp32_nan(reference) -> None:
    v = np.array([np.nan, -np.inf, -0.0, 0.0, 1.0, np.inf], np.float32)
    _compare(reference, "FP32", v.reshape(1, 6), v.reshape(6, 1))
