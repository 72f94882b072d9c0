"""Reductions against the reference model: every axis, keepdim shapes, extreme values."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check
from tosa_jax.testing.reference import check_exact_engines

RNG = np.random.default_rng(5)
NP = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32}




SHAPE = (3, 4, 5)


def _reduced(axis: int) -> tuple[int, ...]:
    return tuple(1 if i == axis else d for i, d in enumerate(SHAPE))


def test_bool(reference) -> None:
    x = RNG.integers(0, 2, SHAPE).astype(np.bool_)
    x[0] = True   # rows that are all true and
    x[1] = False  # all false along every axis
    b = GraphBuilder()
    i = b.input("x", SHAPE, "BOOL")
    outs = [b.op(op, [i], _reduced(a), "BOOL", name=f"{op.lower()}{a}", axis=a)
            for op in ("REDUCE_ALL", "REDUCE_ANY") for a in range(3)]
    _check(reference, b, outs, {"x": x})


@pytest.mark.parametrize("dtype", ["INT8", "INT16", "INT32"])
def test_max_min(reference, dtype: str) -> None:
    info = np.iinfo(NP[dtype])
    x = RNG.integers(info.min, info.max, SHAPE, endpoint=True).astype(NP[dtype])
    x[0, :, :] = info.min  # the initial accumulator values must not leak out
    x[2, :, :] = info.max
    b = GraphBuilder()
    i = b.input("x", SHAPE, dtype)
    outs = [b.op(op, [i], _reduced(a), dtype, name=f"{op.lower()}{a}", axis=a,
                 nan_mode="PROPAGATE")
            for op in ("REDUCE_MAX", "REDUCE_MIN") for a in range(3)]
    _check(reference, b, outs, {"x": x})


def test_sum_int32(reference) -> None:
    # Sums near the int32 limits (no overflow: apply_add_s REQUIREs none).
    x = RNG.integers(-(1 << 28), 1 << 28, SHAPE).astype(np.int32)
    x[:, :, 0] = (1 << 31) // 5 - 1
    b = GraphBuilder()
    i = b.input("x", SHAPE, "INT32")
    outs = [b.op("REDUCE_SUM", [i], _reduced(a), "INT32", name=f"sum{a}", axis=a)
            for a in range(3)]
    _check(reference, b, outs, {"x": x})


def test_axis_error() -> None:
    b = GraphBuilder()
    i = b.input("x", SHAPE, "INT32")
    o = b.op("REDUCE_SUM", [i], SHAPE, "INT32", axis=3)
    with pytest.raises(tosa_jax.TosaValidationError, match="REDUCE_SUM"):  # refused at load
        model = tosa_jax.load(tosa_jax.write(b.build([o])))
        model.run({"x": np.zeros(SHAPE, np.int32)})


def test_fp16_sum_accumulates_in_fp16_in_order(reference) -> None:
    """FP16 REDUCE_SUM: acc_t is fp16, each partial sum rounded, in index order, as the
    reference model computes it: bit-identical over long axes (where a tree or fp32 sum is
    off by several ulps), through fp16 overflow to inf, subnormals and NaN."""
    long = (RNG.standard_normal((2, 1500, 3)) * 4 + 1).astype(np.float16)
    edge = np.zeros((4, 6), np.float16)
    edge[0] = [60000, 6000, -60000, 1, 2, 3]        # overflows to inf part-way
    edge[1] = [6e-8, 6e-8, 1e-7, -6e-8, 3e-5, 6e-8]  # subnormals
    edge[2] = [1, np.nan, 2, 3, 4, 5]
    edge[3] = [2048, 1, 1, 1, 1, -2048]              # 2048 + 1 rounds back to 2048
    b = GraphBuilder()
    x, e = b.input("x", long.shape, "FP16"), b.input("e", edge.shape, "FP16")
    outs = [b.op("REDUCE_SUM", [x], (2, 1, 3), "FP16", name="s1", axis=1),
            b.op("REDUCE_SUM", [x], (1, 1500, 3), "FP16", name="s0", axis=0),
            b.op("REDUCE_SUM", [e], (4, 1), "FP16", name="e1", axis=1),
            b.op("REDUCE_SUM", [e], (1, 6), "FP16", name="e0", axis=0)]
    _check(reference, b, outs, {"x": long, "e": edge})


# Axis lengths around numerics.blocked_reduce's blocks (REDUCE_BLOCK, 32): one block, whole
# blocks, a padded last block, and blocks of blocks (1100 -> 35 -> 2).
LONG = [(2, 5, 3), (3, 33, 2), (2, 128, 3), (2, 100, 3), (1, 1100, 2)]


@pytest.mark.parametrize("dtype", ["INT8", "INT32"])
def test_long_axes_int(reference, dtype: str) -> None:
    """Integer and boolean reductions over axes longer than a block, on every engine of a
    call: the padding of the last block (the reduction's identity) never shows, nor does the
    accumulator's start value."""
    info = np.iinfo(NP[dtype])
    for shape in LONG[1:]:
        x = RNG.integers(info.min, info.max, shape, endpoint=True).astype(NP[dtype])
        x[0, :, 0], x[-1, :, -1] = info.min, info.max
        flags = RNG.random(shape) < 0.5
        flags[0, :, 0], flags[-1, :, -1] = True, False
        b = GraphBuilder()
        i, f = b.input("x", shape, dtype), b.input("f", shape, "BOOL")
        outs = []
        for a in range(3):
            kept = tuple(1 if j == a else d for j, d in enumerate(shape))
            outs += [b.op(op, [i], kept, dtype, name=f"{op.lower()}{a}", axis=a,
                          nan_mode="PROPAGATE") for op in ("REDUCE_MAX", "REDUCE_MIN")]
            outs += [b.op(op, [f], kept, "BOOL", name=f"{op.lower()}{a}", axis=a)
                     for op in ("REDUCE_ALL", "REDUCE_ANY")]
        check_exact_engines(reference, b, outs, {"x": x, "f": flags})


@pytest.mark.parametrize("dtype", ["FP32", "FP16", "BF16"])
@pytest.mark.parametrize("nan_mode", ["PROPAGATE", "IGNORE"])
def test_long_axes_float(reference, dtype: str, nan_mode: str) -> None:
    """REDUCE_MAX / REDUCE_MIN of floats over long axes: NaN by nan_mode (rows of only NaN,
    rows with some), +-inf, rows of only -inf or +inf (the identity the padding and the NaNs
    take must not be told from them); XLA and the numpy program."""
    import ml_dtypes

    np_t = {"FP32": np.float32, "FP16": np.float16, "BF16": ml_dtypes.bfloat16}[dtype]
    for shape in LONG:
        x = RNG.standard_normal(shape).astype(np.float32)
        for value, p in ((np.nan, 0.01), (np.inf, 0.02), (-np.inf, 0.02)):
            x[RNG.random(shape) < p] = value
        x[0, :, 0], x[-1, :, -1] = np.nan, -np.inf
        x[0, :, -1] = np.inf
        x = x.astype(np_t)
        b = GraphBuilder()
        i = b.input("x", shape, dtype)
        outs = [b.op(op, [i], tuple(1 if j == a else d for j, d in enumerate(shape)), dtype,
                     name=f"{op.lower()}{a}", axis=a, nan_mode=nan_mode)
                for op in ("REDUCE_MAX", "REDUCE_MIN") for a in range(3)]
        data = tosa_jax.write(b.build(outs))
        want = {name: y.view(np_t) if y.dtype.kind == "V" else y  # (BF16 comes back raw)
                for name, y in reference(data, {"x": x}, outs).items()}
        for numpy_floats in (False, True):
            got = tosa_jax.load(data, cache=False, numpy_floats=numpy_floats).run({"x": x})
            for name in outs:
                np.testing.assert_array_equal(np.asarray(got[name]).astype(np.float32),
                                              want[name].astype(np.float32),
                                              err_msg=f"{shape} {name} numpy={numpy_floats}")
