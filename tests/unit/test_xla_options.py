"""XLA CPU options chosen per graph by its convolutions (tosa_jax.model.FLOAT_CONV_OPTIONS):
float-only convolution graphs keep YNNPACK for matrix products only, large ones not even for
those; integer ones keep the defaults, except the quick tier of a graph of few integer
multiply-adds (no YNNPACK); the choice survives the compile cache's model record; an XLA that
does not know the option compiles without it. Small float graphs computing few transcendentals
are compiled with XLA's elemental emitters (ELEMENTAL_TRANSCENDENTALS)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import model as model_mod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def _xla_executables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about XLA's executables: a graph's first call runs one, not the graph's
    numpy program (tosa_jax.npexec, tested in test_npexec.py); subprocesses inherit this."""
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")


# What a small float graph of few transcendentals takes (model.ELEMENTAL_TRANSCENDENTALS): the
# elemental emitters, their module split into SPLIT_PER_CORE parts a usable core (model.XLA_SPLIT
# at most)
_ELEMENTAL = {model_mod._EMITTERS: False,
              model_mod._SPLIT: min(model_mod.XLA_SPLIT,
                                    model_mod.SPLIT_PER_CORE * model_mod.usable_cores())}


def test_options_follow_convolution_types(tmp_path) -> None:
    fp = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    i8 = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    assert fp.conv_kinds == ["float"] and i8.conv_kinds == ["int"]
    # (a small float graph: XLA's elemental emitters too, see the test below)
    assert fp.xla_options() == {**model_mod.FLOAT_CONV_OPTIONS, **_ELEMENTAL}
    assert i8.xla_options() == {}
    assert model_mod.xla_options(["float"], "gpu") == {}
    assert model_mod.xla_options(["float", "int"], "cpu") == {}
    assert fp.float_macs < model_mod.LARGE_FLOAT_MACS and i8.float_macs == 0
    large = model_mod.xla_options(["float"], "cpu", model_mod.LARGE_FLOAT_MACS)
    assert large == model_mod.LARGE_FLOAT_CONV_OPTIONS != model_mod.FLOAT_CONV_OPTIONS
    assert model_mod.xla_options(["int"], "cpu", model_mod.LARGE_FLOAT_MACS) == {}
    # a second load takes the record from the cache, graph unread
    for _ in range(2):
        cached = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=tmp_path)
    assert cached._graph is None and cached.conv_kinds == ["float"]
    assert cached.float_macs == fp.float_macs and cached.int_macs == fp.int_macs == 0
    assert cached.transcendentals == fp.transcendentals == 0
    assert cached.narrow_floats is fp.narrow_floats is False


def test_quick_tier_of_few_integer_macs_without_ynnpack(reference) -> None:
    """cnn_int8 (0.3 M integer multiply-adds): its quick tier leaves the matrix products to XLA's
    own loops, the optimized tier gives them to YNNPACK; both give the reference model's
    integers. A graph of many keeps YNNPACK in both."""
    m = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    assert 0 < m.int_macs < model_mod.QUICK_LIBRARY_MACS and m.float_macs == 0
    assert model_mod.quick_options(m.int_macs)[model_mod._YNN] == ""
    assert model_mod._YNN not in model_mod.quick_options(model_mod.QUICK_LIBRARY_MACS)
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    out = m.outputs[0].name
    expected = reference(FIXTURES / "cnn_int8.tosa", {m.inputs[0].name: x}, [out])[out]
    lowered = m._lower((x,))
    for quick in (True, False):
        options = {**m.xla_options((x,)), **(model_mod.quick_options(m.int_macs) if quick
                                             else {})}
        exe = model_mod.compile_lowered(lowered, options)
        assert ("__ynn_fusion" in exe.as_text()) != quick
        (got,) = [np.asarray(y) for y in jax.tree.leaves(exe(x))]
        assert got.tobytes() == np.asarray(expected, got.dtype).tobytes()


@pytest.mark.parametrize("name", ["cnn_fp32", "encoder_fp32"])
def test_float_macs_against_xla_cost_analysis(name: str) -> None:
    """Two flops a multiply-add: XLA's count of the graph's operations is 2 x our multiply-adds
    of its convolutions and matrix products, plus its other (elementwise) operations."""
    m = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=False)
    x = np.load(FIXTURES / f"{name}.input.npy")
    cost = jax.jit(m.fn).lower(x).cost_analysis()
    flops = (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]
    assert m.float_macs > 0 and 2 * m.float_macs <= flops <= 1.5 * 2 * m.float_macs


