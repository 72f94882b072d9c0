"""Device models and NPU operator support, judged against Vela 5.2 where it is installed."""

from __future__ import annotations

import pytest

from tosa_jax import write
from tosa_jax.errors import TosaError, TosaHardwareError
from tosa_jax.hw_models.devices import DEVICES, DeviceModel, get_device
from tosa_jax.hw_models.support import unsupported_reasons
from tosa_jax.hw_models.vela import vela_available, vela_verdict
from tosa_jax.ir import Graph, GraphBuilder

CONFIGS = ["ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256",
           "ethos-u65-512", "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024",
           "ethos-u85-2048"]
FIELDS = ["macs_per_cycle", "clock_hz", "sram_bytes", "dram_bytes", "sram_bw_bytes_per_cycle",
          "dram_bw_bytes_per_cycle"]

needs_vela = pytest.mark.skipif(not vela_available(), reason="Vela (ethos-u-vela) not installed")


def test_device_table() -> None:
    for name in CONFIGS:
        d = get_device(name)
        assert d.kind == "npu" and d.name == name and name.startswith(d.family)
        # Vela's MAC count is the number in the configuration's name.
        assert d.macs_per_cycle == int(name.rsplit("-", 1)[1])
    kinds = {d.kind for d in DEVICES.values()}
    assert kinds == {"npu", "gpu", "cpu"}
    assert get_device("cpu").family == "cpu"
    assert any(d.family == "mali" for d in DEVICES.values())
    for d in DEVICES.values():
        assert isinstance(d, DeviceModel)
        for f in FIELDS:
            assert getattr(d, f) > 0, (d.name, f)
            assert d.sources.get(f), f"{d.name}: no source for {f}"


def test_vela_default_bandwidths() -> None:
    # Vela prints "Design peak SRAM bandwidth 29.80 GB/s, DRAM 11.18 GB/s" (GiB/s) for
    # ethos-u85-256 and 3.73 / 0.47 for ethos-u55-128 with its default system configs.
    u85, u55 = get_device("ethos-u85-256"), get_device("ethos-u55-128")
    assert round(u85.sram_bw_bytes_per_second / 2**30, 2) == 29.80
    assert round(u85.dram_bw_bytes_per_second / 2**30, 2) == 11.18
    assert round(u55.sram_bw_bytes_per_second / 2**30, 2) == 3.73
    assert round(u55.dram_bw_bytes_per_second / 2**30, 2) == 0.47


def test_unknown_device() -> None:
    with pytest.raises(TosaHardwareError, match="ethos-u85-256") as e:
        get_device("ethos-u99-7")
    assert isinstance(e.value, TosaError)
    assert get_device("ETHOS_U85_256").name == "ethos-u85-256"


def _conv(rescale: bool, in_dtype: str = "INT8", dynamic_weights: bool = False,
          weights_via: str | None = None) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 4), in_dtype)
    if dynamic_weights:
        w = b.input("w", (4, 1, 1, 4), "INT8")
    elif weights_via == "reshape":  # TFLite's and ExecuTorch's fully connected weights
        w = b.const([[1, -2, 3, 1]] * 4, "INT8")
        w = b.op("RESHAPE", [w, b.const([4, 1, 1, 4], "SHAPE")], (4, 1, 1, 4), "INT8")
    elif weights_via == "identity":
        w = b.op("IDENTITY", [b.const([[[[1, -2, 3, 1]]]] * 4, "INT8")], (4, 1, 1, 4), "INT8")
    elif weights_via == "transpose":
        w = b.op("TRANSPOSE", [b.const([[1, -2, 3, 1]] * 4, "INT8")], (4, 4), "INT8",
                 perms=(1, 0))
        w = b.op("RESHAPE", [w, b.const([4, 1, 1, 4], "SHAPE")], (4, 1, 1, 4), "INT8")
    else:
        w = b.const([[[[1, -2, 3, 1]]]] * 4, "INT8")
    acc, wide = ("INT48", "INT48") if in_dtype == "INT16" else ("INT32", "INT32")
    bias = b.const([0, 1, 2, 3], wide)
    izp, wzp = b.const([0], in_dtype), b.const([0], "INT8")
    y = b.op("CONV2D", [x, w, bias, izp, wzp], (1, 8, 8, 4), wide, pad=(0, 0, 0, 0),
             stride=(1, 1), dilation=(1, 1), acc_type=acc, local_bound=False)
    if rescale:
        scale32 = wide == "INT32"  # TOSA: no 32-bit multiplier for an INT48 input
        m = b.const([1 << 30] if scale32 else [1 << 14], "INT32" if scale32 else "INT16")
        s, zi, zo = b.const([35], "INT8"), b.const([0], wide), b.const([0], "INT8")
        y = b.op("RESCALE", [y, m, s, zi, zo], (1, 8, 8, 4), "INT8", scale32=scale32,
                 rounding_mode="SINGLE_ROUND", per_channel=False, input_unsigned=False,
                 output_unsigned=False)
    return b.build([y])


