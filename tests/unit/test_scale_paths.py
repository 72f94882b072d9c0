"""apply_scale_32's forms against the spec's formula on exact Python integers: constants
(numpy, evaluated at once), constant scales on traced values (the two short forms: shift >= 33
and shift <= 31), and traced scales (the 64-bit pair form), each with x64 off and on, and each
both ways: XLA CPU's int64 primitive (numerics.scale_32_p) and the 32-bit forms.

The expected values are the spec pseudocode evaluated in Python integers (result taken modulo
2**32, as static_cast<int32_t> does), for the whole int32 range of values, including values the
spec's REQUIRE would refuse: every form must agree with the 64-bit one there too.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax.lowering.numerics as nx

# Every test twice: XLA CPU's int64 primitive (constant scales in range), and the 32-bit forms
# other platforms take.
pytestmark = pytest.mark.usefixtures("scale_form")

EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**16, -(2**16), 2**16 - 1, 2**15, -(2**15), 65535,
         -65536, 123456789, -987654321]


def _spec(value: int, multiplier: int, shift: int, double_round: bool) -> int:
    rnd = 1 << (shift - 1)
    if double_round and shift > 31:
        rnd += (1 << 30) if value >= 0 else -(1 << 30)
    result = (value * multiplier + rnd) >> shift
    return ((result + (1 << 31)) % (1 << 32)) - (1 << 31)


def _case(seed: int, shifts: tuple[int, int], channels: int):
    rng = np.random.default_rng(seed)
    shift = rng.integers(shifts[0], shifts[1] + 1, channels).astype(np.int32)
    mult = np.concatenate([[0, 1, 2**31 - 1, 2**30, 65535, 65536],
                           rng.integers(0, 2**31, channels)])[:channels].astype(np.int32)
    value = np.concatenate([np.repeat(np.array(EDGES, np.int64), channels).reshape(-1, channels),
                            rng.integers(-(2**31), 2**31, (150, channels))]).astype(np.int32)
    want = np.array([[_spec(int(v), int(m), int(s), False) for v, m, s in zip(row, mult, shift)]
                     for row in value], np.int64)
    return value, mult, shift, want


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("shifts", [(33, 62), (1, 31), (2, 62), (32, 32)])
def test_constant_scales_on_traced_values(x64: bool, shifts: tuple[int, int]) -> None:
    value, mult, shift, want = _case(shifts[0], shifts, 19)
    with jax.enable_x64(x64):
        got = jax.jit(lambda v: nx.apply_scale_32(v, mult, shift, False))(value)
        scalar = jax.jit(lambda v: nx.apply_scale_32(v, mult[3], shift[3], False))(value[:, 3])
        host = nx.apply_scale_32(value, mult, shift, False)
        traced = jax.jit(lambda v, m, s: nx.apply_scale_32(v, m, s, False))(value, mult, shift)
    for out, expected in ((got, want), (scalar, want[:, 3]), (host, want), (traced, want)):
        assert np.asarray(out).dtype == np.int32
        np.testing.assert_array_equal(np.asarray(out), expected.astype(np.int32))


@pytest.mark.parametrize("x64", [False, True])
def test_double_round_constant_scales(x64: bool) -> None:
    value, mult, shift, _ = _case(5, (2, 62), 19)
    want = np.array([[_spec(int(v), int(m), int(s), True) for v, m, s in zip(row, mult, shift)]
                     for row in value], np.int64).astype(np.int32)
    with jax.enable_x64(x64):
        got = jax.jit(lambda v: nx.apply_scale_32(v, mult, shift, True))(value)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("double_round", [False, True])
@pytest.mark.parametrize("shifts", [(17, 47), (1, 16), (30, 30), (11, 11), (38, 47)])
def test_narrow_values_constant_scales(x64: bool, double_round: bool,
                                       shifts: tuple[int, int]) -> None:
    """The short form for |value| < 2**9 (RESCALE of an 8-bit input), every such value, against
    the spec's formula; per channel and per tensor."""
    rng = np.random.default_rng(shifts[0] * 7 + double_round)
    channels = 7
    shift = rng.integers(shifts[0], shifts[1] + 1, channels).astype(np.int32)
    mult = np.concatenate([[0, 1, 2**31 - 1, 2**30, 65535, 65536],
                           rng.integers(0, 2**31, channels)])[:channels].astype(np.int32)
    assert nx._scale_32_narrow(np.int32(0), mult, shift, double_round) is not None
    _check_narrow(mult, shift, double_round, x64, channel=2)


