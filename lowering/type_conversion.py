"""Type conversion (spec chapter "Type Conversion"): CAST, RESCALE."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import (
    Wide,
    apply_scale_16,
    apply_scale_32,
    as_i32,
    saturate_cast,
    wide,
    wide_sub,
)

from tosa_jax.errors import TosaValidationError


@lowering("RESCALE")
def rescale(node: Node, input: Any, multiplier: Any, shift: Any, input_zp: Any, output_zp: Any,
            *, scale32: bool, rounding_mode: str, per_channel: bool, input_unsigned: bool,
            output_unsigned: bool) -> Any:
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    multiplier = constant(node, 1, multiplier).astype(np.int32).reshape(-1)
    shift = constant(node, 2, shift).astype(np.int32).reshape(-1)
    in_zp = int(constant(node, 3, input_zp).reshape(-1)[0])
    out_zp = int(constant(node, 4, output_zp).reshape(-1)[0])
    if scale32 and in_t == "INT48":
        raise TosaValidationError("RESCALE: ERROR_IF(scale32 && in_t == i48_t)")
    if not scale32 and rounding_mode == "DOUBLE_ROUND":
        raise TosaValidationError("RESCALE: ERROR_IF(!scale32 && rounding_mode == DOUBLE_ROUND)")
    if not per_channel:
        multiplier, shift = multiplier[:1], shift[:1]

    # Extend the input and its zero point to 48 bits (unsigned: zero-extend) and subtract.
    if input_unsigned:
        mask = (1 << {"INT8": 8, "INT16": 16}[in_t]) - 1
        in_zp &= mask
        value = as_i32(input) & mask
    elif in_t == "INT48":
        value = input
    else:
        value = as_i32(input)
    if output_unsigned:
        out_zp &= (1 << {"INT8": 8, "INT16": 16}[out_t]) - 1

    if isinstance(value, Wide):
        result = apply_scale_16(wide_sub(value, wide(jnp.int32(in_zp))), multiplier, shift)
    else:
        value = value - in_zp  # fits int32: only 8/16-bit inputs have zero points
        result = (apply_scale_32(value, multiplier, shift, rounding_mode == "DOUBLE_ROUND")
                  if scale32 else apply_scale_16(wide(value), multiplier, shift))

    result = result + out_zp
    if output_unsigned:
        bits = {"INT8": 8, "INT16": 16}[out_t]
        result = jnp.clip(result, 0, (1 << bits) - 1)
        # The unsigned value's bit pattern, stored in the signed type of the same width.
        return (result - jnp.where(result >= 1 << (bits - 1), 1 << bits, 0)).astype(
            jnp.int8 if bits == 8 else jnp.int16)
    return saturate_cast(result, out_t)


