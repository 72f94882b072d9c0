"""Elementwise binary operators against the reference model: shifts with rounding and
zero-extension, MUL with shift and widening, truncating INTDIV, TABLE interpolation, broadcasting,
NaN modes; exact with x64 off and on."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check

INFO = {"INT8": (np.int8, 8), "INT16": (np.int16, 16), "INT32": (np.int32, 32)}




def _edges(dtype: type, n: int, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, info.min + 1, info.max - 1, -1, 0, 1, -2, 2], np.int64)
    rand = rng.integers(info.min, info.max, n - edges.size, endpoint=True)
    return np.concatenate([edges, rand]).astype(dtype)


@pytest.mark.parametrize("t", ["INT8", "INT16", "INT32"])
def test_shifts_and_bitwise(reference, t: str) -> None:
    dtype, bits = INFO[t]
    rng = np.random.default_rng(bits)
    shape = (4, 72)
    x = _edges(dtype, shape[0] * shape[1], rng).reshape(shape)
    s = np.tile(np.arange(bits, dtype=dtype), shape[0] * shape[1] // bits + 1)[:x.size]
    s = s.reshape(shape)
    y = _edges(dtype, shape[1], rng)[::-1].reshape(1, shape[1])  # broadcast along axis 0
    b = GraphBuilder()
    xi, si, yi = b.input("x", shape, t), b.input("s", shape, t), b.input("y", (1, shape[1]), t)
    outs = [b.op("ARITHMETIC_RIGHT_SHIFT", [xi, si], shape, t, name="ars_round", round=True),
            b.op("ARITHMETIC_RIGHT_SHIFT", [xi, si], shape, t, name="ars", round=False),
            b.op("LOGICAL_RIGHT_SHIFT", [xi, si], shape, t, name="lrs"),
            b.op("LOGICAL_LEFT_SHIFT", [xi, si], shape, t, name="lls"),
            b.op("BITWISE_AND", [xi, yi], shape, t, name="and"),
            b.op("BITWISE_OR", [yi, xi], shape, t, name="or"),
            b.op("BITWISE_XOR", [xi, yi], shape, t, name="xor")]
    _check(reference, b, outs, {"x": x, "s": s, "y": y})


def test_logical_right_shift_zero_extends_narrow_types() -> None:
    """Hand-derived from apply_logical_rshift: zero_extend<uint32_t>(int8 -128) is 128."""
    b = GraphBuilder()
    x = b.input("x", (3,), "INT8")
    s = b.const([1, 7, 0], "INT8")
    out = b.op("LOGICAL_RIGHT_SHIFT", [x, s], (3,), "INT8")
    got = tosa_jax.load(tosa_jax.write(b.build([out])))(np.array([-128, -1, -1], np.int8))
    np.testing.assert_array_equal(np.asarray(got), [64, 1, -1])


def test_mul(reference) -> None:
    rng = np.random.default_rng(7)
    b = GraphBuilder()
    a8, b8 = b.input("a8", (2, 50), "INT8"), b.input("b8", (2, 50), "INT8")
    a16, b16 = b.input("a16", (2, 50), "INT16"), b.input("b16", (1, 50), "INT16")
    a32, b32 = b.input("a32", (2, 50), "INT32"), b.input("b32", (2, 1), "INT32")
    s0 = b.const([0], "INT8")
    outs = [b.op("MUL", [a8, b8, s0], (2, 50), "INT32", name="m8"),
            b.op("MUL", [a16, b16, s0], (2, 50), "INT32", name="m16"),
            # shift 0: the low 32 bits of the product (wraps)
            b.op("MUL", [a32, b32, s0], (2, 50), "INT32", name="m32")]
    # int32 with shift: (a * b + (1 << (shift - 1))) >> shift in 64 bits. The operands are
    # bounded so that the result fits int32 (a REQUIRE).
    ins: dict[str, np.ndarray] = {
        "a8": _edges(np.int8, 100, rng).reshape(2, 50),
        "b8": _edges(np.int8, 100, rng)[::-1].reshape(2, 50),
        "a16": _edges(np.int16, 100, rng).reshape(2, 50),
        "b16": _edges(np.int16, 50, rng)[::-1].reshape(1, 50),
        "a32": _edges(np.int32, 100, rng).reshape(2, 50),
        "b32": np.array([[-(1 << 31)], [123456789]], np.int32),
    }
    for shift, bound in ((1, 1 << 15), (15, 1 << 23), (31, 1 << 31), (40, 1 << 31),
                         (63, 1 << 31)):
        p, q = b.input(f"p{shift}", (3, 40), "INT32"), b.input(f"q{shift}", (3, 40), "INT32")
        outs.append(b.op("MUL", [p, q, b.const([shift], "INT8")], (3, 40), "INT32",
                         name=f"ms{shift}"))
        ins[p] = rng.integers(-bound, bound, (3, 40)).astype(np.int32)
        ins[q] = rng.integers(-bound, bound, (3, 40)).astype(np.int32)
        ins[p][0, :4] = [bound - 1, -bound, -bound, -1]  # round-half cases and extremes
        ins[q][0, :4] = [bound - 1, bound - 1, 1 - bound, 1]
    _check(reference, b, outs, ins)


def test_intdiv_sub_min_max_compare(reference) -> None:
    rng = np.random.default_rng(11)
    x = _edges(np.int32, 120, rng).reshape(3, 40)
    y = rng.integers(-100, 100, (1, 40)).astype(np.int32)
    y[y == 0] = 7
    y[0, :3] = [-1, 1, -(1 << 31)]
    x[0, 0] = -(1 << 31) + 1  # keeps INT32_MIN / -1 (a REQUIRE failure) out
    b = GraphBuilder()
    xi, yi = b.input("x", (3, 40), "INT32"), b.input("y", (1, 40), "INT32")
    outs = [b.op("INTDIV", [xi, yi], (3, 40), "INT32", name="div"),
            b.op("MAXIMUM", [xi, yi], (3, 40), "INT32", name="max", nan_mode="PROPAGATE"),
            b.op("MINIMUM", [yi, xi], (3, 40), "INT32", name="min", nan_mode="IGNORE")]
    _check(reference, b, outs, {"x": x, "y": y})


def test_logical(reference) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random((5, 8)) < 0.5, rng.random((5, 1)) < 0.5
    b = GraphBuilder()
    xi, yi = b.input("x", (5, 8), "BOOL"), b.input("y", (5, 1), "BOOL")
    outs = [b.op(op, [xi, yi], (5, 8), "BOOL", name=op.lower())
            for op in ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR")]
    _check(reference, b, outs, {"x": x, "y": y})


def test_table(reference) -> None:
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x8 = b.input("x8", (2, 128), "INT8")
    x16 = b.input("x16", (256, 256), "INT16")
    t8 = b.const(rng.integers(-128, 128, 256), "INT8")
    # Slopes between neighbours must fit int16 (a REQUIRE), so keep entries within +-16383;
    # put the extremes at both ends to exercise index 0 and 512.
    table16 = rng.integers(-16383, 16384, 513)
    table16[0], table16[1], table16[511], table16[512] = -16383, 16383, 16383, -16383
    t16 = b.const(table16, "INT16")
    outs = [b.op("TABLE", [x8, t8], (2, 128), "INT8", name="t8"),
            b.op("TABLE", [x16, t16], (256, 256), "INT32", name="t16")]
    ins = {"x8": np.arange(-128, 128, dtype=np.int8).reshape(2, 128),
           "x16": np.arange(-32768, 32768, dtype=np.int32).astype(np.int16).reshape(256, 256)}
    _check(reference, b, outs, ins)


@pytest.mark.parametrize("nan_mode", ["PROPAGATE", "IGNORE"])
def test_float_min_max_nan_mode(reference, nan_mode: str) -> None:
    nan = np.nan
    x = np.array([[1.0, nan, nan, -0.0, 0.0, 3.0, -np.inf]], np.float32)
    y = np.array([[nan, 2.0, nan, 0.0, -0.0, -3.0, 5.0]], np.float32)
    b = GraphBuilder()
    xi, yi = b.input("x", (1, 7), "FP32"), b.input("y", (1, 7), "FP32")
    outs = [b.op("MAXIMUM", [xi, yi], (1, 7), "FP32", name="max", nan_mode=nan_mode),
            b.op("MINIMUM", [xi, yi], (1, 7), "FP32", name="min", nan_mode=nan_mode)]
    data = tosa_jax.write(b.build(outs))
    ref = reference(data, {"x": x, "y": y}, outs)
    got = tosa_jax.load(data).run({"x": x, "y": y})
    for name in outs:
        np.testing.assert_array_equal(got[name], ref[name])  # NaN == NaN here
        np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(ref[name]))


def test_broadcast_errors() -> None:
    for s1, s2, out in (((2, 3), (2, 3, 1), (2, 3, 1)), ((2, 3), (3, 2), (3, 3)),
                        ((2, 1), (1, 3), (2, 1))):
        b = GraphBuilder()
        x, y = b.input("x", s1, "INT32"), b.input("y", s2, "INT32")
        o = b.op("ADD", [x, y], out, "INT32")
        with pytest.raises(tosa_jax.TosaValidationError, match="ADD"):  # refused at load
            model = tosa_jax.load(tosa_jax.write(b.build([o])))
            model(np.zeros(s1, np.int32), np.zeros(s2, np.int32))
