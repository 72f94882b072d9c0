"""Reader and writer: round trip, every element type, and clear errors on bad bytes."""

from __future__ import annotations

import numpy as np
import pytest

import tosa_jax
from tosa_jax import serialization
from tosa_jax.ir import HOST_DTYPES, GraphBuilder
from tosa_jax.testing import FIXTURES


def _all_types_graph() -> tosa_jax.Graph:
    b = GraphBuilder()
    rng = np.random.default_rng(0)
    b.const(rng.integers(-8, 8, (3, 5)), "INT4")
    b.const(rng.integers(-(1 << 47), 1 << 47, (4,)), "INT48")
    b.const(rng.integers(0, 2, (2, 3)).astype(bool), "BOOL")
    for t in ("INT8", "INT16", "INT32"):
        info = np.iinfo(HOST_DTYPES[t])
        b.const(rng.integers(info.min, info.max, (2, 2), endpoint=True), t)
    for t in ("FP16", "BF16", "FP32", "FP8E4M3", "FP8E5M2"):
        b.const(rng.standard_normal((2, 3)).astype(np.float32).astype(HOST_DTYPES[t]), t)
    b.const([1, 2, 3], "SHAPE")
    x = b.input("x", (2, 3), "FP32")
    y = b.op("CLAMP", [x], (2, 3), "FP32", min_val=np.float32(-1.5), max_val=np.float32(2.0),
             nan_mode="PROPAGATE")
    z = b.op("CONV2D", [x, x, x, x, x], (1, 1, 1, 1), "FP32", pad=(0, 1, 2, 3),
             stride=(1, 2), dilation=(1, 1), acc_type="FP32", local_bound=True)
    return b.build([y, z])


def test_round_trip_every_type_and_attribute() -> None:
    g = _all_types_graph()
    g2 = tosa_jax.read(tosa_jax.write(g))
    assert g2 == g
    # Bytes are stable too: write(read(write(g))) == write(g).
    assert tosa_jax.write(g2) == tosa_jax.write(g)


def test_int4_and_int48_byte_layout() -> None:
    # Hand-derived from the schema: INT4 packs two values per byte, low nibble first;
    # INT48 stores 6 little-endian bytes per value.
    assert list(serialization.encode_data(np.array([1, -2, 7]), "INT4")) == [0xE1, 0x07]
    raw = serialization.encode_data(np.array([-2, 1 << 40]), "INT48")
    assert list(raw) == [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0x01]
    back = serialization.decode_data(raw, "INT48", (2,), "t")
    assert back.tolist() == [-2, 1 << 40]


def test_fixture_reads_and_round_trips() -> None:
    data = (FIXTURES / "cnn_int8.tosa").read_bytes()
    g = tosa_jax.read(data)
    assert g.version[:2] == (1, 0)
    assert tosa_jax.read(tosa_jax.write(g)) == g


@pytest.mark.parametrize("blob, message", [
    (b"", "only 0 bytes"),
    (b"\x00" * 64, "file identifier"),
    (b"PK\x03\x04" + b"\x00" * 60, "file identifier"),
])
def test_not_tosa(blob: bytes, message: str) -> None:
    with pytest.raises(tosa_jax.TosaFormatError, match=message):
        tosa_jax.load(blob)


def test_truncated_at_every_offset() -> None:
    data = tosa_jax.write(_all_types_graph())
    for n in range(0, len(data), 7):
        with pytest.raises(tosa_jax.TosaError):
            tosa_jax.read(data[:n])


def test_missing_file_and_wrong_source_type(tmp_path) -> None:
    with pytest.raises(tosa_jax.TosaFormatError, match="no such file"):
        tosa_jax.load(tmp_path / "nope.tosa")
    with pytest.raises(tosa_jax.TosaFormatError, match="not a file"):
        tosa_jax.load(tmp_path)
    with pytest.raises(tosa_jax.TosaFormatError, match="cannot load"):
        tosa_jax.load(3.5)


@pytest.mark.parametrize("version", [(0, 80, 0, False), (1, 1, 0, False), (2, 0, 0, False)])
def test_unsupported_version_is_named(version) -> None:
    b = GraphBuilder(version=version)
    x = b.input("x", (1,), "INT8")
    data = tosa_jax.write(b.build([x]))
    with pytest.raises(tosa_jax.TosaVersionError, match=r"\d+\.\d+\.\d+"):
        tosa_jax.load(data)


@pytest.mark.parametrize("version", [(1, 0, 0, False), (1, 0, 2, False), (1, 1, 0, True)])
def test_supported_versions(version) -> None:
    b = GraphBuilder(version=version)
    x = b.input("x", (1,), "INT8")
    assert tosa_jax.load(tosa_jax.write(b.build([x]))).inputs[0].name == "x"


def test_huge_declared_shape_is_refused_before_allocation() -> None:
    b = GraphBuilder()
    x = b.input("x", (1 << 20, 1 << 20), "INT8")  # 2^40 elements
    with pytest.raises(tosa_jax.TosaLimitError, match="2\\^?|1099511627776"):
        tosa_jax.load(tosa_jax.write(b.build([x])))


def test_constant_with_too_little_data() -> None:
    g = _all_types_graph()
    t = next(t for t in g.main.tensors.values() if t.dtype == "INT32")
    t.shape = (4, 4)  # the writer encodes the 2x2 data as given; the reader must catch the lie
    with pytest.raises(tosa_jax.TosaFormatError, match="needs 64"):
        tosa_jax.read(tosa_jax.write(g))


def test_unknown_operator_is_named() -> None:
    b = GraphBuilder()
    x = b.input("x", (2,), "INT8")
    y = b.op("CUSTOM", [x], (2,), "INT8", operator_name="my_op", domain_name="acme",
             implementation_attrs=())
    with pytest.raises(tosa_jax.TosaUnsupportedError, match="CUSTOM"):
        tosa_jax.load(b.build([y]))


def test_fast_table_reads_as_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's Table (``_schema.fasttable``) gives the graphs the flatbuffers library's
    Table gives, on every seed graph of the fuzzer (built graphs of every type and attribute,
    the fixture networks): read once each way, the two graphs are equal."""
    import flatbuffers

    from tosa_jax._schema import tosa_generated
    from tosa_jax._schema.fasttable import Table as FastTable
    from tosa_jax.testing import fuzz

    seeds = fuzz.seed_files(fixtures=True)
    fast = {name: serialization.read(data) for name, data in seeds.items()}
    assert type(tosa_generated.TosaGraph.GetRootAs(seeds["cnn_int8"])._tab) is FastTable
    monkeypatch.setattr(tosa_generated, "flatbuffers", flatbuffers)
    monkeypatch.setattr(tosa_generated, "Table", flatbuffers.table.Table)
    for name, data in seeds.items():
        assert serialization.read(data) == fast[name], name
    assert type(tosa_generated.TosaGraph.GetRootAs(seeds["cnn_int8"])._tab) is not FastTable
