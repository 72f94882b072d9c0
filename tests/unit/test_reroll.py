"""Unrolled recurrences rolled into loops (tosa_jax.reroll): what the planner finds, and that
a rolled graph gives the reference model's results bit for bit.

The graph is an unrolled int8 RNN as ExecuTorch exports one: every time step has its own
constants (RESCALE scales and zero points, TABLE contents calibrated per step, a SLICE start
per step), its weights are shared, the state is carried from step to step, a value of every
step is concatenated at the end (stacked out of the loop) and the last state is a second
output (the loop's final state).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import hostexec, reroll
from tosa_jax.ir import GraphBuilder
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.reference import check_exact

STEPS, WIDTH = 12, 8


def unrolled_rnn(steps: int = STEPS, seed: int = 0, ahead: bool = False,
                 leak: bool = False) -> GraphBuilder:
    """An int32 state c (from a constant c0: the loop's carried value starts as a constant,
    and varies per sample after the first step) accumulates each step's input projection;
    RESCALE and TABLE turn it into the step's output. ``ahead``: each step's slice of the
    input is taken at the end of the step before (as ExecuTorch orders its LSTMs), so that a
    step of the repeating operators does not begin where a time step does; and the weights'
    zero point is one constant, made where the first step uses it (as exporters share equal
    constants), so that only the first step has that CONST. ``leak``: each step first scales
    the state by 7/8 (MUL with a shift), which in the first step, from the constant c0, is a
    constant: that step folds more into constants than the others."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    x = b.input("x", (1, steps, WIDTH), "INT8")
    w_x = b.const(rng.integers(-128, 128, (1, WIDTH, WIDTH)), "INT8", "w_x")  # shared weights
    c = b.const(rng.integers(-5000, 5000, (1, 1, WIDTH)), "INT32", "c0")

    def take(t: int) -> str:
        return b.op("SLICE", [x, b.const([0, t, 0], "SHAPE"), b.const([1, 1, WIDTH], "SHAPE")],
                    (1, 1, WIDTH), "INT8")

    def output(c: str) -> tuple[str, str]:  # a step's RESCALE and TABLE of the state
        scaled = b.op("RESCALE", [
            c, b.const(rng.integers(1 << 30, (1 << 31) - 1, WIDTH), "INT32"),
            b.const(rng.integers(22, 28, WIDTH), "INT8"), b.const([0], "INT32"),
            b.const([int(rng.integers(-10, 10))], "INT8")], (1, 1, WIDTH), "INT8",
            scale32=True, rounding_mode="DOUBLE_ROUND", per_channel=True, input_unsigned=False,
            output_unsigned=False)
        return scaled, b.op("TABLE", [scaled, b.const(np.sort(rng.integers(-128, 128, 256)),
                                                      "INT8")], (1, 1, WIDTH), "INT8")

    # ahead: the same operators on the initial state first, so that the operators repeat
    # from the middle of a step on (the planner must find where steps begin)
    outputs = [output(c)[1]] if ahead else []
    values = []
    xt = take(0) if ahead else ""
    w_zp = ""
    for t in range(steps):
        if not ahead:
            xt = take(t)
        if not (ahead and w_zp):
            w_zp = b.const([0], "INT8")
        if leak:
            c = b.op("MUL", [c, b.const(np.full((1, 1, 1), 7), "INT32"), b.const([3], "INT8")],
                     (1, 1, WIDTH), "INT32")
        c = b.op("ADD", [c, b.op("MATMUL", [xt, w_x, b.const([int(rng.integers(-5, 5))], "INT8"),
                                            w_zp], (1, 1, WIDTH), "INT32")],
                 (1, 1, WIDTH), "INT32")
        values.append(output(c)[1])
        if ahead and t + 1 < steps:
            xt = take(t + 1)
    seq = b.op("CONCAT", values, (1, steps, WIDTH), "INT8", axis=1)
    b.block.outputs = [seq, c, *outputs]
    return b


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(-128, 128, (1, STEPS, WIDTH)).astype(np.int8)}


@pytest.mark.parametrize(("ahead", "leak"), [(False, False), (True, False), (False, True)])
def test_planner_rolls_the_steps(ahead: bool, leak: bool) -> None:
    b = unrolled_rnn(ahead=ahead, leak=leak)
    graph = b.build(b.block.outputs)
    (loop,) = reroll.plan(graph.main)
    assert loop.steps == STEPS  # every step, wherever steps begin and constants are made
    assert loop.init == ("c0",)                                   # the state, from a constant
    assert len(loop.xs) >= 5     # the slices, a zero point, scales, shifts, output zp, tables
    assert loop.ys and loop.finals[0] is not None  # the concatenated values; the last state
    assert not any(op.op in ("SLICE", "CONST_SHAPE") for op in loop.body.operators)
    # what the step's lowerings may rely on: each per-step scale's values in every step, and
    # the carried state's range over all steps (c0 +- the input projections)
    scales = [n for n in loop.body.inputs if n in loop.body.step_values]
    assert len(scales) >= 4 and all(len(loop.body.step_values[n]) == STEPS for n in scales)
    (state,) = loop.body.input_ranges.values()
    assert state[0] < -5000 and state[1] > 5000 and state[1] - state[0] < 2**31


