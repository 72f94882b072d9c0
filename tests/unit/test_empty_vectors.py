"""Absent against empty: every place the reader tells an absent flatbuffer vector from an empty one.

A flatbuffer vector may be absent or present with no elements; the reference model (C++) reads
both as an empty vector. ExecuTorch's serializer (tosa-tools' ``tosa_serializer``) writes an
empty data vector for every tensor that is not a constant, and for a rank-0 CONST_SHAPE (a
reshape to a scalar), which tosa_jax used to refuse ("a constant needs its values"). Each
sibling below is written both ways at the flatbuffer level and must read the same; graphs that
run are judged by the reference model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder
from tosa_jax._schema import tosa_generated as fb
from tosa_jax.serialization import OP_VALUES


def _edit(buf: bytes, change: Callable[[Any], None]) -> bytes:
    """Unpack a flatbuffer into the schema's object API, change it, pack it again."""
    import flatbuffers

    g = fb.TosaGraphT.InitFromPackedBuf(bytearray(buf), 0)
    change(g)
    builder = flatbuffers.Builder(1024)
    builder.Finish(g.Pack(builder), b"TOSA")
    return bytes(builder.Output())


def _main(g: Any) -> Any:
    return g.regions[0].blocks[0]


def _both(buf: bytes, set_field: Callable[[Any, Any], None],
          empty: Any = None) -> tuple[bytes, bytes]:
    """The graph with one field absent, and with it present and empty."""
    empty = np.zeros(0, np.uint8) if empty is None else empty
    return (_edit(buf, lambda g: set_field(g, None)),
            _edit(buf, lambda g: set_field(g, copy.copy(empty))))


def _reshape_to_scalar(dtype: str = "INT32") -> bytes:
    """x[1,1] -> RESHAPE(CONST_SHAPE []) -> y[]: the rank-0 shape constant, kept in the tensor
    list (TOSA 1.0 files; the writer puts SHAPE values in the block's shape list)."""
    b = GraphBuilder()
    x = b.input("x", (1, 1), dtype)
    y = b.op("RESHAPE", [x, b.const(np.zeros(0, np.int64), "SHAPE", name="shape")], (), dtype)

    def to_tensor_list(g: Any) -> None:
        blk = _main(g)
        for s in blk.shapes or []:
            t = fb.TosaTensorT()
            t.name, t.type, t.shape = s.name, fb.DType.SHAPE, [s.rank]
            t.data = np.zeros(0, np.uint8)
            blk.tensors.append(t)
        blk.shapes = []
    return _edit(tosa_jax.write(b.build([y])), to_tensor_list)


def _tensor(g: Any, name: str) -> Any:
    return next(t for t in _main(g).tensors if t.name in (name, name.encode()))


# ----------------------------------------------------------------------------- the bug


def test_rank0_shape_in_shapes_list_as_tosa_serializer_writes_it():
    """ExecuTorch's reshape to a scalar, built with tosa-tools' own serializer: the rank-0
    CONST_SHAPE lands in the block's shape list with a present, empty data vector."""
    ts = pytest.importorskip("tosa_serializer")
    trm = pytest.importorskip("tosa_reference_model")
    g = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    g.addInputTensor(ts.TosaSerializerTensor("x", [1, 1], ts.DType.FP32, data=None))
    shape = g.addConst((0,), ts.DType.SHAPE, np.zeros(0, np.int64), name="y_shape")
    g.currRegion.currBasicBlock.addTensor("y", [], ts.DType.FP32)
    attr = ts.TosaSerializerAttribute()
    attr.ReshapeAttribute()
    g.addOperator(ts.Op.RESHAPE, ["x", shape.name], ["y"], attr)
    g.addOutputTensor(g.currRegion.currBasicBlock.tensors["y"])
    buf = bytes(g.serialize())
    root = fb.TosaGraph.GetRootAs(buf, 0).Regions(0).Blocks(0)
    assert root.ShapesLength() == 1 and root.Shapes(0).Rank() == 0
    assert not root.Shapes(0).DataIsNone() and root.Shapes(0).DataLength() == 0
    x = np.array([[3.25]], np.float32)
    ref, status = trm.run(buf, [x])
    assert status == trm.GraphStatus.TOSA_VALID
    got = np.asarray(tosa_jax.load(buf)(x))
    assert got.shape == ref[0].shape == () and got.dtype == ref[0].dtype
    np.testing.assert_array_equal(got, ref[0])


