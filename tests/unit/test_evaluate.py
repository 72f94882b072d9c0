"""tosa_jax.evaluate / ``tosa-jax eval``: a batch-1 graph over a dataset, in vmapped batches
sharded over devices, bit-identical to single calls and to the reference model (INT graphs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaInputError
from tosa_jax.testing import FIXTURES

INT_NETWORKS = ["cnn_int8", "mlp_attn_int8"]


def _samples(model: tosa_jax.Model, n: int, seed: int) -> np.ndarray:
    """n seeded int8 samples, stacked without the graph's batch-1 axis."""
    spec = model.inputs[0]
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (n, *spec.shape[1:])).astype(spec.np_dtype)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name", INT_NETWORKS)
def test_batched_equals_one_by_one_and_reference(reference, name: str, x64: bool) -> None:
    path = FIXTURES / f"{name}.tosa"
    with jax.enable_x64(x64):
        model = tosa_jax.load(path)
        xs = _samples(model, 21, seed=1)  # 21 = two full batches of 8 and a padded one
        result = tosa_jax.evaluate(model, xs, batch_size=8, progress=False)
        out = model.outputs[0]
        got = result.outputs[out.name]
        assert got.shape == (21, *out.shape[1:]) and got.dtype == out.np_dtype
        one_by_one = np.stack([np.asarray(model(x[None]))[0] for x in xs])
        np.testing.assert_array_equal(got, one_by_one)
    # and the oracle, on a few samples (the reference model runs one sample per process)
    for i in (0, 7, 20):
        want = reference(path, {model.inputs[0].name: xs[i][None]}, [out.name])[out.name]
        np.testing.assert_array_equal(got[i][None], want, err_msg=f"{name} sample {i}")


def test_unsqueezed_inputs_metric_and_predictions() -> None:
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    xs = _samples(model, 10, seed=2)
    labels = np.arange(10) % 3
    a = tosa_jax.evaluate(model, xs, labels=labels, batch_size=4, progress=False)
    b = tosa_jax.evaluate(model, xs[:, None], labels=labels, batch_size=64, progress=False)
    name = model.outputs[0].name
    assert a.outputs[name].shape == (10, 10) and b.outputs[name].shape == (10, 1, 10)
    np.testing.assert_array_equal(a.outputs[name], b.outputs[name][:, 0])
    # predictions are the arg-max of each sample's scores, the metric counts label matches
    np.testing.assert_array_equal(a.predictions, a.outputs[name].argmax(axis=1))
    assert a.metric == pytest.approx(np.mean(a.predictions == labels))
    custom = tosa_jax.evaluate(model, xs, labels=labels, progress=False,
                               metric=lambda p, y: float(np.sum(p == y)))
    assert custom.metric == np.sum(a.predictions == labels)


def _two_input_graph() -> tosa_jax.Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 4), "INT16")
    y = b.input("y", (1, 4), "INT16")
    s = b.op("ADD", [b.op("MUL", [x, y, b.const([0], "INT8")], (1, 4), "INT32"),
                     b.op("CAST", [x], (1, 4), "INT32")], (1, 4), "INT32")
    return b.build([s])


def test_several_inputs_by_name_and_order(reference) -> None:
    graph = _two_input_graph()
    rng = np.random.default_rng(3)
    x = rng.integers(-2**15, 2**15, (5, 4)).astype(np.int16)
    y = rng.integers(-2**15, 2**15, (5, 4)).astype(np.int16)
    by_name = tosa_jax.evaluate(graph, {"x": x, "y": y}, metric=None, progress=False)
    in_order = tosa_jax.evaluate(graph, (x, y), progress=False)
    out = graph.main.outputs[0]
    np.testing.assert_array_equal(by_name.outputs[out], in_order.outputs[out])
    data = tosa_jax.write(graph)
    for i in range(5):
        want = reference(data, {"x": x[i][None], "y": y[i][None]}, [out])[out]
        np.testing.assert_array_equal(by_name.outputs[out][i][None], want)


