"""Front doors (tosa_jax.frontends): format detection, TOSA MLIR in and out through tosa-opt,
one loader and one set of errors for every format, the conversion cache, progress.

Oracle for the round trips: the TOSA reference model on the original flatbuffer (integer
outputs bit-identical), and the reference model on the round-tripped flatbuffer (identical to
its run of the original, floats included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tosa_jax
from tosa_jax import frontends
from tosa_jax.cli import main as cli
from tosa_jax.frontends import _cache, _tools, mlir
from tosa_jax.testing import FIXTURES, conformance
from tosa_jax.testing.reference import run_reference

HAVE_TOSA_OPT = _tools.find_executable("tosa-opt") is not None
needs_tosa_opt = pytest.mark.skipif(not HAVE_TOSA_OPT, reason="tosa-opt (tosa-tools) missing")
FIXTURE_GRAPHS = sorted(FIXTURES.glob("*.tosa"))

# TOSA 0.80-era dialect: CLAMP's bounds as min_int/max_int attributes (TOSA 1.0: min_val/max_val)
OLD_DIALECT = """func.func @main(%arg0: tensor<1x4xi8>) -> tensor<1x4xi8> {
  %0 = "tosa.clamp"(%arg0) {min_int = -128 : i64, max_int = 127 : i64, min_fp = 0.0 : f32,
                            max_fp = 0.0 : f32} : (tensor<1x4xi8>) -> tensor<1x4xi8>
  return %0 : tensor<1x4xi8>
}
"""
# The same in the TOSA 1.0 dialect, with no module attributes (stamped TOSA 1.0 on the way in).
NEW_DIALECT = """// a comment first
func.func @main(%arg0: tensor<1x4xi8>) -> tensor<1x4xi8> {
  %0 = tosa.clamp %arg0 {min_val = -100 : i8, max_val = 100 : i8}
       : (tensor<1x4xi8>) -> tensor<1x4xi8>
  return %0 : tensor<1x4xi8>
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test converts into a cache of its own."""
    monkeypatch.setenv("TOSA_JAX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _inputs(path: Path) -> dict[str, np.ndarray]:
    model = tosa_jax.load(path)
    x = np.load(path.with_suffix(".input.npy"))
    return {model.inputs[0].name: x}


def test_detect() -> None:
    assert frontends.detect((FIXTURES / "cnn_int8.tosa").read_bytes()) == "tosa"
    assert frontends.detect(NEW_DIALECT.encode()) == "mlir"
    assert frontends.detect(b'\xef\xbb\xbfmodule attributes {} {\n}') == "mlir"
    assert frontends.detect(b"#map = affine_map<(d0) -> (d0)>\nmodule {}") == "mlir"
    assert frontends.detect(b"ML\xefR\x00\x01") == "mlirbc"
    assert frontends.detect(b"\x1c\x00\x00\x00TFL3" + bytes(32)) == "tflite"
    assert frontends.detect(b"# a markdown heading\nmodule text") is None
    assert frontends.detect(b"hello") is None
    assert frontends.detect(b"") is None


def test_unknown_format_names_what_is_read() -> None:
    with pytest.raises(tosa_jax.TosaFormatError, match=r"file identifier.*TOSA MLIR text.*TFLite"):
        tosa_jax.load(b"# heading\n" + bytes(64))


ROUND_TRIPS = [(p, "mlir") for p in FIXTURE_GRAPHS] + [
    (FIXTURES / "cnn_int8.tosa", "mlirbc"), (FIXTURES / "gru_fp32.tosa", "mlirbc")]


@needs_tosa_opt
@pytest.mark.parametrize(("path", "to"), ROUND_TRIPS, ids=lambda v: getattr(v, "stem", v))
def test_fixture_round_trip(path: Path, to: str, tmp_path: Path) -> None:
    """.tosa -> .mlir(bc) -> .tosa keeps interface, operators and outputs bit for bit."""
    original = path.read_bytes()
    text = tosa_jax.convert(path, to)
    assert frontends.detect(text) == to
    back = tosa_jax.convert(text, "tosa")
    g0, g1 = tosa_jax.read(original), tosa_jax.read(back)
    assert g1.version == g0.version
    assert g1.main.inputs == g0.main.inputs and g1.main.outputs == g0.main.outputs
    assert [op.op for op in g1.main.operators] == [op.op for op in g0.main.operators]
    inputs = _inputs(path)
    outs = list(g0.main.outputs)
    ref0 = run_reference(original, inputs, outs)
    ref1 = run_reference(back, inputs, outs)
    got = tosa_jax.load(text).run(inputs)  # loaded straight from MLIR
    for name in outs:
        np.testing.assert_array_equal(ref1[name], ref0[name])
        want = ref0[name]
        if want.dtype.kind in "iub":
            assert got[name].dtype == want.dtype
            np.testing.assert_array_equal(got[name], want)
        else:  # FP: the same as tosa_jax on the original flatbuffer, bit for bit
            np.testing.assert_array_equal(got[name], tosa_jax.load(original).run(inputs)[name])


SLICE = conformance.generated_slice(conformance.CI_CACHE, conformance.CI_SELECTION)  # or None
# Representative conformance graphs, by operator and type tokens (the shapes in a test's name
# depend on the generator seed): int8/int4 convolution, RESCALE (unsigned), control flow, BF16,
# FFT, depthwise convolution.
SLICE_PICKS = {"conv2d-i8": ("conv2d_", {"i8xi8", "acci32"}),
               "conv2d-i4": ("conv2d_", {"i8xi4", "acci32"}),
               "rescale-u16": ("rescale_", {"i16", "outi8", "rmI", "iu1"}),
               "cond_if-bf16": ("cond_if_", {"bf16"}),
               "fft2d": ("fft2d_", set()),
               "depthwise_conv2d": ("depthwise_conv2d_", set())}


@needs_tosa_opt
@pytest.mark.skipif(not SLICE, reason="the CI conformance slice is not generated yet")
@pytest.mark.parametrize("pick", sorted(SLICE_PICKS))
def test_conformance_slice_round_trip(pick: str) -> None:
    """Slice graphs through MLIR and back: the same graph, and bit-identical outputs on the
    test's own inputs (the whole slice: bench/mlir_roundtrip.py)."""
    from tosa_jax.testing import mlir_roundtrip as rt

    prefix, tokens = SLICE_PICKS[pick]
    tests = sorted(p.parent for p in (SLICE / "operators").rglob("desc.json")
                   if p.parent.name.startswith(prefix) and tokens <= set(p.parent.name.split("_"))
                   and "dyn" not in p.parent.name.split("_"))
    assert tests, pick
    kind, detail = rt.round_trip(tests[0], "all", ref=False)
    # ran-changed: the same outputs, the graph differs in names only (tosa-opt renames the
    # regions COND_IF / WHILE_LOOP refer to)
    assert kind == "ran-same" or kind == "ran-changed" and "_region" in detail, (kind, detail)


@needs_tosa_opt
def test_generic_form(tmp_path: Path) -> None:
    """The generic form reads back to the same graph: operators, attributes, tensors, data."""
    path = FIXTURES / "cnn_int8.tosa"
    generic = tosa_jax.convert(path, "mlir", generic=True)
    assert b'"tosa.conv2d"(' in generic
    g0 = tosa_jax.read(path.read_bytes())
    g1 = tosa_jax.read(tosa_jax.convert(generic, "tosa"))
    assert g1.main.inputs == g0.main.inputs and g1.main.outputs == g0.main.outputs
    for a, b in zip(g0.main.operators, g1.main.operators, strict=True):
        assert (a.op, repr(a.attrs)) == (b.op, repr(b.attrs))
        for x, y in zip(a.inputs + a.outputs, b.inputs + b.outputs, strict=True):
            tx, ty = g0.main.tensors[x], g1.main.tensors[y]
            assert (tx.shape, tx.dtype) == (ty.shape, ty.dtype)
            if tx.data is not None or ty.data is not None:
                np.testing.assert_array_equal(tx.data, ty.data)


@needs_tosa_opt
def test_hand_written_mlir_against_reference() -> None:
    g = tosa_jax.read(mlir.to_flatbuffer(NEW_DIALECT.encode()))
    assert g.version == (1, 0, 0, False)  # no target_env, no fbs_version: stamped 1.0
    model = tosa_jax.load(NEW_DIALECT.encode())
    x = np.array([[-128, -5, 99, 127]], np.int8)
    (name,) = [s.name for s in model.inputs]
    got = np.asarray(model(x))
    ref = run_reference(tosa_jax.write(g), {name: x}, list(g.main.outputs))
    np.testing.assert_array_equal(got, ref[g.main.outputs[0]])


@needs_tosa_opt
def test_old_dialect_gets_tosa_opt_message_and_ours(tmp_path: Path) -> None:
    path = tmp_path / "old.mlir"
    path.write_text(OLD_DIALECT)
    with pytest.raises(tosa_jax.TosaConverterError) as info:
        tosa_jax.load(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: tosa-opt failed")
    assert "\nold.mlir:2:8: error" in msg  # tosa-opt's location, in the user's file name
    assert "requires attribute 'max_val'" in msg  # tosa-opt's own words
    assert "TOSA 1.0 form" in msg and "min_int/max_int" in msg  # ours
    assert isinstance(info.value, tosa_jax.TosaFormatError)  # caught like any bad file


@needs_tosa_opt
def test_same_errors_for_every_format(tmp_path: Path) -> None:
    """Once converted, a graph meets the same checks and errors as a .tosa file."""
    path = FIXTURES / "cnn_int8.tosa"
    text = tmp_path / "cnn.mlir"
    text.write_bytes(tosa_jax.convert(path, "mlir"))
    for src in (path, text):
        model = tosa_jax.load(src)
        with pytest.raises(tosa_jax.TosaInputError, match="expected shape"):
            model(np.zeros((1, 3, 8, 8), np.int8))
        with pytest.raises(tosa_jax.TosaLimitError):
            tosa_jax.load(src, max_elements=100)
        with pytest.raises(tosa_jax.TosaValidationError):
            tosa_jax.load(src, profile="PRO-FP")
    truncated = tmp_path / "cut.mlir"
    truncated.write_bytes(text.read_bytes()[:2000])
    with pytest.raises(tosa_jax.TosaFormatError, match="cut.mlir"):
        tosa_jax.load(truncated)


def test_missing_tosa_opt_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tools, "find_executable", lambda name: None)
    with pytest.raises(tosa_jax.TosaConverterMissingError, match=r"tosa_jax\[mlir\]"):
        tosa_jax.load(NEW_DIALECT.encode())
    with pytest.raises(tosa_jax.TosaConverterMissingError, match=r"tosa_jax\[tflite\]|mlir"):
        tosa_jax.load(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    # a TOSA flatbuffer needs no converter
    tosa_jax.load(FIXTURES / "cnn_int8.tosa")


def test_missing_tflite_converter_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _tools.package_version
    monkeypatch.setattr(_tools, "package_version",
                        lambda n: None if n == "tosa-converter-for-tflite" else real(n))
    with pytest.raises(tosa_jax.TosaConverterMissingError, match=r"tosa_jax\[tflite\]"):
        tosa_jax.load(b"\x1c\x00\x00\x00TFL3" + bytes(64))


@needs_tosa_opt
def test_cache_hit_damage_and_bound(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = NEW_DIALECT.encode()
    first = tosa_jax.convert(data, "tosa")
    entries = list((private_cache / "convert").glob("*" + _cache.SUFFIX))
    assert len(entries) == 1

    def refuse(*a: object, **k: object) -> bytes:
        raise AssertionError("converted again")

    monkeypatch.setattr(mlir, "to_flatbuffer", refuse)
    assert tosa_jax.convert(data, "tosa") == first  # a hit: tosa-opt not run
    entries[0].write_bytes(entries[0].read_bytes()[:-5])  # damaged: removed, converted again
    monkeypatch.undo()
    monkeypatch.setenv("TOSA_JAX_CACHE_DIR", str(private_cache))
    assert tosa_jax.convert(data, "tosa") == first
    # bounded: with room for one entry, the older goes
    monkeypatch.setenv("TOSA_JAX_CONVERT_CACHE_MAX_BYTES", str(entries[0].stat().st_size + 100))
    tosa_jax.convert(data.replace(b"-100", b"-99"), "tosa")
    assert len(list((private_cache / "convert").glob("*" + _cache.SUFFIX))) == 1
    monkeypatch.setenv("TOSA_JAX_CACHE", "0")
    assert _cache.get(_cache.key(b"x")) is None


@needs_tosa_opt
def test_progress_after_a_second(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_tools, "PROGRESS_AFTER_S", 0.0)
    tosa_jax.convert(NEW_DIALECT.encode(), "tosa")
    err = capsys.readouterr().err
    assert "tosa_jax: converting input (TOSA MLIR text -> TOSA)" in err and "done in" in err
    monkeypatch.setattr(_tools, "PROGRESS_AFTER_S", 1.0)
    tosa_jax.convert(NEW_DIALECT.encode(), "tosa")  # a cache hit: quick, silent
    assert capsys.readouterr().err == ""


@needs_tosa_opt
def test_cli_convert_info_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = FIXTURES / "cnn_int8.tosa"
    assert cli(["convert", str(src), str(tmp_path / "cnn.mlir")]) == 0
    assert cli(["convert", str(tmp_path / "cnn.mlir"), str(tmp_path / "cnn.tosa")]) == 0
    assert cli(["convert", str(src), str(tmp_path / "cnn.txt")]) == 2
    assert "--to" in capsys.readouterr().err
    assert cli(["info", str(tmp_path / "cnn.mlir")]) == 0
    assert "CONV2D" in capsys.readouterr().out
    x = src.with_suffix(".input.npy")
    assert cli(["run", str(tmp_path / "cnn.mlir"), str(x), "-o", str(tmp_path / "o")]) == 0
    got = np.load(tmp_path / "o" / "tosa_reshape_default.npy")
    np.testing.assert_array_equal(got, tosa_jax.load(src).run(_inputs(src))["tosa_reshape_default"])
    assert cli(["check", str(tmp_path / "cnn.mlir")]) == 0
