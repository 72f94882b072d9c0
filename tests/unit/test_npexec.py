"""tosa_jax.npexec: numpy programs of integer graph functions, bit-identical to XLA's results.

Each primitive is checked against XLA's own executable of the same jaxpr (the semantics npexec
reproduces: wrap-around, shifts by the width or more, division by zero, index clamping); whole
graphs against the compiled Model and, through the conformance slices in CI, against the
reference model (tosa_jax.testing.conformance: small integer graphs start on numpy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import tosa_jax
import tosa_jax.cache
from tosa_jax import npexec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RNG = np.random.default_rng(7)


def full_range(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype)


def same_as_xla(f, *args) -> None:
    closed = jax.make_jaxpr(f)(*args)
    program = npexec.from_jaxpr(closed)
    got = npexec.run(program, [np.asarray(a) for a in jax.tree.leaves(args)])
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(f)(*args))]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        assert g.flags.c_contiguous  # (callers may read the bytes, as ExecuTorch's runner does)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint32])
def test_shifts_by_any_amount(dtype):
    x = full_range((64,), dtype)
    s = RNG.integers(-3, 2 * 8 * np.dtype(dtype).itemsize + 3, (64,)).astype(dtype)
    for op in (lax.shift_left, lax.shift_right_arithmetic, lax.shift_right_logical):
        same_as_xla(op, x, s)
        for amount in (0, 1, 7, 8 * np.dtype(dtype).itemsize - 1, 8 * np.dtype(dtype).itemsize):
            same_as_xla(lambda v, a=amount, op=op: op(v, jnp.asarray(a, dtype)), x)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint32])
def test_division_and_remainder_edges(dtype):
    info = np.iinfo(dtype)
    a = np.concatenate([full_range((60,), dtype), np.array([info.min, info.min, 7, -7, 0, 5]
                                                           if info.min else [0, 1, 7, 9, 0, 5],
                                                           dtype)])
    b = np.concatenate([full_range((60,), dtype), np.array([-1 if info.min else 1, 0, 0, 2, 0,
                                                            -2 if info.min else 2], dtype)])
    same_as_xla(lax.div, a, b)
    same_as_xla(lax.rem, a, b)


@pytest.mark.parametrize("batch", [1, 512])  # 512: 2**16 elements or more
def test_apply_scale_32_primitive(batch):
    """numerics.scale_32_p (apply_scale_32 with constant scales on the CPU): the numpy kernel
    against XLA's code for it (int64; per channel, the 32-bit forms for a vmapped batch that
    reaches numerics.WIDE_MAX_ELEMENTS), and both against the spec's formula in Python
    integers; single and double round, the zero point folded into the round and added after,
    per channel and per tensor."""
    import tosa_jax.lowering.numerics as nx

    edges = np.array([[-(2**31), 2**31 - 1, 0, -1]] * 4, np.int32)
    x = np.stack([np.concatenate([full_range((36, 4), np.int32), edges])
                  for _ in range(batch)])
    m = np.array([2**31 - 1, 0, 1 << 30, 1518500250], np.int32)
    for s, zp, dr in ((np.array([2, 31, 32, 62], np.int32), 2**31 - 1, True),
                      (np.array([40, 38, 35, 62], np.int32), -128, False),
                      (np.array([33, 33, 33, 33], np.int32), 0, True),
                      (np.array([62, 62, 62, 62], np.int32), -(2**31), False)):
        for mult, shift in ((m, s), (m[3], s[3])):
            def f(v, mult=mult, shift=shift, zp=zp, dr=dr):
                return nx.apply_scale_32(v, mult, shift, dr, out_zp=zp)
            assert [e.primitive for e in jax.make_jaxpr(f)(x[0]).eqns] == [nx.scale_32_p]
            same_as_xla(jax.vmap(f), x)
            v, mm, ss = (np.asarray(a).astype(object) for a in (x, mult, shift))
            rnd = np.left_shift(1, ss - 1) + np.where(dr & (ss > 31), np.where(v >= 0, 1 << 30,
                                                                               -(1 << 30)), 0)
            want = (((v * mm + rnd) >> ss) + zp + 2**31) % 2**32 - 2**31
            np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(f))(x)),
                                          want.astype(np.int32))


def test_bit_and_conversion_primitives():
    x = np.concatenate([full_range((61,), np.int32), np.array([0, -1, 1], np.int32)])
    same_as_xla(lax.clz, x)
    same_as_xla(lambda v: (v.astype(jnp.int8), v.astype(jnp.uint8), v.astype(jnp.int16),
                           v.astype(bool), (v > 0).astype(jnp.int32)), x)
    same_as_xla(lambda v: (lax.bitcast_convert_type(v, jnp.uint32),
                           lax.bitcast_convert_type(v, jnp.int8),
                           lax.bitcast_convert_type(lax.bitcast_convert_type(v, jnp.uint8),
                                                    jnp.int32)), x)
    same_as_xla(lambda v: (jnp.abs(v), -v, ~v, v & 0x5A5A, v | 3, v ^ -1, jnp.sign(v), v ** 3,
                           jnp.maximum(v, 7), jnp.minimum(v, -7), jnp.clip(v, -100, 100)), x)
    scalar = np.int32(-5)
    same_as_xla(lambda v: lax.clz(v) + v * v, scalar)  # rank 0 stays rank 0


def test_layout_primitives():
    x = full_range((2, 3, 4), np.int16)
    same_as_xla(lambda v: (jnp.transpose(v, (2, 0, 1)), v.reshape(4, 6), v[:, 1:, ::2],
                           jnp.flip(v, (0, 2)), jnp.concatenate([v, v], 1), jnp.stack([v, v], 2),
                           jnp.tile(v, (1, 2, 1)), v[:, :1].squeeze(1),
                           jnp.broadcast_to(v[:, None], (2, 5, 3, 4)),
                           lax.iota(jnp.int32, 5) + 1), x)
    config = ((1, -1, 0), (-1, 2, 1), (0, 0, 2))
    same_as_xla(lambda v: lax.pad(v, jnp.int16(-9), config), x)


@pytest.mark.parametrize("big", [False, True])
def test_dot_general(big):
    dtype = np.int32 if big else np.int8
    a = full_range((3, 5, 7), dtype)
    b = full_range((3, 7, 4), dtype)
    same_as_xla(lambda u, v: lax.dot_general(u, v, (((2,), (1,)), ((0,), (0,))),
                                             preferred_element_type=jnp.int32), a, b)
    same_as_xla(lambda u, v: lax.dot_general(u, v, (((0, 1), (0, 1)), ((), ())),
                                             preferred_element_type=jnp.int32),
                a[0], full_range((5, 7, 2), dtype))


@pytest.mark.parametrize("k, acc", [(64, np.float32), (1040, np.float32), (1041, np.float64)])
def test_tiled_products(monkeypatch, k, acc):
    """Integer products computed by the BLAS in tiles (cut along M, and along N where K * N
    exceeds a tile), batched: XLA's integers. With every term 127 * 127, K = 1040 sums to
    16,774,160, just below 2**24, in float32; K = 1041 to 16,790,289, odd and above 2**24,
    which float32 cannot hold: float64."""
    monkeypatch.setattr(npexec, "BLAS_TILE_MACS", 1000)
    seen = []
    blas = npexec._blas_matmul
    monkeypatch.setattr(npexec, "_blas_matmul", lambda u, v: seen.append(u.dtype) or blas(u, v))
    a, b = full_range((2, 37, k), np.int8), full_range((2, k, 23), np.int8)
    if k > 64:
        a, b = np.full((2, 5, k), 127, np.int8), np.full((2, k, 3), 127, np.int8)
    same_as_xla(lambda u, v: lax.dot_general(u, v, (((2,), (1,)), ((0,), (0,))),
                                             preferred_element_type=jnp.int32), a, b)
    assert seen == [acc]
    wide = full_range((16, 500), np.int32)  # max|a| max|b| K > 2**53: int64, no BLAS
    same_as_xla(lambda u, v: lax.dot_general(u, v, (((1,), (0,)), ((), ()))),
                full_range((5, 16), np.int32), wide)
    assert seen == [acc]


def test_tiles_are_the_whole_product(monkeypatch):
    """Float products in tiles (their sums in the BLAS's order for the tile's size)."""
    monkeypatch.setattr(npexec, "BLAS_TILE_MACS", 1000)
    a = RNG.standard_normal((2, 37, 64))
    for b in (RNG.standard_normal((64, 23)), RNG.standard_normal((2, 64, 500))):
        np.testing.assert_allclose(npexec._blas_matmul(a, b), np.matmul(a, b), rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.parametrize("groups", [1, 3])
def test_convolution(groups):
    x = full_range((2, 9, 8, 6), np.int8)  # NHWC
    w = full_range((3, 2, 6 // groups, 6), np.int8)  # HWIO
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "HWIO", "NHWC"))
    for strides, padding, ldil, rdil in [((1, 1), ((1, 1), (0, 2)), (1, 1), (1, 1)),
                                         ((2, 3), ((0, -1), (2, 1)), (1, 1), (2, 1)),
                                         ((1, 1), ((1, 1), (1, 1)), (2, 1), (1, 1))]:
        same_as_xla(lambda u, v, s=strides, p=padding, ld=ldil, rd=rdil: lax.conv_general_dilated(
            u, v, s, p, ld, rd, dn, feature_group_count=groups,
            preferred_element_type=jnp.int32), x, w)
    big = full_range((1, 5, 5, 6), np.int32)  # products wrap as XLA's int32 arithmetic does
    same_as_xla(lambda u, v: lax.conv_general_dilated(
        u, v, (1, 1), "VALID", dimension_numbers=dn, feature_group_count=groups), big,
        full_range((3, 2, 6 // groups, 6), np.int32))


def test_windows_and_reductions():
    x = full_range((2, 7, 6, 3), np.int32) >> 8
    same_as_xla(lambda v: (lax.reduce_window(v, 0, lax.add, (1, 3, 2, 1), (1, 2, 2, 1),
                                             ((0, 0), (1, 1), (0, 1), (0, 0))),
                           lax.reduce_window(v, np.iinfo(np.int32).min, lax.max, (1, 2, 3, 1),
                                             (1, 1, 2, 1), ((0, 0), (0, 1), (1, 1), (0, 0)))),
                x)
    # reducers of their own: a window of one element (numerics.gather_indices; its own path in
    # npexec) and a wider one, the initial value folded in (5: not OR's identity)
    ones = (1, 1, 1, 1)
    same_as_xla(lambda v: (lax.reduce_window(v, np.int32(5), lax.bitwise_or, ones, ones, "VALID"),
                           lax.reduce_window(v, np.int32(5), lax.bitwise_or, (1, 2, 2, 1),
                                             (1, 1, 2, 1), "VALID"),
                           *lax.reduce_window((v, -v), (np.int32(0), np.int32(1)),
                                              lambda a, b: (a[0] ^ b[0], a[1] * b[1]), ones,
                                              ones, "VALID")), x)
    same_as_xla(lambda v: (v.sum(1), v.max((0, 2)), v.min(3), jnp.argmax(v, 1),
                           jnp.argmin(v, 2).astype(jnp.int32), (v > 0).all(1), (v > 0).any(2),
                           jnp.bitwise_and.reduce(v, 1)), x)


def test_gather_and_scatter():
    table = full_range((513,), np.int16)
    idx = RNG.integers(-5, 520, (4, 6)).astype(np.int32)
    same_as_xla(lambda t, i: (t[jnp.clip(i, 0, 512)], jnp.take(t, i, mode="clip"),
                              jnp.take(t, i, mode="fill", fill_value=-3)), table, idx)
    values = full_range((2, 10, 3), np.int8)
    rows = RNG.integers(-2, 12, (2, 4)).astype(np.int32)
    same_as_xla(lambda v, r: jnp.take_along_axis(v, r[:, :, None], 1, mode="clip"), values,
                rows)
    updates = full_range((2, 4, 3), np.int8)
    unique = np.stack([RNG.permutation(12)[:4] - 1 for _ in range(2)]).astype(np.int32)
    bi = np.arange(2)[:, None]
    same_as_xla(lambda v, r, u: (v.at[bi, r].set(u), v.at[bi, r].set(u, mode="clip"),
                                 v.at[bi, r].set(u, mode="drop")), values, unique, updates)


def test_control_flow():
    x = full_range((5,), np.int32)
    same_as_xla(lambda v: lax.fori_loop(0, 7, lambda i, c: c * 3 + i, v), x)  # a scan
    same_as_xla(lambda v: lax.scan(lambda c, r: (c + r, c * r), v[0], v, reverse=True), x)
    same_as_xla(lambda v: lax.while_loop(lambda c: c[0] < 100, lambda c: c * 2 + 1,
                                         jnp.abs(v) & 7), x)
    same_as_xla(lambda v: lax.cond(v[0] > 0, lambda u: u + 1, lambda u: u - 1, v), x)
    same_as_xla(lambda v: lax.switch(v[1] & 3, [lambda u: u, lambda u: -u, lambda u: u * 2],
                                     v), x)
    same_as_xla(lambda v: lax.select_n(v & 1, v, -v), x)
    same_as_xla(lambda v: lax.select_n(jnp.clip(v, 0, 2), v, -v, v * 5), x)


def test_floats_are_left_to_xla():
    with pytest.raises(npexec.Unsupported, match="float32"):
        npexec.from_jaxpr(jax.make_jaxpr(lambda v: v * 2)(np.ones(3, np.float32)))
    with pytest.raises(npexec.Unsupported, match="float32"):
        npexec.from_jaxpr(jax.make_jaxpr(lambda v: (v.astype(jnp.float32) * 2).astype(
            jnp.int32))(np.ones(3, np.int32)))


def _reference_output(reference, path: Path, x: np.ndarray) -> np.ndarray:
    """The TOSA reference model's output for the fixture: the oracle of these tests."""
    spec = tosa_jax.load(path, cache=False)
    return reference(path, {spec.inputs[0].name: x}, [spec.outputs[0].name])[
        spec.outputs[0].name]


