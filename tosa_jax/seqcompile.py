"""Small CPU programs compiled without intra-op tasks: XLA splits none of their loops.

XLA CPU splits a loop fusion into parallel tasks (``outer_dimension_partitions``) when its cost
model puts it over "100 us of work on a 2 GHz core" (flops + 10 x bytes over 100,000); a fusion
of a few thousand int32 elements and a RESCALE's twenty operations qualifies, yet runs in 2-5 us
vectorized. Each split task is handed to the client's intra-op thread pool and waited for,
and on this project's 2-core VM that round trip costs more than the work: cnn_int8 spent a
third of its call in the pool's work stealing (perf). The number of tasks is capped by the
compiling client's intra-op thread count (``max_parallelism``), which XLA fixes when the client
is made (from ``NPROC``, else the CPUs it may run on), not per compile. So a graph with little
work is compiled by a second CPU client made with one intra-op thread, and its serialized
executable is loaded into JAX's client, where it runs as any other (its library kernels,
Eigen's and YNNPACK's, still use JAX's threads: they take the pool at run time). Results are
bit-identical: a split task computes the same elements with the same code.

Measured 2026-11-26 (batch 1, min of 9 interleaved rounds in one process, nice -10, the
machine otherwise idle; default executable -> compiled here): cnn_int8 0.144 -> 0.066 ms,
cnn_fp32 0.097 -> 0.056 ms, lstm_int8 0.39 -> 0.40 ms, unet_int8 4.6 -> 4.4 ms; but resnet_fp32
9.0 -> 10.5 ms, mobilenetv2_fp32 6.4 -> 7.4 ms, bert_tiny_fp32 1.40 -> 1.57 ms: large float
graphs keep XLA's split (``tosa_jax.model.Model.sequential`` chooses).

The executable is handed to JAX through ``jax._src.compiler.backend_compile_and_load``, wrapped
while ``compile_with`` runs (JAX's own compile cache, when a user turns it on, gets the plain
compile: it re-serializes what it stores). XLA re-serializes a deserialized CPU executable
without its object code, so the bytes the second client made are kept for tosa_jax's compile
cache (``executable_bytes``), and an executable whose bytes are not known is not cached.
Anything unexpected compiles as usual.

The same wrapper gives every CPU compile of tosa_jax's (``compile_with``'s ``llvm``) the LLVM
command-line options tosa_jax.model.LLVM_OPTIONS asks for: XLA takes them per module, from its
DebugOptions' ``xla_backend_extra_options``, a map field that JAX's compile options cannot set
(they set scalar fields only), so they are merged into the CompileOptions proto here. JAX's own
compiles, and the process's ``XLA_FLAGS``, are left as they are; a flag ``XLA_FLAGS`` sets keeps
the value it gives.
"""

from __future__ import annotations

import contextvars
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

ENV = "TOSA_JAX_SEQUENTIAL"  # "0": compile every graph as XLA would (part of the cache keys)
_UNKNOWN = "_tosa_jax_unknown_bytes"
# What the backend compiles of the compile running in this context did (a list to append to:
# the second client's bytes, or None where it compiled as usual), or None outside compile_with.
_PENDING: contextvars.ContextVar[list[bytes | None] | None] = contextvars.ContextVar(
    "tosa_jax_sequential", default=None)
# The bytes of the executables loaded from the second client, by the executable's id (held,
# so that the id is not reused): JAX's in-memory compile cache may hand the same executable
# to a later compile of the same lowering. The most recent REMEMBERED are kept.
_BYTES: OrderedDict[int, tuple[Any, bytes]] = OrderedDict()
# The LLVM options ((flag, value) pairs) of the compiles in this context (compile_with's llvm).
_LLVM: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "tosa_jax_llvm", default=())
REMEMBERED = 32
_LOCK = threading.Lock()
_CLIENT: Any = None
_HOOKED = False


