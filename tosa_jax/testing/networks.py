"""Small INT8 networks built in code, for the partitioning tests and bench/vela_cycles.py: the
layer patterns the ExecuTorch exporter emits (CONV2D/DEPTHWISE_CONV2D + RESCALE + CLAMP/TABLE,
int8 ADD through int32 RESCALEs, pools, MATMUL), at shapes unlike the fixtures', and one with an
operator the Ethos-U55 refuses (an int32 BITWISE_AND) so that the graph splits across devices.
"""

from __future__ import annotations

import numpy as np

from tosa_jax.ir import Graph, GraphBuilder


class Net:
    """A GraphBuilder with the exporter's int8 layer patterns; tensors tracked with shapes."""

    def __init__(self, seed: int) -> None:
        self.b = GraphBuilder()
        self.rng = np.random.default_rng(seed)
        self.shape: dict[str, tuple[int, ...]] = {}

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.shape[name] = shape
        return self.b.input(name, shape, "INT8")

    def _op(self, op: str, ins: list[str], shape: tuple[int, ...], dtype: str, **a) -> str:
        out = self.b.op(op, ins, shape, dtype, **a)
        self.shape[out] = shape
        return out

    @staticmethod
    def shift(spread: float) -> int:
        """The RESCALE shift (multiplier ~2^29.5) that brings values of this spread to ~40."""
        return int(round(30.5 + np.log2(spread / 40)))

    def rescale(self, x: str, out: str = "INT8", shift: int = 38, inp: str = "INT32",
                per_channel: bool = False, mult: int | None = None) -> str:
        """As the exporter writes them: multipliers in [2^30, 2^31), 32-bit scaling."""
        b = self.b
        k = self.shape[x][-1] if per_channel else 1
        mults = self.rng.integers(1 << 30, (1 << 31) - 1, (k,)) if mult is None else [mult]
        return self._op("RESCALE", [x, b.const(mults, "INT32"), b.const([shift] * k, "INT8"),
                                    b.const([0], inp), b.const([0], out)],
                        self.shape[x], out, scale32=True, rounding_mode="SINGLE_ROUND",
                        per_channel=per_channel, input_unsigned=False, output_unsigned=False)

    def clamp(self, x: str) -> str:
        return self._op("CLAMP", [x], self.shape[x], "INT8", min_val=np.int8(0),
                        max_val=np.int8(127), nan_mode="PROPAGATE")

    def table(self, x: str) -> str:
        values = np.clip(np.arange(-128, 128) // 2 + 10, -128, 127)
        return self._op("TABLE", [x, self.b.const(values, "INT8")], self.shape[x], "INT8")

    def conv(self, x: str, oc: int, k: int = 3, stride: int = 1, depthwise: bool = False,
             act: str = "clamp") -> str:
        b = self.b
        n, h, w, c = self.shape[x]
        p = k // 2
        q = p - (h - 1 + 2 * p - (k - 1)) % stride  # bottom/right pad: exact division
        oh, ow = (h - 1 + p + q - (k - 1)) // stride + 1, (w - 1 + p + q - (k - 1)) // stride + 1
        if depthwise:
            wt = self.rng.integers(-40, 40, (k, k, c, 1))
            oc = c
        else:
            wt = self.rng.integers(-20, 20, (oc, k, k, c))
        ins = [x, b.const(wt, "INT8"), b.const(self.rng.integers(-500, 500, (oc,)), "INT32"),
               b.const([0], "INT8"), b.const([0], "INT8")]
        y = self._op("DEPTHWISE_CONV2D" if depthwise else "CONV2D", ins, (n, oh, ow, oc),
                     "INT32", pad=(p, q, p, q), stride=(stride, stride), dilation=(1, 1),
                     acc_type="INT32", local_bound=False)
        fan_in = k * k * (1 if depthwise else c)
        y = self.rescale(y, shift=self.shift(np.sqrt(fan_in) * 50 * wt.std()),
                         per_channel=True)
        return self.clamp(y) if act == "clamp" else self.table(y) if act == "table" else y

    def add(self, x: str, y: str) -> str:
        """The exporter's int8 ADD: both inputs up to int32 with 20 bits of headroom (the
        first by exactly 2^19), added, and scaled back down: a pattern Vela fuses into one
        NPU Add."""
        a = self.rescale(x, "INT32", shift=11, inp="INT8", mult=1 << 30)
        c = self.rescale(y, "INT32", shift=12, inp="INT8")
        s = self._op("ADD", [a, c], self.shape[x], "INT32")
        return self.rescale(s, shift=50)

    def global_pool(self, x: str) -> str:
        n, h, w, c = self.shape[x]
        b = self.b
        return self._op("AVG_POOL2D", [x, b.const([0], "INT8"), b.const([0], "INT8")],
                        (n, 1, 1, c), "INT8", kernel=(h, w), stride=(1, 1),
                        pad=(0, 0, 0, 0), acc_type="INT32")

    def max_pool(self, x: str, k: int) -> str:
        n, h, w, c = self.shape[x]
        return self._op("MAX_POOL2D", [x], (n, h // k, w // k, c), "INT8", kernel=(k, k),
                        stride=(k, k), pad=(0, 0, 0, 0), nan_mode="PROPAGATE")

    def bitwise_and(self, x: str) -> str:
        """int8 -> int32, AND with a mask, back to int8: the Ethos-U55 has no int32 AND."""
        wide = self.rescale(x, "INT32", shift=30, inp="INT8")
        mask = self.b.const(np.full((1,) * len(self.shape[x]), 0x7FFFFFF0), "INT32")
        y = self._op("BITWISE_AND", [wide, mask], self.shape[x], "INT32")
        return self.rescale(y, shift=31)

    def matmul(self, x: str, y: str) -> str:
        n, h, c = self.shape[x]
        w = self.shape[y][2]
        b = self.b
        m = self._op("MATMUL", [x, y, b.const([0], "INT8"), b.const([0], "INT8")], (n, h, w),
                     "INT32")
        return self.rescale(m, shift=self.shift(np.sqrt(c) * 50 * 50))

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        return self._op("RESHAPE", [x, self.b.const(list(shape), "SHAPE")], shape, "INT8")

    def build(self, outputs: list[str]) -> Graph:
        return self.b.build(outputs)


def convnet(seed: int = 1) -> Graph:
    """Conv 3x3 s2 -> depthwise 3x3 -> conv 1x1 -> residual add -> conv 3x3 -> pools."""
    n = Net(seed)
    x = n.input("x", (1, 24, 24, 8))
    a = n.conv(x, 24, 3, stride=2)
    d = n.conv(a, 0, 3, depthwise=True, act="table")
    c = n.conv(d, 24, 1)
    r = n.add(a, c)
    e = n.conv(r, 48, 3)
    p = n.max_pool(e, 2)
    q = n.global_pool(p)
    return n.build([q])


def widenet(seed: int = 2) -> Graph:
    """Wider, shallower: conv 3x3 64 channels at 16x16, 1x1 down, add, average pool."""
    n = Net(seed)
    x = n.input("x", (1, 16, 16, 16))
    a = n.conv(x, 64, 3, act="table")
    b = n.conv(a, 16, 1)
    c = n.add(x, b)
    d = n.conv(c, 32, 3, stride=2)
    return n.build([n.global_pool(d)])


def attention(seed: int = 3) -> Graph:
    """Two int8 MATMULs with a 1x1 conv projection, as in a small attention block."""
    n = Net(seed)
    x = n.input("x", (1, 8, 32))
    q = n.reshape(x, (8, 1, 1, 32))
    p = n.conv(q, 32, 1, act="none")
    p = n.reshape(p, (1, 8, 32))
    kt = n.input("kt", (1, 32, 12))
    s = n.matmul(p, kt)
    v = n.input("v", (1, 12, 16))
    return n.build([n.matmul(s, v)])


def mixed(seed: int = 4) -> Graph:
    """convnet-like, with an int32 BITWISE_AND in the middle (CPU on the Ethos-U55)."""
    n = Net(seed)
    x = n.input("x", (1, 16, 16, 8))
    a = n.conv(x, 16, 3)
    m = n.bitwise_and(a)
    c = n.conv(m, 16, 1)
    r = n.add(a, c)
    return n.build([n.global_pool(n.conv(r, 16, 3, stride=2))])


NETWORKS = {"syn_convnet": convnet, "syn_widenet": widenet, "syn_attention": attention,
            "syn_mixed": mixed}


def example_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.integers(-128, 128, graph.main.tensors[n].shape).astype(np.int8)
            for n in graph.main.inputs}


# -- held-out networks -------------------------------------------------------------------------
# Random but valid compositions of the layer patterns ExecuTorch's TOSA backend emits, at
# realistic shapes: nobody fitted anything to these (bench/vela_cycles.py --held-out N).


def _mul(n: Net, x: str, y: str) -> str:
    """The exporter's int8 MUL: both inputs to int32, MUL (shift 0), scaled back down."""
    a = n.rescale(x, "INT32", shift=30, inp="INT8", mult=1 << 30)
    c = n.rescale(y, "INT32", shift=30, inp="INT8", mult=1 << 30)
    m = n._op("MUL", [a, c, n.b.const([0], "INT8")], n.shape[x], "INT32")
    return n.rescale(m, shift=37)


def _avg_pool(n: Net, x: str, k: int) -> str:
    b, h, w, c = n.shape[x]
    return n._op("AVG_POOL2D", [x, n.b.const([0], "INT8"), n.b.const([0], "INT8")],
                 (b, h // k, w // k, c), "INT8", kernel=(k, k), stride=(k, k),
                 pad=(0, 0, 0, 0), acc_type="INT32")


def _attention(n: Net, x: str, rng: np.random.Generator) -> str:
    """Self-attention over the pixels: q k^T -> TABLE -> (.) v, as int8 MATMULs."""
    b, h, w, c = n.shape[x]
    q = n.reshape(n.conv(x, c, 1, act="none"), (1, h * w, c))
    k = n.reshape(n.conv(x, c, 1, act="none"), (1, h * w, c))
    kt = n._op("TRANSPOSE", [k], (1, c, h * w), "INT8", perms=(0, 2, 1))
    s = n.table(n.matmul(q, kt))
    v = n.reshape(n.conv(x, c, 1, act="none"), (1, h * w, c))
    o = n.reshape(n.matmul(s, v), (b, h, w, c))
    return n.add(x, o)


def random_network(seed: int, blocks: int | None = None) -> Graph:
    """A random INT8 network: a stem convolution, then ``blocks`` (default 3-9) blocks drawn
    from plain/strided convolutions, depthwise-separable and inverted-residual blocks, residual
    blocks, max/average pools, gated (MUL) branches, TABLE activations and pixel attention;
    then global average pooling and a 1x1 classifier. Shapes: 16-96 px inputs, 3-64 input
    channels, 8-256 channels inside."""
    rng = np.random.default_rng(seed)
    n = Net(seed)
    hw = int(rng.choice([16, 24, 32, 48, 56, 64, 96]))
    x = n.input("x", (1, hw, hw, int(rng.choice([3, 4, 8, 16, 32, 64]))))
    x = n.conv(x, int(rng.choice([8, 16, 24, 32])), int(rng.choice([3, 5])),
               stride=int(rng.choice([1, 2])), act=str(rng.choice(["clamp", "table"])))
    for _ in range(int(blocks if blocks is not None else rng.integers(3, 10))):
        _, h, w, c = n.shape[x]
        kinds = ["conv", "dwsep", "inverted", "residual", "gate"]
        if h >= 4:
            kinds += ["maxpool", "avgpool", "strided"]
        if h * w <= 256 and c <= 128:
            kinds += ["attention"]
        kind = str(rng.choice(kinds))
        act = str(rng.choice(["clamp", "clamp", "table", "none"]))
        wide = int(min(256, max(8, c * rng.choice([1, 1, 2]))))
        if kind == "conv":
            x = n.conv(x, wide, int(rng.choice([1, 3, 3, 5])), act=act)
        elif kind == "strided":
            x = n.conv(x, int(min(256, c * 2)), 3, stride=2, act=act)
        elif kind == "dwsep":
            d = n.conv(x, 0, 3, stride=int(rng.choice([1, 2])) if h >= 4 else 1,
                       depthwise=True, act=act)
            x = n.conv(d, wide, 1, act=act)
        elif kind == "inverted":
            e = n.conv(x, int(min(384, c * rng.choice([2, 4, 6]))), 1, act=act)
            d = n.conv(e, 0, 3, depthwise=True, act=act)
            x = n.add(x, n.conv(d, c, 1, act="none"))
        elif kind == "residual":
            a = n.conv(x, c, 3, act=act)
            x = n.add(x, n.conv(a, c, 3, act="none"))
        elif kind == "gate":
            g = n.conv(x, c, 1, act="table")
            x = _mul(n, x, g)
        elif kind == "maxpool":
            x = n.max_pool(x, 2)
        elif kind == "avgpool":
            x = _avg_pool(n, x, 2)
        else:
            x = _attention(n, x, rng)
    q = n.global_pool(x)
    return n.build([n.conv(q, int(rng.choice([10, 100, 1000])), 1, act="none")])


# An unrolled recurrence, as exporters write recurrent layers (tosa_jax.reroll rolls it back).
STEPS, WIDTH = 12, 8


def unrolled_rnn(steps: int = STEPS, seed: int = 0, ahead: bool = False,
                 leak: bool = False) -> GraphBuilder:
    """An int32 state c (from a constant c0: the loop's carried value starts as a constant,
    and varies per sample after the first step) accumulates each step's input projection;
    RESCALE and TABLE turn it into the step's output. ``ahead``: each step's slice of the
    input is taken at the end of the step before (as ExecuTorch orders its LSTMs), so that a
    step of the repeating operators does not begin where a time step does; and the weights'
    zero point is one constant, made where the first step uses it (as exporters share equal
    constants), so that only the first step has that CONST. ``leak``: each step first scales
    the state by 7/8 (MUL with a shift), which in the first step, from the constant c0, is a
    constant: that step folds more into constants than the others."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    x = b.input("x", (1, steps, WIDTH), "INT8")
    w_x = b.const(rng.integers(-128, 128, (1, WIDTH, WIDTH)), "INT8", "w_x")  # shared weights
    c = b.const(rng.integers(-5000, 5000, (1, 1, WIDTH)), "INT32", "c0")

    def take(t: int) -> str:
        return b.op("SLICE", [x, b.const([0, t, 0], "SHAPE"), b.const([1, 1, WIDTH], "SHAPE")],
                    (1, 1, WIDTH), "INT8")

    def output(c: str) -> tuple[str, str]:  # a step's RESCALE and TABLE of the state
        scaled = b.op("RESCALE", [
            c, b.const(rng.integers(1 << 30, (1 << 31) - 1, WIDTH), "INT32"),
            b.const(rng.integers(22, 28, WIDTH), "INT8"), b.const([0], "INT32"),
            b.const([int(rng.integers(-10, 10))], "INT8")], (1, 1, WIDTH), "INT8",
            scale32=True, rounding_mode="DOUBLE_ROUND", per_channel=True, input_unsigned=False,
            output_unsigned=False)
        return scaled, b.op("TABLE", [scaled, b.const(np.sort(rng.integers(-128, 128, 256)),
                                                      "INT8")], (1, 1, WIDTH), "INT8")

    # ahead: the same operators on the initial state first, so that the operators repeat
    # from the middle of a step on (the planner must find where steps begin)
    outputs = [output(c)[1]] if ahead else []
    values = []
    xt = take(0) if ahead else ""
    w_zp = ""
    for t in range(steps):
        if not ahead:
            xt = take(t)
        if not (ahead and w_zp):
            w_zp = b.const([0], "INT8")
        if leak:
            c = b.op("MUL", [c, b.const(np.full((1, 1, 1), 7), "INT32"), b.const([3], "INT8")],
                     (1, 1, WIDTH), "INT32")
        c = b.op("ADD", [c, b.op("MATMUL", [xt, w_x, b.const([int(rng.integers(-5, 5))], "INT8"),
                                            w_zp], (1, 1, WIDTH), "INT32")],
                 (1, 1, WIDTH), "INT32")
        values.append(output(c)[1])
        if ahead and t + 1 < steps:
            xt = take(t + 1)
    seq = b.op("CONCAT", values, (1, steps, WIDTH), "INT8", axis=1)
    b.block.outputs = [seq, c, *outputs]
    return b