def test_bad_input_is_refused_clearly() -> None:
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    xs = _samples(model, 4, seed=4)
    with pytest.raises(TosaInputError, match="expected samples of shape"):
        tosa_jax.evaluate(model, xs[:, :, :5])
    with pytest.raises(TosaInputError, match="expected INT8"):
        tosa_jax.evaluate(model, xs.astype(np.int16))
    with pytest.raises(TosaInputError, match="3 labels for 4 samples"):
        tosa_jax.evaluate(model, xs, labels=[0, 1, 2])
    with pytest.raises(TosaInputError, match="unknown metric"):
        tosa_jax.evaluate(model, xs, metric="f1")
    with pytest.raises(TosaInputError, match="at least one sample"):
        tosa_jax.evaluate(model, xs[:0])
    with pytest.raises(TosaInputError, match="takes 2 inputs"):
        tosa_jax.evaluate(_two_input_graph(), xs)
    with pytest.raises(TosaInputError, match="another input has"):
        tosa_jax.evaluate(_two_input_graph(), (np.zeros((3, 4), np.int16),
                                               np.zeros((2, 4), np.int16)))


def test_stateful_graph_is_refused() -> None:
    from tosa_jax.ir import Block, Graph, Operator, Region, Tensor

    init = np.array([1, 2], np.int8)
    b = Block("main", inputs=["x"], outputs=["y"])
    b.tensors = {"x": Tensor("x", (2,), "INT8"), "y": Tensor("y", (2,), "INT8"),
                 "v": Tensor("v", (2,), "INT8", data=init, variable=True, variable_name="acc")}
    b.operators = [Operator("VARIABLE", [], ["v"]), Operator("VARIABLE_READ", ["v"], ["y"]),
                   Operator("VARIABLE_WRITE", ["x"], ["v"])]
    model = tosa_jax.load(Graph((1, 0, 0, False), [Region("main", [b])]))
    assert model.variables
    with pytest.raises(TosaInputError, match="variables"):
        tosa_jax.evaluate(model, np.zeros((3, 2), np.int8))


SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    import numpy as np
    import tosa_jax
    model = tosa_jax.load(sys.argv[1])
    xs = np.load(sys.argv[2])
    r4 = tosa_jax.evaluate(model, xs, batch_size=12, progress=False)
    r1 = tosa_jax.evaluate(model, xs, batch_size=12, devices=jax.devices()[:1], progress=False)
    name = model.outputs[0].name
    single = np.stack([np.asarray(model(x[None]))[0] for x in xs])
    print(json.dumps({"devices": r4.devices, "batch": r4.batch_size,
                      "same_as_one_device": bool(np.array_equal(r4.outputs[name],
                                                                r1.outputs[name])),
                      "same_as_single_calls": bool(np.array_equal(r4.outputs[name], single))}))
