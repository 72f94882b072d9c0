"""Graphs export for CUDA and ROCm (``jax.export`` lowers for a platform without its hardware),
with nothing that ties integer exactness to the CPU: no 64-bit types (x64 off or on), no CPU-only
custom calls, and none of what XLA's GPU backend was seen to refuse or get wrong (integer
convolutions, int8 dots, FP8 convolutions: those lower to exact BF16 / float matrix products off
the CPU, whose exactness tests/conformance/test_gpu_forms.py checks on the CPU); a float graph's
module is the very one the CPU runs. tosa_jax.testing.gpu_export (bench/gpu_export.py) does the
scans; the whole slice is the slow test."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tosa_jax
from tosa_jax.testing import FIXTURES
from tosa_jax.testing import conformance as conf
from tosa_jax.testing import gpu_export as ge

SLICE_SAMPLE = 25  # every 25th test of a CI conformance slice (29 of 1.0.2, 47 of 1.1)


def test_scan_finds_what_it_looks_for() -> None:
    """The scanner itself, on a module that has each thing it looks for."""

    def f(x: jax.Array, w: jax.Array, y: jax.Array) -> tuple[jax.Array, ...]:
        conv = jax.lax.conv_general_dilated(x, w, (1,), "VALID",
                                            preferred_element_type=jnp.int32)
        dot = jnp.dot(x[0].T, w[:, :, 0].T, preferred_element_type=jnp.int32)
        fdot = jnp.dot(y, y)  # DEFAULT precision
        return conv, dot, fdot, jnp.linalg.cholesky(y @ y.T + 4 * jnp.eye(3))

    args = (jax.ShapeDtypeStruct((1, 2, 5), np.int8), jax.ShapeDtypeStruct((3, 2, 1), np.int8),
            jax.ShapeDtypeStruct((3, 3), np.float32))
    with jax.enable_x64(True):
        text = jax.export.export(jax.jit(lambda *a: (*f(*a), jnp.arange(3))),
                                 platforms=["cpu"])(*args).mlir_module()
    found = ge.scan(text)
    assert found.int_convolutions == {"i8,i8->i32": 1}
    assert found.int_dots == {"i8,i8->i32": 1}
    assert found.float_below_highest >= 1
    assert found.wide_types.get("i64")  # jnp.arange under x64
    assert found.cpu_only_calls and "lapack" in found.cpu_only_calls[0]  # CPU's Cholesky
    assert len(found.problems()) == 2
    # for a GPU, the integer convolution and the int8 dot are problems too
    gpu = ge.scan(text, "cuda").problems()
    assert len(gpu) == 4 and "integer convolutions" in gpu[2] and "narrow" in gpu[3]
    # a convolution of values converted from FP8
    f8 = jax.export.export(jax.jit(lambda x, w: jax.lax.conv_general_dilated(
        x.astype(jnp.float16), w.astype(jnp.float16), (1,), "VALID")), platforms=["cuda"])(
        jax.ShapeDtypeStruct((1, 2, 5), jnp.float8_e4m3fn),
        jax.ShapeDtypeStruct((3, 2, 1), jnp.float8_e4m3fn)).mlir_module()
    assert ge.scan(f8, "cuda").fp8_convolutions == 1
    # reduce_window's padding attribute is typed tensor<1x2xi64>: an attribute, not data
    pool = jax.export.export(jax.jit(lambda v: jax.lax.reduce_window(
        v, -jnp.inf, jax.lax.max, (2,), (1,), ((0, 1),))), platforms=["cpu"])(
        jax.ShapeDtypeStruct((5,), np.float32)).mlir_module()
    assert "xi64>" in pool and ge.scan(pool).wide_types == {}


@pytest.mark.parametrize("x64", [False, True])
def test_fixtures_export_for_gpu(x64: bool) -> None:
    paths = sorted(FIXTURES.glob("*.tosa"))
    assert len(paths) >= 5
    with jax.enable_x64(x64):
        results = [ge.check_graph(p, "fixtures") for p in paths]
    for r in results:
        assert r.error is None, r.error
        for platform in ge.PLATFORMS:
            e = r.platforms[platform]
            assert e.get("ok"), (r.graph, platform, e.get("error") or e.get("problems"))
            assert e["custom_calls"] == {}
            if "_fp32" in Path(r.graph).name:  # no per-backend forms: the CPU's own program
                assert e["same_as_cpu"], (r.graph, platform)
            else:  # int8 networks: their contractions as exact BF16 products
                assert e["int_dots"] == {} and e["bf16_dots"] > 0, (r.graph, e["int_dots"])


def test_multi_platform_artifact_runs_on_cpu_bit_exact() -> None:
    """One artifact for CPU, CUDA and ROCm (as it would be shipped): serialized, read back and
    run here on the CPU, it gives model()'s result bit for bit."""
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa")
    exp = ge.export(model, ["cpu", "cuda", "rocm"])
    assert exp.platforms == ("cpu", "cuda", "rocm")
    back = jax.export.deserialize(exp.serialize())
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    (got,) = back.call(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(model(x)))


