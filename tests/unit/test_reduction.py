"""Reductions against the reference model: every axis, keepdim shapes, extreme values."""

from __future__ import annotations

import jax
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


@pytest.mark.parametrize("dtype", ["FP32", "BF16"])
def test_long_axes_float_sum(reference, dtype: str) -> None:
    """REDUCE_SUM of FP32 and BF16 over long axes (in blocks: numerics.blocked_reduce, any order
    of the sum being compliant) within the dot-product bound of the reference model's FP64
    result, ks * 2**-23 * sum|x| (BF16: plus the output's rounding), on XLA and the numpy
    program; and XLA CPU's program has no reduce_window (the form it runs element by
    element) where a 1,024-long sum feeds an elementwise user (a group norm's mean)."""
    import ml_dtypes

    np_t = {"FP32": np.float32, "BF16": ml_dtypes.bfloat16}[dtype]
    for shape in LONG:
        x = (RNG.standard_normal(shape) * RNG.choice([1e-3, 1.0, 1e3], shape)).astype(np_t)
        x[0, :, 0] = -0.0
        b = GraphBuilder()
        i = b.input("x", shape, dtype)
        outs = [b.op("REDUCE_SUM", [i], tuple(1 if j == a else d for j, d in enumerate(shape)),
                     dtype, name=f"sum{a}", axis=a) for a in range(3)]
        data = tosa_jax.write(b.build(outs))
        want = reference(data, {"x": x}, outs, precise=True)
        x64 = x.astype(np.float64)
        for numpy_floats in (False, True):
            got = tosa_jax.load(data, cache=False, numpy_floats=numpy_floats).run({"x": x})
            for a, name in enumerate(outs):
                ours = np.asarray(got[name]).astype(np.float64)
                exact = np.asarray(want[name]).astype(np.float64)
                bound = shape[a] * 2.0**-23 * np.sum(np.abs(x64), axis=a, keepdims=True)
                if dtype == "BF16":
                    bound = bound + 2.0**-8 * np.abs(exact)
                assert np.all(np.abs(ours - exact) <= bound), (shape, name, numpy_floats)
    # (a float convolution first: such graphs compile without YNNPACK's reduce fusions,
    # model.xla_options, and there XLA CPU rewrites a long reduction into a reduce_window)
    b = GraphBuilder()
    i = b.input("x", (1, 32, 32, 32), "FP32")
    zero = b.const(np.zeros(1, np.float32), "FP32")
    y = b.op("CONV2D", [i, b.const(RNG.standard_normal((32, 1, 1, 32)).astype(np.float32),
                                   "FP32"), b.const(np.zeros(32, np.float32), "FP32"),
                        zero, zero], (1, 32, 32, 32), "FP32", pad=(0, 0, 0, 0), stride=(1, 1),
             dilation=(1, 1), acc_type="FP32", local_bound=False)
    g = b.op("RESHAPE", [y, b.const([1, 1024, 8, 4], "SHAPE")], (1, 1024, 8, 4), "FP32")
    total = b.op("REDUCE_SUM", [b.op("REDUCE_SUM", [g], (1, 1024, 8, 1), "FP32", axis=3)],
                 (1, 1, 8, 1), "FP32", axis=1)
    centred = b.op("SUB", [g, total], (1, 1024, 8, 4), "FP32")
    model = tosa_jax.load(b.build([centred]), cache=False)
    x = RNG.standard_normal((1, 32, 32, 32)).astype(np.float32)
    model.compile(x)
    assert "reduce-window" not in next(iter(model._executables.values())).exe.as_text()
    # and few equations to trace: the blocks' sums, their boundary, one more sum (a chain over
    # the 32 blocks took 60 more, a third of unet_fp32's tracing)
    eqns = jax.make_jaxpr(tosa_jax.load(b.build([total]), cache=False).fn)(
        jax.ShapeDtypeStruct(x.shape, x.dtype)).eqns
    assert sum(e.primitive.name.startswith("reduce") for e in eqns) <= 8 and len(eqns) < 40
