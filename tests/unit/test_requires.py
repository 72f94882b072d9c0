"""Run-time REQUIREs (``load(..., check_requires=True)``, ``reference_model.run``) against the
reference model's binding: the same status (TOSA_UNPREDICTABLE or TOSA_VALID) for every REQUIRE
it checks while running, on traced inputs and on constants, through control flow and a rolled
recurrence; where the binding itself aborts (a division by zero, an index out of range) the
status the spec's pseudocode gives."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder, TosaUnpredictableWarning
from tosa_jax import reference_model as rm
from tosa_jax.ir import Block, Graph, Operator, Region, Tensor
from tosa_jax.testing.networks import STEPS, WIDTH, unrolled_rnn

trm = pytest.importorskip("tosa_reference_model")

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
VALID, UNPREDICTABLE = rm.GraphStatus.TOSA_VALID, rm.GraphStatus.TOSA_UNPREDICTABLE


def _binary(op: str, dtype: str = "INT32", shape: tuple[int, ...] = (3,), shift: int | None = None,
            **attrs) -> bytes:
    b = GraphBuilder()
    ins = [b.input("a", shape, dtype), b.input("b", shape, dtype)]
    if shift is not None:
        ins.append(b.const([shift], "INT8"))
    return tosa_jax.write(b.build([b.op(op, ins, shape, dtype, **attrs)]))


def _unary(op: str, dtype: str = "INT32", shape: tuple[int, ...] = (3,)) -> bytes:
    b = GraphBuilder()
    ins = [b.input("a", shape, dtype)]
    if op == "NEGATE":
        ins += [b.const([0], dtype), b.const([0], dtype)]
    return tosa_jax.write(b.build([b.op(op, ins, shape, dtype)]))


def _rescale(in_t: str, shift: int, scale32: bool = True, multiplier: int | None = None,
             rounding_mode: str = "SINGLE_ROUND") -> bytes:
    if multiplier is None:
        multiplier = 1 << 30 if scale32 else 1 << 14
    b = GraphBuilder()
    y = b.op("RESCALE", [b.input("a", (3,), in_t),
                         b.const([multiplier], "INT32" if scale32 else "INT16"),
                         b.const([shift], "INT8"), b.const([0], in_t), b.const([0], "INT32")],
             (3,), "INT32", scale32=scale32, rounding_mode=rounding_mode, per_channel=False,
             input_unsigned=False, output_unsigned=False)
    return tosa_jax.write(b.build([y]))


def _reduce_sum() -> bytes:
    b = GraphBuilder()
    return tosa_jax.write(b.build([b.op("REDUCE_SUM", [b.input("a", (2, 3), "INT32")], (2, 1),
                                        "INT32", axis=1)]))


def _scatter(w: int = 2) -> bytes:
    b = GraphBuilder()
    y = b.op("SCATTER", [b.input("v", (1, 4, 2), "INT8"), b.input("i", (1, w), "INT32"),
                         b.input("x", (1, w, 2), "INT8")], (1, 4, 2), "INT8")
    return tosa_jax.write(b.build([y]))


def _gather() -> bytes:
    b = GraphBuilder()
    y = b.op("GATHER", [b.input("v", (1, 4, 2), "INT8"), b.input("i", (1, 3), "INT32")],
             (1, 3, 2), "INT8")
    return tosa_jax.write(b.build([y]))


def _table(constant: bool) -> bytes:
    """int16 TABLE whose entries 1 and 2 differ by more than int16 holds (slope -65535)."""
    table = np.zeros(513, np.int16)
    table[1], table[2] = 32767, -32768
    b = GraphBuilder()
    a = b.input("a", (3,), "INT16")
    t = b.const(table, "INT16") if constant else b.input("t", (513,), "INT16")
    return tosa_jax.write(b.build([b.op("TABLE", [a, t], (3,), "INT32")]))


TABLE = np.zeros(513, np.int16)
TABLE[1], TABLE[2] = 32767, -32768


def _row_gather() -> bytes:
    """TOSA 1.1: runs of 2 rows from each index of a [1, 4, 2] tensor."""
    b = GraphBuilder((1, 1, 0, True))
    y = b.op("ROW_GATHER", [b.input("v", (1, 4, 2), "INT8"), b.input("i", (1, 2), "INT32"),
                            b.const([2], "INT32")], (1, 4, 2), "INT8")
    return tosa_jax.write(b.build([y]))


def i32(*v: int) -> np.ndarray:
    return np.array(v, np.int32)


# TOSA 1.1 EXT-INT64: the same REQUIREs on 64-bit values (traced as pairs of 32-bit words)
V11 = (1, 1, 0, True)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _binary64(op: str, shift: int | None = None) -> bytes:
    b = GraphBuilder(V11)
    ins = [b.input("a", (3,), "INT64"), b.input("b", (3,), "INT64")]
    if shift is not None:
        ins.append(b.const([shift], "INT8"))
    return tosa_jax.write(b.build([b.op(op, ins, (3,), "INT64")]))


def _unary64(op: str) -> bytes:
    b = GraphBuilder(V11)
    ins = [b.input("a", (3,), "INT64")]
    if op == "NEGATE":
        ins += [b.const([0], "INT64"), b.const([0], "INT64")]
    return tosa_jax.write(b.build([b.op(op, ins, (3,), "INT64")]))


def _reduce_sum64() -> bytes:
    b = GraphBuilder(V11)
    return tosa_jax.write(b.build([b.op("REDUCE_SUM", [b.input("a", (2, 3), "INT64")], (2, 1),
                                        "INT64", axis=1)]))


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


# (graph, inputs that break the REQUIRE, inputs that keep it): each checked against the binding
CASES = {
    "add": (_binary("ADD"), [i32(I32_MAX, 1, 2), i32(1, 1, 1)],
            [i32(I32_MAX, 1, 2), i32(0, 5, -9)]),
    "add_negative": (_binary("ADD"), [i32(0, I32_MIN, 2), i32(1, -1, 1)],
                     [i32(0, I32_MIN, 2), i32(1, 0, 1)]),
    "sub": (_binary("SUB"), [i32(I32_MIN, 0, 0), i32(1, 0, 0)], [i32(I32_MIN, 0, 0), i32(0, 0, 0)]),
    "sub_positive": (_binary("SUB"), [i32(0, 5, 0), i32(I32_MIN, 0, 0)],
                     [i32(-1, 5, 0), i32(I32_MIN, 0, 0)]),
    "mul_shift": (_binary("MUL", shift=10), [i32(1 << 20, 2, 3), i32(1 << 21, 3, 4)],
                  [i32(1 << 20, 2, 3), i32(1 << 20, 3, 4)]),
    # with shift 0 the product keeps its low 32 bits: no REQUIRE (the binding agrees)
    "mul_no_shift": (_binary("MUL", shift=0), None, [i32(1 << 16, 2, 3), i32(1 << 16, 3, 4)]),
    "intdiv_overflow": (_binary("INTDIV"), [i32(I32_MIN, 6, 7), i32(-1, 2, 3)],
                        [i32(I32_MIN, 6, 7), i32(1, 2, 3)]),
    "shl_i32": (_binary("LOGICAL_LEFT_SHIFT"), [i32(5, 6, 7), i32(32, 1, 0)],
                [i32(5, 6, 7), i32(31, 1, 0)]),
    "shl_negative": (_binary("LOGICAL_LEFT_SHIFT"), [i32(5, 6, 7), i32(-1, 1, 0)], None),
    "shr_i8": (_binary("LOGICAL_RIGHT_SHIFT", "INT8"), [np.int8([5, 6, 7]), np.int8([8, 1, 0])],
               [np.int8([5, 6, 7]), np.int8([7, 1, 0])]),
    "ashr_i16": (_binary("ARITHMETIC_RIGHT_SHIFT", "INT16", round=True),
                 [np.int16([5, 6, 7]), np.int16([16, 1, 0])],
                 [np.int16([5, 6, 7]), np.int16([15, 1, 0])]),
    "abs": (_unary("ABS"), [i32(I32_MIN, 1, -1)], [i32(I32_MIN + 1, 1, -1)]),
    "negate": (_unary("NEGATE"), [i32(I32_MIN, 1, -1)], [i32(I32_MAX, 1, -1)]),
    "pow_negative": (_binary("POW", "FP32"), [f32(-2, 1, 2), f32(2, 1, 1)],
                     [f32(2, 1, 2), f32(-2, 1, 1)]),
    "pow_zero": (_binary("POW", "FP32"), [f32(0, 1, 2), f32(0, 1, 1)],
                 [f32(0, 1, 2), f32(0.5, 1, 1)]),
    "pow_nan": (_binary("POW", "FP32"), [f32(np.nan, 1, 2), f32(1, 1, 1)], None),
    "pow_inf": (_binary("POW", "FP32"), [f32(2, 1, 2), f32(np.inf, 1, 1)], None),
    "pow_fp16": (_binary("POW", "FP16"), [np.float16([-1, 2, 3]), np.float16([2, 2, 2])],
                 [np.float16([1, 2, 3]), np.float16([-2, 2, 2])]),
    "reduce_sum": (_reduce_sum(), [i32(I32_MAX, 1, -5, 0, 0, 0).reshape(2, 3)],
                   # the total fits but a partial sum does not (added in index order): broken
                   # above; here every partial sum fits
                   [i32(-5, I32_MAX, 1, 0, 0, 0).reshape(2, 3)]),
    "rescale_value": (_rescale("INT32", 10), [i32(4096, 1, 2)], [i32(511, -512, 2)]),
    "rescale_value_i16": (_rescale("INT16", 4), [np.int16([20000, 1, 2])],
                          [np.int16([7, -8, 2])]),
    "rescale_double_round": (_rescale("INT32", 10, rounding_mode="DOUBLE_ROUND"),
                             [i32(4096, 1, 2)], [i32(511, -512, 2)]),
    "rescale_negative_multiplier": (_rescale("INT32", 10, multiplier=-5), [i32(1, 1, 2)], None),
    "rescale_shift_1": (_rescale("INT32", 1), [i32(0, 1, 2)], None),
    "rescale_shift_63": (_rescale("INT32", 63), [i32(0, 1, 2)], None),
    # INEXACT_ROUND: the binding checks none of apply_scale's REQUIREs
    "rescale_inexact": (_rescale("INT32", 10, rounding_mode="INEXACT_ROUND"), None,
                        [i32(600, 1, 2)]),  # over 1 << 9, as rescale_value breaks it
    "rescale_inexact_multiplier": (_rescale("INT32", 10, multiplier=-5,
                                            rounding_mode="INEXACT_ROUND"), None, [i32(4, 1, 2)]),
    "rescale_scale16": (_rescale("INT32", 2, scale32=False), [i32(I32_MAX, 1, 2)],
                        [i32(1 << 16, 1, 2)]),
    # value -32640 reads entries 1 and 2 (slope -65535), -32768 entries 0 and 1 (32767)
    "table_constant": (_table(True), [np.int16([-32640, 0, 5])], [np.int16([-32768, 0, 5])]),
    "table_input": (_table(False), [np.int16([-32640, 0, 5]), TABLE],
                    [np.int16([-32768, 0, 5]), TABLE]),
    "row_gather": (_row_gather(), None,  # (out of range: the binding aborts, below)
                   [np.arange(8, dtype=np.int8).reshape(1, 4, 2), i32(2, 0).reshape(1, 2)]),
    "add64": (_binary64("ADD"), [i64(I64_MAX, 1, 2), i64(1, 1, 1)],
              [i64(I64_MAX, 1, 2), i64(0, 1, 1)]),
    "add64_negative": (_binary64("ADD"), [i64(I64_MIN, 1, 2), i64(-1, 1, 1)],
                       [i64(I64_MIN, 1, 2), i64(1 << 62, 1, 1)]),
    "sub64": (_binary64("SUB"), [i64(I64_MIN, 1, 2), i64(1, 1, 1)],
              [i64(I64_MIN, 1, 2), i64(0, 1, 1)]),
    "sub64_positive": (_binary64("SUB"), [i64(0, 1, 2), i64(I64_MIN, 1, 1)],
                       [i64(-1, 1, 2), i64(I64_MIN, 1, 1)]),
    # an INT64 product keeps its low 64 bits: no REQUIRE (the binding agrees)
    "mul64": (_binary64("MUL", shift=0), None, [i64(1 << 40, I64_MIN, 2), i64(1 << 40, -1, 1)]),
    "shift64_left": (_binary64("LOGICAL_LEFT_SHIFT"), [i64(1, 1, 2), i64(64, 1, 1)],
                     [i64(1, 1, 2), i64(63, 1, 1)]),
    "shift64_negative": (_binary64("LOGICAL_RIGHT_SHIFT"), [i64(1, 1, 2), i64(-1, 1, 1)],
                         [i64(-1, 1, 2), i64(63, 0, 1)]),
    "shift64_arithmetic": (_binary64("ARITHMETIC_RIGHT_SHIFT"), [i64(-5, 1, 2), i64(1 << 32, 1, 1)],
                           [i64(-5, 1, 2), i64(63, 1, 1)]),
    "negate64": (_unary64("NEGATE"), [i64(I64_MIN, 1, 2)], [i64(I64_MIN + 1, 1, 2)]),
    "abs64": (_unary64("ABS"), [i64(I64_MIN, 1, 2)], [i64(I64_MIN + 1, 1, 2)]),
    # partial sums in index order: I64_MAX + 1 overflows even though the -1 after it would not
    "sum64": (_reduce_sum64(), [i64(I64_MAX, 1, -1, 1, 2, 3).reshape(2, 3)],
              [i64(I64_MAX, -1, 1, I64_MIN, 2, 3).reshape(2, 3)]),
    "intdiv64": (_binary64("INTDIV"), None, [i64(I64_MIN, 7, -7), i64(2, -2, 2)]),
    "scatter_twice": (_scatter(), [np.zeros((1, 4, 2), np.int8), i32(1, 1).reshape(1, 2),
                                   np.ones((1, 2, 2), np.int8)],
                      [np.zeros((1, 4, 2), np.int8), i32(3, 1).reshape(1, 2),
                       np.ones((1, 2, 2), np.int8)]),
}


def _status(graph: bytes, inputs: list[np.ndarray]) -> tuple[rm.GraphStatus, rm.GraphStatus]:
    r_outs, r_status = trm.run(graph, inputs)
    g_outs, g_status = rm.run(graph, inputs)
    if int(r_status) == VALID:  # outputs of a valid run: bit for bit
        assert all(g.tobytes() == r.tobytes() for g, r in zip(g_outs, r_outs, strict=True))
    return rm.GraphStatus(int(r_status)), g_status


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_matches_the_binding(case: str) -> None:
    graph, broken, kept = CASES[case]
    if broken is not None:
        ref, got = _status(graph, broken)
        assert ref == UNPREDICTABLE and got == UNPREDICTABLE
    if kept is not None:
        ref, got = _status(graph, kept)
        assert ref == VALID and got == VALID


@pytest.mark.parametrize(("graph", "inputs"), [
    # the binding reports these REQUIREs, then aborts (SIGFPE, an out-of-range read): the status
    # is the pseudocode's (REQUIRE(value2 != 0), REQUIRE(0 <= k < K))
    (_binary("INTDIV"), [i32(5, 6, 7), i32(0, 2, 3)]),
    (_gather(), [np.zeros((1, 4, 2), np.int8), i32(0, 4, 1).reshape(1, 3)]),
    (_gather(), [np.zeros((1, 4, 2), np.int8), i32(0, -1, 1).reshape(1, 3)]),
    (_scatter(), [np.zeros((1, 4, 2), np.int8), i32(4, 1).reshape(1, 2),
                  np.ones((1, 2, 2), np.int8)]),
    # REQUIRE(k >= 0 && k + row_count <= K): a run from row 3 of 4 leaves the tensor
    (_row_gather(), [np.zeros((1, 4, 2), np.int8), i32(3, 0).reshape(1, 2)]),
    (_row_gather(), [np.zeros((1, 4, 2), np.int8), i32(-1, 0).reshape(1, 2)]),
    (_binary64("INTDIV"), [i64(5, 6, 7), i64(0, 2, 3)]),
    (_binary64("INTDIV"), [i64(I64_MIN, 6, 7), i64(-1, 2, 3)]),
])
def test_requires_where_the_binding_aborts(graph: bytes, inputs: list[np.ndarray]) -> None:
    assert rm.run(graph, inputs)[1] == UNPREDICTABLE


def test_constants_are_checked_without_tracing() -> None:
    """An ADD of two constants is computed before tracing (numpy); its REQUIRE too."""
    for a, status in ((I32_MAX, UNPREDICTABLE), (I32_MAX - 1, VALID)):
        b = GraphBuilder()
        s = b.op("ADD", [b.const([a], "INT32"), b.const([1], "INT32")], (1,), "INT32")
        y = b.op("ADD", [b.input("x", (1,), "INT32"), s], (1,), "INT32")
        graph = tosa_jax.write(b.build([y]))
        assert _status(graph, [i32(0)]) == (status, status)


@pytest.mark.parametrize(("value", "status"), [(1 << 20, UNPREDICTABLE), (100, VALID)])
def test_a_constant_rescale_is_checked(value: int, status: rm.GraphStatus) -> None:
    """A RESCALE of a constant (computed with numpy, before tracing): apply_scale_32's
    REQUIRE on the value (|value| < 1 << (shift - 1), shift 10) still counts."""
    b = GraphBuilder()
    c = b.op("RESCALE", [b.const([value, 1, 2], "INT32"), b.const([1 << 30], "INT32"),
                         b.const([10], "INT8"), b.const([0], "INT32"), b.const([0], "INT32")],
             (3,), "INT32", scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
             input_unsigned=False, output_unsigned=False)
    y = b.op("ADD", [b.input("x", (3,), "INT32"), c], (3,), "INT32")
    assert _status(tosa_jax.write(b.build([y])), [np.zeros(3, np.int32)]) == (status, status)


def test_x64_does_not_change_the_checks() -> None:
    import jax

    graph, broken, kept = CASES["mul_shift"]
    with jax.enable_x64(True):
        rm.cache_clear()
        assert rm.run(graph, broken)[1] == UNPREDICTABLE
        assert rm.run(graph, kept)[1] == VALID
    rm.cache_clear()


def _block(b: GraphBuilder, name: str) -> GraphBuilder:
    b.block.name = name
    return b


def _cond_graph() -> Graph:
    """if (c) then x + y else x - y: the REQUIRE of the branch taken counts."""
    branches = []
    for name, op in (("then", "ADD"), ("else", "SUB")):
        b = _block(GraphBuilder(), name)
        b.block.outputs = [b.op(op, [b.input("x", (2,), "INT32"), b.input("y", (2,), "INT32")],
                                (2,), "INT32")]
        branches.append(Region(name, [b.block]))
    main = _block(GraphBuilder(), "main")
    ins = [main.input("c", (1,), "BOOL"), main.input("x", (2,), "INT32"),
           main.input("y", (2,), "INT32")]
    main.block.tensors["o"] = Tensor("o", (2,), "INT32")
    main.block.operators.append(Operator("COND_IF", ins, ["o"], {"then_graph": "then",
                                                                 "else_graph": "else"}))
    main.block.outputs = ["o"]
    return Graph((1, 0, 0, False), [Region("main", [main.block]), *branches])


@pytest.mark.parametrize(("c", "status"), [(True, UNPREDICTABLE), (False, VALID)])
def test_a_branch_reports_its_requires(c: bool, status: rm.GraphStatus) -> None:
    graph = tosa_jax.write(_cond_graph())
    inputs = [np.array([c]), i32(I32_MAX, 0), i32(1, 0)]  # x + y overflows, x - y does not
    assert _status(graph, inputs) == (status, status)


def test_a_rolled_recurrence_reports_its_requires() -> None:
    """An unrolled int32 recurrence (rolled into one loop here): its state starts near the int32
    maximum, and a step's ADD or RESCALE breaks a REQUIRE."""
    b = unrolled_rnn(seed=3)
    graph = b.build(b.block.outputs)
    x = np.random.default_rng(3).integers(-128, 128, (1, STEPS, WIDTH)).astype(np.int8)
    assert _status(tosa_jax.write(graph), [x]) == (VALID, VALID)
    graph.main.tensors["c0"].data = np.full((1, 1, WIDTH), I32_MAX - 10, np.int32)
    assert _status(tosa_jax.write(graph), [x]) == (UNPREDICTABLE, UNPREDICTABLE)
    model = tosa_jax.load(graph, cache=False, check_requires=True)
    with pytest.warns(TosaUnpredictableWarning, match="a step of the recurrence rolled"):
        model(x)  # checked inside the loop, not unrolled
    assert "stablehlo.while" in jax.jit(model._traced).lower(x).as_text()