def test_int48_inputs_and_outputs_serialize() -> None:
    """INT48 values cross the function boundary as numerics.Wide pairs: the artifact serializes
    them (tosa_jax registers the type with jax.export) and gives the values back exactly."""
    from tosa_jax.ir import host_to_value
    from tosa_jax.lowering.numerics import wide_to_numpy

    b = tosa_jax.GraphBuilder()
    y = b.op("IDENTITY", [b.input("x", (1, 4), "INT48")], (1, 4), "INT48")
    model = tosa_jax.load(b.build([y]))
    x = np.array([[1, -2, 2**40, -2**47]], np.int64)
    exp = ge.export(model, ["cpu", "cuda", "rocm"])
    (got,) = jax.export.deserialize(exp.serialize()).call(host_to_value(x, "INT48"))
    np.testing.assert_array_equal(wide_to_numpy(got), x)  # IDENTITY: the input itself


def test_block_scaled_inputs_and_outputs_serialize(reference) -> None:
    """TOSA 1.1 block-scaled values cross the function boundary as BlockScaled pairs: the
    artifact of a graph that takes and returns them serializes (tosa_jax registers the type with
    jax.export) and, read back and run on the conformance test's own inputs, gives the
    reference model's values and scales bit for bit. The 1.1 slice's graphs with block-scaled
    inputs and outputs (CONCAT, RESHAPE, ROW_GATHER)."""
    from tosa_jax.ir import value_to_host
    from tosa_jax.testing import conformance_sut as sut

    if conf.tosa_tools_version() is None:
        pytest.skip("tosa-tools is not installed: no conformance slice")
    root = conf.generated_slice(conf.CI_CACHE, conf.CI_SELECTION_1_1)
    if root is None:
        pytest.skip("the TOSA 1.1 CI slice is not generated yet (bash scripts/test.sh)")
    checked = 0
    for test in sorted(root.glob("operators/*/*/*bs32*")):
        model = tosa_jax.load(test / "test.tosa", cache=False)
        if not (any(s.block_size for s in model.inputs)
                and any(s.block_size for s in model.outputs)):
            continue
        desc = json.loads((test / "desc.json").read_text())
        feeds = sut.read_inputs(test, desc, model)
        # the reference model's file forms of the same inputs (as the harness writes them)
        values, scales = {}, {}
        for spec in model.inputs:
            feed = feeds[spec.name]
            if spec.block_size:
                feed, scale = feed
                scales[spec.name] = sut._convert_output(spec.name, scale, spec.scale_dtype)
            values[spec.name] = sut._convert_output(spec.name, feed, sut._tosa_dtype_name(spec))
        want = reference(test / "test.tosa", values, [s.name for s in model.outputs],
                         scales=scales)
        exp = ge.export(model, ["cpu", "cuda", "rocm"])
        got = jax.export.deserialize(exp.serialize()).call(*model._bind((), feeds))
        for spec, value in zip(model.outputs, got, strict=True):
            assert isinstance(value, tosa_jax.BlockScaled) == bool(spec.block_size)
            host = value_to_host(value, spec.dtype)
            pairs = [(host, want[spec.name], sut._tosa_dtype_name(spec), spec.shape)]
            if spec.block_size:
                pairs = [(host.values, want[spec.name], sut._tosa_dtype_name(spec), spec.shape),
                         (host.scales, want[spec.name + "_scale"], spec.scale_dtype or "",
                          spec.scale_shape)]
            for ours, theirs, dtype, shape in pairs:
                theirs = sut._convert_input(spec.name, theirs, dtype, tuple(shape))
                np.testing.assert_array_equal(np.asarray(ours).view(np.uint8),
                                              np.asarray(theirs).view(np.uint8))
        checked += 1
    assert checked >= 3


