"""Cached executables run without JAX (tosa_jax.hostexec): a second process's ``Model.run``,
``reference_model.run`` and ``tosa-jax run`` load the executable through jaxlib alone and give
the reference model's integer results; anything the host path cannot take goes the JAX way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import hostexec
from tosa_jax.cache import CompileCache, flush

FIXTURES = Path(__file__).parent.parent / "fixtures"

# A second process: run() and the reference-model binding from the cache; reports where the
# executable came from, whether JAX was imported, and the outputs.
SECOND = """
import sys, json, numpy as np, tosa_jax
from tosa_jax import reference_model as rm
path, xs = sys.argv[1], [np.load(p) for p in sys.argv[2:]]
m = tosa_jax.load(path)
outs = m.run({s.name: x for s, x in zip(m.inputs, xs)})
source, jax_after_run = m.compile_source, "jax" in sys.modules
rm_outs, status = rm.run(open(path, "rb").read(), xs)
print(json.dumps({"source": source, "jax": jax_after_run, "jax_rm": "jax" in sys.modules,
                  "status": status.name, "outs": [o.tolist() for o in outs.values()],
                  "rm": [o.tolist() for o in rm_outs]}))
"""


def _inputs(model: tosa_jax.Model, name: str, tmp: Path) -> list[Path]:
    rng = np.random.default_rng(7)
    paths = []
    for i, s in enumerate(model.inputs):
        given = FIXTURES / f"{name}.input.npy"
        if i == 0 and given.exists() and np.load(given).shape == s.shape:
            x = np.load(given).astype(s.np_dtype)
        elif s.np_dtype.kind == "f":
            x = rng.standard_normal(s.shape).astype(s.np_dtype)
        else:
            x = rng.integers(-128, 128, s.shape).astype(s.np_dtype)
        paths.append(tmp / f"x{i}.npy")
        np.save(paths[-1], x)
    return paths


def _two_processes(code: str, cache: Path, *argv: str) -> list:
    """``code`` run in two fresh processes, one after the other, on the compile cache
    ``cache``: the JSON each prints last."""
    env = {**os.environ, "TOSA_JAX_CACHE_DIR": str(cache)}
    return [json.loads(subprocess.run([sys.executable, "-c", code, *argv], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]


def _host_entries(d: Path) -> list[Path]:
    """The host entries on disk, once this process's cache writes under way are done."""
    flush()
    return [p for p in d.glob("*.xla") if b'"kind":"host"' in p.read_bytes()[:4096]]


@pytest.mark.parametrize("name", ["cnn_int8", "mlp_attn_int8", "cnn_fp32"])
def test_second_process_runs_without_jax(name: str, tmp_path: Path, reference) -> None:
    path = FIXTURES / f"{name}.tosa"
    cache = tmp_path / "cache"
    probe = tosa_jax.load(path, cache=False)
    xs = _inputs(probe, name, tmp_path)
    runs = _two_processes(SECOND, cache, str(path), *map(str, xs))
    assert runs[0]["source"] == "compiled" and runs[0]["jax"]
    # Model.run's program, and reference_model.run's (which also checks the REQUIREs)
    assert len(_host_entries(cache)) == 2
    second = runs[1]
    # the second process never imports JAX, for either entry point
    assert second["source"] == "cache" and not second["jax"] and not second["jax_rm"]
    assert second["status"].endswith("TOSA_VALID")
    arrays = [np.load(x) for x in xs]
    want = reference(path, {s.name: x for s, x in zip(probe.inputs, arrays)},
                     [s.name for s in probe.outputs])
    for spec, got, got_rm, jax_path in zip(probe.outputs, second["outs"], second["rm"],
                                           runs[0]["outs"]):
        got, got_rm = np.asarray(got, spec.np_dtype), np.asarray(got_rm, spec.np_dtype)
        # the same executable as the JAX path ran in the first process: the same bits
        np.testing.assert_array_equal(got, np.asarray(jax_path, spec.np_dtype))
        np.testing.assert_array_equal(got_rm, got)
        if spec.np_dtype.kind == "f":
            np.testing.assert_allclose(got, want[spec.name], rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want[spec.name])


