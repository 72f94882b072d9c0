"""ERROR_IFs on values given when the graph runs (EXT-DYNAMIC: zero points as graph inputs or
computed in the graph), against the reference model's binding: the same status (TOSA_ERROR or
TOSA_VALID, with identical outputs) through ``reference_model.run``; ``model(...)``, ``run`` and
``evaluate`` refuse such inputs naming the operator, argument and rule; checked programs
(``check_requires=True``) catch zero points the graph computes."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaValidationError
from tosa_jax import reference_model as rm

trm = pytest.importorskip("tosa_reference_model")
os.environ.setdefault("TOSA_MODEL_NO_BACKTRACE", "1")  # the binding forks gdb on an ERROR_IF

VALID, ERROR = rm.GraphStatus.TOSA_VALID, rm.GraphStatus.TOSA_ERROR
UNPREDICTABLE = rm.GraphStatus.TOSA_UNPREDICTABLE


def _negate(dtype: str = "INT16") -> bytes:
    b = GraphBuilder()
    y = b.op("NEGATE", [b.input("x", (3,), dtype), b.input("izp", (1,), dtype),
                        b.input("ozp", (1,), dtype)], (3,), dtype)
    return tosa_jax.write(b.build([y]))


def _rescale_u16() -> bytes:
    """uint16 -> int16 RESCALE whose input zero point is an input: 0 or 32768 only."""
    b = GraphBuilder()
    y = b.op("RESCALE", [b.input("x", (3,), "INT16"), b.const([1 << 30], "INT32"),
                         b.const([30], "INT8"), b.input("izp", (1,), "INT16"),
                         b.const([0], "INT16")],
             (3,), "INT16", scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
             input_unsigned=True, output_unsigned=False)
    return tosa_jax.write(b.build([y]))


def _matmul_fp32() -> bytes:
    """A float MATMUL whose A zero point is an input: zero it must be."""
    b = GraphBuilder()
    y = b.op("MATMUL", [b.input("a", (1, 2, 3), "FP32"), b.input("b", (1, 3, 2), "FP32"),
                        b.input("azp", (1,), "FP32"), b.const([0.0], "FP32")],
             (1, 2, 2), "FP32")
    return tosa_jax.write(b.build([y]))


def _computed_zp() -> bytes:
    """NEGATE int16 whose input zero point is computed in the graph (int16(z1 + z2))."""
    b = GraphBuilder()
    s = b.op("ADD", [b.input("z1", (1,), "INT32"), b.input("z2", (1,), "INT32")], (1,), "INT32")
    zp = b.op("CAST", [s], (1,), "INT16")
    y = b.op("NEGATE", [b.input("x", (3,), "INT16"), zp, b.const([0], "INT16")], (3,), "INT16")
    return tosa_jax.write(b.build([y]))


def _require_then_error() -> bytes:
    """An int32 ADD (its REQUIRE) before an int16 NEGATE whose zero point is an input."""
    b = GraphBuilder()
    s = b.op("ADD", [b.input("a", (1,), "INT32"), b.input("b", (1,), "INT32")], (1,), "INT32")
    y = b.op("NEGATE", [b.input("x", (3,), "INT16"), b.input("izp", (1,), "INT16"),
                        b.const([0], "INT16")], (3,), "INT16")
    return tosa_jax.write(b.build([s, y]))


def i16(*v: int) -> np.ndarray:
    return np.array(v, np.int16)


def i32(*v: int) -> np.ndarray:
    return np.array(v, np.int32)


I32_MAX = (1 << 31) - 1
X = i16(1, -2, 300)
ONES_A, ONES_B = np.ones((1, 2, 3), np.float32), np.ones((1, 3, 2), np.float32)
# (graph, inputs that break the ERROR_IF, inputs that keep it, operator, argument)
CASES = {
    "negate_input_zp": (_negate(), [X, i16(3), i16(0)], [X, i16(0), i16(0)],
                        "NEGATE", "input1_zp"),
    "negate_output_zp": (_negate(), [X, i16(0), i16(-1)], [X, i16(0), i16(0)],
                         "NEGATE", "output_zp"),
    "negate_int8_any_zp": (_negate("INT8"), None, [X.astype(np.int8), np.int8([5]),
                                                   np.int8([-7])], "NEGATE", None),
    "rescale_u16_zp": (_rescale_u16(), [X, i16(5)], [X, i16(-32768)], "RESCALE", "input_zp"),
    "matmul_a_zp": (_matmul_fp32(), [ONES_A, ONES_B, np.float32([0.5])],
                    [ONES_A, ONES_B, np.float32([0.0])], "MATMUL", "A_zp"),
    "computed_zp": (_computed_zp(), [i32(2), i32(-1), X], [i32(2), i32(-2), X], "NEGATE",
                    "input1_zp"),
}


def _status(graph: bytes, inputs: list[np.ndarray]) -> tuple[rm.GraphStatus, rm.GraphStatus]:
    r_outs, r_status = trm.run(graph, inputs)
    g_outs, g_status = rm.run(graph, inputs)
    if int(r_status) == VALID:
        assert all(g.tobytes() == r.tobytes() for g, r in zip(g_outs, r_outs, strict=True))
    return rm.GraphStatus(int(r_status)), g_status


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_matches_the_binding(case: str) -> None:
    graph, broken, kept, _, _ = CASES[case]
    if broken is not None:
        assert _status(graph, broken) == (ERROR, ERROR)
    assert _status(graph, kept) == (VALID, VALID)


@pytest.mark.parametrize("case", [c for c in sorted(CASES) if c != "computed_zp"
                                  and CASES[c][1] is not None])
def test_model_refuses_the_inputs_and_names_the_rule(case: str) -> None:
    graph, broken, kept, op, arg = CASES[case]
    model = tosa_jax.load(graph, cache=False)
    model(*kept)
    with pytest.raises(TosaValidationError, match=rf"{op} \(operator #\d+ of block 'main'\): "
                       rf"argument '{arg}': ERROR_IF\(.*fails for these inputs"):
        model(*broken)
    names = [s.name for s in model.inputs]
    with pytest.raises(TosaValidationError, match=arg):
        model.run(dict(zip(names, broken, strict=True)))


def test_evaluate_checks_every_sample() -> None:
    graph, _, _, _, _ = CASES["negate_input_zp"]
    model = tosa_jax.load(graph, cache=False)
    xs = np.stack([X] * 4)
    zeros = np.zeros((4, 1), np.int16)
    tosa_jax.evaluate(model, (xs, zeros, zeros), progress=False)
    zps = zeros.copy()
    zps[2] = 7  # one sample's zero point
    with pytest.raises(TosaValidationError, match="input1_zp = 7"):
        tosa_jax.evaluate(model, (xs, zps, zeros), progress=False)


def test_a_computed_zero_point_is_caught_by_checked_programs() -> None:
    graph, broken, kept, _, _ = CASES["computed_zp"]
    plain = tosa_jax.load(graph, cache=False)
    plain(*broken)  # the plain program computes; only a checked one sees computed values
    checked = tosa_jax.load(graph, cache=False, check_requires=True)
    assert np.array_equal(checked(*kept), plain(*kept))
    with pytest.raises(TosaValidationError, match=r"NEGATE \(operator #\d+ .*input1_zp.*"
                       "the graph is in error"):
        checked(*broken)


@pytest.mark.parametrize(("a", "izp"), [(I32_MAX, 0), (0, 5), (I32_MAX, 5)])
def test_first_rule_broken_decides_as_in_the_binding(a: int, izp: int) -> None:
    """A REQUIRE broken before an ERROR_IF, each alone and both: the status the binding gives."""
    inputs = [np.int32([a]), np.int32([1]), X, i16(izp)]
    ref, got = _status(_require_then_error(), inputs)
    assert got == ref


def test_constant_zero_points_are_refused_at_load() -> None:
    b = GraphBuilder()
    y = b.op("NEGATE", [b.input("x", (3,), "INT16"), b.const([3], "INT16"),
                        b.const([0], "INT16")], (3,), "INT16")
    with pytest.raises(TosaValidationError, match="input1_zp"):
        tosa_jax.load(b.build([y]), cache=False)


def test_cli_check_lists_the_rules_left_to_the_run(tmp_path, capsys) -> None:
    from tosa_jax.cli import main

    graph, _, _, _, _ = CASES["rescale_u16_zp"]
    (tmp_path / "g.tosa").write_bytes(graph)
    assert main(["check", str(tmp_path / "g.tosa")]) == 0
    out = capsys.readouterr().out
    assert ("checked when the graph runs: RESCALE (operator #3 of block 'main') argument "
            "'input_zp' (tensor 'izp'): ERROR_IF(is_same<in_t,i16_t>() && input_unsigned == true"
            " && input_zp != 0 && input_zp != 32768)") in out
