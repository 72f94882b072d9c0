"""Small graphs compiled without intra-op tasks (tosa_jax.seqcompile): the executable splits no
loop, computes what XLA's own does (the reference model's integers, the same float bits), and
survives the compile cache (its object code kept: XLA re-serializes a loaded executable
without it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import hostexec, seqcompile
from tosa_jax.cache import flush
from tosa_jax.ir import GraphBuilder
from tosa_jax.model import (
    LLVM_OPTIONS,
    SEQUENTIAL_ELEMENTS,
    SEQUENTIAL_INT_ELEMENTS,
    compile_lowered,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"
SPLIT = 'outer_dimension_partitions":["'


# XLA splits loops only where its client has more than one thread (a CPU each)
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.fixture(autouse=True)
def _xla_executables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about XLA's executables: a graph's first call runs one, not the graph's
    numpy program (tosa_jax.npexec, tested in test_npexec.py); subprocesses inherit this."""
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")


def _input(name: str) -> np.ndarray:
    return np.load(FIXTURES / f"{name}.input.npy")


def _slot(model: tosa_jax.Model):
    (slot,) = model._executables.values()
    return slot


@pytest.mark.parametrize("name", ["cnn_int8", "cnn_fp32"])
def test_small_graph_splits_no_loop_and_computes_the_same(name: str, reference) -> None:
    x = _input(name)
    model = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=False)
    assert model.sequential((x,))
    model.compile(x)  # the optimized executable, as a serving loop gets it
    slot = _slot(model)
    assert slot.tier == 1 and SPLIT not in slot.exe.as_text()
    assert seqcompile.executable_bytes(slot.exe) is not None
    ours = model(x)
    # XLA's own executable of the same lowering splits loops, and computes the same bits
    args = (jax.device_put(x),)
    jax.clear_caches()  # (else JAX's in-memory cache gives the same executable back)
    plain = compile_lowered(model._lower(args), model.xla_options(args))
    assert SPLIT in plain.as_text() or CPUS == 1
    (theirs,) = plain(*args)
    assert np.asarray(theirs).tobytes() == np.asarray(ours).tobytes()
    if name.endswith("int8"):
        ref = reference(FIXTURES / f"{name}.tosa", {model.inputs[0].name: x},
                        [model.outputs[0].name])
        np.testing.assert_array_equal(ours, ref[model.outputs[0].name])


def test_from_the_cache_in_another_process(tmp_path: Path, reference) -> None:
    """The entry written from the second client's bytes loads and runs, by JAX (``compile``)
    and by jaxlib alone (the host path)."""
    path = FIXTURES / "cnn_int8.tosa"
    x = _input("cnn_int8")
    model = tosa_jax.load(path, cache=tmp_path)
    model.compile(x)
    assert seqcompile.executable_bytes(_slot(model).exe) is not None
    flush()
    want = reference(path, {model.inputs[0].name: x}, [model.outputs[0].name])
    np.save(tmp_path / "x.npy", x)
    code = """
import sys, numpy as np, tosa_jax
m = tosa_jax.load(sys.argv[1], cache=sys.argv[2])
x = np.load(sys.argv[3])
host = m(x)                   # the host entry, without JAX
host_jax = "jax" in sys.modules
m.compile(x)                  # JAX's entry
print(m.compile_source, host_jax, host.tobytes().hex(), m(x).tobytes().hex())
"""
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path),
                          str(tmp_path / "x.npy")], check=True, capture_output=True,
                         text=True).stdout.split()
    source, host_jax, host, jaxed = out[-4:]
    expected = np.asarray(want[model.outputs[0].name]).tobytes().hex()
    assert source == "cache" and host_jax == "False" and host == expected and jaxed == expected


def test_which_graphs() -> None:
    """No large tensor (larger for integer graphs): sequential; a large tensor, or a batch of
    samples in one executable: XLA's split; TOSA_JAX_SEQUENTIAL=0: never."""
    small = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    assert small.sequential() and not small.sequential(samples=64)

    def add(dtype: str, elements: int) -> tosa_jax.Model:
        b = GraphBuilder()
        a, c = b.input("a", (elements,), dtype), b.input("c", (elements,), dtype)
        return tosa_jax.load(b.build([b.op("ADD", [a, c], (elements,), dtype)]), cache=False)

    assert add("INT32", SEQUENTIAL_ELEMENTS).sequential()
    assert not add("INT32", SEQUENTIAL_INT_ELEMENTS).sequential()
    assert add("FP32", SEQUENTIAL_ELEMENTS - 1).sequential()
    assert not add("FP32", SEQUENTIAL_ELEMENTS).sequential()


def test_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    small = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    monkeypatch.setenv(seqcompile.ENV, "0")
    assert not small.sequential()
    assert hostexec.program_options()["sequential"] == "0"  # a cache key of its own


