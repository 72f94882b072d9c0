"""Activation functions (spec chapter "Activation Functions"): CLAMP, ERF, SIGMOID, TANH."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import (
    INT_RANGES,
    apply_max_s,
    apply_min_s,
    filled,
    float_compute,
)


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


# erf in f32 within 2.5 ULP of the exact value (ERF allows 5), in multiply-adds alone: erf(z)/z
# as a polynomial in z*z below ERF_SPLIT, erf itself as a polynomial in (z - mid) / half-width
# up to ERF_ONE (erf rounds to 1 in f32 above). The coefficients are least-squares fits to
# float64 erf (the first reweighted toward minimax), made and checked by bench/erf_ulp.py: every
# f32 in [2**-6, 4.5] and a sample below and of the negatives, 2.47 ULP at most, where XLA's erf
# alone is 6.7 ULP off near |x| = 3.8 and erf/erfc chosen at 0.5 (the former form) 4.0. About
# 25 multiply-adds an element, against the former form's XLA erf and erfc everywhere (an exp, a
# division and four rational functions): 40% of its time over a million elements (memory
# traffic aside), half of bert_tiny_fp32's GELU fusions.
ERF_SPLIT, ERF_ONE = 0.75, 3.92
ERF_SMALL = (-0.0006750092398549941, 0.0051144213796984256, -0.02683465905132067,
             0.1128337720807228, -0.37612618796919356, 1.1283791655003825)
ERF_LARGE = (-0.00017985331153194675, -0.0001798703003564976, 0.0016484531296121297,
             -0.0003306313908691983, -0.005740053995275562, 0.007606898680308959,
             0.003934320864666873, -0.022960267975254724, 0.028625607094580376,
             -0.002049045250115584, -0.04946727221372141, 0.09107822236109046,
             -0.09390950671622453, 0.06359009892473903, -0.028374557476062927,
             0.007666756673874647, 0.9990406647553349)


def _horner(coefficients: tuple[float, ...], v: Any) -> Any:
    """The polynomial with ``coefficients`` (highest degree first) at ``v``, in v's type (lax
    operations: jax.numpy's operators trace a wrapper per shape, 0.1-0.3 ms each)."""
    r = filled(v, coefficients[0])
    for c in coefficients[1:]:
        r = lax.add(lax.mul(r, v), np.asarray(c, v.dtype))
    return r


def _erf(x: Any) -> Any:
    """erf of an f32 array (see above)."""
    z = jnp.abs(x)
    small = z * _horner(ERF_SMALL, z * z)
    mid, half = (ERF_ONE + ERF_SPLIT) / 2, (ERF_ONE - ERF_SPLIT) / 2
    large = _horner(ERF_LARGE, (z - mid) * (1 / half))
    # z >= ERF_ONE (not z < ERF_ONE) keeps NaN on the polynomial's path: erf(NaN) is NaN
    large = jnp.where(z >= ERF_ONE, jnp.ones_like(large), large)
    return jnp.copysign(jnp.where(z < ERF_SPLIT, small, large), x)


@lowering("ERF")
def erf(node: Node, input: Any) -> Any:
    return float_compute(_erf, input)


@lowering("SIGMOID")
def sigmoid(node: Node, input: Any) -> Any:
    # lax's primitives, which jax.nn.sigmoid and jnp.tanh wrap in a jitted function each
    return float_compute(lax.logistic, input)


@lowering("TANH")
def tanh(node: Node, input: Any) -> Any:
    return float_compute(lax.tanh, input)
