"""Elementwise binary operators (spec chapter "Elementwise Binary Operators")."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from tosa_jax.lowering import Node, lowering


@lowering("ADD")
def add(node: Node, input1: Any, input2: Any) -> Any:
    """apply_add_s: integer overflow is a REQUIRE failure, so two's-complement wrap is exact."""
    return jnp.add(input1, input2).astype(input1.dtype)
