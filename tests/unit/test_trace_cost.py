"""Tracing runs no XLA program: constants and constant subgraphs are computed with numpy.

Every XLA compilation while a graph is traced costs tens of milliseconds (a small program per
operator and shape); the lowering of a constant operand must stay on the host. RESCALE of a
constant (a bias, a constant subgraph) was the case in ExecuTorch's graphs: its numpy form is
checked here against the reference model and against the traced form of the same operator.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import monitoring

import tosa_jax
from tosa_jax.ir import GraphBuilder

FIXTURES = Path(__file__).parent.parent / "fixtures"
# XLA compilations, with the thread that made each: a model of an earlier test may still be
# compiling its optimized tier in a background thread (tiered compilation), which is no
# compilation of the trace under test.
COMPILES: list[tuple[str, int]] = []
monitoring.register_event_duration_secs_listener(
    lambda event, _d, **_kw: COMPILES.append((event, threading.get_ident()))
    if event == "/jax/core/compile/backend_compile_duration" else None)


@contextlib.contextmanager
def count_compiles() -> Iterator[list[str]]:
    """The compilations this thread makes inside the block."""
    start = len(COMPILES)
    seen: list[str] = []
    yield seen
    seen.extend(e for e, thread in COMPILES[start:] if thread == threading.get_ident())


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.tosa")))
def test_fixture_traces_without_compiling(name: str) -> None:
    model = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=False)
    xs = [jax.ShapeDtypeStruct(s.shape, s.np_dtype) for s in model.inputs]
    with count_compiles() as seen:
        jax.jit(model.fn).trace(*xs)
    assert seen == [], f"{name}: {len(seen)} XLA compilations while tracing"


RNG = np.random.default_rng(31)
NP = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT48": np.int64}

# (in_t, out_t, scale32, per_channel, rounding, input_unsigned, output_unsigned, in_zp, out_zp)
CASES = [
    ("INT8", "INT8", True, True, "SINGLE_ROUND", False, False, -3, 7),
    ("INT8", "INT32", True, False, "SINGLE_ROUND", False, False, 5, 0),
    ("INT32", "INT8", True, True, "DOUBLE_ROUND", False, False, 0, -5),
    ("INT32", "INT16", True, False, "SINGLE_ROUND", False, False, 0, 0),
    ("INT16", "INT16", False, True, "SINGLE_ROUND", False, False, 0, 0),
    ("INT48", "INT16", False, False, "SINGLE_ROUND", False, False, 0, 0),
    ("INT8", "INT8", True, False, "SINGLE_ROUND", True, False, 128, -2),
    ("INT8", "INT8", True, False, "SINGLE_ROUND", False, True, 3, 128),
    ("INT16", "INT16", True, True, "SINGLE_ROUND", True, False, 32768, 0),
]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    bits = {"INT8": 8, "INT16": 16, "INT32": 32, "INT48": 48}[dtype]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = RNG.integers(lo, hi, shape, endpoint=True, dtype=np.int64)
    x.reshape(-1)[:4] = [lo, hi, -1, 0]
    return x.astype(NP[dtype])


def _bits(zp: list[int], dtype: str) -> np.ndarray:
    """A zero point as stored: an unsigned one (128, 32768) as the signed type's bit pattern."""
    bits = {"INT8": 8, "INT16": 16, "INT32": 32, "INT48": 48}[dtype]
    v = np.asarray(zp, np.int64)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v).astype(NP[dtype])


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:3] + c[5:7])))
def test_rescale_of_a_constant_matches_reference(reference, case) -> None:
    in_t, out_t, scale32, per_channel, rounding, in_u, out_u, in_zp, out_zp = case
    shape, channels = (3, 4, 5), 5 if per_channel else 1
    value = _values(in_t, shape)
    mult = RNG.integers(1 << 14 if scale32 else 1 << 10, (1 << 31) - 1 if scale32 else 32767,
                        channels).astype(np.int32 if scale32 else np.int16)
    # apply_scale_32 REQUIREs |value| < 2**(shift - 1), apply_scale_16 an int32 result
    low = {"INT8": 10, "INT16": 18, "INT32": 33, "INT48": 33}[in_t]
    shift = RNG.integers(low, 63, channels).astype(np.int8)
    zdt = {"INT48": "INT48"}.get(in_t, in_t)
    b = GraphBuilder()
    outs = []
    live = b.input("x", shape, in_t)
    for source in (b.const(value, in_t), live):
        args = [source, b.const(mult, "INT32" if scale32 else "INT16"), b.const(shift, "INT8"),
                b.const(_bits([in_zp], zdt), zdt), b.const(_bits([out_zp], out_t), out_t)]
        outs.append(b.op("RESCALE", args, shape, out_t, scale32=scale32, rounding_mode=rounding,
                         per_channel=per_channel, input_unsigned=in_u, output_unsigned=out_u))
    data = tosa_jax.write(b.build(outs))
    ref = reference(data, {"x": value}, outs)
    model = tosa_jax.load(data, cache=False)
    with count_compiles() as seen:
        arg = (tosa_jax.Wide(jax.ShapeDtypeStruct(shape, np.int32),  # model.fn's INT48 form
                             jax.ShapeDtypeStruct(shape, np.uint32))
               if in_t == "INT48" else jax.ShapeDtypeStruct(shape, NP[in_t]))
        jax.jit(model.fn).trace(arg)
    assert seen == [], "the constant RESCALE compiled XLA programs while tracing"
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data, cache=False).run({"x": value})
        for name in outs:  # the constant's and the traced input's RESCALE
            assert got[name].dtype == ref[name].dtype
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} x64={x64}")


