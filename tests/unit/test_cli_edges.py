"""The edges a new user meets first (issue 17, part 6): an absent device, ``--version``, a
misspelt operator, ``model.fn`` given the wrong dtype, and ``model(x)`` beside ``model.fn``."""

from __future__ import annotations

from importlib import metadata

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.cli import main
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.reference import run_reference


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_absent_device_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(FIXTURES / "cnn_int8.tosa"), "--device", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    platforms = sorted({d.platform for d in jax.devices()})  # what JAX itself reports
    assert err == (f"tosa-jax: error: device 'gpu': JAX has no such platform on this machine "
                   f"(it has: {', '.join(platforms)})")
    with pytest.raises(tosa_jax.TosaInputError, match="device 'gpu'"):
        tosa_jax.load(FIXTURES / "cnn_int8.tosa", device="gpu")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    # the installed distribution's metadata is the oracle, for us and for JAX
    assert capsys.readouterr().out.strip() == (
        f"tosa-jax {metadata.version('tosa_jax')} (jax {metadata.version('jax')}, "
        f"jaxlib {metadata.version('jaxlib')})")
    assert tosa_jax.__version__ == metadata.version("tosa_jax")


def test_builder_refuses_unknown_operator() -> None:
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 4), "INT8")
    with pytest.raises(tosa_jax.TosaValidationError, match="'FOOBAR' is not a TOSA operator"):
        b.op("FOOBAR", [x], (1, 4), "INT8")
    with pytest.raises(tosa_jax.TosaValidationError, match="did you mean CONV2D"):
        b.op("CONV2", [x], (1, 4), "INT8")
    assert not b.block.operators  # nothing was appended


def _two_output_graph() -> tosa_jax.Graph:
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 5), "INT8")
    y = b.input("y", (1, 5), "INT8")
    cx, cy = b.op("CAST", [x], (1, 5), "INT32"), b.op("CAST", [y], (1, 5), "INT32")
    s = b.op("ADD", [cx, cy], (1, 5), "INT32", name="sum")
    m = b.op("SUB", [cx, cy], (1, 5), "INT32", name="diff")
    return b.build([s, m])


def test_fn_names_the_wrong_input_dtype() -> None:
    model = tosa_jax.load(_two_output_graph())
    xs = np.zeros((3, 1, 5), np.float32)
    with pytest.raises(tosa_jax.TosaInputError,
                       match=r"input 'x' is declared INT8\[1, 5\].*int8.*got float32\[1, 5\]"):
        jax.vmap(model.fn)(xs, xs.astype(np.int8))
    with pytest.raises(tosa_jax.TosaInputError, match="takes 2 input"):
        model.fn(np.zeros((1, 5), np.int8))


def test_call_and_fn_agree_with_the_reference_model() -> None:
    graph = _two_output_graph()
    model = tosa_jax.load(graph)
    rng = np.random.default_rng(17)
    x, y = (rng.integers(-128, 128, (1, 5), dtype=np.int8) for _ in range(2))
    ref = run_reference(tosa_jax.write(graph), {"x": x, "y": y}, ["sum", "diff"])
    by_call = model(x, y)  # several outputs: a tuple, as model.fn
    by_fn = model.fn(x, y)
    assert isinstance(by_call, tuple) and isinstance(by_fn, tuple) and len(by_fn) == 2
    for got_call, got_fn, name in zip(by_call, by_fn, ("sum", "diff"), strict=True):
        np.testing.assert_array_equal(np.asarray(got_call), ref[name])
        np.testing.assert_array_equal(np.asarray(got_fn), ref[name])
    # one output: model(...) unwraps it, model.fn keeps the one-element tuple (one pytree shape)
    b = tosa_jax.GraphBuilder()
    a = b.input("x", (1, 5), "INT8")
    one = b.build([b.op("CAST", [a], (1, 5), "INT32", name="c")])
    single, fn_single = tosa_jax.load(one)(x), tosa_jax.load(one).fn(x)
    assert isinstance(fn_single, tuple) and len(fn_single) == 1
    ref = run_reference(tosa_jax.write(one), {"x": x}, ["c"])
    np.testing.assert_array_equal(np.asarray(single), ref["c"])
    np.testing.assert_array_equal(np.asarray(fn_single[0]), ref["c"])


def test_console_script_flushes_and_exits_with_mains_code(tmp_path) -> None:
    """``tosa-jax`` (cli.entry) ends without the interpreter's teardown: what it printed is all
    there, written files are complete, and the exit status is main's (0, and 2 on an error)."""
    import subprocess
    import sys

    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 32, 32), np.int8))
    graph = str(FIXTURES / "cnn_int8.tosa")
    code = "import sys; from tosa_jax.cli import entry; sys.argv[0] = 'tosa-jax'; entry()"
    ok = subprocess.run([sys.executable, "-c", code, "run", graph, str(x), "--output-dir",
                         str(tmp_path / "out")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    name = ok.stdout.split(":")[0]
    saved = np.load(tmp_path / "out" / f"{name}.npy")
    np.testing.assert_array_equal(saved, tosa_jax.load(graph)(np.load(x)))
    assert "ran" in ok.stderr
    bad = subprocess.run([sys.executable, "-c", code, "run", graph, str(tmp_path / "none.npy")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "tosa-jax: error:" in bad.stderr


def test_run_float_graph_on_numpy_unless_xla_floats(tmp_path, capsys, monkeypatch) -> None:
    """``tosa-jax run`` is a run-once process: a small float graph runs on its numpy program
    (no XLA compile), as through ``tosa_jax.reference_model.run``, within the spec's error
    budget of the reference model's precise (FP64) run; ``--xla-floats`` gives XLA's bits,
    those of ``model(x)``."""
    from tosa_jax.testing.reference import network_tolerance, run_reference_fp

    graph = FIXTURES / "encoder_fp32.tosa"
    model = tosa_jax.load(graph, cache=False)
    ((inp,), (out,)) = model.inputs, model.outputs
    x = np.random.default_rng(3).standard_normal(inp.shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ref64 = run_reference_fp(graph, {inp.name: x}, [out.name], precise=True)[out.name]
    tol = network_tolerance(model.graph, ref64)
    monkeypatch.setenv("TOSA_JAX_CACHE_DIR", str(tmp_path / "cache"))
    got = {}
    for how, extra in (("numpy", []), ("xla", ["--xla-floats"])):
        for source in ("traced", "cache"):  # a fresh cache, then the entry it wrote
            out_dir = tmp_path / f"{how}_{source}"
            assert main(["run", str(graph), str(tmp_path / "x.npy"), "-o", str(out_dir),
                         *extra]) == 0
            err = capsys.readouterr().err
            assert ("numpy" in err) == (how == "numpy"), err
            assert ("compile cache" in err) == (source == "cache"), err
            y = np.load(out_dir / f"{out.name}.npy")
            assert y.dtype == np.float32 and np.max(np.abs(y - ref64)) <= tol
            if source == "cache":  # the same bits from the cache as when it was made
                np.testing.assert_array_equal(y, got[how])
            got[how] = y
    np.testing.assert_array_equal(got["xla"], np.asarray(model(x)))