def _threads() -> set[int]:
    """This process's thread ids (Linux), or none where they cannot be listed."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _client() -> Any:
    """A CPU client of one device and one intra-op thread, made once a process. XLA sizes a
    client's pool from ``NPROC``, else from the CPUs the calling thread may run on: this thread
    is held to one CPU while the client is made. The threads the client starts then inherit
    that mask, and the compiler's parallel work runs on them (LLVM's code generation of a
    module's parts, the kernels' compiles): they get the caller's CPUs back once the client is
    made, as the pool's size is fixed by then. (Left held to one CPU, they made a fresh
    process's first compile of encoder_fp32 0.55-0.65 -> 0.86-0.96 s.) Where that cannot be
    done, or ``NPROC`` is set, ``NPROC`` is set to 1 for that moment (the process environment:
    another thread reading it then would race)."""
    global _CLIENT
    with _LOCK:
        if _CLIENT is None:
            from jaxlib import _jax

            def make() -> Any:
                return _jax.get_tfrt_cpu_client(asynchronous=False, num_devices=1)

            if hasattr(os, "sched_setaffinity") and "NPROC" not in os.environ:
                mask = os.sched_getaffinity(0)  # (0: this thread)
                held = {min(mask)}
                others = _threads()
                os.sched_setaffinity(0, held)
                try:
                    _CLIENT = make()
                finally:
                    os.sched_setaffinity(0, mask)
                    for tid in _threads() - others:  # the client's threads (held by the mask)
                        try:
                            if os.sched_getaffinity(tid) == held:
                                os.sched_setaffinity(tid, mask)
                        except OSError:  # (a thread that has ended since)
                            pass
            else:
                before = os.environ.get("NPROC")
                os.environ["NPROC"] = "1"
                try:
                    _CLIENT = make()
                finally:
                    if before is None:
                        del os.environ["NPROC"]
                    else:
                        os.environ["NPROC"] = before
    return _CLIENT


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: its tag and length (varints), then ``payload``."""
    out = bytearray()
    for v in ((number << 3) | 2, len(payload)):
        while v > 0x7F:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out) + payload


def with_llvm_options(options: Any, llvm: tuple[tuple[str, str], ...]) -> Any:
    """XLA CompileOptions ``options`` with the LLVM options ``llvm`` added to its debug options'
    ``xla_backend_extra_options``; a flag already there (from ``XLA_FLAGS``) keeps its value.
    A message parsed from concatenated bytes merges them: CompileOptionsProto's
    executable_build_options (field 3), its debug_options (3), their xla_backend_extra_options
    (500, entries of key 1 and value 2). ``options`` itself where that cannot be done."""
    try:
        raw = options.SerializeAsString()
        entries = [_field(500, _field(1, k.encode()) + _field(2, v.encode()))
                   for k, v in llvm if k.encode() not in raw]
        if not entries:
            return options
        merged = type(options).ParseFromString(
            raw + b"".join(_field(3, _field(3, e)) for e in entries))
        got = merged.SerializeAsString()
        return merged if all(e in got for e in entries) else options
    except Exception:  # another jaxlib's CompileOptions
        return options


def _hook() -> None:
    """Wrap JAX's backend compile once: inside ``compile_with``, a one-device CPU compile is
    done by the one-thread client and loaded into JAX's."""
    global _HOOKED
    with _LOCK:
        if _HOOKED:
            return
        from jax._src import compilation_cache, compiler
        from jaxlib import _jax

        original = compiler.backend_compile_and_load
        persistent_cache = compilation_cache.is_persistent_cache_enabled

        def backend_compile_and_load(*args: Any, **kwargs: Any) -> Any:
            pending, llvm = _PENDING.get(), _LLVM.get()
            if (pending is None and not llvm) or kwargs or len(args) != 5:
                return original(*args, **kwargs)  # not ours, or another JAX's call
            backend, module, executable_devices, options, host_callbacks = args
            if llvm and backend.platform == "cpu":
                options = with_llvm_options(options, llvm)
            if pending is None:
                return original(backend, module, executable_devices, options, host_callbacks)
            if (not host_callbacks and backend.platform == "cpu"
                    and len(executable_devices) == 1 and not persistent_cache()):
                try:
                    client = _client()
                    exe = client.compile_and_load(
                        module, _jax.DeviceList((client.devices()[0],)), options)
                    blob = client.serialize_executable(exe)
                    loaded = backend.deserialize_executable(blob, executable_devices)
                except Exception:  # (a device this client lacks, a jaxlib that differs)
                    pass
                else:
                    pending.append(blob)
                    with _LOCK:
                        _BYTES[id(loaded)] = (loaded, blob)
                        while len(_BYTES) > REMEMBERED:
                            _BYTES.popitem(last=False)
                    return loaded
            pending.append(None)
            return original(backend, module, executable_devices, options, host_callbacks)

        compiler.backend_compile_and_load = backend_compile_and_load
        _HOOKED = True


