"""TOSA flatbuffer <-> IR: the reader checks what it is given, the writer makes what it reads.

Built on the flatc-generated object API in ``_schema``. Everything the reader cannot make sense of
becomes a TosaFormatError or TosaVersionError; nothing from a corrupt file escapes as another
exception, and every declared size is checked against the buffer before data is decoded.
"""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any

import flatbuffers
import numpy as np

from tosa_jax._schema import tosa_generated as fb
from tosa_jax.errors import (
    TosaError,
    TosaFormatError,
    TosaLimitError,
    TosaUnsupportedError,
    TosaVersionError,
)
from tosa_jax.ir import (
    HOST_DTYPES,
    STORAGE_BITS,
    TYPES_1_1,
    Block,
    Graph,
    Operator,
    Region,
    Tensor,
    block_scale_shape,
    file_bytes,
    is_1_1,
    num_elements,
)
from tosa_jax.limits import Limits, SizeBudget, tensor_bytes

FILE_IDENTIFIER = b"TOSA"


def _enum_names(cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


DTYPE_NAMES = _enum_names(fb.DType)
DTYPE_VALUES = {v: k for k, v in DTYPE_NAMES.items()}
OP_NAMES = _enum_names(fb.Op)
OP_VALUES = {v: k for k, v in OP_NAMES.items()}
_ENUM_FIELDS: dict[str, dict[int, str]] = {
    "acc_type": DTYPE_NAMES,
    "nan_mode": _enum_names(fb.NanPropagationMode),
    "rounding_mode": _enum_names(fb.RoundingMode),
    "mode": _enum_names(fb.ResizeMode),
}
# The Attribute union lists one table per operator in Op order, so op value == union type.
_ATTR_CLASSES: dict[int, type] = {
    value: getattr(fb, name + "T") for name, value in vars(fb.Attribute).items()
    if not name.startswith("_") and isinstance(value, int) and value != 0
}
# Attributes whose raw bytes hold a value of the operator's input element type.
_TYPED_BYTE_FIELDS = ("min_val", "max_val")
# Attributes that are strings (the other optional attribute fields are vectors).
_STRING_FIELDS = ("operator_name", "domain_name", "then_graph", "else_graph", "cond_graph",
                  "body_graph")


@cache
def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# ----------------------------------------------------------------------------- reading


def decode_data(raw: np.ndarray, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Decode a little-endian data vector into the host representation of ``dtype``."""
    count = num_elements(shape)
    need = (count * STORAGE_BITS[dtype] + 7) // 8
    if raw.size < need:
        raise TosaFormatError(
            f"{what}: data holds {raw.size} bytes, but shape {list(shape)} of {dtype} needs {need}")
    # Writers may pad the vector (tosa-tools pads to an alignment); the values come first.
    raw = np.ascontiguousarray(raw[:need], dtype=np.uint8)
    if dtype == "INT4":
        nibbles = np.empty(raw.size * 2, dtype=np.uint8)
        nibbles[0::2], nibbles[1::2] = raw & 0xF, raw >> 4
        values = ((nibbles[:count].astype(np.int8) << 4) >> 4).astype(np.int8)
    elif dtype in ("FP4E2M1", "FP6E2M3", "FP6E3M2"):
        values = unpack_bits(raw, STORAGE_BITS[dtype], count).view(HOST_DTYPES[dtype])
    elif dtype == "INT48":
        b = np.zeros((count, 8), dtype=np.uint8)
        b[:, :6] = raw.reshape(count, 6)
        b[:, 6:] = np.where(b[:, 5:6] & 0x80, 0xFF, 0)[:, :1]
        values = b.view("<i8").reshape(count)
    elif dtype == "BOOL":
        values = raw != 0
    else:
        values = raw.view(HOST_DTYPES[dtype].newbyteorder("<")).astype(HOST_DTYPES[dtype])
    return values.reshape(shape)


def unpack_bits(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` codes of ``bits`` bits each from a little-endian bit stream (the first code in
    the lowest bits of the first byte), as uint8: how tosa-tools packs FP4 and FP6 data."""
    stream = np.unpackbits(np.asarray(raw, dtype=np.uint8), bitorder="little")
    codes = stream[:count * bits].reshape(count, bits)
    return np.packbits(codes, axis=1, bitorder="little").reshape(count)


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of ``unpack_bits``: uint8 codes packed ``bits`` bits each, zero padded."""
    flat = np.asarray(codes, dtype=np.uint8).reshape(-1, 1)
    stream = np.unpackbits(flat, axis=1, bitorder="little")[:, :bits].reshape(-1)
    return np.packbits(stream, bitorder="little")


def encode_data(values: np.ndarray, dtype: str) -> np.ndarray:
    """Encode host values of ``dtype`` as the little-endian byte vector the schema stores."""
    flat = np.asarray(values, dtype=HOST_DTYPES[dtype]).reshape(-1)
    if dtype == "INT4":
        nib = (flat.astype(np.uint8) & 0xF)
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    if dtype in ("FP4E2M1", "FP6E2M3", "FP6E3M2"):
        return pack_bits(flat.view(np.uint8), STORAGE_BITS[dtype])
    if dtype == "INT48":
        return flat.astype("<i8").view(np.uint8).reshape(-1, 8)[:, :6].reshape(-1).copy()
    if dtype == "BOOL":
        return flat.astype(np.uint8)
    return flat.astype(HOST_DTYPES[dtype].newbyteorder("<")).view(np.uint8).copy()


def _dtype_name(value: int, what: str, version: tuple[int, int, int, bool]) -> str:
    name = DTYPE_NAMES.get(value)
    if name is None:
        raise TosaFormatError(f"{what}: unknown element type code {value}")
    if name not in HOST_DTYPES:
        raise TosaUnsupportedError(f"{what}: element type {name} is not supported by tosa_jax")
    if name in TYPES_1_1 and not is_1_1(version):
        raise TosaUnsupportedError(
            f"{what}: element type {name} is not part of TOSA 1.0 (the graph is stamped "
            f"{version[0]}.{version[1]}.{version[2]}; {name} needs TOSA 1.1)")
    return name


def _str(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def check_version(version: tuple[int, int, int, bool]) -> None:
    """Accept TOSA 1.0.x, and 1.1.0 drafts as tosa-tools 2026.8 defines them (it stamps every
    graph it writes so, its 1.0.2 conformance tests included)."""
    major, minor, patch, draft = version
    if (major, minor) == (1, 0) or (major, minor, patch) == (1, 1, 0) and draft:
        return
    stamp = f"{major}.{minor}.{patch}" + ("-draft" if draft else "")
    raise TosaVersionError(
        f"TOSA version {stamp} is not supported: tosa_jax reads TOSA 1.0.x "
        f"and the 1.1.0 draft of tosa-tools 2026.8")


# Per materialised item (name, list entry, table): a generous stand-in for Python's overhead.
_ITEM_COST = 64


class _Reader:
    """Walks the flatbuffer table by table, within two budgets fixed before anything is read.

    * Declared tensor sizes go to a ``SizeBudget`` (``Limits``), checked before data is decoded.
    * Names, lists and attribute vectors are charged as they are materialised: a flatbuffer may
      point many times at the same string, table or vector, so a small file could otherwise
      expand without bound. A sound file needs far less than ``64 * len(file) + 1 MiB``.
    """

    def __init__(self, buf: bytes, limits: Limits,
                 version: tuple[int, int, int, bool] = (1, 0, 0, False)) -> None:
        self.buf = buf
        self.version = version
        self.limits = limits
        self.sizes = SizeBudget(limits)
        self.budget = _ITEM_COST * len(buf) + (1 << 20)
        self.spent = 0
        # each tensor table's name, type, shape and block scaling, read once (graph)
        self.declared: dict[int, tuple[str, str, tuple[int, ...], tuple[str, int] | None]] = {}

    def charge(self, n: int) -> None:
        self.spent += n + _ITEM_COST
        if self.spent > self.budget:
            raise TosaFormatError(
                f"corrupt TOSA flatbuffer: its {len(self.buf)} bytes expand to more than "
                f"{self.budget} bytes of names, lists and tables (offsets pointing many times "
                "at the same data)")

    def string(self, value: bytes | None) -> str:
        self.charge(len(value) if value is not None else 0)
        return _str(value)

    def strings(self, get: Any, count: int) -> list[str]:
        return [self.string(get(i)) for i in range(count)]

    def graph(self, root: Any) -> list[Region]:
        # First the declared sizes of every tensor, against the limits, before any data is read.
        # Every table visited is charged: shared offsets cannot multiply the work either.
        for i in range(root.RegionsLength()):
            r = root.Regions(i)
            self.charge(0)
            for j in range(r.BlocksLength()):
                b = r.Blocks(j)
                self.charge(0)
                where = f"block #{j} of region #{i}"
                for k in range(b.TensorsLength()):
                    t = b.Tensors(k)
                    name = self.string(t.Name())
                    what = f"tensor {name!r} in {where}"
                    dtype = _dtype_name(t.Type(), what, self.version)
                    shape = self.shape(t.ShapeAsNumpy(), what)
                    self.sizes.add(shape, dtype, what)
                    scaled = self.block_scale(t, what)
                    if scaled is not None:
                        self.sizes.add(block_scale_shape(shape, scaled[1]), scaled[0],
                                       f"scales of {what}")
                    # (kept for the second pass, by the table's position: a quarter of the
                    # reading of lstm_int8's 4,109 operators was reading these again)
                    self.declared[t._tab.Pos] = (name, dtype, shape, scaled)
                for k in range(b.ShapesLength()):
                    self.charge(0)
                    self.sizes.add((int(b.Shapes(k).Rank()),), "SHAPE", f"shape #{k} in {where}")
        self.sizes.check()
        regions = []
        for i in range(root.RegionsLength()):
            r = root.Regions(i)
            rname = self.string(r.Name())
            regions.append(Region(rname, [self.block(r.Blocks(j), rname)
                                          for j in range(r.BlocksLength())]))
        return regions

    def shape(self, values: Any, what: str) -> tuple[int, ...]:
        if values is None or isinstance(values, int):  # absent vector: rank 0
            values = ()
        if len(values) > self.limits.max_rank:
            raise TosaLimitError(f"{what}: rank {len(values)} is over the limit of "
                                 f"{self.limits.max_rank}")
        self.charge(8 * len(values))
        shape = tuple(int(d) for d in values)
        if any(d < 0 for d in shape):
            raise TosaFormatError(f"{what}: negative dimension in shape {list(shape)}")
        return shape

    def data(self, raw: Any, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray | None:
        """The values of a tensor or shape, the same rule wherever a data vector is read.

        Absent (the accessor gives 0): no data. Present and empty: the data of a zero-element
        tensor (a rank-0 shape), else no data, as serializers write an empty vector for every
        tensor that is not a constant. Present with bytes: decoded, its size checked.
        """
        if isinstance(raw, int) or (not len(raw) and num_elements(shape) != 0):
            return None
        self.charge(min(len(raw), tensor_bytes(shape, dtype)))
        return decode_data(raw, dtype, shape, what)

    def block_scale(self, t: Any, what: str) -> tuple[str, int] | None:
        """(scale type, block size) of a TOSA 1.1 block-scaled tensor, None for another one.

        tosa-tools writes bs32_fp8ue8m0_* tensors as their value type with ``scale_type``
        FP8UE8M0 and ``block_shape`` BLOCK_SHAPE_32 (the only block_scale_t set of the draft)."""
        scale_type, block = int(t.ScaleType()), int(t.BlockShape())
        if not scale_type and not block:
            return None
        scale = _dtype_name(scale_type, f"scales of {what}", self.version)
        if (scale, block) != ("FP8UE8M0", 32):
            raise TosaUnsupportedError(
                f"{what}: block-scaled with scale type {scale} and block shape {block}: TOSA 1.1 "
                "defines block_scale_t<BLOCK_SHAPE_32, fp8ue8m0_t, ...> only")
        if not is_1_1(self.version):
            raise TosaUnsupportedError(f"{what}: block-scaled tensors need TOSA 1.1")
        return scale, block

    def tensor(self, t: Any, where: str) -> Tensor:
        name, dtype, shape, scaled = self.declared[t._tab.Pos]  # (checked in graph's first pass)
        what = f"tensor {name!r} in {where}"
        if t.IsUnranked():
            raise TosaUnsupportedError(f"{what}: unranked tensors are not part of TOSA 1.0")
        if t.Offset() > 1 or t.Size():
            raise TosaUnsupportedError(
                f"{what}: data stored outside the flatbuffer (>2 GB models)")
        data = self.data(t.DataAsNumpy(), dtype, shape, what)
        vname = t.VariableName()
        tensor = Tensor(name, shape, dtype, data, bool(t.Variable()),
                        None if vname is None else self.string(vname))
        if scaled is not None:
            if t.ScaleOffset() > 1 or t.ScaleSize():
                raise TosaUnsupportedError(
                    f"{what}: scales stored outside the flatbuffer (>2 GB models)")
            tensor.scale_dtype, tensor.block_size = scaled
            tensor.scale_data = self.data(t.ScaleDataAsNumpy(), scaled[0], tensor.scale_shape,
                                          f"scales of {what}")
            if (data is None) != (tensor.scale_data is None):
                raise TosaFormatError(f"{what}: a block-scaled constant needs both its values "
                                      "and its scales")
        return tensor

    def attrs(self, op_name: str, attr: Any, input_dtype: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if attr is None:
            return out
        self.charge(0)
        for key, value in vars(attr).items():
            key = _snake(key)
            if value is None and key not in _TYPED_BYTE_FIELDS:
                # An absent vector or string reads as an empty one, as in the reference model.
                value = "" if key in _STRING_FIELDS else ()
            if isinstance(value, (bytes, str, np.ndarray, list)):
                self.charge(8 * len(value))
            if key in _ENUM_FIELDS:
                value = _ENUM_FIELDS[key].get(int(value), f"UNKNOWN({int(value)})")
            elif key in _TYPED_BYTE_FIELDS and input_dtype is not None:
                raw = np.asarray(value if value is not None else [], dtype=np.uint8)
                value = decode_data(raw, input_dtype, (), f"{op_name} attribute {key}")[()]
            elif isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, np.ndarray) or isinstance(value, list):
                value = tuple(int(v) for v in value)
            elif isinstance(value, (bool, np.bool_)):
                value = bool(value)
            out[key] = value
        return out

    def operator(self, o: Any, i: int, block: Block, where: str) -> Operator:
        self.charge(0)
        op_name = OP_NAMES.get(o.Op())
        loc = o.Location()
        location = (self.string(loc.Text()) if loc is not None else "") or None
        if op_name is None or op_name == "UNKNOWN":
            raise TosaUnsupportedError(
                f"operator #{i} of {where}: unknown operator code {o.Op()}"
                + (f" (at {location})" if location else ""))
        inputs = self.strings(o.Inputs, o.InputsLength())
        outputs = self.strings(o.Outputs, o.OutputsLength())
        first = block.tensors.get(inputs[0]) if inputs else None
        table = o.Attribute()
        cls = _ATTR_CLASSES.get(o.AttributeType())
        attr = None if table is None or cls is None else cls.InitFromBuf(table.Bytes, table.Pos)
        attrs = self.attrs(op_name, attr, first.dtype if first is not None else None)
        return Operator(op_name, inputs, outputs, attrs, location)

    def block(self, b: Any, region: str) -> Block:
        name = self.string(b.Name())
        where = f"block {name!r} of region {region!r}"
        block = Block(name)
        for i in range(b.TensorsLength()):
            tensor = self.tensor(b.Tensors(i), where)
            block.tensors[tensor.name] = tensor
        for i in range(b.ShapesLength()):  # 1.1-draft files may keep shapes apart from tensors
            s = b.Shapes(i)
            sname = self.string(s.Name())
            shape = (int(s.Rank()),)
            data = self.data(s.DataAsNumpy(), "SHAPE", shape, f"shape {sname!r}")
            block.tensors[sname] = Tensor(sname, shape, "SHAPE", data)
        for i in range(b.OperatorsLength()):
            op = self.operator(b.Operators(i), i, block, where)
            block.operators.append(op)
            # The reference model reads an absent vector as an empty one: a constant of zero
            # elements (a rank-0 CONST_SHAPE) needs no bytes, whichever way it was written.
            out = block.tensors.get(op.outputs[0]) if len(op.outputs) == 1 else None
            if (op.op in ("CONST", "CONST_SHAPE") and out is not None and out.data is None
                    and num_elements(out.shape) == 0):
                out.data = np.zeros(out.shape, HOST_DTYPES[out.dtype])
        block.inputs = self.strings(b.Inputs, b.InputsLength())
        block.outputs = self.strings(b.Outputs, b.OutputsLength())
        return block


def read(data: bytes | bytearray | memoryview | str | os.PathLike, *,
         max_elements: int | None = None, max_bytes: int | None = None,
         limits: Limits | None = None) -> Graph:
    """Decode a TOSA flatbuffer (bytes, or the path of a .tosa file) into a Graph, refusing
    anything malformed with a TosaError (naming the file, for a path).

    Declared sizes are checked against ``limits`` (by default ``Limits.default()`` with
    ``max_elements``/``max_bytes`` in place) before anything is allocated: see ``limits.py``.
    """
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        raw = file_bytes(path)
        try:
            return read(raw, max_elements=max_elements, max_bytes=max_bytes, limits=limits)
        except TosaError as e:
            raise type(e)(f"{path}: {e}") from e
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TosaFormatError(f"cannot read a TOSA graph from {type(data).__name__}: give "
                              "bytes or a path")
    if limits is None:
        limits = Limits.default(max_elements=max_elements, max_bytes=max_bytes)
    buf = bytes(data)
    if len(buf) < 8:
        raise TosaFormatError(f"not a TOSA flatbuffer: only {len(buf)} bytes")
    if buf[4:8] != FILE_IDENTIFIER:
        raise TosaFormatError(
            f"not a TOSA flatbuffer: file identifier is {buf[4:8]!r}, expected {FILE_IDENTIFIER!r}")
    try:
        root = fb.TosaGraph.GetRootAs(buf, 0)
        v = root.Version()
        if v is None:
            raise TosaFormatError("corrupt TOSA flatbuffer: no version table")
        version = (v._Major(), v._Minor(), v._Patch(), bool(v._Draft()))
        check_version(version)
        regions = _Reader(buf, limits, version).graph(root)
    except TosaError:
        raise
    except RecursionError as e:
        raise TosaFormatError("corrupt TOSA flatbuffer: nesting too deep") from e
    except MemoryError:
        raise
    except Exception as e:  # any decoding failure of a damaged buffer
        raise TosaFormatError(
            f"corrupt or truncated TOSA flatbuffer ({type(e).__name__}: {e})") from e
    if not regions or not regions[0].blocks:
        raise TosaFormatError("TOSA flatbuffer has no region or no block: nothing to run")
    return Graph(version, regions)


# ----------------------------------------------------------------------------- writing


def _attr_object(op: Operator, block: Block) -> tuple[int, Any]:
    value = OP_VALUES[op.op]
    cls = _ATTR_CLASSES[value]
    obj = cls()
    input_dtype = block.tensors[op.inputs[0]].dtype if op.inputs else None
    enum_values = {k: {n: v for v, n in m.items()} for k, m in _ENUM_FIELDS.items()}
    for key in vars(obj):
        name = _snake(key)
        if name not in op.attrs:
            continue
        attr = op.attrs[name]
        if name in enum_values:
            attr = enum_values[name][attr]
        elif name in _TYPED_BYTE_FIELDS:
            attr = encode_data(np.asarray(attr), input_dtype)
        elif isinstance(attr, (tuple, list)):
            attr = np.asarray(attr, dtype=np.int32)
        setattr(obj, key, attr)
    unknown = set(op.attrs) - {_snake(k) for k in vars(obj)}
    if unknown:
        raise TosaError(f"{op.op} has no attribute(s) {sorted(unknown)}")
    return value, obj


def _shape_object(t: Tensor) -> Any:
    """A SHAPE value as the block's ``shapes`` entry, as tosa-tools' serializer writes it.

    The reference serializer (``TosaSerializerShape``) never puts a SHAPE among the tensors:
    MLIR-based readers (tosa-opt's importer, Arm's model-converter) build a ranked tensor type
    from every ``tensors`` entry and refuse the ``!tosa.shape`` type there. ``rank`` is the
    number of values (a shape of rank 0 is the empty shape), and ``data`` is written only when
    there is at least one value, as the reference serializer does.
    """
    if len(t.shape) > 1:
        raise TosaError(f"SHAPE tensor {t.name!r} has shape {list(t.shape)}: a shape value is "
                        "one-dimensional")
    fs = fb.TosaShapeT()
    fs.name, fs.rank = t.name, int(t.shape[0]) if t.shape else 0
    if t.data is not None and num_elements(t.shape):
        fs.data = encode_data(t.data, "SHAPE")
    return fs


def write(graph: Graph) -> bytes:
    """Serialise a Graph as a TOSA flatbuffer."""
    g = fb.TosaGraphT()
    g.version = fb.VersionT()
    g.version._Major, g.version._Minor, g.version._Patch, g.version._Draft = graph.version
    g.regions = []
    for region in graph.regions:
        r = fb.TosaRegionT()
        r.name, r.blocks = region.name, []
        for block in region.blocks:
            b = fb.TosaBasicBlockT()
            b.name, b.inputs, b.outputs = block.name, list(block.inputs), list(block.outputs)
            b.tensors, b.operators, b.shapes = [], [], []
            for t in block.tensors.values():
                if t.dtype == "SHAPE":
                    b.shapes.append(_shape_object(t))
                    continue
                ft = fb.TosaTensorT()
                ft.name, ft.shape, ft.type = t.name, list(t.shape), DTYPE_VALUES[t.dtype]
                ft.variable, ft.variableName = t.variable, t.variable_name
                if t.data is not None:
                    ft.data = encode_data(t.data, t.dtype)
                if t.block_scaled:
                    ft.scaleType, ft.blockShape = DTYPE_VALUES[t.scale_dtype], t.block_size
                    if t.scale_data is not None:
                        ft.scaleData = encode_data(t.scale_data, t.scale_dtype)
                b.tensors.append(ft)
            for op in block.operators:
                fo = fb.TosaOperatorT()
                fo.op = OP_VALUES[op.op]
                fo.attributeType, fo.attribute = _attr_object(op, block)
                fo.inputs, fo.outputs = list(op.inputs), list(op.outputs)
                if op.location:
                    fo.location = fb.OpLocationT()
                    fo.location.text = op.location
                b.operators.append(fo)
            r.blocks.append(b)
        g.regions.append(r)
    builder = flatbuffers.Builder(1024)
    builder.Finish(g.Pack(builder), FILE_IDENTIFIER)
    return bytes(builder.Output())