def test_an_executable_given_again_by_jax(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX's in-memory cache hands the executable of an identical compile back: its bytes are
    found while remembered; once forgotten, it is never serialized (its re-serialized form
    would lack the object code)."""
    from tosa_jax.model import _serialize

    x = _input("cnn_int8")
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    args = (jax.device_put(x),)
    lowered = model._lower(args)
    first = compile_lowered(lowered, model.xla_options(args), sequential=True)
    again = compile_lowered(lowered, model.xla_options(args), sequential=True)
    assert again.runtime_executable() is first.runtime_executable()
    assert seqcompile.executable_bytes(again) == seqcompile.executable_bytes(first) is not None
    assert _serialize(again) is not None
    monkeypatch.setattr(seqcompile, "_BYTES", type(seqcompile._BYTES)())
    forgotten = compile_lowered(lowered, model.xla_options(args), sequential=True)
    assert not seqcompile.serializable(forgotten)
    assert _serialize(forgotten) is None and hostexec.entry_of(forgotten) is None


def _affinity(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except OSError:  # (a thread that has ended)
        return None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux")
def test_the_callers_cpus_are_left_alone() -> None:
    """The second client is made with its creating thread held to one CPU; the thread gets its
    CPUs back, so do the threads the client started (the compiler's parallel work runs on
    them), and JAX's client keeps all of them."""
    before = os.sched_getaffinity(0)
    seqcompile._client()
    assert os.sched_getaffinity(0) == before
    if len(before) > 1:
        held = [tid for tid in seqcompile._threads()
                if _affinity(tid) == {min(before)}]
        assert seqcompile._threads() and not held
    x = _input("cnn_fp32")
    model = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    model.compile(x)
    assert SPLIT not in _slot(model).exe.as_text()
    # XLA's own compile in this process still splits loops: JAX's client has every CPU
    if len(before) > 1:
        args = (jax.device_put(x),)
        jax.clear_caches()
        assert SPLIT in compile_lowered(model._lower(args), model.xla_options(args)).as_text()


def test_llvm_options_are_merged_into_the_compile_options() -> None:
    """LLVM_OPTIONS reach XLA in the CompileOptions' debug options (a map field that JAX's
    compile options cannot set); a flag the options carry already (XLA_FLAGS) keeps its value."""
    from jaxlib import _jax

    def entry(value: bytes) -> bytes:  # DebugOptions.xla_backend_extra_options, one entry
        return seqcompile._field(500, seqcompile._field(1, b"-unroll-full-max-count")
                                 + seqcompile._field(2, value))

    plain = _jax.CompileOptions()
    plain.num_replicas = 1
    plain.executable_build_options.debug_options.xla_backend_optimization_level = 1
    ours = seqcompile.with_llvm_options(plain, LLVM_OPTIONS)
    assert LLVM_OPTIONS == (("-unroll-full-max-count", "4"),)
    assert entry(b"4") in ours.SerializeAsString()
    assert entry(b"4") not in plain.SerializeAsString()
    assert ours.executable_build_options.debug_options.xla_backend_optimization_level == 1
    users = seqcompile.with_llvm_options(plain, (("-unroll-full-max-count", "8"),))
    again = seqcompile.with_llvm_options(users, LLVM_OPTIONS).SerializeAsString()
    assert entry(b"8") in again and entry(b"4") not in again


def test_llvm_options_change_the_code_not_the_values() -> None:
    """A softmax of 1,024 elements: with LLVM's full unrolling capped, XLA makes other code
    (LLVM unrolled its loops whole); the same function compiled twice without it, the same size
    of code. The values stay within float32 rounding of each other and of numpy's float64
    softmax."""
    x = np.linspace(-3, 3, 1024, dtype=np.float32).reshape(8, 128)

    def softmax(v: jax.Array) -> jax.Array:
        e = jax.numpy.exp(v - v.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    sizes, values = [], []
    for name, llvm in (("fa", ()), ("fb", LLVM_OPTIONS), ("fc", ())):
        fn = lambda v: softmax(v)  # noqa: E731  (a new name: JAX's in-memory cache misses)
        fn.__name__ = name
        compiled = seqcompile.compile_with(jax.jit(fn).lower(x).compile, False, llvm)
        sizes.append(len(compiled.runtime_executable().serialize()))
        values.append(np.asarray(compiled(x)))
    assert abs(sizes[0] - sizes[2]) < 64 < min(abs(sizes[1] - sizes[0]), abs(sizes[1] - sizes[2]))
    np.testing.assert_allclose(values[1], values[0], rtol=1e-6)
    np.testing.assert_array_equal(values[2], values[0])
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    exact = e / e.sum(axis=-1, keepdims=True)
    for v in values:  # (the oracle: float64, not XLA's own output)
        np.testing.assert_allclose(v, exact, rtol=2e-6, atol=1e-9)
