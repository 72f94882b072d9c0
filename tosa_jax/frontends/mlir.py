"""TOSA MLIR (text ``.mlir`` or bytecode ``.mlirbc``) <-> TOSA flatbuffer, through ``tosa-opt``.

``tosa-opt`` ships with tosa-tools 2026.8.0 (``pip install 'tosa_jax[mlir]'``); it is looked
for next to the running Python, then on PATH. It is built from LLVM 24.0.0git, and reads the
MLIR TOSA dialect in its TOSA 1.0 form (specification versions 1.0 and 1.1.draft, as
``tosa-opt --tosa-attach-target`` names them): zero points, RESCALE's multiplier and shift and
the like are operands. Files of the pre-1.0 dialect (``clamp`` with ``min_int``/``max_int``,
``rescale`` with ``multiplier``/``shift`` attributes, ``quantization_info``) are refused with
tosa-opt's own message and ours. Pretty syntax differs between LLVM versions; the generic form
(``to_mlir(..., generic=True)``, ``tosa-jax convert --generic``) travels further.

The flatbuffer's version stamp: a module with ``tosa.target_env`` keeps it; otherwise the
module's ``tosa.fbs_version`` (what ``--tosa-deserialize`` wrote) decides, and a module with
neither is stamped TOSA 1.0 (what tosa_jax runs). Graph input and output names are kept
(``tosa.tensor_name`` argument attributes).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from tosa_jax.errors import TosaConverterError
from tosa_jax.frontends import _tools

TOSA_OPT = "tosa-opt"
BYTECODE_MAGIC = b"ML\xefR"
TOOLS_VERSION = "2026.8.0"
DIALECT_NOTE = (
    "tosa-opt (tosa-tools {version}) reads the MLIR TOSA dialect in its TOSA 1.0 form "
    "(specification 1.0 and 1.1 draft: zero points, RESCALE multiplier/shift and pad values are "
    "operands); pre-1.0 files (clamp min_int/max_int, rescale multiplier/shift attributes, "
    "quantization_info) must be regenerated with a TOSA 1.0 toolchain")


def tosa_opt() -> str:
    """The tosa-opt executable, or a TosaConverterMissingError naming the extra."""
    exe = _tools.find_executable(TOSA_OPT)
    if exe is None:
        raise _tools.missing("mlir", "tosa-opt (TOSA MLIR <-> flatbuffer)")
    return exe


def converter_id() -> str:
    """What identifies the converter for the cache: tosa-tools' version and tosa-opt's file."""
    exe = Path(tosa_opt())
    st = exe.stat()
    return f"tosa-opt:{_tools.package_version('tosa-tools')}:{exe}:{st.st_size}:{st.st_mtime_ns}"


def is_bytecode(data: bytes) -> bool:
    return data[:4] == BYTECODE_MAGIC


# What MLIR text opens with: a module, a function, or an attribute/type alias definition.
_TEXT_START = re.compile(r'(module\b|func\.func\b|"builtin\.module"|"func\.func"|'
                         r'[#!][A-Za-z_][\w.$-]*\s*=)')


def is_text(data: bytes) -> bool:
    """MLIR text: UTF-8 whose first statement (after comments) opens a module, a function or an
    attribute/type alias."""
    head = data[:4096]
    if b"\0" in head:
        return False
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError:
        # the 4 KiB cut may split a character
        try:
            text = head[:-3].decode("utf-8-sig")
        except UnicodeDecodeError:
            return False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        return _TEXT_START.match(line) is not None
    return False


def _spec_version(text: str) -> str | None:
    """The --tosa-attach-target version for a module without tosa.target_env, or None."""
    if "tosa.target_env" in text:
        return None
    m = re.search(r'tosa\.fbs_version\s*=\s*"(\d+)\.(\d+)', text)
    if m and (m.group(1), m.group(2)) == ("1", "1"):
        return "1.1.draft"
    return "1.0"


def source_name(what: str) -> str:
    """The file name tosa-opt sees, so locations in the graph name the user's file (and the
    flatbuffer does not depend on a temporary directory)."""
    name = Path(what).name if what not in ("", "input") else ""
    return re.sub(r"[^\w.+-]", "_", name)[:100].lstrip(".") or "input.mlir"


def to_flatbuffer(data: bytes, what: str = "input") -> bytes:
    """A TOSA flatbuffer from TOSA MLIR text or bytecode (``what``: the name in messages and
    in operator locations)."""
    exe = tosa_opt()
    with tempfile.TemporaryDirectory(prefix="tosa_jax_mlir_") as tmp:
        d = Path(tmp)
        name = source_name(what)
        src = d / (".tosa_jax_in.mlirbc" if is_bytecode(data) else name)  # dot: never a name
        src.write_bytes(data)
        text_file = d / name
        names = {str(d) + "/": ""}
        try:
            if is_bytecode(data):  # to text first: its attributes decide the version stamp
                _tools.run_tool([exe, src.name, "-o", name], names=names, cwd=tmp)
            text = text_file.read_text(errors="replace")
            passes = []
            version = _spec_version(text)
            if version:
                passes.append(f"--tosa-attach-target=specification_version={version}")
            passes.append("--tosa-serialize=retain-graph-input-output-names "
                          "tosa-flatbuffer-filename=.tosa_jax_out.tosa")
            _tools.run_tool([exe, *passes, name, "-o", ".tosa_jax_after.mlir"], names=names,
                            cwd=tmp)
        except TosaConverterError as e:
            raise TosaConverterError(
                f"{e}\n(not TOSA MLIR that tosa-opt can serialize: "
                f"{DIALECT_NOTE.format(version=TOOLS_VERSION)})") from None
        out = d / ".tosa_jax_out.tosa"
        if not out.exists():
            raise TosaConverterError("tosa-opt wrote no flatbuffer (an empty module?)")
        return out.read_bytes()


def to_mlir(tosa: bytes, *, bytecode: bool = False, generic: bool = False) -> bytes:
    """TOSA MLIR (text, or bytecode with ``bytecode=True``) from a TOSA flatbuffer."""
    exe = tosa_opt()
    with tempfile.TemporaryDirectory(prefix="tosa_jax_mlir_") as tmp:
        d = Path(tmp)
        (d / "in.tosa").write_bytes(tosa)
        (d / "empty.mlir").write_text("")
        cmd = [exe, f"--tosa-deserialize=tosa-flatbuffer-filename={d / 'in.tosa'}",
               str(d / "empty.mlir"), "-o", str(d / "out")]
        if generic:
            cmd.insert(1, "--mlir-print-op-generic")
        if bytecode:
            cmd.insert(1, "--emit-bytecode")
        _tools.run_tool(cmd, names={str(d / "in.tosa"): "the TOSA flatbuffer"})
        return (d / "out").read_bytes()