def test_cli_run_from_the_cache(tmp_path: Path, reference) -> None:
    """``tosa-jax run`` a second time: from the cache, without JAX, the reference's result."""
    path = FIXTURES / "cnn_int8.tosa"
    probe = tosa_jax.load(path, cache=False)
    (x,) = _inputs(probe, "cnn_int8", tmp_path)
    env = {**os.environ, "TOSA_JAX_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import sys; from tosa_jax.cli import main; rc = main(sys.argv[1:]); "
            "print('jax' in sys.modules); sys.exit(rc)")
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        r = subprocess.run([sys.executable, "-c", code, "run", str(path), str(x), "-o", str(out)],
                           env=env, check=True, capture_output=True, text=True)
        outs.append((r.stdout + r.stderr, np.load(out / f"{probe.outputs[0].name}.npy")))
    assert "compile cache" not in outs[0][0] and "\nTrue\n" in outs[0][0]
    assert "compile cache" in outs[1][0] and "\nFalse\n" in outs[1][0]
    want = reference(path, {probe.inputs[0].name: np.load(x)}, [probe.outputs[0].name])
    for _, y in outs:
        np.testing.assert_array_equal(y, want[probe.outputs[0].name])


def _compiled(cache: Path, name: str = "cnn_int8", **kw) -> tuple[tosa_jax.Model, dict]:
    """A model compiled in this process (filling ``cache``) and its inputs by name."""
    model = tosa_jax.load(FIXTURES / f"{name}.tosa", cache=cache, **kw)
    xs = {s.name: np.load(FIXTURES / f"{name}.input.npy").astype(s.np_dtype)
          for s in model.inputs}
    model.run(xs)
    return model, xs


def test_in_process_and_bit_identical(tmp_path: Path) -> None:
    first, xs = _compiled(tmp_path)
    want = first.run(xs)
    again = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    got = again.run(xs)
    assert isinstance(again._host, hostexec.HostExecutable) and again.compile_source == "cache"
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
        assert type(got[k]) is np.ndarray and got[k].dtype == want[k].dtype


def test_quick_tier_runs_once_then_jax_upgrades(tmp_path: Path) -> None:
    _compiled(tmp_path)  # cnn_int8 is light: its quick-tier executable is what the cache holds
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    xs = {s.name: np.load(FIXTURES / "cnn_int8.input.npy") for s in model.inputs}
    y1 = model.run(xs)
    assert isinstance(model._host, hostexec.HostExecutable) and model._host.tier == 0
    y2 = model.run(xs)  # a second call: the JAX path, which upgrades the quick tier
    assert model._host is False and model._executables
    for k in y1:
        np.testing.assert_array_equal(y1[k], y2[k])


def test_not_written_outside_the_default_configuration(tmp_path: Path) -> None:
    with jax.enable_x64(True):
        _compiled(tmp_path / "x64")
    assert _host_entries(tmp_path / "x64") == []
    _compiled(tmp_path / "dev", device="cpu")  # a device asked for: JAX's path only
    assert _host_entries(tmp_path / "dev") == []
    model, xs = _compiled(tmp_path / "plain")
    assert len(_host_entries(tmp_path / "plain")) == 1
    asked = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path / "plain", device="cpu")
    asked.run(xs)
    assert asked._host is False


def test_only_plain_tensors() -> None:
    """Wide integers (INT48), packed and coded types (INT4, FP6) and block-scaled tensors need
    JAX's conversions; BOOL, INT8/16/32, FP16/32, BF16 and FP8 cross as they are."""
    for dtype, plain in (("INT48", False), ("INT4", False), ("INT8", True), ("BF16", True),
                         ("FP8E5M2", True)):
        b = tosa_jax.GraphBuilder()
        x = b.input("x", (2, 3), dtype)
        graph = b.build([b.op("IDENTITY", [x], (2, 3), dtype)])
        model = tosa_jax.load(tosa_jax.write(graph), cache=Path("/nonexistent"))
        assert model.cache is not None and (model._host_key() is not None) is plain, dtype


