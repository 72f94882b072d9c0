"""Vela 5.2 as an oracle: which operators of a TOSA graph it places on the Ethos-U NPU.

Vela (PyPI ``ethos-u-vela``) is an optional test/bench dependency: it is imported lazily, and
``TosaHardwareError`` says how to install it when it is absent.

How Vela compiles TOSA (found by experiment with Vela 5.2.0; every TOSA network goes through its
C++ core, ``ethosu.regor``, which is what the ``vela`` CLI calls):

* Ethos-U55/U65: there is no CPU fallback for TOSA. If any operator cannot run on the NPU the
  whole compilation fails with ``RuntimeError("Non-passthrough operation (<Op>) could not run on
  NPU")``, naming Vela's internal op type (e.g. ``Conv2D`` for an int8 CONV2D with an int32
  output and no RESCALE after it). The CLI prints the traceback (and still exits 0).
* Ethos-U85: unsupported operators fall back to the CPU: the compilation succeeds and the
  summary lists them as "CPU operators" (``--show-cpu-operations``).

So, operationally, "Vela compiles operator k for the NPU" means: ``regor.compile`` succeeds and
every scheduled operation that Vela derives from TOSA operator k is in the NPU command stream
(the ``queue`` table of Vela's optimisation database, or fused into a group, exactly as Vela's
own ``--show-cpu-operations`` decides). Operators that leave nothing to schedule (CONST,
RESHAPE or IDENTITY that become aliases, ops Vela folds away) are "passthrough" and count as on
the NPU. If the compilation fails, the graph is refused: for a graph with one non-CONST operator,
that operator does not run on the NPU; for a larger graph the operators whose Vela type the
message names are marked CPU and the others unknown (``None``).

The database rows map back to TOSA operators through the ``source`` table's ``ext_key``: the
index of the operator in the TOSA main block (CONST operators included).

A graph that Vela rejects as invalid TOSA ("Compilation failed: Validation error: ...") is
refused like any other; the message says so.

Compilation runs in-process (about 1-20 ms per single-operator graph, versus ~0.3 s for a CLI
start) with the same system configuration, memory mode and compiler options the CLI uses by
default (``vela --accelerator-config X net.tosa``). Vela 5.2 takes minutes (or longer) on some
graphs with axes near 65536: ``VelaWorker`` runs it in a child process with a time limit and
reports such graphs as unknown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tosa_jax.errors import TosaHardwareError
from tosa_jax.hw_models.devices import DEVICES

# Vela's internal op names (regor) -> TOSA operator names, for reading its error messages.
_VELA_TO_TOSA: dict[str, tuple[str, ...]] = {
    "Conv2D": ("CONV2D",), "Conv3D": ("CONV3D",), "DepthwiseConv2D": ("DEPTHWISE_CONV2D",),
    "TransposeConv2D": ("TRANSPOSE_CONV2D",), "MatMul": ("MATMUL",),
    "FullyConnected": ("CONV2D", "MATMUL"), "AvgPool": ("AVG_POOL2D",),
    "MaxPool": ("MAX_POOL2D",), "ArgMax": ("ARGMAX",), "Add": ("ADD",), "Sub": ("SUB",),
    "Mul": ("MUL",), "Abs": ("ABS",), "Neg": ("NEGATE",), "Clz": ("CLZ",), "Clamp": ("CLAMP",),
    "Maximum": ("MAXIMUM",), "Minimum": ("MINIMUM",), "Table": ("TABLE",),
    "Rescale": ("RESCALE",), "Cast": ("CAST",), "Identity": ("IDENTITY",),
    "Reshape": ("RESHAPE",), "Transpose": ("TRANSPOSE",), "Concat": ("CONCAT",),
    "Pad": ("PAD",), "Slice": ("SLICE",), "Tile": ("TILE",), "Reverse": ("REVERSE",),
    "Resize": ("RESIZE",), "ReduceSum": ("REDUCE_SUM",), "ReduceMax": ("REDUCE_MAX",),
    "ReduceMin": ("REDUCE_MIN",), "ReduceAll": ("REDUCE_ALL",), "ReduceAny": ("REDUCE_ANY",),
    "SHR": ("ARITHMETIC_RIGHT_SHIFT",), "SHL": ("LOGICAL_LEFT_SHIFT",),
    "LogicalShiftRight": ("LOGICAL_RIGHT_SHIFT",), "And": ("BITWISE_AND",),
    "Or": ("BITWISE_OR",), "Xor": ("BITWISE_XOR",), "Not": ("BITWISE_NOT",),
    "LogicalAnd": ("LOGICAL_AND",), "LogicalOr": ("LOGICAL_OR",), "LogicalXor": ("LOGICAL_XOR",),
    "LogicalNot": ("LOGICAL_NOT",), "Select": ("SELECT",), "Equal": ("EQUAL",),
    "Greater": ("GREATER",), "GreaterEqual": ("GREATER_EQUAL",), "Gather": ("GATHER",),
    "Scatter": ("SCATTER",), "Div": ("INTDIV",), "IntDiv": ("INTDIV",),
}


@dataclass
class VelaVerdict:
    """Vela's placement of one TOSA graph's main-block operators.

    ``on_npu[k]`` is True (NPU), False (CPU / refused) or None (unknown) for operator index k
    of the main block; ``vela_ops[k]`` lists the Vela operations derived from it.
    """

    accelerator: str
    compiled: bool
    error: str | None
    on_npu: dict[int, bool | None] = field(default_factory=dict)
    op_names: dict[int, str] = field(default_factory=dict)
    vela_ops: dict[int, list[str]] = field(default_factory=dict)
    npu_count: int = 0
    cpu_count: int = 0


def _require_vela() -> tuple[Any, Any]:
    try:
        from ethosu import regor
        from ethosu.vela import vela as vela_main
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TosaHardwareError(
            "Vela is not installed: the Vela oracle needs `pip install ethos-u-vela==5.2.0` "
            f"({e})") from None
    return regor, vela_main


def vela_available() -> bool:
    try:
        _require_vela()
    except TosaHardwareError:
        return False
    return True


_CONFIG_CACHE: dict[str, tuple[str, str, str]] = {}


def _configs(accelerator: str) -> tuple[str, str, str]:
    """(regor accelerator name, system config text, compiler options text), like the CLI's."""
    if accelerator in _CONFIG_CACHE:
        return _CONFIG_CACHE[accelerator]
    regor, vela_main = _require_vela()
    from ethosu.vela.architecture_features import ArchitectureFeatures
    from ethosu.vela.scheduler import OptimizationStrategy
    from ethosu.vela.tensor import Tensor
    from ethosu.vela.tensor_allocation import TensorAllocator

    dev = DEVICES.get(accelerator)
    if dev is None or dev.vela_accelerator is None:
        raise TosaHardwareError(
            f"unknown Vela accelerator {accelerator!r}; known: "
            + ", ".join(n for n, d in DEVICES.items() if d.vela_accelerator))
    ini = os.path.join(os.path.dirname(regor.__file__), "config_files", "Arm", "vela.ini")
    arch = ArchitectureFeatures(
        vela_config_files=[ini], accelerator_config=dev.vela_accelerator,
        system_config=dev.vela_system_config, memory_mode=dev.vela_memory_mode,
        max_blockdep=ArchitectureFeatures.MAX_BLOCKDEP, verbose_config=False,
        arena_cache_size=None)
    system = (f"[architecture]\nmacs={arch.num_macs_per_cycle}\ncores={arch.ncores}\n"
              f"[vela]\nsystem_config_name={arch.system_config}\n"
              f"memory_mode_name={arch.memory_mode}\n")
    system += Path(ini).read_text(encoding="utf-8")
    options = vela_main.get_compiler_config(
        True, False, False, False, OptimizationStrategy.Performance, arch.arena_cache_size,
        False, False, False, False, False, False, True, "tflite", False, False, False, False,
        False, "COP1", False, Tensor.AllocationQuantum, TensorAllocator.HillClimb, 10.0, "")
    name = "".join(s.capitalize() for s in dev.vela_accelerator.split("-")[:-1])
    _CONFIG_CACHE[accelerator] = (name, system, options)
    return _CONFIG_CACHE[accelerator]


