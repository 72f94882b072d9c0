"""Convolution kernels as arguments of the executable (tosa_jax.hoist): which constants are
taken out, and the same results as the reference model from every path that runs the
executable (compiled here, JAX's cache entry, the host path's entry)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import tosa_jax
from tosa_jax import hoist, hostexec, serialization
from tosa_jax.cache import flush
from tosa_jax.ir import GraphBuilder


@pytest.fixture(autouse=True)
def _xla_executables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first call runs XLA's executable, not the graph's numpy program (tosa_jax.npexec)."""
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")


def _conv(dtype: str, magnitude: bool = False) -> tuple[bytes, np.ndarray, list[str]]:
    """A 3x3 CONV2D of 128 x 64 channels (an int8 kernel of 72 KiB, FP32 288 KiB) and a 1x1
    one of a small kernel (stays a constant) on the same input: the graph's bytes, an input,
    the outputs' names. ``magnitude`` (FP32): the same graph and input of absolute values,
    whose results are the sums of |x w| and |bias| that bound a float convolution's error."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    integer = dtype == "INT8"
    acc = "INT32" if integer else "FP32"
    x = b.input("x", (1, 8, 8, 64), dtype)
    if integer:
        w = rng.integers(-128, 128, (128, 3, 3, 64)).astype(np.int8)
        small = rng.integers(-128, 128, (4, 1, 1, 64)).astype(np.int8)
        bias, zps = rng.integers(-1000, 1000, 128), ([-3], [0])
        xv = rng.integers(-128, 128, (1, 8, 8, 64)).astype(np.int8)
    else:
        w = rng.standard_normal((128, 3, 3, 64)).astype(np.float32) / 24
        small = rng.standard_normal((4, 1, 1, 64)).astype(np.float32)
        bias, zps = rng.standard_normal(128), ([0], [0])
        xv = rng.standard_normal((1, 8, 8, 64)).astype(np.float32)
    if magnitude:
        w, small, bias, xv = np.abs(w), np.abs(small), np.abs(bias), np.abs(xv)
    attrs = {"pad": (1, 1, 1, 1), "stride": (1, 1), "dilation": (1, 1), "acc_type": acc,
             "local_bound": False}
    y = b.op("CONV2D", [x, b.const(w, dtype), b.const(bias, acc), b.const(zps[0], dtype),
                        b.const(zps[1], dtype)], (1, 8, 8, 128), acc, **attrs)
    z = b.op("CONV2D", [x, b.const(small, dtype), b.const(bias[:4], acc),
                        b.const(zps[0], dtype), b.const(zps[1], dtype)],
             (1, 8, 8, 4), acc, **{**attrs, "pad": (0, 0, 0, 0)})
    return serialization.write(b.build([y, z])), xv, [y, z]


def _within_dot_bound(reference, ys, data: bytes, magnitudes: bytes, x: np.ndarray,
                      outs: list[str], terms: list[int]) -> None:
    """Each FP32 output within the dot-product bound of the reference model's FP64 result:
    (terms + 1) * 2**-23 * (sum |x w| + |bias|), the sums from the graph of ``magnitudes``."""
    want = reference(data, {"x": x}, outs, precise=True)
    mag = reference(magnitudes, {"x": np.abs(x)}, outs, precise=True)
    for y, name, k in zip(ys, outs, terms, strict=True):
        err = np.abs(np.asarray(y).astype(np.float64) - want[name])
        assert np.all(err <= (k + 1) * 2.0**-23 * mag[name]), name


def _slot_exe(model: tosa_jax.Model):
    (slot,) = model._executables.values()
    return slot.exe


def test_large_kernels_are_taken_out() -> None:
    """Only a constant of MIN_BYTES or more read only as a kernel is taken out: a
    convolution's, or a matrix product's [K, N] operand (an [N, K] one transposed)."""
    big = np.ones((3, 3, 64, 128), np.float32)  # 288 KiB
    small = np.ones((1, 1, 8, 8), np.float32)
    rows = np.ones((256, 64), np.float32)  # [N, K], 64 KiB
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)

    def dot(a, b, contracting):
        return lax.dot_general(a, b, (((a.ndim - 1,), (contracting,)), ((), ())))

    x = jnp.zeros((1, 4, 4, 64), np.float32)
    cases = [(lambda x: conv(x, big), {0: False}),
             (lambda x: (conv(x, big), conv(x, big)), {0: False}),  # one constant, read twice
             (lambda x: conv(x[..., :8], small), {}),
             (lambda x: conv(x, big).sum() + jnp.asarray(big).sum(), {}),  # folded elsewhere
             (lambda x: dot(x, rows.T.copy(), 0), {0: False}),
             (lambda x: dot(x, rows, 1), {0: True}),
             (lambda x: (dot(x, rows, 1), dot(x, rows * 2, 1)), {0: True, 1: True}),
             # one constant read both ways: not taken
             (lambda x: (dot(x, rows, 1), dot(jnp.tile(x[0, 0, 0], 4)[None], rows, 0)), {}),
             (lambda x: dot(x, rows, 1) + jnp.asarray(rows).sum(), {}),
             (lambda x: dot(rows, x[0, 0, 0], 0), {})]  # a product's first operand
    for f, want in cases:
        closed = jax.make_jaxpr(f)(x)
        assert hoist.picked(closed) == want
        assert all(closed.consts[i].nbytes >= hoist.MIN_BYTES for i in want)


@pytest.mark.parametrize("dtype", ["INT8", "FP32"])
def test_kernels_as_arguments_from_every_path(dtype: str, tmp_path: Path, reference,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference model's integers (FP32: the executable's bits with the kernel a constant,
    and the reference model's FP64 result within 1e-5) from the executable compiled here, the
    host path's cache entry and JAX's cache entry; the module holds the kernel no more."""
    data, x, outs = _conv(dtype)
    first = tosa_jax.load(data, cache=tmp_path)
    y1 = [np.asarray(y) for y in first(x)]
    exe = _slot_exe(first)
    assert isinstance(exe, hoist.Weighted) and len(exe.weights) == 1
    assert len(exe.as_text()) < exe.weights[0].nbytes  # not a literal of the program
    flush()
    host = tosa_jax.load(data, cache=tmp_path)
    y2 = host(x)
    assert isinstance(host._host, hostexec.HostExecutable) and len(host._host._weights) == 1
    on_jax = tosa_jax.load(data, cache=tmp_path, device=jax.devices()[0])
    y3 = on_jax(jax.device_put(x))
    assert on_jax.compile_source == "cache" and isinstance(_slot_exe(on_jax), hoist.Weighted)
    for ys in (y2, y3):
        for y, want in zip(ys, y1, strict=True):
            np.testing.assert_array_equal(np.asarray(y), want)
    if dtype == "INT8":
        got = reference(data, {"x": x}, outs)
        for y, name in zip(y1, outs, strict=True):
            np.testing.assert_array_equal(y, got[name])
    else:
        monkeypatch.setattr(hoist, "MIN_BYTES", 1 << 62)
        plain = tosa_jax.load(data, cache=False)
        for y, want in zip(plain(x), y1, strict=True):
            np.testing.assert_array_equal(np.asarray(y), want)
        assert not isinstance(_slot_exe(plain), hoist.Weighted)
        got = reference(data, {"x": x}, outs, precise=True)
        for y, name in zip(y1, outs, strict=True):
            np.testing.assert_allclose(y, got[name], rtol=1e-5, atol=1e-5)
        _within_dot_bound(reference, y1, data, _conv(dtype, magnitude=True)[0], x, outs,
                          [3 * 3 * 64, 64])


