"""CAST against the reference model: integer truncation and sign extension, bool casts, and the
float casts' rounding (half to even, saturation, int32 -> bf16 rounded once)."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder

RNG = np.random.default_rng(9)
NP = {"BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
      "FP16": np.float16, "BF16": ml_dtypes.bfloat16, "FP32": np.float32}
ML_FLOATS = (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn),
             np.dtype(ml_dtypes.float8_e5m2))


def _check(reference, b: GraphBuilder, outputs: list[str], inputs: dict[str, np.ndarray]) -> None:
    """Run on the reference model and on tosa_jax (x64 off and on); demand identical results
    (NaN equal to NaN)."""
    data = tosa_jax.write(b.build(outputs))
    ref = reference(data, inputs, outputs)
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run(inputs)
        for name in outputs:
            want, have = ref[name], got[name]
            if have.dtype in ML_FLOATS and want.dtype.kind in "Vu":
                # The reference model saves bf16/fp8 as raw records (V2, V1) or uint8.
                want = want.view(f"u{want.dtype.itemsize}").view(have.dtype)
            assert have.dtype == want.dtype, (name, x64)
            if have.dtype in ML_FLOATS:  # numpy's NaN == NaN rule needs a native float type
                have, want = have.astype(np.float32), want.astype(np.float32)
            np.testing.assert_array_equal(have, want, err_msg=f"{name} x64={x64}")


def _ints(dtype: str, n: int = 200) -> np.ndarray:
    if dtype == "BOOL":
        return RNG.integers(0, 2, n).astype(np.bool_)
    info = np.iinfo(NP[dtype])
    x = RNG.integers(info.min, info.max, n, endpoint=True)
    x[:4] = [info.min, info.max, -1, 0]
    return x.astype(NP[dtype])


INT_PAIRS = [("BOOL", "INT8"), ("BOOL", "INT16"), ("BOOL", "INT32"),
             ("INT8", "BOOL"), ("INT8", "INT16"), ("INT8", "INT32"),
             ("INT16", "BOOL"), ("INT16", "INT8"), ("INT16", "INT32"),
             ("INT32", "BOOL"), ("INT32", "INT8"), ("INT32", "INT16")]


def test_cast_int(reference) -> None:
    """All integer/bool pairs of tosa.xml: narrowing keeps the low bits, widening sign-extends."""
    b = GraphBuilder()
    inputs, outs = {}, []
    for in_t in ("BOOL", "INT8", "INT16", "INT32"):
        inputs[in_t.lower()] = _ints(in_t)
        b.input(in_t.lower(), (200,), in_t)
    for in_t, out_t in INT_PAIRS:
        outs.append(b.op("CAST", [in_t.lower()], (200,), out_t, name=f"{in_t}_{out_t}"))
    _check(reference, b, outs, inputs)


def test_cast_int_to_float(reference) -> None:
    x32 = np.concatenate([_ints("INT32"), np.array(
        [(1 << 24) + 1, 65519, 65520, -65520, (1 << 30) + (1 << 22)], np.int64)]).astype(np.int32)
    n = x32.size
    b = GraphBuilder()
    i32 = b.input("x32", (n,), "INT32")
    i16, i8 = b.input("x16", (200,), "INT16"), b.input("x8", (200,), "INT8")
    outs = [b.op("CAST", [i32], (n,), t, name=f"i32_{t}") for t in ("FP16", "BF16", "FP32")]
    outs += [b.op("CAST", [i16], (200,), t, name=f"i16_{t}") for t in ("FP16", "BF16", "FP32")]
    outs += [b.op("CAST", [i8], (200,), t, name=f"i8_{t}") for t in ("FP16", "BF16", "FP32")]
    _check(reference, b, outs, {"x32": x32, "x16": _ints("INT16"), "x8": _ints("INT8")})


def _round_bf16(v: int) -> float:
    """Exact round-to-nearest-even of an integer to bf16's 8 significant bits (pure Python)."""
    mag, drop = abs(v), max(0, abs(v).bit_length() - 8)
    q, r = divmod(mag, 1 << drop)
    half = (1 << drop) >> 1
    if drop and (r > half or (r == half and q & 1)):
        q += 1
    return float(q << drop) * (-1 if v < 0 else 1)