def test_bf16_and_fp8_cross_as_bits(tmp_path: Path, reference) -> None:
    """BF16 in, BF16 and FP8 out: numpy imports no DLPack tensor of them, so the host path copies
    their bytes; the reference model's bits, and the JAX path's."""
    import ml_dtypes

    b = tosa_jax.GraphBuilder()
    x, y = b.input("x", (4, 5), "BF16"), b.input("y", (4, 5), "BF16")
    s = b.op("ADD", [x, y], (4, 5), "BF16", name="s")
    graph = b.build([s, b.op("CAST", [s], (4, 5), "FP8E4M3", name="f8")])
    data = tosa_jax.write(graph)
    rng = np.random.default_rng(5)
    xs = {k: (rng.standard_normal((4, 5)) * 4).astype(ml_dtypes.bfloat16) for k in ("x", "y")}
    want = reference(data, xs, ["s", "f8"])
    jax_path = tosa_jax.load(data, cache=tmp_path).run(xs)  # compiles, writes the host entry
    model = tosa_jax.load(data, cache=tmp_path)
    got = model.run(xs)
    assert isinstance(model._host, hostexec.HostExecutable)
    for name in ("s", "f8"):
        bits = np.dtype(f"u{got[name].dtype.itemsize}")
        assert got[name].dtype == jax_path[name].dtype
        np.testing.assert_array_equal(got[name].view(bits), jax_path[name].view(bits))
        np.testing.assert_array_equal(got[name].view(bits), np.asarray(want[name]).view(bits))


def test_damaged_or_unloadable_entries_go_the_jax_way(tmp_path: Path) -> None:
    model, xs = _compiled(tmp_path)
    want = model.run(xs)
    (entry,) = _host_entries(tmp_path)
    good = entry.read_bytes()
    entry.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))  # fails its checksum
    again = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    np.testing.assert_array_equal(next(iter(again.run(xs).values())), next(iter(want.values())))
    assert again._host is False
    # a well-formed entry whose executable XLA cannot load
    store = CompileCache(tmp_path)
    key = again._host_key()
    store.put(key, {"exe": b"\0" * 64, "args": [], "outs": [], "need": 0, "tier": 1})
    third = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    np.testing.assert_array_equal(next(iter(third.run(xs).values())), next(iter(want.values())))
    assert third._host is False


def test_memory_limit_holds(tmp_path: Path) -> None:
    """The executable's own memory need is checked against the model's limit before the host
    path runs it, as the JAX path checks it (whose refusal then names the figures)."""
    model, xs = _compiled(tmp_path)
    store = CompileCache(tmp_path)
    entry = store.get(model._host_key())
    assert 0 < entry["need"] < 1 << 20
    store.put(model._host_key(), {**entry, "need": 1 << 40})
    again = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    again.run(xs)
    assert again._host is False and again._executables  # JAX's entry: its true need, in limit


def test_key_names_what_decides_the_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    args = [((1, 3, 32, 32), "int8")]
    key = hostexec.host_key("g", args)
    assert key == hostexec.host_key("g", args)
    assert key != hostexec.host_key("g", [((2, 3, 32, 32), "int8")])
    assert key != hostexec.host_key("h", args)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    assert key != hostexec.host_key("g", args)
    assert key["machine"] == hostexec.machine_id() and len(key["runtime"]) == 24


