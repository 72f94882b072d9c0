"""Front doors: every format a user holds becomes a TOSA flatbuffer, then goes through the one
reader (``serialization.read``) and the one Model, so checks and errors are the same for all.

* TOSA flatbuffer (file identifier ``TOSA``): read as it is;
* TOSA MLIR text or bytecode (``ML\\xefR``): ``tosa-opt`` (``frontends.mlir``);
* TFLite flatbuffer (file identifier ``TFL3``): ``tosa-converter-for-tflite``, then ``tosa-opt``
  (``frontends.tflite``);
* a PyTorch module: ``tosa_jax.from_torch`` (``frontends.pytorch``, ExecuTorch's Arm backend).

The format is told by content, never by the file name. Converters are optional extras (the
runtime needs only jax, jaxlib, numpy and flatbuffers); a missing one raises
TosaConverterMissingError naming the extra. Conversions are cached by content hash
(``frontends._cache``) and show their progress on stderr once they take over a second.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tosa_jax import serialization
from tosa_jax.errors import TosaError, TosaFormatError
from tosa_jax.frontends import _cache, _tools, mlir, tflite
from tosa_jax.ir import Graph, source_bytes
from tosa_jax.limits import Limits

FORMATS = {
    "tosa": "TOSA flatbuffer",
    "mlir": "TOSA MLIR text",
    "mlirbc": "TOSA MLIR bytecode",
    "tflite": "TFLite flatbuffer",
}
HINT = ("tosa_jax reads TOSA flatbuffers (.tosa), TOSA MLIR text or bytecode (.mlir, .mlirbc) "
        "and TFLite flatbuffers (.tflite), told apart by their content")


def detect(data: bytes) -> str | None:
    """The format of ``data`` (a key of FORMATS), or None when it is none of them."""
    if data[4:8] == serialization.FILE_IDENTIFIER:
        return "tosa"
    if tflite.is_tflite(data):
        return "tflite"
    if mlir.is_bytecode(data):
        return "mlirbc"
    if mlir.is_text(data):
        return "mlir"
    return None


def to_tosa(data: bytes, *, what: str = "input", progress: bool = True) -> bytes:
    """A TOSA flatbuffer from any front-door format (a TOSA flatbuffer is returned as it is;
    bytes of no known format too, for the reader to refuse)."""
    fmt = detect(data)
    if fmt in (None, "tosa"):
        return data
    label = f"{what} ({FORMATS[fmt]} -> TOSA)"
    with _tools.Progress(label, enabled=progress) as bar:
        if fmt == "tflite":
            cid = tflite.converter_id()
            key = _cache.key(data, fmt, cid, mlir.source_name(what))
            out, _ = _cache.cached(key, lambda: tflite.to_flatbuffer(data, what, bar))
        else:
            cid = mlir.converter_id()
            key = _cache.key(data, fmt, cid, mlir.source_name(what))
            out, _ = _cache.cached(key, lambda: mlir.to_flatbuffer(data, what))
    return out


def read(data: bytes, limits: Limits | None = None, *, what: str = "input") -> Graph:
    """A Graph from the bytes of any front-door format."""
    data = bytes(data)
    fmt = detect(data)
    if fmt is None:
        try:
            return serialization.read(data, limits=limits)
        except TosaFormatError as e:
            raise type(e)(f"{e} ({HINT})") from e
    if fmt == "tosa":
        return serialization.read(data, limits=limits)
    tosa = to_tosa(data, what=what)
    try:
        return serialization.read(tosa, limits=limits)
    except TosaError as e:
        raise type(e)(f"{e} (in the TOSA graph converted from the {FORMATS[fmt]})") from e


def read_labelled(data: bytes, label: str | None, limits: Limits | None = None) -> Graph:
    """``read`` for the bytes of the file ``label`` (None: bytes given as such): errors name it."""
    try:
        return read(data, limits=limits, what=label or "input")
    except TosaError as e:
        if label is None:
            raise
        raise type(e)(f"{label}: {e}") from e


def read_source(source: str | os.PathLike | bytes | bytearray | memoryview | Graph | object,
                limits: Limits | None = None) -> Graph:
    """A Graph from a path, bytes, a Graph or a Model, without JAX (``tosa-jax info``, ``check``
    and the partitioner read graphs through it); a Graph (a Model's graph) is returned as it is,
    unchecked."""
    if isinstance(source, Graph):
        return source
    model = sys.modules.get("tosa_jax.model")  # a Model exists only once that module is loaded
    if model is not None and isinstance(source, model.Model):
        return source.graph
    data, label = source_bytes(source)
    if data is None:
        raise TosaFormatError(f"cannot load a TOSA graph from {type(source).__name__}: "
                              "give a path, bytes, a tosa_jax.Graph or a tosa_jax.Model")
    return read_labelled(data, label, limits)


def convert(source: str | os.PathLike | bytes, to: str = "tosa", *, generic: bool = False,
            progress: bool = True) -> bytes:
    """Convert a model file (path or bytes, any front-door format) to ``to``: "tosa" (a TOSA
    flatbuffer, checked by the reader), "mlir" (TOSA MLIR text; ``generic=True`` for MLIR's
    generic form) or "mlirbc" (TOSA MLIR bytecode)."""
    if to not in ("tosa", "mlir", "mlirbc"):
        raise TosaFormatError(f"cannot convert to {to!r}: give 'tosa', 'mlir' or 'mlirbc'")
    data, label = source_bytes(source)
    if data is None:
        raise TosaFormatError(f"cannot convert {type(source).__name__}: give a path or bytes")
    what = label or "input"
    try:
        tosa = to_tosa(data, what=what, progress=progress)
        read(tosa)  # the same checks (and errors) as load()
        if to == "tosa":
            return tosa
        return mlir.to_mlir(tosa, bytecode=to == "mlirbc", generic=generic)
    except TosaError as e:
        if what != "input" and not str(e).startswith(what):
            raise type(e)(f"{what}: {e}") from e
        raise


def format_for_suffix(path: str | os.PathLike) -> str | None:
    """The output format a file name asks for: .tosa, .mlir, .mlirbc."""
    return {".tosa": "tosa", ".mlir": "mlir", ".mlirbc": "mlirbc"}.get(Path(path).suffix.lower())
