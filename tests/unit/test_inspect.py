"""tosa_jax.inspect: intermediates from one compiled call, per-operator comparison against the TOSA
reference model (the oracle for every integer tensor), another graph or a dump; first
divergence; quantization health; Model Explorer node data; the ``tosa-jax inspect`` command."""

from __future__ import annotations

import copy
import json

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaInputError, TosaLimitError, TosaUnsupportedError
from tosa_jax import inspect as ti
from tosa_jax.ir import Graph, Operator, Region, Tensor
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.networks import example_inputs, mixed

INT_FIXTURES = ["cnn_int8", "mlp_attn_int8"]


def _fixture(name: str) -> tuple[tosa_jax.Model, np.ndarray]:
    return tosa_jax.load(FIXTURES / f"{name}.tosa"), np.load(FIXTURES / f"{name}.input.npy")


def _samples(model: tosa_jax.Model, n: int, seed: int) -> np.ndarray:
    spec = model.inputs[0]
    return np.random.default_rng(seed).integers(-128, 128, (n, *spec.shape)).astype(np.int8)


@pytest.mark.parametrize("name,x64", [("cnn_int8", False), ("cnn_int8", True),
                                      ("mlp_attn_int8", False)])
def test_every_tensor_bit_exact_with_the_reference_model(reference, name: str, x64: bool) -> None:
    """The reference model runs a copy of the graph whose outputs are all its tensors; every
    one of them equals ours, constants included; the CLI-run reference agrees on the output."""
    with jax.enable_x64(x64):
        model, x = _fixture(name)
        r = ti.compare(model, x, against="reference", constants=True)
    assert r.all_exact and r.first_divergence is None, r.table()
    sites = ti.tensor_sites(model.graph, constants=True)
    assert [row.tensor for row in r.rows] == [s.name for s in sites]
    out = model.outputs[0].name
    want = reference(FIXTURES / f"{name}.tosa", {model.inputs[0].name: x}, [out])[out]
    got = model.intermediates(x, names=[out])[out]
    np.testing.assert_array_equal(got, want)


def test_one_call_batched_and_under_vmap(reference) -> None:
    model, _ = _fixture("cnn_int8")
    xs = _samples(model, 5, seed=3)
    batch = model.intermediates(xs, batched=True)
    one = [model.intermediates(x) for x in xs]
    assert set(batch) == set(one[0])
    for k, v in batch.items():
        np.testing.assert_array_equal(v, np.stack([o[k] for o in one]), err_msg=k)
    # every tensor, for every sample, against the reference model, sample by sample
    r = ti.compare(model, xs, against="reference", batched=True)
    assert r.all_exact and r.rows[0].samples == 5
    # the pure function composes with the caller's own jit(vmap)
    names = [s.name for s in ti.tensor_sites(model.graph)]
    fn = ti.intermediates_function(model.graph, names)
    got = jax.jit(jax.vmap(lambda x: fn({}, x)))(xs)
    for k in names:
        np.testing.assert_array_equal(np.asarray(got[k]), batch[k], err_msg=k)
    # one compiled executable per choice of tensors, reused
    model.intermediates(xs, batched=True)
    assert len(model._kept) == 2 and len(model._kept_exes) == 2


def _altered(graph: Graph, op_name: str) -> tuple[Graph, int, int]:
    """A copy of ``graph`` with one weight constant of the first ``op_name`` changed; returns it,
    the constant's operator index and the consumer's."""
    g = copy.deepcopy(graph)
    block = g.main
    producer = {o: i for i, op in enumerate(block.operators) for o in op.outputs}
    user = next(i for i, op in enumerate(block.operators) if op.op == op_name)
    weight = block.operators[user].inputs[1]
    t = block.tensors[weight]
    data = t.data.copy()
    data.flat[0] = 37 if data.flat[0] != 37 else -37
    t.data = data
    return g, producer[weight], user