def _check_narrow(mult: np.ndarray, shift: np.ndarray, double_round: bool, x64: bool,
                  channel: int) -> None:
    """apply_scale_32 of every |value| < 2**9 (value_bits 10) against the spec's formula: per
    channel, and per tensor with one channel's scale."""
    value = np.repeat(np.arange(-511, 512, dtype=np.int32)[:, None], len(mult), axis=1)
    want = np.array([[_spec(int(v), int(m), int(s), double_round)
                      for v, m, s in zip(row, mult, shift)] for row in value],
                    np.int64).astype(np.int32)
    with jax.enable_x64(x64):
        got = jax.jit(lambda v: nx.apply_scale_32(v, mult, shift, double_round, 10))(value)
        one = jax.jit(lambda v: nx.apply_scale_32(v, mult[channel], shift[channel],
                                                  double_round, 10))(value[:, channel])
    assert np.asarray(got).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(one), want[:, channel])


def _spec_vec(value: np.ndarray, mult: np.ndarray, shift: np.ndarray,
              double_round: bool) -> np.ndarray:
    """The spec's formula in numpy int64 (exact: |value| <= 2**16, multiplier < 2**31)."""
    v, m, s = value.astype(np.int64), mult.astype(np.int64), shift.astype(np.int64)
    rnd = np.int64(1) << (s - 1)
    if double_round:
        rnd = rnd + np.where(s > 31, np.where(v >= 0, 1 << 30, -(1 << 30)), 0)
    return ((v * m + rnd) >> s).astype(np.int32)  # astype wraps modulo 2**32: static_cast


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("double_round", [False, True])
@pytest.mark.parametrize("value_range", [(-32768, 32767), (0, 65535), (-32768 - 5, 32767 - 5)])
@pytest.mark.parametrize("shifts", [(17, 46), (1, 16), (30, 30), (47, 47), (37, 37)])
def test_16_bit_values_constant_scales(x64: bool, double_round: bool,
                                       value_range: tuple[int, int],
                                       shifts: tuple[int, int]) -> None:
    """RESCALE of a 16-bit input less a constant zero point (value_range): the short form
    where it cannot overflow, the full one elsewhere; every value of the range against the
    spec's formula, per channel and per tensor, including the extreme multipliers."""
    rng = np.random.default_rng(shifts[0] * 11 + double_round + value_range[0] % 7)
    channels = 6
    shift = rng.integers(shifts[0], shifts[1] + 1, channels).astype(np.int32)
    mult = np.concatenate([[2**31 - 1, 2**30, 65535, 65536],
                           rng.integers(0, 2**31, channels)])[:channels].astype(np.int32)
    value = np.repeat(np.arange(value_range[0], value_range[1] + 1, dtype=np.int32)[:, None],
                      channels, axis=1)
    want = _spec_vec(value, mult, shift, double_round)
    with jax.enable_x64(x64):
        got = jax.jit(lambda v: nx.apply_scale_32(v, mult, shift, double_round,
                                                  value_range=value_range))(value)
        one = jax.jit(lambda v: nx.apply_scale_32(v, mult[1], shift[1], double_round,
                                                  value_range=value_range))(value[:, 1])
    assert np.asarray(got).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(one), want[:, 1])


def test_16_bit_short_form_taken_where_safe() -> None:
    """The short form applies to a signed 16-bit input (zero point 0) for every multiplier and
    shift 1..47, and is refused where value * (multiplier & 0xFFFF) could leave int32 (a
    uint16 input with zero point 0, one value past the int16 range)."""
    for mult in (2**31 - 1, 2**30, 65535, 0):
        for shift in (1, 16, 17, 31, 46, 47):
            assert nx._scale_32_narrow(np.int32(0), np.int32(mult), np.int32(shift), True,
                                       (-32768, 32767)) is not None, (mult, shift)
    big = np.int32(2**31 - 1)
    assert nx._scale_32_narrow(np.int32(0), big, np.int32(40), False, (0, 65535)) is None
    assert nx._scale_32_narrow(np.int32(0), big, np.int32(40), False, (-32769, 32767)) is None
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("double_round", [False, True])
@pytest.mark.parametrize("shifts", [(17, 47), (1, 16), (20, 30), (32, 47)])
def test_narrow_values_multipliers_of_2_16(x64: bool, double_round: bool,
                                           shifts: tuple[int, int]) -> None:
    """The short form's case of multipliers with no low 16 bits (2**30 in int8 ADD's input
    rescales), every |value| < 2**9, against the spec's formula; per channel and per tensor."""
    rng = np.random.default_rng(shifts[0] * 11 + double_round)
    channels = 6
    shift = rng.integers(shifts[0], shifts[1] + 1, channels).astype(np.int32)
    mult = (np.concatenate([[0, 1 << 14, (1 << 15) - 1], rng.integers(0, 1 << 15, channels)])
            [:channels] << 16).astype(np.int32)
    _check_narrow(mult, shift, double_round, x64, channel=1)


