"""Shared integer values are computed once (executor + numerics.fusion_boundary).

XLA CPU copies a cheap elementwise producer into every fusion that reads it; along an unrolled
recurrence (the int8 LSTM's cell state) the copies compound and the optimized program grows with
the square of the number of steps: every load from the compile cache rebuilds it, and every call
recomputes it. Checked here on such a recurrence: the optimized instruction count grows linearly,
and the results stay bit-identical to the reference model (x64 off and on); also where the block
carries its transposes as layouts (tosa_jax.layout), whose operators take another path through
the executor (it once skipped the boundary there: unet_int8's group norms recomputed).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tosa_jax
from tosa_jax import layout, reroll
from tosa_jax.ir import GraphBuilder
from tosa_jax.lowering.numerics import fusion_boundary
from tosa_jax.testing.reference import check_exact

SHAPE = (1, 64)


def _rescale(b: GraphBuilder, x: str, in_t: str, out_t: str, mult: int, shift: int,
             in_zp: int = 0, shape: tuple[int, ...] = SHAPE) -> str:
    return b.op("RESCALE", [x, b.const([mult], "INT32"), b.const([shift], "INT8"),
                            b.const([in_zp], in_t if in_t != "INT32" else "INT32"),
                            b.const([0], out_t if out_t != "INT32" else "INT32")],
                shape, out_t, scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
                input_unsigned=False, output_unsigned=False)


def recurrence(steps: int, transposed: bool = False) -> tuple[GraphBuilder, list[str]]:
    """s_t = rescale(rescale(s_{t-1}) + rescale(x_t)), h_t = rescale(s_t): s_t is read by the
    next step and by h_t, as an LSTM's cell state is. ``transposed``: every input transposed
    on the way in and every output back on the way out, so that the executor carries the whole
    recurrence in the transposed layout (layout.plan takes every TRANSPOSE)."""
    b = GraphBuilder()
    shape = (8, 8) if transposed else SHAPE

    def read(name: str) -> str:
        x = b.input(name, shape, "INT8")
        return b.op("TRANSPOSE", [x], shape, "INT8", perms=[1, 0]) if transposed else x

    s = read("s0")
    outs = []
    for t in range(steps):
        x = read(f"x{t}")
        a = _rescale(b, s, "INT8", "INT32", 1518500250, 30, in_zp=-3, shape=shape)
        c = b.op("ADD", [a, _rescale(b, x, "INT8", "INT32", 1246039524, 30, in_zp=5,
                                     shape=shape)], shape, "INT32")
        s = _rescale(b, c, "INT32", "INT8", 1732153235, 31, shape=shape)
        h = _rescale(b, s, "INT8", "INT8", 1860396431, 31, in_zp=1, shape=shape)
        outs.append(b.op("TRANSPOSE", [h], shape, "INT8", perms=[1, 0]) if transposed else h)
    return b, outs


def _hlo_instructions(graph: tosa_jax.Graph) -> int:
    model = tosa_jax.load(graph, cache=False)
    xs = [np.zeros(s.shape, s.np_dtype) for s in model.inputs]
    text = jax.jit(model.fn).lower(*xs).compile().as_text()
    return sum(1 for line in text.splitlines()
               if " = " in line and not line.rstrip().endswith("{"))


@pytest.fixture
def unrolled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps as they are: rolled into one loop (tosa_jax.reroll) the recurrence would
    compile linearly whatever the boundaries did."""
    monkeypatch.setenv(reroll.ENV, "0")


@pytest.mark.usefixtures("unrolled")
@pytest.mark.parametrize("transposed", [False, True])
def test_recurrence_compiles_linearly(transposed: bool) -> None:
    def instructions(steps: int) -> int:
        b, outs = recurrence(steps, transposed)
        graph = b.build(outs)
        if transposed:  # the form this case is about
            assert len(layout.plan(graph.main)) == 2 * steps + 1
        return _hlo_instructions(graph)

    small, large = instructions(6), instructions(12)
    # quadratic growth (every step's fusion recomputing the chain from the start) gives ~4x
    assert large < 2.4 * small, (small, large)


