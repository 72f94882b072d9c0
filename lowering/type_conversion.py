"""Type conversion (spec chapter "Type Conversion"): CAST, RESCALE; TOSA 1.1's
CAST_TO_BLOCK_SCALED and CAST_FROM_BLOCK_SCALED (microscaling, numerics.py's block helpers)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.errors import TosaUnsupportedError
from tosa_jax.ir import FLOAT_TYPES, INT_BITS, TYPES_1_1, WIDE_TYPES, BlockScaled
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import (
    DEVICE_DTYPES,
    INT_RANGES,
    Wide,
    apply_scale_16,
    apply_scale_32,
    apply_scale_host,
    as_i32,
    bitcast_u32,
    block_dequantize,
    block_scale_exponent,
    is_host,
    lx,
    require,
    requiring,
    saturate_cast,
    scale_overflows,
    times_2_64,
    times_pow2,
    to_block_value,
    wide,
    wide_low32,
    wide_sub,
    wide_to_numpy,
    wrap_cast,
)


def _int32_operand(node: Node, index: int, value: Any) -> Any:
    """Input ``index`` as a flat int32 vector: a numpy constant, or under EXT-DYNAMIC a value
    computed at run time (multiplier, shift and zero points may all be run-time tensors)."""
    if isinstance(value, np.ndarray) or (isinstance(value, Wide)
                                         and isinstance(value.hi, np.ndarray)):
        return constant(node, index, value).astype(np.int32).reshape(-1)
    return as_i32(value).reshape(-1)


@lowering("RESCALE")
def rescale(node: Node, input: Any, multiplier: Any, shift: Any, input_zp: Any, output_zp: Any,
            *, scale32: bool, rounding_mode: str, per_channel: bool, input_unsigned: bool,
            output_unsigned: bool) -> Any:
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    multiplier = _int32_operand(node, 1, multiplier)
    shift = _int32_operand(node, 2, shift)
    in_zp = _int32_operand(node, 3, input_zp)[0]
    out_zp = _int32_operand(node, 4, output_zp)[0]
    if isinstance(in_zp, np.generic) and isinstance(out_zp, np.generic):  # constants
        in_zp, out_zp = int(in_zp), int(out_zp)
    # In a rolled loop's step, scales and zero points fed per step are traced; the values they
    # take in the steps are known (the unrolled graph's constants).
    known = [v if is_host(v) else node.step_values(i)
             for i, v in ((1, multiplier), (2, shift), (3, in_zp))]
    if not per_channel:  # one scale for the tensor: a scalar, so rank-0 inputs stay rank 0
        multiplier, shift = multiplier[0], shift[0]
        known[:2] = [None if k is None else np.asarray(k)[..., 0] for k in known[:2]]
    scales = None if known[0] is None or known[1] is None else (known[0], known[1])

    if requiring() and rounding_mode != "INEXACT_ROUND":
        # (the reference model computes INEXACT_ROUND in floating point, without apply_scale
        # and its REQUIREs; so does the check: none). Before the constant path: a constant
        # input's REQUIREs count too.
        _require_scale(node, input, multiplier, shift, in_zp, scale32, input_unsigned, scales)

    if isinstance(in_zp, int) and is_host(*(input if isinstance(input, Wide) else (input,)),
                                          multiplier, shift):
        # A constant input (a bias, a constant subgraph): computed now with numpy, once.
        host = _rescale_host(node, input, multiplier, shift, in_zp, out_zp, scale32,
                             rounding_mode, input_unsigned, output_unsigned)
        if host is not None:
            return host

    # Extend the input and its zero point to 48 bits (unsigned: zero-extend) and subtract.
    if input_unsigned:
        mask = (1 << INT_BITS[in_t]) - 1
        in_zp &= mask
        value = as_i32(input) & mask
    elif in_t == "INT48" and not _fits_int32(node.input_range(0), in_zp):
        value = input
    else:  # (an int48 accumulator proven to fit int32, tosa_jax.ranges: its low word)
        value = wide_low32(input) if isinstance(input, Wide) else as_i32(input)
    if output_unsigned:
        out_zp &= (1 << INT_BITS[out_t]) - 1

    if isinstance(value, Wide):
        result = apply_scale_16(wide_sub(value, wide(jnp.asarray(in_zp, jnp.int32))),
                                multiplier, shift)
    else:
        if not isinstance(in_zp, int) or in_zp:  # fits int32: only 8/16-bit inputs have one
            value = lx(lax.sub, value, in_zp)
        narrow = 10 if in_t in ("INT8", "INT4") else 32  # |value - zp| <= 255 for 8 bits
        # apply_scale_16 of an int32 value is apply_scale_32's arithmetic with single
        # rounding (a 16-bit multiplier): its short exact forms apply. A constant output zero
        # point is added with the round, where it fits.
        result = apply_scale_32(value, multiplier, shift,
                                scale32 and rounding_mode == "DOUBLE_ROUND", value_bits=narrow,
                                value_range=_value_range(in_t, known[2], input_unsigned,
                                                         node.input_range(0)), known=scales,
                                out_zp=out_zp if isinstance(out_zp, int) else 0)
        if isinstance(out_zp, int):
            out_zp = 0

    if not isinstance(out_zp, int) or out_zp:
        result = lx(lax.add, result, out_zp)
    if output_unsigned:
        bits = INT_BITS[out_t]
        result = jnp.clip(result, 0, (1 << bits) - 1)
        # The unsigned value's bit pattern, stored in the signed type of the same width.
        return (result - jnp.where(result >= 1 << (bits - 1), 1 << bits, 0)).astype(
            jnp.int8 if bits == 8 else jnp.int16)
    return saturate_cast(result, out_t)




def _require_scale(node: Node, input: Any, multiplier: Any, shift: Any, in_zp: Any,
                   scale32: bool, input_unsigned: bool,
                   known: tuple[np.ndarray, np.ndarray] | None) -> None:
    """apply_scale_32/16's REQUIREs: multiplier >= 0, 2 <= shift <= 62, and the value (the
    input less its zero point) small enough for the shift (32) or the result within int32
    (16). ``known``: the multipliers and shifts of every step, where a rolled loop's step
    reads them traced (decided now, as constants are)."""
    if known is not None and not is_host(multiplier, shift):
        require("multiplier", known[0] < 0)
        require("scale_shift", (known[1] < 2) | (known[1] > 62))
        static = known
    else:
        require("multiplier", multiplier < 0)
        require("scale_shift", (shift < 2) | (shift > 62))
        static = (multiplier, shift) if is_host(multiplier, shift) else None
    # No value of the input's proven range (else its type's), less a constant zero point, can
    # break the REQUIRE: nothing to check (int8 inputs and the usual shifts; int48 accumulators
    # of a known range)
    lo, hi = node.input_range(0) or INT_RANGES[node.inputs[0].dtype]
    zp = in_zp
    if input_unsigned:
        lo, hi = 0, (1 << INT_BITS[node.inputs[0].dtype]) - 1
        zp = in_zp & hi if isinstance(in_zp, int) else in_zp
    if static is not None and isinstance(zp, int) and np.size(static[1]):
        s = np.clip(np.asarray(static[1], np.int64), 2, 62)
        if scale32:
            bound = 1 << (int(s.min()) - 1)
            if -bound <= lo - zp and hi - zp < bound:
                return
        else:  # apply_scale_16: (value * multiplier + round) >> shift, extremes per channel
            m = np.clip(np.asarray(static[0], np.int64), 0, (1 << 15) - 1)
            ends = [(v * m + (np.int64(1) << (s - 1))) >> s for v in (lo - zp, hi - zp)]
            if all(-(1 << 31) <= e.min() and e.max() <= (1 << 31) - 1 for e in ends):
                return
    if isinstance(input, Wide):  # int48: its zero point is 0 (ERROR_IF)
        value = input
    elif input_unsigned:
        mask = (1 << INT_BITS[node.inputs[0].dtype]) - 1
        value = (np.asarray(input).astype(np.int64) & mask if is_host(input)
                 else as_i32(input) & mask) - (in_zp & mask)
    elif is_host(input, in_zp):
        value = np.asarray(input).astype(np.int64) - np.asarray(in_zp).astype(np.int64)
    else:  # an 8/16-bit value less its zero point, or an int32 value (zero point 0)
        value = as_i32(input) - in_zp if not isinstance(in_zp, int) or in_zp else input
    require("scale_value" if scale32 else "scale_result",
            scale_overflows(value, multiplier, shift, scale32))


def _fits_int32(proven: tuple[int, int] | None, in_zp: Any) -> bool:
    """An int48 value proven to lie in int32, less a zero point known to be 0 (as the spec
    requires of int48 inputs)."""
    lo, hi = INT_RANGES["INT32"]
    return (proven is not None and isinstance(in_zp, int) and in_zp == 0
            and lo <= proven[0] and proven[1] <= hi)


def _value_range(in_t: str, in_zp: Any, input_unsigned: bool,
                 proven: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The range of RESCALE's value - input_zp for a known zero point (every value it takes, in
    a rolled loop; apply_scale_32 then takes a shorter exact form): the input type's range, or
    the narrower range ``proven`` for the input (tosa_jax.ranges: an int32 accumulator, say);
    None where neither is known."""
    if in_zp is None or in_t not in ("INT4", "INT8", "INT16", "INT32", "INT48"):
        return None
    zps = np.asarray(in_zp).astype(np.int64)
    if input_unsigned:
        lo, hi = 0, (1 << INT_BITS[in_t]) - 1
        zps = zps & hi
    elif proven is not None:
        lo, hi = proven
    elif in_t in ("INT32", "INT48"):
        return None
    else:
        lo, hi = INT_RANGES[in_t]
    return lo - int(zps.max()), hi - int(zps.min())