def test_scalars_and_strided_inputs(tmp_path: Path, reference) -> None:
    """A rank-0 tensor stays rank 0 and a strided view is read as its values, in both paths."""
    b = tosa_jax.GraphBuilder()
    s = b.input("s", (), "INT32")
    x = b.input("x", (3, 4), "INT32")
    graph = b.build([b.op("NEGATE", [s, b.const([0], "INT32"), b.const([0], "INT32")], (), "INT32"),
                     b.op("ABS", [x], (3, 4), "INT32")])
    data = tosa_jax.write(graph)
    rng = np.random.default_rng(3)
    xs = {"s": np.array(-12345, np.int32),
          "x": rng.integers(-30000, 30000, (4, 3)).astype(np.int32).T}  # not C-contiguous
    want = reference(data, {k: np.array(v, order="C") for k, v in xs.items()},
                     list(graph.main.outputs))
    tosa_jax.load(data, cache=tmp_path).run(xs)  # compiles, fills the cache
    model = tosa_jax.load(data, cache=tmp_path)
    got = model.run(xs)
    assert isinstance(model._host, hostexec.HostExecutable)
    for name in graph.main.outputs:
        assert got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name])


def test_an_entry_that_fails_to_run_goes_the_jax_way(tmp_path: Path) -> None:
    """XLA serializes a CPU executable it deserialized without its object code: it loads, then
    fails to run ("Function ... not found"). Such an entry is never written (only freshly
    compiled executables are), and one that fails anyway is left for the JAX path."""
    model, xs = _compiled(tmp_path)
    want = model.run(xs)
    (entry,) = _host_entries(tmp_path)
    entry.unlink()
    from_jax_cache = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    from_jax_cache.run(xs)
    assert from_jax_cache.compile_source == "cache" and _host_entries(tmp_path) == []
    (slot,) = from_jax_cache._executables.values()
    broken = hostexec.entry_of(slot.exe)
    CompileCache(tmp_path).put(from_jax_cache._host_key(), {**broken, "need": 0, "tier": 1})
    again = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    got = again.run(xs)
    assert again._host is False and again._executables
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_turned_off_or_untested_jaxlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """TOSA_JAX_HOSTEXEC=0 turns the host path off; a jaxlib it was not tested on gets the JAX
    path unless TOSA_JAX_HOSTEXEC=1 asks for it."""
    model, xs = _compiled(tmp_path)
    assert model._host_key() is not None
    for env, version, on in (("0", "0.10.2", False), ("", "0.11.0", False), ("1", "0.11.0", True),
                             ("", "0.10.9", True)):
        hostexec.enabled.cache_clear()
        monkeypatch.setenv("TOSA_JAX_HOSTEXEC", env)
        monkeypatch.setattr(hostexec, "_jaxlib_version", lambda v=version: v)
        assert hostexec.enabled() is on, (env, version)
        assert (model._host_key() is not None) is on
    hostexec.enabled.cache_clear()
    monkeypatch.undo()
    hostexec.enabled.cache_clear()
    assert hostexec.enabled()


def test_model_call_from_the_cache_without_jax(tmp_path: Path, reference) -> None:
    """``model(x)`` on the host returns numpy arrays, compiled (through JAX) or from the cache (a
    second process that never imports JAX), with the reference model's integers; a model asked
    for a device returns JAX arrays on it."""
    code = ("import sys, json, numpy as np, tosa_jax\n"
            f"m = tosa_jax.load({str(FIXTURES / 'cnn_int8.tosa')!r})\n"
            f"y = m(np.load({str(FIXTURES / 'cnn_int8.input.npy')!r}))\n"
            "print(json.dumps([type(y).__name__, m.compile_source, 'jax' in sys.modules,\n"
            "                  y.tolist()]))\n")
    runs = _two_processes(code, tmp_path)
    assert [r[:3] for r in runs] == [["ndarray", "compiled", True], ["ndarray", "cache", False]]
    probe = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    want = reference(FIXTURES / "cnn_int8.tosa", {probe.inputs[0].name: x},
                     [probe.outputs[0].name])[probe.outputs[0].name]
    for r in runs:
        np.testing.assert_array_equal(np.asarray(r[3], want.dtype), want)
    assert probe.host_outputs and type(probe(x)) is np.ndarray
    on_cpu = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False, device="cpu")
    assert not on_cpu.host_outputs and isinstance(on_cpu(x), jax.Array)


