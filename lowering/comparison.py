"""Comparison operators (spec chapter "Comparison Operators"): bool results.

A NaN operand gives false, which is what IEEE comparisons give, so no special case is needed.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.ewise_binary import _wide2
from tosa_jax.lowering.numerics import wide_eq, wide_lt


@lowering("EQUAL")
def equal(node: Node, input1: Any, input2: Any) -> Any:
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_eq(*w)
    return jnp.equal(input1, input2)


@lowering("GREATER")
def greater(node: Node, input1: Any, input2: Any) -> Any:
    if (w := _wide2(node, input1, input2)) is not None:
        return wide_lt(w[1], w[0])
    return jnp.greater(input1, input2)


@lowering("GREATER_EQUAL")
def greater_equal(node: Node, input1: Any, input2: Any) -> Any:
    if (w := _wide2(node, input1, input2)) is not None:
        return ~wide_lt(w[0], w[1])
    return jnp.greater_equal(input1, input2)
