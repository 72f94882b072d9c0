"""Proven value ranges (tosa_jax.ranges) and the RESCALE form they allow (numerics'
multiplier-piece cascade).

Soundness: on the fixture networks and on a graph of every modelled operator, with random and
extreme inputs, every intermediate tensor lies in its proven range. Exactness: the piece
cascade against the spec's apply_scale_32 evaluated in numpy int64 (|value * multiplier| <
2**62), densely over random ranges, multipliers, shifts and rounding modes and exhaustively
over whole ranges, with x64 off and on; the networks against the reference model are in
tests/test_networks.py.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import jax
import numpy as np
import pytest

import tosa_jax
import tosa_jax.lowering.numerics as nx
from tosa_jax.ir import GraphBuilder
from tosa_jax.ranges import block_ranges
from tosa_jax.testing.reference import check_exact

FIXTURES = Path(__file__).parent.parent / "fixtures"


def spec_scale_32(value: np.ndarray, m: np.ndarray, s: np.ndarray, dr: bool) -> np.ndarray:
    """apply_scale_32 in int64 (exact: |value * m| < 2**62, the round below 2**62), then
    static_cast<int32_t>."""
    v, m, s = (np.asarray(a).astype(np.int64) for a in (value, m, s))
    rnd = np.left_shift(np.int64(1), s - 1)
    if dr:
        rnd = rnd + np.where(s > 31, np.where(v >= 0, 1 << 30, -(1 << 30)), 0)
    return ((v * m + rnd) >> s).astype(np.int32)


def _jit_both(fns: list, values: list[np.ndarray]) -> list[np.ndarray]:
    """``fn(value)`` for each pair under jit with x64 off and on, checked int32 and equal. All
    pairs are compiled as one program per mode: a few hundred separate jits (their constants
    baked in, as the lowering bakes them) cost 80 ms each, mostly XLA's per-program cost. Where
    x64 on traces to the very same StableHLO as x64 off, it is the same program with the same
    results, and is not compiled a second time."""
    outs: list[list[np.ndarray]] = []
    texts: list[str] = []
    for x64 in (False, True):
        with jax.enable_x64(x64):
            lowered = jax.jit(lambda *vs: [f(v) for f, v in zip(fns, vs)]).lower(*values)
            texts.append(lowered.as_text())
            if x64 and texts[1] == texts[0]:
                break
            outs.append([np.asarray(o) for o in lowered.compile()(*values)])
    for got in zip(*outs):
        assert all(o.dtype == np.int32 for o in got)
        np.testing.assert_array_equal(got[0], got[-1])
    return outs[0]


def _pieces(value: np.ndarray, m: np.ndarray, s: np.ndarray, dr: bool,
            value_range: tuple[int, int]) -> tuple[np.ndarray, int] | None:
    plan = nx._pieces_plan(m, s, dr, value_range)
    if plan is None:
        return None
    cuts = plan[0]
    return _jit_both([partial(nx._scale_32_pieces, multiplier=m, shift=s, double_round=dr,
                              cuts=cuts)], [value])[0], len(cuts) - 1


def _random_range(rng: np.random.Generator, k_end: int) -> tuple[int, int]:
    """A value range [lo, hi] within +-2**k for a random k in [1, k_end): random bounds, or
    (40%) the whole signed k+1-bit range (k_end 32: within int32)."""
    k = int(rng.integers(1, k_end))
    lo, hi = -int(rng.integers(0, 2**k + 1)), int(rng.integers(0, 2**k))
    if rng.random() < 0.4:
        lo, hi = -(2**k), 2**k - 1
    return lo, hi


def _random_multipliers(rng: np.random.Generator, c: int) -> np.ndarray:
    """``c`` multipliers in [0, 2**31), the first often at an edge (0, 1, the ends, 2**16)."""
    m = rng.integers(0, 2**31, c)
    m[0] = rng.choice([0, 1, 2**31 - 1, 2**30, 65535, 65536, m[0]])
    return m


def test_pieces_dense_random() -> None:
    rng = np.random.default_rng(11)
    cases = []
    for _ in range(250):
        lo, hi = _random_range(rng, 31)
        c = int(rng.integers(1, 6))
        m = _random_multipliers(rng, c)
        s = rng.integers(2, 63, c) if rng.random() < 0.5 else np.full(c, rng.integers(2, 63))
        dr = bool(rng.random() < 0.3)
        v = np.concatenate([[lo, hi, 0, max(lo, -1), min(hi, 1)],
                            rng.integers(lo, hi + 1, 300)])
        value = np.repeat(v[:, None], c, 1).astype(np.int32)
        plan = nx._pieces_plan(m.astype(np.int32), s.astype(np.int32), dr, (lo, hi))
        if plan is not None:
            cases.append((value, m, s, dr, plan[0], (lo, hi)))
    got = _jit_both([partial(nx._scale_32_pieces, multiplier=m.astype(np.int32),
                             shift=s.astype(np.int32), double_round=dr, cuts=cuts)
                     for _, m, s, dr, cuts, _ in cases], [c[0] for c in cases])
    used: dict[int, int] = {}
    for out, (value, m, s, dr, cuts, lo_hi) in zip(got, cases):
        np.testing.assert_array_equal(out, spec_scale_32(value, m, s, dr),
                                      err_msg=f"{lo_hi, m, s, dr}")
        used[len(cuts) - 1] = used.get(len(cuts) - 1, 0) + 1
    assert sorted(used) == [1, 2, 3, 4], used  # every cascade length was exercised


@pytest.mark.parametrize("k", [9, 16, 20])
@pytest.mark.parametrize("dr", [False, True])
def test_pieces_exhaustive(k: int, dr: bool) -> None:
    """Every value of [-2**k, 2**k - 1] (an int8 convolution's accumulator has k ~ 20), for
    per-channel multipliers at the edges and shifts as ExecuTorch's graphs use them."""
    value = np.arange(-(2**k), 2**k, dtype=np.int32)
    m = np.array([2**31 - 1, 2**30, 1518500250, 1073741823 | 1], np.int32)
    s = np.array([38, 33, 50, 40], np.int32)
    for c in range(4):
        got = _pieces(value, m[c], s[c], dr, (-(2**k), 2**k - 1))
        assert got is not None, (k, m[c], s[c])
        np.testing.assert_array_equal(got[0], spec_scale_32(value, m[c], s[c], dr))


def test_split_dense_random() -> None:
    """The 14-operation form for shifts 33..62: random ranges up to the whole int32 range,
    values at the ends, around 0 and at the 2**16 steps of the split."""
    rng = np.random.default_rng(4)
    cases = []
    for _ in range(300):
        lo, hi = _random_range(rng, 32)
        c = int(rng.integers(1, 5))
        m = _random_multipliers(rng, c)
        s = rng.integers(33, 63, c)
        plan = nx._split_plan(m.astype(np.int32), s.astype(np.int32), (lo, hi))
        if plan is None:
            continue
        offset = plan[0]
        steps = np.arange(lo >> 16, (hi >> 16) + 1, max(1, ((hi >> 16) - (lo >> 16)) // 50))
        v = np.concatenate([[lo, hi, 0, -1, 1], steps << 16, (steps << 16) - 1,
                            (steps << 16) + 65535, rng.integers(lo, hi + 1, 300)])
        value = np.repeat(np.clip(v, lo, hi)[:, None], c, 1).astype(np.int32)
        cases.append((value, m, s, offset, (lo, hi)))
    assert len(cases) > 250
    got = _jit_both([partial(nx._scale_32_split, multiplier=m.astype(np.int32),
                             shift=s.astype(np.int32), offset=offset)
                     for _, m, s, offset, _ in cases], [c[0] for c in cases])
    for out, (value, m, s, _, lo_hi) in zip(got, cases):
        np.testing.assert_array_equal(out, spec_scale_32(value, m, s, False),
                                      err_msg=f"{lo_hi, m, s}")


def test_apply_scale_32_takes_the_cascade(monkeypatch) -> None:
    """The 32-bit forms (off the CPU): an int32 value of proven range [-2**20, 2**20]: 3
    pieces, 9 operations, where the general constant-scale form takes about 20."""
    monkeypatch.setenv(nx.GPU_FORMS_ENV, "1")
    v = jax.ShapeDtypeStruct((8,), np.int32)
    jaxpr = jax.make_jaxpr(lambda x: nx.apply_scale_32(
        x, np.int32(1518500250), np.int32(38), value_range=(-(2**20), 2**20)))(v)
    full = jax.make_jaxpr(lambda x: nx.apply_scale_32(x, np.int32(1518500250), np.int32(38)))(v)
    assert len(jaxpr.eqns) <= 9 < len(full.eqns)


@pytest.mark.usefixtures("scale_form")
def test_output_zero_point_and_one_shift_dense_random() -> None:
    """apply_scale_32 with an output zero point (RESCALE's, added with the round where the sum
    provably fits: _zp_term) and per-channel shifts (given one shift where that takes no more
    pieces: _common_shift), from the top: random value ranges up to int32's, random multipliers,
    shifts a few apart or far apart, zero points of int8, uint16 (32768) and extreme ones,
    against the spec's formula plus the zero point modulo 2**32."""
    rng = np.random.default_rng(23)
    cases = []
    for _ in range(300):
        lo, hi = _random_range(rng, 32)
        c = int(rng.integers(1, 6))
        m = _random_multipliers(rng, c)
        base = int(rng.integers(2, 60))
        s = np.clip(base + rng.integers(0, rng.choice([1, 2, 3, 9]), c), 2, 62)
        zp = int(rng.choice([0, -128, 127, 32768, -(2**31), 2**31 - 1, rng.integers(-128, 128)]))
        v = np.concatenate([[lo, hi, 0, max(lo, -1), min(hi, 1)], rng.integers(lo, hi + 1, 200)])
        value = np.repeat(v[:, None], c, 1).astype(np.int32)
        cases.append((value, m.astype(np.int32), s.astype(np.int32), zp, (lo, hi)))
    got = _jit_both([partial(nx.apply_scale_32, multiplier=m, shift=s, value_range=r, out_zp=zp)
                     for _, m, s, zp, r in cases], [c[0] for c in cases])
    for out, (value, m, s, zp, r) in zip(got, cases):
        want = (spec_scale_32(value, m, s, False).astype(np.int64) + zp).astype(np.int32)
        np.testing.assert_array_equal(out, want, err_msg=f"{r, m, s, zp}")


def test_output_zero_point_and_shifts_take_no_operation(monkeypatch) -> None:
    """The 32-bit forms (off the CPU): an int8 convolution's per-channel RESCALE (accumulator
    within +-2**20, shifts 37 and 38, int8 output zero point): the zero point and the second
    shift cost no operation and no per-channel operand (the same equations as one shift and
    zero point 0)."""
    monkeypatch.setenv(nx.GPU_FORMS_ENV, "1")
    v = jax.ShapeDtypeStruct((1, 4, 4, 3), np.int32)
    m = np.array([1518500250, 1073741824, 2147483647], np.int32)

    def eqns(shift: list[int], zp: int) -> list[str]:
        jaxpr = jax.make_jaxpr(lambda x: nx.apply_scale_32(
            x, m, np.array(shift, np.int32), value_range=(-(2**20), 2**20), out_zp=zp))(v)
        return [e.primitive.name for e in jaxpr.eqns]

    assert eqns([37, 38, 38], -128) == eqns([38, 38, 38], 0)


def _extreme_inputs(model: tosa_jax.Model, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    runs = []
    for kind in ("random", "ends", "min", "max"):
        xs = []
        for spec in model.inputs:
            lo, hi = np.iinfo(spec.np_dtype).min, np.iinfo(spec.np_dtype).max
            if kind == "random":
                x = rng.integers(lo, hi, spec.shape, endpoint=True)
            elif kind == "ends":
                x = rng.choice([lo, hi], spec.shape)
            else:
                x = np.full(spec.shape, lo if kind == "min" else hi)
            xs.append(x.astype(spec.np_dtype))
        runs.append(xs)
    return runs


def _check_sound(model: tosa_jax.Model, seed: int = 0) -> int:
    ranges = block_ranges(model.graph.main)
    checked = 0
    for xs in _extreme_inputs(model, seed):
        for name, value in model.intermediates(*xs).items():
            if name in ranges and np.asarray(value).size:
                lo, hi = ranges[name]
                v = np.asarray(value)
                assert lo <= v.min() and v.max() <= hi, (name, (lo, hi), (v.min(), v.max()))
                checked += 1
    return checked


@pytest.mark.parametrize("name", ["cnn_int8", "mlp_attn_int8"])
def test_ranges_hold_on_networks(name: str) -> None:
    model = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=False)
    ranges = block_ranges(model.graph.main)
    computed = [n for n, t in model.graph.main.tensors.items()
                if n in ranges and t.data is None and t.dtype == "INT32"]
    assert computed, "no int32 range proven: the test would prove nothing"
    assert _check_sound(model) > len(computed)


@pytest.mark.parametrize("op", ["CONV2D", "DEPTHWISE_CONV2D"])
@pytest.mark.parametrize("wzp", [-128, 0, 127])
def test_conv_accumulator_bound(op: str, wzp: int) -> None:
    """A convolution's int32 accumulator: bias + max|x - x_zp| times the largest per-output sum
    of |w - w_zp|, worked out here on Python integers (full-range int8 weights, the zero
    points at the ends of int8), and sound on extreme inputs."""
    rng = np.random.default_rng(wzp & 0xFF)
    shape = (4, 3, 3, 5) if op == "CONV2D" else (3, 3, 5, 2)
    w = rng.integers(-128, 128, shape).astype(np.int8)
    w.flat[:2] = [-128, 127]
    oc = 4 if op == "CONV2D" else 10
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    b = GraphBuilder()
    x = b.input("x", (1, 6, 6, 5), "INT8")
    acc = b.op(op, [x, b.const(w, "INT8"), b.const(bias, "INT32"), b.const([-3], "INT8"),
                    b.const([wzp], "INT8")], (1, 4, 4, oc), "INT32", pad=(0, 0, 0, 0),
               stride=(1, 1), dilation=(1, 1), acc_type="INT32", local_bound=False)
    model = tosa_jax.load(b.build([acc]), cache=False)
    taps = [abs(int(v) - wzp) for v in w.reshape(-1)]
    per_out = (np.array(taps, dtype=object).reshape(oc, -1).sum(axis=1) if op == "CONV2D"
               else np.array(taps, dtype=object).reshape(-1, oc).sum(axis=0))
    bound = max(per_out) * max(abs(-128 + 3), abs(127 + 3))
    assert block_ranges(model.graph.main)[acc] == (int(bias.min()) - bound,
                                                  int(bias.max()) + bound)
    assert _check_sound(model) >= 4


def _modelled_ops_graph() -> tuple[GraphBuilder, list[str]]:
    """MUL (with and without shift), SUB, CLAMP, MAXIMUM, CONCAT, TABLE, MATMUL, RESCALE
    (per-channel, DOUBLE_ROUND), REDUCE_SUM on int8/int16 inputs."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    a = b.input("a", (2, 6), "INT8")
    c = b.input("c", (2, 6), "INT16")
    wide = b.op("RESCALE", [a, b.const([1 << 30] * 6, "INT32"), b.const([20] * 6, "INT8"),
                            b.const([-3], "INT8"), b.const([0], "INT32")],
                (2, 6), "INT32", scale32=True, rounding_mode="DOUBLE_ROUND", per_channel=True,
                input_unsigned=False, output_unsigned=False)
    c32 = b.op("MUL", [a, a, b.const([0], "INT8")], (2, 6), "INT32")
    prod = b.op("MUL", [wide, c32, b.const([9], "INT8")], (2, 6), "INT32")
    diff = b.op("SUB", [prod, wide], (2, 6), "INT32")
    clamped = b.op("CLAMP", [c], (2, 6), "INT16", min_val=np.int16(-100),
                   max_val=np.int16(3000), nan_mode="PROPAGATE")
    big = b.op("MAXIMUM", [b.op("MUL", [clamped, c, b.const([0], "INT8")], (2, 6), "INT32"),
                           diff], (2, 6), "INT32", nan_mode="PROPAGATE")
    joined = b.op("CONCAT", [big, diff], (4, 6), "INT32", axis=0)
    total = b.op("REDUCE_SUM", [joined], (1, 6), "INT32", axis=0)
    table = b.op("TABLE", [a, b.const(rng.integers(-50, 90, 256), "INT8")], (2, 6), "INT8")
    mm = b.op("MATMUL", [b.op("RESHAPE", [table, b.const([1, 2, 6], "SHAPE")], (1, 2, 6), "INT8"),
                         b.op("RESHAPE", [a, b.const([1, 6, 2], "SHAPE")], (1, 6, 2), "INT8"),
                         b.const([3], "INT8"), b.const([-1], "INT8")], (1, 2, 2), "INT32")
    out = b.op("RESCALE", [total, b.const([1860396431] * 6, "INT32"),
                           b.const([41, 39, 38, 45, 50, 40], "INT8"), b.const([0], "INT32"),
                           b.const([-4], "INT8")], (1, 6), "INT8", scale32=True,
               rounding_mode="SINGLE_ROUND", per_channel=True, input_unsigned=False,
               output_unsigned=False)
    return b, [out, mm, joined, table]


def test_ranges_hold_on_every_modelled_operator(reference) -> None:
    b, outs = _modelled_ops_graph()
    graph = b.build(outs)
    model = tosa_jax.load(graph, cache=False)
    ranges = block_ranges(graph.main)
    produced = {op.op for op in graph.main.operators if op.outputs[0] in ranges}
    assert {"RESCALE", "MUL", "SUB", "CLAMP", "MAXIMUM", "CONCAT", "REDUCE_SUM", "TABLE",
            "MATMUL", "RESHAPE"} <= produced, produced
    assert _check_sound(model, seed=1) > 20
    rng = np.random.default_rng(2)
    check_exact(reference, graph, inputs={
        "a": rng.integers(-128, 128, (2, 6)).astype(np.int8),
        "c": rng.integers(-32768, 32768, (2, 6)).astype(np.int16)})


# One step of a rolled loop (tosa_jax.reroll): per-step constants known by their values in every
# step, carried values by their ranges over every step.

def _step(clamp: int | None = None):
    """c' = c + k (CLAMPed to +-clamp), k an int32 constant in [-3, 5]: the carried value of
    step t lies in [-3 t, 5 t]."""
    b = GraphBuilder()
    c = b.input("c", (4,), "INT32")
    k = b.const(np.array([-3, 0, 5, 1]), "INT32")
    nxt = b.op("ADD", [c, k], (4,), "INT32")
    if clamp is not None:
        nxt = b.op("CLAMP", [nxt], (4,), "INT32", min_val=-clamp, max_val=clamp,
                   nan_mode="PROPAGATE")
    b.block.outputs = [nxt]
    return b.block


def test_carried_ranges_cover_every_step() -> None:
    from tosa_jax.ranges import carried_ranges

    # X_t = X_t-1 | (X_t-1 + [-3, 5]) from X_0 = [0, 0]: the values of steps 0..4
    assert carried_ranges(_step(), 1, [(0, 0)], steps=5) == {"c": (-12, 20)}
    # a CLAMP holds the state: X stops growing at [-7, 7], and every later step stays there
    assert carried_ranges(_step(7), 1, [(0, 0)], steps=1000) == {"c": (-7, 7)}
    assert carried_ranges(_step(), 1, [None], steps=5) == {}  # an initial value of any value
    # near the end of int32 the sum could wrap: no range
    assert carried_ranges(_step(), 1, [(2**31 - 20, 2**31 - 10)], steps=5) == {}


def test_per_step_constants_give_the_union_of_the_steps() -> None:
    """A RESCALE whose scales differ per step: its range is the union of each step's, each
    worked out here from the spec's formula at the input's extremes."""
    from tosa_jax.ranges import BlockRanges

    rng = np.random.default_rng(0)
    steps = 7
    m = rng.integers(1 << 29, 1 << 31, (steps, 1))
    s = rng.integers(30, 38, (steps, 1))
    zp = rng.integers(-20, 20, (steps, 1))
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT8")
    inputs = [x, b.input("m", (1,), "INT32"), b.input("s", (1,), "INT8"),
              b.const([0], "INT8"), b.input("zp", (1,), "INT8")]
    out = b.op("RESCALE", inputs, (2, 3), "INT16", scale32=True, rounding_mode="SINGLE_ROUND",
               per_channel=False, input_unsigned=False, output_unsigned=False)
    b.block.step_values.update(m=m, s=s, zp=zp)
    lo = min(int(spec_scale_32(np.int64(-128), m[t], s[t], False)[0] + zp[t, 0])
             for t in range(steps))
    hi = max(int(spec_scale_32(np.int64(127), m[t], s[t], False)[0] + zp[t, 0])
             for t in range(steps))
    ranges = BlockRanges(b.block)
    assert ranges.get(out) == (lo, hi)
    assert ranges.get("zp") == (int(zp.min()), int(zp.max()))
    assert ranges.step_values("m") is m
