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
    tosa_jax.cache.flush()
    # A second process runs the cached program without importing JAX.
    code = ("import sys, numpy as np, tosa_jax\n"
            f"m = tosa_jax.load({str(path)!r}, cache={str(tmp_path)!r})\n"
            f"y = m(np.load({str(FIXTURES / 'cnn_int8.input.npy')!r}))\n"
            "assert isinstance(m._np, dict), m._np\n"
            "assert 'jax' not in sys.modules\n"
            "np.save(sys.argv[1], y)\n")
    out = tmp_path / "y.npy"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    np.testing.assert_array_equal(np.load(out), expected)


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