def test_altered_constant_is_the_first_divergence(tmp_path) -> None:
    """The reference model's tensors of the original graph (a dump, as from a device) against
    tosa_jax running a graph with one altered weight: the divergence starts at that weight's
    operator (its CONST with constants=True, else the convolution that reads it)."""
    model, x = _fixture("cnn_int8")
    bad, const_index, conv_index = _altered(model.graph, "DEPTHWISE_CONV2D")
    dump = ti.reference_intermediates(model.graph, {model.inputs[0].name: x}, constants=True)
    path = tmp_path / "ref.npz"
    np.savez(path, **dump)
    altered = tosa_jax.load(bad)
    r = ti.compare(altered, x, against=path)
    first = r.first_divergence
    assert (first.index, first.op) == (conv_index, "DEPTHWISE_CONV2D"), r.table()
    assert all(row.exact for row in r.rows if row.index < conv_index)
    assert first.mismatches > 0 and first.max_abs_diff > 0
    rc = ti.compare(altered, x, against=path, constants=True)
    assert (rc.first_divergence.index, rc.first_divergence.op) == (const_index, "CONST")
    # the same against the original graph as a Model
    rm = ti.compare(altered, x, against=model)
    assert rm.first_divergence.index == conv_index
    # the HTML report marks it, the JSON names it
    page = ti.html_report(r)
    assert 'class="first"' in page and f"operator #{conv_index}" in page
    assert json.loads(r.to_json())["first_divergence"]["index"] == conv_index


def test_partitioned_model_gives_every_tensor(reference) -> None:
    from tosa_jax import hw_models

    graph = mixed()
    pg = hw_models.partition(graph, "ethos-u55-128")
    assert len(pg.partitions) >= 2 and pg.transfers
    pm = pg.model()
    inputs = example_inputs(graph)
    x = inputs[graph.main.inputs[0]]
    got = ti.intermediates(pm, x)
    whole = tosa_jax.load(graph).intermediates(x)
    assert set(got) == set(whole)
    crossing = {t.tensor for t in pg.transfers}
    assert crossing <= set(got)
    for k, v in whole.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    ref = ti.reference_intermediates(graph, inputs, list(got))
    for k, v in ref.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_kept_memory_is_checked_before_running(monkeypatch) -> None:
    model, _ = _fixture("cnn_int8")
    limited = tosa_jax.load(FIXTURES / "cnn_int8.tosa", max_bytes=model.declared_bytes + 4096)
    xs = _samples(model, 64, seed=1)

    def no_run(*a, **k):
        raise AssertionError("compiled or ran")

    monkeypatch.setattr(limited, "_intermediates_jit", no_run)
    with pytest.raises(TosaLimitError, match=r"keeping 29 tensors for 64 sample"):
        limited.intermediates(xs, batched=True)
    assert ti.kept_bytes(model.graph, [s.name for s in ti.tensor_sites(model.graph)], 64) \
        > limited.limits.max_bytes


def _cond_graph() -> Graph:
    """out = ADD(x, 1) inside a COND_IF branch, then NEGATE in the main block."""
    main = GraphBuilder()
    c = main.input("c", (1,), "BOOL")
    x = main.input("x", (4,), "INT32")
    main.block.tensors["o"] = Tensor("o", (4,), "INT32")
    main.block.operators.append(Operator("COND_IF", [c, x], ["o"],
                                         {"then_graph": "THEN", "else_graph": "ELSE"}))
    y = main.op("NEGATE", ["o", main.const([0], "INT32"), main.const([0], "INT32")], (4,),
                "INT32", name="y")
    main.block.outputs = [y]
    regions = [Region("main", [main.block])]
    for name, delta in (("THEN", 1), ("ELSE", -1)):
        b = GraphBuilder()
        b.block.name = name
        b.input("a", (4,), "INT32")
        b.block.outputs = [b.op("ADD", ["a", b.const([delta] * 4, "INT32")], (4,), "INT32",
                                name=f"inner_{name}")]
        regions.append(Region(name, [b.block]))
    return Graph((1, 0, 0, False), regions)