def test_model_starts_on_numpy_then_hands_over(tmp_path, reference):
    path = FIXTURES / "cnn_int8.tosa"
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    expected = _reference_output(reference, path, x)
    model = tosa_jax.load(path, cache=str(tmp_path))
    np.testing.assert_array_equal(model(x), expected)
    assert isinstance(model._np, dict) and not model._executables  # no XLA compile
    np.testing.assert_array_equal(model(x), expected)  # the second call hands over
    model._np_handover.join()
    assert model._np is False
    np.testing.assert_array_equal(model(x), expected)
    np.testing.assert_array_equal(_second_process(tmp_path, "cnn_int8"), expected)


def _second_process(cache: Path, name: str, options: str = "") -> np.ndarray:
    """The fixture's output in a new process, from the cache's numpy program, without JAX."""
    tosa_jax.cache.flush()
    code = ("import sys, numpy as np, tosa_jax\n"
            f"m = tosa_jax.load({str(FIXTURES / (name + '.tosa'))!r}, cache={str(cache)!r}"
            f"{options})\n"
            f"y = m(np.load({str(FIXTURES / (name + '.input.npy'))!r}))\n"
            "assert m.compile_source == 'numpy, cache', m.compile_source\n"
            "assert 'jax' not in sys.modules\n"
            "np.save(sys.argv[1], y)\n")
    out = cache / "y.npy"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return np.load(out)


