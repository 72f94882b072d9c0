"""Partitioning across device models, the partitioned model, the cost estimate and its reports.

Oracles: the TOSA reference model (each partition run on it, chained, gives the whole graph's
reference output), the unpartitioned tosa_jax model (bit-identical outputs), and hand-derivable
properties of the cost model (more work costs more, a bigger NPU is not slower). The Vela
comparison of cycles is bench/vela_cycles.py (too slow for the unit tests).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tosa_jax
from tosa_jax.errors import TosaHardwareError
from tosa_jax.hw_models import estimate, partition, report_dict, svg, table
from tosa_jax.ir import Graph, GraphBuilder, Operator, Region, Tensor
from tosa_jax.testing import FIXTURES
from tosa_jax.testing import networks as hw_graphs


def _fixture(name: str) -> tuple[Graph, dict[str, np.ndarray]]:
    g = tosa_jax.read((FIXTURES / f"{name}.tosa").read_bytes())
    return g, {g.main.inputs[0]: np.load(FIXTURES / f"{name}.input.npy")}


def _check_partitions_valid(pg) -> None:
    """Every partition is a single-block graph that survives write/read, every non-constant
    operator is in exactly one partition, and every partition input is made somewhere."""
    block = pg.graph.main
    seen: list[int] = []
    made = set(block.inputs)
    for p in pg.partitions:
        assert len(p.graph.regions) == 1 and len(p.graph.regions[0].blocks) == 1
        again = tosa_jax.read(tosa_jax.write(p.graph))
        assert again.main.inputs == p.inputs and again.main.outputs == p.outputs
        assert [o.op for o in again.main.operators] == [o.op for o in p.graph.main.operators]
        assert set(p.inputs) <= made, (p.index, set(p.inputs) - made)
        made |= set(p.outputs)
        seen += p.op_indices
    non_const = [i for i, op in enumerate(block.operators)
                 if op.op not in ("CONST", "CONST_SHAPE") and i in pg.placement]
    assert sorted(seen) == sorted(non_const) and len(seen) == len(set(seen))
    assert set(block.outputs) <= made
    # adjacent partitions are on different devices (runs are merged)
    assert all(a.device != b.device for a, b in zip(pg.partitions, pg.partitions[1:]))


def test_fixture_on_npu_is_one_partition_and_matches_reference(reference) -> None:
    g, x = _fixture("cnn_int8")
    pg = partition(g, "ethos-u55-128")
    _check_partitions_valid(pg)
    assert [p.device for p in pg.partitions] == ["ethos-u55-128"]
    assert not pg.transfers and not pg.reasons
    got = pg.model().run(x)
    whole = tosa_jax.load(g).run(x)
    ref = reference(tosa_jax.write(pg.partitions[0].graph), x, g.main.outputs)
    for n in g.main.outputs:
        np.testing.assert_array_equal(got[n], whole[n])
        np.testing.assert_array_equal(got[n], ref[n])


def test_split_graph_partitions_chain_on_the_reference_model(reference) -> None:
    # The Ethos-U55 has no int32 BITWISE_AND: NPU -> CPU -> NPU, with explicit crossings.
    g = hw_graphs.mixed()
    x = hw_graphs.example_inputs(g)
    pg = partition(g, "ethos-u55-128")
    _check_partitions_valid(pg)
    assert [p.device for p in pg.partitions] == ["ethos-u55-128", "cpu", "ethos-u55-128"]
    (cpu_op,) = pg.partitions[1].op_indices
    assert g.main.operators[cpu_op].op == "BITWISE_AND"
    assert any("BITWISE_AND" in r for r in pg.reasons[cpu_op])
    assert [(t.source, t.dest) for t in pg.transfers] == [(0, 1), (1, 2)]
    for t in pg.transfers:
        assert t.nbytes == np.prod(g.main.tensors[t.tensor].shape) * 4  # int32 tensors
    # Each partition on the reference model, fed by the previous ones' reference outputs.
    env = dict(x)
    for p in pg.partitions:
        env.update(reference(tosa_jax.write(p.graph), {n: env[n] for n in p.inputs}, p.outputs))
    ref_whole = reference(tosa_jax.write(g), x, g.main.outputs)
    got = pg.model().run(x)
    for n in g.main.outputs:
        np.testing.assert_array_equal(env[n], ref_whole[n])
        np.testing.assert_array_equal(got[n], ref_whole[n])


@pytest.mark.parametrize("name", ["mlp_attn_int8", "cnn_fp32"])
def test_policy_splits_and_outputs_stay_bit_identical(name: str) -> None:
    g, x = _fixture(name)
    whole = tosa_jax.load(g).run(x)
    # a dict policy by operator type, or a callable
    policy = {"REDUCE_MAX": "cpu", "SLICE": "mali-g710"} if name == "mlp_attn_int8" else (
        lambda op: "cpu" if op.op == "ADD" else None)
    pg = partition(g, "ethos-u85-256", policy)
    _check_partitions_valid(pg)
    got = pg.model(by="partition").run(x)
    for n in g.main.outputs:
        np.testing.assert_array_equal(got[n], whole[n])
    if name == "cnn_fp32":  # no float on Ethos-U: everything falls back, reasons given
        pg = partition(g, "ethos-u55-128")
        assert [p.device for p in pg.partitions] == ["cpu"]
        assert pg.reasons and all(r for r in pg.reasons.values())
    else:
        assert [p.device for p in pg.partitions][:3] == ["ethos-u85-256", "mali-g710",
                                                         "ethos-u85-256"]
        assert "cpu" in pg.devices


def test_policy_by_index_and_output_name_and_bad_input() -> None:
    g = hw_graphs.convnet()
    ops = [i for i, op in enumerate(g.main.operators) if op.op not in ("CONST", "CONST_SHAPE")]
    first, last = ops[0], ops[-1]
    pg = partition(g, ["ethos-u65-256"], {first: "cpu", g.main.operators[last].outputs[0]: "cpu"})
    assert pg.placement[first] == "cpu" and pg.placement[last] == "cpu"
    assert [p.device for p in pg.partitions] == ["cpu", "ethos-u65-256", "cpu"]
    with pytest.raises(TosaHardwareError, match="ethos-u99"):
        partition(g, "ethos-u99-1")
    with pytest.raises(TosaHardwareError, match="no target"):
        partition(g, [])


def test_control_flow_graph_stays_whole() -> None:
    main = GraphBuilder()
    c = main.input("c", (1,), "BOOL")
    x = main.input("x", (2,), "INT32")
    main.block.tensors["o"] = Tensor("o", (2,), "INT32")
    main.block.operators.append(Operator("COND_IF", [c, x], ["o"],
                                         {"then_graph": "THEN", "else_graph": "ELSE"}))
    main.block.outputs = ["o"]
    regions = [Region("main", [main.block])]
    for name, op in (("THEN", "ABS"), ("ELSE", "NEGATE")):
        b = GraphBuilder()
        b.block.name = name
        b.input("x", (2,), "INT32")
        b.block.outputs = [b.op(op, ["x"], (2,), "INT32")] if op == "ABS" else [
            b.op(op, ["x", b.const([0], "INT32"), b.const([0], "INT32")], (2,), "INT32")]
        regions.append(Region(name, [b.block]))
    g = Graph((1, 0, 0, False), regions)
    pg = partition(g, "ethos-u85-256")
    assert len(pg.partitions) == 1 and pg.whole and "block" in pg.whole
    xs = {"c": np.array([False]), "x": np.array([3, -4], np.int32)}
    np.testing.assert_array_equal(pg.model().run(xs)["o"], tosa_jax.load(g).run(xs)["o"])


def test_graph_of_constants_only() -> None:
    # Conformance tests give some operators only constant inputs: the output is still computed.
    b = GraphBuilder()
    a, c = b.const([[1, -2, 3]], "INT32"), b.const([[5, 5, 5]], "INT32")
    g = b.build([b.op("SUB", [a, c], (1, 3), "INT32")])
    pg = partition(g, "ethos-u55-128")
    assert len(pg.partitions) == 1 and pg.partitions[0].inputs == []
    np.testing.assert_array_equal(pg.model().run({})[g.main.outputs[0]], [[-4, -7, -2]])


def _conv_graph(channels: int, size: int = 16) -> Graph:
    n = hw_graphs.Net(5)
    x = n.input("x", (1, size, size, channels))
    return n.build([n.conv(x, channels, 3)])


def test_cost_model_sanity() -> None:
    small, big = _conv_graph(8), _conv_graph(32)
    for dev in ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256", "cpu", "mali-g710"):
        cs, cb = (estimate(partition(g, dev, fallback="cpu")) for g in (small, big))
        assert cb.time_s > cs.time_s > 0, dev
        assert cb.macs == 16 * cs.macs == 16 * 16 * 16 * 9 * 8 * 8
    # a bigger NPU of the same family is not slower; more MACs per cycle than the CPU model
    t = {d: estimate(partition(big, d)).time_s
         for d in ("ethos-u55-64", "ethos-u55-128", "ethos-u55-256")}
    assert t["ethos-u55-64"] >= t["ethos-u55-128"] >= t["ethos-u55-256"]
    # peak memory: at least the biggest live tensor, at most all activations together
    g = hw_graphs.mixed()
    c = estimate(partition(g, "ethos-u55-128"))
    sizes = [np.prod(t.shape) * (4 if t.dtype == "INT32" else 1)
             for t in g.main.tensors.values() if t.data is None]
    assert max(sizes) <= c.peak_bytes <= sum(sizes)
    assert len(c.transfers) == 2 and all(t.time_s > 0 for t in c.transfers)
    assert c.time_s == pytest.approx(sum(p.time_s for p in c.partitions)
                                     + sum(t.time_s for t in c.transfers))


def test_reports_table_json_svg(tmp_path) -> None:
    g = hw_graphs.mixed()
    pg = partition(g, "ethos-u55-128")
    cost = estimate(pg, vela_cycles={0: 1000.0})
    text = table(cost, pg)
    assert "BITWISE_AND" in text and "Vela cycles" in text and "network:" in text
    data = json.loads(json.dumps(report_dict(pg, cost)))
    assert [p["device"] for p in data["partitions"]] == ["ethos-u55-128", "cpu", "ethos-u55-128"]
    assert len(data["placement"]) == len(pg.order) and data["transfers"]
    pic = svg(pg, cost, tmp_path / "g.svg")
    root = ET.fromstring((tmp_path / "g.svg").read_text())
    assert root.tag.endswith("svg") and pic.count("<g><title>") == len(pg.order)
    assert len(re.findall(r'<path d="[^"]*" fill="none" stroke="#d32f2f"', pic)) == 2


def test_cli_partition(tmp_path, capsys) -> None:
    from tosa_jax.cli import main

    src = tmp_path / "mixed.tosa"
    src.write_bytes(tosa_jax.write(hw_graphs.mixed()))
    out = tmp_path / "parts"
    rc = main(["partition", str(src), "--target", "ethos-u55-128", "--out", str(out),
               "--json", str(tmp_path / "r.json"), "--per-op"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "3 partition(s)" in text and "BITWISE_AND" in text
    files = sorted(p.name for p in out.glob("*.tosa"))
    assert files == ["mixed_0_ethos-u55-128.tosa", "mixed_1_cpu.tosa", "mixed_2_ethos-u55-128.tosa"]
    assert (out / "mixed.svg").exists()
    assert json.loads((tmp_path / "r.json").read_text())["network"]["time_s"] > 0
    assert main(["partition", str(src), "--target", "ethos-u00"]) == 2


MULTI_DEVICE_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, numpy as np, tosa_jax
    from tosa_jax.testing import networks as H
    from tosa_jax.hw_models import partition
    assert len(jax.devices()) == 4, jax.devices()
    fx = sys.argv[1]
    cases = [(tosa_jax.read(open(f"{fx}/{n}.tosa", "rb").read()), np.load(f"{fx}/{n}.input.npy"))
             for n in ("cnn_int8",)]
    for g, x in cases:
        cases[cases.index((g, x))] = (g, {g.main.inputs[0]: x})
    cases += [(g, H.example_inputs(g)) for g in (H.mixed(), H.attention())]
    policy = {"ADD": "cpu", "REDUCE_MAX": "cpu", "MATMUL": "mali-g710"}
    used = set()
    for g, x in cases:
        pg = partition(g, "ethos-u55-128", policy)
        m = pg.model(by="partition")
        got, whole = m.run(x), tosa_jax.load(g).run(x)
        for n in g.main.outputs:
            assert np.array_equal(got[n], whole[n]), n
        # each partition ran on its own JAX device (round robin over the 4)
        assert len(set(m.jax_devices)) == min(4, len(pg.partitions)), m.jax_devices
        assert len(pg.partitions) == 1 or m.moved_bytes > 0
        used |= set(m.jax_devices)
    print("OK", len(used), "devices")
""")