def test_equations_share_one_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph's equations take the traceback of the trace's start (executor.one_traceback),
    not a stack captured at each one; the caller's own context is back afterwards, and an
    operator that fails while traced is still named in the error."""
    from jax._src import source_info_util

    from tosa_jax.lowering import LOWERINGS

    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    xs = [jax.ShapeDtypeStruct(s.shape, s.np_dtype) for s in model.inputs]
    before = source_info_util._source_info_context.context
    eqns = jax.make_jaxpr(model.fn)(*xs).eqns
    assert source_info_util._source_info_context.context is before
    assert len(eqns) > 100
    assert len({id(e.source_info.traceback) for e in eqns}) == 1

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("broken lowering")

    monkeypatch.setitem(LOWERINGS, "TABLE", broken)
    fresh = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)  # (JAX keeps traces by fn)
    with pytest.raises(tosa_jax.TosaError, match="TABLE.*broken lowering"):
        jax.make_jaxpr(fresh.fn)(*xs)
    assert source_info_util._source_info_context.context is before


def test_one_traceback_without_the_private_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where JAX has no such module (another version), a graph traces as JAX would."""
    import sys

    import jax._src

    monkeypatch.delattr(jax._src, "source_info_util")  # (JAX's own modules keep theirs)
    monkeypatch.setitem(sys.modules, "jax._src.source_info_util", None)
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    xs = [jax.ShapeDtypeStruct(s.shape, s.np_dtype) for s in model.inputs]
    eqns = jax.make_jaxpr(model.fn)(*xs).eqns
    assert len(eqns) > 100
    assert len({id(e.source_info.traceback) for e in eqns}) > 1  # JAX's own, per equation


@pytest.mark.parametrize("constant", ["A", "B"])
def test_int8_matmul_of_a_constant_traces_without_compiling(reference, constant: str) -> None:
    # A MATMUL of a constant operand (a linear layer's weight) with zero points: the constant's
    # zero-point sums are computed with numpy, not by JAX programs compiled while tracing.
    a = RNG.integers(-128, 128, (2, 24, 32)).astype(np.int8)
    b = RNG.integers(-128, 128, (2, 32, 20)).astype(np.int8)
    g = GraphBuilder()
    ins = {"A": a, "B": b}
    names = [g.const(v, "INT8") if k == constant else g.input(k, v.shape, "INT8")
             for k, v in ins.items()]
    out = g.op("MATMUL", [*names, g.const([-3], "INT8"), g.const([5], "INT8")], (2, 24, 20),
               "INT32")
    data = tosa_jax.write(g.build([out]))
    feed = {k: v for k, v in ins.items() if k != constant}
    model = tosa_jax.load(data, cache=False)
    xs = [jax.ShapeDtypeStruct(s.shape, s.np_dtype) for s in model.inputs]
    with count_compiles() as seen:
        jax.jit(model.fn).trace(*xs)
    assert seen == [], f"{len(seen)} XLA compilations while tracing"
    np.testing.assert_array_equal(model.run(feed)[out], reference(data, feed, [out])[out])


