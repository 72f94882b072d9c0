"""CLAMP against the reference model (int8/int16 bounds, fp32 NaN modes) and its ERROR_IFs."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check


def test_clamp_int(reference) -> None:
    x8 = np.arange(-128, 128, dtype=np.int8)
    x16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16).reshape(16, 4096)
    b = GraphBuilder()
    i8, i16 = b.input("x8", (256,), "INT8"), b.input("x16", (16, 4096), "INT16")
    outs = [b.op("CLAMP", [i8], (256,), "INT8", name="c8a", min_val=-128, max_val=127,
                 nan_mode="PROPAGATE"),
            b.op("CLAMP", [i8], (256,), "INT8", name="c8b", min_val=-5, max_val=-5,
                 nan_mode="PROPAGATE"),
            b.op("CLAMP", [i8], (256,), "INT8", name="c8c", min_val=-100, max_val=17,
                 nan_mode="IGNORE"),
            b.op("CLAMP", [i16], (16, 4096), "INT16", name="c16", min_val=-32000, max_val=1,
                 nan_mode="PROPAGATE")]
    _check(reference, b, outs, {"x8": x8, "x16": x16})


def test_clamp_float_nan_modes(reference) -> None:
    x = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -1.5, 2.5, 0.25], np.float32)
    b = GraphBuilder()
    i = b.input("x", (8,), "FP32")
    outs = [b.op("CLAMP", [i], (8,), "FP32", name=f"c_{m.lower()}", min_val=np.float32(-1.0),
                 max_val=np.float32(2.0), nan_mode=m) for m in ("PROPAGATE", "IGNORE")]
    _check(reference, b, outs, {"x": x})


@pytest.mark.parametrize("lo, hi, dtype, rule", [
    (3, 2, "INT8", "max_val < min_val"),
    (np.float32(np.nan), np.float32(1.0), "FP32", "isNaN"),
])
def test_clamp_errors(lo, hi, dtype: str, rule: str) -> None:
    b = GraphBuilder()
    x = b.input("x", (4,), dtype)
    out = b.op("CLAMP", [x], (4,), dtype, min_val=lo, max_val=hi, nan_mode="PROPAGATE")
    with pytest.raises(tosa_jax.TosaValidationError, match=rule):  # refused at load
        model = tosa_jax.load(tosa_jax.write(b.build([out])))
        model(np.zeros(4, {"INT8": np.int8, "FP32": np.float32}[dtype]))
