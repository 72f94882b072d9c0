"""Float graphs on the quick tier (tosa_jax.float_tier): only where the quick executable's float
bits are provably the optimized executable's, and then they are, bit for bit.

The conformance slice checks the same on every FP32 test the rule accepts
(tosa_jax.testing.conformance_sut: a quick-tier float answer is compared with the optimized
executable's)."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tosa_jax
from tosa_jax import float_tier, serialization
from tosa_jax.ir import GraphBuilder

RNG = np.random.default_rng(11)
C = 64  # channels: XLA hands the mean's sum to YNNPACK from 4,096 elements (8 x 8 x 64)


@pytest.fixture(autouse=True)
def _xla_executables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls run XLA's executables: no numpy program, tiering on whatever the environment;
    small graphs are tried too (float_tier.MIN_MACS: the rule is the same)."""
    monkeypatch.setenv("TOSA_JAX_NPEXEC", "0")
    monkeypatch.setenv("TOSA_JAX_TIERED", "1")
    monkeypatch.setattr(float_tier, "MIN_MACS", 0)


def _cnn(multiply_add: bool = False, dtype: str = "FP32", head: str = "MUL") -> bytes:
    """A small FP32 network of ResNet's operations: convolutions, CLAMP, a max pool, a residual
    ADD, a mean (REDUCE_SUM, then MUL by 1/n) and a MATMUL classifier. ``multiply_add``: then
    the logits scaled and shifted (MUL then ADD: one kernel); ``head``: the operator applied
    last, elementwise ("MUL": none more; "SIGMOID": a transcendental)."""
    b = GraphBuilder()
    x = b.input("x", (1, 16, 16, 8), dtype)
    zero = b.const([0], dtype)

    def conv(v: str, cin: int, cout: int, hw: int) -> str:
        w = (RNG.standard_normal((cout, 3, 3, cin)) / np.sqrt(9 * cin)).astype(np.float32)
        return b.op("CONV2D", [v, b.const(w, dtype), b.const(RNG.standard_normal(cout), dtype),
                               zero, zero], (1, hw, hw, cout), dtype, pad=(1, 1, 1, 1),
                    stride=(1, 1), dilation=(1, 1), acc_type="FP32", local_bound=False)

    def relu(v: str, shape: tuple[int, ...]) -> str:
        return b.op("CLAMP", [v], shape, dtype, min_val=np.float32(0),
                    max_val=np.float32(60000), nan_mode="PROPAGATE")

    y = relu(conv(x, 8, C, 16), (1, 16, 16, C))
    y = b.op("MAX_POOL2D", [y], (1, 8, 8, C), dtype, kernel=(2, 2), stride=(2, 2),
             pad=(0, 0, 0, 0), nan_mode="PROPAGATE")
    y = relu(b.op("ADD", [conv(y, C, C, 8), y], (1, 8, 8, C), dtype), (1, 8, 8, C))
    y = b.op("REDUCE_SUM", [y], (1, 1, 8, C), dtype, axis=1)
    y = b.op("REDUCE_SUM", [y], (1, 1, 1, C), dtype, axis=2)
    y = b.op("MUL", [y, b.const(np.full((1, 1, 1, 1), 1 / 64), dtype), b.const([0], "INT8")],
             (1, 1, 1, C), dtype)
    y = b.op("RESHAPE", [y, b.const([1, 1, C], "SHAPE")], (1, 1, C), dtype)
    w = b.const((RNG.standard_normal((1, C, 1024)) / 4).astype(np.float32), dtype)
    y = b.op("MATMUL", [y, w, zero, zero], (1, 1, 1024), dtype)
    if multiply_add:  # the logits scaled and shifted
        s = b.const(RNG.standard_normal((1, 1, 1024)).astype(np.float32), dtype)
        y = b.op("MUL", [y, s, b.const([0], "INT8")], (1, 1, 1024), dtype)
        y = b.op("ADD", [y, b.const(RNG.standard_normal((1, 1, 1024)), dtype)],
                 (1, 1, 1024), dtype)
    if head == "SIGMOID":
        y = b.op("SIGMOID", [y], (1, 1, 1024), dtype)
    return serialization.write(b.build([y]))