def test_model_warns_and_names_the_operator() -> None:
    graph, broken, kept = CASES["add"]
    plain = tosa_jax.load(graph, cache=False)
    checked = tosa_jax.load(graph, cache=False, check_requires=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither the plain model nor valid inputs warn
        plain(*broken)
        checked(*kept)
    with pytest.warns(TosaUnpredictableWarning, match=r"ADD \(operator #0 of block 'main'\).*"
                      r"apply_add_s"):
        out = checked(*broken)
    assert np.array_equal(out, plain(*broken))  # the outputs as computed, all the same


def test_checked_and_plain_programs_are_separate_cache_entries(tmp_path) -> None:
    graph, broken, _ = CASES["add"]
    tosa_jax.load(graph, cache=tmp_path)(*broken)  # the plain program first, in the cache
    checked = tosa_jax.load(graph, cache=tmp_path, check_requires=True)
    with pytest.warns(TosaUnpredictableWarning):
        checked(*broken)


def test_cli_run_names_the_broken_require(tmp_path, capsys) -> None:
    from tosa_jax.cli import main

    graph, broken, kept = CASES["add"]
    (tmp_path / "g.tosa").write_bytes(graph)
    paths = []
    for i, x in enumerate(broken):
        paths.append(str(tmp_path / f"x{i}.npy"))
        np.save(paths[-1], x)
    with pytest.warns(TosaUnpredictableWarning, match=r"ADD \(operator #0"):
        assert main(["run", str(tmp_path / "g.tosa"), *paths, "--check-requires"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not asked for: no check
        assert main(["run", str(tmp_path / "g.tosa"), *paths]) == 0


def test_requires_diff_harness(tmp_path) -> None:
    """bench/requires_diff.py's harness on two graphs: an int32 ADD (full-range inputs break its
    REQUIRE on both engines) and a GATHER (random indices: the binding aborts, tosa_jax says
    unpredictable); the worker is restarted after the abort."""
    from tosa_jax.testing import requires_diff

    tests = []
    for name, graph in (("add", CASES["add"][0]), ("gather", _gather())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "test.tosa").write_bytes(graph)
        tests.append(str(tmp_path / name))
    records = requires_diff.run(tests, tmp_path / "tests.txt")
    got = {(r["test"].rsplit("/", 1)[-1], r["kind"]): r for r in records}
    assert got["add", "small"]["ref"] == got["add", "small"]["tosa_jax"] == "TOSA_VALID"
    assert got["add", "small"]["same"] is True
    assert got["add", "full"]["ref"] == got["add", "full"]["tosa_jax"] == "TOSA_UNPREDICTABLE"
    (gather,) = [r for r in records if r["test"].endswith("gather")]  # -3 .. 3: out of range
    assert gather["crash"] and gather["tosa_jax"] == "TOSA_UNPREDICTABLE"
    assert not requires_diff.summary(records)["status_differs"]


@pytest.mark.parametrize("case", ["mul_shift", "reduce_sum", "rescale_scale16", "table_input",
                                  "pow_fp16", "scatter_twice", "intdiv_overflow"])
def test_checked_programs_export_for_gpu(case: str) -> None:
    """The checks are 32-bit JAX operations: the checked program exports for CUDA and ROCm
    with nothing CPU-only and no 64-bit type (tosa_jax.testing.gpu_export's scan)."""
    from tosa_jax.testing import gpu_export

    model = tosa_jax.load(CASES[case][0], cache=False, check_requires=True)
    model.fn  # noqa: B018 (builds the checked function)
    specs = gpu_export.arg_specs(model)
    for platform in ("cuda", "rocm"):
        exported = jax.export.export(jax.jit(model._traced), platforms=[platform])(*specs)
        found = gpu_export.scan(exported.mlir_module(), platform)
        assert not found.problems(), (platform, found.problems())
        assert len(exported.out_avals) == len(model.outputs) + 1  # the outputs, the flag


def _variable_add_graph() -> bytes:
    """y = v + x; v = y: an int32 variable (EXT-VARIABLE) starting at INT32_MAX - 1."""
    blk = Block("main", inputs=["x"], outputs=["y"])
    blk.tensors = {"x": Tensor("x", (2,), "INT32"),
                   "v": Tensor("v", (2,), "INT32", data=i32(I32_MAX - 1, 0), variable=True,
                               variable_name="v"),
                   "r": Tensor("r", (2,), "INT32"), "y": Tensor("y", (2,), "INT32")}
    blk.operators = [Operator("IDENTITY", ["v"], ["r"]), Operator("ADD", ["r", "x"], ["y"]),
                     Operator("IDENTITY", ["y"], ["v"])]
    return tosa_jax.write(Graph((1, 0, 0, False), [Region("main", [blk])]))


def test_a_graph_with_variables_reports_its_requires() -> None:
    """The flag travels beside the variable state; the state itself is unchanged by it. (The
    range analysis the checks consult once looped forever on the variable read and written
    here: v -> r -> y -> v.)"""
    graph = _variable_add_graph()
    assert _status(graph, [i32(1, 5)]) == (VALID, VALID)  # INT32_MAX - 1 + 1
    assert _status(graph, [i32(2, 5)]) == (UNPREDICTABLE, UNPREDICTABLE)
    model = tosa_jax.load(graph, cache=False, check_requires=True)
    model(i32(1, 5))
    assert np.array_equal(model.state["v"], i32(I32_MAX, 5))
    with pytest.warns(TosaUnpredictableWarning):
        model(i32(1, 5))  # the state is now at the maximum: + 1 overflows
