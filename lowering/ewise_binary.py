"""Elementwise binary operators (spec chapter "Elementwise Binary Operators").

Integer arithmetic is done in int32 (after sign extension, as the pseudocode's int32/int64
intermediates) and narrowed to the declared element type at the end, so results do not depend on
``jax_enable_x64``. Broadcasting follows broadcast_shape: equal ranks, dimensions of 1 stretch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.ir import INT_BITS
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import (
    Wide,
    add_overflows,
    apply_lookup_s,
    apply_max_s,
    apply_min_s,
    as_i32,
    as_wide,
    gather_indices,
    is_host,
    lax_binary,
    lookup_slope_overflows,
    lx,
    mul_shift_overflows,
    require,
    requiring,
    rounding_mul_shift,
    same_aval,
    wide_add,
    wide_add_overflows,
    wide_bitwise,
    wide_broadcast,
    wide_divide,
    wide_is_min,
    wide_lt,
    wide_mul64,
    wide_select,
    wide_shl_var,
    wide_sra,
    wide_srl_var,
    wide_sub,
    wrap_cast,
)


def _wide2(node: Node, input1: Any, input2: Any) -> tuple[Wide, Wide] | None:
    """TOSA 1.1 EXT-INT64: both operands as broadcast ``Wide`` pairs; None for other types."""
    if node.inputs[0].dtype != "INT64":
        return None
    a, b = wide_broadcast(as_wide(input1), as_wide(input2))
    return a, b


def _shift_amount(w: Wide) -> Any:
    """An INT64 shift amount as int32: its low word (REQUIRE(0 <= value2 < 64) reported)."""
    if requiring():
        require("shift", (w.hi != 0) | (w.lo >= 64))
    return lax.bitcast_convert_type(w.lo, jnp.int32) & 63


def _shift_in_range(node: Node, amount: Any) -> None:
    """REQUIRE(0 <= value2 < width) of the shift operators (8-, 16- and 32-bit types)."""
    bits = INT_BITS.get(node.inputs[0].dtype, 0)
    if requiring() and bits <= 32:
        require("shift", (amount < 0) | (amount >= bits))


def _may_overflow(node: Node, sub: bool = False) -> bool:
    """Whether an int32 ADD (SUB) may overflow: not where both inputs' proven ranges
    (tosa_jax.ranges) keep every sum (difference) in int32, as after 8-bit RESCALEs."""
    ranges = node.input_range(0), node.input_range(1)
    if None in ranges:
        return True
    (a_lo, a_hi), (b_lo, b_hi) = ranges  # type: ignore[misc]
    lo, hi = (a_lo - b_hi, a_hi - b_lo) if sub else (a_lo + b_lo, a_hi + b_hi)
    return lo < -(1 << 31) or hi > (1 << 31) - 1


def _mul32(input1: Any, input2: Any) -> Any:
    """int32 product (modulo 2**32) of operands sign-extended to int32."""
    a, b = as_i32(input1), as_i32(input2)
    if same_aval(a, b):
        return lax.mul(a, b)
    out = lax_binary(lax.mul, a, b)
    return out if out is not None else jnp.multiply(a, b)


@lowering("ADD")
def add(node: Node, input1: Any, input2: Any) -> Any:
    """apply_add_s: integer overflow is a REQUIRE failure, so two's-complement wrap is exact."""
    if (w := _wide2(node, input1, input2)) is not None:
        if requiring():
            require("add", wide_add_overflows(*w))
        return wide_add(*w)
    if requiring() and node.inputs[0].dtype == "INT32" and _may_overflow(node):
        require("add", add_overflows(input1, input2))
    if same_aval(input1, input2):
        return lax.add(input1, input2)
    out = lax_binary(lax.add, input1, input2)
    return out if out is not None else jnp.add(input1, input2).astype(jnp.asarray(input1).dtype)


@lowering("SUB")
def sub(node: Node, input1: Any, input2: Any) -> Any:
    """apply_sub_s: as ADD, overflow is a REQUIRE failure and wrapping is exact otherwise."""
    if (w := _wide2(node, input1, input2)) is not None:
        if requiring():
            require("sub", wide_add_overflows(*w, sub=True))
        return wide_sub(*w)
    if requiring() and node.inputs[0].dtype == "INT32" and _may_overflow(node, sub=True):
        require("sub", add_overflows(input1, input2, sub=True))
    if same_aval(input1, input2):
        return lax.sub(input1, input2)
    out = lax_binary(lax.sub, input1, input2)
    return out if out is not None else (
        jnp.subtract(input1, input2).astype(jnp.asarray(input1).dtype))


