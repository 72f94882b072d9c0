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
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.networks import STEPS, WIDTH, unrolled_rnn
from tosa_jax.testing.reference import check_exact


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