def _slice(every: int, generate: bool = False, source: str = "slice") -> list[Path]:
    """A CI slice's graphs (``source``: gpu_export's name of the 1.0.2 or the 1.1 slice);
    unless ``generate``, only where the slice is generated already (the full lane generates it
    before pytest; minutes on a fresh clone, too long for the fast lane)."""
    if conf.tosa_tools_version() is None:
        pytest.skip("tosa-tools is not installed: no conformance slice")
    version = ge.SLICES[source]
    if not generate and conf.generated_slice(conf.CI_CACHE, conf.CI_SELECTIONS[version]) is None:
        pytest.skip(f"the CI conformance slice of TOSA {version} is not generated yet (bash "
                    "scripts/test.sh or python bench/conformance.py slice)")
    return ge.sample(ge.slice_tests(version=version), every)


def _check_all(paths: list[Path]) -> None:
    results = [ge.check_graph(p, "slice") for p in paths]
    failed = [(r.graph, r.error or {p: e.get("error") or e.get("problems")
                                    for p, e in r.platforms.items() if not e.get("ok")})
              for r in results if not r.ok]
    assert not failed, failed


@pytest.mark.parametrize("source", list(ge.SLICES))
def test_conformance_slice_sample_exports_for_gpu(source: str) -> None:
    paths = _slice(SLICE_SAMPLE, source=source)
    assert len(paths) >= 20
    _check_all(paths)


@pytest.mark.slow
def test_whole_conformance_slice_1_1_exports_for_gpu() -> None:
    _check_all(_slice(1, generate=True, source="slice-1.1"))


@pytest.mark.slow
def test_whole_conformance_slice_exports_for_gpu() -> None:
    # x64 off only: with jax_enable_x64 on, 66 of the 715 slice graphs (RESCALE, MUL, CAST,
    # ARGMAX, ...) still hold 64-bit scalar constants, Python literals that JAX types as int64 /
    # float64 and converts at once to the 32-bit operand type (bench/gpu_export.py --x64 lists
    # them); the fixtures are clean either way (test_fixtures_export_for_gpu).
    _check_all(_slice(1, generate=True))


def test_model_traces_its_platforms_form_only(reference) -> None:
    """Model lowers for its platform alone (numerics.lowering_for): the CPU's module of an int8
    network holds no per-platform case, where jax.jit(model.fn) traces both forms; both give
    the reference model's integers."""
    model = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    own = model._lower((jax.device_put(x),)).as_text()
    plain = jax.jit(model.fn).lower(x).as_text()
    assert "stablehlo.case" not in own and "stablehlo.case" in plain
    out = model.outputs[0].name
    want = reference(FIXTURES / "cnn_int8.tosa", {model.inputs[0].name: x}, [out])[out]
    np.testing.assert_array_equal(np.asarray(jax.jit(model.fn)(x)[0]), want)
    np.testing.assert_array_equal(np.asarray(model(x)), want)
