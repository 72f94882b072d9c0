"""Data layout operators against the reference model: CONCAT, PAD, RESHAPE, REVERSE, SLICE, TILE,
TRANSPOSE on bool/int8/int16/int32, runtime and CONST inputs, and their static ERROR_IFs."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check

RNG = np.random.default_rng(7)
NP = {"BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32}


def _random(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "BOOL":
        return RNG.integers(0, 2, shape).astype(np.bool_)
    info = np.iinfo(NP[dtype])
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(NP[dtype])




@pytest.mark.parametrize("dtype", ["BOOL", "INT8", "INT16", "INT32"])
def test_all_ops(reference, dtype: str) -> None:
    """Every operator of the chapter on one type, in one graph."""
    b = GraphBuilder()
    a = b.input("a", (2, 3, 4), dtype)
    c = b.input("c", (2, 1, 4), dtype)
    d = b.input("d", (2, 5, 4), dtype)
    pad_value = np.array([True] if dtype == "BOOL" else [-7], NP[dtype])
    outs = [
        # Three inputs of different sizes along the axis: the offsets of the spec's index2 walk.
        b.op("CONCAT", [a, c, d], (2, 9, 4), dtype, name="concat", axis=1),
        b.op("PAD", [a, b.const([1, 0, 0, 2, 3, 1], "SHAPE"), b.const(pad_value, dtype)],
             (3, 5, 8), dtype, name="pad"),
        b.op("RESHAPE", [a, b.const([4, 6], "SHAPE")], (4, 6), dtype, name="reshape"),
        b.op("REVERSE", [a], (2, 3, 4), dtype, name="reverse", axis=2),
        b.op("SLICE", [d, b.const([1, 2, 1], "SHAPE"), b.const([1, 3, 2], "SHAPE")], (1, 3, 2),
             dtype, name="slice"),
        b.op("TILE", [a, b.const([2, 1, 3], "SHAPE")], (4, 3, 12), dtype, name="tile"),
        # A 3-cycle: perms and its inverse differ, so a swapped reading would be caught.
        b.op("TRANSPOSE", [a], (4, 2, 3), dtype, name="transpose", perms=[2, 0, 1]),
    ]
    _check(reference, b, outs, {"a": _random((2, 3, 4), dtype), "c": _random((2, 1, 4), dtype),
                                "d": _random((2, 5, 4), dtype)})


def test_const_chain(reference) -> None:
    """CONST inputs stay constants through data layout (then feed arithmetic)."""
    b = GraphBuilder()
    x = b.input("x", (3, 2), "INT32")
    k = b.const(RNG.integers(-1000, 1000, (2, 3)).astype(np.int32), "INT32")
    kt = b.op("TRANSPOSE", [k], (3, 2), "INT32", perms=[1, 0])
    kr = b.op("REVERSE", [kt], (3, 2), "INT32", axis=0)
    out = b.op("ADD", [x, kr], (3, 2), "INT32", name="out")
    _check(reference, b, [out], {"x": _random((3, 2), "INT32")})


def _error(op: str, inputs: list[tuple[tuple[int, ...], str]], out: tuple[int, ...],
           consts: list[list[int]] = (), **attrs) -> None:
    b = GraphBuilder()
    names = [b.input(f"i{n}", s, t) for n, (s, t) in enumerate(inputs)]
    names += [b.const(c, "SHAPE") for c in consts]
    o = b.op(op, names, out, inputs[0][1], **attrs)
    args = {f"i{n}": np.zeros(s, NP[t]) for n, (s, t) in enumerate(inputs)}
    with pytest.raises(tosa_jax.TosaValidationError, match=op):  # refused at load
        model = tosa_jax.load(tosa_jax.write(b.build([o])))
        model.run(args)


def test_errors() -> None:
    _error("CONCAT", [((2, 3), "INT8"), ((3, 3), "INT8")], (5, 3), axis=1)
    _error("CONCAT", [((2, 3), "INT8")], (2, 3), axis=2)
    _error("RESHAPE", [((2, 3), "INT8")], (7,), [[7]])
    _error("REVERSE", [((2, 3), "INT8")], (2, 3), axis=2)
    _error("SLICE", [((4, 4), "INT8")], (2, 3), [[1, 2], [2, 3]])
    _error("TILE", [((2, 3), "INT8")], (4, 3), [[2, 2]])
    _error("TRANSPOSE", [((2, 3), "INT8")], (3, 2), perms=[0, 0])
