"""evaluate() cannot mislead: class-score metrics only on [N, classes] outputs (or a named
axis), labels checked before anything runs, top-k / per-class / confusion matrix derived by hand;
compare_models on the INT8 and FP32 exports of one network."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaInputError
from tosa_jax import inspect as ti
from tosa_jax.testing import FIXTURES


def _identity(shape: tuple[int, ...]) -> tosa_jax.Model:
    b = GraphBuilder()
    x = b.input("x", shape, "FP32")
    return tosa_jax.load(b.build([b.op("IDENTITY", [x], shape, "FP32", name="y")]))


def _no_run(monkeypatch) -> None:
    """Fail if evaluate gets as far as building its batched function."""
    def boom(*a, **k):
        raise AssertionError("evaluate ran before refusing")
    # the module itself (tosa_jax.evaluate the attribute is the function), imported here: the
    # test must not depend on another test of its worker having imported it first
    monkeypatch.setattr(importlib.import_module("tosa_jax.evaluate"), "batched", boom)


def test_accuracy_refused_on_a_multi_axis_output(monkeypatch) -> None:
    model = _identity((1, 12, 5))
    xs = np.random.default_rng(0).normal(size=(6, 12, 5)).astype(np.float32)
    labels = np.arange(6) % 5
    _no_run(monkeypatch)
    with pytest.raises(TosaInputError, match=r"shape \[1, 12, 5\].*axis="):
        tosa_jax.evaluate(model, xs, labels=labels, progress=False)
    with pytest.raises(TosaInputError, match=r"shape \[1, 12, 5\]"):
        tosa_jax.evaluate(model, xs, labels=labels, metric="top3", progress=False)


def test_named_axis_predicts_along_it() -> None:
    model = _identity((1, 12, 5))
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(4, 12, 5)).astype(np.float32)
    labels = rng.integers(0, 5, (4, 12))
    r = tosa_jax.evaluate(model, xs, labels=labels, axis=1, progress=False)
    want = xs.argmax(axis=2)  # hand-derived: the class axis is the last of [12, 5]
    np.testing.assert_array_equal(r.predictions, want)
    assert r.metric == pytest.approx(np.mean(want == labels))
    with pytest.raises(TosaInputError, match=r"labels \[N, \*\[12\]\]"):
        tosa_jax.evaluate(model, xs, labels=np.zeros(4, int), axis=1, progress=False)
    with pytest.raises(TosaInputError, match="axis 3"):
        tosa_jax.evaluate(model, xs, labels=labels, axis=3, progress=False)


def test_labels_checked_before_running(monkeypatch) -> None:
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    xs = np.zeros((10, *model.inputs[0].shape[1:]), np.int8)
    _no_run(monkeypatch)
    with pytest.raises(TosaInputError, match="9 labels for 10 samples"):
        tosa_jax.evaluate(model, xs, labels=np.zeros(9, int), progress=False)


def test_top_k_per_class_and_confusion_by_hand() -> None:
    model = _identity((1, 3))
    scores = np.array([[0.9, 0.05, 0.05],   # label 0: top-1 right
                       [0.2, 0.5, 0.3],     # label 2: top-1 wrong (1), top-2 right
                       [0.1, 0.3, 0.6],     # label 2: right
                       [0.5, 0.1, 0.4],     # label 1: wrong (0), not in top-2
                       [0.3, 0.4, 0.3]],    # label 1: right
                      np.float32)
    labels = np.array([0, 2, 2, 1, 1])
    r = tosa_jax.evaluate(model, scores, labels=labels, metric="top2", progress=False)
    assert r.metric_name == "top2" and r.metric == pytest.approx(4 / 5)
    assert r.extra["accuracy"] == pytest.approx(3 / 5)
    assert r.extra["per_class_accuracy"] == [1.0, 0.5, 0.5]
    np.testing.assert_array_equal(r.extra["confusion"], [[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    acc = tosa_jax.evaluate(model, scores, labels=labels, top_k=2, progress=False)
    assert acc.metric == pytest.approx(3 / 5) and acc.extra["top2"] == pytest.approx(4 / 5)


def test_cli_eval_axis_and_refusal(tmp_path, capsys) -> None:
    from tosa_jax import write
    from tosa_jax.cli import main

    model = _identity((1, 12, 5))
    (tmp_path / "g.tosa").write_bytes(write(model.graph))
    xs = np.random.default_rng(2).normal(size=(3, 1, 12, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "y.npy", np.zeros(3, int))
    rc = main(["eval", str(tmp_path / "g.tosa"), str(tmp_path / "x.npy"), "--labels",
               str(tmp_path / "y.npy"), "-q"])
    assert rc == 2 and "[1, 12, 5]" in capsys.readouterr().err
    np.save(tmp_path / "y.npy", np.zeros((3, 12), int))
    rc = main(["eval", str(tmp_path / "g.tosa"), str(tmp_path / "x.npy"), "--labels",
               str(tmp_path / "y.npy"), "--axis", "2", "-q"])
    out = capsys.readouterr().out
    assert rc == 0 and f"accuracy: {np.mean(xs[:, 0].argmax(2) == 0):.4f}" in out


def test_compare_models_int8_against_fp32() -> None:
    mi = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    mf = tosa_jax.load(FIXTURES / "cnn_fp32.tosa")
    xq, xf = np.load(FIXTURES / "cnn_int8.input.npy"), np.load(FIXTURES / "cnn_fp32.input.npy")
    zp = int(mi.graph.main.tensors["tosa_conv2d_default_input_zp"].data[0])
    m = xq != zp
    scale = float(np.median(xf[m] / (xq[m].astype(np.float64) - zp)))
    rng = np.random.default_rng(4)
    samples = (xf + 0.1 * rng.normal(size=(12, *xf.shape[1:]))[:, None]).astype(np.float32)
    with pytest.raises(TosaInputError, match="input_qparams"):
        ti.compare_models(mi, mf, samples)
    q = ti.compare_models(mi, mf, samples, input_qparams=(scale, zp), layer_samples=4,
                          progress=False)
    # the arithmetic, by hand from each model's own calls
    xa = ti.quantize(samples, scale, zp)
    oa = np.stack([np.asarray(mi(x)) for x in xa])
    ob = np.stack([np.asarray(mf(x)) for x in samples])
    agree = np.mean(oa.reshape(12, -1).argmax(1) == ob.reshape(12, -1).argmax(1))
    assert q.samples == 12 and q.agreement == pytest.approx(agree)
    assert q.output_method == "correlation"  # no output scale given: best affine fit
    slope, icpt = np.polyfit(oa.ravel().astype(float), ob.ravel(), 1)
    resid = ob.ravel() - (slope * oa.ravel() + icpt)
    power = np.sum(ob.astype(float) ** 2)
    assert q.sqnr_db == pytest.approx(10 * np.log10(power / np.sum(resid ** 2)))
    rows = {row.tensor: row for row in q.per_layer.rows}
    assert rows["tosa_transpose_default"].method == "dequantized"
    assert rows["tosa_transpose_default"].samples == 4
