"""Elementwise ternary operators (spec chapter "Elementwise Ternary Operators"): SELECT."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tosa_jax.lowering import Node, lowering


@lowering("SELECT")
def select(node: Node, input1: Any, input2: Any, input3: Any) -> Any:
    """value1 ? value2 : value3, all three broadcast to the output shape."""
    return jnp.where(jnp.asarray(input1, jnp.bool_), input2, input3)
