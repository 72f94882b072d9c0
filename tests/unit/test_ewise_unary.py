"""Elementwise unary operators against the reference model: NEGATE zero points and saturation,
CLZ (also on constants, which XLA folds), ABS, BITWISE_NOT, LOGICAL_NOT; x64 off and on."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check


def _all(dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1, dtype=np.int64).astype(dtype)


def test_negate_int8_zero_points(reference) -> None:
    """Every int8 value under zero points that push the result past both ends of the range."""
    b = GraphBuilder()
    x = b.input("x", (256,), "INT8")
    outs = [b.op("NEGATE", [x, b.const([izp], "INT8"), b.const([ozp], "INT8")], (256,), "INT8",
                 name=f"neg_{i}")
            for i, (izp, ozp) in enumerate(((0, 0), (-128, 127), (127, -128), (5, -3),
                                            (-128, -128), (127, 127)))]
    _check(reference, b, outs, {"x": _all(np.int8)})


def test_negate_int16_int32_abs_clz_not(reference) -> None:
    rng = np.random.default_rng(2)
    x16 = _all(np.int16).reshape(256, 256)
    x32 = np.concatenate([[-(1 << 31) + 1, (1 << 31) - 1, -1, 0, 1],
                          rng.integers(-(1 << 31) + 1, 1 << 31, 995)]).astype(np.int32)
    # CLZ input: one value per leading-zero count, both signs.
    c32 = np.concatenate([[0, -(1 << 31), -1], (1 << np.arange(31)),
                          rng.integers(-(1 << 31), 1 << 31, 66)]).astype(np.int32)
    b = GraphBuilder()
    i16, i32, c = b.input("x16", (256, 256), "INT16"), b.input("x32", (1000,), "INT32"), \
        b.input("c32", (100,), "INT32")
    z16, z32 = b.const([0], "INT16"), b.const([0], "INT32")
    const_c = b.const(c32, "INT32")  # XLA constant-folds ops on CONST inputs
    outs = [b.op("NEGATE", [i16, z16, z16], (256, 256), "INT16", name="neg16"),
            b.op("NEGATE", [i32, z32, z32], (1000,), "INT32", name="neg32"),
            b.op("ABS", [i32], (1000,), "INT32", name="abs32"),
            b.op("BITWISE_NOT", [i16], (256, 256), "INT16", name="not16"),
            b.op("BITWISE_NOT", [i32], (1000,), "INT32", name="not32"),
            b.op("CLZ", [c], (100,), "INT32", name="clz"),
            b.op("CLZ", [const_c], (100,), "INT32", name="clz_const")]
    _check(reference, b, outs, {"x16": x16, "x32": x32, "c32": c32})


def test_logical_not_and_bitwise_not_int8(reference) -> None:
    b = GraphBuilder()
    x, p = b.input("x", (256,), "INT8"), b.input("p", (2, 3), "BOOL")
    outs = [b.op("BITWISE_NOT", [x], (256,), "INT8", name="not8"),
            b.op("LOGICAL_NOT", [p], (2, 3), "BOOL", name="lnot")]
    _check(reference, b, outs, {"x": _all(np.int8),
                                "p": np.array([[True, False, True], [False, False, True]])})


@pytest.mark.parametrize("t", ["INT16", "INT32"])
def test_negate_zero_point_error(t: str) -> None:
    b = GraphBuilder()
    x = b.input("x", (4,), t)
    out = b.op("NEGATE", [x, b.const([0], t), b.const([3], t)], (4,), t)
    with pytest.raises(tosa_jax.TosaValidationError, match="output_zp"):  # refused at load
        model = tosa_jax.load(tosa_jax.write(b.build([out])))
        model(np.zeros(4, {"INT16": np.int16, "INT32": np.int32}[t]))