def test_cast_int32_to_bf16_rounds_once() -> None:
    """round_to_nearest_float: one rounding. Converting through f32 (as XLA and the reference
    model 2026.8 do) rounds 2^30 + 2^22 + 1 to a bf16 tie first and then down, not up; the
    oracle here is exact integer rounding."""
    x = np.array([(1 << 30) + (1 << 22) + 1, -(1 << 30) - (1 << 22) - 1,
                  (1 << 27) + (1 << 19) + 3, (1 << 30) + (1 << 22) + (1 << 6),
                  (1 << 30) + (1 << 22), (1 << 31) - 1, -(1 << 31), (1 << 24) + 1, 255, 257, 0,
                  -1], np.int64)
    b = GraphBuilder()
    i = b.input("x", x.shape, "INT32")
    o = b.op("CAST", [i], x.shape, "BF16", name="o")
    data = tosa_jax.write(b.build([o]))
    want = np.array([_round_bf16(int(v)) for v in x])
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run({"x": x.astype(np.int32)})["o"]
        np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=f"x64={x64}")


@pytest.mark.parametrize("in_t", ["FP32", "FP16", "BF16"])
def test_cast_float_to_int(reference, in_t: str) -> None:
    """Round half to even, then saturate to the output type (the int32 limits too)."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, 128.5, -128.5, -129.5, 32767.5,
                  -32768.5, 3e9, -3e9, 2147483520.0, -2147483648.0, 65504.0, -65504.0, 0.0,
                  -0.0, 7.49, -7.51] + list(RNG.normal(0, 1000, 42)), np.float64)
    with np.errstate(over="ignore"):
        x = x.astype(NP[in_t])
    x = x[np.isfinite(x)]  # round_to_nearest_int of an infinity is not defined
    b = GraphBuilder()
    i = b.input("x", x.shape, in_t)
    outs = [b.op("CAST", [i], x.shape, t, name=f"to_{t}") for t in ("INT8", "INT16", "INT32")]
    _check(reference, b, outs, {"x": x})


def test_cast_float_to_float(reference) -> None:
    x = np.concatenate([np.array([65519.0, 65520.0, 1e6, -1e6, 1e-8, 3.0e38, np.inf, -np.inf,
                                  1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11], np.float32),
                        RNG.normal(0, 100, 40).astype(np.float32)])
    b = GraphBuilder()
    i = b.input("x", x.shape, "FP32")
    outs = [b.op("CAST", [i], x.shape, t, name=f"to_{t}") for t in ("FP16", "BF16")]
    h = b.op("CAST", [i], x.shape, "FP16", name="h")
    outs.append(b.op("CAST", [h], x.shape, "FP32", name="h_fp32"))
    _check(reference, b, outs, {"x": x})


def test_cast_fp8(reference) -> None:
    """To fp8: round to nearest even; out of range: inf (e5m2) or NaN (e4m3, which has no inf)."""
    x = np.concatenate([np.array([464.0, 480.0, 500.0, 1e6, -1e6, 57344.0, 61440.0, 1e-9, 2e-3,
                                  np.inf, -np.inf, 0.0, -0.0], np.float32),
                        RNG.normal(0, 100, 40).astype(np.float32)])
    b = GraphBuilder()
    i = b.input("x", x.shape, "FP32")
    e4 = b.op("CAST", [i], x.shape, "FP8E4M3", name="e4")
    e5 = b.op("CAST", [i], x.shape, "FP8E5M2", name="e5")
    outs = [e4, e5, b.op("CAST", [e4], x.shape, "FP32", name="e4_fp32"),
            b.op("CAST", [e5], x.shape, "FP16", name="e5_fp16")]
    _check(reference, b, outs, {"x": x})
