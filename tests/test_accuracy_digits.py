"""tosa_jax on the digits accuracy study's INT8 graph (bench/accuracy_digits.py): every held-out
sample's int8 output must equal the TOSA reference model's, which that script saved.

Skipped unless the artefacts exist (they need torch/ExecuTorch to produce: run
``python bench/accuracy_digits.py`` first).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tosa_jax

WORK = Path(__file__).resolve().parent.parent / ".cache" / "digits"
NEEDED = ["digits_int8.tosa", "test_x_int8.npy", "test_y.npy", "reference_int8.npy", "meta.json"]


@pytest.mark.skipif(not all((WORK / f).exists() for f in NEEDED),
                    reason="run bench/accuracy_digits.py first")
def test_digits_int8_identical_to_reference() -> None:
    meta = json.loads((WORK / "meta.json").read_text())
    xq = np.load(WORK / "test_x_int8.npy")
    y = np.load(WORK / "test_y.npy")
    ref = np.load(WORK / "reference_int8.npy")
    res = tosa_jax.evaluate(tosa_jax.load(WORK / "digits_int8.tosa"), xq, labels=y,
                            batch_size=128, progress=False)
    got = res.outputs[meta["INT"]["outputs"][0]].reshape(len(y), -1)
    assert got.dtype == ref.dtype == np.int8
    np.testing.assert_array_equal(got, ref)
    assert res.metric == pytest.approx(float(np.mean(ref.argmax(1) == y)))