def test_prepare_loads_the_client_in_the_background() -> None:
    """hostexec.prepare() (called by the ExecuTorch plugin at pytest's start) makes the host
    client in a thread, once a process, without importing JAX; with the host path off it does
    nothing."""
    code = ("import json, sys; from tosa_jax import hostexec; t = hostexec.prepare(); "
            "alive = t is not None and t is hostexec.prepare(); t and t.join(); "
            "print(json.dumps([alive, hostexec._CLIENT is not None, 'jax' in sys.modules]))")
    for env, expected in (("1", [True, True, False]), ("0", [False, False, False])):
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, env={**os.environ, "TOSA_JAX_HOSTEXEC": env,
                                             "JAX_PLATFORMS": "cpu"}).stdout
        assert json.loads(out.splitlines()[-1]) == expected, (env, out)


def test_warm_float_kernels_runs_a_convolution_without_jax() -> None:
    """prepare()'s float warm-up is a real FP32 convolution (numpy's sum of products over the
    3x3 window of the zero-padded input), compiled and run without importing JAX."""
    code = ("import json, sys, numpy as np; from tosa_jax import hostexec\n"
            "rng = np.random.default_rng(0)\n"
            "x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)\n"
            "w = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)\n"
            "y = hostexec.warm_float_kernels(x, w)\n"
            "xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))\n"
            "ref = sum(np.einsum('nhwc,co->nhwo', xp[:, i:i + 8, j:j + 8], w[i, j])\n"
            "          for i in range(3) for j in range(3))\n"
            "print(json.dumps([y.shape == ref.shape, float(np.abs(y - ref).max()),\n"
            "                  'jax' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "TOSA_JAX_HOSTEXEC": "1",
                                         "JAX_PLATFORMS": "cpu"}).stdout
    same_shape, err, jax_imported = json.loads(out.splitlines()[-1])
    assert same_shape and err < 1e-4 and not jax_imported


@pytest.mark.parametrize("linger", [0.0, 0.01, 0.03, 0.06])
def test_exit_while_preparing_is_clean(linger: float) -> None:
    """A process that ends while prepare()'s thread is inside XLA exits normally (a daemon
    thread there aborted it: "FATAL: exception not rethrown")."""
    code = ("import time; from tosa_jax import hostexec; hostexec.prepare(); "
            f"time.sleep({linger})")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "TOSA_JAX_HOSTEXEC": "1", "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0 and "FATAL" not in run.stderr, (run.returncode, run.stderr[-300:])


def test_a_broken_require_is_named_without_jax(tmp_path: Path) -> None:
    """``reference_model.run`` from the cache names a REQUIRE that the inputs break (an int32
    ADD that overflows: TOSA_UNPREDICTABLE, as the binding says) without importing JAX: the
    flag is decoded by tosa_jax.violations (before, this imported JAX, 0.3-1.4 s warm)."""
    from tosa_jax import serialization
    from tosa_jax.ir import GraphBuilder

    b = GraphBuilder()
    a, c = b.input("a", (4,), "INT32"), b.input("c", (4,), "INT32")
    path = tmp_path / "add.tosa"
    path.write_bytes(serialization.write(b.build([b.op("ADD", [a, c], (4,), "INT32")])))
    big = np.full(4, 2**31 - 1, np.int32)
    np.save(tmp_path / "a.npy", big)
    code = """
import sys, json, numpy as np
from tosa_jax import reference_model as rm
x = np.load(sys.argv[2])
outs, status = rm.run(open(sys.argv[1], "rb").read(), [x, x])
print(json.dumps({"status": status.name, "jax": "jax" in sys.modules}))
"""
    runs = _two_processes(code, tmp_path / "cache", str(path), str(tmp_path / "a.npy"))
    assert [r["status"] for r in runs] == ["TOSA_UNPREDICTABLE"] * 2
    assert runs[1]["jax"] is False
