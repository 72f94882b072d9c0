"""Lowerings of TOSA operators to JAX, one module per chapter of the specification.

A lowering is a function named after its operator and registered with ``@lowering("NAME")``. It is
called as ``fn(node, *inputs, **attributes)``:

* ``node`` (a ``Node``) describes the operator: input and output tensors (name, shape, element
  type) of the IR, the operator's location in the file, and the ranges proven for its integer
  inputs (``tosa_jax.ranges``: a lowering may choose shorter exact arithmetic from them);
* ``inputs`` are the operator's input values, in spec order: numpy arrays for compile-time
  constants (outputs of CONST / CONST_SHAPE), JAX arrays otherwise; INT48 values are
  ``numerics.Wide`` pairs, INT4 values int8 arrays, BOOL values bool arrays;
* ``attributes`` are the operator's attributes by their spec names, as plain Python values.

It returns one value, or a tuple for operators with several outputs. Shapes are static: all that
can be decided before tracing is decided before tracing.

Control flow (COND_IF, WHILE_LOOP) and variables (VARIABLE*) need more than their inputs: the
executor gives their ``Node`` the variable state (``node.state``, {variable name: value}; empty
when the graph has none) and ``node.run_block(name, args, state) -> (outputs, state)``, which
evaluates the block a control-flow attribute names. ``run_block`` is pure (no side effects), so it
can run inside ``lax.cond`` / ``lax.while_loop``; a lowering that changes the state returns
``WithState(outputs, state)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tosa_jax.errors import TosaUnsupportedError
from tosa_jax.ir import Tensor

LOWERINGS: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True)
class Node:
    """What a lowering knows about the operator it lowers."""

    op: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    location: str | None = None
    # The proven value ranges of the block (tosa_jax.ranges.BlockRanges), if known.
    ranges: Any = None
    # Control-flow and variable operators only (see the module docstring).
    run_block: BlockRunner | None = None
    state: dict[str, Any] = field(default_factory=dict)

    def input_range(self, index: int) -> tuple[int, int] | None:
        """The range input ``index``'s values are proven to lie in, or None (then any value
        of its type)."""
        if self.ranges is None or index >= len(self.inputs):
            return None
        return self.ranges.get(self.inputs[index].name)

    def step_values(self, index: int) -> np.ndarray | None:
        """In one step of a rolled loop (tosa_jax.reroll), the values input ``index`` takes in
        each step, stacked, where they are constants fed per step; else None."""
        if self.ranges is None or index >= len(self.inputs):
            return None
        return self.ranges.step_values(self.inputs[index].name)

    @property
    def out(self) -> Tensor:
        """The first (usually only) output tensor."""
        return self.outputs[0]


# ``run_block(block name, block inputs, variable state) -> (block outputs, variable state)``
BlockRunner = Callable[[str, Sequence[Any], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True)
class WithState:
    """What a lowering returns when it changes the variable state: its outputs (one value or a
    tuple, as usual) and the whole state after it."""

    outputs: Any
    state: dict[str, Any]


def constant(node: Node, index: int, value: Any) -> np.ndarray:
    """The value of input ``index``, which PRO-INT/PRO-FP require to be a compile-time constant.

    Returns a numpy array (INT48 values widened to int64). A value computed at run time needs
    EXT-DYNAMIC, which is refused with the operator and argument named.
    """
    from tosa_jax.lowering.numerics import Wide, wide_to_numpy

    if isinstance(value, Wide) and isinstance(value.hi, np.ndarray):
        return wide_to_numpy(value)
    if isinstance(value, np.ndarray):
        return value
    raise TosaUnsupportedError(
        f"{node.op}: input {index} ({node.inputs[index].name!r}) must be a compile-time constant "
        "(a CONST output); run-time values here need EXT-DYNAMIC, which tosa_jax does not support")


def lowering(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the lowering of TOSA operator ``name``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in LOWERINGS:
            raise RuntimeError(f"two lowerings registered for {name}")
        LOWERINGS[name] = fn
        return fn

    return register


def _load_chapters() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("numerics",):
            importlib.import_module(f"{__name__}.{info.name}")


_load_chapters()