def test_unknown_option_compiles_without_it(monkeypatch) -> None:
    monkeypatch.setattr(model_mod, "FLOAT_CONV_OPTIONS", {"xla_cpu_no_such_option": "x"})
    x = np.load(FIXTURES / "cnn_fp32.input.npy")
    m = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    assert m.xla_options() == {"xla_cpu_no_such_option": "x", **_ELEMENTAL}
    got = np.asarray(m(x))  # compiled without the unknown option
    monkeypatch.undo()
    expected = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)(x)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_quick_tier_without_its_unknown_emitter_option(monkeypatch, reference) -> None:
    # The quick tier's emitter flag is experimental too: an XLA that does not know it compiles
    # the quick tier without it, and the integers are the reference model's.
    monkeypatch.setattr(model_mod, "_EMITTERS", "xla_cpu_no_such_option")
    monkeypatch.setattr(model_mod, "QUICK_OPTIONS", {"xla_backend_optimization_level": 0,
                                                     "xla_cpu_no_such_option": False})
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    m = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    got = np.asarray(m(x))
    assert [s.tier for s in m._executables.values()] == [0]
    out = m.outputs[0].name
    expected = reference(FIXTURES / "cnn_int8.tosa", {m.inputs[0].name: x}, [out])[out]
    assert got.tobytes() == np.asarray(expected, got.dtype).tobytes()


def test_macs_of_tosa_1_1_products() -> None:
    """MATMUL_T's multiply-adds, against XLA's count of the lowered graph's operations (two a
    multiply-add, plus the zero points' subtractions), and the block-scaled products' from
    their shapes (C products summed for each output element; KH x KW x IC for a convolution's)."""
    from tosa_jax.ir import GraphBuilder, Operator, Tensor, contraction_macs

    g = GraphBuilder((1, 1, 0, True))
    a = g.input("a", (2, 48, 32), "FP32")
    b = g.input("b", (2, 40, 32), "FP32")
    zp = g.const(np.zeros((1,), np.float32), "FP32")
    out = g.op("MATMUL_T", [a, b, zp, zp], (2, 48, 40), "FP32")
    graph = g.build([out])
    m = tosa_jax.load(tosa_jax.write(graph), cache=False)
    assert m.float_macs == 2 * 48 * 40 * 32 and m.int_macs == 0
    cost = jax.jit(m.fn).lower(np.zeros((2, 48, 32), np.float32),
                               np.zeros((2, 40, 32), np.float32)).cost_analysis()
    flops = (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]
    assert 2 * m.float_macs <= flops <= 1.5 * 2 * m.float_macs
    block = g.block
    t = {"ad": (2, 48, 64), "as": (2, 48, 2), "bd": (1, 40, 64), "bs": (1, 40, 2),
         "mo": (2, 48, 40), "x": (1, 9, 9, 64), "xs": (1, 9, 9, 2), "w": (8, 3, 3, 64),
         "ws": (8, 3, 3, 2), "co": (1, 7, 7, 8)}
    for name, shape in t.items():
        block.tensors[name] = Tensor(name, shape, "FP32" if name in ("mo", "co") else "FP8E4M3")
    mm = Operator("MATMUL_T_BLOCK_SCALED", ["ad", "as", "bd", "bs"], ["mo"], {"block_size": 32})
    conv = Operator("CONV2D_BLOCK_SCALED", ["x", "xs", "w", "ws"], ["co"], {"block_size": 32})
    assert contraction_macs(block, mm) == 2 * 48 * 40 * 64
    assert contraction_macs(block, conv) == 7 * 7 * 8 * (3 * 3 * 64)
    # an MXINT8 product sums in FP32: counted with the float multiply-adds
    for name in ("ad", "bd"):
        block.tensors[name] = Tensor(name, t[name], "MXINT8")
    block.operators.append(mm)
    assert block is graph.main
    assert model_mod._macs(graph, floats=True) == 2 * 48 * 40 * (32 + 64)
    assert model_mod._macs(graph, floats=False) == 0


def _tanh_graph(elements: int) -> tosa_jax.Model:
    from tosa_jax.ir import GraphBuilder

    g = GraphBuilder()
    a = g.input("a", (elements,), "FP32")
    return tosa_jax.load(tosa_jax.write(g.build([g.op("TANH", [a], (elements,), "FP32")])),
                         cache=False)


def test_elemental_emitters_for_small_float_graphs_of_few_transcendentals() -> None:
    """XLA's elemental emitters for a small float graph (Model.small_floats) computing at most
    ELEMENTAL_TRANSCENDENTALS transcendental elements a call; the fusion emitters above that,
    for graphs with floats narrower than 16 bits, for large float graphs and for integer
    graphs (their quick tier has its own options)."""
    limit = model_mod.ELEMENTAL_TRANSCENDENTALS
    at, over = _tanh_graph(limit), _tanh_graph(limit + 1)
    assert at.transcendentals == limit and over.transcendentals == limit + 1
    assert at.small_floats() and over.small_floats()
    assert at.xla_options() == _ELEMENTAL
    assert over.xla_options() == {}
    assert model_mod._EMITTERS not in tosa_jax.load(FIXTURES / "cnn_int8.tosa",
                                                    cache=False).xla_options()
    # floats narrower than 16 bits keep the fusion emitters (XLA's elemental emitters round
    # some f32 -> f4e2m1fn conversions otherwise: test_tosa11.py's block-scaled casts)
    from tosa_jax.ir import GraphBuilder

    g = GraphBuilder()
    a = g.input("a", (64,), "FP32")
    narrow = tosa_jax.load(tosa_jax.write(g.build([g.op("CAST", [a], (64,), "FP8E4M3")])),
                           cache=False)
    assert narrow.narrow_floats and not at.narrow_floats and narrow.small_floats()
    assert narrow.xla_options() == {}
    big = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    big.float_macs = model_mod.SEQUENTIAL_MACS  # as a large float graph would count
    assert not big.small_floats() and model_mod._EMITTERS not in big.xla_options()