def enabled() -> bool:
    """Whether small graphs are compiled here: ``TOSA_JAX_SEQUENTIAL=0`` turns it off, ``=1``
    on; by default on with the jaxlib releases whose private API (JAX's backend compile, the
    CPU client) this was written and tested against, hostexec's."""
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    if env in ("1", "on", "true", "yes"):
        return True
    from tosa_jax import hostexec

    return hostexec.tested_jaxlib()


def compile_with(compile: Callable[[], Any], sequential: bool = True,
                 llvm: tuple[tuple[str, str], ...] = ()) -> Any:
    """``compile()`` (a ``jax.stages.Lowered.compile`` call) with, where that can be done, its
    one-device CPU executable compiled without intra-op tasks (``sequential``) and its CPU
    compiles given the LLVM options ``llvm``; the ``Compiled`` it returns."""
    try:
        _hook()
    except Exception:  # another JAX: compile as usual
        return compile()
    llvm_token = _LLVM.set(tuple(llvm))
    try:
        if not sequential:
            return compile()
        pending: list[bytes | None] = []
        token = _PENDING.set(pending)
        try:
            compiled = compile()
        finally:
            _PENDING.reset(token)
    finally:
        _LLVM.reset(llvm_token)
    if not pending and executable_bytes(compiled) is None:
        # JAX's in-memory cache gave an executable compiled before, whose bytes are no longer
        # remembered: it may be one of the second client's, so it is never serialized.
        setattr(compiled, _UNKNOWN, True)
    return compiled


def executable_bytes(compiled: Any) -> bytes | None:
    """The serialized executable of a ``Compiled`` loaded from the second client (kept when it
    was compiled), else None."""
    try:
        exe = compiled.runtime_executable()
    except Exception:
        return None
    with _LOCK:
        held = _BYTES.get(id(exe))
    return held[1] if held is not None and held[0] is exe else None


def serializable(compiled: Any) -> bool:
    """False for an executable that may have come from the second client with its bytes
    forgotten (serializing it would drop its code)."""
    return not getattr(compiled, _UNKNOWN, False)


def serialized_bytes(compiled: Any) -> bytes:
    """The executable of a ``Compiled`` serialized: ``executable_bytes`` where it has them
    (re-serializing it would drop its code), else XLA's serialization of it."""
    if not serializable(compiled):
        raise ValueError("this executable's bytes are not known")
    blob = executable_bytes(compiled)
    return blob if blob is not None else compiled.runtime_executable().serialize()


def serialize(compiled: Any, blob: bytes | None = None) -> tuple[bytes, Any, Any]:
    """``jax.experimental.serialize_executable.serialize(compiled)``, with the executable's
    bytes ``blob`` (``serialized_bytes(compiled)``, the default) in place of a serialization
    of its own."""
    import jax
    from jax._src.lib import xla_client as xc
    from jax.experimental import serialize_executable

    unloaded = getattr(compiled._executable, "_unloaded_executable", None)
    if (unloaded is None or compiled._params.const_args
            or (getattr(unloaded, "mut", None) and unloaded.mut.in_mut)):
        raise ValueError("this executable cannot be serialized")
    if blob is None:
        blob = serialized_bytes(compiled)

    class Pickler(serialize_executable._JaxPjrtPickler):
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, xc.LoadedExecutable):
                return ("exec", blob)
            return super().persistent_id(obj)

    args_info_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
    with io.BytesIO() as file:
        Pickler(file).dump((unloaded, args_info_flat, compiled._no_kwargs))
        return file.getvalue(), in_tree, compiled.out_tree