def _main_block_ops(data: bytes) -> list[str]:
    from tosa_jax.serialization import read
    return [op.op for op in read(data).main.operators]


def vela_verdict(tosa: str | os.PathLike | bytes, accelerator: str) -> VelaVerdict:
    """Compile a TOSA flatbuffer (path or bytes) with Vela for ``accelerator`` (e.g.
    ``"ethos-u85-256"``) and return which main-block operators it placed on the NPU."""
    regor, _ = _require_vela()
    data = tosa if isinstance(tosa, bytes) else Path(tosa).read_bytes()
    name, system, options = _configs(accelerator)
    ops = _main_block_ops(data)
    verdict = VelaVerdict(accelerator, compiled=False, error=None,
                          op_names=dict(enumerate(ops)))
    try:
        model = regor.compile(name, data, "TOSA", system, options=options, verbose=False)
    except Exception as e:  # regor raises RuntimeError (and others) on refusal
        verdict.error = f"{type(e).__name__}: {e}"
        real = [k for k, op in enumerate(ops) if op not in ("CONST", "CONST_SHAPE")]
        named = set()
        m = re.search(r"operation \((\w+)\)", str(e))
        if m:
            named = set(_VELA_TO_TOSA.get(m.group(1), ()))
        for k in real:
            if len(real) == 1:
                verdict.on_npu[k] = False
            else:
                verdict.on_npu[k] = False if ops[k] in named else None
        return verdict
    verdict.compiled = True
    tables = model.opt_database.tables

    def rows(table: str) -> list[dict[str, str]]:
        t = tables.get(table)
        return [] if t is None else [dict(zip(t.header, r, strict=False)) for r in t.data]

    ext_of_source = {r["id"]: int(r["ext_key"]) for r in rows("source") if r.get("ext_key", "")}
    queued = {r["optimised_id"] for r in rows("queue")}
    grouped = {r["id"] for r in rows("group")}
    for k, op in enumerate(ops):
        if op not in ("CONST", "CONST_SHAPE"):
            verdict.on_npu[k] = True  # passthrough unless a scheduled row says CPU
    for r in rows("perf"):
        k = ext_of_source.get(r["source_id"])
        if k is None:
            continue
        npu = r["optimised_id"] in queued or r["id"] in grouped
        verdict.vela_ops.setdefault(k, []).append(("NPU:" if npu else "CPU:") + r["operator"])
        if npu:
            verdict.npu_count += 1
        else:
            verdict.cpu_count += 1
            verdict.on_npu[k] = False
    return verdict