def test_partitioned_model_on_several_host_devices(tmp_path) -> None:
    # XLA_FLAGS must be set before JAX starts, so this runs in a fresh interpreter.
    script = tmp_path / "multi.py"
    script.write_text(MULTI_DEVICE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, str(script), str(FIXTURES)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "OK 4 devices" in proc.stdout


@pytest.mark.skipif(not __import__("tosa_jax.hw_models.vela", fromlist=["x"]).vela_available(),
                    reason="Vela (ethos-u-vela) not installed")
@pytest.mark.parametrize("acc", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("net", ["cnn_int8", "mlp_attn_int8"])
def test_fixture_cycles_against_vela(net: str, acc: str) -> None:
    # Oracle: Vela 5.2's total cycles of each NPU partition of the fixture network (the target:
    # every fixture and zoo network within 30%; the zoo table is in the README).
    from tosa_jax.testing import vela_cycles as vc

    g = tosa_jax.read(FIXTURES / f"{net}.tosa")
    pg = partition(g, acc)
    cost = estimate(pg)
    ours = vela = 0.0
    for p, pc in zip(pg.partitions, cost.partitions):
        if p.device == acc:
            v = vc.vela_layers(tosa_jax.write(p.graph), acc)
            assert v is not None
            ours, vela = ours + pc.cycles, vela + v["total"]
    assert vela > 0 and 0.7 <= ours / vela <= 1.3, (ours, vela)


@pytest.mark.skipif(not __import__("tosa_jax.hw_models.vela", fromlist=["x"]).vela_available(),
                    reason="Vela (ethos-u-vela) not installed")
@pytest.mark.parametrize("acc", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
def test_npu_cycles_per_operation_against_vela(acc: str) -> None:
    # Oracle: Vela 5.2's own per-operation cycles (its --verbose-performance table), on a
    # generated network outside the set the unpublished parameters were set on (the full
    # distribution: bench/vela_cycles.py --held-out).
    from tosa_jax.testing import vela_cycles as vc

    g = hw_graphs.random_network(100_001)
    pg = partition(g, acc)
    cost = estimate(pg)
    ratios, ours, vela = [], 0.0, 0.0
    for p, pc in zip(pg.partitions, cost.partitions):
        v = vc.vela_layers(tosa_jax.write(p.graph), acc)
        assert v is not None
        ratios += [m / c for _, m, c in vc.compare_ops(pg, pc, p, v)]
        ours, vela = ours + pc.cycles, vela + v["total"]
    assert len(ratios) >= 10
    assert np.mean([0.5 <= r <= 1.5 for r in ratios]) >= 0.75, sorted(ratios)
    assert 0.7 <= ours / vela <= 1.3
