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
# what a load from the cache leaves unimported (its import time is part of a first result)
unused = [n for n in ("tosa_jax.serialization", "tosa_jax.executor", "tosa_jax.reroll",
                      "tosa_jax.ranges", "tempfile", "difflib") if n in sys.modules]
print(json.dumps({"source": source, "jax": jax_after_run, "jax_rm": "jax" in sys.modules,
                  "unused": unused,
                  "status": status.name, "outs": [o.tolist() for o in outs.values()],
                  "rm": [o.tolist() for o in rm_outs]}))
"""


@pytest.fixture(autouse=True)
def _xla_executables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about XLA's executables: a graph's first call runs one, not the graph's
    numpy program (tosa_jax.npexec, tested in test_npexec.py); subprocesses inherit this."""
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")


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
    assert second["unused"] == []
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


def test_both_entries_of_an_executable_share_one_serialization(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference) -> None:
    """The JAX path's entry and the host path's of one executable are written from one
    serialization of it (4-25 ms each for an integer graph's); a second model in the process
    runs the host entry, a third (the host path off) the JAX one: the reference model's
    integers, all three."""
    from tosa_jax import seqcompile

    calls = []
    serialized = seqcompile.serialized_bytes
    monkeypatch.setattr(seqcompile, "serialized_bytes",
                        lambda compiled: calls.append(compiled) or serialized(compiled))
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path, tiered=False)
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    want = np.asarray(model(x))
    ref = reference(FIXTURES / "cnn_int8.tosa", {model.inputs[0].name: x},
                    [model.outputs[0].name])
    assert want.tobytes() == np.asarray(next(iter(ref.values())), want.dtype).tobytes()
    flush()
    (slot,) = model._executables.values()
    exe = getattr(slot.exe, "exe", slot.exe)  # (a hoist.Weighted's own)
    # (counted for this executable only: an earlier test's background compile may serialize)
    assert model.compile_source == "compiled" and [c is exe for c in calls].count(True) == 1
    assert len([p for p in tmp_path.iterdir() if p.stat().st_size > 4096]) == 2
    host = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    np.testing.assert_array_equal(host(x), want)
    assert isinstance(host._host, hostexec.HostExecutable) and host.compile_source == "cache"
    hostexec.enabled.cache_clear()
    monkeypatch.setenv("TOSA_JAX_HOSTEXEC", "0")
    try:
        jax_path = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
        np.testing.assert_array_equal(jax_path(x), want)
        assert jax_path._host is False and jax_path.compile_source == "cache"
    finally:
        monkeypatch.undo()
        hostexec.enabled.cache_clear()


def test_quick_tier_answers_while_jax_upgrades(tmp_path: Path) -> None:
    _compiled(tmp_path)  # cnn_int8 is light: its quick-tier executable is what the cache holds
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    xs = {s.name: np.load(FIXTURES / "cnn_int8.input.npy") for s in model.inputs}
    y1 = model.run(xs)
    assert isinstance(model._host, hostexec.HostExecutable) and model._host.tier == 0
    # A second call: the quick executable answers again, no stall for JAX's import; the
    # optimized one is compiled through JAX meanwhile and takes the calls after it.
    y2 = model.run(xs)
    assert isinstance(model._host, hostexec.HostExecutable) and model._host_upgrade is not None
    model._host_upgrade.join(timeout=600)
    y3 = model.run(xs)
    assert model._host is False and [s.tier for s in model._executables.values()] == [1]
    flush()
    later = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    y4 = later.run(xs)  # a later process's host path: the optimized executable, from the cache
    assert isinstance(later._host, hostexec.HostExecutable) and later._host.tier == 1
    for k in y1:
        for y in (y2, y3, y4):
            np.testing.assert_array_equal(y1[k], y[k])


def test_quick_tier_stays_when_the_upgrade_fails(tmp_path: Path, monkeypatch) -> None:
    _compiled(tmp_path)
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=tmp_path)
    xs = {s.name: np.load(FIXTURES / "cnn_int8.input.npy") for s in model.inputs}

    def fails(*args, **kwargs):
        raise MemoryError("no room to compile")

    monkeypatch.setattr(model, "_build", fails)
    y1, y2 = model.run(xs), model.run(xs)
    model._host_upgrade.join(timeout=600)
    y3 = model.run(xs)  # still the quick executable: it computes the same
    assert isinstance(model._host, hostexec.HostExecutable) and not model._executables
    for k in y1:
        np.testing.assert_array_equal(y1[k], y2[k])
        np.testing.assert_array_equal(y1[k], y3[k])


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


