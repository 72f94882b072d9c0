"""The calling convention of tosa-tools' reference model binding, run by tosa_jax.

``run(tosa_binary, inputs, **options) -> (outputs, GraphStatus)`` takes and returns what
``tosa_reference_model.run`` (tosa-tools 2026.8.0) takes and returns, so code written against
the binding (ExecuTorch's Arm tests: see ``tosa_jax.executorch``) can run on tosa_jax instead::

    from tosa_jax import reference_model as rm
    outputs, status = rm.run(tosa_bytes, [x0, x1])   # status: rm.GraphStatus.TOSA_VALID ...

The conventions, each checked against the binding in tests/unit/test_reference_model.py:

* inputs by position, in the graph's input order; outputs a list in the graph's output order.
* an input is taken by its bytes: any array of the tensor's element count and element size
  (``int8`` or ``uint8`` for INT8, ``uint16`` raw bits for BF16, ``uint8`` for FP8, numpy void
  records ``|V2``/``|V1``); ml_dtypes arrays are accepted too. Unlike the binding, tosa_jax
  refuses a *float* array for a tensor of another type (float32 data for an INT32 input), which
  the binding silently reinterprets bit by bit.
* outputs as the binding returns them: BF16 as ``|V2`` and FP8 as ``|V1`` void records of raw
  bits (``np.frombuffer``/``.view`` them), INT8/INT16/INT32 as signed numpy arrays (an unsigned
  RESCALE output keeps its bits in the signed type), BOOL as bool. INT48 outputs come back as
  int64 values; the binding cannot convert INT48 (it returns an empty float64 array).
* inputs that break a REQUIRE depending on the values (an int32 ADD that overflows, an index
  out of range: ``tosa_jax.violations.REQUIRE_RULES``, the ones the binding checks while running)
  return ``TOSA_UNPREDICTABLE`` with the outputs as computed (the model is loaded with
  ``check_requires=True``).
* a graph that breaks an ERROR_IF returns ``TOSA_ERROR`` with zero-filled outputs, as the
  binding does for the ERROR_IFs it checks while running (it raises ValueError for those it
  checks while loading), also where the values given break one (an EXT-DYNAMIC graph's zero
  points: ``profiles.checks.RuntimeCheck``); with ``tosa_level="EIGHTK"`` a graph over a
  limit of level 8K runs and returns ``TOSA_UNPREDICTABLE`` (level checks are REQUIREs). A
  graph that is not readable TOSA, or that tosa_jax does not support, raises
  ``InvalidGraphError`` (a ValueError, as the binding's "Invalid TOSA graph"); inputs of the
  wrong count or size ``InvalidInputsError``.
* keyword options: ``initialize_variable_tensor_from_numpy`` (0: variables start from the
  graph's initial values; 1: from zeros, as the binding, which is given no numpy data here,
  does), ``tosa_level`` ("NONE", "EIGHTK"). Every run starts from the initial variable values:
  state never carries over between calls. ``verbosity`` and ``debug_mode`` are validated;
  tosa_jax writes no reference-model log, so these, ``debug_filename`` (without
  ``dump_intermediates``), ``precise_mode`` (FP64 arithmetic) and ``bounds_mode`` are named in an
  ``UnsupportedOptionWarning`` (once per process) and otherwise ignored.
  ``dump_intermediates=1`` writes every operator's outputs in the binding's text format, to
  ``debug_filename`` or stderr, from ``tosa_jax.inspect`` (``fp_format`` formats the floats).
  ``inst_id`` and ``is_unbuffered`` change nothing tosa_jax produces.

Compiled Models are kept in a process-wide LRU cache keyed by the graph's bytes: running the same
graph again does not parse, validate or compile it again (``cache_info()``, ``cache_clear()``;
its size: ``TOSA_JAX_RM_CACHE_SIZE``, default 64). Small graphs run on numpy
(``tosa_jax.npexec``), float graphs included (``load(..., numpy_floats=True)``): a suite runs
each graph once, and pays no XLA compile, nor XLA's rebuild of a cached executable. Integer
results are the reference model's bits either way; float results meet TOSA's compliance modes
(as the binding's own FP32 results do), are not XLA's bits, and are the same on every call.
"""

from __future__ import annotations

import enum
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from tosa_jax.errors import TosaError, TosaInputError, TosaValidationError
from tosa_jax.ir import (
    CODE_TYPES,
    HOST_DTYPES,
    BlockScaled,
    Wide,
    num_elements,
    value_to_host,
    wide_to_numpy,
)
from tosa_jax.model import Model, TensorSpec, load, no_gc