@lowering("ARITHMETIC_RIGHT_SHIFT")
def arithmetic_right_shift(node: Node, input1: Any, input2: Any, *, round: bool) -> Any:
    t = node.out.dtype
    if (w := _wide2(node, input1, input2)) is not None:
        a, s = w[0], _shift_amount(w[1])
        result = wide_sra(a, s)
        if round:
            last = wide_sra(a, jnp.maximum(s - 1, 0)).lo & 1
            result = wide_add(result, Wide(jnp.zeros_like(result.hi),
                                           jnp.where(s > 0, last, 0).astype(jnp.uint32)))
        return result
    # apply_arith_rshift: sign-extend both operands to int32 and shift (value2 is REQUIRE'd to
    # lie in [0, width - 1]).
    value1, value2 = as_i32(input1), as_i32(input2)
    _shift_in_range(node, value2)
    result = value1 >> value2
    if round:
        # Add the last bit shifted out: bit (value2 - 1) of value1, when value2 > 0.
        # The sum cannot overflow: with value2 > 0 the shifted result is below the type maximum.
        last_out = (value1 >> jnp.maximum(value2 - 1, 0)) & 1
        result = result + jnp.where(value2 > 0, last_out, 0)
    return wrap_cast(result, t)


def _bitwise(node: Node, input1: Any, input2: Any, op: Callable[[Any, Any], Any]) -> Any:
    """op on each bit; INT64 (a Wide pair) word by word."""
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_bitwise(*w, op)
    return op(input1, input2)


@lowering("BITWISE_AND")
def bitwise_and(node: Node, input1: Any, input2: Any) -> Any:
    return _bitwise(node, input1, input2, jnp.bitwise_and)


@lowering("BITWISE_OR")
def bitwise_or(node: Node, input1: Any, input2: Any) -> Any:
    return _bitwise(node, input1, input2, jnp.bitwise_or)


@lowering("BITWISE_XOR")
def bitwise_xor(node: Node, input1: Any, input2: Any) -> Any:
    return _bitwise(node, input1, input2, jnp.bitwise_xor)


@lowering("INTDIV")
def intdiv(node: Node, input1: Any, input2: Any) -> Any:
    """apply_intdiv_s: C division, truncating toward zero (lax.div, not floor_divide).
    value2 == 0 and INT32_MIN / -1 (INT64_MIN / -1) are REQUIRE failures."""
    if (w := _wide2(node, input1, input2)) is not None:
        if requiring():
            a, b = w
            require("div_zero", (b.hi == 0) & (b.lo == 0))
            require("div_range", wide_is_min(a) & (b.hi == -1) & (b.lo == np.uint32(0xFFFFFFFF)))
        return wide_divide(*w)
    if requiring():
        require("div_zero", input2 == 0)
        require("div_range", (input1 == np.iinfo(np.int32).min) & (input2 == -1))
    return lax.div(*jnp.broadcast_arrays(as_i32(input1), as_i32(input2)))


