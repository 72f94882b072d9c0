"""Shape operators (spec chapter "Shape Operators"): CONST_SHAPE, and TOSA 1.1's EXT-SHAPE
operators DIM, ADD_SHAPE ... ASSERT_EQUAL_SHAPE.

Shapes are static in tosa_jax, so every shape_t value is known before tracing: these operators
compute on the host, on numpy int64 vectors (tensor_size_t is a signed 64-bit integer). The
ERROR_IFs on static lengths and constants are profiles/'; those on values that shape
expressions compute (SLICE_SHAPE's bounds, ASSERT_EQUAL_SHAPE's values) are raised as
``TosaValidationError`` here, while the graph is built, where the values are first known. A
REQUIRE that fails makes the result unpredictable; it is refused too, naming the rule (any
behaviour is allowed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tosa_jax.errors import TosaValidationError
from tosa_jax.lowering import Node, constant, lowering

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _shape(node: Node, index: int, value: Any) -> list[int]:
    """A shape_t input as Python ints (exact: no int64 wrap-around in the arithmetic)."""
    return [int(v) for v in np.asarray(constant(node, index, value)).reshape(-1)]


def _result(node: Node, values: list[int]) -> np.ndarray:
    for v in values:
        if not _I64_MIN <= v <= _I64_MAX:
            raise TosaValidationError(
                f"{node.op}: REQUIRE(result fits tensor_size_t) fails: {v} is out of int64 range")
    out = np.asarray(values, dtype=np.int64)
    if tuple(node.out.shape) != out.shape:
        raise TosaValidationError(f"{node.op}: output shape_t has length {node.out.shape}, the "
                                  f"operator gives {len(values)}")
    return out


def _require(node: Node, ok: bool, rule: str, detail: str) -> None:
    if not ok:
        raise TosaValidationError(f"{node.op}: REQUIRE({rule}) fails: {detail}")


def _error_if(node: Node, bad: bool, rule: str, detail: str) -> None:
    if bad:
        raise TosaValidationError(f"{node.op}: ERROR_IF({rule}): {detail}")


@lowering("CONST_SHAPE")
def const_shape(node: Node) -> np.ndarray:
    """A shape value: static by nature, so it stays numpy (int64 on the host)."""
    return node.out.data


@lowering("DIM")
def dim(node: Node, input1: Any, *, axis: int) -> np.ndarray:
    """output[0] = shape[axis] of the input tensor (its static shape)."""
    shape = node.inputs[0].shape
    _error_if(node, axis >= len(shape) or axis < 0, "axis >= rank(shape) || axis < 0",
              f"axis {axis} of a rank-{len(shape)} tensor")
    _require(node, shape[axis] > 0, "shape[axis] > 0", f"dimension {axis} is {shape[axis]}")
    return _result(node, [shape[axis]])


def _elementwise(node: Node, input1: Any, input2: Any,
                 fn: Callable[[int, int], int]) -> np.ndarray:
    a, b = _shape(node, 0, input1), _shape(node, 1, input2)  # equal lengths: profiles/
    return _result(node, [fn(x, y) for x, y in zip(a, b, strict=True)])


def _c_div(x: int, y: int) -> int:
    """C integer division (truncating toward zero), as apply_intdiv_s and the reference model.
    The pseudocode REQUIREs x >= 0 and y >= 1; where a graph breaks that, the result is
    unpredictable and this is the reference model's (y == 0 is refused: nothing to compute)."""
    if y == 0:
        raise TosaValidationError("REQUIRE(input2[index] >= 1) fails: division by zero")
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def _c_mod(x: int, y: int) -> int:
    """C remainder: x - y * (x / y), with the sign of x."""
    return x - y * _c_div(x, y)


@lowering("ADD_SHAPE")
def add_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, lambda x, y: x + y)


@lowering("SUB_SHAPE")
def sub_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, lambda x, y: x - y)


@lowering("MUL_SHAPE")
def mul_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, lambda x, y: x * y)


@lowering("DIV_FLOOR_SHAPE")
def div_floor_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, _c_div)


@lowering("DIV_CEIL_SHAPE")
def div_ceil_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2,
                        lambda x, y: _c_div(x, y) + (1 if _c_mod(x, y) else 0))


@lowering("MOD_SHAPE")
def mod_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, _c_mod)


@lowering("MAX_SHAPE")
def max_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, max)


@lowering("MIN_SHAPE")
def min_shape(node: Node, input1: Any, input2: Any) -> np.ndarray:
    return _elementwise(node, input1, input2, min)


@lowering("EXP2_SHAPE")
def exp2_shape(node: Node, input1: Any) -> np.ndarray:
    """output = 1 << input (REQUIRE(0 <= input < MAX_LOG2_SIZE): at most 63, the none level)."""
    out = []
    for x in _shape(node, 0, input1):
        _require(node, 0 <= x < 63, "0 <= input[index] < MAX_LOG2_SIZE", f"input is {x}")
        out.append(1 << x)
    return _result(node, out)


def _log2_floor(node: Node, x: int) -> int:
    _require(node, x >= 1, "input[index] >= 1", f"input is {x}")
    return x.bit_length() - 1


@lowering("LOG2_FLOOR_SHAPE")
def log2_floor_shape(node: Node, input1: Any) -> np.ndarray:
    return _result(node, [_log2_floor(node, x) for x in _shape(node, 0, input1)])


@lowering("LOG2_CEIL_SHAPE")
def log2_ceil_shape(node: Node, input1: Any) -> np.ndarray:
    out = []
    for x in _shape(node, 0, input1):
        f = _log2_floor(node, x)
        out.append(f + (0 if x == 1 << f else 1))
    return _result(node, out)


@lowering("CONCAT_SHAPE")
def concat_shape(node: Node, *inputs: Any) -> np.ndarray:
    """The shapes of the input list one after the other."""
    out: list[int] = []  # a non-empty list of non-empty shapes (ERROR_IFs: profiles/)
    for i, value in enumerate(inputs):
        out += _shape(node, i, value)
    return _result(node, out)


@lowering("SLICE_SHAPE")
def slice_shape(node: Node, input1: Any, start: Any, size: Any) -> np.ndarray:
    """input[start : start + size]; start and size are [1] int32 tensors."""
    shape = _shape(node, 0, input1)
    start_value = int(np.asarray(constant(node, 1, start)).reshape(-1)[0])
    size_value = int(np.asarray(constant(node, 2, size)).reshape(-1)[0])
    _error_if(node, size_value <= 0, "size_value <= 0", f"size is {size_value}")
    _error_if(node, start_value < 0, "start_value < 0", f"start is {start_value}")
    _error_if(node, start_value + size_value > len(shape),
              "start_value + size_value > length(input)",
              f"{start_value} + {size_value} > {len(shape)}")
    return _result(node, shape[start_value:start_value + size_value])


@lowering("ASSERT_EQUAL_SHAPE")
def assert_equal_shape(node: Node, input1: Any, input2: Any, *,
                       allow_broadcast: bool) -> tuple[()]:
    """No output: the graph is in error where the two shapes differ (or do not broadcast)."""
    a, b = _shape(node, 0, input1), _shape(node, 1, input2)  # equal lengths: profiles/
    for x, y in zip(a, b, strict=True):
        if allow_broadcast:
            # The pseudocode compares input2[index] with input[index], which names no
            # argument; read as input1[index]: the shapes broadcast.
            _error_if(node, x != 1 and y != 1 and y != x,
                      "input2[index] != 1 && input2[index] != input1[index]", f"{a} and {b}")
        else:
            _error_if(node, x != y, "input1[index] != input2[index]", f"{a} and {b}")
    return ()