__all__ = ["GraphStatus", "InvalidGraphError", "InvalidInputsError", "UnsupportedOptionWarning",
           "cache_clear", "cache_info", "run"]


class GraphStatus(enum.IntEnum):
    """The binding's ``tosa_reference_model.GraphStatus`` (same names and values)."""

    TOSA_VALID = 0
    TOSA_UNPREDICTABLE = 1
    TOSA_ERROR = 2


class InvalidGraphError(TosaError, ValueError):
    """The graph cannot be run (the binding's ValueError "Invalid TOSA graph")."""


class InvalidInputsError(TosaInputError, ValueError):
    """The inputs do not fit the graph (the binding's ValueError "Invalid inputs.")."""


class UnsupportedOptionWarning(UserWarning):
    """A keyword option of the binding that tosa_jax accepts but does not carry out."""


VERBOSITIES = ("NONE", "INFO", "IFACE", "LOW", "MED", "HIGH")
DEBUG_MODES = ("CONFIG", "GT", "OP", "ALL")
LEVELS = {"NONE": None, "EIGHTK": "8K"}
# Output types numpy lacks: the binding returns their raw bits as void records.
RAW_OUTPUTS = {"BF16": np.dtype("V2"), "FP8E4M3": np.dtype("V1"), "FP8E5M2": np.dtype("V1")}

# ----------------------------------------------------------------------------- model cache


class _ModelCache:
    """An LRU of loaded Models by graph bytes; a load that fails is not cached."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.models: OrderedDict[bytes, Model] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: bytes) -> Model:
        with self.lock:
            model = self.models.get(key)
            if model is not None:
                self.models.move_to_end(key)
                self.hits += 1
                return model
            self.misses += 1
        # REQUIRE failures: TOSA_UNPREDICTABLE; floats on numpy: a suite runs each graph once
        model = load(key, check_requires=True, numpy_floats=True)
        with self.lock:
            self.models[key] = model
            while len(self.models) > max(self.size, 0):
                self.models.popitem(last=False)
        return model


_CACHE = _ModelCache(int(os.environ.get("TOSA_JAX_RM_CACHE_SIZE", "64")))


def cache_info() -> dict[str, int]:
    """Hits, misses and Models held by the cache of ``run``."""
    with _CACHE.lock:
        return {"hits": _CACHE.hits, "misses": _CACHE.misses, "size": len(_CACHE.models),
                "maxsize": _CACHE.size}


def cache_clear() -> None:
    """Drop every cached Model (and its compiled executables)."""
    with _CACHE.lock:
        _CACHE.models.clear()
        _CACHE.hits = _CACHE.misses = 0


# ----------------------------------------------------------------------------- options

_warned: set[str] = set()


def _warn_once(option: str, why: str) -> None:
    if option in _warned:
        return
    _warned.add(option)
    warnings.warn(f"tosa_jax.reference_model.run: option {option} is not supported: {why}; "
                  "ignored", UnsupportedOptionWarning, stacklevel=4)


def _check_options(debug_filename: str | None, debug_mode: str | None, verbosity: str,
                   dump_intermediates: int, precise_mode: int, bounds_mode: bool,
                   tosa_level: str) -> None:
    if verbosity not in VERBOSITIES:
        raise ValueError(f"verbosity {verbosity!r}: valid values are {' '.join(VERBOSITIES)}")
    if debug_mode is not None and debug_mode not in DEBUG_MODES:
        raise ValueError(f"debug_mode {debug_mode!r}: valid values are {' '.join(DEBUG_MODES)}")
    if tosa_level not in LEVELS:
        raise ValueError(f"tosa_level {tosa_level!r}: valid values are {' '.join(LEVELS)}")
    if verbosity != "NONE":
        _warn_once(f"verbosity={verbosity!r}", "tosa_jax writes no reference-model log")
    if debug_mode is not None:
        _warn_once(f"debug_mode={debug_mode!r}", "tosa_jax writes no reference-model trace")
    if debug_filename is not None and not dump_intermediates:
        _warn_once("debug_filename", "tosa_jax writes no reference-model trace (only the "
                   "dump_intermediates text goes there)")
    if precise_mode:
        _warn_once("precise_mode", "floating-point operators compute in the graph's own "
                   "types, not in FP64")
    if bounds_mode:
        _warn_once("bounds_mode", "no error-bounds mode")


# ----------------------------------------------------------------------------- conversion


def _input(spec: TensorSpec, value: Any, index: int) -> np.ndarray:
    """An input as the binding takes it: by its bytes, of the tensor's element count."""
    arr = np.asarray(value)
    host = spec.np_dtype
    what = f"input #{index} {spec.name!r} ({spec.dtype} {list(spec.shape)})"
    if arr.size != num_elements(spec.shape):
        raise InvalidInputsError(f"Invalid inputs: {what}: got {arr.size} elements "
                                 f"({arr.dtype} {list(arr.shape)})")
    if arr.dtype != host:
        if spec.dtype == "INT48" and arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)  # INT48 is given as int64 values (the binding has none)
        elif arr.dtype.itemsize != host.itemsize or (
                arr.dtype.kind == "f" and arr.dtype != host):
            raise InvalidInputsError(
                f"Invalid inputs: {what} is {host} (or its raw bits: an integer or void array "
                f"of {host.itemsize}-byte elements), got {arr.dtype}")
        elif spec.dtype == "BOOL":
            arr = np.ascontiguousarray(arr).view(np.uint8) != 0
        else:
            arr = np.ascontiguousarray(arr).view(host)
    return arr.reshape(spec.shape)


