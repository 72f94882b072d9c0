"""XLA CPU options chosen per graph by its convolutions (tosa_jax.model.FLOAT_CONV_OPTIONS):
float-only convolution graphs keep YNNPACK for matrix products only; integer ones keep the
defaults; the choice survives the compile cache's model record; an XLA that does not know the
option compiles without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    # a second load takes the record from the cache, graph unread
    for _ in range(2):
        cached = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=tmp_path)
    assert cached._graph is None and cached.conv_kinds == ["float"]


def test_unknown_option_compiles_without_it(monkeypatch) -> None:
    monkeypatch.setattr(model_mod, "FLOAT_CONV_OPTIONS", {"xla_cpu_no_such_option": "x"})
    x = np.load(FIXTURES / "cnn_fp32.input.npy")
    m = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    assert m.xla_options() == {"xla_cpu_no_such_option": "x"}
    got = np.asarray(m(x))  # compiled without the unknown option
    monkeypatch.undo()
    expected = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)(x)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-6)