def test_carried_types() -> None:
    """Every tensor crosses as the graph function's own arrays (tosa_jax.model.host_leaves):
    INT48 as int32/uint32 words, INT4 as int8, FP6 as uint8 codes, block-scaled tensors as values
    and FP8UE8M0 scales; not FP4, which XLA's CPU buffers hold two to a byte."""
    from tosa_jax.model import TensorSpec, host_leaves

    assert host_leaves(TensorSpec("x", (2,), "FP6E2M3")) == [((2,), "uint8")]
    assert host_leaves(TensorSpec("x", (2,), "FP4E2M1"))[0][1] not in hostexec.CARRIED_NUMPY
    for dtype, block, carried in (("INT48", 0, True), ("INT4", 0, True), ("INT8", 0, True),
                                  ("BF16", 0, True), ("FP8E5M2", 0, True),
                                  ("FP8E4M3", 32, True), ("FP6E3M2", 32, True),
                                  ("FP4E2M1", 32, False)):
        b = tosa_jax.GraphBuilder((1, 1, 0, True))
        x = b.input("x", (2, 64), dtype)
        y = b.op("IDENTITY", [x], (2, 64), dtype)
        for name in (x, y):
            t = b.block.tensors[name]
            t.scale_dtype, t.block_size = ("FP8UE8M0", block) if block else (None, 0)
        model = tosa_jax.load(tosa_jax.write(b.build([y])), cache=Path("/nonexistent"))
        assert model.cache is not None and (model._host_key() is not None) is carried, dtype


# A second process for the 1.1 types: Model.run (and reference_model.run, for graph A) from the
# cache; where the executable came from, whether JAX was imported, and every output's bytes.
SECOND_1_1 = """
import sys, json, numpy as np, ml_dtypes, tosa_jax
from tosa_jax import reference_model as rm
a_path, b_path, x, w, vv, vs = sys.argv[1:]
x, w, vv, vs = np.load(x), np.load(w), np.load(vv).view(ml_dtypes.float8_e4m3fn), np.load(vs)
def raw(o):
    if isinstance(o, tosa_jax.BlockScaled):
        return [raw(o.values), raw(o.scales)]
    return [str(o.dtype), np.ascontiguousarray(o).view(np.uint8).reshape(-1).tolist()]
a, b = tosa_jax.load(a_path), tosa_jax.load(b_path)
vs = vs.view(ml_dtypes.float8_e8m0fnu)
outs = {**a.run({"x": x, "w": w}), **b.run({"v": tosa_jax.BlockScaled(vv, vs)})}
rm_outs, status = rm.run(open(a_path, "rb").read(), [x, w])
print(json.dumps({"source": [a.compile_source, b.compile_source], "jax": "jax" in sys.modules,
                  "status": status.name, "outs": {k: raw(v) for k, v in outs.items()},
                  "rm": [raw(o) for o in rm_outs]}))
"""


def _graphs_1_1() -> tuple[bytes, bytes]:
    """A: FP32 x cast to block-scaled FP6E2M3, MXINT8 and FP8E5M2 (values and scales out), and
    an INT48 w through IDENTITY; B: a block-scaled FP8E4M3 input v through ROW_GATHER to a
    block-scaled output."""
    from tosa_jax.ir import Operator, Tensor

    g = tosa_jax.GraphBuilder((1, 1, 0, True))
    x = g.input("x", (2, 64), "FP32")
    outs = []
    for t, n in (("FP6E2M3", "d6"), ("MXINT8", "dm"), ("FP8E5M2", "d8")):
        g.block.tensors[n] = Tensor(n, (2, 64), t)
        g.block.tensors[n + "s"] = Tensor(n + "s", (2, 2), "FP8UE8M0")
        g.block.operators.append(Operator("CAST_TO_BLOCK_SCALED", [x], [n, n + "s"],
                                          {"block_size": 32}))
        outs += [n, n + "s"]
    w = g.input("w", (3, 4), "INT48")
    a = tosa_jax.write(g.build([*outs, g.op("IDENTITY", [w], (3, 4), "INT48", name="wide")]))
    g = tosa_jax.GraphBuilder((1, 1, 0, True))
    v = g.input("v", (2, 6, 64), "FP8E4M3")
    idx = g.const(np.array([[0, 4, 2], [3, 1, 4]], np.int32), "INT32")
    rows = g.op("ROW_GATHER", [v, idx, g.const([2], "INT32")], (2, 6, 64), "FP8E4M3",
                name="rows")
    for name in (v, rows):
        t = g.block.tensors[name]
        t.scale_dtype, t.block_size = "FP8UE8M0", 32
    return a, tosa_jax.write(g.build([rows]))


