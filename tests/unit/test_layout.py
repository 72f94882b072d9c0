"""Transposes carried as layouts (tosa_jax.layout): results against the reference model, the
reshape rule against numpy, and the transposes that disappear from the lowered program."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import layout
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact

RNG = np.random.default_rng(12)


def _nchw_block(b: GraphBuilder, x: str, n: int, c: int, h: int, w: int, groups: int) -> str:
    """What PyTorch exports around a convolution: NCHW -> NHWC, CONV2D, back to NCHW, then a
    GroupNorm-like chain (reshape into groups, sums, broadcast arithmetic) and a residual."""
    nhwc = b.op("TRANSPOSE", [x], (n, h, w, c), "INT8", perms=[0, 2, 3, 1])
    wt = b.const(RNG.integers(-8, 8, (c, 3, 3, c)), "INT8")
    conv = b.op("CONV2D", [nhwc, wt, b.const(RNG.integers(-50, 50, c), "INT32"),
                           b.const([3], "INT8"), b.const([-2], "INT8")],
                (n, h, w, c), "INT32", pad=[1, 1, 1, 1], stride=[1, 1], dilation=[1, 1],
                acc_type="INT32", local_bound=False)
    nchw = b.op("TRANSPOSE", [conv], (n, c, h, w), "INT32", perms=[0, 3, 1, 2])
    g = b.op("RESHAPE", [nchw, b.const([n, groups, c // groups, h * w], "SHAPE")],
             (n, groups, c // groups, h * w), "INT32")
    s = b.op("REDUCE_SUM", [g], (n, groups, c // groups, 1), "INT32", axis=3)
    s = b.op("REDUCE_SUM", [s], (n, groups, 1, 1), "INT32", axis=2)
    top = b.op("REDUCE_MAX", [g], (n, groups, 1, h * w), "INT32", axis=2, nan_mode="PROPAGATE")
    d = b.op("SUB", [g, s], (n, groups, c // groups, h * w), "INT32")
    d = b.op("ADD", [d, top], (n, groups, c // groups, h * w), "INT32")
    d = b.op("MUL", [d, b.const(RNG.integers(-3, 4, (1, groups, c // groups, 1)), "INT32"),
                     b.const([0], "INT8")], (n, groups, c // groups, h * w), "INT32")
    back = b.op("RESHAPE", [d, b.const([n, c, h, w], "SHAPE")], (n, c, h, w), "INT32")
    res = b.op("ADD", [back, nchw], (n, c, h, w), "INT32")  # a residual
    return b.op("MAXIMUM", [res, b.const(np.full((1, 1, 1, 1), -5000), "INT32")],
                (n, c, h, w), "INT32", nan_mode="PROPAGATE")


def _graph(extra: bool = True) -> tuple[GraphBuilder, list[str]]:
    """Two such blocks and a concatenation of their NCHW results (UNet's skip connection),
    back to NHWC; ``extra``: also outputs that need tensors in the graph's own order."""
    n, c, h, w = 2, 6, 5, 4
    b = GraphBuilder()
    x = b.input("x", (n, c, h, w), "INT8")
    y = _nchw_block(b, x, n, c, h, w, groups=2)
    y8 = b.op("CAST", [y], (n, c, h, w), "INT8")  # wraps or saturates: the same either way
    z = _nchw_block(b, y8, n, c, h, w, groups=3)
    z8 = b.op("CAST", [z], (n, c, h, w), "INT8")
    cat = b.op("CONCAT", [z8, y8], (n, 2 * c, h, w), "INT8", axis=1)
    out_nhwc = b.op("TRANSPOSE", [cat], (n, h, w, 2 * c), "INT8", perms=[0, 2, 3, 1])
    if not extra:
        return b, [out_nhwc]
    # a reshape that merges axes not adjacent in memory (the transpose is applied first), a
    # transpose of a transposed tensor that is not the identity, a mix with a plain tensor
    flat = b.op("RESHAPE", [y, b.const([n, c * h, w], "SHAPE")], (n, c * h, w), "INT32")
    twice = b.op("TRANSPOSE", [out_nhwc], (n, 2 * c, w, h), "INT8", perms=[0, 3, 2, 1])
    mixed = b.op("MAXIMUM", [z, b.op("CAST", [x], (n, c, h, w), "INT32")], (n, c, h, w),
                 "INT32", nan_mode="PROPAGATE")
    return b, [out_nhwc, y, flat, twice, mixed]


def test_layouts_match_reference(reference) -> None:
    b, outs = _graph()
    x = RNG.integers(-128, 128, (2, 6, 5, 4)).astype(np.int8)
    check_exact(reference, b, outs, {"x": x})


def _transposes(graph: tosa_jax.Graph, enabled: bool) -> int:
    model = tosa_jax.load(tosa_jax.write(graph), cache=False)
    x = jax.ShapeDtypeStruct((2, 6, 5, 4), np.int8)
    try:
        layout.ENABLED = enabled
        return jax.jit(model.fn).lower(x).as_text().count("stablehlo.transpose")
    finally:
        layout.ENABLED = True


def test_layouts_remove_transposes() -> None:
    """NCHW <-> NHWC around each convolution, the group arithmetic and the concatenation in
    between: the lowered program keeps only the transpose into the first convolution; with
    layouts off, every TRANSPOSE stays."""
    b, outs = _graph(extra=False)
    graph = b.build(outs)
    assert layout.plan(graph.main) == {i for i, op in enumerate(graph.main.operators)
                                       if op.op == "TRANSPOSE"}
    assert (_transposes(graph, True), _transposes(graph, False)) == (1, 5)


def test_layouts_not_where_they_cost_more() -> None:
    """A transposed tensor that two operators need as it is: carried as a layout, it would be
    transposed twice (once per element type), so the plan leaves it alone."""
    b = GraphBuilder()
    x = b.input("x", (2, 6, 5, 4), "INT8")
    t = b.op("TRANSPOSE", [x], (2, 5, 4, 6), "INT8", perms=[0, 2, 3, 1])
    wide = b.op("CAST", [t], (2, 5, 4, 6), "INT32")
    graph = b.build([t, wide])
    assert layout.plan(graph.main) == frozenset()
    assert _transposes(graph, True) == _transposes(graph, False) == 1


def test_layouts_intermediates_are_tensors() -> None:
    """tosa_jax.inspect keeps every tensor as the graph has it, layouts or not."""
    b, outs = _graph()
    data = tosa_jax.write(b.build(outs))
    x = RNG.integers(-128, 128, (2, 6, 5, 4)).astype(np.int8)
    got = tosa_jax.load(data, cache=False).intermediates(x)
    try:
        layout.ENABLED = False
        want = tosa_jax.load(data, cache=False).intermediates(x)
    finally:
        layout.ENABLED = True
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _splits(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Reshape targets of ``shape``: adjacent axes merged, an axis split into factors, size-1
    axes added or dropped."""
    out = []
    for i in range(len(shape) - 1):
        out.append(shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:])
    for i, d in enumerate(shape):
        for f in range(2, d):
            if d % f == 0:
                out.append(shape[:i] + (f, d // f) + shape[i + 1:])
    out.append(tuple(d for d in shape if d != 1) or (1,))
    out.append((1,) + shape)
    out.append((int(np.prod(shape)),))
    return out


@pytest.mark.parametrize("shape", [(1, 6, 4, 5), (2, 3, 4), (1, 12, 1, 8), (4, 1, 6)])
def test_reshape_plan_against_numpy(shape: tuple[int, ...]) -> None:
    """Where ``_reshape`` plans a reshape of the physical array, it is the tensor's reshape."""
    planned = 0
    for perm in itertools.permutations(range(len(shape))):
        logical = np.arange(int(np.prod(shape))).reshape(shape)
        phys = np.ascontiguousarray(np.transpose(logical, np.argsort(perm)))
        assert np.array_equal(np.transpose(phys, perm), logical)
        for target in _splits(shape):
            plan = layout._reshape(shape, target, perm)
            if plan is None:
                continue
            planned += 1
            got = np.transpose(phys.reshape(plan[0]), plan[1])
            np.testing.assert_array_equal(got, logical.reshape(target), err_msg=f"{perm} {target}")
    assert planned > 0
