"""A faster stand-in for ``flatbuffers.table.Table``, the one class the generated reader code
reads every field through.

The library's Table reads each field with three or four calls per value (a type check, a
struct lookup, an unpack), and finds the table's vtable again for every field: reading
lstm_int8 (4,109 operators) took 0.8 s, most of a fresh first result's parse. This one reads
the same bytes with one precompiled ``struct`` unpack per value and finds each table's vtable
once. The generated code (``tosa_generated``, kept byte-identical to flatc's output) uses it
through ``install``; the library and its other users are not touched.

A damaged buffer fails as it did: an offset past the buffer's end raises (``struct.error``,
``ValueError``), which the reader turns into a TosaFormatError. Every position is a sum of
unsigned offsets but a vtable's (a table's position minus a signed one): only that one can be
negative, which ``struct`` would read from the buffer's end, so only that one is checked.
"""

from __future__ import annotations

import struct
import types
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers import number_types as N

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
# flags class -> (unpack, numpy type): the scalar types the schema's fields use.
_FLAGS = {
    flags: (struct.Struct("<" + code).unpack_from, np.dtype("<" + code))
    for flags, code in ((N.BoolFlags, "?"), (N.Uint8Flags, "B"), (N.Uint16Flags, "H"),
                        (N.Uint32Flags, "I"), (N.Uint64Flags, "Q"), (N.Int8Flags, "b"),
                        (N.Int16Flags, "h"), (N.Int32Flags, "i"), (N.Int64Flags, "q"),
                        (N.Float32Flags, "f"), (N.Float64Flags, "d"),
                        (N.UOffsetTFlags, "I"), (N.SOffsetTFlags, "i"),
                        (N.VOffsetTFlags, "H"))
}


class Table(flatbuffers.table.Table):
    """Read access to one flatbuffer table: the methods the generated code calls. (A subclass:
    the generated ``AttributeCreator`` checks for the library's class.)"""

    __slots__ = ("_vtable", "_vtable_end")

    def __init__(self, buf: Any, pos: int) -> None:
        self.Bytes = buf
        self.Pos = pos
        self._vtable = -1

    def Offset(self, slot: int) -> int:  # noqa: N802 (the library's names)
        vtable = self._vtable
        if vtable < 0:
            buf = self.Bytes
            vtable = self.Pos - _I32(buf, self.Pos)[0]
            if vtable < 0:
                raise ValueError(f"a table at {self.Pos} has its vtable before the buffer")
            self._vtable, self._vtable_end = vtable, _U16(buf, vtable)[0]
        return _U16(self.Bytes, vtable + slot)[0] if slot < self._vtable_end else 0

    def Indirect(self, off: int) -> int:  # noqa: N802
        return off + _U32(self.Bytes, off)[0]

    def String(self, off: int) -> bytes:  # noqa: N802
        buf = self.Bytes
        off += _U32(buf, off)[0]
        start = off + 4
        return bytes(buf[start:start + _U32(buf, off)[0]])

    def VectorLen(self, off: int) -> int:  # noqa: N802
        buf = self.Bytes
        off += self.Pos
        off += _U32(buf, off)[0]
        return _U32(buf, off)[0]

    def Vector(self, off: int) -> int:  # noqa: N802
        off += self.Pos
        return off + _U32(self.Bytes, off)[0] + 4

    def Union(self, t2: Table, off: int) -> None:  # noqa: N802
        off += self.Pos
        t2.Pos = off + _U32(self.Bytes, off)[0]
        t2.Bytes = self.Bytes
        t2._vtable = -1

    def Get(self, flags: type, off: int) -> Any:  # noqa: N802
        return _FLAGS[flags][0](self.Bytes, off)[0]

    def GetSlot(self, slot: int, d: Any, validator_flags: type) -> Any:  # noqa: N802
        off = self.Offset(slot)
        return d if off == 0 else self.Get(validator_flags, self.Pos + off)

    def GetVectorAsNumpy(self, flags: type, off: int) -> np.ndarray:  # noqa: N802
        return np.frombuffer(self.Bytes, _FLAGS[flags][1], self.VectorLen(off), self.Vector(off))

    def GetArrayAsNumpy(self, flags: type, off: int, length: int) -> np.ndarray:  # noqa: N802
        return np.frombuffer(self.Bytes, _FLAGS[flags][1], length, off)

    def GetVOffsetTSlot(self, slot: int, d: int) -> int:  # noqa: N802
        off = self.Offset(slot)
        return d if off == 0 else off


def install(generated: types.ModuleType) -> None:
    """Make the generated module build its tables as ``Table`` (its module globals only)."""
    library = types.SimpleNamespace(**{k: getattr(flatbuffers, k) for k in dir(flatbuffers)
                                       if not k.startswith("__")})
    library.table = types.SimpleNamespace(Table=Table)
    generated.flatbuffers = library
    generated.Table = Table