def test_wide_coded_and_block_scaled_tensors_without_jax(tmp_path: Path) -> None:
    """TOSA 1.1 graphs whose inputs and outputs are FP6 codes, MXINT8, FP8UE8M0 scales,
    block-scaled pairs and INT48: a second process runs them from the cache without JAX, with
    the JAX path's bytes and the reference model's (the tosa-tools binding returns no FP6,
    MXINT8 or FP8UE8M0 output, so the reference model runs from files here)."""
    import ml_dtypes

    from tosa_jax.serialization import unpack_bits
    from tosa_jax.testing.reference import run_reference

    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, 64)) * 3).astype(np.float32)
    x[1, :32] *= np.float32(1e-39)  # a block of subnormals
    w = rng.integers(-2 ** 47, 2 ** 47, (3, 4))
    vv = (rng.standard_normal((2, 6, 64)) * 4).astype(ml_dtypes.float8_e4m3fn)
    vs = np.exp2(rng.integers(-20, 21, (2, 6, 2))).astype(ml_dtypes.float8_e8m0fnu)
    a, b = _graphs_1_1()
    files = [tmp_path / f for f in ("a.tosa", "b.tosa", "x.npy", "w.npy", "vv.npy", "vs.npy")]
    files[0].write_bytes(a)
    files[1].write_bytes(b)
    for f, arr in zip(files[2:], (x, w, vv.view(np.uint8), vs.view(np.uint8)), strict=True):
        np.save(f, arr)
    first, second = _two_processes(SECOND_1_1, tmp_path / "cache", *map(str, files))
    assert first["source"] == ["compiled", "compiled"] and first["jax"]
    assert second["source"] == ["cache", "cache"] and not second["jax"]
    assert second["status"].endswith("TOSA_VALID")
    assert second["outs"] == first["outs"] and second["rm"] == first["rm"]
    got = second["outs"]
    ref = {**run_reference(a, {"x": x, "w": w}, list(got)[:7]),
           **run_reference(b, {"v": vv}, ["rows"], scales={"v": vs})}
    for name in ("d6", "d6s", "dm", "dms", "d8", "d8s"):
        theirs = np.asarray(ref[name]).view(np.uint8).reshape(-1)
        if name == "d6":  # the reference model's FP6 output file holds packed codes
            theirs = unpack_bits(theirs, 6, x.size)
        assert got[name][1] == theirs.tolist(), name
    np.testing.assert_array_equal(np.array(got["wide"][1], np.uint8).view(np.int64), w.ravel())
    np.testing.assert_array_equal(ref["wide"].ravel(), w.ravel())
    assert got["rows"][0][1] == np.asarray(ref["rows"]).view(np.uint8).reshape(-1).tolist()
    assert got["rows"][1][1] == np.asarray(ref["rows_scale"]).view(np.uint8).reshape(-1).tolist()
    # reference_model.run: the binding's convention (FP6 as its ml_dtypes type, of the codes)
    rm_outs = dict(zip(list(got)[:7], second["rm"], strict=True))
    assert rm_outs["d6"] == got["d6"] and rm_outs["d6s"] == got["d6s"]


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
    # the switches of the lowering, named where they are read (hostexec spells them out)
    from tosa_jax import reroll, seqcompile
    from tosa_jax.lowering.numerics import GPU_FORMS_ENV

    for env in (reroll.ENV, seqcompile.ENV, GPU_FORMS_ENV):
        before = hostexec.host_key("g", args)
        monkeypatch.setenv(env, "0")
        assert hostexec.host_key("g", args) != before, env
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


# warm_float_kernels on the compile cache argv[1]; argv[2] "refuse": its client refuses to
# compile (so the executable must come from the cache). Prints the result and its largest
# difference from numpy's sum of products over the zero-padded 3x3 window.
WARM = """
import json, sys, numpy as np
from tosa_jax import hostexec
from tosa_jax.cache import CompileCache
if sys.argv[2] == "refuse":
    class Refusing:
        def __init__(self, c): self.c = c
        def __getattr__(self, name): return getattr(self.c, name)
        def compile_and_load(self, *a): raise RuntimeError("compiled")
    real = hostexec._client
    hostexec._client = lambda: Refusing(real())
rng = np.random.default_rng(0)
x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
w = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
y = hostexec.warm_float_kernels(x, w, store=CompileCache(sys.argv[1]))
xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
ref = sum(np.einsum("nhwc,co->nhwo", xp[:, i:i + 8, j:j + 8], w[i, j])
          for i in range(3) for j in range(3))
print(json.dumps([y.tolist(), float(np.abs(y - ref).max()), "jax" in sys.modules]))
"""