def _near_reference(reference, data: bytes, model: tosa_jax.Model, x: np.ndarray,
                    got: np.ndarray) -> None:
    """``got`` within 1e-5 of the largest output of the reference model's answer (the twelve
    random networks' first results differ from it by up to 4.4e-7 of that, 2026-11-29)."""
    (want,) = reference(data, {model.inputs[0].name: x}, [model.outputs[0].name]).values()
    assert got.shape == want.shape
    assert np.abs(got.astype(np.float64) - want).max() <= 1e-5 * np.abs(want).max()


def _join_optimizers() -> None:
    for t in threading.enumerate():
        if t.name == "tosa_jax-optimize":
            t.join()


def _x(dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal((1, 16, 16, 8)).astype(dtype)


def test_candidates_are_fp32_convolution_graphs_of_exact_operations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert tosa_jax.load(_cnn(), cache=False).float_tier
    assert tosa_jax.load(_cnn(multiply_add=True), cache=False).float_tier
    assert not tosa_jax.load(_cnn(head="SIGMOID"), cache=False).float_tier
    assert not tosa_jax.load(_cnn(dtype="FP16"), cache=False).float_tier
    b = GraphBuilder()  # no convolution: XLA's own options, not model.xla_options'
    x = b.input("x", (4, 8), "FP32")
    y = b.op("ADD", [x, x], (4, 8), "FP32")
    assert not float_tier.candidate(b.build([y]), float_tier.MIN_MACS, [])
    monkeypatch.setattr(float_tier, "MIN_MACS", 10_000_000)  # the default: this one is small
    model = tosa_jax.load(_cnn(), cache=False)
    assert model.float_macs < float_tier.MIN_MACS and not model.float_tier and not model.tiered


def test_quick_tier_of_a_float_graph_gives_the_optimized_bits(reference) -> None:
    """Tiered: the first call on the quick executable, the upgrade after the second; every
    result the same bits, and within FP32 of the reference model's."""
    data = _cnn()
    model = tosa_jax.load(data, cache=False)
    assert model.tiered
    inputs = [_x() for _ in range(4)]
    quick = [np.asarray(model(inputs[0]))]
    assert [s.tier for s in model._executables.values()] == [0]
    quick += [np.asarray(model(x)) for x in inputs[1:]]  # (the second starts the upgrade)
    _join_optimizers()
    assert [s.tier for s in model._executables.values()] == [1]
    for x, q in zip(inputs, quick, strict=True):
        assert np.asarray(model(x)).tobytes() == q.tobytes()
    (want,) = reference(data, {"x": inputs[0]}, [model.outputs[0].name]).values()
    np.testing.assert_allclose(quick[0], want, rtol=1e-4, atol=1e-4)


def test_a_multiply_add_kernel_keeps_the_optimized_tier() -> None:
    """A multiply and an add in one of XLA's kernels: LLVM's optimizer contracts them, so the
    quick executable is not used; the first call gets the optimized one."""
    model = tosa_jax.load(_cnn(multiply_add=True), cache=False)
    assert model.tiered  # a candidate, until its quick executable's HLO says otherwise
    model(_x())
    assert not model.tiered
    assert [s.tier for s in model._executables.values()] == [1]


def test_non_candidates_never_compile_a_quick_executable() -> None:
    model = tosa_jax.load(_cnn(head="SIGMOID"), cache=False)
    assert not model.tiered
    model(_x())
    assert [s.tier for s in model._executables.values()] == [1]


@pytest.mark.parametrize(("fn", "why"), [
    (lambda x: x * 2.0 + 1.0, "multiply and an add"),
    (lambda x: jnp.sum(x, axis=1), "float sum"),
    (lambda x: jnp.sum(x * x, axis=0), "float sum"),
    (lambda x: jnp.prod(x, axis=1), "float sum or product"),
    (lambda x: jnp.exp(x), "exponential"),
    (lambda x: jnp.tanh(x) + x, "tanh"),
    (lambda x: (x * 3.0).astype(jnp.float16), "f16"),
])
def test_inexact_names_what_may_differ(fn, why: str) -> None:
    x = jnp.ones((64, 64), jnp.float32)
    xla_sums = {"xla_cpu_experimental_ynn_fusion_type": ""}  # (not YNNPACK's)
    assert why in (float_tier.inexact(jax.jit(fn).lower(x).compile(xla_sums).as_text()) or "")


@pytest.mark.parametrize("fn", [
    lambda x: jnp.maximum(x, 0.0) + 1.0,
    lambda x: jnp.clip(x, 0.0, 6.0) / 7.0,
    lambda x: x * 0.5,
    lambda x: jnp.max(jnp.abs(x - 3.0), axis=0),
    lambda x: jnp.argmax(x, axis=1),
])
def test_exact_kernels_pass(fn) -> None:
    x = jnp.ones((64, 64), jnp.float32)
    assert float_tier.inexact(jax.jit(fn).lower(x).compile().as_text()) is None


def _random_cnn(seed: int) -> bytes:
    """A random FP32 CNN of the candidate operators: a stem convolution, 2-5 blocks (plain,
    strided and residual convolutions, max and average pools), a mean (REDUCE_SUM, MUL) and a
    classifier (a 1x1 CONV2D or a MATMUL) of 10-1000 classes."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    hw, c = int(rng.choice([16, 24, 32])), int(rng.choice([3, 8, 16]))
    x = b.input("x", (1, hw, hw, c), "FP32")
    zero = b.const([0], "FP32")

    def conv(v: str, cout: int, k: int = 3, stride: int = 1, act: bool = True) -> str:
        nonlocal hw, c
        p = k // 2
        q = p - (hw - 1 + 2 * p - (k - 1)) % stride  # bottom/right: an exact division
        out = (hw - 1 + p + q - (k - 1)) // stride + 1
        w = (rng.standard_normal((cout, k, k, c)) / np.sqrt(k * k * c)).astype(np.float32)
        y = b.op("CONV2D", [v, b.const(w, "FP32"), b.const(rng.standard_normal(cout), "FP32"),
                            zero, zero], (1, out, out, cout), "FP32", pad=(p, q, p, q),
                 stride=(stride, stride), dilation=(1, 1), acc_type="FP32", local_bound=False)
        hw, c = out, cout
        if act:
            y = b.op("CLAMP", [y], (1, hw, hw, c), "FP32", min_val=np.float32(0),
                     max_val=np.float32(6), nan_mode="PROPAGATE")
        return y

    x = conv(x, int(rng.choice([16, 32, 64])), int(rng.choice([3, 5, 7])), stride=2)
    for _ in range(int(rng.integers(2, 6))):
        kind = str(rng.choice(["conv", "strided", "residual", "maxpool", "avgpool"]))
        if kind in ("strided", "maxpool", "avgpool") and (hw < 4 or hw % 2):
            kind = "conv"
        if kind == "conv":
            x = conv(x, int(min(256, c * rng.choice([1, 2]))), int(rng.choice([1, 3])))
        elif kind == "strided":
            x = conv(x, int(min(256, c * 2)), 3, stride=2)
        elif kind == "residual":
            y = conv(conv(x, c), c, act=False)
            x = b.op("ADD", [x, y], (1, hw, hw, c), "FP32")
        else:
            hw //= 2
            x = (b.op("MAX_POOL2D", [x], (1, hw, hw, c), "FP32", kernel=(2, 2), stride=(2, 2),
                      pad=(0, 0, 0, 0), nan_mode="PROPAGATE") if kind == "maxpool" else
                 b.op("AVG_POOL2D", [x, zero, zero], (1, hw, hw, c), "FP32", kernel=(2, 2),
                      stride=(2, 2), pad=(0, 0, 0, 0), acc_type="FP32"))
    x = b.op("REDUCE_SUM", [x], (1, 1, hw, c), "FP32", axis=1)
    x = b.op("REDUCE_SUM", [x], (1, 1, 1, c), "FP32", axis=2)
    x = b.op("MUL", [x, b.const(np.full((1, 1, 1, 1), 1 / hw ** 2), "FP32"),
                     b.const([0], "INT8")], (1, 1, 1, c), "FP32")
    classes = int(rng.choice([10, 100, 1000]))
    if rng.integers(2):
        hw = 1
        x = conv(x, classes, 1, act=False)
    else:
        x = b.op("RESHAPE", [x, b.const([1, 1, c], "SHAPE")], (1, 1, c), "FP32")
        w = (rng.standard_normal((1, c, classes)) / np.sqrt(c)).astype(np.float32)
        x = b.op("MATMUL", [x, b.const(w, "FP32"), zero, zero], (1, 1, classes), "FP32")
    return serialization.write(b.build([x]))


def test_random_float_cnns_answer_alike_on_both_tiers(reference) -> None:
    """Whatever XLA makes of a network, a float graph answered by its quick tier gets the
    optimized tier's bits (inputs of a wide range: a multiply-add contracted by one tier only
    would show); those it cannot prove get the optimized tier at once. Either way the first
    answer is the reference model's, within FP32."""
    tiered = 0
    for seed in range(12):
        data = _random_cnn(seed)
        model = tosa_jax.load(data, cache=False)
        assert model.float_tier and model.tiered
        rng = np.random.default_rng(seed)
        inputs = [(rng.standard_normal(model.inputs[0].shape) * 100).astype(np.float32)
                  for _ in range(2)]
        first = np.asarray(model(inputs[0]))
        _near_reference(reference, data, model, inputs[0], first)
        (slot,) = model._executables.values()
        if slot.tier == 1:
            continue  # not proven: the optimized executable answered
        tiered += 1
        model.compile(inputs[0])  # the optimized executable, now in use
        assert [s.tier for s in model._executables.values()] == [1]
        assert np.asarray(model(inputs[0])).tobytes() == first.tobytes()
    assert tiered >= 2  # (not vacuous: 2 of these 12 on jax 0.10.2)