def _to_json(v: VelaVerdict) -> dict[str, Any]:
    d = asdict(v)
    for k in ("on_npu", "op_names", "vela_ops"):
        d[k] = {str(i): x for i, x in d[k].items()}
    return d


def _from_json(d: dict[str, Any]) -> VelaVerdict:
    d = dict(d)
    for k in ("on_npu", "op_names", "vela_ops"):
        d[k] = {int(i): x for i, x in d[k].items()}
    return VelaVerdict(**d)


class VelaWorker:
    """Vela in a child process, so that a compilation that runs too long can be abandoned.

    Vela 5.2 takes minutes on some large single-operator graphs; ``verdict`` then returns a
    verdict with ``error="timeout ..."`` and every operator unknown (None), and restarts the
    child. Use as a context manager.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tosa_jax.hw_models.vela", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        return self.proc

    def verdict(self, path: str | os.PathLike, accelerator: str,
                timeout: float = 60.0) -> VelaVerdict:
        import selectors
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps([str(path), accelerator]) + "\n")
        proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            ops = _main_block_ops(Path(path).read_bytes())
            return VelaVerdict(accelerator, compiled=False,
                               error=f"timeout: Vela did not finish in {timeout:g} s",
                               on_npu={k: None for k, o in enumerate(ops)
                                       if o not in ("CONST", "CONST_SHAPE")},
                               op_names=dict(enumerate(ops)))
        return _from_json(json.loads(line))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> VelaWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve() -> None:
    """Child side of VelaWorker: one JSON request per line in, one verdict per line out.

    The verdicts go to the original stdout; anything Vela prints (from Python or C++) is sent
    to stderr so that it cannot corrupt the protocol.
    """
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        path, acc = json.loads(line)
        try:
            out = _to_json(vela_verdict(path, acc))
        except Exception as e:  # report, keep serving
            out = _to_json(VelaVerdict(acc, compiled=False, error=f"{type(e).__name__}: {e}"))
        proto.write(json.dumps(out) + "\n")
        proto.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:
        v = vela_verdict(sys.argv[1], sys.argv[2])
        print(json.dumps(_to_json(v), indent=1))