def test_control_flow_bodies_are_not_returned_and_say_so(reference) -> None:
    g = _cond_graph()
    model = tosa_jax.load(g)
    c, x = np.array([True]), np.arange(4, dtype=np.int32)
    t = model.intermediates(c, x)
    assert list(t) == ["c", "x", "o", "y"]
    np.testing.assert_array_equal(t["o"], x + 1)
    with pytest.raises(TosaUnsupportedError, match=r"COND_IF / WHILE_LOOP"):
        model.intermediates(c, x, names=["inner_THEN"])
    r = ti.compare(model, (c, x), against="reference")
    assert r.all_exact and [row.tensor for row in r.rows] == ["c", "x", "o", "y"]


def test_int8_against_fp32_export_matching_and_dequantizing() -> None:
    """ExecuTorch names tensors tosa_<op>_default_<k> per operator kind: across the INT8 and
    FP32 exports of one CNN only kinds with the same operators in the same order match."""
    mi, xq = _fixture("cnn_int8")
    mf, xf = _fixture("cnn_fp32")
    r = ti.compare(mi, xq, against=mf, against_inputs=xf)
    matched = [row.tensor for row in r.rows]
    assert "tosa_add_default" not in matched  # residual ADD (int8) vs hardswish +3 ADD (fp32)
    assert {"tosa_transpose_default", "tosa_conv2d_default", "tosa_conv2d_default_3",
            "tosa_depthwise_conv2d_default_1", "tosa_reshape_default"} <= set(matched)
    assert all(row.method == "correlation" for row in r.rows)  # no scale known yet
    # the input's zero point is the first convolution's input_zp; its scale from the two inputs
    q = ti.implied_qparams(mi.graph)
    zp = q["tosa_transpose_default"][1]
    assert zp == int(mi.graph.main.tensors["tosa_conv2d_default_input_zp"].data[0])
    m = xq != zp
    scale = float(np.median(xf[m] / (xq[m].astype(np.float64) - zp)))
    rs = ti.compare(mi, xq, against=mf, against_inputs=xf,
                    scales={mi.inputs[0].name: (scale, zp)})
    by = {row.tensor: row for row in rs.rows}
    row = by["tosa_transpose_default"]
    assert row.method == "dequantized" and row.sqnr_db > 30 and row.max_abs_diff <= scale
    # the first convolution's accumulator: s_in * s_w, s_w fitted from its int8 weights to the
    # FP32 graph's; after the hardswish TABLE the chain stops (correlation)
    conv = by["tosa_conv2d_default"]
    assert conv.method == "dequantized" and conv.sqnr_db > 30
    assert by["tosa_depthwise_conv2d_default"].method == "correlation"
    # a user's mapping pairs what names cannot
    rm = ti.compare(mi, xq, against=mf, against_inputs=xf,
                    mapping={"tosa_rescale_default_11": "tosa_conv2d_default_3"})
    assert "tosa_rescale_default_11" in {row.tensor for row in rm.rows}


def test_health_saturation_hand_derived() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 8), "INT8")
    y = b.op("REVERSE", [x], (1, 8), "INT8", name="y", axis=1)
    model = tosa_jax.load(b.build([y]))
    values = model.intermediates(np.array([[-128, 127, 0, 1, 127, -3, 5, 9]], np.int8))
    h = {row.name: row for row in ti.health(values, model.graph)}
    assert h["y"].saturation == pytest.approx(3 / 8)
    assert (h["y"].min, h["y"].max, h["y"].mean) == (-128, 127, pytest.approx(138 / 8))