""")


@pytest.mark.parametrize("name", INT_NETWORKS)
def test_sharded_over_four_host_devices(tmp_path, name: str) -> None:
    model = tosa_jax.load(FIXTURES / f"{name}.tosa")
    np.save(tmp_path / "xs.npy", _samples(model, 30, seed=5))
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(FIXTURES / f"{name}.tosa"),
                           str(tmp_path / "xs.npy")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"devices": 4, "batch": 12, "same_as_one_device": True,
                   "same_as_single_calls": True}


@pytest.mark.parametrize("host_devices", [2, None])
def test_cli_eval(tmp_path, host_devices: int | None) -> None:
    """``--host-devices N``, or by default one CPU device per usable core."""
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    xs = _samples(model, 9, seed=6)
    labels = np.arange(9) % 10
    np.save(tmp_path / "xs.npy", xs)
    np.save(tmp_path / "y.npy", labels)
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    flag = ["--host-devices", str(host_devices)] if host_devices else []
    proc = subprocess.run([sys.executable, "-m", "tosa_jax.cli", "eval",
                           str(FIXTURES / "cnn_int8.tosa"), str(tmp_path / "xs.npy"),
                           "--labels", str(tmp_path / "y.npy"), "-b", "4", *flag,
                           "-q", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    devices = host_devices or len(os.sched_getaffinity(0))
    batch = -(-4 // devices) * devices
    assert f"9 samples on {devices} device(s), batch {batch}" in proc.stdout
    out = np.load(tmp_path / "out" / f"{model.outputs[0].name}.npy")
    single = np.stack([np.asarray(model(x[None]))[0] for x in xs])
    np.testing.assert_array_equal(out, single)
    accuracy = float(np.mean(single.argmax(axis=1) == labels))
    assert f"accuracy: {accuracy:.4f}" in proc.stdout


def test_second_call_neither_traces_nor_compiles() -> None:
    """The compiled batched function is kept on the model: a second evaluate() of the same
    signature runs it again (no trace, no XLA compilation: JAX reports both through
    jax.monitoring), with the same result; another batch shape compiles its own."""
    from jax._src import monitoring
    from jax._src.dispatch import BACKEND_COMPILE_EVENT, JAXPR_TRACE_EVENT

    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    xs = _samples(model, 12, seed=7)
    events: list[str] = []

    def listen(event: str, duration: float, **_: object) -> None:
        events.append(event)

    monitoring.register_event_duration_secs_listener(listen)
    try:
        first = tosa_jax.evaluate(model, xs, batch_size=8, progress=False)
        assert JAXPR_TRACE_EVENT in events and BACKEND_COMPILE_EVENT in events, events
        events.clear()
        again = tosa_jax.evaluate(model, xs, batch_size=8, progress=False)
        assert JAXPR_TRACE_EVENT not in events and BACKEND_COMPILE_EVENT not in events, events
        name = model.outputs[0].name
        np.testing.assert_array_equal(again.outputs[name], first.outputs[name])
        tosa_jax.evaluate(model, xs, batch_size=4, progress=False)  # a new batch shape
        assert JAXPR_TRACE_EVENT in events and BACKEND_COMPILE_EVENT in events
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert len(model._evaluate_cache) == 2


def test_auto_chunk_follows_the_largest_activation() -> None:
    """On CPU a graph with small activations runs each device's whole share as one vmap, one
    with large activations in chunks of DEFAULT_CHUNK, one with a sample's largest activation of
    ONE_SAMPLE_BYTES or more, or float work on Eigen, one sample at a time where every core has a
    device (else in chunks, which XLA shares between the cores); on a GPU as many
    samples as keep a chunk's largest activation within ACCEL_CHUNK_BYTES; integer outputs do
    not depend on it."""
    from tosa_jax.evaluate import (
        ACCEL_CHUNK_BYTES,
        CHUNK_CACHE_BYTES,
        DEFAULT_CHUNK,
        ONE_SAMPLE_BYTES,
        auto_chunk,
        usable_cores,
    )

    def negate(shape: tuple[int, ...]) -> tosa_jax.Model:
        b = GraphBuilder()
        x = b.input("x", shape, "INT8")
        return tosa_jax.load(b.build([b.op("NEGATE", [x, b.const([0], "INT8"),
                                                      b.const([0], "INT8")], shape, "INT8")]))

    assert auto_chunk(negate((1, 1024))) == CHUNK_CACHE_BYTES // 1024
    assert auto_chunk(negate((1, ONE_SAMPLE_BYTES // 2))) == DEFAULT_CHUNK  # (INT8: a byte each)
    cores = usable_cores()
    assert auto_chunk(negate((1, ONE_SAMPLE_BYTES)), "cpu", cores) == 1
    if cores > 1:  # fewer devices than cores: chunks, which XLA splits across the cores
        assert auto_chunk(negate((1, ONE_SAMPLE_BYTES)), "cpu", 1) == DEFAULT_CHUNK
    assert auto_chunk(negate((1, ONE_SAMPLE_BYTES)), "gpu") == ACCEL_CHUNK_BYTES // ONE_SAMPLE_BYTES
    assert auto_chunk(negate((1, 1024)), "gpu") == ACCEL_CHUNK_BYTES // 1024
    # a float graph of LARGE_FLOAT_MACS multiply-adds or more: one sample at a time
    from tosa_jax.model import LARGE_FLOAT_MACS

    def matmul(k: int) -> tosa_jax.Model:
        b = GraphBuilder()
        a = b.input("a", (1, 64, k), "FP32")
        w = b.const(np.ones((1, k, 64), np.float32), "FP32")
        zp = b.const([0.0], "FP32")
        return tosa_jax.load(b.build([b.op("MATMUL", [a, w, zp, zp], (1, 64, 64), "FP32")]))

    small, large = matmul(64), matmul(-(-LARGE_FLOAT_MACS // 4096))
    assert small.float_macs < LARGE_FLOAT_MACS <= large.float_macs
    assert auto_chunk(small, "cpu", cores) > 1 and auto_chunk(large, "cpu", cores) == 1
    assert auto_chunk(large, "gpu", cores) > 1
    if cores > 1:
        assert auto_chunk(large, "cpu", 1) == DEFAULT_CHUNK

    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    xs = _samples(model, 10, seed=8)
    whole = tosa_jax.evaluate(model, xs, batch_size=8, progress=False)
    ones = tosa_jax.evaluate(model, xs, batch_size=8, progress=False, chunk=1)
    assert whole.chunk == 8 // whole.devices and ones.chunk == 1
    name = model.outputs[0].name
    np.testing.assert_array_equal(whole.outputs[name], ones.outputs[name])


def test_fp6_and_block_scaled_outputs_come_back_as_from_the_model() -> None:
    """TOSA 1.1 outputs cross evaluate as they cross model(x): FP6 as its ml_dtypes type (not
    the uint8 codes the executable computes), a block-scaled tensor as a BlockScaled pair whose
    values and scales are concatenated over the batches. Each row equals a single call."""
    import ml_dtypes

    from tosa_jax.ir import Operator, Tensor

    rng = np.random.default_rng(3)
    g = GraphBuilder((1, 1, 0, True))
    x = g.input("x", (1, 64), "FP32")
    codes, scales = g._name("codes"), g._name("scales")
    g.block.tensors[codes] = Tensor(codes, (1, 64), "FP6E2M3")
    g.block.tensors[scales] = Tensor(scales, (1, 2), "FP8UE8M0")
    g.block.operators.append(Operator("CAST_TO_BLOCK_SCALED", [x], [codes, scales],
                                      {"block_size": 32}))
    table = g.const((rng.standard_normal((1, 6, 64)) * 4).astype(ml_dtypes.float8_e4m3fn),
                    "FP8E4M3")
    t = g.block.tensors[table]
    t.scale_dtype, t.block_size = "FP8UE8M0", 32
    t.scale_data = np.exp2(rng.integers(-20, 21, (1, 6, 2))).astype(ml_dtypes.float8_e8m0fnu)
    idx = g.input("idx", (1, 3), "INT32")
    gathered = g.op("ROW_GATHER", [table, idx, g.const([2], "INT32")], (1, 6, 64), "FP8E4M3")
    t = g.block.tensors[gathered]
    t.scale_dtype, t.block_size = "FP8UE8M0", 32
    model = tosa_jax.load(tosa_jax.write(g.build([codes, scales, gathered])))
    xs = (rng.standard_normal((7, 64)) * 5).astype(np.float32)
    ids = rng.integers(0, 5, (7, 3)).astype(np.int32)
    res = tosa_jax.evaluate(model, {"x": xs, "idx": ids}, batch_size=4, progress=False)
    singles = [model.run({"x": xs[i:i + 1], "idx": ids[i:i + 1]}) for i in range(7)]
    for name in (codes, scales):
        want = np.stack([np.asarray(s[name])[0] for s in singles])
        got = res.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    got = res.outputs[gathered]
    assert isinstance(got, tosa_jax.BlockScaled)
    for part in ("values", "scales"):
        want = np.stack([getattr(s[gathered], part)[0] for s in singles])
        np.testing.assert_array_equal(getattr(got, part).view(np.uint8), want.view(np.uint8))
