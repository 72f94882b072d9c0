"""Activation functions (spec chapter "Activation Functions"): CLAMP, ERF, SIGMOID, TANH."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import INT_RANGES, apply_max_s, apply_min_s, float_compute


@lowering("CLAMP")
def clamp(node: Node, input: Any, *, min_val: Any, max_val: Any, nan_mode: str) -> Any:
    """apply_clip_s(value, min_val, max_val, nan_mode): max with min_val, then min with max_val.

    min_val and max_val arrive decoded as numpy scalars of the input's element type.
    """
    lo, hi = np.asarray(min_val), np.asarray(max_val)
    is_int = node.inputs[0].dtype in INT_RANGES
    x = jnp.asarray(input)
    if is_int:
        # min(max(x, min_val), max_val): one lax clamp (XLA's clamp is exactly that order)
        return lax.clamp(np.asarray(int(lo), x.dtype), x, np.asarray(int(hi), x.dtype))
    # Float bounds as 0-d numpy scalars of the tensor's type (the values are exact in it).
    value = apply_max_s(x, np.asarray(lo, x.dtype), nan_mode)
    return apply_min_s(value, np.asarray(hi, x.dtype), nan_mode)


def _erf(x: Any) -> Any:
    """erf within ERF's 5 ULP: XLA's f32 erf is up to ~5.3 ULP off where erf(x) nears +-1
    (|x| ~ 3.8; measured against float64 erf), so above |x| = 0.5 take 1 - erfc(|x|), the
    sign restored: erfc is accurate relative to its own small value, so only the final rounding
    remains (<= 1 ULP); below, lax.erf itself is within 3.5 ULP."""
    ax = jnp.abs(x)
    return jnp.where(ax > 0.5, jnp.sign(x) * (1 - lax.erfc(ax)), lax.erf(x))


@lowering("ERF")
def erf(node: Node, input: Any) -> Any:
    return float_compute(_erf, input)


@lowering("SIGMOID")
def sigmoid(node: Node, input: Any) -> Any:
    return float_compute(jax.nn.sigmoid, input)


@lowering("TANH")
def tanh(node: Node, input: Any) -> Any:
    return float_compute(jnp.tanh, input)