def test_a_model_from_the_cache_record_starts_on_numpy(tmp_path, reference):
    """A graph whose load the cache recorded (its meta) but whose numpy program it does not
    hold (never called, or the program evicted) is read, traced and run on numpy on its first
    call. (It failed to trace, silently, and fell to XLA: JAX imported for nothing.)"""
    path = FIXTURES / "cnn_int8.tosa"
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    expected = _reference_output(reference, path, x)
    tosa_jax.load(path, cache=str(tmp_path))  # records the load only
    tosa_jax.cache.flush()
    model = tosa_jax.load(path, cache=str(tmp_path))
    assert model._graph is None  # from the record: the graph not read yet
    np.testing.assert_array_equal(model(x), expected)
    assert isinstance(model._np, dict) and model.compile_source == "numpy"
    assert not model._executables


def test_switch_off(monkeypatch):
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    model(np.load(FIXTURES / "cnn_int8.input.npy"))
    assert model._np is False and model._executables


def test_a_failing_program_falls_back_to_xla_with_a_warning(monkeypatch, tmp_path, reference):
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    expected = _reference_output(reference, FIXTURES / "cnn_int8.tosa", x)

    def broken(p, a, b):
        raise RuntimeError("a broken kernel")

    monkeypatch.setitem(npexec._KERNELS, "add", broken)
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=str(tmp_path))
    with pytest.warns(RuntimeWarning, match="npexec failed.*broken kernel"):
        np.testing.assert_array_equal(model(x), expected)
    assert model._np is False


