"""Data nodes (spec chapter "Data Nodes"): CONST, IDENTITY."""

from __future__ import annotations

from typing import Any

import numpy as np

from tosa_jax.ir import WIDE_TYPES, BlockScaled
from tosa_jax.lowering import Node, lowering
from tosa_jax.lowering.numerics import CODE_TYPES, wide_from_numpy


@lowering("CONST")
def const(node: Node) -> Any:
    """The constant's values, kept as numpy so later operators can use them before tracing."""
    data = node.out.data
    if node.out.dtype in CODE_TYPES:
        data = data.view(np.uint8)  # FP6 constants travel as their codes
    if node.out.block_scaled:  # TOSA 1.1 block_scale_t: values and their blocks' scales
        return BlockScaled(data, node.out.scale_data)
    return wide_from_numpy(data) if node.out.dtype in WIDE_TYPES else data


@lowering("IDENTITY")
def identity(node: Node, input1: Any) -> Any:
    return input1
