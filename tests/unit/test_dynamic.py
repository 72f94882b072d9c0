"""EXT-DYNAMIC: arguments that PRO-INT/PRO-FP require as compile-time constants arriving as graph
inputs (MUL's int32 shift, floating-point zero points), judged by the reference model."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("shift", [0, 1, 8, 31, 40])
def test_mul_int32_runtime_shift(reference, shift):
    b = GraphBuilder()
    a = b.input("a", (4, 9), "INT32")
    c = b.input("c", (4, 9), "INT32")
    s = b.input("s", (1,), "INT8")
    out = b.op("MUL", [a, c, s], (4, 9), "INT32")
    data = tosa_jax.write(b.build([out]))
    # |a c| < 2**(30 + shift): the shifted result fits int32 (REQUIRE).
    lim_c = 1 << (15 if shift == 0 else min(shift, 30))
    inputs = {"a": RNG.integers(-(1 << 15 if shift == 0 else 1 << 30), 1 << 15 if shift == 0
                                else 1 << 30, (4, 9), dtype=np.int32),
              "c": RNG.integers(-lim_c, lim_c, (4, 9), dtype=np.int32),
              "s": np.array([shift], np.int8)}
    expected = reference(data, inputs, [out])[out]
    np.testing.assert_array_equal(tosa_jax.load(data).run(inputs)[out], expected)


@pytest.mark.parametrize("dtype,np_t", [("FP32", np.float32), ("FP16", np.float16)])
def test_float_runtime_zero_points(reference, dtype, np_t):
    # MATMUL and NEGATE with their (zero) zero points as graph inputs.
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5), dtype)
    y = b.input("y", (1, 5, 2), dtype)
    za = b.input("za", (1,), dtype)
    zb = b.input("zb", (1,), dtype)
    mm = b.op("MATMUL", [x, y, za, zb], (1, 3, 2), dtype)
    out = b.op("NEGATE", [mm, za, zb], (1, 3, 2), dtype)
    data = tosa_jax.write(b.build([out]))
    inputs = {"x": RNG.integers(-4, 5, (1, 3, 5)).astype(np_t),
              "y": RNG.integers(-4, 5, (1, 5, 2)).astype(np_t),
              "za": np.zeros(1, np_t), "zb": np.zeros(1, np_t)}
    expected = reference(data, inputs, [out])[out]  # small integers: exact in any order
    np.testing.assert_array_equal(tosa_jax.load(data).run(inputs)[out], expected)