def _rescale_host(node: Node, input: Any, multiplier: np.ndarray, shift: np.ndarray,
                  in_zp: int, out_zp: int, scale32: bool, rounding_mode: str,
                  input_unsigned: bool, output_unsigned: bool) -> np.ndarray | None:
    """RESCALE of a constant input, step for step as the traced form but in numpy int64 (no
    XLA program runs while tracing); None where the traced form must decide (odd shifts)."""
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    value = (wide_to_numpy(input) if isinstance(input, Wide)
             else np.asarray(input).astype(np.int64))
    if input_unsigned:
        mask = (1 << INT_BITS[in_t]) - 1
        value, in_zp = value & mask, in_zp & mask
    result = apply_scale_host(value - in_zp, multiplier, shift, scale32,
                              rounding_mode == "DOUBLE_ROUND")
    if result is None:
        return None
    if output_unsigned:
        bits = INT_BITS[out_t]
        result = np.clip(result.astype(np.int64) + (out_zp & ((1 << bits) - 1)), 0,
                         (1 << bits) - 1)
        result = result - np.where(result >= 1 << (bits - 1), 1 << bits, 0)
        return result.astype(np.int8 if bits == 8 else np.int16)
    lo, hi = INT_RANGES[out_t]
    return np.clip(result.astype(np.int64) + out_zp, lo, hi).astype(
        np.dtype(DEVICE_DTYPES[out_t]))