@pytest.mark.parametrize("name", ["cnn_fp32", "encoder_fp32", "gru_fp32"])
def test_elemental_emitters_compute_the_fusion_emitters_bits(name: str) -> None:
    """The three small float fixtures (0, 2,048 and 384 transcendental elements a call):
    measured, the elemental emitters' executable gives the fusion emitters' bits."""
    m = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=False)
    x = np.load(FIXTURES / f"{name}.input.npy")
    rng = np.random.default_rng(3)
    xs = [x, (rng.standard_normal(x.shape) * x.std() + x.mean()).astype(x.dtype)]
    options = m.xla_options((x,))
    assert options.pop(model_mod._EMITTERS) is False
    split = options.pop(model_mod._SPLIT)
    assert 1 <= split <= model_mod.XLA_SPLIT
    lowered = m._lower((x,))
    # (the elemental emitters as the model compiles them: their module in `split` parts)
    elemental, fusion = (model_mod.compile_lowered(lowered, {**options, **extra})
                         for extra in ({model_mod._EMITTERS: False, model_mod._SPLIT: split},
                                       {}))
    # two compiles, not one executable from JAX's in-memory cache
    assert (getattr(elemental, "exe", elemental).runtime_executable()
            is not getattr(fusion, "exe", fusion).runtime_executable())
    for v in xs:
        a, b = ([np.asarray(y).tobytes() for y in jax.tree.leaves(exe(v))]
                for exe in (elemental, fusion))
        assert a == b


def _row_matmuls(count: int, width: int = 96) -> tuple[bytes, list[str]]:
    """A chain of ``count`` FP32 MATMULs of one row ([1, 1, width] x [1, width, width]), each
    output read by the next, all of them outputs."""
    from tosa_jax.ir import GraphBuilder

    rng = np.random.default_rng(7)
    g = GraphBuilder()
    x = g.input("x", (1, 1, width), "FP32")
    zp = g.const([0.0], "FP32")
    outs = []
    for _ in range(count):
        w = g.const(rng.standard_normal((1, width, width)).astype(np.float32) / 8, "FP32")
        x = g.op("MATMUL", [x, w, zp, zp], (1, 1, width), "FP32")
        outs.append(x)
    return tosa_jax.write(g.build(outs)), outs


def test_one_row_float_products_as_two_rows(reference, tmp_path) -> None:
    """A float graph of at most ROW_PAIR_PRODUCTS products of one row computes them as
    products of two rows on the CPU (a library call, no kernel of XLA's to compile); one of
    more keeps XLA's one-row kernels. Both give the reference model's values (the DOT_PRODUCT
    bound's tolerance), and the count survives the cache's record."""
    limit = model_mod.ROW_PAIR_PRODUCTS
    x = np.random.default_rng(8).standard_normal((1, 1, 96)).astype(np.float32)
    for count, pairs in ((limit, True), (limit + 1, False)):
        data, outs = _row_matmuls(count)
        m = tosa_jax.load(data, cache=False)
        assert m.row_products == count
        got = m.run({"x": x})
        hlo = next(iter(m._executables.values())).exe.as_text()
        assert (" dot(" in hlo) and (("f32[2,96]" in hlo) is pairs), count
        want = reference(data, {"x": x}, outs)
        for name in outs:  # (sums of 96 products of magnitude ~1: the bound is ~1e-4)
            np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-5, atol=1e-5)
        for _ in range(2):  # the second load takes the record from the cache, graph unread
            cached = tosa_jax.load(data, cache=tmp_path)
        assert cached._graph is None and cached.row_products == count
    assert tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False).row_products == 0


def test_tiny_one_row_float_products_fused(reference) -> None:
    """FP32 products of one row with a weight of at most TINY_ROW_PRODUCT elements (a small
    recurrent step's) are multiplications and a sum, in the loops around them: no product
    left for XLA to compile, however many there are; the reference model's values within the
    DOT_PRODUCT bound's tolerance."""
    from tosa_jax.lowering.numerics import TINY_ROW_PRODUCT

    width, count = 32, model_mod.ROW_PAIR_PRODUCTS + 2
    assert width * width <= TINY_ROW_PRODUCT
    data, outs = _row_matmuls(count, width)
    x = np.random.default_rng(9).standard_normal((1, 1, width)).astype(np.float32)
    m = tosa_jax.load(data, cache=False)
    got = m.run({"x": x})
    hlo = next(iter(m._executables.values())).exe.as_text()
    assert " dot(" not in hlo
    want = reference(data, {"x": x}, outs)
    for name in outs:
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-5, atol=1e-6)
