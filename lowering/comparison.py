"""Comparison operators (spec chapter "Comparison Operators"): bool results.

A NaN operand gives false, which is what IEEE comparisons give, so no special case is needed.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tosa_jax.lowering import Node, lowering


@lowering("EQUAL")
def equal(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.equal(input1, input2)


@lowering("GREATER")
def greater(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.greater(input1, input2)


@lowering("GREATER_EQUAL")
def greater_equal(node: Node, input1: Any, input2: Any) -> Any:
    return jnp.greater_equal(input1, input2)
