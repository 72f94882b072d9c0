"""XLA CPU options chosen per graph by its convolutions (tosa_jax.model.FLOAT_CONV_OPTIONS):
float-only convolution graphs keep YNNPACK for matrix products only, large ones not even for
those; integer ones keep the defaults, except the quick tier of a graph of few integer
multiply-adds (no YNNPACK); the choice survives the compile cache's model record; an XLA that
does not know the option compiles without it."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import model as model_mod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_options_follow_convolution_types(tmp_path) -> None:
    fp = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    i8 = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    assert fp.conv_kinds == ["float"] and i8.conv_kinds == ["int"]
    assert fp.xla_options() == model_mod.FLOAT_CONV_OPTIONS
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
    assert m.xla_options() == {"xla_cpu_no_such_option": "x"}
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
