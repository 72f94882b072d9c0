"""Cached CPU executables run through jaxlib's PjRt client alone, without importing JAX.

Importing JAX takes 0.3-0.4 s on this project's CI machine, most of a second process's first
result when the executable comes from the compile cache (XLA rebuilds it in 2 to ~300 ms).
Where the caller gets numpy arrays (``model(x)`` of a model on the host, ``Model.run``,
``tosa-jax run``, ``tosa_jax.reference_model.run``), a cached executable is loaded and run by
jaxlib's compiled extension (40-60 ms to load) and its outputs read back through DLPack.

An entry (``kind: "host"``) is written beside JAX's own (``tosa_jax.cache``) when the model
compiles a CPU executable on one device under JAX's default configuration (not when it loads one:
XLA re-serializes a deserialized CPU executable without its object code); it holds
XLA's serialized executable with the shapes and numpy dtypes of its parameters and results.
Its key needs no JAX: the graph's bytes, tosa_jax's code, the jax/jaxlib builds, ``XLA_FLAGS``
and the host CPU. The executable's parameters and results are the graph function's flat
arrays (``Model`` flattens and regroups them: INT48/INT64 as ``Wide`` int32/uint32 words, FP6 as
uint8 codes, a block-scaled tensor as its values and FP8UE8M0 scales), of the numpy types in
CARRIED_NUMPY: not FP4 (XLA's CPU buffers pack it two to a byte). numpy imports no DLPack tensor
of ml_dtypes' types and jaxlib makes none of FP8UE8M0, so the bytes of a BF16, FP8 or FP8UE8M0
result are copied out. Anything unexpected (an entry this jaxlib cannot load, a parameter
count that does not match) makes the caller use the JAX path, which computes the same
executable's results.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from tosa_jax import seqcompile
from tosa_jax.cache import CompileCache, code_digest, open_cache

# The numpy types of the executable's parameters and results that this path carries: those of
# every TOSA element type's arrays in the graph function (tosa_jax.model.host_leaves).
CARRIED_NUMPY = frozenset({"bool", "int8", "int16", "int32", "uint8", "uint32", "float16",
                           "float32", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                           "float8_e8m0fnu"})
# numpy imports no DLPack tensor of these (ml_dtypes') types: their bytes are copied instead.
_RAW_DLPACK = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
# jaxlib exports no DLPack tensor of these ("Unsupported dtype in DLTensor"): see _host_copy.
_HOST_COPY = frozenset({"float8_e8m0fnu"})
FORMAT = 1


@cache
def runtime_id() -> str:
    """The jax and jaxlib builds (their version files, and the size and time of jaxlib's
    compiled extension), found without importing either."""
    h = hashlib.sha256()
    for name in ("jax", "jaxlib"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            return "none"
        root = list(spec.submodule_search_locations)[0]
        with open(os.path.join(root, "version.py"), "rb") as f:
            h.update(f.read())
        if name == "jaxlib":
            for e in sorted(os.scandir(root), key=lambda e: e.name):
                if e.name.startswith("_jax") and e.name.endswith((".so", ".pyd", ".dylib")):
                    st = e.stat()
                    h.update(f"{e.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


@cache
def machine_id() -> str:
    """The host CPU (model and feature flags): XLA's CPU code is built for the machine that
    compiled it, and a cache directory may be shared between machines."""
    text = os.uname().machine
    try:  # Linux: the first processor's block (one read; the whole file can take ms)
        fd = os.open("/proc/cpuinfo", os.O_RDONLY)
        try:
            block = os.read(fd, 1 << 16).decode("ascii", "replace").split("\n\n")[0]
        finally:
            os.close(fd)
        text += "".join(line for line in block.splitlines(keepends=True)
                        if line.startswith(("vendor_id", "model name", "flags", "Features",
                                            "CPU implementer", "CPU part")))
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def host_key(graph_digest: str, args: list[tuple[tuple[int, ...], str]]) -> dict[str, Any]:
    """The key of the host entry of a graph's executable for these (shape, numpy dtype) args."""
    return {"kind": "host", "format": FORMAT, "graph": graph_digest, "code": code_digest(),
            "args": [[list(s), d] for s, d in args], "runtime": runtime_id(),
            "machine": machine_id(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            **program_options()}


def program_options() -> dict[str, str]:
    """The settings that change the program a graph is lowered to, part of both cache keys
    (this one and ``Model``'s): lowering.numerics' GPU forms (its GPU_FORMS_ENV; not imported
    here, it imports JAX), tosa_jax.reroll's rolled loops (its ENV; not imported here either: a
    load from the cache would import the graph IR's analyses with it) and tosa_jax.seqcompile's
    switch. (tests/unit/test_hostexec.py checks the names.)"""
    return {"gpu_forms": os.environ.get("TOSA_JAX_GPU_FORMS", ""),
            "roll": os.environ.get("TOSA_JAX_ROLL", ""),
            "sequential": os.environ.get(seqcompile.ENV, "")}


def entry_of(compiled: Any, blob: Callable[[], bytes] | None = None) -> dict[str, Any] | None:
    """The host entry of a JAX-compiled executable (``jax.stages.Compiled``, called on the JAX
    side), or None unless it is a one-device executable whose parameters are the flat
    arguments and whose results the flat outputs, in order, of CARRIED_NUMPY types and
    row-major. The weights of a ``hoist.Weighted`` executable, its first parameters, are kept
    in the entry (``weights``): the caller passes the others. ``blob`` gives the executable's
    bytes (by default ``seqcompile.serialized_bytes``)."""
    weights = compiled.host_weights() if hasattr(compiled, "host_weights") else []
    if weights:
        compiled = compiled.exe
    try:
        args, kwargs = compiled.in_avals
        ins, outs = _leaves(args), _leaves(compiled.out_info)
        exe = compiled.runtime_executable()
        if (kwargs or not seqcompile.serializable(compiled)
                or len(exe.get_parameter_layouts()) != len(ins)
                or len(exe.get_output_layouts()) != len(outs)
                or len(exe.local_devices()) != 1
                or any(str(a.dtype) not in CARRIED_NUMPY for a in (*ins, *outs))
                or any(tuple(o.format.layout.major_to_minor) != tuple(range(len(o.shape)))
                       for o in outs)):
            return None
        return {"exe": blob() if blob is not None else seqcompile.serialized_bytes(compiled),
                "args": [[list(a.shape), str(a.dtype)] for a in ins],
                "outs": [[list(a.shape), str(a.dtype)] for a in outs],
                **({"weights": weights} if weights else {})}
    except Exception:
        return None


def _leaves(tree: Any) -> list[Any]:
    import jax

    return jax.tree.leaves(tree)


# jaxlib releases whose private client API (device_put, result handlers, DLPack export) this
# module was written and tested against; on others the JAX path runs, unless
# TOSA_JAX_HOSTEXEC=1 asks for this one (=0 turns it off everywhere).
TESTED_JAXLIB = ("0.10.",)


@cache
def enabled() -> bool:
    """Whether the host path may be used: ``TOSA_JAX_HOSTEXEC``, else a tested jaxlib."""
    env = os.environ.get("TOSA_JAX_HOSTEXEC", "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    if env in ("1", "on", "true", "yes"):
        return True
    return tested_jaxlib()


def tested_jaxlib() -> bool:
    """Whether this jaxlib is one of TESTED_JAXLIB's releases (read without importing it)."""
    return _jaxlib_version().startswith(TESTED_JAXLIB)


@cache
def _jaxlib_version() -> str:
    """jaxlib's version, read from its version file without importing jaxlib (once: every
    compile asks, tosa_jax.model.compile_lowered)."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("_version") and "=" in line:
                    return line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        pass
    return ""


# Modules of the PjRt plugins JAX would take as its default backend over the CPU.
_ACCELERATOR_PLUGINS = ("jax_plugins", "jax_cuda12_plugin", "jax_cuda13_plugin",
                        "jax_rocm60_plugin", "jax_rocm7_plugin", "libtpu")


@cache
def default_is_cpu() -> bool:
    """Whether JAX's default device would be a CPU (``JAX_PLATFORMS``, else no accelerator
    plugin installed): a model asked for no device runs where JAX would run it."""
    platforms = os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME")
    if platforms:
        return platforms.split(",")[0].strip().lower() == "cpu"
    return not any(importlib.util.find_spec(m) is not None for m in _ACCELERATOR_PLUGINS)


_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()


def _client() -> Any:
    """One CPU client of one device for the process (JAX, if imported, keeps its own)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            from jaxlib import _jax, utils

            if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
                # XLA's C++ log prints its INFO lines (the client's devices) to stderr until
                # set up; JAX's import sets it up. Warnings and errors still show.
                utils.absl_set_stderr_threshold(1)

            _CLIENT = _jax.get_tfrt_cpu_client(asynchronous=False, num_devices=1)
    return _CLIENT


# One small FP32 convolution (StableHLO), run once by prepare(): see warm_float_kernels.
_WARM_CONV = """
module @tosa_jax_warm {
  func.func public @main(%x: tensor<1x8x8x8xf32>, %w: tensor<3x3x8x8xf32>)
      -> tensor<1x8x8x8xf32> {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
        window = {stride = [1, 1], pad = [[1, 1], [1, 1]]}
        {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
        : (tensor<1x8x8x8xf32>, tensor<3x3x8x8xf32>) -> tensor<1x8x8x8xf32>
    return %0 : tensor<1x8x8x8xf32>
  }
}
"""
_WARM_SHAPES = ([[1, 8, 8, 8], "float32"], [[3, 3, 8, 8], "float32"])


def warm_float_kernels(x: np.ndarray, w: np.ndarray, store: CompileCache | None = None,
                       client: Any = None) -> np.ndarray:
    """Compile (on ``client``, by default the host client: no JAX) and run one small FP32
    convolution of ``x`` (NHWC, 1x8x8x8) by ``w`` (HWIO, 3x3x8x8), padded to the same size;
    returns its result.

    XLA CPU runs float convolutions (and matrix products YNNPACK does not take) on Eigen, whose
    contraction kernel is oneDNN's GEMM; oneDNN generates that kernel's machine code on its
    first use in a process (25-45 ms here), and the first float graph a process runs pays it:
    ExecuTorch's ds_cnn FP, its suite's first graph, 30 ms of a 33 ms first call (3.7 ms after
    this). The convolution's executable is kept in ``store`` (a compile cache) for the next
    process, which rebuilds it in 2-4 ms rather than compiling it in 14-21 ms (2026-11-28)."""
    client = client if client is not None else _client()
    from jaxlib import _jax

    devices = _jax.DeviceList((client.devices()[0],))
    key = _warm_key()
    exe = None
    blob = store.get(key) if store is not None else None
    if isinstance(blob, bytes):
        try:
            exe = client.deserialize_executable(blob, devices)
        except Exception:  # (not this jaxlib's, after all): compiled again
            exe = None
    compiled = exe is None
    if compiled:
        exe = client.compile_and_load(_WARM_CONV, devices, _jax.CompileOptions())
    entry = {"args": list(_WARM_SHAPES), "outs": [list(_WARM_SHAPES[0])]}
    out = HostExecutable(entry, exe, client)([x, w])[0]
    if compiled and store is not None:  # (after the run: the kernels are warm either way)
        try:
            store.put(key, exe.serialize())
        except Exception:
            pass
    return out


def _warm_key() -> dict[str, Any]:
    return {"kind": "warm", "format": FORMAT, "runtime": runtime_id(), "machine": machine_id(),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


_PREPARED: threading.Thread | None = None
_PREPARE_LOCK = threading.Lock()


def prepare(store: CompileCache | None = None, jax_client: bool = False
            ) -> threading.Thread | None:
    """Load jaxlib's extension and make the host client in a thread, where the host path
    would run a model (about 40 ms, once a process), then generate the float kernels' code
    (``warm_float_kernels``, about 50 ms, its executable kept in ``store``: by default the
    environment's compile cache); returns the thread, or None. ``jax_client``: run the
    warm-up on JAX's CPU client instead, not making the host client (a process that compiles
    a graph runs it through JAX). oneDNN's kernels are the process's, whichever client runs
    them first. bert_tiny_fp32, fresh processes, empty cache, three interleaved rounds
    (2026-11-29): the first run 22 -> 2 ms while its tracing took 5-11 ms longer.

    The reference model's binding loads its library when it is imported; ExecuTorch's plugin
    (``tosa_jax.executorch``) calls this when pytest starts, so that this overlaps the export
    of the first test's model instead of adding to its first graph's run. A failure here is
    left for that run to meet (it falls back to JAX's path). Once a process: later calls
    return the same thread."""
    global _PREPARED
    if not (enabled() and default_is_cpu()):
        return None

    def load() -> None:
        try:
            if jax_client:
                import jax

                client = jax.devices("cpu")[0].client
            else:
                client = _client()
            zeros = [np.zeros(s, d) for s, d in _WARM_SHAPES]
            warm_float_kernels(*zeros, store=store if store is not None else open_cache(None),
                               client=client)
        except Exception:  # see the docstring
            pass

    with _PREPARE_LOCK:
        if _PREPARED is None:
            # Not a daemon: the interpreter's exit waits for it (at most ~0.1 s). A daemon
            # thread still inside XLA when the interpreter finalizes aborts the process
            # ("FATAL: exception not rethrown"). Said explicitly: a thread started from a
            # daemon thread would otherwise be one too.
            _PREPARED = threading.Thread(target=load, name="tosa_jax.hostexec.prepare",
                                         daemon=False)
            _PREPARED.start()
    return _PREPARED


class HostExecutable:
    """A cached executable loaded on the host client: numpy arrays in, numpy arrays out."""

    def __init__(self, entry: dict[str, Any], exe: Any = None, client: Any = None) -> None:
        """From a host entry, or ``exe`` (an executable loaded on ``client``, by default the
        host client) and the entry's shapes (``args``, ``outs``)."""
        from jaxlib import _hlo, _jax

        client = client if client is not None else _client()
        self.device = client.devices()[0]
        self.exe = exe if exe is not None else client.deserialize_executable(
            entry["exe"], _jax.DeviceList((self.device,)))
        if (len(self.exe.get_parameter_layouts()) != len(entry["args"])
                or len(self.exe.get_output_layouts()) != len(entry["outs"])):
            raise ValueError("the executable does not match its entry")
        params = [(tuple(s), np.dtype(d)) for s, d in entry["args"]]
        weights = list(entry.get("weights", ()))
        # the caller's arrays: the parameters after the weights (hoist.Weighted)
        self.args = params[len(weights):]
        self.outs = [(tuple(s), np.dtype(d)) for s, d in entry["outs"]]
        self.tier, self.need, self.calls = entry.get("tier", 1), entry.get("need", 0), 0
        sharding = _sharding_class(_jax, _hlo)(self.device)
        self._put = [(_Aval(s, d), sharding) for s, d in self.args]
        self._handlers = [_jax.array_result_handler(_Aval(s, d), sharding, True,
                                                    _skip_checks=True) for s, d in self.outs]
        self._jax = _jax
        self._weights = [self._buffer(w, shape, dtype, _Aval(shape, dtype), sharding)
                         for w, (shape, dtype) in zip(weights, params[:len(weights)],
                                                      strict=True)]

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        j = self._jax
        if len(arrays) != len(self.args):
            raise ValueError(f"expected {len(self.args)} arrays, got {len(arrays)}")
        bufs = [*self._weights, *(self._buffer(a, shape, dtype, aval, sharding)
                                  for a, (shape, dtype), (aval, sharding)
                                  in zip(arrays, self.args, self._put, strict=True))]
        results = self.exe.execute_sharded(bufs).consume_with_handlers(self._handlers)
        return [_host_copy(r, shape, dtype) if dtype.name in _HOST_COPY
                else _to_numpy(j.buffer_to_dlpack_managed_tensor(r), shape, dtype)
                for r, (shape, dtype) in zip(results, self.outs, strict=True)]

    def _buffer(self, a: Any, shape: tuple[int, ...], dtype: np.dtype, aval: Any,
                sharding: Any) -> Any:
        """``a`` on the device, as the parameter of this shape and dtype."""
        a = np.asarray(a)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        if a.shape != shape or a.dtype != dtype:
            raise ValueError(f"expected {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
        return self._jax.batched_device_put(aval, sharding, [a], [self.device],
                                            enable_x64=False)


def load_entry(store: CompileCache, key: dict[str, Any]) -> HostExecutable | None:
    """The host executable stored under ``key``, or None (absent, or not loadable here)."""
    entry = store.get(key)
    if entry is None:
        return None
    try:
        return HostExecutable(entry)
    except Exception:
        return None


class _Aval:
    """What jaxlib's array constructors read of an abstract value."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype, self.weak_type = shape, dtype, False
        self.ndim = len(shape)


def _host_copy(result: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A result of a type jaxlib exports no DLPack tensor of (FP8UE8M0), its bytes copied out of
    the CPU buffer, which must hold exactly its elements (row-major: entry_of checks the layout).
    (jaxlib's own copy to numpy imports JAX; FP4, which XLA's CPU buffers hold two to a byte,
    is not carried.)"""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if result.on_device_size_in_bytes() != nbytes:
        raise ValueError(f"a result of {result.on_device_size_in_bytes()} bytes is not "
                         f"{dtype}{list(shape)}")
    raw = (ctypes.c_char * nbytes).from_address(result.unsafe_buffer_pointer()) if nbytes else b""
    return np.frombuffer(raw, np.uint8).copy().view(dtype).reshape(shape)


def _to_numpy(capsule: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A result's DLPack capsule as a numpy array: imported (no copy) where numpy can, else its
    bytes copied out (BF16, FP8) while the capsule holds the buffer."""
    if dtype.name not in _RAW_DLPACK:
        return np.from_dlpack(_DLPack(capsule))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    dims = tuple(t.shape[i] for i in range(t.ndim))
    if dims != shape or t.bits != 8 * dtype.itemsize or t.lanes != 1:
        raise ValueError(f"a result of {dims}, {t.bits} bits, is not {dtype}{list(shape)}")
    if t.strides and any(t.strides[i] != int(np.prod(dims[i + 1:], dtype=np.int64))
                         for i in range(t.ndim)):
        raise ValueError("a result that is not row-major")
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_char * nbytes).from_address(t.data + t.byte_offset) if nbytes else b""
    return np.frombuffer(raw, np.uint8).copy().view(dtype).reshape(shape)


class _DLTensor(ctypes.Structure):
    """DLPack's DLTensor (dlpack.h): the fields up to byte_offset, in order."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLPack:
    """A DLPack capsule of a CPU buffer, as ``np.from_dlpack`` takes it."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0


@cache
def _sharding_class(_jax: Any, _hlo: Any) -> type:
    """jaxlib's one-device sharding with the few properties that JAX adds in Python and
    jaxlib's device_put reads."""

    class OneDevice(_jax.SingleDeviceSharding):
        memory_kind = None
        is_fully_replicated = True
        is_fully_addressable = True
        num_devices = 1

        @property
        def _device_assignment(self) -> tuple[Any, ...]:
            return (self._device,)

        @property
        def device_set(self) -> set[Any]:
            return {self._device}

        def _to_xla_hlo_sharding(self, num_dimensions: int) -> Any:
            return _hlo.HloSharding.replicate()

    return OneDevice