def test_node_data_keys_are_model_explorer_node_ids(tmp_path) -> None:
    adapter = pytest.importorskip("tosa_adapter_model_explorer.main")
    from model_explorer.node_data_builder import NodeDataResult
    for name in ("cnn_int8", "mlp_attn_int8"):
        model, x = _fixture(name)
        r = ti.compare(model, x, against=model, constants=True)
        paths = ti.write_node_data(r, tmp_path / f"{name}.json",
                                   {"placement": {row.index: {"value": 0, "bgColor": "#8c8"}
                                                  for row in r.rows}})
        graphs = adapter.TosaFlatbufferAdapter().convert(str(FIXTURES / f"{name}.tosa"), {})
        ids = {n.id for g in graphs["graphs"] for n in g.nodes}
        for p in paths:
            data = json.loads(open(p).read())
            keys = set(data["main"]["results"])
            assert keys and keys <= ids, (p, sorted(keys - ids)[:5])
            for v in data["main"]["results"].values():  # Model Explorer's own result type
                assert isinstance(NodeDataResult(**v).value, (int, float))
        ops = {f"main/op{i}" for i in range(len(model.graph.main.operators))}
        assert ops <= ids  # every operator, constants included, has a node to colour


def test_cli_inspect(tmp_path, capsys) -> None:
    from tosa_jax.cli import main

    x = FIXTURES / "cnn_int8.input.npy"
    rc = main(["inspect", str(FIXTURES / "cnn_int8.tosa"), str(x), "--dump",
               str(tmp_path / "t.npz"), "--json", str(tmp_path / "r.json"), "--html",
               str(tmp_path / "r.html"), "--model-explorer", str(tmp_path / "me.json"),
               "--target", "ethos-u55-128"])
    out = capsys.readouterr().out
    assert rc == 0 and "all bit-exact" in out
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    with np.load(tmp_path / "t.npz") as z:
        assert list(z.files) == [s.name for s in ti.tensor_sites(model.graph)]
    cycles = json.loads((tmp_path / "me.cycles.json").read_text())["main"]["results"]
    assert cycles and all(k.startswith("main/op") for k in cycles)
    rc = main(["inspect", str(FIXTURES / "cnn_int8.tosa"), str(x), "--against",
               str(FIXTURES / "cnn_fp32.tosa"), "--against-inputs",
               str(FIXTURES / "cnn_fp32.input.npy")])
    out = capsys.readouterr().out
    assert rc == 0 and "tosa_conv2d_default_3" in out and "correlation" in out
    with pytest.raises(TosaInputError):
        ti.compare(model, np.load(x), against=tmp_path / "missing.npz")


def test_variables_read_from_the_state_and_left_unchanged() -> None:
    """y = concat(hist, x); hist = y[2:6] (EXT-VARIABLE): the kept values, derived by hand;
    the model's state is not advanced by looking inside."""
    from tosa_jax.ir import Block

    init = np.array([1, 2, 3, 4], np.int8)
    b = Block("main", inputs=["x"], outputs=["y"])
    b.tensors = {t.name: t for t in [
        Tensor("x", (2,), "INT8"), Tensor("hist", (4,), "INT8", data=init, variable=True),
        Tensor("read", (4,), "INT8"), Tensor("y", (6,), "INT8"), Tensor("new", (4,), "INT8"),
        Tensor("start", (1,), "SHAPE", data=np.array([2])),
        Tensor("size", (1,), "SHAPE", data=np.array([4]))]}
    b.operators = [Operator("VARIABLE", [], ["hist"]),
                   Operator("VARIABLE_READ", ["hist"], ["read"]),
                   Operator("CONCAT", ["read", "x"], ["y"], {"axis": 0}),
                   Operator("CONST_SHAPE", [], ["start"]), Operator("CONST_SHAPE", [], ["size"]),
                   Operator("SLICE", ["y", "start", "size"], ["new"]),
                   Operator("VARIABLE_WRITE", ["new"], ["hist"])]
    model = tosa_jax.load(Graph((1, 0, 0, False), [Region("main", [b])]))
    t = model.intermediates(np.array([9, 10], np.int8))
    assert {k: v.tolist() for k, v in t.items()} == {
        "x": [9, 10], "hist": [3, 4, 9, 10], "read": [1, 2, 3, 4], "y": [1, 2, 3, 4, 9, 10],
        "new": [3, 4, 9, 10]}
    np.testing.assert_array_equal(model.state["hist"], init)