# CAST converts between the TOSA 1.0 float types; TOSA 1.1's block-scaled types (a BlockScaled
# value, ``Tensor.block_scaled``) are cast to and from floats per block, as the block casts do.
_FLOATS = tuple(t for t in FLOAT_TYPES if t not in TYPES_1_1)


def _int32_to_bf16(x: Any) -> Any:
    """round_to_nearest_float of int32 to bf16, rounding once.

    XLA converts s32 -> f32 -> bf16, which rounds twice (2^30 + 2^22 + 1 lands on a bf16 tie
    after the first rounding and then goes to even, down). Instead keep the top 24 significant
    bits and OR every dropped bit into the lowest kept one ("round to odd"): that value is exact
    in f32 and rounds to bf16 (8 bits, <= 24 - 2) as the exact integer would.
    """
    x = as_i32(x)
    mag = bitcast_u32(jnp.where(x < 0, -x, x))  # |x| as uint32: exact for -2^31 too
    drop = jnp.maximum(0, 8 - lax.clz(mag).astype(jnp.int32)).astype(jnp.uint32)  # bits > 24
    low_mask = (jnp.uint32(1) << drop) - jnp.uint32(1)
    sticky = ((mag & low_mask) != 0).astype(jnp.uint32) << drop
    odd = (mag & ~low_mask) | sticky
    value = odd.astype(jnp.float32)
    return jnp.where(x < 0, -value, value).astype(jnp.bfloat16)


