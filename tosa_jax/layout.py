"""Transposes carried as layouts while a block is traced, not applied where the graph has them.

Graphs exported from PyTorch keep their tensors NCHW and wrap each convolution in a pair of
TRANSPOSEs (to NHWC and back); between the convolutions the elementwise operators, reductions,
reshapes and concatenations (GroupNorm, SiLU, residual additions, UNet's skip connections) run
on NCHW. Applied where it stands, each TRANSPOSE becomes a loop that XLA CPU fuses with the
elementwise work around it; such a loop walks one side with a stride, so nothing in it is
vectorised (SiLU of [1, 96, 32, 32] then transposed: 0.32 ms fused, against 0.07 ms for SiLU
and 0.05 ms for the transpose alone).

Here a TRANSPOSE only records a permutation: the executor holds the value as ``Laid(phys,
perm)``, the tensor being ``transpose(phys, perm)``. Operators that do not care about the order
of the axes (elementwise ones, reductions and concatenations along a named axis, reshapes that
only merge or split axes that are adjacent in memory) run on ``phys`` in its own order, with
their axis attributes and shapes renamed; the next TRANSPOSE composes with the permutation, and
NCHW -> NHWC after NHWC -> NCHW is no transpose at all. Any other operator, a block output and
anything ``tosa_jax.inspect`` keeps receive the tensor itself (``logical``): the transpose is
applied there. Only data moves differently, and the elementwise operators compute the same
values, so integer results are unchanged; a float reduction may add in another order (within
the spec's bounds for it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tosa_jax.ir import WIDE_TYPES, Tensor, trace_constants
from tosa_jax.lowering.numerics import is_host, stop_reshapes

# False: every TRANSPOSE applied where it stands (for comparisons; set before tracing).
ENABLED = True

# Operators computed element by element (broadcasting over size-1 axes): the order of the axes
# does not change their result. RESCALE only when not per channel (see _step).
ELEMENTWISE = frozenset({
    "ABS", "BITWISE_NOT", "CEIL", "CLZ", "COS", "EXP", "FLOOR", "LOG", "LOGICAL_NOT", "NEGATE",
    "RECIPROCAL", "RSQRT", "SIN", "SIGMOID", "TANH", "ERF", "CLAMP", "CAST", "IDENTITY", "TABLE",
    "RESCALE",
    "ADD", "SUB", "MUL", "POW", "MAXIMUM", "MINIMUM", "INTDIV", "ARITHMETIC_RIGHT_SHIFT",
    "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR",
    "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT", "EQUAL", "GREATER", "GREATER_EQUAL", "SELECT",
})
# Operators with one ``axis`` attribute, applied to every input of the output's rank.
AXIS_OPS = frozenset({"REDUCE_ALL", "REDUCE_ANY", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PRODUCT",
                      "REDUCE_SUM", "CONCAT"})
OPS = ELEMENTWISE | AXIS_OPS | {"TRANSPOSE", "RESHAPE"}
_TRIALS_MAX = 5000  # operators replayed by plan()'s one-by-one trials, at most


@dataclass(frozen=True)
class Laid:
    """A tensor held as ``phys`` in another axis order: the tensor is ``transpose(phys, perm)``
    (axis i of the tensor is axis ``perm[i]`` of ``phys``)."""

    phys: Any
    perm: tuple[int, ...]


def logical(value: Any) -> Any:
    """The tensor itself: a Laid value transposed (XLA merges repeated identical ones; lax's
    transpose of a traced value traces faster than jax.numpy's)."""
    if not isinstance(value, Laid):
        return value
    if is_host(value.phys):
        return jnp.transpose(value.phys, value.perm)
    return jax.lax.transpose(value.phys, value.perm)


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def _laid(phys: Any, perm: tuple[int, ...]) -> Any:
    """``Laid(phys, perm)``, or the tensor itself where that costs nothing: the identity, or a
    permutation that moves only axes of size 1 (then a reshape)."""
    shape = tuple(phys.shape[p] for p in perm)
    if _trivial(perm, shape):
        return phys if tuple(phys.shape) == shape else stop_reshapes(jnp.reshape(phys, shape))
    return Laid(phys, perm)


def _to_phys(value: Any, perm: tuple[int, ...]) -> Any:
    """Input ``value`` (plain, numpy or Laid) in the physical order ``perm``."""
    if isinstance(value, Laid):
        if value.perm == perm:
            return value.phys
        value = logical(value)
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(np.transpose(value, _inverse(perm)))
    return jnp.transpose(value, _inverse(perm))


def _phys_tensor(t: Tensor, perm: tuple[int, ...]) -> Tensor:
    """Tensor ``t`` as its physical value in order ``perm`` has it (shape and data permuted)."""
    shape = [0] * len(perm)
    for i, p in enumerate(perm):
        shape[p] = t.shape[i]
    data = None if t.data is None else np.transpose(t.data, _inverse(perm))
    return dataclasses.replace(t, shape=tuple(shape), data=data)


def _plain(value: Any) -> bool:
    """A traced (or device) array: no numpy constant, no Wide or BlockScaled pair."""
    return isinstance(value, jax.Array | jax.core.Tracer)


def _reshape(lin: tuple[int, ...], lout: tuple[int, ...], perm: tuple[int, ...],
             ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """RESHAPE of ``transpose(P, perm)`` (shape ``lin``) to ``lout``, done on P: the physical
    shape to reshape P to and the permutation of the result, or None where the axes that the
    reshape merges or splits are not adjacent, in the same order, in P."""
    if 0 in lin:
        return None
    big_in = [i for i, n in enumerate(lin) if n != 1]
    big_out = [j for j, n in enumerate(lout) if n != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(big_in):
        gi, gj = [big_in[i]], [big_out[j]]
        pi, pj = lin[big_in[i]], lout[big_out[j]]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(big_in[i])
                pi *= lin[big_in[i]]
                i += 1
            else:
                gj.append(big_out[j])
                pj *= lout[big_out[j]]
                j += 1
        groups.append((gi, gj))
    order = sorted(big_in, key=lambda d: perm[d])  # the big axes in memory order
    where = {d: k for k, d in enumerate(order)}
    out_order: list[int] = []
    for gi, gj in sorted(groups, key=lambda g: where[g[0][0]]):
        ks = [where[d] for d in gi]
        if ks != list(range(ks[0], ks[0] + len(ks))):
            return None
        out_order.extend(gj)
    out_order.extend(j for j, n in enumerate(lout) if n == 1)
    new_perm = [0] * len(lout)
    for k, jj in enumerate(out_order):
        new_perm[jj] = k
    return tuple(lout[jj] for jj in out_order), tuple(new_perm)


def _trivial(perm: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Holding a tensor of ``shape`` in order ``perm`` moves only axes of size 1 (a reshape)."""
    big = [i for i, n in enumerate(shape) if n != 1]
    return all(perm[a] < perm[b] for a, b in zip(big, big[1:], strict=False))


def _choose(rank: int, data: list[tuple[tuple[int, ...] | None, int]]) -> tuple[int, ...]:
    """The order an elementwise operator runs in, from its data inputs (layout or None for the
    graph's order, and element count; constants left out): the one that moves the fewest
    elements, the inputs' own order or one Laid input's. Ties keep the graph's order."""
    identity = tuple(range(rank))
    candidates = [identity] + [p for p, _ in data if p is not None]

    def cost(perm: tuple[int, ...]) -> int:
        return sum(size for p, size in data if (p or identity) != perm)

    return min(candidates, key=cost)


def _eligible(node: Any) -> bool:
    """One output of rank 2 or more, and no Wide or block-scaled tensor in or out."""
    out = node.outputs[0]
    return (len(node.outputs) == 1 and len(out.shape) >= 2 and out.dtype not in WIDE_TYPES
            and not out.block_scaled
            and not any(t.dtype in WIDE_TYPES or t.block_scaled for t in node.inputs))


def _data_inputs(node: Any) -> list[int]:
    """The inputs an elementwise or axis operator reads element by element: those of the
    output's rank (zero points, shifts, tables are rank 1)."""
    rank = len(node.outputs[0].shape)
    return [k for k, t in enumerate(node.inputs) if len(t.shape) == rank]


def plan(block: Any) -> frozenset[int]:
    """The TRANSPOSE operators of ``block`` (by index) to carry as layouts: all of them where
    that moves fewer elements than applying each where it stands, less each one whose layout
    costs more than it saves; none where carrying them would move more (a transposed tensor
    read by many operators that need it as it is, say). Counted on shapes alone."""
    transposes = [i for i, op in enumerate(block.operators) if op.op == "TRANSPOSE"]
    if not transposes:
        return frozenset()
    steps = _steps(block)
    base = _moved(block, steps, frozenset())
    chosen = frozenset(transposes)
    best = _moved(block, steps, chosen)
    # Each trial replays the block: on large blocks with many transposes (where the replay
    # would cost more than ~1 us per operator) all-or-nothing only.
    for i in transposes if len(transposes) * len(steps) <= _TRIALS_MAX else ():
        trial = chosen - {i}
        cost = _moved(block, steps, trial)
        if cost < best:
            chosen, best = trial, cost
    return chosen if best < base else frozenset()


def _steps(block: Any) -> list[tuple[Any, ...]]:
    """What ``_moved`` needs of each operator, worked out once: (index, operator, kind, inputs,
    output, output shape, data inputs); kind "const" (evaluated at trace time), "other" (needs
    its inputs as they are), or the operator's name."""
    from tosa_jax.lowering import Node

    tensors = block.tensors
    const = trace_constants(block)
    steps: list[tuple[Any, ...]] = []
    for i, op in enumerate(block.operators):
        if op.outputs and all(n in const for n in op.outputs):  # evaluated at trace time
            continue
        inputs = [n for n in op.inputs if n not in const]
        node = Node(op.op, tuple(tensors[n] for n in op.inputs),
                    tuple(tensors[n] for n in op.outputs))
        if op.op not in OPS or not _eligible(node) or (
                op.op == "RESCALE" and op.attrs.get("per_channel")):
            steps.append((i, op, "other", inputs, None, None, ()))
            continue
        data = tuple(op.inputs[k] for k in _data_inputs(node) if op.inputs[k] not in const)
        steps.append((i, op, op.op, inputs, op.outputs[0], tensors[op.outputs[0]].shape, data))
    return steps


def _moved(block: Any, steps: list[tuple[Any, ...]], lazy: frozenset[int]) -> int:
    """Elements the block's transposes move when the TRANSPOSEs ``lazy`` are carried as
    layouts (the executor's decisions replayed on shapes; one transpose per tensor and order,
    as XLA merges repeated ones)."""
    tensors = block.tensors
    perm: dict[str, tuple[int, ...]] = {}
    done: set[tuple[str, Any]] = set()
    total = 0

    def size(name: str) -> int:
        return math.prod(tensors[name].shape)

    def need(name: str, target: tuple[int, ...] | None = None) -> None:
        nonlocal total
        have = perm.get(name)
        if have == target or (have is None and target == tuple(range(len(target or ())))):
            return
        if (name, target) not in done:
            done.add((name, target))
            total += size(name)

    for i, op, kind, inputs, out, shape, data in steps:
        if kind == "other":
            for n in inputs:
                if n in perm:
                    need(n)
            continue
        if kind == "TRANSPOSE":
            x = op.inputs[0]
            perms = tuple(int(p) for p in op.attrs["perms"])
            if i in lazy:
                have = perm.get(x, tuple(range(len(perms))))
                new = tuple(have[p] for p in perms)
                if not _trivial(new, shape):
                    perm[out] = new
            elif x in perm:  # the layout and this transpose, merged into one
                if not _trivial(tuple(perm[x][p] for p in perms), shape) and (x, out) not in done:
                    done.add((x, out))
                    total += size(out)
            elif not _trivial(perms, shape):
                total += size(out)
            continue
        if not any(n in perm for n in inputs):
            continue
        if kind == "RESHAPE":
            x = op.inputs[0]
            reshape = _reshape(tensors[x].shape, shape, perm[x])
            if reshape is None:
                need(x)
            elif not _trivial(reshape[1], shape):
                perm[out] = reshape[1]
            continue
        order = _choose(len(shape), [(perm.get(n), size(n)) for n in data])
        for n in inputs:
            need(n, order if n in data else None)
        if order != tuple(range(len(shape))):
            perm[out] = order
    for n in block.outputs:
        if n in perm:
            need(n)
    return total


def step(op: Any, node: Any, args: list[Any], lower: Any, lazy: bool) -> Any:
    """Run ``op`` on ``args`` (values of the executor's environment, Laid or not) keeping or
    making a layout; returns its one result (possibly Laid), or None when the operator needs
    its inputs as they are (the executor then passes ``logical`` values to its lowering).
    ``lower(node, args, attrs)`` calls the operator's lowering with a node of physical
    shapes; ``lazy``: a TRANSPOSE that ``plan`` chose."""
    name = op.op
    if not _eligible(node):
        return None
    out = node.outputs[0]
    rank = len(out.shape)
    if name == "TRANSPOSE":
        if not lazy:
            return None
        x = args[0]
        perms = tuple(int(p) for p in op.attrs["perms"])
        if isinstance(x, Laid):
            return _laid(x.phys, tuple(x.perm[p] for p in perms))
        return _laid(x, perms) if _plain(x) else None
    laid = [a for a in args if isinstance(a, Laid)]
    if not laid:
        return None
    if name == "RESHAPE":
        x = args[0]
        if not isinstance(x, Laid):
            return None
        reshape = _reshape(node.inputs[0].shape, out.shape, x.perm)
        if reshape is None:
            return None
        return _laid(stop_reshapes(jnp.reshape(x.phys, reshape[0])), reshape[1])
    if name == "RESCALE" and op.attrs.get("per_channel"):
        return None  # its multipliers and shifts run along the last axis
    data = _data_inputs(node)
    perm = _choose(rank, [(args[k].perm if isinstance(args[k], Laid) else None,
                           int(np.prod(node.inputs[k].shape)))
                          for k in data if not isinstance(args[k], np.ndarray)])
    if perm == tuple(range(rank)):
        return None
    new_args = list(args)
    inputs = list(node.inputs)
    for k in data:
        new_args[k] = _to_phys(args[k], perm)
        inputs[k] = _phys_tensor(node.inputs[k], perm)
    attrs = dict(op.attrs)
    if "axis" in attrs and name in AXIS_OPS:
        attrs["axis"] = perm[int(attrs["axis"])]
    phys_node = dataclasses.replace(node, inputs=tuple(inputs),
                                    outputs=(_phys_tensor(out, perm),))
    return Laid(lower(phys_node, new_args, attrs), perm)


def phys_tensor(value: Laid, t: Tensor) -> Tensor:
    """What ``value.phys`` must be for ``value`` to be tensor ``t`` (for the result checks)."""
    return _phys_tensor(t, value.perm)
