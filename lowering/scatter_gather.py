"""Scatter/gather (spec chapter "Scatter/Gather"): GATHER, SCATTER; TOSA 1.1 ROW_GATHER.

Both index dimension 1 of an [N, K, C] tensor with an [N, W] int32 tensor, per batch n. The
spec REQUIREs 0 <= index < K (and, for SCATTER, each index at most once per batch), so any
result is allowed when that is broken: out-of-range indices are clipped (GATHER) or dropped
(SCATTER). TOSA 1.1 INT64 indices arrive as ``Wide`` pairs: a valid index is below K < 2^31, so
its low word is the index (a larger one breaks the REQUIRE, where any result is allowed).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tosa_jax.ir import BlockScaled
from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import Wide, is_host, no_fold, require, requiring


def _require_indices(indices: Any, rows: int, once: bool = False) -> None:
    """REQUIRE(0 <= k < rows) for every index (rows: K, or the starts of ROW_GATHER's runs);
    SCATTER's output_modified REQUIRE: no index twice in a batch (each row written at most
    once)."""
    if not requiring():
        return
    require("index", (indices < 0) | (indices >= rows))
    if once and indices.shape[1] > 1:
        xp = np if is_host(indices) else jnp
        ordered = xp.sort(indices, axis=1)
        require("scatter_once", ordered[:, 1:] == ordered[:, :-1])


def _gather(values: Any, indices: Any) -> Any:
    # output[n, w, c] = values[n, indices[n, w], c]
    # no_fold: XLA's constant folder miscomputes a gather of constants (see numerics.no_fold).
    return jnp.take_along_axis(no_fold(values), jnp.asarray(indices)[:, :, None], axis=1,
                               mode="clip")


def _index32(indices: Any) -> Any:
    """int32 indices; INT64 (``Wide``) ones by their low word, clamped where the high word says
    the index is out of int32 range (negative: 0 is as good as any, REQUIRE)."""
    if not isinstance(indices, Wide):
        return indices
    lo = jax.lax.bitcast_convert_type(jnp.asarray(indices.lo), jnp.int32)
    hi = jnp.asarray(indices.hi)
    big = jnp.iinfo(jnp.int32).max
    return jnp.where(hi < 0, -1, jnp.where((hi > 0) | (lo < 0), big, lo))


@lowering("GATHER")
def gather(node: Node, values: Any, indices: Any) -> Any:
    """output[n, w, c] = values[n, indices[n, w], c]."""
    indices = _index32(indices)
    _require_indices(indices, node.inputs[0].shape[1])
    if isinstance(values, Wide):
        return values.map(lambda v: _gather(v, indices))
    return _gather(values, indices)


def _scatter(values_in: Any, indices: Any, input: Any) -> Any:
    # Start from values_in, then write input[n, w, :] at row indices[n, w] of batch n. Indices
    # are unique per batch (REQUIRE), so the order of the writes does not matter.
    def one(v: Any, i: Any, x: Any) -> Any:
        return v.at[i].set(x, mode="drop", unique_indices=True)

    return jax.vmap(one)(jnp.asarray(values_in), jnp.asarray(indices), jnp.asarray(input))


def _row_indices(node: Node, vshape: tuple[int, ...], ishape: tuple[int, ...], indices: Any,
                 row_count: Any, out_shape: tuple[int, ...]) -> Any:
    """The rows ROW_GATHER reads, [N, W*row_count]: each index k starts a run k ... k+rows-1
    (REQUIRE(0 <= k && k + row_count <= K)). row_count >= 1 and the output [N, W*row_count, C]:
    ERROR_IFs checked by profiles/ (a run-time row_count is read from the output shape)."""
    n, w = ishape
    rows = (int(np.asarray(row_count).reshape(-1)[0]) if isinstance(row_count, np.ndarray)
            else out_shape[1] // max(w, 1))
    _require_indices(_index32(indices), vshape[1] - rows + 1)  # k >= 0 and k + rows <= K
    starts = jnp.asarray(_index32(indices))
    return (starts[:, :, None] + jnp.arange(rows, dtype=starts.dtype)).reshape(n, w * rows)


def _gather_any(values: Any, idx: Any) -> Any:
    """Rows of a value: both words of a Wide, the values and the scales of a BlockScaled (the
    same rows: tensor_read_value_scale / tensor_write_value_scale)."""
    if isinstance(values, BlockScaled):
        return BlockScaled(_gather_any(values.values, idx), _gather_any(values.scales, idx))
    return values.map(lambda v: _gather(v, idx)) if isinstance(values, Wide) else _gather(
        values, idx)


@lowering("ROW_GATHER")
def row_gather(node: Node, values: Any, indices: Any, row_count: Any) -> Any:
    """TOSA 1.1: output[n, w * row_count + r, c] = values[n, indices[n, w] + r, c] for
    0 <= r < row_count."""
    idx = _row_indices(node, node.inputs[0].shape, node.inputs[1].shape, indices, row_count,
                       node.out.shape)
    return _gather_any(values, idx)


@lowering("ROW_GATHER_BLOCK_SCALED")
def row_gather_block_scaled(node: Node, *inputs: Any, block_size: int) -> Any:
    """TOSA 1.1: ROW_GATHER of a value tensor and, when block-scaled, of its scales (the same
    rows). Inputs: the tensor list (values[, scales]), indices, row_count."""
    *values, indices, row_count = inputs  # the list's ERROR_IFs: profiles/
    vshape = node.inputs[0].shape
    ishape = node.inputs[len(values)].shape
    idx = _row_indices(node, vshape, ishape, indices, row_count, node.outputs[0].shape)
    outs = [_gather_any(v, idx) for v in values]
    return outs[0] if len(outs) == 1 else tuple(outs)


@lowering("SCATTER")
def scatter(node: Node, values_in: Any, indices: Any, input: Any) -> Any:
    """values_out = values_in, then values_out[n, indices[n, w], c] = input[n, w, c]."""
    indices = _index32(indices)
    _require_indices(indices, node.inputs[0].shape[1], once=True)
    if isinstance(values_in, Wide):
        return Wide(_scatter(values_in.hi, indices, input.hi),
                    _scatter(values_in.lo, indices, input.lo))
    return _scatter(values_in, indices, input)
