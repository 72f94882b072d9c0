"""The Model: API, input checking, one executable per signature, and exactness whatever the
caller does (x64 on or off, inside the caller's jit and vmap). Oracle: the reference model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tosa_jax
from tosa_jax.ir import GraphBuilder


def _scale_graph() -> tuple[bytes, str]:
    """int8 -> RESCALE(per-channel, double round) -> int32 ADD -> RESCALE -> int16: exercises
    the 64-bit products of apply_scale_32 and an int32 add."""
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4), "INT8")
    y = b.input("y", (2, 3, 4), "INT32")
    up = b.op("RESCALE", [x, b.const([1 << 30, 1518500250, 2 ** 31 - 1, 1234567890], "INT32"),
                          b.const([20, 33, 40, 45], "INT8"), b.const([-3], "INT8"),
                          b.const([0], "INT32")],
              (2, 3, 4), "INT32", scale32=True, rounding_mode="DOUBLE_ROUND", per_channel=True,
              input_unsigned=False, output_unsigned=False)
    s = b.op("ADD", [up, y], (2, 3, 4), "INT32")
    out = b.op("RESCALE", [s, b.const([1876543210], "INT32"), b.const([45], "INT8"),
                           b.const([0], "INT32"), b.const([0], "INT16")],
               (2, 3, 4), "INT16", scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
               input_unsigned=False, output_unsigned=False, name="out")
    return tosa_jax.write(b.build([out, s])), "out"


def _inputs(seed: int, batch: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(-128, 128, batch + (2, 3, 4)).astype(np.int8),
            "y": rng.integers(-(1 << 30), 1 << 30, batch + (2, 3, 4)).astype(np.int32)}


def _expected(reference, data: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    model = tosa_jax.load(data)
    names = [s.name for s in model.outputs]
    ref = reference(data, inputs, names)
    return [ref[n] for n in names]


def test_api_and_exactness(reference) -> None:
    data, _ = _scale_graph()
    model = tosa_jax.load(data)
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [
        ("x", (2, 3, 4), "INT8"), ("y", (2, 3, 4), "INT32")]
    assert [s.dtype for s in model.outputs] == ["INT16", "INT32"]
    inputs = _inputs(0)
    expected = _expected(reference, data, inputs)
    by_position = model(inputs["x"], inputs["y"])
    by_name = model(**inputs)
    as_dict = model.run(inputs)
    for got in (by_position, by_name, tuple(as_dict.values())):
        assert len(got) == 2
        for g, e in zip(got, expected):
            assert np.asarray(g).dtype == e.dtype
            np.testing.assert_array_equal(np.asarray(g), e)


def test_one_executable_per_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")  # XLA's executables from the first call
    data, _ = _scale_graph()
    # (no compile cache: a graph another test compiled would answer from the cache's host
    # executable, which is not one of these, while its optimized one compiles in the background)
    model = tosa_jax.load(data, cache=False)
    for seed in range(4):
        model(**_inputs(seed))
    # Whole graph = one executable, built once for the one input signature.
    assert len(model._executables) == 1
    lowered = jax.jit(model.fn).lower(*_inputs(0).values())
    assert lowered.compile() is not None


@pytest.mark.parametrize("x64", [False, True])
def test_exact_with_x64_on_and_off_and_in_callers_jit_and_vmap(reference, x64: bool) -> None:
    data, _ = _scale_graph()
    batch = _inputs(1, (3,))
    per_sample = [_inputs(0)] + [{k: v[i] for k, v in batch.items()} for i in range(3)]
    expected = [_expected(reference, data, s) for s in per_sample]
    with jax.enable_x64(x64):
        model = tosa_jax.load(data)
        got_direct = model(**per_sample[0])
        got_jit = jax.jit(model.fn)(*per_sample[0].values())
        got_vmap = jax.jit(jax.vmap(model.fn))(*batch.values())
    for got in (got_direct, got_jit):
        for g, e in zip(got, expected[0]):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(np.asarray(g), e)
    for i in range(3):
        for g, e in zip(got_vmap, expected[i + 1]):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(np.asarray(g[i]), e)


def test_int48_inputs_and_outputs(reference) -> None:
    b = GraphBuilder()
    x = b.input("x", (5,), "INT48")
    out = b.op("RESCALE", [x, b.const([23456], "INT16"), b.const([36], "INT8"),
                           b.const([0], "INT48"), b.const([0], "INT32")], (5,), "INT32",
               scale32=False, rounding_mode="SINGLE_ROUND", per_channel=False,
               input_unsigned=False, output_unsigned=False)
    ident = b.op("IDENTITY", [x], (5,), "INT48")
    data = tosa_jax.write(b.build([out, ident]))
    xv = np.array([-(1 << 47), (1 << 47) - 1, -1, 0, 123456789012], dtype=np.int64)
    ref = reference(data, {"x": xv}, [out, ident])
    got = tosa_jax.load(data).run({"x": xv})
    np.testing.assert_array_equal(got[out], ref[out])
    np.testing.assert_array_equal(got[ident], ref[ident])
    assert got[ident].dtype == np.int64
    with pytest.raises(tosa_jax.TosaInputError, match="INT48 range"):
        tosa_jax.load(data)(np.array([1 << 50] * 5, dtype=np.int64))


def test_input_errors_name_the_input() -> None:
    data, _ = _scale_graph()
    model = tosa_jax.load(data)
    good = _inputs(0)
    with pytest.raises(tosa_jax.TosaInputError, match="takes 2 input"):
        model(good["x"])
    with pytest.raises(tosa_jax.TosaInputError, match=r"unknown \['z'\]"):
        model(x=good["x"], z=good["y"])
    with pytest.raises(tosa_jax.TosaInputError, match="'x': expected shape"):
        model(good["x"][0], good["y"])
    with pytest.raises(tosa_jax.TosaInputError, match="'y': expected INT32"):
        model(good["x"], good["y"].astype(np.float32))
    with pytest.raises(tosa_jax.TosaInputError, match="mapping"):
        model.run([good["x"], good["y"]])


def test_device_selection() -> None:
    data, _ = _scale_graph()
    model = tosa_jax.load(data, device="cpu")
    out = model(**_inputs(0))[0]
    assert isinstance(out, jax.Array)
    assert out.devices() == {jax.devices("cpu")[0]}
    assert jnp.asarray(out).dtype == jnp.int16


@pytest.mark.parametrize("env", [None, "1"])
def test_single_device_calls_run_inline_unless_the_environment_says(
        env: str | None, tmp_path, reference) -> None:
    """tosa_jax turns JAX's asynchronous CPU dispatch off before JAX starts its CPU backend (a
    call then runs in the caller's thread, without a worker-thread round trip); a
    JAX_CPU_ENABLE_ASYNC_DISPATCH in the environment is left to decide. The result is the
    reference model's either way."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    cnn = Path(__file__).parent.parent / "fixtures" / "cnn_int8.tosa"
    x = np.load(cnn.with_suffix(".input.npy"))
    code = ("import numpy as np, tosa_jax\n"
            "from jax._src import xla_bridge\n"
            f"m = tosa_jax.load({str(cnn)!r}, cache=False)\n"
            f"x = np.load({str(cnn.with_suffix('.input.npy'))!r})\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, np.asarray(m(x)))\n"
            "print(xla_bridge._CPU_ENABLE_ASYNC_DISPATCH.value)\n")
    environ = {k: v for k, v in os.environ.items() if k != "JAX_CPU_ENABLE_ASYNC_DISPATCH"}
    if env is not None:
        environ["JAX_CPU_ENABLE_ASYNC_DISPATCH"] = env
    out = subprocess.run([sys.executable, "-c", code], env=environ, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["True" if env else "False"]
    model = tosa_jax.load(cnn, cache=False)
    (want,) = reference(cnn, {model.inputs[0].name: x}, [model.outputs[0].name]).values()
    y = np.load(tmp_path / "y.npy")
    assert y.tobytes() == np.asarray(want, y.dtype).tobytes()
