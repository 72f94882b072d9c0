"""Shape operators (spec chapter "Shape Operators"): CONST_SHAPE."""

from __future__ import annotations

import numpy as np

from tosa_jax.lowering import Node, lowering


@lowering("CONST_SHAPE")
def const_shape(node: Node) -> np.ndarray:
    """A shape value: static by nature, so it stays numpy (int64 on the host)."""
    return node.out.data