@pytest.mark.parametrize("pool", ["AVG_POOL2D", "REDUCE_SUM"])
def test_a_resnet_tail_starts_on_the_quick_tier(monkeypatch: pytest.MonkeyPatch,
                                                pool: str, reference) -> None:
    """At the default size rule: a ResNet's last stage as exporters write it (a 3x3 convolution,
    ReLU, a global average pool, as one AVG_POOL2D or as REDUCE_SUMs and a MUL, and a 1x1
    convolution of 1,000 classes; 58 M multiply-adds) answers from its quick tier, with the
    optimized tier's bits, and within FP32 of the reference model's."""
    monkeypatch.setattr(float_tier, "MIN_MACS", 10_000_000)
    rng = np.random.default_rng(7)
    b = GraphBuilder()
    zero = b.const([0], "FP32")

    def conv(v: str, w: np.ndarray, out: tuple[int, ...], pad: int) -> str:
        return b.op("CONV2D", [v, b.const(w, "FP32"), b.const(rng.standard_normal(out[-1]),
                                                              "FP32"), zero, zero],
                    out, "FP32", pad=(pad,) * 4, stride=(1, 1), dilation=(1, 1),
                    acc_type="FP32", local_bound=False)

    x = b.input("x", (1, 7, 7, 256), "FP32")
    y = conv(x, (rng.standard_normal((512, 3, 3, 256)) / 48).astype(np.float32),
             (1, 7, 7, 512), 1)
    y = b.op("CLAMP", [y], (1, 7, 7, 512), "FP32", min_val=np.float32(0),
             max_val=np.float32(3e38), nan_mode="PROPAGATE")
    if pool == "AVG_POOL2D":
        y = b.op("AVG_POOL2D", [y, zero, zero], (1, 1, 1, 512), "FP32", kernel=(7, 7),
                 stride=(1, 1), pad=(0, 0, 0, 0), acc_type="FP32")
    else:
        y = b.op("REDUCE_SUM", [y], (1, 1, 7, 512), "FP32", axis=1)
        y = b.op("REDUCE_SUM", [y], (1, 1, 1, 512), "FP32", axis=2)
        y = b.op("MUL", [y, b.const(np.full((1, 1, 1, 1), 1 / 49), "FP32"),
                         b.const([0], "INT8")], (1, 1, 1, 512), "FP32")
    y = conv(y, (rng.standard_normal((1000, 1, 1, 512)) / 20).astype(np.float32),
             (1, 1, 1, 1000), 0)
    data = serialization.write(b.build([y]))
    model = tosa_jax.load(data, cache=False)
    assert model.float_macs >= float_tier.MIN_MACS and model.tiered
    x = (rng.standard_normal((1, 7, 7, 256)) * 10).astype(np.float32)
    quick = np.asarray(model(x))
    assert [s.tier for s in model._executables.values()] == [0]
    _near_reference(reference, data, model, x, quick)
    model.compile(x)
    assert [s.tier for s in model._executables.values()] == [1]
    assert np.asarray(model(x)).tobytes() == quick.tobytes()
