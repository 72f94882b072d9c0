"""Elementwise ternary operators (spec chapter "Elementwise Ternary Operators"): SELECT."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import as_wide, wide_broadcast, wide_select


@lowering("SELECT")
def select(node: Node, input1: Any, input2: Any, input3: Any) -> Any:
    """value1 ? value2 : value3, all three broadcast to the output shape."""
    if node.out.dtype == "INT64":
        a, b = wide_broadcast(as_wide(input2), as_wide(input3))
        c = jnp.broadcast_to(jnp.asarray(input1, jnp.bool_), jnp.shape(a.hi))
        return wide_select(c, a, b)
    return jnp.where(jnp.asarray(input1, jnp.bool_), input2, input3)
