"""Data layout (spec chapter "Data Layout"): CONCAT, PAD, RESHAPE, REVERSE, SLICE, TILE, TRANSPOSE.

These operators only move elements, so every element type is exact by construction. Values of
any type pass through: INT48 ``Wide`` pairs move both words; a TOSA 1.1 block-scaled tensor
(``BlockScaled``) moves its values and its scales together (CONCAT, RESHAPE, REVERSE: every
ERROR_IF in profiles/ keeps the innermost axis a multiple of the block size, so the blocks of 32
values along it stay whole and each scale moves with its block). Compile-time constants (numpy
arrays, e.g. a CONST being reshaped or transposed) stay numpy, so an operator further on can
still read the result with ``constant``; traced values use ``jax.numpy``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.ir import BlockScaled
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import Wide, stops_reshapes


def _is_host(value: Any) -> bool:
    """True for a compile-time constant (numpy, or a Wide / BlockScaled of numpy arrays)."""
    if isinstance(value, BlockScaled):
        return _is_host(value.values) and _is_host(value.scales)
    return isinstance(value.hi if isinstance(value, Wide) else value, np.ndarray)


def _xp(*values: Any) -> Any:
    """numpy when every value is a host constant, else jax.numpy."""
    return np if all(_is_host(v) for v in values) else jnp


def _apply(value: Any, f: Callable[[Any], Any]) -> Any:
    """Apply a data-movement function to a value (both words of a Wide)."""
    return value.map(f) if isinstance(value, Wide) else f(value)


def _ints(node: Node, index: int, value: Any) -> list[int]:
    """A SHAPE constant input as Python ints (nothing int64 reaches traced arithmetic)."""
    return [int(v) for v in constant(node, index, value).reshape(-1)]


@lowering("CONCAT")
def concat(node: Node, *input1: Any, axis: int) -> Any:
    """Join the input list along ``axis``; output position p reads input t at p - sum(dims < t)."""
    xp = _xp(*input1)
    if isinstance(input1[0], BlockScaled):
        # Whole blocks: the scales join along the same axis (the innermost one included, each
        # input's innermost dimension being a multiple of the block size).
        return BlockScaled(xp.concatenate([v.values for v in input1], axis=axis),
                           xp.concatenate([v.scales for v in input1], axis=axis))
    if isinstance(input1[0], Wide):
        return Wide(xp.concatenate([v.hi for v in input1], axis=axis),
                    xp.concatenate([v.lo for v in input1], axis=axis))
    return xp.concatenate(list(input1), axis=axis)


@lowering("PAD")
def pad(node: Node, input1: Any, padding: Any, pad_const: Any) -> Any:
    """Surround ``input1`` with ``pad_const``: padding[2i] before and padding[2i+1] after axis i."""
    padding = _ints(node, 1, padding)
    widths = [(padding[2 * i], padding[2 * i + 1]) for i in range(len(node.out.shape))]
    xp = _xp(input1, pad_const)

    def pad_one(x: Any, value: Any) -> Any:
        # pad_const is a one-element tensor of in_out_t (traced or constant).
        value = xp.reshape(value, (-1,))[0].astype(x.dtype)
        return xp.pad(x, widths, mode="constant", constant_values=value)

    if isinstance(input1, Wide):
        return Wide(pad_one(input1.hi, pad_const.hi), pad_one(input1.lo, pad_const.lo))
    return pad_one(input1, pad_const)


@lowering("RESHAPE")
@stops_reshapes
def reshape(node: Node, input1: Any, shape: Any) -> Any:
    """Same elements in the same (row-major) order under a new shape."""
    out_shape = node.out.shape  # equal to the shape input (ERROR_IF: profiles/)
    xp = _xp(input1)
    if isinstance(input1, BlockScaled):
        # Both innermost dimensions are multiples of the block size: the row-major order of
        # the blocks is kept, so the scales take the output's scale shape in the same order.
        return BlockScaled(xp.reshape(input1.values, out_shape),
                           xp.reshape(input1.scales, node.out.scale_shape))
    return _apply(input1, lambda x: xp.reshape(x, out_shape))


@lowering("RESHAPE_BLOCK_SCALED")
def reshape_block_scaled(node: Node, *inputs: Any, block_size: int) -> Any:
    """TOSA 1.1: RESHAPE of a value tensor and, when block-scaled, of its scale tensor, whose
    innermost dimension follows the values' divided by block_size. Inputs: the tensor list
    (values[, scales]) then new_value_shape; outputs: the list, as many as came in."""
    *tensors, _new_shape = inputs
    # Every ERROR_IF (list lengths, block size, sizes and shapes): profiles/. Each output is
    # declared with the shape new_value_shape gives it (its scales': / block_size).
    outs = []
    for value, t in zip(tensors, node.outputs, strict=True):
        shape = t.shape
        xp = _xp(value)
        outs.append(_apply(value, lambda x, shape=shape, xp=xp: xp.reshape(x, shape)))
    return outs[0] if len(outs) == 1 else tuple(outs)


@lowering("REVERSE")
def reverse(node: Node, input1: Any, *, axis: int) -> Any:
    """output[..., i, ...] = input1[..., shape[axis] - 1 - i, ...] along ``axis``."""
    xp = _xp(input1)
    if isinstance(input1, BlockScaled):
        # Along the innermost axis (a multiple of the block size) value c of block c // bs
        # comes from C - 1 - c, of block nb - 1 - c // bs: the scales reverse as whole blocks.
        return BlockScaled(xp.flip(input1.values, axis=axis), xp.flip(input1.scales, axis=axis))
    return _apply(input1, lambda x: xp.flip(x, axis=axis))


@lowering("SLICE")
def slice(node: Node, input1: Any, start: Any, size: Any) -> Any:
    """output[index] = input1[index + start]; ``size`` is the output shape."""
    start, size = _ints(node, 1, start), _ints(node, 2, size)
    # builtins.slice: this module's own ``slice`` is the operator.
    window = tuple(builtins.slice(b, b + n) for b, n in zip(start, size, strict=True))
    limit = [b + n for b, n in zip(start, size, strict=True)]
    # (lax.slice on a traced value: jax.numpy's indexing traces about 0.13 ms more a call)
    return _apply(input1, lambda x: x[window] if _is_host(x) else lax.slice(x, start, limit))


@lowering("TILE")
def tile(node: Node, input1: Any, multiples: Any) -> Any:
    """output[index] = input1[index % shape1]: ``multiples[i]`` copies along axis i."""
    multiples = _ints(node, 1, multiples)
    xp = _xp(input1)
    return _apply(input1, lambda x: xp.tile(x, multiples))


@lowering("TRANSPOSE")
def transpose(node: Node, input1: Any, *, perms: tuple[int, ...]) -> Any:
    """output[index] = input1[tmp], tmp[perms[i]] = index[i]: output axis i is input perms[i]."""
    perms = tuple(int(p) for p in perms)
    # (lax.transpose on a traced value: jax.numpy's traces about 0.1 ms more a call)
    return _apply(input1, lambda x: np.transpose(x, perms) if _is_host(x)
                  else lax.transpose(x, perms))
