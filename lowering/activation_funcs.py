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


# erf in f32 within 2.5 ULP of the exact value (ERF allows 5): erf(z)/z as a polynomial in z*z
# below ERF_SPLIT, above it 1 - erfc(z) with erfc(z) = t * exp(Q(t - ERF_CENTER) - z*z),
# t = 1 / (1 + z/2), where erfc's small absolute error is all that reaches the result. The
# coefficients are weighted least-squares fits (reweighted toward minimax) to float64 erf and
# erfc, made and checked by bench/erf_ulp.py: every f32 in [2**-6, 4.5] (erf rounds to 1 beyond)
# and a sample below and of the negatives, 2.47 ULP at most, where XLA's erf alone is 6.7 ULP
# off near |x| = 3.8 and erf/erfc chosen at 0.5 (the former form) 4.0. One exp, one division
# and a dozen multiply-adds an element: the former form evaluated XLA's erf and erfc (itself an
# erf, an exp and two rational functions) everywhere, 4x the time of erf alone.
ERF_SPLIT = 0.75
ERF_SMALL = (-0.0006750092398549941, 0.0051144213796984256, -0.02683465905132067,
             0.1128337720807228, -0.37612618796919356, 1.1283791655003825)
ERF_CENTER = 0.5303030303030303
ERF_LARGE = (-0.10090814817120211, 0.3257750204484346, -0.11587614323447218,
             -0.39172107249340804, 0.15448863714940625, 1.3557134180830845, -0.630864498846988)


def _horner(coefficients: tuple[float, ...], v: Any) -> Any:
    """The polynomial with ``coefficients`` (highest degree first) at ``v``."""
    r = jnp.full_like(v, coefficients[0])
    for c in coefficients[1:]:
        r = r * v + c
    return r


def _erf(x: Any) -> Any:
    z = jnp.abs(x)
    s = z * z
    small = z * _horner(ERF_SMALL, s)
    t = 1 / (1 + 0.5 * z)
    large = 1 - t * jnp.exp(_horner(ERF_LARGE, t - ERF_CENTER) - s)
    return jnp.copysign(jnp.where(z < ERF_SPLIT, small, large), x)


@lowering("ERF")
def erf(node: Node, input: Any) -> Any:
    return float_compute(_erf, input)


@lowering("SIGMOID")
def sigmoid(node: Node, input: Any) -> Any:
    return float_compute(jax.nn.sigmoid, input)


@lowering("TANH")
def tanh(node: Node, input: Any) -> Any:
    return float_compute(jnp.tanh, input)