def _float_to_int(x: Any, out_t: str) -> Any:
    """truncate<out_t>(apply_clip_s<i32_t>(round_to_nearest_int(in), min(out_t), max(out_t)))."""
    lo, hi = INT_RANGES[out_t]
    r = jnp.round(jnp.asarray(x).astype(jnp.float32))  # half to even; exact for fp16/bf16 too
    if out_t != "INT32":
        # The int8/int16 bounds are exact in f32: clip there, then convert.
        return jnp.clip(r, float(lo), float(hi)).astype(DEVICE_DTYPES[out_t])
    # 2^31 - 1 is no f32: clip to the largest f32 below 2^31, and saturate r >= 2^31 by test.
    value = jnp.clip(r, float(lo), float((1 << 31) - 128)).astype(jnp.int32)
    return jnp.where(r >= float(1 << 31), jnp.int32(hi), value)


@lowering("CAST")
def cast(node: Node, input: Any) -> Any:
    """Convert each element from in_t to out_t as the spec's CAST pseudocode does."""
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    if node.out.block_scaled:
        # TOSA 1.1, is_block_scale<out_t>(): float -> block_scale_t, per block of the innermost
        # axis as CAST_TO_BLOCK_SCALED (the profile tables allow float inputs only).
        if in_t not in _FLOATS:
            raise TosaUnsupportedError(f"CAST from {in_t} to {node.out.type_name} is not supported")
        return BlockScaled(*_block_quantize(input, node.inputs[0].shape, out_t,
                                            node.out.block_size))
    if node.inputs[0].block_scaled:
        # TOSA 1.1: tensor_read of a block_scale_t gives access_elem_type, fp32: value * scale
        # (exact in f32), then out = round_to_nearest_float<out_t>(in), one rounding.
        if out_t not in _FLOATS:
            raise TosaUnsupportedError(
                f"CAST from {node.inputs[0].type_name} to {out_t} is not supported")
        x = block_dequantize(input.values, input.scales, in_t, node.inputs[0].block_size)
        return x.astype(DEVICE_DTYPES[out_t])
    if out_t == "BOOL":
        # out = (in != 0) ? true : false
        if isinstance(input, Wide):
            return (input.hi != 0) | (input.lo != 0)
        return jnp.asarray(input) != 0
    if out_t in _FLOATS:
        out_dtype = DEVICE_DTYPES[out_t]
        if in_t == "BOOL":
            return jnp.where(jnp.asarray(input), 1.0, 0.0).astype(out_dtype)
        if in_t == "INT32" and out_t == "BF16":
            return _int32_to_bf16(input)
        if in_t in _FLOATS or in_t in ("INT4", "INT8", "INT16", "INT32"):
            # int8/int16 are exact in f32; int32 -> fp16 rounds once (|x| >= 2^24 overflows
            # fp16 either way); float -> float: XLA's convert rounds to nearest even and
            # overflows to inf (NaN for fp8e4m3, which has no inf), as round_to_nearest_float.
            return jnp.asarray(input).astype(out_dtype)
        raise TosaUnsupportedError(f"CAST from {in_t} to {out_t} is not supported")
    if out_t not in INT_BITS:
        raise TosaUnsupportedError(f"CAST to {out_t} is not supported")
    # Conversion to integer cases.
    if in_t == "BOOL":
        # out = (in) ? 1 : 0
        value = jnp.asarray(input).astype(jnp.int32)
        return wide(value) if out_t in WIDE_TYPES else value.astype(DEVICE_DTYPES[out_t])
    if in_t in _FLOATS:
        if out_t in WIDE_TYPES:
            raise TosaUnsupportedError(f"CAST from {in_t} to {out_t} is not supported")
        return _float_to_int(input, out_t)
    if in_t not in INT_BITS:
        raise TosaUnsupportedError(f"CAST from {in_t} is not supported")
    if INT_BITS[out_t] >= INT_BITS[in_t]:
        # out = sign_extend<out_t>(in)
        if out_t in WIDE_TYPES:
            return input if isinstance(input, Wide) else wide(input)
        return jnp.asarray(input).astype(DEVICE_DTYPES[out_t])
    # out = truncate<out_t>(in): the low bits, two's complement.
    low = wide_low32(input) if isinstance(input, Wide) else jnp.asarray(input)
    return wrap_cast(low, out_t)


