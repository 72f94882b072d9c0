"""SELECT against the reference model: three-way broadcasting, int8/int16/int32/bool."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder


@pytest.mark.parametrize("t, dtype", [("INT8", np.int8), ("INT16", np.int16),
                                      ("INT32", np.int32), ("BOOL", np.bool_)])
def test_select_broadcast(reference, t: str, dtype: type) -> None:
    rng = np.random.default_rng(1)
    c = rng.random((1, 3, 5)) < 0.5
    if dtype is np.bool_:
        x, y = rng.random((2, 1, 5)) < 0.5, rng.random((2, 3, 1)) < 0.5
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (2, 1, 5), endpoint=True).astype(dtype)
        y = rng.integers(info.min, info.max, (2, 3, 1), endpoint=True).astype(dtype)
    b = GraphBuilder()
    ci, xi, yi = b.input("c", c.shape, "BOOL"), b.input("x", x.shape, t), b.input("y", y.shape, t)
    out = b.op("SELECT", [ci, xi, yi], (2, 3, 5), t, name="out")
    data = tosa_jax.write(b.build([out]))
    ins = {"c": c, "x": x, "y": y}
    ref = reference(data, ins, [out])[out]
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run(ins)[out]
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


def test_select_shape_error() -> None:
    b = GraphBuilder()
    c, x = b.input("c", (2, 3), "BOOL"), b.input("x", (2, 3), "INT8")
    y = b.input("y", (3, 3), "INT8")
    out = b.op("SELECT", [c, x, y], (2, 3), "INT8")
    with pytest.raises(tosa_jax.TosaValidationError, match="SELECT"):  # refused at load
        model = tosa_jax.load(tosa_jax.write(b.build([out])))
        model(np.ones((2, 3), bool), np.zeros((2, 3), np.int8), np.zeros((3, 3), np.int8))
