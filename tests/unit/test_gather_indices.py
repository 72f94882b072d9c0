"""A table lookup's indices in a kernel of their own on the CPU (numerics.gather_indices).

XLA CPU runs a loop fusion holding a gather element by element; the RESCALE (or group norm)
that computes TABLE's input, fused into it, then ran unvectorized too. Checked here: TABLE of
both kinds (int8: 256 entries; int16: 513 entries, interpolated) on a RESCALE's output large
enough to take the split, bit-identical to the reference model on the numpy program and on
XLA's executable; the CPU program holds the split and the GPU's form does not; the split
changes no value (every integer type, x64 off and on, under vmap).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder
from tosa_jax.lowering.numerics import OWN_KERNEL_ELEMENTS, gather_indices, lowering_for
from tosa_jax.testing import traced_primitives
from tosa_jax.testing.reference import check_exact_engines

SHAPE = (1, 16, 32, 16)  # 8,192 elements: above OWN_KERNEL_ELEMENTS


def lookup_graph(table_t: str) -> tuple[GraphBuilder, list[str]]:
    """x (int8) -> per-channel RESCALE to ``table_t`` -> TABLE: the lookup's input is computed
    by an elementwise chain, as a group norm's or a RESCALE's output is in a network."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.input("x", SHAPE, "INT8")
    channels = SHAPE[-1]
    mult = rng.integers(1 << 30, (1 << 31) - 1, channels)
    shift = rng.integers(30, 34, channels) if table_t == "INT8" else rng.integers(22, 26, channels)
    scaled = b.op("RESCALE", [x, b.const(mult.tolist(), "INT32"), b.const(shift.tolist(), "INT8"),
                              b.const([3], "INT8"), b.const([-7 if table_t == "INT8" else 0],
                                                            table_t)],
                  SHAPE, table_t, scale32=True, rounding_mode="DOUBLE_ROUND", per_channel=True,
                  input_unsigned=False, output_unsigned=False)
    if table_t == "INT8":
        table = b.const(rng.integers(-128, 128, 256).tolist(), "INT8")
        out_t = "INT8"
    else:  # slopes within int16, as TABLE REQUIREs
        table = b.const(np.cumsum(rng.integers(-300, 300, 513)).tolist(), "INT16")
        out_t = "INT32"
    return b, [b.op("TABLE", [scaled, table], SHAPE, out_t)]


@pytest.mark.parametrize("table_t", ["INT8", "INT16"])
def test_split_lookup_matches_reference(reference, table_t: str) -> None:
    b, outs = lookup_graph(table_t)
    x = np.random.default_rng(6).integers(-128, 128, SHAPE).astype(np.int8)
    x.reshape(-1)[:2] = [-128, 127]
    # the numpy program, XLA's quick tier and the optimized executable
    check_exact_engines(reference, b, outs, {"x": x})


def _primitives(graph: tosa_jax.Graph, platform: str) -> list[str]:
    return traced_primitives(graph, platform, np.zeros(SHAPE, np.int8))


@pytest.mark.parametrize("table_t", ["INT8", "INT16"])
def test_split_on_the_cpu_only(table_t: str) -> None:
    b, outs = lookup_graph(table_t)
    graph = b.build(outs)
    assert "reduce_window" in _primitives(graph, "cpu")
    assert "reduce_window" not in _primitives(graph, "cuda")
    # and XLA CPU keeps it: the kernel of an int8 lookup's gather no longer holds the
    # RESCALE's products (an int16 lookup's multiplies its slope by the fraction after it)
    model = tosa_jax.load(graph, cache=False)
    hlo = jax.jit(model.fn).lower(np.zeros(SHAPE, np.int8)).compile().as_text()
    assert "reduce-window(" in hlo
    kernels = [c for c in hlo.split("\n\n") if " gather(" in c]
    assert kernels
    if table_t == "INT8":
        assert not any(" multiply(" in c for c in kernels), kernels
        # the own kernel holds the int8 value, not its int32 index (a quarter of the bytes)
        assert "s8[1,16,32,16]{3,2,1,0} reduce-window(" in hlo, hlo


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint32])
def test_split_is_the_identity(dtype: type) -> None:
    info = np.iinfo(dtype)
    x = np.random.default_rng(0).integers(info.min, info.max, (2, 64, 80), endpoint=True,
                                          dtype=dtype)
    assert x[0].size >= OWN_KERNEL_ELEMENTS
    x.reshape(-1)[:2] = [info.min, info.max]
    for x64 in (False, True):
        with jax.enable_x64(x64), lowering_for("cpu"):
            outs = [jax.jit(gather_indices)(x), jax.jit(jax.vmap(gather_indices))(x)]
            assert "reduce_window" in str(jax.make_jaxpr(gather_indices)(x))
        for out in outs:
            assert out.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(out), x)
