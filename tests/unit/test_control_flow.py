"""Control flow (EXT-CONTROLFLOW) against the reference model: COND_IF and WHILE_LOOP with run-time
and constant conditions, nested regions, INT48 lists, blocks named by region or by block, under
jit/vmap, and the ERROR_IFs refused at load time."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.executor import graph_function
from tosa_jax.ir import Graph, GraphBuilder, Operator, Region, Tensor
from tosa_jax.testing.reference import check_exact

RNG = np.random.default_rng(11)
Spec = tuple[str, tuple[int, ...], str]  # (name, shape, element type)


def _block(name: str, inputs: list[Spec]) -> GraphBuilder:
    """A builder for one block named ``name`` with these inputs."""
    b = GraphBuilder()
    b.block.name = name
    for n, shape, dtype in inputs:
        b.input(n, shape, dtype)
    return b


def _multi(b: GraphBuilder, op: str, inputs: list[str], outputs: list[Spec],
           **attrs: Any) -> list[str]:
    """Append an operator with several outputs (GraphBuilder.op makes one)."""
    for n, shape, dtype in outputs:
        b.block.tensors[n] = Tensor(n, tuple(shape), dtype)
    b.block.operators.append(Operator(op, list(inputs), [n for n, _, _ in outputs], attrs))
    return [n for n, _, _ in outputs]


def _graph(main: GraphBuilder, outputs: list[str],
           *subs: tuple[str, GraphBuilder, list[str]]) -> Graph:
    """Main block first, then one region per sub-block (region name, builder, outputs)."""
    main.block.outputs = list(outputs)
    regions = [Region("main", [main.block])]
    for region, b, outs in subs:
        b.block.outputs = list(outs)
        regions.append(Region(region, [b.block]))
    return Graph((1, 0, 0, False), regions)


def _check(reference, graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return check_exact(reference, graph, inputs=inputs)


def _primitives(model: tosa_jax.Model, inputs: dict[str, np.ndarray]) -> str:
    return str(jax.make_jaxpr(model.fn)(*(inputs[s.name] for s in model.inputs)))


def _if_graph(cond_shape: tuple[int, ...] = (1,), *, region_names: bool = False,
              const_cond: bool | None = None) -> Graph:
    """out = (x + y, reverse(z)) if c else (x - y, z): int32 and int8 lists, two outputs."""
    lists = [("x", (2, 3), "INT32"), ("y", (2, 3), "INT32"), ("z", (4,), "INT8")]
    then_b, else_b = _block("then_block", lists), _block("else_block", lists)
    then_out = [then_b.op("ADD", ["x", "y"], (2, 3), "INT32"),
                then_b.op("REVERSE", ["z"], (4,), "INT8", axis=0)]
    else_out = [else_b.op("SUB", ["x", "y"], (2, 3), "INT32"), "z"]  # an input passed through
    main = _block("main", ([] if const_cond is not None else [("c", cond_shape, "BOOL")]) + lists)
    cond = "c" if const_cond is None else main.const(np.full(cond_shape, const_cond), "BOOL")
    # TOSA 1.0 files name regions; older ones name blocks: both are looked up.
    then_name, else_name = ("THEN", "ELSE") if region_names else ("then_block", "else_block")
    outs = _multi(main, "COND_IF", [cond, "x", "y", "z"],
                  [("o1", (2, 3), "INT32"), ("o2", (4,), "INT8")],
                  then_graph=then_name, else_graph=else_name)
    return _graph(main, outs, ("THEN" if region_names else "then_block", then_b, then_out),
                  ("ELSE" if region_names else "else_block", else_b, else_out))


def _lists() -> dict[str, np.ndarray]:
    return {"x": RNG.integers(-1000, 1000, (2, 3)).astype(np.int32),
            "y": RNG.integers(-1000, 1000, (2, 3)).astype(np.int32),
            "z": RNG.integers(-128, 128, (4,)).astype(np.int8)}


@pytest.mark.parametrize("cond_shape", [(1,), ()])
@pytest.mark.parametrize("region_names", [False, True])
def test_cond_if_runtime_condition(reference, cond_shape, region_names) -> None:
    graph = _if_graph(cond_shape, region_names=region_names)
    for c in (True, False):
        _check(reference, graph, {"c": np.full(cond_shape, c), **_lists()})


@pytest.mark.parametrize("taken", [True, False])
def test_cond_if_constant_condition_is_decided_before_tracing(reference, taken) -> None:
    graph = _if_graph(const_cond=taken)
    inputs = _lists()
    _check(reference, graph, inputs)
    assert "cond[" not in _primitives(tosa_jax.load(graph), inputs)


def _loop_graph(*, constant: bool = False, nested: bool = False) -> Graph:
    """while (n > 0) { n -= 1; acc += step (or, nested, +3 on even n and -5 on odd n);
    z = reverse(z) }: an int32 counter, an int32 accumulator and an int8 tensor."""
    lists = [("n", (), "INT32"), ("acc", (3,), "INT32"), ("z", (2, 5), "INT8")]
    cond_b = _block("cond", lists)
    go = cond_b.op("GREATER", ["n", cond_b.const(0, "INT32")], (), "BOOL")
    body = _block("body", lists)
    n1 = body.op("SUB", ["n", body.const(1, "INT32")], (), "INT32")
    subs = [("cond", cond_b, [go])]
    if nested:
        odd = body.op("BITWISE_AND", ["n", body.const(1, "INT32")], (), "INT32")
        even = body.op("EQUAL", [odd, body.const(0, "INT32")], (), "BOOL")
        (acc,) = _multi(body, "COND_IF", [even, "acc"], [("acc1", (3,), "INT32")],
                        then_graph="even", else_graph="odd")
        for name, delta in (("even", 3), ("odd", -5)):
            b = _block(name, [("a", (3,), "INT32")])
            subs.append((name, b, [b.op("ADD", ["a", b.const([delta] * 3, "INT32")], (3,),
                                        "INT32")]))
    else:
        acc = body.op("ADD", ["acc", body.const([1, -2, 7], "INT32")], (3,), "INT32")
    z = body.op("REVERSE", ["z"], (2, 5), "INT8", axis=1)
    subs.insert(1, ("body", body, [n1, acc, z]))
    main = _block("main", [("x", (3,), "INT32")] if constant else lists)
    if constant:
        values = [main.const(4, "INT32"), main.const([10, 20, 30], "INT32"),
                  main.const(np.arange(10, dtype=np.int8).reshape(2, 5), "INT8")]
    else:
        values = ["n", "acc", "z"]
    outs = _multi(main, "WHILE_LOOP", values,
                  [("n_out", (), "INT32"), ("acc_out", (3,), "INT32"), ("z_out", (2, 5), "INT8")],
                  cond_graph="cond", body_graph="body")
    if constant:  # the loop's constant results meet a run-time input
        outs.append(main.op("ADD", [outs[1], "x"], (3,), "INT32", name="sum"))
    return _graph(main, outs, *subs)


@pytest.mark.parametrize("nested", [False, True])
def test_while_loop_runtime_count(reference, nested) -> None:
    graph = _loop_graph(nested=nested)
    for n in (0, 1, 5):
        inputs = {"n": np.array(n, np.int32), "acc": np.array([5, -5, 2**30], np.int32),
                  "z": RNG.integers(-128, 128, (2, 5)).astype(np.int8)}
        ref = _check(reference, graph, inputs)
        assert ref["n_out"] == 0
    assert "while[" in _primitives(tosa_jax.load(graph), inputs)


def test_while_loop_of_constants_is_evaluated_before_tracing(reference) -> None:
    graph = _loop_graph(constant=True)
    inputs = {"x": np.array([1, 2, 3], np.int32)}
    _check(reference, graph, inputs)
    assert "while[" not in _primitives(tosa_jax.load(graph), inputs)


def test_int48_lists_flow_through(reference) -> None:
    """INT48 values (Wide pairs inside tosa_jax) through both branches and around a loop."""
    lists = [("w", (3,), "INT48"), ("n", (), "INT32")]
    then_b, else_b = _block("then", lists), _block("else", lists)
    other = else_b.const([-(2**47), 2**47 - 1, 123456789012], "INT48")
    cond_b = _block("cond", lists)
    go = cond_b.op("GREATER", ["n", cond_b.const(0, "INT32")], (), "BOOL")
    body = _block("body", lists)
    n1 = body.op("SUB", ["n", body.const(1, "INT32")], (), "INT32")
    main = _block("main", [("c", (1,), "BOOL")] + lists)
    w1, _ = _multi(main, "COND_IF", ["c", "w", "n"], [("w1", (3,), "INT48"), ("n1", (), "INT32")],
                   then_graph="then", else_graph="else")
    outs = _multi(main, "WHILE_LOOP", [w1, "n"], [("w2", (3,), "INT48"), ("n2", (), "INT32")],
                  cond_graph="cond", body_graph="body")
    graph = _graph(main, outs, ("then", then_b, ["w", "n"]), ("else", else_b, [other, "n"]),
                   ("cond", cond_b, [go]), ("body", body, ["w", n1]))
    w = np.array([-(2**40) - 3, 2**45 + 17, -1], np.int64)
    for c in (True, False):
        _check(reference, graph, {"c": np.array([c]), "w": w, "n": np.array(3, np.int32)})


def test_jit_and_vmap_of_fn() -> None:
    """A run-time condition per sample under vmap (lax.cond becomes a select), inside jit."""
    model = tosa_jax.load(_if_graph())
    batch = {"c": np.array([[True], [False], [True]]),
             **{k: np.stack([v] * 3) for k, v in _lists().items()}}
    names = [s.name for s in model.inputs]
    got = jax.jit(jax.vmap(model.fn))(*(batch[n] for n in names))
    for i in range(3):
        one = model(*(batch[n][i] for n in names))
        for g, o in zip(got, one, strict=True):
            np.testing.assert_array_equal(np.asarray(g[i]), np.asarray(o))


def _broken(kind: str) -> Graph:
    graph = _if_graph()
    op = graph.main.operators[-1]
    if kind == "missing":
        op.attrs["else_graph"] = "nowhere"
    elif kind == "recursive":
        op.attrs["then_graph"] = "main"
    elif kind == "signature":
        # then_graph gives INT16 where the operator's output is INT8
        then_b = graph.block("then_block")
        then_b.tensors[then_b.outputs[1]].dtype = "INT16"
    elif kind == "condition":
        graph.main.tensors["c"].shape = (2,)
    return graph


@pytest.mark.parametrize("kind", ["missing", "recursive", "signature", "condition"])
def test_invalid_graphs_are_refused_at_load(kind) -> None:
    if kind in ("missing", "recursive"):  # structure: the executor cannot walk such a graph
        with pytest.raises(tosa_jax.TosaValidationError):
            graph_function(_broken(kind))
    with pytest.raises(tosa_jax.TosaValidationError):  # every ERROR_IF: profiles/
        tosa_jax.load(_broken(kind))


def test_while_loop_list_mismatch_is_refused() -> None:
    graph = _loop_graph()
    graph.block("body").tensors["z"].shape = (5, 2)  # body input differs from input_list
    with pytest.raises(tosa_jax.TosaValidationError, match="body_graph"):
        tosa_jax.load(graph)
