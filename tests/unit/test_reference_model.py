"""tosa_jax.reference_model against the binding it stands in for (tosa-tools' tosa_reference_model).

Every convention is checked by calling both with the same arguments: the signature, statuses,
positional inputs and output order, raw-bit BF16/FP8 in and out, same-size integer inputs,
unsigned RESCALE outputs, variables, ERROR_IF and level statuses, errors. Where tosa_jax
deliberately differs (INT48, float arrays for integer inputs) the binding's behaviour is asserted
too, so a change in the binding shows here.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tosa_jax
from tosa_jax import GraphBuilder
from tosa_jax import reference_model as rm
from tosa_jax.ir import Block, Graph, Operator, Region, Tensor

trm = pytest.importorskip("tosa_reference_model")


def _both(graph: bytes, inputs: list, **options) -> tuple[tuple, tuple]:
    return trm.run(graph, inputs, **options), rm.run(graph, inputs, **options)


def _same(ref: tuple, got: tuple) -> None:
    """Same status, same number of outputs, same dtype, shape and bytes for each."""
    (r_outs, r_status), (g_outs, g_status) = ref, got
    assert int(g_status) == int(r_status) and g_status.name == r_status.name
    assert len(g_outs) == len(r_outs)
    for r, g in zip(r_outs, g_outs):
        assert isinstance(g, np.ndarray) and g.flags.writeable
        assert (g.dtype.str, g.shape) == (r.dtype.str, r.shape)
        assert g.tobytes() == r.tobytes()


def _unary(op: str, src: str, dst: str, shape=(2, 3), **attrs) -> bytes:
    b = GraphBuilder()
    y = b.op(op, [b.input("x", shape, src)], shape, dst, **attrs)
    return tosa_jax.write(b.build([y]))


X = np.array([[-2.5, -1.0, 0.0], [1.0, 2.75, 448.0]], np.float32)


def test_signature_and_status_match_the_binding():
    assert {m.name: int(m) for m in rm.GraphStatus} == {
        k: int(v) for k, v in trm.GraphStatus.__members__.items()}
    # the keyword options and defaults, from the binding's pybind11 signature line
    line = trm.run.__doc__.splitlines()[0]
    options = dict(re.findall(r"(\w+): [^=,]+ = ('[^']*'|[\w.]+)", line))
    import inspect
    ours = {k: p.default for k, p in inspect.signature(rm.run).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(ours) == set(options)
    for name, default in options.items():
        assert repr(ours[name]) == default or str(ours[name]) == default, name


def test_the_collector_is_held_during_a_run(monkeypatch):
    """A full collection set off by tosa_jax's allocations walks the caller's whole heap (0.4 s
    a time inside ExecuTorch's test process): held off for the call, back on after it."""
    import gc

    seen = []
    execute = rm._execute

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return execute(*args, **kwargs)

    monkeypatch.setattr(rm, "_execute", spy)
    assert gc.isenabled()
    _same(*_both(_unary("ABS", "FP32", "FP32"), [X]))
    assert seen == [False] and gc.isenabled()


def test_positional_inputs_and_outputs_in_graph_order():
    b = GraphBuilder()
    x, y = b.input("x", (2, 3), "INT32"), b.input("y", (2, 3), "INT32")
    s = b.op("SUB", [x, y], (2, 3), "INT32", name="s")
    m = b.op("MAXIMUM", [y, x], (2, 3), "INT32", name="m", nan_mode="PROPAGATE")
    g = tosa_jax.write(b.build([m, s]))
    a = np.arange(6, dtype=np.int32).reshape(2, 3) * 1000003
    c = np.array([[7, -8, 9], [2**30, -(2**30), 0]], np.int32)
    _same(*_both(g, [a, c]))
    _same(*_both(g, (c, a)))


@pytest.mark.parametrize("dst", ["BF16", "FP8E4M3", "FP8E5M2"])
def test_raw_bit_outputs_and_inputs(dst):
    """BF16/FP8 outputs as |V2/|V1 records; raw bits (uint16/uint8, or the records) as inputs."""
    ref, got = _both(_unary("CAST", "FP32", dst), [X])
    _same(ref, got)
    bits = got[0][0].view(np.uint16 if dst == "BF16" else np.uint8)
    back = _unary("CAST", dst, "FP32")
    for raw in (bits, got[0][0]):
        _same(*_both(back, [raw]))
    # ml_dtypes arrays, which the binding refuses, are taken as what they are
    typed = bits.view(tosa_jax.ir.HOST_DTYPES[dst])
    np.testing.assert_array_equal(rm.run(back, [typed])[0][0], trm.run(back, [bits])[0][0])


def test_integer_inputs_by_size_and_outputs_signed():
    """INT8/INT16 inputs may come as uint8/uint16 (same bytes); outputs are signed types;
    BOOL in and out."""
    for src, arr in [("INT8", np.array([[0, 200, 255], [1, 127, 128]], np.uint8)),
                     ("INT16", np.array([[0, 40000, 65535], [1, 32767, 32768]], np.uint16))]:
        _same(*_both(_unary("CAST", src, "INT32"), [arr]))
        _same(*_both(_unary("CAST", src, "INT32"), [arr.view(arr.dtype.str.replace("u", "i"))]))
    ints = np.array([[-300, -1, 0], [1, 200, 70000]], np.int32)
    for dst in ("INT8", "INT16", "BOOL"):
        _same(*_both(_unary("CAST", "INT32", dst), [ints]))
    _same(*_both(_unary("CAST", "BOOL", "INT32"), [ints > 0]))


@pytest.mark.parametrize("it,ot,in_u,out_u", [("INT16", "INT8", False, True),
                                              ("INT8", "INT16", True, False),
                                              ("INT8", "INT16", False, True)])
def test_unsigned_rescale_keeps_bits_in_signed_type(it, ot, in_u, out_u):
    b = GraphBuilder()
    x = b.input("x", (5,), it)
    zo = -128 if out_u and ot == "INT8" else 0
    y = b.op("RESCALE", [x, b.const([1 << 30], "INT32"), b.const([30], "INT8"),
                         b.const([0], it), b.const([zo], "INT16" if out_u and ot == "INT16"
                                                   else ot)],
             (5,), ot, scale32=True, rounding_mode="SINGLE_ROUND", per_channel=False,
             input_unsigned=in_u, output_unsigned=out_u)
    host = tosa_jax.ir.HOST_DTYPES[it]
    _same(*_both(tosa_jax.write(b.build([y])), [np.array([-100, 100, -1, 5, 0]).astype(host)]))


def test_int48_outputs_as_int64(reference):
    """The binding cannot convert INT48 (an empty float64 array); tosa_jax returns int64 values,
    those of the reference model's command line (.npy)."""
    b = GraphBuilder()
    ins = [b.input("x", (1, 2, 2, 1), "INT16"), b.const(np.full((1, 1, 1, 1), 127), "INT8"),
           b.const(np.zeros(1, np.int64), "INT48"), b.const([0], "INT16"), b.const([0], "INT8")]
    y = b.op("CONV2D", ins, (1, 2, 2, 1), "INT48", pad=(0, 0, 0, 0), stride=(1, 1),
             dilation=(1, 1), acc_type="INT48", local_bound=False)
    g = tosa_jax.write(b.build([y]))
    x = np.array([-32768, 32767, -1, 5], np.int16).reshape(1, 2, 2, 1)
    (r_outs, r_status), (g_outs, g_status) = _both(g, [x])
    assert r_outs[0].size == 0 and r_status == trm.GraphStatus.TOSA_VALID
    assert g_status == rm.GraphStatus.TOSA_VALID and g_outs[0].dtype == np.int64
    np.testing.assert_array_equal(g_outs[0], reference(g, {"x": x}, [y])[y])


def _variable_graph() -> bytes:
    """y = v | x; v = y (tosa-tools' encoding: the variable tensor read and written by
    IDENTITY), v starting at [1, 2, 3, 4]."""
    blk = Block("main", inputs=["x"], outputs=["y"])
    blk.tensors = {"x": Tensor("x", (4,), "INT8"),
                   "v": Tensor("v", (4,), "INT8", data=np.array([1, 2, 3, 4], np.int8),
                               variable=True, variable_name="v"),
                   "r": Tensor("r", (4,), "INT8"), "y": Tensor("y", (4,), "INT8")}
    blk.operators = [Operator("IDENTITY", ["v"], ["r"]),
                     Operator("BITWISE_OR", ["r", "x"], ["y"]),
                     Operator("IDENTITY", ["y"], ["v"])]
    return tosa_jax.write(Graph((1, 0, 0, False), [Region("main", [blk])]))


@pytest.mark.parametrize("from_numpy", [0, 1, True])
def test_variables_start_fresh_every_call(from_numpy):
    """Each call starts from the file's initial values (0) or from zeros (1: the binding is
    given no numpy values); nothing carries over to the next call."""
    g, x = _variable_graph(), np.array([16, 0, 0, 0], np.int8)
    for _ in range(2):
        _same(*_both(g, [x], initialize_variable_tensor_from_numpy=from_numpy))


def test_error_if_graph_returns_tosa_error_with_zero_outputs():
    g = _unary("CLAMP", "INT8", "INT8", min_val=np.int8(5), max_val=np.int8(1),
               nan_mode="PROPAGATE")
    _same(*_both(g, [np.arange(6, dtype=np.int8).reshape(2, 3)]))


def test_level_check_is_unpredictable():
    """Over a limit of level 8K (kernel 8193 > MAX_KERNEL): valid without a level,
    TOSA_UNPREDICTABLE with tosa_level="EIGHTK", the outputs computed all the same."""
    b = GraphBuilder()
    y = b.op("AVG_POOL2D", [b.input("x", (1, 1, 8193, 1), "INT8"), b.const([0], "INT8"),
                            b.const([0], "INT8")], (1, 1, 1, 1), "INT8", kernel=(1, 8193),
             stride=(1, 1), pad=(0, 0, 0, 0), acc_type="INT32")
    g = tosa_jax.write(b.build([y]))
    x = (np.arange(8193) % 7).astype(np.int8).reshape(1, 1, 8193, 1)
    for level in ("NONE", "EIGHTK"):
        _same(*_both(g, [x], tosa_level=level))


def test_errors_are_value_errors_like_the_binding():
    g = _unary("CAST", "INT8", "INT32")
    x = np.zeros((2, 3), np.int8)
    cases = [(b"garbage", [x]),                          # not a TOSA flatbuffer
             (g, []),                                    # too few inputs
             (g, [x, x]),                                # too many
             (g, [np.zeros((2, 3), np.int32)]),          # element size
             (g, [np.zeros((7,), np.int8)])]             # element count
    for graph, inputs in cases:
        with pytest.raises(ValueError):
            trm.run(graph, inputs)
        with pytest.raises(ValueError) as e:
            rm.run(graph, inputs)
        assert isinstance(e.value, tosa_jax.TosaError)
    # the same element count in another shape is taken, as the binding does
    _same(*_both(g, [np.arange(6, dtype=np.int8).reshape(3, 2)]))
    with pytest.raises(TypeError):
        rm.run(g, [x], no_such_option=1)


def test_float_arrays_for_integer_inputs_are_refused():
    """The binding reinterprets a float32 array's bits as INT32; tosa_jax refuses it."""
    g = _unary("CAST", "INT32", "FP32")
    f = np.array([[1.5, -2.0, 0.0], [3.0, 4.0, 5.0]], np.float32)
    r_outs, _ = trm.run(g, [f])
    np.testing.assert_array_equal(r_outs[0], f.view(np.int32).astype(np.float32))
    with pytest.raises(rm.InvalidInputsError, match="float32"):
        rm.run(g, [f])
    with pytest.raises(rm.InvalidInputsError, match="float16"):  # fp16 data for a BF16 input
        rm.run(_unary("CAST", "BF16", "FP32"), [f.astype(np.float16)])


def test_options_accepted_and_unsupported_ones_warned(monkeypatch):
    monkeypatch.setattr(rm, "_warned", set())
    g, x = _unary("ABS", "INT32", "INT32"), np.array([[-3, 2, 0], [5, -7, 1]], np.int32)
    quiet = dict(inst_id=3, is_unbuffered=True, fp_format="0.3", verbosity="NONE",
                 initialize_variable_tensor_from_numpy=1, tosa_level="EIGHTK")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _same(*_both(g, [x], **quiet))
    for option, value in [("verbosity", "MED"), ("debug_mode", "ALL"),
                          ("debug_filename", "/dev/null"), ("precise_mode", 1),
                          ("bounds_mode", True)]:
        with pytest.warns(rm.UnsupportedOptionWarning, match=option):
            got = rm.run(g, [x], **{option: value})
        _same(trm.run(g, [x]), got)
    with warnings.catch_warnings():  # once per process
        warnings.simplefilter("error")
        rm.run(g, [x], verbosity="MED")
    for option, bad in [("verbosity", "LOUD"), ("debug_mode", "X"), ("tosa_level", "8K")]:
        with pytest.raises(ValueError, match=option):  # the binding aborts the process here
            rm.run(g, [x], **{option: bad})


def _dump_graph() -> bytes:
    """INT32, FP32 and FP16 tensors of rank 0, 1 and 2 (where the binding's dump is plain text:
    it writes INT8 and BOOL elements as raw characters), constants, several inputs."""
    b = GraphBuilder()
    x = b.input("x", (2, 3), "INT32")
    y = b.op("ABS", [x], (2, 3), "INT32", name="absout")
    c = b.const(np.array([[1, -2, 3], [40, 5, -600]], np.int32), "INT32", name="cst")
    z = b.op("ADD", [y, c], (2, 3), "INT32", name="addout")
    f = b.input("f", (3,), "FP32")
    zp = b.const([0.0], "FP32", name="zp")
    g = b.op("NEGATE", [f, zp, zp], (3,), "FP32", name="neg")
    r = b.op("RECIPROCAL", [g], (3,), "FP32", name="recip")
    h = b.input("h", (2,), "FP16")
    hn = b.op("ABS", [h], (2,), "FP16", name="habs")
    s = b.input("s", (), "INT32")
    sn = b.op("ABS", [s], (), "INT32", name="sabs")
    return tosa_jax.write(b.build([z, r, hn, sn]))


@pytest.mark.parametrize("fp_format", ["0.5", "0.3"])
def test_dump_intermediates_writes_what_the_binding_writes(tmp_path, fp_format):
    """dump_intermediates=1 with debug_filename: the same text, byte for byte, as the binding's
    (each operator: header, inputs, outputs, each output's values), through tosa_jax.inspect."""
    g = _dump_graph()
    inputs = [np.array([[-3, 2, 0], [5, -7, 1]], np.int32),
              np.array([1.5, -2.25, 1e-3], np.float32), np.array([3e-3, -65504], np.float16),
              np.array(-7, np.int32)]
    theirs, ours = tmp_path / "ref.txt", tmp_path / "tj.txt"
    ref = trm.run(g, inputs, dump_intermediates=1, debug_filename=str(theirs),
                  fp_format=fp_format)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # supported now: no UnsupportedOptionWarning
        got = rm.run(g, inputs, dump_intermediates=1, debug_filename=str(ours),
                     fp_format=fp_format)
    _same(ref, got)
    text = ours.read_text()
    assert "Name: recip DType=FP32 isValid=1 Rank=1 Shape=[3, ]" in text
    assert text == theirs.read_text()


def test_models_cached_by_graph_bytes(monkeypatch):
    rm.cache_clear()
    g = _unary("ABS", "INT32", "INT32", shape=(3,))
    x = np.array([-1, 2, -3], np.int32)
    rm.run(g, [x])
    calls = []
    monkeypatch.setattr(rm, "load", lambda *a, **k: calls.append(a) or tosa_jax.load(*a, **k))
    for _ in range(3):
        np.testing.assert_array_equal(rm.run(bytearray(g), [x])[0][0], [1, 2, 3])
    assert calls == [] and rm.cache_info()["hits"] == 3
    rm.run(_unary("ABS", "INT32", "INT32", shape=(4,)), [np.zeros(4, np.int32)])
    assert len(calls) == 1 and rm.cache_info()["size"] == 2


def test_block_scaled_output_as_the_binding_returns_it():
    """TOSA 1.1: a ROW_GATHER of a bs32_fp8ue8m0_fp8e4m3_t constant: the binding returns one
    FP8E4M3 array (raw bits), each value times its block's scale."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    values = rng.standard_normal((1, 4, 32)).astype(ml_dtypes.float8_e4m3fn)
    scales = np.exp2(rng.integers(-3, 3, (1, 4, 1))).astype(ml_dtypes.float8_e8m0fnu)
    b = GraphBuilder((1, 1, 0, True))
    v = b.const(values, "FP8E4M3")
    t = b.block.tensors[v]
    t.scale_dtype, t.block_size, t.scale_data = "FP8UE8M0", 32, scales
    i = b.input("i", (1, 2), "INT32")
    out = b.op("ROW_GATHER", [v, i, b.const([1], "INT32")], (1, 2, 32), "FP8E4M3")
    t = b.block.tensors[out]
    t.scale_dtype, t.block_size = "FP8UE8M0", 32
    _same(*_both(tosa_jax.write(b.build([out])), [np.array([[2, 0]], np.int32)]))