# -- floating point (from_jaxpr(..., floats=True), load(..., numpy_floats=True)) -------------

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, np.inf, -np.inf,
                     np.nan, -np.nan, 1e-37, -1e-37, 3.4e38, -3.4e38, 448.0, 449.0, 464.0, 6.5,
                     2.0 ** 31, -(2.0 ** 31), 2.0 ** 31 + 256, 2.0 ** 32, 65504.0, 65520.0,
                     255.5, -128.5, 1e-8], np.float32)


def floats(n: int) -> np.ndarray:
    """Every float32 bit pattern is as likely (NaN payloads, huge values) beside values of
    ordinary magnitude and the edges of each conversion; no subnormals (XLA's CPU code reads
    them as zeros: see flushed)."""
    bits = RNG.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = (RNG.standard_normal(n) * 50).astype(np.float32)
    x = np.concatenate([bits, normal, SPECIALS])
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x)


def flushed(x: np.ndarray) -> np.ndarray:
    """A result with its float32 subnormals replaced by zeros of their sign: XLA's CPU code
    flushes most (not all: lax.rem) to zero; numpy keeps them, as the reference model does."""
    x32 = x.astype(np.float32)
    return np.where(np.abs(x32) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x32),
                    x32).astype(x.dtype)


def float_results(f, *args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    program = npexec.from_jaxpr(jax.make_jaxpr(f)(*args), floats=True)
    assert program["floats"]
    got = npexec.run(program, [np.asarray(a) for a in jax.tree.leaves(args)])
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(f)(*args))]
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
    return got, want


