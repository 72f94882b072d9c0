"""The persistent compile cache: a second process runs without compiling; damaged, foreign and
stale entries are never trusted; the size bound holds; it can be moved and turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import cache as cache_module
from tosa_jax import hostexec
from tosa_jax.cache import SUFFIX, CompileCache, flush, open_cache
from tosa_jax.cli import main as cli

FIXTURES = Path(__file__).parent.parent / "fixtures"
CNN = FIXTURES / "cnn_int8.tosa"
X = np.load(FIXTURES / "cnn_int8.input.npy")


@pytest.fixture(autouse=True)
def _jax_entries_only(monkeypatch: pytest.MonkeyPatch):
    """These tests are about JAX's entries, so the host path (tosa_jax.hostexec, tested in
    test_hostexec.py) and the numpy programs (test_npexec.py) are off here and in the
    subprocesses, which inherit the environment: no host entries are written and model(x) from
    the cache goes through JAX's."""
    monkeypatch.setenv("TOSA_JAX_HOSTEXEC", "0")
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")  # (numpy programs: test_npexec.py)
    hostexec.enabled.cache_clear()
    yield
    monkeypatch.undo()
    hostexec.enabled.cache_clear()


def _kind(entry: Path) -> str | None:
    """The ``kind`` of an entry's key (read from its header), None for a compiled program's."""
    data = entry.read_bytes()
    at = len(cache_module.MAGIC)
    n = int.from_bytes(data[at:at + 4], "little")
    return json.loads(data[at + 4:at + 4 + n]).get("kind")


def _entries(d: Path) -> list[Path]:
    """The entries on disk, once this process's writes under way (put_later) are done;
    not the graph files' remembered digests (kept only for a file that has not changed in
    the last seconds, so there or not by the age of the fixture's file)."""
    flush()
    return sorted(p for p in d.glob("*" + SUFFIX) if _kind(p) != "file")


def _executables(d: Path) -> list[Path]:
    """The entries that hold executables (the others, of a few hundred bytes, record a loaded
    graph's inputs and outputs, so that a cached run need not read the graph)."""
    return [p for p in _entries(d) if p.stat().st_size > 4096]


def _run(d: Path, **kw) -> tuple[np.ndarray, str | None]:
    model = tosa_jax.load(CNN, cache=d, **kw)
    return np.asarray(model(X)), model.compile_source


