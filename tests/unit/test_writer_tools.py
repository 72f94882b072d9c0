"""Graphs that ``tosa_jax.write`` makes are read by every tool that reads the originals.

Oracles, per written graph: the TOSA reference model (the rewritten graph gives the outputs the
original gives, and partitions chained give the whole graph's), Vela 5.2 (an integer graph or
Ethos-U partition compiles as the original does, with the same operators on the NPU), and Arm's
ML SDK model converter (``model-converter``, TOSA -> VGF, PyPI ``ai-ml-sdk-model-converter``;
optional: skipped when absent). The round trip of the whole conformance slice is
``bench/writer_roundtrip.py`` (minutes).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tosa_jax
from tosa_jax.hw_models import partition
from tosa_jax.hw_models.vela import vela_available, vela_verdict
from tosa_jax.testing import FIXTURES

NAMES = sorted(p.stem for p in FIXTURES.glob("*.tosa"))
INT_NAMES = [n for n in NAMES if "int" in n]


def model_converter() -> str | None:
    beside = Path(sys.executable).parent / "model-converter"
    return str(beside) if beside.exists() else shutil.which("model-converter")


def convert(data: bytes, tmp: Path) -> subprocess.CompletedProcess[str]:
    exe = model_converter()
    if exe is None:
        pytest.skip("model-converter (pip install ai-ml-sdk-model-converter==0.11.0) not installed")
    src = tmp / "g.tosa"
    src.write_bytes(data)
    return subprocess.run([exe, "-i", str(src), "-o", str(tmp / "g.vgf")], capture_output=True,
                          text=True, timeout=300)


def _inputs(name: str, g: tosa_jax.Graph) -> dict[str, np.ndarray]:
    return {g.main.inputs[0]: np.load(FIXTURES / f"{name}.input.npy")}


@pytest.mark.parametrize("name", NAMES)
def test_rewritten_fixture_same_reference_outputs(name: str, reference) -> None:
    original = (FIXTURES / f"{name}.tosa").read_bytes()
    g = tosa_jax.read(original)
    again = tosa_jax.write(g)
    # SHAPE values go to the block's shapes list, as tosa-tools' serializer puts them
    from tosa_jax._schema import tosa_generated as fb
    block = fb.TosaGraph.GetRootAs(again, 0).Regions(0).Blocks(0)
    assert all(block.Tensors(i).Type() != fb.DType.SHAPE for i in range(block.TensorsLength()))
    assert block.ShapesLength() == sum(t.dtype == "SHAPE" for t in g.main.tensors.values())
    x = _inputs(name, g)
    want = reference(original, x, g.main.outputs)
    got = reference(again, x, g.main.outputs)
    for n in g.main.outputs:
        np.testing.assert_array_equal(got[n], want[n])


@pytest.mark.parametrize("name", NAMES)
def test_rewritten_fixture_and_partitions_convert(name: str, tmp_path: Path) -> None:
    g = tosa_jax.read((FIXTURES / f"{name}.tosa").read_bytes())
    graphs = {"rewritten": tosa_jax.write(g)}
    for target in ("mali-g710", "ethos-u85-256"):
        for p in partition(g, target).partitions:
            graphs[f"{target} #{p.index} {p.device}"] = tosa_jax.write(p.graph)
    for what, data in graphs.items():
        proc = convert(data, tmp_path)
        assert proc.returncode == 0, (what, proc.stdout[-1500:], proc.stderr[-1500:])


@pytest.mark.skipif(not vela_available(), reason="Vela (ethos-u-vela) not installed")
@pytest.mark.parametrize("name", INT_NAMES)
@pytest.mark.parametrize("acc", ["ethos-u55-128", "ethos-u85-256"])
def test_rewritten_int_fixture_and_npu_partitions_compile_with_vela(name: str, acc: str) -> None:
    original = (FIXTURES / f"{name}.tosa").read_bytes()
    g = tosa_jax.read(original)
    want = vela_verdict(original, acc)
    got = vela_verdict(tosa_jax.write(g), acc)
    assert got.compiled == want.compiled and got.error == want.error
    assert got.on_npu == want.on_npu
    for p in partition(g, acc).partitions:
        if p.device == acc:
            v = vela_verdict(tosa_jax.write(p.graph), acc)
            assert v.compiled, v.error
            assert all(v.on_npu.values()), v.vela_ops


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", ["mali-g710", "ethos-u55-128"])
def test_written_partitions_chain_on_the_reference_model(name: str, target: str,
                                                         reference) -> None:
    g = tosa_jax.read((FIXTURES / f"{name}.tosa").read_bytes())
    x = _inputs(name, g)
    env = dict(x)
    for p in partition(g, target).partitions:
        env.update(reference(tosa_jax.write(p.graph), {n: env[n] for n in p.inputs}, p.outputs))
    whole = reference(tosa_jax.write(g), x, g.main.outputs)
    for n in g.main.outputs:
        np.testing.assert_array_equal(env[n], whole[n])