def same_bits_as_xla(f, *args) -> None:
    """The IEEE operations and conversions round as XLA's do: the same bits, NaN for NaN."""
    for k, (g, w) in enumerate(zip(*float_results(f, *args), strict=True)):
        if npexec.is_float(g.dtype):
            g, w = flushed(g), flushed(w)
            g32, w32 = g.astype(np.float32), w.astype(np.float32)
            nan = np.isnan(w32)
            np.testing.assert_array_equal(np.isnan(g32), nan, err_msg=f"result {k}: NaNs")
            g, w = g[~nan], w[~nan]
        differ = np.nonzero(g.view(f"u{g.dtype.itemsize}") != w.view(f"u{w.dtype.itemsize}"))
        assert not differ[0].size, (f"result {k} ({g.dtype}): at {differ[0][:5]}: "
                                    f"{g[differ][:5]} instead of {w[differ][:5]}")


def within_bound(f, *args, terms: int) -> None:
    """Sums (products, reductions): numpy's and XLA's results each within the dot-product
    error bound of TOSA's compliance, ``terms * eps * sum |a b|``, so at most twice that
    apart; ``sum |a b|`` is the same function of the operands' magnitudes."""
    got, want = float_results(f, *args)
    size = jax.tree.leaves(jax.jit(f)(*(np.abs(a) for a in args)))
    for k, (g, w, m) in enumerate(zip(got, want, size, strict=True)):
        bound = 2 * terms * np.finfo(np.float32).eps * np.asarray(m, np.float64) + 1e-37
        np.testing.assert_array_less(np.abs(g.astype(np.float64) - w), bound,
                                     err_msg=f"result {k}")


