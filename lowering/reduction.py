"""Reduction (spec chapter "Reduction"): REDUCE_ALL, REDUCE_ANY, REDUCE_MAX, REDUCE_MIN,
REDUCE_PRODUCT, REDUCE_SUM.

Each reduces one ``axis`` and keeps it with size 1 (the output shape is the input shape with
shape[axis] = 1). Integer results are exact: max/min select, and REDUCE_SUM accumulates in
int32 with an explicit dtype (an overflow breaks the spec's REQUIRE in apply_add_s, so any
two's-complement result is allowed).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import (
    as_wide,
    blocked_reduce,
    float_compute,
    lax_sum,
    partial_sum_overflows,
    reduce_identity,
    require,
    requiring,
    sequential_sum,
    stops_reshapes,
    wide_partial_sum_overflows,
    wide_reduce_extreme,
    wide_reduce_sum,
)


@lowering("REDUCE_ALL")
@stops_reshapes
def reduce_all(node: Node, input: Any, *, axis: int) -> Any:
    """acc = true; acc = acc && value over the axis."""
    return blocked_reduce(input, "and", axis)


@lowering("REDUCE_ANY")
@stops_reshapes
def reduce_any(node: Node, input: Any, *, axis: int) -> Any:
    """acc = false; acc = acc || value over the axis."""
    return blocked_reduce(input, "or", axis)


def _float_extreme(x: Any, axis: int, nan_mode: str, kind: str) -> Any:
    """REDUCE_MAX (kind "max") / REDUCE_MIN ("min") of floats with the NaN rule made explicit.

    XLA's CPU max/min reductions may drop NaNs (a vectorised max returns the other operand), so
    NaNs are replaced by the reduction's identity (+-inf, or +-the largest finite value where
    the type has no infinity: FP8E4M3), which never wins, and put back by rule: PROPAGATE gives
    NaN where the row holds one; IGNORE (acc starts as NaN, NaNs are skipped) gives NaN only
    where every value is NaN.
    """
    nan = jnp.isnan(x)
    best = blocked_reduce(jnp.where(nan, reduce_identity(kind, x.dtype), x), kind, axis)
    if nan_mode == "IGNORE":
        nan_out = blocked_reduce(nan, "and", axis)
    else:
        nan_out = blocked_reduce(nan, "or", axis)
    return jnp.where(nan_out, jnp.asarray(np.nan, x.dtype), best)


def _reduce_extreme(node: Node, input: Any, axis: int, nan_mode: str, largest: bool) -> Any:
    """REDUCE_MAX (largest) or REDUCE_MIN along axis, keeping it as size 1."""
    if node.out.dtype == "INT64":
        return wide_reduce_extreme(as_wide(input), axis, largest=largest)
    x = jnp.asarray(input)
    kind = "max" if largest else "min"
    if jnp.issubdtype(x.dtype, jnp.floating):
        return _float_extreme(x, axis, nan_mode, kind)
    return blocked_reduce(x, kind, axis)


@lowering("REDUCE_MAX")
@stops_reshapes
def reduce_max(node: Node, input: Any, *, axis: int, nan_mode: str = "PROPAGATE") -> Any:
    """acc = apply_max_s(acc, value); floats: NaN propagates, or is ignored (IGNORE)."""
    return _reduce_extreme(node, input, axis, nan_mode, largest=True)


@lowering("REDUCE_MIN")
@stops_reshapes
def reduce_min(node: Node, input: Any, *, axis: int, nan_mode: str = "PROPAGATE") -> Any:
    """acc = apply_min_s(acc, value); floats: NaN propagates, or is ignored (IGNORE)."""
    return _reduce_extreme(node, input, axis, nan_mode, largest=False)


@lowering("REDUCE_PRODUCT")
@stops_reshapes
def reduce_product(node: Node, input: Any, *, axis: int) -> Any:
    """acc = 1.0; acc = acc * value (floating point only), FP16 and BF16 in FP32 and rounded
    once: partial products rounded in FP16 lose more than the spec's error bound allows once
    they fall below its normal range (the conformance suite at generator seed 1: two
    5x8x8x9x7x8 FP16 products, off by 6 subnormal units against a bound of 2.5)."""
    x = jnp.asarray(input)
    return float_compute(lambda v: jnp.prod(v, axis=axis, keepdims=True, dtype=v.dtype), x)


# acc_t of REDUCE_SUM per in_out_t (tosa.xml): int32 for i32, fp32 for bf16, else in_out_t.
_SUM_ACC = {"INT32": jnp.int32, "BF16": jnp.float32, "FP16": jnp.float16, "FP32": jnp.float32}


@lowering("REDUCE_SUM")
@stops_reshapes
def reduce_sum(node: Node, input: Any, *, axis: int) -> Any:
    """acc_t acc = 0; acc += value; output = static_cast<in_out_t>(acc)."""
    if node.out.dtype == "INT64":  # wraps modulo 2^64 where the REQUIRE fails
        if requiring():
            require("sum", wide_partial_sum_overflows(as_wide(input), axis))
        w = wide_reduce_sum(as_wide(input), axis)
        return type(w)(jnp.expand_dims(w.hi, axis), jnp.expand_dims(w.lo, axis))
    if requiring() and node.out.dtype == "INT32":
        # not where the input's proven range (tosa_jax.ranges) keeps every partial sum in int32
        proven = node.input_range(0)
        length = node.inputs[0].shape[axis]
        if proven is None or max(-proven[0], proven[1]) * length > (1 << 31) - 1:
            require("sum", partial_sum_overflows(input, axis))
    x = jnp.asarray(input)
    acc_t = _SUM_ACC.get(node.inputs[0].dtype, x.dtype)
    if acc_t == jnp.float16:  # fp16 partial sums, in order: the reference model's results
        return sequential_sum(x, axis, acc_t)
    if acc_t == jnp.float32:  # any order of the sum is compliant: blocks XLA CPU runs well
        xs = x if x.dtype == acc_t else lax.convert_element_type(x, acc_t)
        return blocked_reduce(xs, "sum", axis).astype(x.dtype)
    return lax_sum(x, axis, acc_t).astype(x.dtype)
