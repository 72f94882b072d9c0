"""TFLite flatbuffer -> TOSA MLIR -> TOSA flatbuffer: Arm's ``tosa-converter-for-tflite``
(2026.2.0, TensorFlow's TFLite-to-TOSA legalization) writes MLIR bytecode, ``tosa-opt``
serializes it (``frontends.mlir``).

The converter runs in a child process: a C++ legalizer that aborts on a malformed model must
not take the caller's process with it. What it refuses (an operator with no TOSA legalization,
a damaged file) comes back as a TosaConverterError with its own message.

The graph keeps TFLite's interface: int8 PTQ models take and return int8 (the TFLite input and
output quantization stays the caller's, as in the TFLite interpreter), float models float32.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tosa_jax.frontends import _tools, mlir

FILE_IDENTIFIER = b"TFL3"
PACKAGE = "tosa-converter-for-tflite"
_RUN = ("import sys; from tosa_converter_for_tflite import tflite_flatbuffer_to_tosa_mlir as c, "
        "TosaConverterOutputFormat as F; c(sys.argv[1], sys.argv[2], F.Bytecode)")


def is_tflite(data: bytes) -> bool:
    return data[4:8] == FILE_IDENTIFIER


def converter_id() -> str:
    version = _tools.package_version(PACKAGE)
    if version is None:
        raise _tools.missing("tflite", "tosa-converter-for-tflite (TFLite -> TOSA MLIR)")
    return f"{PACKAGE}:{version}+{mlir.converter_id()}"


def to_mlir(data: bytes, what: str = "input") -> bytes:
    """TOSA MLIR bytecode from a TFLite flatbuffer."""
    converter_id()  # the missing-package error before any work
    with tempfile.TemporaryDirectory(prefix="tosa_jax_tflite_") as tmp:
        d = Path(tmp)
        (d / "in.tflite").write_bytes(data)
        _tools.run_tool([sys.executable, "-c", _RUN, str(d / "in.tflite"),
                         str(d / "out.mlirbc")], names={str(d / "in.tflite"): what}, tool=PACKAGE)
        return (d / "out.mlirbc").read_bytes()


def to_flatbuffer(data: bytes, what: str = "input",
                  progress: _tools.Progress | None = None) -> bytes:
    """A TOSA flatbuffer from a TFLite flatbuffer."""
    if progress:
        progress.set_step("tosa-converter-for-tflite")
    bc = to_mlir(data, what)
    if progress:
        progress.set_step("tosa-opt")
    return mlir.to_flatbuffer(bc, f"{what}.mlir")  # the legalized MLIR, named after the model
