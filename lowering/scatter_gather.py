"""Scatter/gather (spec chapter "Scatter/Gather"): GATHER, SCATTER.

Both index dimension 1 of an [N, K, C] tensor with an [N, W] int32 tensor, per batch n. The
spec REQUIREs 0 <= index < K (and, for SCATTER, each index at most once per batch), so any
result is allowed when that is broken: out-of-range indices are clipped (GATHER) or dropped
(SCATTER).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import Wide, no_fold


def _gather(values: Any, indices: Any) -> Any:
    # output[n, w, c] = values[n, indices[n, w], c]
    # no_fold: XLA's constant folder miscomputes a gather of constants (see numerics.no_fold).
    return jnp.take_along_axis(no_fold(values), jnp.asarray(indices)[:, :, None], axis=1,
                               mode="clip")


@lowering("GATHER")
def gather(node: Node, values: Any, indices: Any) -> Any:
    """output[n, w, c] = values[n, indices[n, w], c]."""
    if isinstance(values, Wide):
        return values.map(lambda v: _gather(v, indices))
    return _gather(values, indices)


def _scatter(values_in: Any, indices: Any, input: Any) -> Any:
    # Start from values_in, then write input[n, w, :] at row indices[n, w] of batch n. Indices
    # are unique per batch (REQUIRE), so the order of the writes does not matter.
    def one(v: Any, i: Any, x: Any) -> Any:
        return v.at[i].set(x, mode="drop", unique_indices=True)

    return jax.vmap(one)(jnp.asarray(values_in), jnp.asarray(indices), jnp.asarray(input))


@lowering("SCATTER")
def scatter(node: Node, values_in: Any, indices: Any, input: Any) -> Any:
    """values_out = values_in, then values_out[n, indices[n, w], c] = input[n, w, c]."""
    if isinstance(values_in, Wide):
        return Wide(_scatter(values_in.hi, indices, input.hi),
                    _scatter(values_in.lo, indices, input.lo))
    return _scatter(values_in, indices, input)
