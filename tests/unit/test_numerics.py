"""64-bit emulation in numerics.py against Python's exact integers (the spec's int64 arithmetic
evaluated directly), on edge values and random ones, with x64 off and on."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tosa_jax.lowering import numerics as nx

EDGES = [0, 1, -1, 2, -2, 65535, -65536, (1 << 31) - 1, -(1 << 31), 1 << 30, -(1 << 30) - 7]


def _values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64)
    return np.concatenate([np.array(EDGES, dtype=np.int64), v])


def _spec_apply_scale_32(value: int, multiplier: int, shift: int, double_round: bool) -> int:
    rnd = 1 << (shift - 1)
    if double_round and shift > 31:
        rnd += (1 << 30) if value >= 0 else -(1 << 30)
    result = (value * multiplier + rnd) >> shift  # Python >> is arithmetic on exact ints
    return ((result + (1 << 31)) % (1 << 32)) - (1 << 31)


@pytest.mark.parametrize("x64", [False, True])
def test_wide_mul_add_shift(x64: bool) -> None:
    a, b = _values(500, 1), _values(500, 2)[::-1]
    shifts = np.random.default_rng(3).integers(0, 64, a.size)
    with jax.enable_x64(x64):
        prod = nx.wide_mul32(a.astype(np.int32), b.astype(np.int32))
        total = nx.wide_add(prod, nx.wide(b.astype(np.int32)))
        shifted = nx.wide_sra(total, shifts.astype(np.int32))
        sat = nx.wide_saturate32(total)
    np.testing.assert_array_equal(nx.wide_to_numpy(prod), a * b)
    exact = [int(x) * int(y) + int(y) for x, y in zip(a, b)]
    np.testing.assert_array_equal(nx.wide_to_numpy(total), np.array(exact, dtype=np.int64))
    np.testing.assert_array_equal(
        nx.wide_to_numpy(shifted), np.array([e >> int(s) for e, s in zip(exact, shifts)]))
    np.testing.assert_array_equal(
        np.asarray(sat), np.clip(np.array(exact, dtype=np.int64), -(1 << 31), (1 << 31) - 1))


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("double_round", [False, True])
def test_apply_scale_32(x64: bool, double_round: bool) -> None:
    rng = np.random.default_rng(4)
    n = 2000
    shift = rng.integers(2, 63, n)
    # The spec REQUIREs value in [-(1 << (shift-1)), 1 << (shift-1)).
    bound = np.minimum(1 << np.minimum(shift - 1, 31), 1 << 31)
    value = np.array([rng.integers(-b, b) for b in bound], dtype=np.int64)
    multiplier = rng.integers(0, 1 << 31, n)
    with jax.enable_x64(x64):
        got = nx.apply_scale_32(value.astype(np.int32), multiplier.astype(np.int32),
                                shift.astype(np.int32), double_round)
    want = [_spec_apply_scale_32(int(v), int(m), int(s), double_round)
            for v, m, s in zip(value, multiplier, shift)]
    np.testing.assert_array_equal(np.asarray(got), np.array(want, dtype=np.int32))


def test_apply_scale_16_on_int48() -> None:
    rng = np.random.default_rng(5)
    value = rng.integers(-(1 << 47), 1 << 47, 1000, dtype=np.int64)
    multiplier = rng.integers(0, 1 << 15, 1000)
    shift = rng.integers(40, 63, 1000)
    got = nx.apply_scale_16(nx.wide_from_numpy(value), multiplier.astype(np.int32),
                            shift.astype(np.int32))
    want = [(int(v) * int(m) + (1 << (int(s) - 1))) >> int(s)
            for v, m, s in zip(value, multiplier, shift)]
    np.testing.assert_array_equal(np.asarray(got), np.array(want, dtype=np.int32))


def test_reciprocal_scale_matches_spec() -> None:
    counts = np.arange(1, 300)
    mult, shift = nx.reciprocal_scale(counts)
    for c, m, s in zip(counts, mult, shift):
        k = 32 - (32 - int(c - 1).bit_length())  # 32 - count_leading_zeros(c - 1)
        assert (m, s) == ((((1 << 30) + 1) << k) // int(c), 30 + k)


# ---------------------------------------------------------------------------- per backend


def test_on_cpu_else_traces_the_target_form_only() -> None:
    """Inside lowering_for a trace holds one form; without it both, and XLA keeps the CPU's
    here; TOSA_JAX_GPU_FORMS=1 takes the other form on the CPU too. int_dot_general's two forms
    agree with numpy's exact product (int8 operands on the CPU, BF16 elsewhere)."""
    import os

    a = np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 4) * 10
    b = np.arange(-16, 16, dtype=np.int8).reshape(2, 4, 4) * 7
    dims = (((2,), (1,)), ((0,), (0,)))
    want = np.einsum("bmk,bkn->bmn", a.astype(np.int64), b.astype(np.int64))

    def f() -> object:
        # a new function for each trace: JAX caches traces by function, not by lowering_for
        # (which is why Model keeps one jitted function per platform)
        return lambda x, y: nx.int_dot_general(x, y, dims)

    with nx.lowering_for("cpu"):
        cpu = str(jax.make_jaxpr(f())(a, b))
    with nx.lowering_for("cuda"):
        gpu = str(jax.make_jaxpr(f())(a, b))
    both = str(jax.make_jaxpr(f())(a, b))
    assert "cond" not in cpu and "convert_element_type" not in cpu  # int8 operands
    assert "cond" not in gpu and "bf16" in gpu  # exact BF16 products
    assert "cond" in both and both.count("dot_general") == 2  # XLA keeps the target's
    np.testing.assert_array_equal(np.asarray(jax.jit(f())(a, b)), want)
    with nx.lowering_for("cuda"):  # the GPU's form, run here
        np.testing.assert_array_equal(np.asarray(jax.jit(f())(a, b)), want)
    os.environ[nx.GPU_FORMS_ENV] = "1"
    try:
        forced = str(jax.make_jaxpr(f())(a, b))
    finally:
        del os.environ[nx.GPU_FORMS_ENV]
    assert "cond" not in forced and "convert_element_type" in forced


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize(("a_shape", "b_shape", "dims"), [
    ((2, 3, 1023), (2, 1023, 5), (((2,), (1,)), ((0,), (0,)))),  # the longest single chunk
    ((2, 3, 1024), (2, 1024, 5), (((2,), (1,)), ((0,), (0,)))),  # two chunks
    ((2, 3, 5001), (2, 5001, 5), (((2,), (1,)), ((0,), (0,)))),  # chunks padded with zeros
    ((4, 7, 9, 2, 256), (9, 2, 256, 6), (((2, 4), (0, 2)), ((3,), (1,)))),  # a conv's patches
    ((3, 600), (600, 4), (((1,), (0,)), ((), ()))),
])
@pytest.mark.parametrize("extreme", [False, True])
def test_exact_bf16_dot_is_the_int32_product(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                                              dims: object, dtype: type, extreme: bool) -> None:
    """The off-CPU form of 8-bit integer products (BF16 operands, F32 sums in chunks below
    2**24, chunks added in int32) equals numpy's exact product modulo 2**32, also where every
    term is the largest one (-128 * -128, 255 * 255) and a chunk's sum is at its bound."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    a = rng.integers(info.min, info.max + 1, a_shape).astype(dtype)
    b = rng.integers(info.min, info.max + 1, b_shape).astype(dtype)
    if extreme:
        a[...] = info.min if info.min else info.max
        b[...] = info.min if info.min else info.max
    (ca, cb), (ba, bb) = dims  # type: ignore[misc]
    # numpy's reference: batch dims first, then the free dims of a, then of b (dot_general's)
    fa = [d for d in range(a.ndim) if d not in ca + ba]
    fb = [d for d in range(b.ndim) if d not in cb + bb]
    a2 = a.transpose(*ba, *fa, *ca).astype(np.int64)
    b2 = b.transpose(*bb, *cb, *fb).astype(np.int64)
    batch = [a.shape[d] for d in ba]
    k = int(np.prod([a.shape[d] for d in ca]))
    want = np.matmul(a2.reshape(*batch, -1, k), b2.reshape(*batch, k, -1))  # exact in int64
    want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    got = np.asarray(jax.jit(lambda x, y: nx.exact_bf16_dot(x, y, dims))(a, b))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    jaxpr = str(jax.make_jaxpr(lambda x, y: nx.exact_bf16_dot(x, y, dims))(a, b))
    assert "bf16" in jaxpr and "i32[" in jaxpr
