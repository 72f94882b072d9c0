"""Variables (EXT-VARIABLE) against the reference model, over several invocations: the spec's
VARIABLE / VARIABLE_READ / VARIABLE_WRITE operators and tosa-tools' encoding (variable tensors read
and written by IDENTITY), variables written inside COND_IF and WHILE_LOOP blocks, and the Model's
state API (state, set_state, reset_state, fn_with_state).

The reference model runs one invocation per process and implements variables in tosa-tools'
encoding only, so it is driven step by step: each step's graph starts from the previous step's
final values (as its variables' initial values), and reads every variable again after the last
write, as an extra output.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.executor import graph_state_function
from tosa_jax.ir import Block, Graph, Operator, Region, Tensor

RNG = np.random.default_rng(5)
INIT = np.array([1, 2, 3, 4], np.int8)


def _t(name: str, shape: tuple[int, ...], dtype: str = "INT8", **kw) -> Tensor:
    return Tensor(name, shape, dtype, **kw)


def _ring(form: str) -> Graph:
    """A ring buffer of the last 4 int8 values: y = concat(hist, x); hist = y[2:6].

    ``form`` "operators": the spec's operators; "identity": tosa-tools' encoding. Outputs: y,
    and ``final``, the variable read after the write.
    """
    b = Block("main", inputs=["x"], outputs=["y", "final"])
    var = _t("hist_var", (4,), data=INIT, variable=True, variable_name="hist")
    b.tensors = {t.name: t for t in [
        _t("x", (2,)), var, _t("read", (4,)), _t("y", (6,)), _t("new", (4,)), _t("final", (4,)),
        _t("start", (1,), "SHAPE", data=np.array([2])),
        _t("size", (1,), "SHAPE", data=np.array([4]))]}
    read, write = ("VARIABLE_READ", "VARIABLE_WRITE") if form == "operators" else ("IDENTITY",) * 2
    b.operators = ([Operator("VARIABLE", [], ["hist_var"])] if form == "operators" else []) + [
        Operator(read, ["hist_var"], ["read"]),
        Operator("CONCAT", ["read", "x"], ["y"], {"axis": 0}),
        Operator("CONST_SHAPE", [], ["start"]),
        Operator("CONST_SHAPE", [], ["size"]),
        Operator("SLICE", ["y", "start", "size"], ["new"]),
        Operator(write, ["new"], ["hist_var"]),
        Operator(read, ["hist_var"], ["final"]),
    ]
    return Graph((1, 0, 0, False), [Region("main", [b])])


def _as_identities(graph: Graph) -> Graph:
    """tosa-tools' encoding of the same graph (what the reference model runs): VARIABLE dropped
    (the variable tensor declares the variable), VARIABLE_READ/WRITE as IDENTITY."""
    graph = copy.deepcopy(graph)
    for region in graph.regions:
        for block in region.blocks:
            block.operators = [
                Operator("IDENTITY", op.inputs, op.outputs)
                if op.op in ("VARIABLE_READ", "VARIABLE_WRITE") else op
                for op in block.operators if op.op != "VARIABLE"]
    return graph


def _starting_from(graph: Graph, values: dict[str, np.ndarray]) -> Graph:
    """The graph with its variables' initial values replaced (the reference model's next step)."""
    graph = copy.deepcopy(graph)
    for region in graph.regions:
        for block in region.blocks:
            for t in block.tensors.values():
                if t.variable and t.data is not None:
                    t.data = np.asarray(values[t.variable_key])
    return graph


def _steps(reference, graph: Graph, steps: list[dict[str, np.ndarray]],
           finals: dict[str, str]) -> None:
    """Invoke one Model ``len(steps)`` times (x64 off and on) and the reference model step by
    step; ``finals`` maps each variable to the output that reads it at the end."""
    oracle, values = _as_identities(graph), None
    expected = []
    for inputs in steps:
        g = oracle if values is None else _starting_from(oracle, values)
        ref = reference(tosa_jax.write(g), inputs, graph.main.outputs)
        values = {var: ref[out] for var, out in finals.items()}
        expected.append((ref, values))
    for x64 in (False, True):
        with jax.enable_x64(x64):
            model = tosa_jax.load(tosa_jax.write(graph))
            for inputs, (ref, values) in zip(steps, expected, strict=True):
                got = model.run(inputs)
                for name in graph.main.outputs:
                    assert got[name].dtype == ref[name].dtype
                    np.testing.assert_array_equal(got[name], ref[name], err_msg=f"x64={x64}")
                assert model.state.keys() == values.keys()
                for var, value in values.items():
                    np.testing.assert_array_equal(model.state[var], value)


def _x(*values: int) -> dict[str, np.ndarray]:
    return {"x": np.array(values, np.int8)}


@pytest.mark.parametrize("form", ["operators", "identity"])
def test_state_persists_across_calls(reference, form) -> None:
    _steps(reference, _ring(form), [_x(5, 6), _x(-7, 8), _x(127, -128)], {"hist": "final"})


def test_state_api() -> None:
    model = tosa_jax.load(_ring("operators"))
    assert model.variables == [tosa_jax.TensorSpec("hist", (4,), "INT8")]
    np.testing.assert_array_equal(model.state["hist"], INIT)
    y = model(np.array([9, 10], np.int8))[0]
    np.testing.assert_array_equal(y, [1, 2, 3, 4, 9, 10])
    np.testing.assert_array_equal(model.state["hist"], [3, 4, 9, 10])
    model.set_state({"hist": np.array([0, 0, 0, -1], np.int8)})
    np.testing.assert_array_equal(model(np.array([1, 1], np.int8))[0], [0, 0, 0, -1, 1, 1])
    model.reset_state()
    np.testing.assert_array_equal(model.state["hist"], INIT)
    for bad in ({"nope": INIT}, {"hist": INIT[:3]}, {"hist": INIT.astype(np.int16)}):
        with pytest.raises(tosa_jax.TosaInputError):
            model.set_state(bad)
    with pytest.raises(tosa_jax.TosaInputError):  # a refused call leaves the state as it was
        model(np.array([1, 2, 3], np.int8))
    np.testing.assert_array_equal(model.state["hist"], INIT)


def test_fn_with_state_is_pure() -> None:
    model = tosa_jax.load(_ring("identity"))
    step = jax.jit(model.fn_with_state)
    x = np.array([7, 8], np.int8)
    (y, final), state = step({}, x)  # variables left out start from their initial values
    np.testing.assert_array_equal(y, [1, 2, 3, 4, 7, 8])
    (y, final), state = step(state, x)
    np.testing.assert_array_equal(y, [3, 4, 7, 8, 7, 8])
    np.testing.assert_array_equal(state["hist"], final)
    np.testing.assert_array_equal(model.state["hist"], INIT)  # the Model's own state untouched
    with pytest.raises(tosa_jax.TosaInputError):
        model.fn_with_state({"nope": INIT}, x)
    with pytest.raises(tosa_jax.TosaUnsupportedError, match="fn_with_state"):
        model.fn(x)
    assert tosa_jax.load(_as_identities(_ring("operators"))).variables == model.variables


def _in_control_flow() -> Graph:
    """A counter variable ``count`` (int32) incremented by a WHILE_LOOP body n times, and a
    variable ``last`` (int8) that a COND_IF's then-branch overwrites with x."""
    def var(name: str, shape: tuple[int, ...], dtype: str, data=None) -> Tensor:
        return _t(name, shape, dtype, data=data, variable=True)

    main = Block("main", inputs=["c", "x", "n"], outputs=["y", "m", "count_out", "last_out"])
    main.tensors = {t.name: t for t in [
        _t("c", (1,), "BOOL"), _t("x", (3,)), _t("n", (), "INT32"), _t("y", (3,)),
        _t("m", (), "INT32"), _t("count_out", (), "INT32"), _t("last_out", (3,)),
        var("count", (), "INT32", np.array(100, np.int32)),
        var("last", (3,), "INT8", np.array([0, 0, 0], np.int8))]}
    main.operators = [
        Operator("COND_IF", ["c", "x"], ["y"], {"then_graph": "THEN", "else_graph": "ELSE"}),
        Operator("WHILE_LOOP", ["n"], ["m"], {"cond_graph": "COND", "body_graph": "BODY"}),
        Operator("IDENTITY", ["count"], ["count_out"]),
        Operator("IDENTITY", ["last"], ["last_out"]),
    ]
    then_b = Block("THEN", inputs=["x"], outputs=["old"])
    then_b.tensors = {t.name: t for t in [_t("x", (3,)), _t("old", (3,)),
                                          var("last", (3,), "INT8")]}
    then_b.operators = [Operator("IDENTITY", ["last"], ["old"]),
                        Operator("IDENTITY", ["x"], ["last"])]
    else_b = Block("ELSE", inputs=["x"], outputs=["x"])
    else_b.tensors = {"x": _t("x", (3,))}
    cond_b = Block("COND", inputs=["n"], outputs=["go"])
    cond_b.tensors = {t.name: t for t in [_t("n", (), "INT32"), _t("zero", (), "INT32",
                      data=np.array(0, np.int32)), _t("go", (), "BOOL")]}
    cond_b.operators = [Operator("CONST", [], ["zero"]), Operator("GREATER", ["n", "zero"], ["go"])]
    body = Block("BODY", inputs=["n"], outputs=["n1"])
    body.tensors = {t.name: t for t in [
        _t("n", (), "INT32"), _t("n1", (), "INT32"), _t("one", (), "INT32",
                                                       data=np.array(1, np.int32)),
        _t("count1", (), "INT32"), var("count", (), "INT32")]}
    body.operators = [Operator("CONST", [], ["one"]), Operator("SUB", ["n", "one"], ["n1"]),
                      Operator("ADD", ["count", "one"], ["count1"]),
                      Operator("IDENTITY", ["count1"], ["count"])]
    return Graph((1, 0, 0, False), [Region("main", [main]), Region("THEN", [then_b]),
                                    Region("ELSE", [else_b]), Region("COND", [cond_b]),
                                    Region("BODY", [body])])


def test_variables_written_inside_control_flow(reference) -> None:
    def step(c: bool, n: int) -> dict[str, np.ndarray]:
        return {"c": np.array([c]), "x": RNG.integers(-128, 128, (3,)).astype(np.int8),
                "n": np.array(n, np.int32)}

    _steps(reference, _in_control_flow(), [step(True, 3), step(False, 0), step(True, 2)],
           {"count": "count_out", "last": "last_out"})


def test_conflicting_declarations_are_refused() -> None:
    graph = _in_control_flow()
    graph.block("BODY").tensors["count"].dtype = "INT16"
    with pytest.raises(tosa_jax.TosaValidationError, match="variable 'count'"):
        graph_state_function(graph)  # the executor's own check
    with pytest.raises(tosa_jax.TosaValidationError):
        tosa_jax.load(graph)


def test_variable_without_initial_value_starts_at_zero() -> None:
    graph = _ring("operators")
    graph.main.tensors["hist_var"].data = None
    model = tosa_jax.load(graph)
    np.testing.assert_array_equal(model.state["hist"], np.zeros(4, np.int8))
    np.testing.assert_array_equal(model(np.array([1, 2], np.int8))[1], [0, 0, 1, 2])