@pytest.mark.usefixtures("unrolled")
@pytest.mark.parametrize("transposed", [False, True])
def test_recurrence_matches_reference(reference, transposed: bool) -> None:
    b, outs = recurrence(5, transposed)
    rng = np.random.default_rng(3)
    shape = (8, 8) if transposed else SHAPE
    inputs = {name: rng.integers(-128, 128, shape).astype(np.int8)
              for name in ["s0"] + [f"x{t}" for t in range(5)]}
    check_exact(reference, b, outs, inputs)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint32])
def test_boundary_is_the_identity(dtype: type) -> None:
    info = np.iinfo(dtype)
    x = np.random.default_rng(0).integers(info.min, info.max, (3, 5, 7), endpoint=True,
                                          dtype=dtype)
    x.reshape(-1)[:2] = [info.min, info.max]
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = jax.jit(fusion_boundary)(x)
            batched = jax.jit(jax.vmap(fusion_boundary))(x)
        for out in (got, batched):
            assert out.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(out), x)


def _computations(text: str) -> list[str]:
    """The computations of an optimized HLO module's text, each as its lines."""
    return [c for c in text.split("\n\n") if "{" in c]


def test_boundary_is_a_kernel_of_its_own() -> None:
    """On the CPU the boundary's window is a kernel of its own: its producers (here a clamp and
    a conversion) form their own loop fusion, which XLA vectorizes, where a reduction was fused
    with them into a loop computing the chain element by element (unet_int8 batch 1 -6%). Not
    a library fusion either: XLA CPU gives an int8 max-reduction to YNNPACK as a fusion of its
    own (a kernel pipeline built on its first run)."""
    x = np.arange(2 * 16 * 16 * 32, dtype=np.int32).reshape(2, 16, 16, 32)

    def f(v: jax.Array) -> jax.Array:
        shared = fusion_boundary(jnp.clip(v * 7, -128, 127).astype(np.int8))
        return shared.astype(np.int32) * 3 + jnp.sum(shared.astype(np.int32), -1, keepdims=True)

    text = jax.jit(f).lower(x).compile().as_text()
    assert "__ynn_fusion" not in text
    windows = [c for c in _computations(text) if " reduce-window(" in c]
    assert windows and not any(" clamp(" in c for c in windows), text
    assert any(" clamp(" in c for c in _computations(text)), text
    np.testing.assert_array_equal(
        np.asarray(jax.jit(f)(x)),
        (c := np.clip(x * 7, -128, 127)) * 3 + c.sum(-1, keepdims=True))


def _broadcast_graph(big: tuple[int, ...]) -> tuple[GraphBuilder, list[str]]:
    """A per-channel value computed by a chain of RESCALEs (a group norm's statistics) and
    subtracted from a larger tensor, as a group norm centres its groups."""
    b = GraphBuilder()
    small = (1, 1, 1, big[-1])
    m = b.input("m", small, "INT8")
    x = b.input("x", big, "INT8")
    stat = _rescale(b, _rescale(b, m, "INT8", "INT32", 1518500250, 30, in_zp=-3, shape=small),
                    "INT32", "INT32", 1732153235, 33, shape=small)
    centred = b.op("SUB", [_rescale(b, x, "INT8", "INT32", 1246039524, 30, in_zp=5,
                                    shape=big), stat], big, "INT32")
    return b, [_rescale(b, centred, "INT32", "INT8", 1860396431, 31, shape=big)]


@pytest.mark.parametrize("big", [(1, 32, 32, 16), (1, 4, 4, 16)])
def test_broadcast_value_is_computed_once(reference, big: tuple[int, ...]) -> None:
    """A value broadcast over a result BROADCAST_RATIO times larger (and of OWN_KERNEL_ELEMENTS
    or more) is computed in a kernel of its own on the CPU, not once per element of the
    result; a small result keeps it fused. Exact against the reference model either way."""
    b, outs = _broadcast_graph(big)
    rng = np.random.default_rng(5)
    inputs = {"m": rng.integers(-128, 128, (1, 1, 1, big[-1])).astype(np.int8),
              "x": rng.integers(-128, 128, big).astype(np.int8)}
    check_exact(reference, b, outs, inputs)
    model = tosa_jax.load(b.build(outs), cache=False)
    text = jax.jit(model.fn).lower(*(inputs[s.name] for s in model.inputs)).compile().as_text()
    apart = f"s32[1,1,1,{big[-1]}]{{3,2,1,0}} reduce-window(" in text
    assert apart == (math.prod(big) >= 64 * big[-1] and math.prod(big) >= 4096), text
