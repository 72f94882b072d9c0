"""TOSA flatbuffer <-> IR: the reader checks what it is given, the writer makes what it reads.

Built on the flatc-generated object API in ``_schema``. Everything the reader cannot make sense of
becomes a TosaFormatError or TosaVersionError; nothing from a corrupt file escapes as another
exception, and every declared size is checked against the buffer before data is decoded.
"""

from __future__ import annotations

import re
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
    Block,
    Graph,
    Operator,
    Region,
    Tensor,
    num_elements,
)

FILE_IDENTIFIER = b"TOSA"
# Limits on what a file may declare, checked before anything is allocated.
MAX_RANK = 16
MAX_ELEMENTS = 1 << 32


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


def encode_data(values: np.ndarray, dtype: str) -> np.ndarray:
    """Encode host values of ``dtype`` as the little-endian byte vector the schema stores."""
    flat = np.asarray(values, dtype=HOST_DTYPES[dtype]).reshape(-1)
    if dtype == "INT4":
        nib = (flat.astype(np.uint8) & 0xF)
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    if dtype == "INT48":
        return flat.astype("<i8").view(np.uint8).reshape(-1, 8)[:, :6].reshape(-1).copy()
    if dtype == "BOOL":
        return flat.astype(np.uint8)
    return flat.astype(HOST_DTYPES[dtype].newbyteorder("<")).view(np.uint8).copy()


def _dtype_name(value: int, what: str) -> str:
    name = DTYPE_NAMES.get(value)
    if name is None:
        raise TosaFormatError(f"{what}: unknown element type code {value}")
    if name not in HOST_DTYPES:
        raise TosaUnsupportedError(f"{what}: element type {name} is not part of TOSA 1.0")
    return name


def _shape(values: Any, what: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in (values if values is not None else ()))
    if len(shape) > MAX_RANK:
        raise TosaLimitError(f"{what}: rank {len(shape)} is over the limit of {MAX_RANK}")
    if any(d < 0 for d in shape):
        raise TosaFormatError(f"{what}: negative dimension in shape {list(shape)}")
    if num_elements(shape) > MAX_ELEMENTS:
        raise TosaLimitError(f"{what}: shape {list(shape)} declares {num_elements(shape)} "
                             f"elements, over the limit of {MAX_ELEMENTS}")
    return shape


def _tensor(t: Any, where: str) -> Tensor:
    name = t.name.decode() if isinstance(t.name, bytes) else t.name
    what = f"tensor {name!r} in {where}"
    if t.isUnranked:
        raise TosaUnsupportedError(f"{what}: unranked tensors are not part of TOSA 1.0")
    dtype = _dtype_name(t.type, what)
    shape = _shape(t.shape, what)
    data = None
    if t.offset > 1 or t.size:
        raise TosaUnsupportedError(f"{what}: data stored outside the flatbuffer (>2 GB models)")
    if t.data is not None and len(t.data):
        data = decode_data(np.asarray(t.data), dtype, shape, what)
    vname = t.variableName.decode() if isinstance(t.variableName, bytes) else t.variableName
    return Tensor(name, shape, dtype, data, bool(t.variable), vname)


def _attrs(op_name: str, attr: Any, input_dtype: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if attr is None:
        return out
    for key, value in vars(attr).items():
        key = _snake(key)
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


def _block(b: Any, region: str) -> Block:
    name = _str(b.name)
    where = f"block {name!r} of region {region!r}"
    block = Block(name)
    for t in b.tensors or []:
        tensor = _tensor(t, where)
        block.tensors[tensor.name] = tensor
    for s in b.shapes or []:  # 1.1-draft files may keep shapes apart from tensors
        sname = _str(s.name)
        data = None
        if s.data is not None and len(s.data):
            data = decode_data(np.asarray(s.data), "SHAPE", (int(s.rank),), f"shape {sname!r}")
        block.tensors[sname] = Tensor(sname, (int(s.rank),), "SHAPE", data)
    for i, o in enumerate(b.operators or []):
        op_name = OP_NAMES.get(o.op)
        location = (_str(o.location.text) if o.location is not None else "") or None
        if op_name is None or op_name == "UNKNOWN":
            raise TosaUnsupportedError(
                f"operator #{i} of {where}: unknown operator code {o.op}"
                + (f" (at {location})" if location else ""))
        inputs = [_str(n) for n in (o.inputs or [])]
        first = block.tensors.get(inputs[0]) if inputs else None
        attrs = _attrs(op_name, o.attribute, first.dtype if first is not None else None)
        block.operators.append(Operator(op_name, inputs, [_str(n) for n in (o.outputs or [])],
                                        attrs, location))
    block.inputs = [_str(n) for n in (b.inputs or [])]
    block.outputs = [_str(n) for n in (b.outputs or [])]
    return block


def _str(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def check_version(version: tuple[int, int, int, bool]) -> None:
    """Accept TOSA 1.0.x, and 1.1.0 drafts (tosa-tools 2026.8 stamps its 1.0.2 tests so)."""
    major, minor, patch, draft = version
    if (major, minor) == (1, 0) or (major, minor, patch) == (1, 1, 0) and draft:
        return
    stamp = f"{major}.{minor}.{patch}" + ("-draft" if draft else "")
    raise TosaVersionError(
        f"TOSA version {stamp} is not supported: tosa_jax reads TOSA 1.0.x "
        f"(and the 1.1.0 draft stamp of tosa-tools' 1.0.2 conformance tests)")


def read(data: bytes | bytearray | memoryview) -> Graph:
    """Decode a TOSA flatbuffer into a Graph, refusing anything malformed with a TosaError."""
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
        g = fb.TosaGraphT.InitFromObj(root)
        regions = []
        for r in g.regions or []:
            rname = _str(r.name)
            regions.append(Region(rname, [_block(b, rname) for b in (r.blocks or [])]))
    except TosaError:
        raise
    except RecursionError as e:
        raise TosaFormatError("corrupt TOSA flatbuffer: nesting too deep") from e
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
            b.tensors, b.operators = [], []
            for t in block.tensors.values():
                ft = fb.TosaTensorT()
                ft.name, ft.shape, ft.type = t.name, list(t.shape), DTYPE_VALUES[t.dtype]
                ft.variable, ft.variableName = t.variable, t.variable_name
                if t.data is not None:
                    ft.data = encode_data(t.data, t.dtype)
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
