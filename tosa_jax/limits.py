"""Limits on what a graph may declare, checked before anything is allocated or traced.

Every tensor's declared shape is checked against ``max_rank`` and ``max_elements``, and the bytes
of all tensors of the graph together (constants, inputs and every intermediate, as declared)
against ``max_bytes``: that sum bounds what running the graph can hold at once, so a graph over it
is refused with the figure. Before the first run of each input signature, ``Model`` also checks
the compiled executable (XLA's memory analysis: arguments, outputs and temporaries, which covers
what operators hold inside) against ``max_bytes``, before anything is allocated.

The defaults are this module's ``MAX_*`` values, read at each call;
``tosa_jax.load(source, max_elements=..., max_bytes=...)`` overrides them for one load.
"""

from __future__ import annotations

from dataclasses import dataclass

from tosa_jax.errors import TosaLimitError, TosaUnsupportedError, TosaValidationError
from tosa_jax.ir import HOST_DTYPES, Graph, num_elements

MAX_RANK = 16
MAX_ELEMENTS = 1 << 32   # per tensor
MAX_BYTES = 1 << 34      # all tensors of a graph together (16 GiB)


@dataclass(frozen=True)
class Limits:
    """What one graph may declare: rank and elements per tensor, bytes of all tensors."""

    max_rank: int
    max_elements: int
    max_bytes: int

    @classmethod
    def default(cls, *, max_rank: int | None = None, max_elements: int | None = None,
                max_bytes: int | None = None) -> Limits:
        """The module defaults, with the given values in their place."""
        return cls(MAX_RANK if max_rank is None else max_rank,
                   MAX_ELEMENTS if max_elements is None else max_elements,
                   MAX_BYTES if max_bytes is None else max_bytes)


def tensor_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Host bytes of a tensor (INT4 one byte per value, INT48 and SHAPE eight)."""
    return num_elements(shape) * HOST_DTYPES[dtype].itemsize


def human_bytes(n: int) -> str:
    """``n`` bytes for a person: '3.0 MiB'."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def check_shape(shape: tuple[int, ...], what: str, limits: Limits) -> None:
    """Refuse a shape over the rank or per-tensor element limit (or with a negative size)."""
    if any(d < 0 for d in shape):
        raise TosaValidationError(f"{what}: negative dimension in shape {list(shape)}")
    if len(shape) > limits.max_rank:
        raise TosaLimitError(f"{what}: rank {len(shape)} is over the limit of {limits.max_rank}")
    n = num_elements(shape)
    if n > limits.max_elements:
        raise TosaLimitError(f"{what}: shape {list(shape)} declares {n} elements "
                             f"(2^{n.bit_length() - 1} or more), over the limit of "
                             f"{limits.max_elements}")


class SizeBudget:
    """Declared tensor bytes of one graph: ``add`` each tensor, then ``check`` the total."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.count = 0

    def add(self, shape: tuple[int, ...], dtype: str, what: str) -> None:
        check_shape(shape, what, self.limits)
        self.total += tensor_bytes(shape, dtype)
        self.count += 1

    def check(self) -> None:
        if self.total > self.limits.max_bytes:
            raise TosaLimitError(
                f"the graph's {self.count} tensors (constants, inputs and intermediates, as "
                f"declared) come to {self.total} bytes ({human_bytes(self.total)}), over the "
                f"limit of {self.limits.max_bytes} bytes ({human_bytes(self.limits.max_bytes)}); "
                "raise it with load(..., max_bytes=...) if this is intended")


def check_graph(graph: Graph, limits: Limits) -> int:
    """Check every tensor of every block of ``graph``; returns the declared bytes in total."""
    budget = SizeBudget(limits)
    for region in graph.regions:
        for block in region.blocks:
            for t in block.tensors.values():
                what = f"tensor {t.name!r} in block {block.name!r}"
                if t.dtype not in HOST_DTYPES:
                    raise TosaUnsupportedError(f"{what}: element type {t.dtype!r} is not "
                                               "supported by tosa_jax")
                budget.add(tuple(t.shape), t.dtype, what)
    budget.check()
    return budget.total
