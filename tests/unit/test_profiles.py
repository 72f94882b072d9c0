"""tosa_jax.profiles: spec data, requirements, legacy names and ERROR_IF validation.

Oracles: the specification's own tables (tosa.xml, regenerated and compared), its pseudocode
ERROR_IFs, and the reference model, which must refuse each invalid graph built here
(``tosa_reference_model --validate_only``) and accept each valid one.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import tosa_jax
from tosa_jax import profiles
from tosa_jax.ir import HOST_DTYPES, Graph, GraphBuilder
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.reference import reference_model_path

REPO = Path(__file__).resolve().parents[2]
SPEC_XML = Path("/work/shared/tosa-spec/tosa.xml")


# ----------------------------------------------------------------------------- spec data


def test_spec_data_is_generated_from_the_xml() -> None:
    from tosa_jax.profiles import generate_spec_data, spec_data

    if not SPEC_XML.exists():
        pytest.skip("tosa.xml not available here")
    text = generate_spec_data.render(generate_spec_data.parse(SPEC_XML), SPEC_XML.name,
                                     generate_spec_data.hashlib.sha256(
                                         SPEC_XML.read_bytes()).hexdigest())
    assert (REPO / "profiles" / "spec_data.py").read_text() == text
    assert spec_data.VERSION == (1, 0, 2)
    assert len(spec_data.OPERATORS) == 75
    assert set(spec_data.PROFILES) == {"PRO-INT", "PRO-FP"}
    assert len(spec_data.EXTENSIONS) == 11
    assert spec_data.LEVELS["8K"]["MAX_KERNEL"] == 8192


# ----------------------------------------------------------------------------- requirements


def _conv_graph(in_t: str = "INT8", w_t: str = "INT8", out_t: str = "INT32",
                acc: str = "INT32", stride: tuple[int, int] = (1, 1),
                pad: tuple[int, ...] = (0, 0, 0, 0), zp: int = 0, kh: int = 1,
                out_hw: tuple[int, int] = (4, 4), weight_input: bool = False) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 4, 2), in_t)
    if weight_input:
        w = b.input("w", (3, kh, 1, 2), w_t)
    else:
        w = b.const(np.ones((3, kh, 1, 2)), w_t)
    bias = b.const(np.zeros(3), out_t)
    y = b.op("CONV2D", [x, w, bias, b.const([zp], in_t), b.const([0], w_t)],
             (1, *out_hw, 3), out_t, pad=pad, stride=stride, dilation=(1, 1),
             acc_type=acc, local_bound=False)
    return b.build([y])


def test_requirements_int8_conv_is_pro_int() -> None:
    r = profiles.requirements(_conv_graph())
    assert r.valid and r.profiles == ("PRO-INT",) and not r.all_profiles
    assert r.extensions == () and r.level == "8K"
    conv = next(n for n in r.operators if n.op == "CONV2D")
    assert conv.mode == "signed 8x8 with int32 accumulate"
    assert conv.options == (("PRO-INT",),)


def test_requirements_int16_needs_ext_int16() -> None:
    r = profiles.requirements(_conv_graph("INT16", "INT8", "INT48", "INT48"))
    assert r.profiles == ("PRO-INT",) and r.extensions == ("EXT-INT16",)


def test_requirements_int32_add_is_in_both_profiles() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT32")
    r = profiles.requirements(b.build([b.op("ADD", [x, x], (2, 3), "INT32")]))
    assert r.profiles == ("PRO-INT", "PRO-FP") and not r.all_profiles


def test_requirements_mixed_graph_needs_both_profiles() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT8")
    f = b.op("CAST", [x], (2, 3), "FP32")           # PRO-FP
    i = b.op("CAST", [x], (2, 3), "INT16")          # PRO-INT
    r = profiles.requirements(b.build([f, i]))
    assert r.all_profiles and r.profiles == ("PRO-INT", "PRO-FP")


def test_requirements_bf16_rounding_and_dynamic_ctc() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "BF16")
    r = profiles.requirements(b.build([b.op("ABS", [x], (2, 3), "BF16")]))
    assert r.profiles == ("PRO-FP",) and r.extensions == ("EXT-BF16",)

    def rescale(mode: str, zp_input: bool) -> Graph:
        b = GraphBuilder()
        x = b.input("x", (2, 3), "INT8")
        zp = b.input("zp", (1,), "INT8") if zp_input else b.const([0], "INT8")
        y = b.op("RESCALE", [x, b.const([1 << 30], "INT32"), b.const([30], "INT8"), zp,
                             b.const([0], "INT8")], (2, 3), "INT8", scale32=True,
                 rounding_mode=mode, per_channel=False, input_unsigned=False,
                 output_unsigned=False)
        return b.build([y])

    assert profiles.requirements(rescale("DOUBLE_ROUND", False)).extensions == (
        "EXT-DOUBLEROUND",)
    assert profiles.requirements(rescale("INEXACT_ROUND", False)).extensions == (
        "EXT-INEXACTROUND",)
    dyn = profiles.requirements(rescale("SINGLE_ROUND", True))
    assert dyn.extensions == ("EXT-DYNAMIC",)
    assert any("EXT-DYNAMIC: input_zp is not a constant" in why
               for n in dyn.operators for why in n.reasons)


def test_requirements_level_from_kernel_size() -> None:
    g = _conv_graph(kh=9000, weight_input=True, pad=(4500, 4499, 0, 0))
    r = profiles.requirements(g)
    assert r.valid and r.level == "none"
    assert any("MAX_KERNEL" in why for why in r.level_reasons)
    with pytest.raises(tosa_jax.TosaValidationError, match="MAX_KERNEL"):
        profiles.validate(g, level="8K")
    profiles.validate(g, level="none")


@pytest.mark.parametrize("name", ["cnn_int8", "mlp_attn_int8"])
def test_requirements_of_fixture_networks(name: str) -> None:
    graph = tosa_jax.read((FIXTURES / f"{name}.tosa").read_bytes())
    r = profiles.validate(graph, profile="TOSA-1.0+INT", level="8K")
    assert r.valid and r.profiles == ("PRO-INT",) and r.extensions == () and r.level == "8K"
    assert "CONV2D" in r.table()
    with pytest.raises(tosa_jax.TosaValidationError, match="needs PRO-INT"):
        profiles.validate(graph, profile="PRO-FP")


def test_validate_against_a_target() -> None:
    g = _conv_graph("INT16", "INT8", "INT48", "INT48")
    with pytest.raises(tosa_jax.TosaValidationError, match="EXT-INT16"):
        profiles.validate(g, profile="TOSA-1.0+INT")
    with pytest.raises(tosa_jax.TosaValidationError, match="EXT-INT16"):
        profiles.validate(g, profile="PRO-INT", extensions=[])
    profiles.validate(g, profile="TOSA-1.0+INT+int16")
    profiles.validate(g, profile=["pro-int"], extensions=["tosa-ext-int16"])


# ----------------------------------------------------------------------------- names


def test_spec_strings_map_to_profiles() -> None:
    t = profiles.parse_spec_string("TOSA-1.0+INT")
    assert t.profiles == {"PRO-INT"} and t.extensions == frozenset() and t.level is None
    t = profiles.parse_spec_string("TOSA-1.0+INT+int16+int4+8k+u55")
    assert t.extensions == {"EXT-INT16", "EXT-INT4"} and t.level == "8K"
    assert any("u55" in n for n in t.notes)
    t = profiles.parse_spec_string("TOSA-1.0+FP+bf16+fft+var+cf")
    assert t.profiles == {"PRO-FP"}
    assert t.extensions == {"EXT-BF16", "EXT-FFT", "EXT-VARIABLE", "EXT-CONTROLFLOW"}
    t = profiles.parse_spec_string("TOSA-1.0+FP+int16")  # EXT-INT16 extends PRO-INT only
    assert t.profiles == {"PRO-FP", "PRO-INT"} and t.extensions == {"EXT-INT16"}
    assert any("EXT-INT16 extends PRO-INT" in n for n in t.notes)
    assert profiles.parse_spec_string("TOSA-0.80+BI").profiles == {"PRO-INT"}
    assert profiles.parse_spec_string("TOSA-0.80.0+MI+8k").profiles == {"PRO-FP"}
    assert profiles.parse_spec_string("TOSA-0.80+BI+u55").profiles == {"PRO-INT"}
    for bad, why in (("TOSA-0.80+MT", "main-training"), ("TOSA-2.0+INT", "no mapping"),
                     ("TOSA-1.0+INT+int64", "unknown token"), ("TOSA-1.0+int16", "no profile"),
                     ("INT8", "not a TOSA spec string")):
        with pytest.raises(profiles.TosaNameError, match=why):
            profiles.parse_spec_string(bad)


def test_names() -> None:
    assert profiles.profile_name("int") == profiles.profile_name("tosa-pro-int") == "PRO-INT"
    assert profiles.extension_name("int16") == profiles.extension_name("EXT-INT16") \
        == profiles.extension_name("tosa-ext-int16") == "EXT-INT16"
    assert profiles.extension_name("cf") == "EXT-CONTROLFLOW"
    assert profiles.level_name("8k") == "8K"
    with pytest.raises(profiles.TosaNameError, match="unknown TOSA profile"):
        profiles.profile_name("PRO-MT")
    with pytest.raises(profiles.TosaNameError, match="extends PRO-FP"):
        profiles.make_target("PRO-INT", ["bf16"])


# ----------------------------------------------------------------------------- ERROR_IF


def _reference_refuses(graph: Graph) -> bool:
    """Whether the reference model refuses the graph (level 8K), run on zero inputs: some of
    its ERROR_IF checks (CLAMP's) happen only when an operator is evaluated."""
    exe = reference_model_path()
    if exe is None:
        pytest.skip("tosa-tools (tosa_reference_model) is not installed")
    main = graph.main
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "g.tosa").write_bytes(tosa_jax.write(graph))
        for i, name in enumerate(main.inputs):
            t = main.tensors[name]
            np.save(d / f"i{i}.npy", np.zeros(t.shape, HOST_DTYPES[t.dtype]))
        cmd = [exe, "--tosa_file", "g.tosa", "--flatbuffer_dir", tmp, "--output_dir", tmp,
               "--tosa_level", "EIGHTK", "--ofm_name", ",".join(main.outputs),
               "--ofm_file", ",".join(f"o{i}.npy" for i in range(len(main.outputs)))]
        if main.inputs:
            cmd += ["--ifm_name", ",".join(main.inputs),
                    "--ifm_file", ",".join(f"i{i}.npy" for i in range(len(main.inputs)))]
        # No gdb backtrace on ERROR_IF (seconds each; the status is the same).
        env = dict(os.environ, TOSA_MODEL_NO_BACKTRACE="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    return proc.returncode != 0 and "ERROR" in proc.stdout + proc.stderr


def _unary(op: str, in_shape: tuple[int, ...], in_t: str, out_shape: tuple[int, ...],
           out_t: str, extra: list[tuple[object, str]] = (), **attrs: object) -> Graph:
    b = GraphBuilder()
    x = b.input("x", in_shape, in_t)
    ins = [x] + [b.const(v, t) for v, t in extra]
    return b.build([b.op(op, ins, out_shape, out_t, **attrs)])


def _add(shape1: tuple[int, ...], shape2: tuple[int, ...], out: tuple[int, ...],
         dtype: str = "INT32") -> Graph:
    b = GraphBuilder()
    x, y = b.input("x", shape1, dtype), b.input("y", shape2, dtype)
    return b.build([b.op("ADD", [x, y], out, dtype)])


def _wrong_input_count() -> Graph:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT32")
    return b.build([b.op("ABS", [x, x], (2, 3), "INT32")])


def _concat() -> Graph:
    b = GraphBuilder()
    x, y = b.input("x", (2, 3), "INT8"), b.input("y", (3, 4), "INT8")
    return b.build([b.op("CONCAT", [x, y], (5, 3), "INT8", axis=0)])


def _matmul_zp() -> Graph:
    b = GraphBuilder()
    a, c = b.input("a", (1, 2, 3), "INT16"), b.input("b", (1, 3, 4), "INT16")
    return b.build([b.op("MATMUL", [a, c, b.const([3], "INT16"), b.const([0], "INT16")],
                         (1, 2, 4), "INT48")])


_RESCALE = dict(scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False)
_PAD4 = dict(kernel=(2, 2), stride=(1, 1), acc_type="INT32")

CASES = {
    "broadcast": (lambda: _add((2, 3), (4, 3), (4, 3)), "ADD", "broadcast_shape"),
    "broadcast rank": (lambda: _add((2, 3), (3,), (2, 3)), "ADD", "rank(shape1) != rank"),
    "output shape": (lambda: _add((2, 3), (1, 3), (2, 4)), "ADD", "shape != broadcast_shape"),
    "type support": (lambda: _add((2, 3), (2, 3), (2, 3), "INT8"), "ADD",
                     "Supported Data Types"),
    "input count": (_wrong_input_count, "ABS", "takes 1 input"),
    "conv stride": (lambda: _conv_graph(stride=(0, 1)), "CONV2D", "stride < 1"),
    "conv output": (lambda: _conv_graph(out_hw=(3, 4)), "CONV2D", "OH != idiv_check"),
    "conv zero point": (lambda: _conv_graph("INT16", "INT8", "INT48", "INT48", zp=5),
                        "CONV2D", "zero point only for int8"),
    "conv acc_type": (lambda: _conv_graph(acc="INT48"), "CONV2D", "acc_type does not match"),
    "avg_pool pad": (lambda: _unary("AVG_POOL2D", (1, 4, 4, 1), "INT8", (1, 5, 5, 1), "INT8",
                                    [([0], "INT8"), ([0], "INT8")], pad=(2, 0, 0, 0), **_PAD4),
                     "AVG_POOL2D", "pad_top >= kernel_y"),
    "rescale unsigned": (lambda: _unary(
        "RESCALE", (2, 3), "INT8", (2, 3), "INT8",
        [([1 << 30], "INT32"), ([30], "INT8"), ([0], "INT8"), ([0], "INT8")],
        input_unsigned=True, output_unsigned=True, **_RESCALE),
        "RESCALE", "input_unsigned && output_unsigned"),
    "rescale i32 zero point": (lambda: _unary(
        "RESCALE", (2, 3), "INT32", (2, 3), "INT8",
        [([1 << 30], "INT32"), ([30], "INT8"), ([4], "INT32"), ([0], "INT8")],
        input_unsigned=False, output_unsigned=False, **_RESCALE),
        "RESCALE", "input_zp != 0"),
    "transpose perms": (lambda: _unary("TRANSPOSE", (2, 3), "INT8", (2, 3), "INT8",
                                       perms=(0, 0)), "TRANSPOSE", "indexes_used"),
    "slice bounds": (lambda: _unary("SLICE", (4, 4), "INT8", (3, 2), "INT8",
                                    [([2, 0], "SHAPE"), ([3, 2], "SHAPE")]),
                     "SLICE", "start[index] + size[index] > shape1[index]"),
    "clamp range": (lambda: _unary("CLAMP", (2, 3), "INT8", (2, 3), "INT8", min_val=5,
                                   max_val=-5, nan_mode="PROPAGATE"),
                    "CLAMP", "max_val < min_val"),
    "reduce axis": (lambda: _unary("REDUCE_SUM", (2, 3), "INT32", (2, 1), "INT32", axis=2),
                    "REDUCE_SUM", "axis >= rank(shape1)"),
    "table size": (lambda: _unary("TABLE", (2, 3), "INT8", (2, 3), "INT8",
                                  [(np.zeros(255), "INT8")]), "TABLE", "[TABLE_SIZE]"),
    "concat": (_concat, "CONCAT", "shapes1[shape_index][axis_index]"),
    "pad negative": (lambda: _unary("PAD", (2, 3), "INT8", (2, 2), "INT8",
                                    [([0, 0, 0, -1], "SHAPE"), ([0], "INT8")]),
                     "PAD", "padding[i * 2] < 0"),
    "matmul zero point": (_matmul_zp, "MATMUL", "zero point only for int8"),
    "resize scale": (lambda: _unary("RESIZE", (1, 4, 4, 1), "INT8", (1, 4, 4, 1), "INT8",
                                    [([0, 1, 1, 1], "SHAPE"), ([0, 0], "SHAPE"),
                                     ([0, 0], "SHAPE")], mode="NEAREST"),
                     "RESIZE", "scale_y_n <= 0"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_if_is_refused_as_the_reference_model_does(case: str) -> None:
    build, op, rule = CASES[case]
    graph = build()
    with pytest.raises(tosa_jax.TosaValidationError) as info:
        profiles.validate(graph)
    message = str(info.value)
    assert op in message and rule in message, message
    assert info.value.violations and info.value.violations[0].op == op
    assert _reference_refuses(graph), f"the reference model accepts the {case} graph"


def test_valid_graphs_are_accepted_by_both() -> None:
    for graph in (_conv_graph(), _add((2, 3), (1, 3), (2, 3)),
                  _unary("RESCALE", (2, 3), "INT16", (2, 3), "INT8",
                         [([1 << 14], "INT16"), ([14], "INT8"), ([-32768], "INT16"),
                          ([0], "INT8")], scale32=False, rounding_mode="SINGLE_ROUND",
                         per_channel=False, input_unsigned=True, output_unsigned=False)):
        profiles.validate(graph)
        assert not _reference_refuses(graph)


def test_structure_rules() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT32")
    y = b.op("ABS", ["missing"], (2, 3), "INT32")
    with pytest.raises(tosa_jax.TosaValidationError, match="'missing' is not a tensor"):
        profiles.validate(b.build([y]))
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT32")
    b.block.tensors["z"] = tosa_jax.ir.Tensor("z", (2, 3), "INT32")
    with pytest.raises(tosa_jax.TosaValidationError, match="produced by no operator"):
        profiles.validate(b.build([b.op("ABS", [x], (2, 3), "INT32"), "z"]))
    b = GraphBuilder()
    s = b.input("s", (2,), "SHAPE")
    with pytest.raises(tosa_jax.TosaValidationError, match="shape_t"):
        profiles.validate(b.build([s]))


def test_cli_check(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tosa_jax.cli import main

    net = str(FIXTURES / "cnn_int8.tosa")
    assert main(["check", net, "--profile", "TOSA-1.0+INT", "--level", "8K"]) == 0
    out = capsys.readouterr().out
    assert "requires: PRO-INT; no extension; level 8K" in out and "CONV2D" in out
    assert main(["check", net, "--profile", "PRO-FP"]) == 1
    assert "needs PRO-INT" in capsys.readouterr().out
    assert main(["check", net, "--profile", "TOSA-0.80+MT"]) == 2
    bad = tmp_path / "bad.tosa"
    bad.write_bytes(tosa_jax.write(_add((2, 3), (4, 3), (4, 3))))
    assert main(["check", str(bad)]) == 1
    assert "ERROR_IF(shape2[i] != 1" in capsys.readouterr().out


def test_model_exposes_requirements_and_refuses_beyond_target() -> None:
    net = FIXTURES / "cnn_int8.tosa"
    model = tosa_jax.load(net, profile="TOSA-1.0+INT", level="8K")
    assert model.requirements.profiles == ("PRO-INT",)
    with pytest.raises(tosa_jax.TosaValidationError, match="needs PRO-INT"):
        tosa_jax.load(net, profile="TOSA-1.0+FP")
    with pytest.raises(tosa_jax.TosaValidationError, match="broadcast_shape"):
        tosa_jax.load(tosa_jax.write(_add((2, 3), (4, 3), (4, 3))))