def _unary(op: str, dtype: str, shape: tuple[int, ...] = (1, 4, 4, 8), **attrs: object) -> Graph:
    b = GraphBuilder()
    x = b.input("x", shape, dtype)
    return b.build([b.op(op, [x], shape, dtype, **attrs)])


def _binary(op: str, dtype: str, out: str) -> Graph:
    b = GraphBuilder()
    x, y = b.input("x", (1, 4, 4, 8), dtype), b.input("y", (1, 4, 4, 8), dtype)
    return b.build([b.op(op, [x, y], (1, 4, 4, 8), out)])


def _avg_pool(kernel: tuple[int, int], pad: tuple[int, int, int, int]) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 16, 16, 4), "INT8")
    zi, zo = b.const([0], "INT8"), b.const([0], "INT8")
    oh = 16 + pad[0] + pad[1] - kernel[0] + 1
    ow = 16 + pad[2] + pad[3] - kernel[1] + 1
    y = b.op("AVG_POOL2D", [x, zi, zo], (1, oh, ow, 4), "INT8", kernel=kernel, stride=(1, 1),
             pad=pad, acc_type="INT32")
    return b.build([y])


def _conv3d_dynamic(kd: int) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 6, 6, 2), "INT8")
    w = b.input("w", (3, kd, 1, 1, 2), "INT8")
    bias = b.const([0, 0, 0], "INT32")
    zi, zw = b.const([0], "INT8"), b.const([0], "INT8")
    y = b.op("CONV3D", [x, w, bias, zi, zw], (1, 5 - kd, 6, 6, 3), "INT32",
             pad=(0, 0, 0, 0, 0, 0), stride=(1, 1, 1), dilation=(1, 1, 1), acc_type="INT32",
             local_bound=False)
    return b.build([y])


def _argmax(dtype: str) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 4, 8), dtype)
    return b.build([b.op("ARGMAX", [x], (1, 4, 4), "INT32", axis=3, nan_mode="PROPAGATE")])


def _first_op(g: Graph) -> int:
    return next(k for k, o in enumerate(g.main.operators) if o.op not in ("CONST", "CONST_SHAPE"))


# (graph, accelerator, expected "runs on NPU"): each checked against our rules and against Vela.
CASES = [
    ("conv_i8_no_rescale", lambda: _conv(False), "ethos-u55-128", True),
    ("conv_i8_dyn_weights", lambda: _conv(False, dynamic_weights=True), "ethos-u55-128", False),
    ("conv_i8_dyn_weights", lambda: _conv(False, dynamic_weights=True), "ethos-u85-256", True),
    ("conv_i8_rescale", lambda: _conv(True), "ethos-u65-256", True),
    ("bitwise_and_i32", lambda: _binary("BITWISE_AND", "INT32", "INT32"), "ethos-u55-128", False),
    ("bitwise_and_i32", lambda: _binary("BITWISE_AND", "INT32", "INT32"), "ethos-u85-256", True),
    ("clz_i32", lambda: _unary("CLZ", "INT32"), "ethos-u55-128", True),
    ("reverse_c_rank3", lambda: _unary("REVERSE", "INT8", (4, 5, 6), axis=2), "ethos-u55-128",
     False),
    ("reverse_h_i32", lambda: _unary("REVERSE", "INT32", (4, 5, 6), axis=1), "ethos-u55-128",
     True),
    ("argmax_i8", lambda: _argmax("INT8"), "ethos-u55-128", True),
    ("argmax_i16", lambda: _argmax("INT16"), "ethos-u55-128", False),
    ("avgpool_9x9_pad", lambda: _avg_pool((9, 9), (1, 1, 1, 1)), "ethos-u55-128", False),
    ("avgpool_3x3_pad", lambda: _avg_pool((3, 3), (1, 1, 1, 1)), "ethos-u55-128", True),
    ("conv3d_dyn_kd1", lambda: _conv3d_dynamic(1), "ethos-u85-256", True),
    ("conv3d_dyn_kd2", lambda: _conv3d_dynamic(2), "ethos-u85-256", False),
]