@pytest.mark.parametrize("form", ["absent", "empty"])
def test_rank0_const_shape_tensor_absent_or_empty(form, reference):
    """The same constant in the tensor list, its data vector absent or empty."""
    absent, empty = _both(_reshape_to_scalar(), lambda g, v: setattr(_tensor(g, "shape"),
                                                                     "data", v))
    buf = absent if form == "absent" else empty
    t = fb.TosaGraph.GetRootAs(buf, 0).Regions(0).Blocks(0)
    shape_t = next(t.Tensors(i) for i in range(t.TensorsLength()) if t.Tensors(i).Name() ==
                   b"shape")
    assert shape_t.DataIsNone() == (form == "absent")
    x = np.array([[-123456]], np.int32)
    ref = reference(buf, {"x": x}, ["reshape1"])["reshape1"]
    got = tosa_jax.load(buf).run({"x": x})["reshape1"]
    assert got.dtype == ref.dtype and got.shape == ref.shape == ()
    np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------------------- siblings


@pytest.mark.parametrize("form", ["absent", "empty"])
def test_rank0_const_shape_in_shapes_list_absent_or_empty(form, reference):
    """The constant moved to the block's shape list (as 1.1-draft serializers keep it)."""
    def change(g: Any) -> None:
        blk = _main(g)
        blk.tensors = [t for t in blk.tensors if t.name not in ("shape", b"shape")]
        s = fb.TosaShapeT()
        s.name, s.rank = "shape", 0
        s.data = None if form == "absent" else np.zeros(0, np.uint8)
        blk.shapes = [s]
    buf = _edit(_reshape_to_scalar(), change)
    x = np.array([[77]], np.int32)
    ref = reference(buf, {"x": x}, ["reshape1"])["reshape1"]
    got = tosa_jax.load(buf).run({"x": x})["reshape1"]
    assert got.dtype == ref.dtype and got.shape == ref.shape == ()
    np.testing.assert_array_equal(got, ref)


def test_shapes_list_data_rule():
    """Block shape list, the tensors' rule: empty -> the data of a rank-0 shape, or no data
    (a shape that is not a constant) for a higher rank; absent -> no data; bytes -> values."""
    def with_shape(rank: int, data: Any) -> tosa_jax.ir.Tensor:
        def change(g: Any) -> None:
            s = fb.TosaShapeT()
            s.name, s.rank, s.data = "s", rank, data
            _main(g).shapes = [s]
        return tosa_jax.read(_edit(_reshape_to_scalar(), change)).main.tensors["s"]

    empty = np.zeros(0, np.uint8)
    s = with_shape(0, empty)
    assert s.shape == (0,) and s.data is not None and s.data.size == 0
    assert with_shape(0, None).data is None
    assert with_shape(2, empty).data is None and with_shape(2, None).data is None
    filled = with_shape(2, np.array([3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0], np.uint8))
    np.testing.assert_array_equal(filled.data, [3, 7])


def test_tensor_data_absent_or_empty():
    """Tensor list: a zero-element constant reads the same absent or empty; a zero-element
    input runs the same either way; a constant with elements and no bytes is refused by name."""
    b = GraphBuilder()
    x = b.input("x", (2, 0), "INT8")
    c = b.const(np.zeros((2, 0), np.int8), "INT8", name="c")
    y = b.op("ADD", [b.op("CAST", [x], (2, 0), "INT32"),
                     b.op("CAST", [c], (2, 0), "INT32")], (2, 0), "INT32")
    buf = tosa_jax.write(b.build([y]))
    graphs = [tosa_jax.read(v) for v in _both(buf, lambda g, v: setattr(_tensor(g, "c"), "data",
                                                                        v))]
    for graph in graphs:
        assert graph.main.tensors["c"].data is not None
        assert graph.main.tensors["c"].data.shape == (2, 0)
    assert graphs[0] == graphs[1]
    x = np.zeros((2, 0), np.int8)
    for v in _both(buf, lambda g, v: setattr(_tensor(g, "x"), "data", v)):
        assert tosa_jax.load(v)(x).shape == (2, 0)  # an input's bytes never come from the file

    b = GraphBuilder()
    y = b.op("CAST", [b.const([1, 2, 3], "INT8", name="c")], (3,), "INT32")
    buf = tosa_jax.write(b.build([y]))
    for v in _both(buf, lambda g, v: setattr(_tensor(g, "c"), "data", v)):
        with pytest.raises(tosa_jax.TosaValidationError, match="CONST.*values"):
            tosa_jax.load(v)


def test_tensor_shape_absent_or_empty_is_rank0(reference):
    b = GraphBuilder()
    y = b.op("ABS", [b.input("x", (), "INT32")], (), "INT32")
    buf = tosa_jax.write(b.build([y]))
    for v in _both(buf, lambda g, s: [setattr(t, "shape", s) for t in _main(g).tensors],
                   np.zeros(0, np.int32)):
        graph = tosa_jax.read(v)
        assert graph.main.tensors["x"].shape == () == graph.main.tensors[y].shape
        x = np.array(-7, np.int32)
        ref = reference(v, {"x": x}, [y])[y]
        np.testing.assert_array_equal(tosa_jax.load(v)(x), ref)


