"""TFLite models (tests/fixtures/tflite, made by bench/make_tflite_models.py) through
tosa-converter-for-tflite and tosa-opt, against the TFLite interpreter's reference kernels
(LiteRT). Needs the tflite-test extra: skipped without it.

Exact where the legalization is: every single int8 activation, softmax and layer norm; int8
networks with fully-connected layers can differ by a few units, and the test proves why: the
converted graph equals the TOSA reference model bit for bit, and switching the RESCALEs after
fully-connected layers to SINGLE_ROUND (LiteRT's reference FULLY_CONNECTED rounds once; the
legalization asks for DOUBLE_ROUND) makes them exact. Float models agree to float rounding,
except GELU (legalized as the tanh approximation; Keras/LiteRT's is the erf form).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tosa_converter_for_tflite")
pytest.importorskip("ai_edge_litert")

import tosa_jax  # noqa: E402
from tosa_jax.cli import main as cli  # noqa: E402
from tosa_jax.testing import tflite_litert as bench  # noqa: E402

N = 16
MODELS = bench.MODELS_DIR


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOSA_JAX_CACHE_DIR", str(tmp_path / "cache"))


def _run(stem: str, n: int = N):
    data = (MODELS / f"{stem}.tflite").read_bytes()
    it = bench.litert(data)
    xs = bench.dataset(it, n)
    want = bench.run_litert(it, xs)
    tosa = tosa_jax.convert(data, "tosa", progress=False)
    graph = tosa_jax.read(tosa)
    got = bench.run_tosa_jax(graph, xs, want.shape)
    return xs, want, got, tosa, graph


EXACT_INT8 = ["op_sigmoid_int8", "op_tanh_int8", "op_softmax_int8", "op_gelu_int8",
              "op_layernorm_int8"]
# int8 models with fully-connected layers: the largest difference to LiteRT allowed
FC_INT8 = {"cnn_int8": 1, "mobilenet_int8": 1, "op_dense_int8": 1, "gru_int8": 2,
           "lstm_int8": 4, "transformer_int8": 3}


@pytest.mark.parametrize("stem", EXACT_INT8)
def test_int8_bit_exact_with_litert(stem: str) -> None:
    _, want, got, _, _ = _run(stem)
    assert got.dtype == want.dtype == np.int8
    np.testing.assert_array_equal(got, want)


SLOW = {"lstm_int8", "gru_int8"}  # 8 unrolled steps: minutes to compile on a loaded machine


@pytest.mark.parametrize("stem", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s
                                  for s in sorted(FC_INT8)])
def test_int8_fully_connected_rounding(stem: str) -> None:
    xs, want, got, tosa, graph = _run(stem)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= FC_INT8[stem]
    # the runtime is exact: the difference is the legalization's ...
    assert bench.reference_agrees(tosa, graph, xs[:2], got[:2])
    # ... and it is all in the fully-connected layers' rounding
    assert bench.fc_single_round(graph) > 0
    np.testing.assert_array_equal(bench.run_tosa_jax(graph, xs, want.shape), want)


FP32 = {"cnn_fp32": 1e-5, "mobilenet_fp32": 1e-5, "lstm_fp32": 1e-5, "gru_fp32": 1e-5,
        "op_softmax_fp32": 1e-6, "op_layernorm_fp32": 1e-5, "transformer_fp32": 2e-3}


@pytest.mark.parametrize("stem", sorted(FP32))
def test_fp32_close_to_litert(stem: str) -> None:
    _, want, got, _, _ = _run(stem)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=FP32[stem])


def test_gelu_is_legalized_as_the_tanh_approximation() -> None:
    xs, want, got, _, _ = _run("op_gelu_fp32", 4)
    x = xs.astype(np.float64)
    tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    erf = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    assert np.abs(want - erf).max() < 1e-6  # LiteRT: the exact (erf) GELU
    assert np.abs(got - tanh).max() < 1e-6  # the converted graph: the tanh form
    assert np.abs(got - want).max() > 1e-4


def test_cli_run_and_partition_tflite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = MODELS / "cnn_int8.tflite"
    it = bench.litert(path.read_bytes())
    x = bench.dataset(it, 1)[0]
    np.save(tmp_path / "x.npy", x)
    assert cli(["run", str(path), str(tmp_path / "x.npy"), "-o", str(tmp_path / "o")]) == 0
    (out,) = list((tmp_path / "o").glob("*.npy"))
    np.testing.assert_array_equal(np.load(out), bench.run_litert(it, x[None])[0])
    assert cli(["partition", str(path), "--target", "ethos-u55-128",
                "--out", str(tmp_path / "parts")]) == 0
    assert "ethos-u55-128" in capsys.readouterr().out
    assert list((tmp_path / "parts").glob("*.tosa"))


def test_damaged_tflite_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.tflite"
    path.write_bytes((MODELS / "cnn_int8.tflite").read_bytes()[:300])
    with pytest.raises(tosa_jax.TosaConverterError, match="bad.tflite"):
        tosa_jax.load(path)