def test_float_ieee_operations_are_xla_bits():
    a, b = floats(300), floats(300)[::-1].copy()
    # u ** -3 is 1 / u ** 3: where u ** 3 is subnormal, XLA's CPU code flushes it (an infinite
    # result) and numpy keeps it (the difference the module documents); such u are left out
    c = np.where(np.abs(a.astype(np.float64)) ** 3 < np.finfo(np.float32).tiny, np.float32(2), a)
    same_bits_as_xla(lambda u, v, w: (u + v, u - v, u * v, u / v, -u, jnp.abs(u), u < v, u == v,
                                   u != v, u >= v, lax.rem(u, v), jnp.where(u > v, u, v),
                                   lax.sqrt(jnp.abs(u)), jnp.floor(u), jnp.ceil(u),
                                   lax.round(u, lax.RoundingMethod.AWAY_FROM_ZERO),
                                   lax.round(u, lax.RoundingMethod.TO_NEAREST_EVEN),
                                   jnp.isfinite(u), lax.nextafter(u, v), u * u * u,
                                   lax.integer_pow(u, 5), lax.integer_pow(w, -3),
                                   lax.clamp(np.float32(-1), u, np.float32(1)),
                                   jnp.sign(u), lax.max(u, v), lax.min(u, v)), a, b, c)


def test_float_conversions_are_xla_bits():
    x = floats(2000)
    types = (jnp.int8, jnp.uint8, jnp.int16, jnp.int32, jnp.uint32, bool, jnp.bfloat16,
             jnp.float16, jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float4_e2m1fn,
             jnp.float8_e8m0fnu)
    same_bits_as_xla(lambda v: tuple(v.astype(t) for t in types), x)
    same_bits_as_xla(lambda v: tuple(v.astype(t).astype(jnp.float32) for t in types[6:]), x)
    same_bits_as_xla(lambda v: (lax.bitcast_convert_type(v, jnp.uint32),
                                lax.bitcast_convert_type(v.astype(jnp.bfloat16), jnp.int16),
                                lax.bitcast_convert_type(
                                    lax.bitcast_convert_type(v, jnp.uint8), jnp.float32)), x)
    ints = full_range((500,), np.int32)
    same_bits_as_xla(lambda v: (v.astype(jnp.float32), v.astype(jnp.bfloat16),
                                v.astype(jnp.float16)), ints)


def test_float_arithmetic_of_16_bit_types_is_xla_bits():
    a = floats(300).astype(jnp.bfloat16)
    with np.errstate(over="ignore"):  # (to infinity, as intended)
        b = floats(300).astype(np.float16)
    same_bits_as_xla(lambda u, v: (u + u, u * u, -u, jnp.maximum(u, u[::-1]), u > 0, v - v[::-1],
                                   v * np.float16(3), v / v[::-1], jnp.floor(v)), a, b)


def test_float_transcendentals_are_accurate():
    """Within 2 units in the last place of the exact value (float64), float32 and bfloat16:
    tighter than TOSA's compliance bounds for these operators."""
    x = (RNG.standard_normal(2000) * 6).astype(np.float32)
    pos = np.abs(x) + np.float32(1e-3)
    cases = [(jnp.exp, np.exp, x), (jnp.log, np.log, pos), (jnp.tanh, np.tanh, x),
             (lax.logistic, lambda v: 1 / (1 + np.exp(-v)), x), (jnp.sin, np.sin, x),
             (jnp.cos, np.cos, x), (lax.rsqrt, lambda v: 1 / np.sqrt(v), pos),
             (jnp.exp2, np.exp2, x), (jnp.log1p, np.log1p, pos),
             (lambda v: jnp.power(v, 0.37), lambda v: v ** 0.37, pos)]
    for dtype in (np.float32, jnp.bfloat16):
        for f, exact, v in cases:
            v = v.astype(dtype)
            program = npexec.from_jaxpr(jax.make_jaxpr(f)(v), floats=True)
            (got,) = npexec.run(program, [v])
            assert got.dtype == v.dtype
            want = exact(v.astype(np.float64))
            ulp = np.spacing(np.abs(want).astype(dtype).astype(np.float32)).astype(
                np.float64) * 2.0 ** (23 - ml_dtypes.finfo(dtype).nmant)
            err = np.abs(got.astype(np.float64) - want) / ulp
            assert np.nanmax(err) <= 2, (f, dtype, np.nanmax(err))


