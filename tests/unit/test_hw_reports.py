"""Reports of a partitioned graph that agree with each other and scale.

Oracles: the partitions themselves (every count in a report is recomputed here from
``Partition.op_indices`` and the graph), the SVG parsed as XML (every placed operator has one
box, boxes do not overlap, the picture of a ~600-operator network stays within a few screens),
and the file on disk (``read`` of a path equals ``read`` of its bytes).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tosa_jax
from tosa_jax.errors import TosaFormatError
from tosa_jax.hw_models import estimate, partition, report_dict, svg, table
from tosa_jax.hw_models.cost import count_ops
from tosa_jax.testing import networks as hw_graphs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NS = "{http://www.w3.org/2000/svg}"


def test_read_takes_a_path_or_bytes(tmp_path: Path) -> None:
    path = FIXTURES / "cnn_int8.tosa"
    assert tosa_jax.read(path) == tosa_jax.read(str(path)) == tosa_jax.read(path.read_bytes())
    with pytest.raises(TosaFormatError, match="no such file"):
        tosa_jax.read(tmp_path / "missing.tosa")
    (tmp_path / "bad.tosa").write_bytes(b"12345678")
    with pytest.raises(TosaFormatError, match="bad.tosa"):
        tosa_jax.read(tmp_path / "bad.tosa")
    with pytest.raises(TosaFormatError, match="int"):
        tosa_jax.read(12)


def test_partition_takes_path_bytes_graph_or_model() -> None:
    path = FIXTURES / "mlp_attn_int8.tosa"
    g = tosa_jax.read(path)
    want = partition(g, "ethos-u55-128", {"MATMUL": "cpu"})
    for source in (path, str(path), path.read_bytes(), tosa_jax.load(g)):
        got = partition(source, "ethos-u55-128", {"MATMUL": "cpu"})
        assert got.placement == want.placement and got.order == want.order


@pytest.mark.parametrize("target,policy", [("mali-g710", {"MATMUL": "cpu"}),
                                           ("ethos-u55-128", None)])
@pytest.mark.parametrize("name", ["encoder_fp32", "mlp_attn_int8", "cnn_int8"])
def test_one_operator_count_everywhere(name: str, target: str, policy) -> None:
    g = tosa_jax.read(FIXTURES / f"{name}.tosa")
    pg = partition(g, target, policy)
    cost = estimate(pg)
    # the definition, recomputed from the graph: operators less constants and what is
    # computed from constants only
    const: set[str] = set()
    runs = 0
    for op in g.main.operators:
        if op.op in ("CONST", "CONST_SHAPE") or (op.inputs and all(n in const
                                                                  for n in op.inputs)):
            const.update(op.outputs)
        else:
            runs += 1
    assert count_ops(pg) == cost.op_count == runs
    assert [pc.op_count for pc in cost.partitions] == [len(p.op_indices) for p in pg.partitions]
    assert sum(int(d["ops"]) for d in cost.per_device.values()) == runs
    data = report_dict(pg, cost)
    assert sum(len(p["operators"]) for p in data["partitions"]) == runs
    assert len(data["placement"]) == runs
    text = table(cost, pg)
    assert f"network: {runs} ops" in text
    per_op_rows = [ln for ln in text.splitlines() if ln[:5].strip().isdigit()
                   and len(ln.split()) > 6 and ln.split()[1].isupper()]
    assert len(per_op_rows) == runs
    summary = pg.summary()
    assert sum(int(ln.split("ops")[0].split()[-1]) for ln in summary.splitlines()[1:]
               if " ops " in ln) == runs


def _boxes(root: ET.Element) -> list[tuple[float, float, float, float, str]]:
    out = []
    for g in root.iter(f"{NS}g"):
        rect = g.find(f"{NS}rect")
        title = g.find(f"{NS}title")
        if rect is not None and title is not None:
            out.append((float(rect.get("x")), float(rect.get("y")), float(rect.get("width")),
                        float(rect.get("height")), title.text or ""))
    return out


def test_svg_of_a_600_operator_network(tmp_path: Path) -> None:
    g = hw_graphs.random_network(7, blocks=70)
    pg = partition(g, "ethos-u55-128", {"TABLE": "cpu"})  # many partitions and transfers
    cost = estimate(pg)
    n = count_ops(pg)
    assert n >= 500 and len(pg.transfers) >= 10
    pic = svg(pg, cost, tmp_path / "big.svg")
    root = ET.fromstring(pic)
    width, height = float(root.get("width")), float(root.get("height"))
    assert height <= 3200 and width <= 6000  # a few screens, not one 20,000 px column
    boxes = _boxes(root)
    assert len(boxes) == n
    # every operator index once, and no two boxes overlap
    assert sorted(int(b[4].split()[0][1:]) for b in boxes) == sorted(pg.placement)
    cells = {(b[0], b[1]) for b in boxes}
    assert len(cells) == n
    xs, ys = sorted({b[0] for b in boxes}), sorted({b[1] for b in boxes})
    assert min(b - a for a, b in zip(xs, xs[1:])) >= boxes[0][2]
    assert min(b - a for a, b in zip(ys, ys[1:])) >= boxes[0][3]
    # legend, per-device totals, bytes on every transfer
    assert "transfer between devices" in pic and "fused or a view" in pic
    for dev, d in cost.per_device.items():
        assert f"{dev}: {int(d['partitions'])} partition(s), {int(d['ops'])} ops" in pic
    labels = [t.text for t in root.iter(f"{NS}text") if t.get("fill") == "#d32f2f"]
    assert len(labels) == len(pg.transfers)
    assert all(lab.endswith(("B", "KiB")) for lab in labels)
    # inputs of an operator are drawn before it: its layer is later than its producers'
    json.dumps(report_dict(pg, cost))


def test_cli_partition_vela_shows_progress(tmp_path: Path, capsys) -> None:
    from tosa_jax.hw_models.vela import vela_available

    if not vela_available():
        pytest.skip("Vela (ethos-u-vela) not installed")
    from tosa_jax.cli import main

    src = tmp_path / "mixed.tosa"
    src.write_bytes(tosa_jax.write(hw_graphs.mixed()))
    assert main(["partition", str(src), "--target", "ethos-u55-128", "--out",
                 str(tmp_path / "p"), "--vela"]) == 0
    err = capsys.readouterr().err
    assert "vela: partition 1/2" in err and "vela: partition 2/2" in err and "cycles," in err