@pytest.mark.parametrize(("seed", "ahead", "leak"), [(1, False, False), (2, True, False),
                                                     (7, False, True)])
def test_rolled_rnn_matches_reference(reference, seed: int, ahead: bool, leak: bool) -> None:
    b = unrolled_rnn(seed=seed, ahead=ahead, leak=leak)
    graph = b.build(b.block.outputs)
    check_exact(reference, graph, inputs=_inputs(seed))  # x64 off and on
    model = tosa_jax.load(graph, cache=False)
    lowered = jax.jit(model.fn).lower(*_inputs(seed).values()).as_text()
    assert "stablehlo.while" in lowered  # it did run as a loop


def test_rolled_rescale_keeps_a_short_form(monkeypatch) -> None:
    """In the loop, RESCALE's per-step scales are traced; with their values known and the
    state's range proven it takes a short exact form, not the 64-bit pair form (whose
    results are the same, checked above, but cost twice the operations)."""
    from tosa_jax.lowering import numerics

    pair_forms = []
    wide_mul32 = numerics.wide_mul32
    monkeypatch.setattr(numerics, "wide_mul32", lambda *a: pair_forms.append(a) or wide_mul32(*a))
    b = unrolled_rnn(seed=1)
    model = tosa_jax.load(b.build(b.block.outputs), cache=False)
    assert "stablehlo.while" in jax.jit(model.fn).lower(*_inputs(1).values()).as_text()
    assert not pair_forms


@pytest.mark.parametrize("how", ["vmap", "evaluate"])
def test_rolled_rnn_batched_matches_reference(reference, how: str) -> None:
    """Batched, the state varies per sample though it starts from a constant: through vmap,
    and through evaluate (shard_map over the devices, where a loop's carried values must vary
    along the device axis in and out)."""
    b = unrolled_rnn(seed=3)
    graph = b.build(b.block.outputs)
    data = tosa_jax.write(graph)
    model = tosa_jax.load(data, cache=False)
    samples = [_inputs(10 + i) for i in range(3)]
    batch = np.stack([s["x"] for s in samples])
    if how == "vmap":
        got = [np.asarray(v) for v in jax.jit(jax.vmap(model.fn))(batch)]
    else:
        result = tosa_jax.evaluate(model, batch, metric=None)
        got = [result.outputs[name] for name in graph.main.outputs]
    for i, s in enumerate(samples):
        want = reference(data, s, list(graph.main.outputs))
        for name, value in zip(graph.main.outputs, got, strict=True):
            np.testing.assert_array_equal(value[i], want[name])


def test_off_switch_and_cache_key(monkeypatch) -> None:
    b = unrolled_rnn(seed=4)
    graph = b.build(b.block.outputs)
    monkeypatch.setenv(reroll.ENV, "0")
    assert reroll.plan(graph.main) == ()
    model = tosa_jax.load(graph, cache=False)
    x = _inputs(4)["x"]
    assert "stablehlo.while" not in jax.jit(model.fn).lower(x).as_text()
    # the compile cache's keys (the JAX path's and the host path's) hold the setting
    off = model._disk_key((x,))
    host_off = hostexec.host_key("graph", [(x.shape, "int8")])
    monkeypatch.setenv(reroll.ENV, "1")
    assert off["roll"] == host_off["roll"] == "0"
    assert model._disk_key((x,)) != off
    assert hostexec.host_key("graph", [(x.shape, "int8")]) != host_off


def test_short_and_float_recurrences_stay_unrolled() -> None:
    b = unrolled_rnn(steps=reroll.MIN_STEPS - 2)
    assert reroll.plan(b.build(b.block.outputs).main) == ()
    # an FP32 GRU (ExecuTorch export): float steps run faster unrolled (module docstring)
    gru = tosa_jax.load(FIXTURES / "gru_fp32.tosa", cache=False)
    assert reroll.plan(gru.graph.main) == ()


def test_only_the_cpu_trace_rolls() -> None:
    """Another platform's trace (lowering_for) stays unrolled (tosa_jax.reroll: measured on
    an H200, the loop ran slower than the steps it replaced)."""
    from tosa_jax.lowering.numerics import lowering_for

    b = unrolled_rnn(seed=5)
    model = tosa_jax.load(b.build(b.block.outputs), cache=False)
    x = _inputs(5)["x"]
    for platform, loops in (("cpu", True), ("cuda", False)):
        with lowering_for(platform):
            fresh = jax.jit(lambda *a: model.fn(*a))  # (JAX caches traces by function)
            text = fresh.trace(x).lower(lowering_platforms=(platform,)).as_text()
        assert ("stablehlo.while" in text) == loops, platform


def test_a_loop_that_cannot_be_traced_runs_unrolled(reference, monkeypatch) -> None:
    """Rolling is a form, never a result: if a step cannot be traced in a loop, its steps run
    as the graph has them (with a warning), and the results are the reference model's."""
    from tosa_jax import executor

    def refuse(*args: object) -> None:
        raise TypeError("no loop here")

    monkeypatch.setattr(executor, "_run_loop", refuse)
    b = unrolled_rnn(seed=6, ahead=True)
    graph = b.build(b.block.outputs)
    assert reroll.plan(graph.main)
    with pytest.warns(UserWarning, match="run unrolled"):
        check_exact(reference, graph, inputs=_inputs(6))