# Traced scales whose every value is known (one step of a rolled loop, tosa_jax.reroll): the
# short forms, chosen on all the values, must give the spec's result for each step's scales.
I32 = (-(2**31), 2**31 - 1)
KNOWN = [  # (value range, shift range, double round): narrow both sides of 16, pieces, split,
    # the mulhi form on both sides of 32
    ((-255, 255), (17, 40), True), ((-510, 255), (2, 16), False),
    ((-(2**22), 2**22), (30, 50), True), ((-(2**28), 2**28), (33, 62), False),
    (I32, (1, 31), True), (I32, (33, 62), False)]


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize(("value_range", "shifts", "double_round"), KNOWN)
def test_traced_scales_with_known_values(x64: bool, value_range: tuple[int, int],
                                         shifts: tuple[int, int], double_round: bool) -> None:
    rng = np.random.default_rng(shifts[0])
    steps, channels = 6, 5
    mults = rng.integers(0, 2**31, (steps, channels)).astype(np.int32)
    mults[0, :2] = [2**31 - 1, 0]
    sh = rng.integers(shifts[0], shifts[1] + 1, (steps, channels)).astype(np.int32)
    lo, hi = value_range
    value = np.concatenate([np.array([[lo], [hi], [0], [-1]]) + np.zeros(channels, np.int64),
                            rng.integers(lo, hi + 1, (60, channels))]).astype(np.int32)

    def scale(v, m, s, known):  # (with an output zero point: added after a traced scale)
        return nx.apply_scale_32(v, m, s, double_round, value_range=value_range, known=known,
                                 out_zp=-7)

    with jax.enable_x64(x64):
        short = jax.jit(lambda v, m, s: scale(v, m, s, (mults, sh)))
        for k in range(steps):
            want = np.array([[_spec(int(v), int(m), int(s), double_round) - 7
                              for v, m, s in zip(row, mults[k], sh[k])] for row in value])
            np.testing.assert_array_equal(np.asarray(short(value, mults[k], sh[k])),
                                          want.astype(np.int32))
        # a short form, not the 64-bit pair form that traced scales take without the values
        eqns = [len(jax.make_jaxpr(lambda v, m, s, known=known: scale(v, m, s, known))(
            value, mults[0], sh[0]).eqns) for known in ((mults, sh), None)]
    assert eqns[0] < eqns[1], eqns


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("double_round", [False, True])
@pytest.mark.parametrize("case", ["left", "right", "right_high", "per_channel_left",
                                  "per_channel_right", "mixed"])
def test_power_of_two_multipliers(x64: bool, double_round: bool, case: str) -> None:
    """Multipliers 2**k as int32 shifts (numerics._scale_32_pow2): k >= shift a left shift,
    k < shift a rounding right shift; shifts above 31 with DOUBLE_ROUND and channels mixing the
    two cases take the general forms. Every int32 value, against the spec's formula."""
    channels = 7
    rng = np.random.default_rng(11)
    low = rng.integers(0, 10, channels)
    k, shift = {
        "left": (np.full(channels, 30), np.full(channels, 11)),
        "right": (np.full(channels, 3), np.full(channels, 20)),
        "right_high": (np.full(channels, 30), np.full(channels, 45)),
        "per_channel_left": (rng.integers(20, 31, channels), rng.integers(2, 20, channels)),
        "per_channel_right": (low, low + rng.integers(1, 32, channels)),
        "mixed": (np.array([30, 2, 30, 2, 30, 2, 30]), np.full(channels, 16)),
    }[case]
    mult = np.left_shift(1, k).astype(np.int32)
    shift = shift.astype(np.int32)
    value = np.concatenate([np.repeat(np.array(EDGES, np.int64), channels).reshape(-1, channels),
                            rng.integers(-(2**31), 2**31, (150, channels))]).astype(np.int32)
    want = np.array([[_spec(int(v), int(m), int(s), double_round)
                      for v, m, s in zip(row, mult, shift)] for row in value], np.int64)
    scales = nx._const_scales(value.shape, mult, shift)
    assert scales is not None
    taken = nx._scale_32_pow2(jax.numpy.asarray(value), *scales, double_round) is not None
    assert taken == (case != "mixed" and not (double_round and shift.max() > 31))
    with jax.enable_x64(x64):
        got = jax.jit(lambda v: nx.apply_scale_32(v, mult, shift, double_round, out_zp=-5))(value)
    np.testing.assert_array_equal(np.asarray(got), (want - 5).astype(np.int32))