def test_without_the_private_jit_call(reference, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where JAX's jit primitive is not the one expected (private API), the kernels are still
    taken out, the jaxpr evaluated equation by equation: the same bits, within the reference
    model's bound."""
    data, x, outs = _conv("FP32")
    want = tosa_jax.load(data, cache=False)(x)

    def broken(*args):
        raise TypeError("jit() got an unexpected keyword argument")

    monkeypatch.setattr(hoist, "_jit_call", lambda *a: broken)
    model = tosa_jax.load(data, cache=False)
    for y, w in zip(model(x), want, strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(w))
    assert isinstance(_slot_exe(model), hoist.Weighted)
    _within_dot_bound(reference, model(x), data, _conv("FP32", magnitude=True)[0], x, outs,
                      [3 * 3 * 64, 64])


def _equal_kernels(magnitude: bool = False) -> tuple[bytes, np.ndarray, list[str]]:
    """Three 1x1 CONV2Ds of one input: two CONST tensors of the same [256, 1, 1, 128] kernel and
    a different one (``magnitude``: of absolute values, as ``_conv``'s)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((256, 1, 1, 128)).astype(np.float32)
    xv = rng.standard_normal((1, 8, 8, 128)).astype(np.float32)
    kernels = [w, w.copy(), w + 1]
    if magnitude:
        kernels, xv = [np.abs(k) for k in kernels], np.abs(xv)
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 128), "FP32")
    zero = b.const([0], "FP32")
    outs = [b.op("CONV2D", [x, b.const(k, "FP32"), b.const(np.zeros(256), "FP32"), zero, zero],
                 (1, 8, 8, 256), "FP32", pad=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1),
                 acc_type="FP32", local_bound=False) for k in kernels]
    return serialization.write(b.build(outs)), xv, outs


def test_equal_kernels_are_one_argument(reference, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CONST tensors of the same kernel (ExecuTorch writes an unrolled LSTM's weights once
    per step) are one argument; a third, different, is another. 1x1 convolutions: matrix
    products of [N, K] kernels, taken out transposed. The same bits as with literals, within
    the reference model's bound."""
    data, xv, outs = _equal_kernels()
    model = tosa_jax.load(data, cache=False)
    got = model(xv)
    exe = _slot_exe(model)
    assert isinstance(exe, hoist.Weighted) and len(exe.weights) == 2
    assert [tuple(a.shape) for a in exe.weights] == [(128, 256)] * 2
    _within_dot_bound(reference, got, data, _equal_kernels(magnitude=True)[0], xv, outs,
                      [128] * 3)
    monkeypatch.setattr(hoist, "MIN_BYTES", 1 << 62)
    for y, want in zip(got, tosa_jax.load(data, cache=False)(xv), strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(want))