@pytest.mark.parametrize("name,make,acc,expected", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_support_rules(name: str, make, acc: str, expected: bool) -> None:
    g = make()
    k = _first_op(g)
    reasons = unsupported_reasons(get_device(acc), g, g.main, g.main.operators[k])
    assert (reasons == []) == expected, reasons
    assert all(isinstance(r, str) and r for r in reasons)
    # The CPU runs everything.
    assert unsupported_reasons(get_device("cpu"), g, g.main, g.main.operators[k]) == []


@needs_vela
@pytest.mark.parametrize("name,make,acc,expected", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_support_rules_match_vela(name: str, make, acc: str, expected: bool) -> None:
    g = make()
    v = vela_verdict(write(g), acc)
    assert v.on_npu[_first_op(g)] is expected, (v.error, v.vela_ops)


@pytest.mark.parametrize("acc", ["ethos-u55-128", "ethos-u85-256"])
def test_int16_conv_rescale_pair(acc: str) -> None:
    """An int16 CONV2D (int48 result) followed by RESCALE: both run on the NPU (Vela fuses the
    pair); the convolution alone does not on U55."""
    g = _conv(True, "INT16")
    dev = get_device(acc)
    ops = [k for k, o in enumerate(g.main.operators) if o.op != "CONST"]
    assert [unsupported_reasons(dev, g, g.main, g.main.operators[k]) for k in ops] == [[], []]
    if vela_available():
        v = vela_verdict(write(g), acc)
        assert [v.on_npu[k] for k in ops] == [True, True], v.error
    g = _conv(False, "INT16")
    k = _first_op(g)
    refused = bool(unsupported_reasons(dev, g, g.main, g.main.operators[k]))
    assert refused == (acc != "ethos-u85-256")


def test_mali_class() -> None:
    mali = get_device("mali-g710")
    g = _unary("ABS", "FP32")
    assert unsupported_reasons(mali, g, g.main, g.main.operators[0]) == []
    # Ethos-U NPUs run PRO-INT only.
    g = _unary("ABS", "FP32")
    assert unsupported_reasons(get_device("ethos-u85-256"), g, g.main, g.main.operators[0])


def _negate_int8(zp_input: bool) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 4, 8), "INT8")
    zp = b.input("zp", (1,), "INT8") if zp_input else b.const([3], "INT8")
    y = b.op("NEGATE", [x, zp, b.const([0], "INT8")], (1, 4, 4, 8), "INT8")
    return b.build([y])


@pytest.mark.parametrize("name,make", [
    ("abs_bf16", lambda: _unary("ABS", "BF16")), ("abs_fp32", lambda: _unary("ABS", "FP32")),
    ("negate_const_zp", lambda: _negate_int8(False)),
    ("negate_dynamic_zp", lambda: _negate_int8(True))])
def test_mali_rules_follow_model_converter(name: str, make, tmp_path) -> None:
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / "model-converter"
    exe = str(beside) if beside.exists() else shutil.which("model-converter")
    if exe is None:
        pytest.skip("model-converter (pip install ai-ml-sdk-model-converter==0.11.0) absent")
    g = make()
    (tmp_path / "g.tosa").write_bytes(write(g))
    proc = subprocess.run([exe, "-i", str(tmp_path / "g.tosa"), "-o", str(tmp_path / "g.vgf")],
                          capture_output=True, text=True, timeout=120)
    ours = not unsupported_reasons(get_device("mali-g710"), g, g.main, g.main.operators[-1])
    assert ours == (proc.returncode == 0), (proc.stdout[-800:], proc.stderr[-800:])


@pytest.mark.parametrize("via,acc,expected", [
    ("reshape", "ethos-u55-128", True), ("reshape", "ethos-u85-256", True),
    ("identity", "ethos-u55-128", True), ("transpose", "ethos-u55-128", False),
    ("transpose", "ethos-u85-256", True)])
def test_weights_through_reshape(via: str, acc: str, expected: bool) -> None:
    """Weights written as RESHAPE(CONST) or IDENTITY(CONST) are constant to Vela (it folds
    them; TRANSPOSE(CONST) it does not fold, so an Ethos-U55 refuses the convolution): our rule
    agrees, and with Vela (oracle) on the same graph."""
    from tosa_jax.hw_models import partition

    g = _conv(True, weights_via=via)
    k = next(i for i, o in enumerate(g.main.operators) if o.op == "CONV2D")
    reasons = unsupported_reasons(get_device(acc), g, g.main, g.main.operators[k])
    assert (reasons == []) == expected, reasons
    pg = partition(g, acc)
    (dev,) = [p.device for p in pg.partitions if k in p.op_indices]
    assert (dev == acc) == expected
    if vela_available():
        assert vela_verdict(write(g), acc).on_npu[k] is expected
        if expected:  # the NPU partition we write (constants and the folded RESHAPE copied in)
            (p,) = [p for p in pg.partitions if p.device == acc]
            v = vela_verdict(write(p.graph), acc)
            assert v.compiled and all(x is not False for x in v.on_npu.values()), v.error
