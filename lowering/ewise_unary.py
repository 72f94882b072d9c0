"""Elementwise unary operators (spec chapter "Elementwise Unary Operators").

Integer results are computed in int32 and narrowed to the declared type; floating-point
transcendental functions of fp16/bf16 are evaluated in fp32 and rounded once to the type.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import (
    INT_RANGES,
    as_i32,
    as_wide,
    count_leading_zeros,
    float_compute,
    require,
    requiring,
    saturate_cast,
    wide_abs,
    wide_clz,
    wide_is_min,
    wide_neg,
)


@lowering("ABS")
def abs(node: Node, input1: Any) -> Any:
    """Negative values become apply_sub_s(0, value) (INT32_MIN is a REQUIRE failure); for
    floating point -0.0 becomes +0.0, as jnp.abs does."""
    if node.out.dtype == "INT64":
        w = as_wide(input1)
        if requiring():
            require("negate", wide_is_min(w))
        return wide_abs(w)
    if requiring() and node.out.dtype == "INT32":
        require("negate", input1 == np.iinfo(np.int32).min)
    return jnp.abs(input1)


@lowering("BITWISE_NOT")
def bitwise_not(node: Node, input1: Any) -> Any:
    if node.out.dtype == "INT64":
        w = as_wide(input1)
        return type(w)(~w.hi, ~w.lo)
    return jnp.invert(input1)


@lowering("CEIL")
def ceil(node: Node, input1: Any) -> Any:
    return jnp.ceil(input1)


@lowering("CLZ")
def clz(node: Node, input1: Any) -> Any:
    """count_leading_zeros on int32 (32 for zero); on int64 (64 for zero)."""
    if node.out.dtype == "INT64":
        return wide_clz(as_wide(input1))
    return count_leading_zeros(input1)


@lowering("COS")
def cos(node: Node, input1: Any) -> Any:
    return float_compute(jnp.cos, input1)


@lowering("EXP")
def exp(node: Node, input1: Any) -> Any:
    return float_compute(jnp.exp, input1)


@lowering("FLOOR")
def floor(node: Node, input1: Any) -> Any:
    return jnp.floor(input1)


@lowering("LOG")
def log(node: Node, input1: Any) -> Any:
    """apply_log: -inf for 0, NaN for negative inputs (as jnp.log)."""
    return float_compute(jnp.log, input1)


@lowering("LOGICAL_NOT")
def logical_not(node: Node, input1: Any) -> Any:
    return jnp.logical_not(input1)


@lowering("NEGATE")
def negate(node: Node, input1: Any, input1_zp: Any, output_zp: Any) -> Any:
    t = node.out.dtype
    if t == "INT64":  # zero points are 0 (ERROR_IF, profiles/); negating INT64_MIN: REQUIRE
        w = as_wide(input1)
        if requiring():
            require("negate", wide_is_min(w))
        return wide_neg(w)
    if requiring() and t == "INT32":  # zero points are 0: only 0 - INT32_MIN overflows
        require("negate", input1 == np.iinfo(np.int32).min)
    if t not in INT_RANGES and not isinstance(input1_zp, np.ndarray):
        # EXT-DYNAMIC: run-time zero points; for floating point they must be 0 (ERROR_IF).
        input1_zp = np.zeros(1, np.float32)
    if t not in INT_RANGES and not isinstance(output_zp, np.ndarray):
        output_zp = np.zeros(1, np.float32)
    if t in INT_RANGES and not (isinstance(input1_zp, np.ndarray)
                                and isinstance(output_zp, np.ndarray)):
        # EXT-DYNAMIC: run-time integer zero points (non-zero only for int8, by ERROR_IF)
        in_zp = as_i32(jnp.asarray(input1_zp).reshape(-1)[0])
        out_zp = as_i32(jnp.asarray(output_zp).reshape(-1)[0])
        return saturate_cast((0 - (as_i32(input1) - in_zp)) + out_zp, t)
    in_zp = constant(node, 1, input1_zp).reshape(-1)[0]
    out_zp = constant(node, 2, output_zp).reshape(-1)[0]
    if t not in INT_RANGES:
        # Floating point (zero points are 0): acc_t is the type itself.
        x = jnp.asarray(input1)
        return (jnp.zeros((), x.dtype) - (x - in_zp.astype(x.dtype))) + out_zp.astype(x.dtype)
    # acc_t is int32: sign-extend, subtract the input zero point, negate, add the output zero
    # point (for int8 all of this stays within +-383), then clip to the type's range. For int16
    # that clip maps -(-32768) to 32767; for int32 negating INT32_MIN is a REQUIRE failure.
    value = as_i32(input1) - int(in_zp)
    value = 0 - value
    value = value + int(out_zp)
    return saturate_cast(value, t)


@lowering("RECIPROCAL")
def reciprocal(node: Node, input1: Any) -> Any:
    return float_compute(lambda x: 1.0 / x, input1)


@lowering("RSQRT")
def rsqrt(node: Node, input1: Any) -> Any:
    """1 / sqrt(value); NaN for negative values (lax.rsqrt gives NaN there too)."""
    return float_compute(lax.rsqrt, input1)


@lowering("SIN")
def sin(node: Node, input1: Any) -> Any:
    return float_compute(jnp.sin, input1)
