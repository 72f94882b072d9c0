"""GATHER and SCATTER against the reference model (int8/int16/int32, runtime and CONST inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from tosa_jax.ir import GraphBuilder
from tosa_jax.testing.reference import check_exact as _check

RNG = np.random.default_rng(11)
NP = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32}


def _random(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    info = np.iinfo(NP[dtype])
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(NP[dtype])




@pytest.mark.parametrize("dtype", ["INT8", "INT16", "INT32"])
def test_gather_scatter(reference, dtype: str) -> None:
    n, k, w, c = 3, 7, 4, 5
    # Repeated indices are fine for GATHER; SCATTER gets distinct indices per batch (REQUIRE).
    gidx = RNG.integers(0, k, (n, w)).astype(np.int32)
    sidx = np.stack([RNG.permutation(k)[:w] for _ in range(n)]).astype(np.int32)
    b = GraphBuilder()
    values = b.input("values", (n, k, c), dtype)
    gi, si = b.input("gidx", (n, w), "INT32"), b.input("sidx", (n, w), "INT32")
    data = b.input("data", (n, w, c), dtype)
    outs = [b.op("GATHER", [values, gi], (n, w, c), dtype, name="gather"),
            b.op("SCATTER", [values, si, data], (n, k, c), dtype, name="scatter")]
    _check(reference, b, outs, {"values": _random((n, k, c), dtype), "gidx": gidx, "sidx": sidx,
                                "data": _random((n, w, c), dtype)})


def test_gather_const(reference) -> None:
    """All-constant operands (XLA may fold the gather) feeding arithmetic."""
    b = GraphBuilder()
    values = b.const(_random((2, 6, 3), "INT16").astype(np.int32), "INT32")
    idx = b.const(np.array([[5, 0, 5], [1, 2, 3]], np.int32), "INT32")
    g = b.op("GATHER", [values, idx], (2, 3, 3), "INT32")
    x = b.input("x", (2, 3, 3), "INT32")
    out = b.op("SUB", [g, x], (2, 3, 3), "INT32", name="out")
    _check(reference, b, [out], {"x": _random((2, 3, 3), "INT16").astype(np.int32)})