def test_second_process_loads_the_executable(tmp_path: Path, reference) -> None:
    code = ("import sys, json, numpy as np, tosa_jax\n"
            f"m = tosa_jax.load({str(CNN)!r})\n"
            f"y = np.asarray(m(np.load({str(FIXTURES / 'cnn_int8.input.npy')!r})))\n"
            "heavy = [k for k in ('tosa_jax.serialization', 'tosa_jax.profiles',\n"
            "         'tosa_jax.lowering', 'tosa_jax.executor') if k in sys.modules]\n"
            "print(json.dumps([m.compile_source, y.tolist(), heavy]))\n")
    env = {**os.environ, "TOSA_JAX_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    assert [r[0] for r in runs] == ["compiled", "cache"]
    # from the cache nothing is read, validated or traced: none of those modules is imported
    assert runs[1][2] == []
    assert len(_entries(tmp_path)) == 2 and len(_executables(tmp_path)) == 1
    ref = reference(CNN, {tosa_jax.load(CNN, cache=False).inputs[0].name: X},
                    [tosa_jax.load(CNN, cache=False).outputs[0].name])
    want = next(iter(ref.values()))
    for _, y, _ in runs:
        np.testing.assert_array_equal(np.asarray(y, want.dtype), want)


def test_damaged_entries_are_rebuilt(tmp_path: Path) -> None:
    y0, how = _run(tmp_path)
    assert how == "compiled"
    (entry,) = _executables(tmp_path)
    good = entry.read_bytes()
    damaged = [good[: len(good) // 2],                       # truncated
               good[:-1] + bytes([good[-1] ^ 0xFF]),          # a flipped bit in the payload
               b"not a cache entry at all",                   # foreign format
               good.replace(b'"format":1', b'"format":7')]   # another key under this name
    for data in damaged:
        entry.write_bytes(data)
        y, how = _run(tmp_path)
        assert how == "compiled"
        np.testing.assert_array_equal(y, y0)
        flush()  # the rebuilt entry is written in the background
        assert entry.read_bytes() != data
        y, how = _run(tmp_path)  # rebuilt: the next model loads it
        assert how == "cache"
        np.testing.assert_array_equal(y, y0)


def test_key_separates_x64_and_inputs(tmp_path: Path) -> None:
    y0, _ = _run(tmp_path)
    with jax.enable_x64(True):
        y1, how = _run(tmp_path)
    assert how == "compiled"
    np.testing.assert_array_equal(y1, y0)
    assert len(_executables(tmp_path)) == 2
    other = tosa_jax.load(FIXTURES / "mlp_attn_int8.tosa", cache=tmp_path)
    other(*(np.zeros(s.shape, s.np_dtype) for s in other.inputs))
    assert other.compile_source == "compiled" and len(_executables(tmp_path)) == 3


def test_arrays_are_read_in_place_and_checked(tmp_path: Path) -> None:
    """A payload's arrays (the weights of an executable) come back equal, as aligned views of
    the entry's bytes; damage anywhere, their bytes included, makes the entry a miss."""
    store = CompileCache(tmp_path)
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal((3, 3, 64, 64)).astype(np.float32),
               rng.integers(-128, 128, (1000,), dtype=np.int8),
               np.asfortranarray(rng.standard_normal((5, 7))), np.arange(6)[::2]]
    payload = {"exe": b"\x00executable", "weights": weights, "n": 3}
    store.put({"k": 1}, payload)
    got = store.get({"k": 1})
    assert got["exe"] == payload["exe"] and got["n"] == 3
    for g, w in zip(got["weights"], weights, strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype
    assert all(g.ctypes.data % cache_module.ALIGN == 0 for g in got["weights"][:3])
    assert got["weights"][0].base is not None  # a view of the file's bytes, not a copy
    (path,) = _entries(tmp_path)
    good = path.read_bytes()
    at = good.index(weights[0].tobytes()[:64])  # inside the first array's bytes
    for data in (good[:at] + bytes([good[at] ^ 1]) + good[at + 1:], good[:-1], good[:at]):
        path.write_bytes(data)
        assert store.get({"k": 1}) is None
        assert not path.exists()  # removed, to be rebuilt
        path.write_bytes(good)
    assert store.get({"k": 2}) is None


def test_size_bound_evicts_least_recently_used(tmp_path: Path) -> None:
    _run(tmp_path)
    (first,) = _executables(tmp_path)
    size = first.stat().st_size
    small = CompileCache(tmp_path, max_bytes=int(size * 1.5))
    with jax.enable_x64(True):
        _run(small)  # a second executable does not fit beside the first: the older one goes
    (kept,) = _executables(tmp_path)
    assert kept != first
    assert sum(p.stat().st_size for p in _entries(tmp_path)) <= small.max_bytes
    tiny = CompileCache(tmp_path / "tiny", max_bytes=100)
    _run(tiny)  # an executable over the whole bound is not written
    assert _executables(tmp_path / "tiny") == []


def test_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tosa_jax.load(CNN, cache=False)
    model(X)
    assert model.cache is None and model.compile_source == "compiled"
    monkeypatch.setenv("TOSA_JAX_CACHE", "0")
    assert open_cache(None) is None
    monkeypatch.setenv("TOSA_JAX_CACHE", "1")
    monkeypatch.setenv("TOSA_JAX_CACHE_DIR", str(tmp_path / "moved"))
    model = tosa_jax.load(CNN)
    model(X)
    assert len(_executables(tmp_path / "moved")) == 1


def test_cli_shows_and_clears(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path)
    flush()
    # _entries' two, and the graph file's digest where it is remembered (by the file's age)
    n = len(list(tmp_path.glob("*" + SUFFIX)))
    assert len(_entries(tmp_path)) == 2 and n in (2, 3)
    assert cli(["cache", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and f"{n} entries" in out
    assert cli(["cache", "--dir", str(tmp_path), "--clear"]) == 0
    assert f"removed {n}" in capsys.readouterr().out
    assert list(tmp_path.glob("*" + SUFFIX)) == []


@pytest.mark.parametrize("name", ["cnn_int8", "mlp_attn_int8"])
def test_quick_tier_computes_what_the_optimized_one_does(name: str) -> None:
    """Integer graphs: the quick tier (LLVM optimizer off) against the optimized executable,
    bit for bit; the upgrade after the second call."""
    path = FIXTURES / f"{name}.tosa"
    model = tosa_jax.load(path, cache=False)
    x = np.load(FIXTURES / f"{name}.input.npy")
    quick = model(x)
    (slot,) = model._executables.values()
    assert slot.tier == 0
    model(x)  # without a cache, the second call starts the optimized compile
    _join_optimizers()
    (slot,) = model._executables.values()
    assert slot.tier == 1
    optimized = model(x)
    assert np.asarray(quick).tobytes() == np.asarray(optimized).tobytes()


def _join_optimizers() -> None:
    for t in threading.enumerate():
        if t.name == "tosa_jax-optimize":
            t.join()


@pytest.mark.parametrize("heavy", [True, False])
def test_cache_keeps_the_optimized_executable(tmp_path: Path, reference, heavy: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With a persistent cache, a heavy graph called once gets its first result from the quick
    tier, then the optimized executable is compiled in the background and replaces the quick
    one in the cache: the next load runs optimized code (tier 1) from the cache, bit for bit
    the reference model's result. A light graph keeps the quick one until a second call."""
    from tosa_jax import model as model_module

    monkeypatch.setattr(model_module, "EAGER_UPGRADE_FLOPS", 0 if heavy else float("inf"))
    model = tosa_jax.load(CNN, cache=tmp_path)
    quick = np.asarray(model(X))
    assert model.compile_source == "compiled"
    _join_optimizers()
    assert [s.tier for s in model._executables.values()] == [1 if heavy else 0]
    again = tosa_jax.load(CNN, cache=tmp_path)
    y = np.asarray(again(X))
    _join_optimizers()
    (slot,) = again._executables.values()
    assert again.compile_source == "cache" and slot.tier == (1 if heavy else 0)
    again(X)  # a second call upgrades whatever the graph's weight, and the cache with it
    _join_optimizers()
    third = tosa_jax.load(CNN, cache=tmp_path)
    z = np.asarray(third(X))
    assert [s.tier for s in third._executables.values()] == [1]
    (want,) = reference(CNN, {model.inputs[0].name: X}, [model.outputs[0].name]).values()
    assert quick.tobytes() == y.tobytes() == z.tobytes() == np.asarray(want, quick.dtype).tobytes()


def test_float_graphs_are_not_tiered() -> None:
    """The optimizer contracts float multiply-adds: a quick first call would differ from the
    later ones in the last bit, so float graphs get the optimized executable at once."""
    model = tosa_jax.load(FIXTURES / "cnn_fp32.tosa", cache=False)
    model(np.load(FIXTURES / "cnn_fp32.input.npy"))
    assert not model.tiered
    assert [s.tier for s in model._executables.values()] == [1]


def test_cached_model_reads_the_graph_only_when_asked(tmp_path: Path) -> None:
    """A second load of the same bytes with the same options takes inputs and outputs from
    the cache's record; the graph is read when something needs it, and gives the same."""
    first = tosa_jax.load(CNN, cache=tmp_path)
    y0 = np.asarray(first(X))
    again = tosa_jax.load(CNN, cache=tmp_path)
    assert again._graph is None
    assert again.inputs == first.inputs and again.outputs == first.outputs
    np.testing.assert_array_equal(np.asarray(again(X)), y0)
    assert again._graph is None and again.compile_source == "cache"
    assert again.requirements.summary() == first.requirements.summary()
    assert again.graph.operator_counts() == first.graph.operator_counts()
    np.testing.assert_array_equal(np.asarray(jax.jit(again.fn)(X)[0]), y0)
    with pytest.raises(tosa_jax.TosaInputError):
        again(X[..., :1])
    # other options (a target the graph must be checked against) are another record
    strict = tosa_jax.load(CNN, cache=tmp_path, profile="PRO-INT")
    assert strict._graph is not None


def test_cached_executable_runs_on_its_device(tmp_path: Path) -> None:
    """With several devices, a cached executable is loaded for the device it was built for
    (JAX's default would be every device of the backend)."""
    code = ("import json, jax\n"
            "jax.config.update('jax_num_cpu_devices', 4)\n"
            "import numpy as np, tosa_jax\n"
            f"x = np.load({str(FIXTURES / 'cnn_int8.input.npy')!r})\n"
            "out = []\n"
            "for dev in (None, jax.devices()[3]):\n"
            f"    m = tosa_jax.load({str(CNN)!r}, device=dev)\n"
            "    y = m(x)\n"
            "    (slot,) = m._executables.values()  # (default device: y is a numpy array)\n"
            "    devices = slot.exe.runtime_executable().local_devices()\n"
            "    out.append([m.compile_source, sorted(d.id for d in devices),\n"
            "                np.asarray(y).tolist()])\n"
            "print(json.dumps(out))\n")
    env = {**os.environ, "TOSA_JAX_CACHE_DIR": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    assert [[r[0], r[1]] for r in runs[0]] == [["compiled", [0]], ["compiled", [3]]]
    assert [[r[0], r[1]] for r in runs[1]] == [["cache", [0]], ["cache", [3]]]
    assert runs[0][0][2] == runs[0][1][2] == runs[1][0][2] == runs[1][1][2]


def test_called_from_a_daemon_thread_the_exit_waits_for_the_background_work(
        tmp_path: Path) -> None:
    """A model first called from a daemon thread (the conformance runner's workers are daemons),
    and the process ends at once: the optimizer and the cache writer it starts are still not
    daemons (a thread inherits its starter's flag), so the exit waits for them instead of
    aborting inside XLA ("FATAL: exception not rethrown"), and the next process loads the
    optimized executable."""
    code = ("import threading, numpy as np, tosa_jax\n"
            "from tosa_jax import model as mm\n"
            "mm.EAGER_UPGRADE_FLOPS = 0  # upgraded after the first call: the cache keeps it\n"
            "def work():\n"
            f"    m = tosa_jax.load({str(CNN)!r}, cache={str(tmp_path)!r})\n"
            f"    m(np.load({str(FIXTURES / 'cnn_int8.input.npy')!r}))\n"
            "t = threading.Thread(target=work, daemon=True)\n"
            "t.start(); t.join()\n"
            "ours = [t for t in threading.enumerate() if t.name.startswith('tosa_jax')]\n"
            "print(sum(t.daemon for t in ours))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0 and "FATAL" not in run.stderr, (run.returncode, run.stderr[-300:])
    assert run.stdout.split()[-1] == "0"
    again = tosa_jax.load(CNN, cache=tmp_path)
    again(X)
    (slot,) = again._executables.values()
    assert again.compile_source == "cache" and slot.tier == 1


def test_code_digest_covers_the_lowerings_before_they_are_imported() -> None:
    """A cached run imports no lowering; its key must still change when a lowering is edited.
    In an editable install lowering/ and profiles/ lie beside tosa_jax/, so the digest has to
    find them without importing them: the same digest before and after they are imported."""
    code = ("import sys, tosa_jax.cache as c; d = c.code_digest(); c.code_digest.cache_clear(); "
            "import tosa_jax.lowering, tosa_jax.profiles; "
            "assert 'tosa_jax.lowering' in sys.modules; print(d == c.code_digest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True"]


def test_writes_in_the_background_in_order(tmp_path: Path) -> None:
    """put_later: get waits for a write under way of its key; two writes of one key land in the
    order asked (the slow first one does not overwrite the second); make() -> None or an error
    stores nothing; flush waits for all."""
    store = CompileCache(tmp_path)
    key, other = {"k": 1}, {"k": 2}
    release = threading.Event()

    def slow() -> str:
        release.wait(10)
        return "first"

    store.put_later(key, slow)
    store.put_later(key, lambda: "second")
    store.put_later(other, lambda: None)
    store.put_later({"k": 3}, lambda: 1 / 0)
    assert not release.is_set() and not store.path(key).exists()  # nothing written yet
    threading.Timer(0.2, release.set).start()
    assert store.get(key) == "second"  # waited for both writes of the key
    flush()
    assert store.get(other) is None and store.get({"k": 3}) is None
    assert [p.name for p in _entries(tmp_path)] == [store.path(key).name]


def test_first_result_does_not_wait_for_the_cache_write(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """model(x) returns while its executable is still being serialized for the cache; a second
    model in the process then takes the entry once written."""
    from tosa_jax import model as model_mod

    release = threading.Event()
    serialize = model_mod._serialize

    def held(exe, blob=None):
        release.wait(10)
        return serialize(exe, blob)

    monkeypatch.setattr(model_mod, "_serialize", held)
    y, how = _run(tmp_path, tiered=False)
    assert how == "compiled" and not release.is_set()  # the result came before the write
    threading.Timer(0.2, release.set).start()
    y2, how2 = _run(tmp_path, tiered=False)
    assert how2 == "cache" and np.array_equal(y, y2)


def test_cache_writes_wait_for_the_first_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                reference) -> None:
    """An executable compiled for a call is serialized for the cache once its first result is
    computed, not meanwhile (on a 2-core machine the two shared the cores); ``model.compile``
    lets its writes go at once (nothing waits for a call that is not coming)."""
    from tosa_jax import model as model_mod
    from tosa_jax import seqcompile

    events: list[Any] = []
    out, serialized = model_mod._FirstResult.out, seqcompile.serialized_bytes

    def first_out(self, outs=None):
        events.append("result" if outs is not None else "no call")
        out(self, outs)

    def recorded(compiled):
        events.append(compiled)
        return serialized(compiled)

    def own(model: tosa_jax.Model) -> list[Any]:
        """The events of this model (an earlier test's background compile may serialize)."""
        (slot,) = model._executables.values()
        exe = getattr(slot.exe, "exe", slot.exe)  # (a hoist.Weighted's own)
        return [e if isinstance(e, str) else "serialized" for e in events
                if isinstance(e, str) or e is exe]

    monkeypatch.setattr(model_mod._FirstResult, "out", first_out)
    monkeypatch.setattr(seqcompile, "serialized_bytes", recorded)
    model = tosa_jax.load(CNN, cache=tmp_path / "a", tiered=False)
    y = np.asarray(model(X))
    ref = reference(CNN, {model.inputs[0].name: X}, [model.outputs[0].name])
    assert y.tobytes() == np.asarray(next(iter(ref.values())), y.dtype).tobytes()
    assert model.compile_source == "compiled" and len(_executables(tmp_path / "a")) == 1
    assert own(model) == ["result", "serialized"]

    events.clear()
    model = tosa_jax.load(CNN, cache=tmp_path / "b", tiered=False).compile(X)
    assert len(_executables(tmp_path / "b")) == 1  # (flush: no call to wait for)
    assert own(model) == ["no call", "serialized"]
    assert np.array_equal(np.asarray(model(X)), y)
    y2, how2 = _run(tmp_path / "b", tiered=False)
    assert how2 == "cache" and np.array_equal(y2, y)


def test_executable_carries_no_source_locations(reference) -> None:
    """The model's executable keeps no source locations (instruction metadata that a rebuild
    from the cache would parse): the same program, smaller, the reference model's integers."""
    from tosa_jax.model import compile_lowered

    m = tosa_jax.load(CNN, cache=False)
    options = m.xla_options((X,))
    plain = compile_lowered(jax.jit(m.fn).lower(X), options)
    assert "op_name=" in plain.as_text()  # what JAX's lowering keeps by default
    exe = compile_lowered(m._lower((X,)), options)
    assert "op_name=" not in exe.as_text() and "stack_frame" not in exe.as_text()
    size = len(exe.runtime_executable().serialize())
    assert size < len(plain.runtime_executable().serialize())
    out = m.outputs[0].name
    expected = reference(CNN, {m.inputs[0].name: X}, [out])[out]
    for e in (exe, plain):
        (got,) = [np.asarray(y) for y in jax.tree.leaves(e(X))]
        assert got.tobytes() == np.asarray(expected, got.dtype).tobytes()


def test_a_graph_file_hashed_before_is_not_read_again(tmp_path: Path, reference,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph file this cache has hashed, unchanged since (path, inode, size, times...), is
    loaded from the cache by the digest it remembers, without reading the file; the graph,
    read when something needs it, must still be those bytes; a file changed since (its times
    differ) is read and hashed again."""
    from tosa_jax import ir

    path, store = tmp_path / "net.tosa", tmp_path / "cache"
    path.write_bytes(CNN.read_bytes())
    monkeypatch.setattr(cache_module, "SETTLED_S", -1.0)  # (the file was written just now)
    first = tosa_jax.load(path, cache=store)
    y0 = np.asarray(first(X))
    flush()
    read = ir.file_bytes
    monkeypatch.setattr(ir, "file_bytes", lambda p: pytest.fail(f"{p} was read"))
    monkeypatch.chdir(tmp_path)  # (the same file by a relative path)
    again = tosa_jax.load("net.tosa", cache=store)
    monkeypatch.chdir("/")  # (and the graph read later from where it was loaded)
    y1 = np.asarray(again(X))
    assert again.compile_source == "cache" and again._graph is None
    want = next(iter(reference(CNN, {first.inputs[0].name: X}, [first.outputs[0].name])
                     .values()))
    np.testing.assert_array_equal(y0, want)
    np.testing.assert_array_equal(y1, want)
    assert again.graph.operator_counts() == first.graph.operator_counts()  # (read: checked)
    monkeypatch.setattr(ir, "file_bytes", read)

    # the file replaced after the load: the graph read then is refused, not mixed up
    stale = tosa_jax.load(path, cache=store)
    other = FIXTURES / "cnn_fp32.tosa"
    path.write_bytes(other.read_bytes())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # (the write's times differ)
    with pytest.raises(tosa_jax.TosaFormatError, match="changed after it was loaded"):
        stale.graph  # noqa: B018
    # and a load now reads and hashes the new bytes
    new = tosa_jax.load(path, cache=store)
    assert new.inputs == tosa_jax.load(other, cache=False).inputs != first.inputs


def test_a_graph_file_written_just_now_is_hashed_every_time(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A file written in the last cache.SETTLED_S seconds is not remembered: its times are as
    coarse as a clock tick, and a second write within that tick could keep them."""
    from tosa_jax import ir

    path, store = tmp_path / "net.tosa", tmp_path / "cache"
    path.write_bytes(CNN.read_bytes())
    tosa_jax.load(path, cache=store)(X)
    flush()
    assert CompileCache(store).file_digest(str(path), path.stat()) is None
    reads = []
    read = ir.file_bytes
    monkeypatch.setattr(ir, "file_bytes", lambda p: reads.append(p) or read(p))
    again = tosa_jax.load(path, cache=store)
    again(X)
    assert reads == [path] and again.compile_source == "cache"