@lowering("LOGICAL_AND")
def logical_and(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.logical_and(input1, input2)


@lowering("LOGICAL_OR")
def logical_or(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.logical_or(input1, input2)


@lowering("LOGICAL_XOR")
def logical_xor(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.logical_xor(input1, input2)


@lowering("LOGICAL_LEFT_SHIFT")
def logical_left_shift(node: Node, input1: Any, input2: Any) -> Any:
    """value1 << value2 in the element type: shift in int32, keep the type's low bits."""
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_shl_var(w[0], _shift_amount(w[1]))
    _shift_in_range(node, input2)
    return wrap_cast(as_i32(input1) << as_i32(input2), node.out.dtype)


@lowering("LOGICAL_RIGHT_SHIFT")
def logical_right_shift(node: Node, input1: Any, input2: Any) -> Any:
    """apply_logical_rshift: zero-extend value1 from the type's width to uint32, shift, and
    static_cast back (so an int8 -1 >> 1 is 127, not -1)."""
    t = node.out.dtype
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_srl_var(w[0], _shift_amount(w[1]))
    _shift_in_range(node, input2)
    value1 = as_i32(input1)
    if INT_BITS[t] < 32:
        value1 = value1 & ((1 << INT_BITS[t]) - 1)  # zero_extend: the type's bits, unsigned
    value1, value2 = jnp.broadcast_arrays(value1, as_i32(input2))
    return wrap_cast(lax.shift_right_logical(value1, value2), t)


@lowering("MAXIMUM")
def maximum(node: Node, input1: Any, input2: Any, *, nan_mode: str) -> Any:
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_select(wide_lt(w[0], w[1]), w[1], w[0])
    return apply_max_s(input1, input2, nan_mode)


@lowering("MINIMUM")
def minimum(node: Node, input1: Any, input2: Any, *, nan_mode: str) -> Any:
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_select(wide_lt(w[1], w[0]), w[1], w[0])
    return apply_min_s(input1, input2, nan_mode)


@lowering("MUL")
def mul(node: Node, input1: Any, input2: Any, shift: Any) -> Any:
    in_t = node.inputs[0].dtype
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_mul64(*w)  # shift is 0 for int64 (ERROR_IF): the low 64 bits
    if in_t == "INT32":
        if not isinstance(shift, np.ndarray):
            # EXT-DYNAMIC: the shift arrives at run time.
            s = jnp.asarray(shift).reshape(-1)[0]
            if requiring():
                require("mul", mul_shift_overflows(input1, input2, s))
            return rounding_mul_shift(input1, input2, s)
        s = int(constant(node, 2, shift).reshape(-1)[0])
        if requiring() and s > 0:
            require("mul", mul_shift_overflows(input1, input2, s))
        if s > 0:
            # int64 product, + (1 << (shift - 1)), >> shift: exact in 32-bit pairs. The result
            # is REQUIRE'd to fit int32.
            return rounding_mul_shift(input1, input2, s)
        return _mul32(input1, input2)  # low 32 bits of the product
    if in_t in ("INT8", "INT16"):
        # Sign-extend to the int32 output type first; the product fits exactly.
        return _mul32(input1, input2)
    # Floating point: shift is REQUIRE'd to be 0 and is not read.
    if same_aval(input1, input2):
        return lax.mul(input1, input2)
    out = lax_binary(lax.mul, input1, input2)
    return out if out is not None else (
        jnp.multiply(input1, input2).astype(jnp.asarray(input1).dtype))


@lowering("POW")
def pow(node: Node, input1: Any, input2: Any) -> Any:
    """apply_pow (floating point only)."""
    if requiring():
        x, y = (np.asarray(v, np.float32) if is_host(v) else v for v in (input1, input2))
        xp = np if is_host(input1, input2) else jnp
        require("pow_negative", x < 0)
        require("pow_zero", (x == 0) & (y <= 0))
        require("pow_nan", xp.isnan(x) | xp.isnan(y))
        require("pow_finite", xp.isinf(x) | xp.isinf(y))
    dtype = jnp.asarray(input1).dtype
    compute = jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype
    return jnp.power(jnp.asarray(input1, compute), jnp.asarray(input2, compute)).astype(dtype)


@lowering("TABLE")
def table(node: Node, input1: Any, table: Any) -> Any:
    # EXT-DYNAMIC: the table may be computed at run time; the lookup is the same gather
    values = table if not isinstance(table, np.ndarray) else constant(node, 1, table)
    in_t = node.inputs[0].dtype
    if in_t == "INT8":
        # result = table[value + 128]: a 256-entry gather (lax: jnp.take costs ~1 ms to trace);
        # the kernel of its own (gather_indices) holds the int8 value, a quarter of the bytes
        # of the int32 index, which the gather's loop computes (unet_int8's 98,304-element
        # lookups 23 -> ~6 us; batch 1 1.38-1.39 -> 1.35-1.37 ms, 2026-11-28)
        index = lx(lax.add, as_i32(gather_indices(input1)), 128)
        index = lax.expand_dims(index, (jnp.ndim(input1),))
        dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                          start_index_map=(0,))
        values = (np.asarray(values, np.int8) if is_host(values)  # (jnp.asarray: ~0.3 ms)
                  else jnp.asarray(values, jnp.int8))
        return lax.gather(values, index, dims, (1,), mode=lax.GatherScatterMode.CLIP)
    # int16: 513-entry table, 9.7 fixed-point index with interpolation -> int32.
    # (in a rolled loop's step a table fed per step is traced; its values in every step are
    # known: when no step's table has a slope out of range, nothing to check)
    steps = None if is_host(values) else node.step_values(1)
    if requiring() and (steps is None or lookup_slope_overflows(steps, None) is not False):
        require("table_slope", lookup_slope_overflows(values, input1))
    return apply_lookup_s(values, input1)