def test_float_products_windows_and_reductions():
    a = (RNG.standard_normal((3, 5, 7)) * 3).astype(np.float32)
    b = (RNG.standard_normal((3, 7, 4)) * 3).astype(np.float32)
    within_bound(lambda u, v: lax.dot_general(u, v, (((2,), (1,)), ((0,), (0,)))), a, b,
                 terms=7)
    x = RNG.standard_normal((2, 9, 8, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 2, 6)).astype(np.float32)
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "HWIO", "NHWC"))
    within_bound(lambda u, v: lax.conv_general_dilated(u, v, (2, 1), ((1, 1), (0, 2)), (1, 1),
                                                       (2, 1), dn, feature_group_count=3),
                 x, w, terms=3 * 2 * 2)
    within_bound(lambda v: (v.sum(1), lax.reduce_window(v, 0.0, lax.add, (1, 2, 3, 1),
                                                         (1, 1, 2, 1), "VALID")), x, terms=9)
    x[0, 1, 2, 3] = np.nan
    nan = jnp.isnan
    same_bits_as_xla(lambda v: (lax.reduce_window(  # a reducer of its own: the general form
        (v, nan(v)), (np.float32(-np.inf), False),
        lambda a, b: (jnp.where(a[1] | (a[0] > b[0]), a[0], b[0]), a[1] | b[1]),
        (1, 2, 3, 1), (1, 1, 2, 1), ((0, 0), (1, 0), (0, 2), (0, 0)))), x)
    same_bits_as_xla(lambda v: (v.max(1), v.min((0, 2)), jnp.argmax(v, 1), jnp.argmin(v, 3),
                                lax.reduce_window(v, -np.inf, lax.max, (1, 3, 2, 1),
                                                  (1, 2, 2, 1),
                                                  ((0, 0), (1, 1), (0, 1), (0, 0)))), x)


def test_a_float_graph_on_numpy_stays_there(tmp_path):
    """numpy_floats: every call on numpy (the same bits each time: no hand-over to XLA's
    float code); the program is cached apart from integer-only programs, and a second process
    runs it without JAX. (Its results against the reference model: test_networks_fp.)"""
    path = FIXTURES / "cnn_fp32.tosa"
    x = np.load(FIXTURES / "cnn_fp32.input.npy")
    model = tosa_jax.load(path, cache=str(tmp_path), numpy_floats=True)
    y = model(x)
    assert model.compile_source == "numpy" and model._np["floats"]
    for _ in range(2):
        np.testing.assert_array_equal(model(x), y)
    assert model._np_handover is None and not model._executables
    plain = tosa_jax.load(path, cache=str(tmp_path))  # floats left to XLA by default
    np.testing.assert_allclose(plain(x), y, rtol=1e-5, atol=1e-6)
    assert plain._np is False and "numpy" not in plain.compile_source
    np.testing.assert_array_equal(
        _second_process(tmp_path, "cnn_fp32", ", numpy_floats=True"), y)


def test_an_integer_graph_keeps_integer_programs_with_numpy_floats(tmp_path):
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=str(tmp_path), numpy_floats=True)
    model(np.load(FIXTURES / "cnn_int8.input.npy"))
    assert isinstance(model._np, dict) and not model._np["floats"]