def _output(spec: TensorSpec, value: Any) -> np.ndarray:
    if isinstance(value, BlockScaled):
        # a block-scaled output (TOSA 1.1): the binding returns one array of the value type,
        # each value times its block's scale
        scales = np.repeat(np.asarray(value.scales).astype(np.float32), spec.block_size, axis=-1)
        value = value_to_host(value.values, spec.dtype).astype(np.float32) * scales
    elif spec.dtype in CODE_TYPES:  # FP6: the graph's uint8 codes are the bits, not numbers
        value = value_to_host(value, spec.dtype)
    arr = np.array(value, dtype=spec.np_dtype)  # a writable copy, as the binding gives
    raw = RAW_OUTPUTS.get(spec.dtype)
    return arr.view(raw) if raw is not None else arr


def _zeros(specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    return [_output(s, np.zeros(s.shape, HOST_DTYPES[s.dtype])) for s in specs]


def _error_outputs(tosa_binary: bytes) -> list[np.ndarray]:
    """Zero-filled outputs of the declared shapes and types: what the binding returns with
    TOSA_ERROR."""
    from tosa_jax import serialization

    block = serialization.read(tosa_binary).main
    return _zeros([TensorSpec(n, block.tensors[n].shape, block.tensors[n].dtype)
                   for n in block.outputs])


# ----------------------------------------------------------------------------- run


# Python's cyclic collector is held off during a run (no_gc, used as a decorator: it keeps
# run's signature). The binding allocates next to no Python objects and never sets off a
# collection; tosa_jax's few thousand (a cached program read, numpy's calls) can set off a full
# one, which walks the caller's whole heap: 0.40-0.48 s each inside ExecuTorch's test process,
# measured 2026-11-27 (its ``nn_functional FP[fold]`` took 0.76 s warm, 1.9 ms with the
# collector held). The collection still comes, in the caller's code, after the call.
@no_gc()
def run(tosa_binary: bytes | bytearray | memoryview | str, inputs: Sequence[Any], *,
        inst_id: int = 0, debug_filename: str | None = None, is_unbuffered: bool = False,
        debug_mode: str | None = None, verbosity: str = "NONE", dump_intermediates: int = 0,
        initialize_variable_tensor_from_numpy: int = 0, fp_format: str = "0.5",
        precise_mode: int = 0, bounds_mode: bool = False,
        tosa_level: str = "NONE") -> tuple[list[np.ndarray], GraphStatus]:
    """Run a serialized TOSA graph on ``inputs`` (in graph order), as the reference model's
    binding does; returns ``(outputs in graph order, GraphStatus)``. See the module docstring
    for the conventions and options."""
    del inst_id, is_unbuffered  # no effect on anything tosa_jax produces
    _check_options(debug_filename, debug_mode, verbosity, dump_intermediates, precise_mode,
                   bounds_mode, tosa_level)
    if isinstance(tosa_binary, str):
        tosa_binary = tosa_binary.encode("latin-1")  # pybind11 passes str as std::string
    key = bytes(tosa_binary)
    try:
        model = _CACHE.get(key)
    except TosaValidationError as e:
        if getattr(e, "violations", None):  # an ERROR_IF holds: the binding's TOSA_ERROR
            return _error_outputs(key), GraphStatus.TOSA_ERROR
        raise InvalidGraphError(f"Invalid TOSA graph: {e}") from e
    except TosaError as e:
        raise InvalidGraphError(f"Invalid TOSA graph: {e}") from e
    if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
        raise InvalidInputsError("Invalid inputs: give a list of numpy arrays, in graph order")
    if len(inputs) != len(model.inputs):
        raise InvalidInputsError(f"Invalid inputs: the graph takes {len(model.inputs)} "
                                 f"input(s), got {len(inputs)}")
    args = [_input(s, v, i) for i, (s, v) in enumerate(zip(model.inputs, inputs))]
    outs, violation, error = _execute(model, args, bool(initialize_variable_tensor_from_numpy))
    if error:  # an ERROR_IF on values given when the graph runs
        return _error_outputs(key), GraphStatus.TOSA_ERROR
    if dump_intermediates:
        _dump_intermediates(model, args, debug_filename, fp_format)
    level = LEVELS[tosa_level]
    status = GraphStatus.TOSA_VALID
    if violation is not None:
        status = GraphStatus.TOSA_UNPREDICTABLE  # a REQUIRE failed on these values
    if level is not None and model.requirements.level != level:
        status = GraphStatus.TOSA_UNPREDICTABLE  # a LEVEL_CHECK is a REQUIRE
    return [_output(s, o) for s, o in zip(model.outputs, outs)], status


# ----------------------------------------------------------------------------- dump_intermediates


def _format_values(values: np.ndarray, fp_format: str) -> str:
    """A tensor's values as the reference model's dump prints them: nested brackets, one line
    per innermost row, each element as `` %d `` (integers, BOOL as 0/1) or `` %<fp_format>f ``
    (every floating-point type, as the C float it is widened to)."""
    floating = values.dtype.kind not in "biu"  # float, and ml_dtypes' bf16/fp8 (kind V)
    spec = f"%{fp_format}f"

    def element(v: Any) -> str:
        return f" {spec % float(v)} " if floating else f" {int(v)} "

    def nested(a: np.ndarray) -> str:
        if a.ndim <= 1:
            return "[" + "".join(element(v) for v in a.reshape(-1)) + "]\n"
        return "[" + "".join(nested(row) for row in a) + "]\n"

    return nested(values)


def _tensor_line(name: str, spec: Any) -> str:
    shape = "".join(f"{d}, " for d in spec.shape)
    return f"Name: {name} DType={spec.dtype} isValid=1 Rank={len(spec.shape)} Shape=[{shape}]"


def _dump_intermediates(model: Model, args: list[np.ndarray], debug_filename: str | None,
                        fp_format: str) -> None:
    """What the binding writes with ``dump_intermediates=1``: for each operator of the entry
    block, in order, its header, its input and output tensors, then each output's values (see
    ``_format_values``), to ``debug_filename`` or stderr. The values come from
    ``tosa_jax.inspect`` (one compiled call keeping every tensor of the block). Where the
    binding prints INT8/BOOL elements as raw characters, this prints their numbers."""
    import sys

    values = model.intermediates(*args, constants=True)
    block = model.graph.main
    lines: list[str] = []
    for index, op in enumerate(block.operators):
        lines.append(f"Node type: {op.op} ID: {index} Eval Count: 1 On next node list: 0 "
                     "Evaluated: 1 Is marked: 0\n")
        for kind, names in (("Input", op.inputs), ("Output", op.outputs)):
            for i, name in enumerate(names):
                lines.append(f"{kind:>9}[{i}]  {_tensor_line(name, block.tensors[name])}\n")
        for name in op.outputs:
            lines.append(_tensor_line(name, block.tensors[name]) + "\n")
            value = values.get(name)
            if isinstance(value, np.ndarray):
                lines.append(_format_values(value, fp_format))
        lines.append("\n")
    text = "".join(lines)
    if debug_filename is None:
        sys.stderr.write(text)
        sys.stderr.flush()
    else:
        with open(debug_filename, "a") as f:
            f.write(text)


def _execute(model: Model, args: list[np.ndarray], zero_variables: bool,
             ) -> tuple[list[Any], str | None, bool]:
    """One invocation from the initial variable values (or zeros); the cached Model's own
    state is neither read nor changed, so calls never see each other's writes. Returns the
    outputs, the rule that failed, if one did, and whether it is an ERROR_IF."""
    # The input zero points' ERROR_IFs are checked by the program, in operator order with the
    # REQUIREs: the binding's status is that of the first rule broken (an ADD that overflows
    # before a NEGATE whose zero point is wrong: TOSA_UNPREDICTABLE).
    bound = model._bind(tuple(args), {}, check_values=False)
    if not model.variables:
        outs = model._outputs(bound)  # from the compile cache without JAX where it can
    else:
        from tosa_jax.executor import initial_state

        start = ({v.name: np.zeros(v.shape, v.np_dtype) for v in model.variables}
                 if zero_variables else initial_state(model.graph))
        state = {v.name: model._check_input(v, start[v.name]) for v in model.variables}
        full = (state, *bound)
        outs, _ = model._call(full)
    outs, violation, error = model.split_checks(outs)
    return [wide_to_numpy(o) if isinstance(o, Wide) else o for o in outs], violation, error