@lowering("CAST_TO_BLOCK_SCALED")
def cast_to_block_scaled(node: Node, input_data: Any, *, block_size: int) -> tuple[Any, Any]:
    """TOSA 1.1: per block of the innermost axis, scale = calc_block_scale(max |x|) and
    out = round_to_nearest_float(x / scale); returns (output_data, output_scale). (Shapes and
    block size: ERROR_IFs checked by profiles/.)"""
    return _block_quantize(input_data, node.inputs[0].shape, node.outputs[0].dtype, block_size)


def _block_quantize(input_data: Any, shape: tuple[int, ...], out_t: str,
                    block_size: int) -> tuple[Any, Any]:
    """(values, scales) of a float tensor cast to a block-scaled one of value type ``out_t``:
    per block, scale = calc_block_scale(tensor_block_maxabs) and
    value = round_to_nearest_float(in / scale) (CAST_TO_BLOCK_SCALED and CAST to block_scale_t
    share this pseudocode)."""
    x = jnp.asarray(input_data).astype(jnp.float32)
    blocks = x.reshape(shape[:-1] + (shape[-1] // block_size, block_size))
    # Blocks of tiny values (all below 2^-60, subnormals included) are worked on scaled by
    # 2^64, exactly: XLA's CPU arithmetic would read f32 subnormals as zero. In other blocks a
    # subnormal divided by the scale rounds to zero in every element type anyway.
    mag = lax.bitcast_convert_type(jnp.abs(blocks), jnp.uint32)  # bits: no subnormal flush
    tiny = jnp.all(mag < lax.bitcast_convert_type(jnp.float32(2.0 ** -60), jnp.uint32), axis=-1)
    work = jnp.where(tiny[..., None], times_2_64(blocks), blocks)
    max_abs = jnp.max(jnp.abs(work), axis=-1)  # NaN propagates (jnp.max does)
    special = jnp.isnan(max_abs) | jnp.isinf(max_abs)
    finite = jnp.where(special, jnp.float32(0), max_abs)
    k = block_scale_exponent(finite, out_t) - jnp.where(tiny, 64, 0)
    # max_abs == 0: normal_min<scale_t>() = 2^-127; the exponent range is [-127, 127]
    k = jnp.clip(jnp.where(finite == 0, -127, k), -127, 127)
    code = jnp.where(special, 255, k + 127).astype(jnp.uint8)
    scale = lax.bitcast_convert_type(code, jnp.float8_e8m0fnu)
    # in / scale: a multiplication by 2^-k (exact; NaN where the scale is NaN)
    # (a quotient below 2^-126 rounds to zero in every block type: its flush changes nothing)
    q = times_pow2(work, (-k - jnp.where(tiny, 64, 0))[..., None])
    q = jnp.where(special[..., None], jnp.float32(jnp.nan), q).reshape(shape)
    return to_block_value(q, out_t), scale


@lowering("CAST_FROM_BLOCK_SCALED")
def cast_from_block_scaled(node: Node, input_data: Any, input_scale: Any, *,
                           block_size: int) -> Any:
    """TOSA 1.1: out = round_to_nearest_float(fp32(x) * fp32(scale of its block)). (Shapes and
    block size: ERROR_IFs checked by profiles/.)"""
    return block_dequantize(input_data, input_scale, node.inputs[0].dtype,
                            block_size).astype(DEVICE_DTYPES[node.out.dtype])