def _warm(store: Path, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WARM, str(store), how], capture_output=True,
                          text=True, env={**os.environ, "TOSA_JAX_HOSTEXEC": "1",
                                          "JAX_PLATFORMS": "cpu"})


def test_the_warm_convolution_is_kept_in_the_cache(tmp_path: Path) -> None:
    """warm_float_kernels keeps its executable in the compile cache it is given: a second
    process rebuilds it from there (its client here refuses to compile) and computes the same
    convolution."""
    runs = [json.loads(_warm(tmp_path, how).stdout.splitlines()[-1])
            for how in ("compile", "refuse")]
    assert len(list(tmp_path.glob("*.xla"))) == 1
    np.testing.assert_array_equal(np.asarray(runs[1][0]), np.asarray(runs[0][0]))
    assert runs[1][1] < 1e-4 and not runs[1][2]
    refused = _warm(tmp_path / "empty", "refuse")
    assert refused.returncode != 0 and "compiled" in refused.stderr  # (the check checks)


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


# A second process that loads a graph from the cache: whether prepare()'s thread was started by
# the load (before the first call), and the outputs.
PREPARED = """
import sys, json, numpy as np, tosa_jax
from tosa_jax import hostexec
from tosa_jax.cache import open_cache
path, xs = sys.argv[1], [np.load(p) for p in sys.argv[2:]]
warm = open_cache(None).get(hostexec._warm_key()) is not None
m = tosa_jax.load(path)
started = hostexec._PREPARED is not None
outs = m.run({s.name: x for s, x in zip(m.inputs, xs)})
print(json.dumps({"source": m.compile_source, "started": started, "warm": warm,
                  "outs": [o.tolist() for o in outs.values()]}))
"""


@pytest.mark.parametrize("large", [True, False])
def test_loads_prepare_large_float_graphs(tmp_path: Path, reference,
                                                         large: bool) -> None:
    """A load of a graph whose float work runs on Eigen (at least model.LARGE_FLOAT_MACS
    multiply-adds) starts hostexec.prepare() (oneDNN's kernel generated beside the trace and
    compile, or from the cache's record beside the executable's rebuild); a small float graph
    does not; either way the second process computes the first's bits, within the dot-product
    bound of the reference model. The process that compiled a large one leaves prepare()'s
    warm-up executable in the cache (the next process rebuilds it, not compiles it: its client
    refusing to compile, it computes the convolution)."""
    from tosa_jax.ir import GraphBuilder
    from tosa_jax.model import LARGE_FLOAT_MACS

    m, k, n = (512, 160, 128) if large else (8, 16, 4)
    assert (m * k * n >= LARGE_FLOAT_MACS) == large
    b = GraphBuilder()
    a, w = b.input("a", (1, m, k), "FP32"), b.input("w", (1, k, n), "FP32")
    y = b.op("MATMUL", [a, w, b.const([0.0], "FP32"), b.const([0.0], "FP32")], (1, m, n),
             "FP32")
    path = tmp_path / "matmul.tosa"
    path.write_bytes(tosa_jax.write(b.build([y])))
    rng = np.random.default_rng(3)
    xs = []
    for name, shape in (("a", (1, m, k)), ("w", (1, k, n))):
        xs.append(tmp_path / f"{name}.npy")
        np.save(xs[-1], rng.standard_normal(shape).astype(np.float32))
    first, second = _two_processes(PREPARED, tmp_path / "cache", str(path), *map(str, xs))
    assert first["source"] == "compiled" and second["source"] == "cache"
    assert first["started"] == second["started"] == large
    assert [first["warm"], second["warm"]] == [False, large]
    if large:
        _, err, jax_imported = json.loads(_warm(tmp_path / "cache", "refuse").stdout
                                          .splitlines()[-1])
        assert err < 1e-4 and not jax_imported
    got = np.asarray(second["outs"], np.float32)[0]
    np.testing.assert_array_equal(got, np.asarray(first["outs"], np.float32)[0])
    a_x, w_x = (np.load(p) for p in xs)
    want = reference(path, {"a": a_x, "w": w_x}, [y])[y]
    # each output a sum of k products: k ULPs of the sum of their magnitudes
    bound = k * np.finfo(np.float32).eps * (np.abs(a_x[0]).astype(np.float64)
                                            @ np.abs(w_x[0]).astype(np.float64))
    assert got.shape == want.shape and np.all(np.abs(got.astype(np.float64) - want) <= bound)