def _attr_graph(op: str) -> bytes:
    """A small valid graph with one operator whose attribute has optional vector fields."""
    b = GraphBuilder()
    if op == "TRANSPOSE":
        y = b.op("TRANSPOSE", [b.input("x", (2, 3), "INT8")], (3, 2), "INT8", perms=(1, 0))
    elif op in ("AVG_POOL2D", "MAX_POOL2D"):
        x = b.input("x", (1, 4, 4, 1), "INT8")
        extra = dict(acc_type="INT32") if op == "AVG_POOL2D" else dict(nan_mode="PROPAGATE")
        ins = [x, b.const([0], "INT8"), b.const([0], "INT8")] if op == "AVG_POOL2D" else [x]
        y = b.op(op, ins, (1, 2, 2, 1), "INT8", kernel=(2, 2), stride=(2, 2), pad=(0, 0, 0, 0),
                 **extra)
    else:  # CONV2D
        ins = [b.input("x", (1, 3, 3, 1), "INT8"), b.const(np.ones((1, 1, 1, 1)), "INT8"),
               b.const([0], "INT32"), b.const([0], "INT8"), b.const([0], "INT8")]
        y = b.op("CONV2D", ins, (1, 3, 3, 1), "INT32", pad=(0, 0, 0, 0), stride=(1, 1),
                 dilation=(1, 1), acc_type="INT32", local_bound=False)
    return tosa_jax.write(b.build([y]))


@pytest.mark.parametrize("op,field", [("TRANSPOSE", "perms"), ("AVG_POOL2D", "kernel"),
                                      ("MAX_POOL2D", "stride"), ("CONV2D", "dilation")])
def test_attribute_vector_absent_or_empty(op, field):
    """An attribute vector absent or empty reads as () and is refused by the same ERROR_IF
    (the spec fixes its length), never a crash on None."""
    def set_field(g: Any, v: Any) -> None:
        o = next(o for o in _main(g).operators if o.op == OP_VALUES[op])
        setattr(o.attribute, field, v)

    errors = []
    for v in _both(_attr_graph(op), set_field, np.zeros(0, np.int32)):
        o = next(o for o in tosa_jax.read(v).main.operators if o.op == op)
        assert o.attrs[field] == ()
        with pytest.raises(tosa_jax.TosaValidationError) as e:
            tosa_jax.load(v)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and field in errors[0]


@pytest.mark.parametrize("op,field", [("COND_IF", "thenGraph"), ("WHILE_LOOP", "bodyGraph")])
def test_attribute_string_absent_or_empty(op, field):
    """A control-flow operator whose block name is absent or empty: read as "", refused alike."""
    main = GraphBuilder()
    if op == "COND_IF":
        c = main.input("c", (), "BOOL")
        x = main.input("x", (2,), "INT32")
        y = main.op("COND_IF", [c, x], (2,), "INT32", then_graph="t", else_graph="e")
    else:
        x = main.input("x", (), "INT32")
        y = main.op("WHILE_LOOP", [x], (), "INT32", cond_graph="c", body_graph="b")
    buf = tosa_jax.write(main.build([y]))

    def set_field(g: Any, v: Any) -> None:
        setattr(_main(g).operators[-1].attribute, field, v)

    errors = []
    for v in _both(buf, set_field, ""):
        o = tosa_jax.read(v).main.operators[-1]
        assert o.attrs[tosa_jax.serialization._snake(field)] == ""
        with pytest.raises(tosa_jax.TosaError) as e:
            tosa_jax.load(v)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_block_lists_absent_or_empty():
    """Block inputs, outputs, operators, tensors and shapes and operator inputs: absent or
    empty, the same Graph."""
    b = GraphBuilder()
    y = b.const([1, 2], "INT32", name="y")
    buf = tosa_jax.write(b.build([y]))

    def clear(g: Any, v: Any) -> None:
        blk = _main(g)
        blk.inputs = v
        blk.shapes = v
        _main(g).operators[0].inputs = v
    absent, empty = _both(buf, clear, [])
    assert tosa_jax.read(absent) == tosa_jax.read(empty)
    np.testing.assert_array_equal(tosa_jax.load(absent)(), [1, 2])
    absent, empty = _both(buf, lambda g, v: setattr(_main(g), "outputs", v), [])
    assert tosa_jax.read(absent) == tosa_jax.read(empty)
    assert tosa_jax.read(absent).main.outputs == []