def test_int8_matmul_t_of_a_constant_traces_without_compiling(reference) -> None:
    # TOSA 1.1's MATMUL_T of a constant B [1, W, C] (a weight shared by the batch): its
    # transposed, broadcast copy and zero-point sums are made with numpy while tracing.
    a = RNG.integers(-128, 128, (2, 24, 32)).astype(np.int8)
    b = RNG.integers(-128, 128, (1, 20, 32)).astype(np.int8)
    g = GraphBuilder((1, 1, 0, True))
    out = g.op("MATMUL_T", [g.input("A", a.shape, "INT8"), g.const(b, "INT8"),
                            g.const([-3], "INT8"), g.const([5], "INT8")], (2, 24, 20), "INT32")
    data = tosa_jax.write(g.build([out]))
    model = tosa_jax.load(data, cache=False)
    with count_compiles() as seen:
        jax.jit(model.fn).trace(jax.ShapeDtypeStruct(a.shape, a.dtype))
    assert seen == [], f"{len(seen)} XLA compilations while tracing"
    np.testing.assert_array_equal(model.run({"A": a})[out], reference(data, {"A": a}, [out])[out])


@pytest.mark.parametrize("op", ["CONV2D", "DEPTHWISE_CONV2D"])
def test_zero_point_term_costs_no_equation(op: str) -> None:
    """An int8 convolution's constant bias is added with its input zero point's term
    (bias - zp sum(w - wzp)): the same equations as with a zero point of 0 (the depthwise taps
    read the zero point as their padding). Exactness: test_conv_fast_paths, the conformance
    slice."""
    rng = np.random.default_rng(3)
    shape = (4, 3, 3, 5) if op == "CONV2D" else (3, 3, 5, 1)
    w = rng.integers(-128, 128, shape).astype(np.int8)
    oc = 4 if op == "CONV2D" else 5

    def eqns(zp: int) -> list[str]:
        b = GraphBuilder()
        x = b.input("x", (1, 8, 8, 5), "INT8")
        out = b.op(op, [x, b.const(w, "INT8"), b.const(rng.integers(-99, 99, oc), "INT32"),
                        b.const([zp], "INT8"), b.const([0], "INT8")], (1, 8, 8, oc), "INT32",
                   pad=(1, 1, 1, 1), stride=(1, 1), dilation=(1, 1), acc_type="INT32",
                   local_bound=False)
        model = tosa_jax.load(b.build([out]), cache=False)
        jaxpr = jax.make_jaxpr(model.fn)(np.zeros((1, 8, 8, 5), np.int8))
        return sorted(e.primitive.name for e in jaxpr.eqns)

    assert eqns(-7) == eqns(0)


def test_apply_scale_32_is_one_int64_operation_on_the_cpu() -> None:
    """apply_scale_32 with constant scales (RESCALE of an int8 convolution's accumulator, with
    its output zero point) traces to one primitive, which XLA CPU gets as int64 arithmetic; a
    trace for another platform, and any platform's lowering of the primitive, take the 32-bit
    forms (no 64-bit type in the module)."""
    import tosa_jax.lowering.numerics as nx

    v = jax.ShapeDtypeStruct((1, 8, 8, 4), np.int32)
    m = np.array([1518500250, 1073741824, 2147483647, 7], np.int32)
    s = np.array([37, 38, 38, 40], np.int32)

    def f(x):
        return nx.apply_scale_32(x, m, s, value_range=(-(2**20), 2**20), out_zp=-5)

    assert [e.primitive for e in jax.make_jaxpr(f)(v).eqns] == [nx.scale_32_p]
    assert "1x8x8x4xi64>" in jax.jit(f).lower(v).as_text()
    cuda = jax.export.export(jax.jit(f), platforms=["cuda"])(v).mlir_module()
    assert "xi64>" not in cuda and "custom_call" not in cuda
    with nx.lowering_for("cuda"):  # (a function of its own: JAX's trace cache)
        eqns = jax.make_jaxpr(lambda x: f(x))(v).eqns
    assert len(eqns) > 3 and nx.scale_32_p not in [e.primitive for e in eqns]
    # A value of numerics.WIDE_MAX_ELEMENTS or more: the 32-bit forms for per-channel scales
    # (they run faster there), int64 for one scale for the tensor.
    big = jax.ShapeDtypeStruct((1, 128, 128, 4), np.int32)
    assert nx.scale_32_p not in [e.primitive for e in jax.make_jaxpr(f)(big).eqns]
    assert [e.primitive for e in jax.make_jaxpr(lambda x: nx.apply_scale_32(
        x, m[0], s[0], value_range=(-(2**20), 2**20)))(big).eqns] == [nx.scale_32_p]
