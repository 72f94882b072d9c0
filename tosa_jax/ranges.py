"""Value ranges of a block's integer tensors, proven before tracing: every element of tensor
``t`` lies in ``ranges[t] = (lo, hi)``.

Interval arithmetic on the IR, from the element types, the constants and what each operator
can compute: RESCALE is monotone in its value (non-negative multipliers), an int32 sum or
product whose interval fits int32 cannot wrap, a convolution's accumulator is bounded by the
sum of its weights' magnitudes times the largest input magnitude, data layout keeps values.
A tensor without an entry holds any value of its type (its inputs, variables, operators not
modelled here, and every interval that would leave int32). Used by the lowerings to choose
shorter exact arithmetic (RESCALE of an int32 accumulator: numerics.apply_scale_32).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tosa_jax.ir import INT_BITS, INT_RANGES, Block, Operator

Range = tuple[int, int]
I32 = INT_RANGES["INT32"]


def _fits(r: Range, dtype: str) -> bool:
    lo, hi = INT_RANGES[dtype]
    return lo <= r[0] and r[1] <= hi


def _const(block: Block, name: str) -> np.ndarray | None:
    data = block.tensors[name].data
    return None if data is None else np.asarray(data).astype(np.int64)


def _scalar(block: Block, name: str) -> int | None:
    data = _const(block, name)
    return None if data is None or data.size == 0 else int(data.reshape(-1)[0])


def _spec_scale(value: int, m: int, s: int, scale32: bool, double_round: bool) -> int:
    """apply_scale_32 / apply_scale_16 on Python integers, before the cast to int32."""
    rnd = 1 << (s - 1)
    if scale32 and double_round and s > 31:
        rnd += (1 << 30) if value >= 0 else -(1 << 30)
    return (value * m + rnd) >> s


def _rescale(block: Block, op: Operator, r: list[Range]) -> Range | None:
    a = op.attrs
    in_t, out_t = block.tensors[op.inputs[0]].dtype, block.tensors[op.outputs[0]].dtype
    m, s = _const(block, op.inputs[1]), _const(block, op.inputs[2])
    izp, ozp = _scalar(block, op.inputs[3]), _scalar(block, op.inputs[4])
    if (m is None or s is None or izp is None or ozp is None or a["output_unsigned"]
            or out_t not in INT_RANGES or m.size == 0):
        return None
    if a["scale32"]:
        m = m.astype(np.int32).astype(np.int64)
    else:
        m = m.astype(np.int16).astype(np.int64)
    s = s.astype(np.int8).astype(np.int64)
    if m.min() < 0 or s.min() < 2 or s.max() > 62:  # REQUIREs: leave such graphs alone
        return None
    if a["input_unsigned"]:
        mask = (1 << INT_BITS[in_t]) - 1
        lo, hi, izp = 0, mask, izp & mask
    else:
        lo, hi = r[0]
    dr = a["rounding_mode"] == "DOUBLE_ROUND"
    # monotone non-decreasing in the value: the extremes are at the ends, over every channel
    pairs = np.stack(np.broadcast_arrays(m.reshape(-1), s.reshape(-1)), axis=1)
    if max(abs(lo - izp), abs(hi - izp)) < 1 << 32:  # int64 is exact: |v m| < 2**63 - round
        v = np.array([[lo - izp], [hi - izp]], np.int64)
        rnd = np.left_shift(np.int64(1), pairs[:, 1] - 1)
        if a["scale32"] and dr:
            rnd = rnd + np.where(pairs[:, 1] > 31, np.where(v >= 0, 1 << 30, -(1 << 30)), 0)
        scaled = (v * pairs[:, 0] + rnd) >> pairs[:, 1]
        ends = [int(scaled.min()), int(scaled.max())]
    else:
        ends = [_spec_scale(v, int(mm), int(ss), a["scale32"], dr)
                for v in (lo - izp, hi - izp) for mm, ss in pairs]
    if not _fits((min(ends), max(ends)), "INT32"):  # static_cast<int32_t> would wrap
        return None
    out_lo, out_hi = INT_RANGES[out_t]
    return (min(max(min(ends) + ozp, out_lo), out_hi), max(min(max(ends) + ozp, out_hi), out_lo))


def _add(block: Block, op: Operator, r: list[Range]) -> Range:
    return (r[0][0] + r[1][0], r[0][1] + r[1][1])


def _sub(block: Block, op: Operator, r: list[Range]) -> Range:
    return (r[0][0] - r[1][1], r[0][1] - r[1][0])


def _products(a: Range, b: Range) -> Range:
    p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(p), max(p)


def _mul(block: Block, op: Operator, r: list[Range]) -> Range | None:
    shift = _scalar(block, op.inputs[2]) or 0
    lo, hi = _products(r[0], r[1])
    if shift <= 0:
        return lo, hi
    if shift > 62:
        return None
    # (a * b + (1 << (shift - 1))) >> shift: monotone in the product
    return (lo + (1 << (shift - 1))) >> shift, (hi + (1 << (shift - 1))) >> shift


def _accumulator(block: Block, op: Operator, r: list[Range], weight_taps: Callable[
        [np.ndarray, type], np.ndarray]) -> Range | None:
    """A convolution's int32 accumulator: sum of (x - x_zp)(w - w_zp) over one output's taps,
    plus the bias; bounded by max |x - x_zp| times the largest per-output sum of |w - w_zp|."""
    w, bias = block.tensors[op.inputs[1]].data, _const(block, op.inputs[2])
    xzp, wzp = _scalar(block, op.inputs[3]), _scalar(block, op.inputs[4])
    if w is None or bias is None or xzp is None or wzp is None or np.size(w) == 0:
        return None
    w = np.asarray(w)
    if w.dtype.kind not in "iu":
        return None
    x = max(abs(r[0][0] - xzp), abs(r[0][1] - xzp))
    # |w - wzp| of an 8-bit weight and a zero point of 9 bits fits int16: temporaries of half
    # int32's bytes, and numpy's int16 loops (mobilenetv2_int8's 3.4 M weights: about 6 ms
    # less of its tracing); 16-bit weights: int32
    wide = np.int16 if w.dtype.itemsize == 1 and -(1 << 8) <= wzp < 1 << 8 else np.int32
    magnitude = np.abs(w.astype(wide) - wide(wzp))
    # (the sums in int32 where no sum of the whole weight can reach 2**31: numpy's int32 loops
    # take about 60% of its int64 ones' time)
    total = np.int32 if wide is np.int16 and magnitude.size << 9 < 1 << 31 else np.int64
    bound = int(weight_taps(magnitude, total).max()) * x
    if bound > I32[1]:  # a partial sum could wrap (a REQUIRE failure): no range
        return None
    b_lo, b_hi = (int(bias.min()), int(bias.max())) if bias.size else (0, 0)
    return b_lo - bound, b_hi + bound


def _conv(block: Block, op: Operator, r: list[Range]) -> Range | None:
    # CONV2D / CONV3D / TRANSPOSE_CONV2D weights: [OC, ..., IC]
    return _accumulator(block, op, r,
                        lambda w, t: w.reshape(w.shape[0], -1).sum(axis=1, dtype=t))


def _depthwise(block: Block, op: Operator, r: list[Range]) -> Range | None:
    # DEPTHWISE_CONV2D weights: [KH, KW, C, M]: output channel (c, m) sums over KH, KW
    return _accumulator(block, op, r, lambda w, t: w.reshape(-1, w.shape[2] * w.shape[3]).sum(
        axis=0, dtype=t))


def _matmul(block: Block, op: Operator, r: list[Range]) -> Range | None:
    azp, bzp = _scalar(block, op.inputs[2]), _scalar(block, op.inputs[3])
    if azp is None or bzp is None:
        return None
    c = block.tensors[op.inputs[0]].shape[-1]
    lo, hi = _products((r[0][0] - azp, r[0][1] - azp), (r[1][0] - bzp, r[1][1] - bzp))
    return c * min(lo, 0), c * max(hi, 0)


def _reduce_sum(block: Block, op: Operator, r: list[Range]) -> Range:
    n = block.tensors[op.inputs[0]].shape[op.attrs["axis"]]
    return n * r[0][0], n * r[0][1]


def _clamp(block: Block, op: Operator, r: list[Range]) -> Range:
    lo, hi = int(np.asarray(op.attrs["min_val"])), int(np.asarray(op.attrs["max_val"]))
    return min(max(r[0][0], lo), hi), min(max(r[0][1], lo), hi)


def _table(block: Block, op: Operator, r: list[Range]) -> Range | None:
    table = _const(block, op.inputs[1])
    if table is None or block.tensors[op.inputs[0]].dtype != "INT8" or table.size == 0:
        return None
    return int(table.min()), int(table.max())


def _same(block: Block, op: Operator, r: list[Range]) -> Range:
    return r[0]


def _union(block: Block, op: Operator, r: list[Range]) -> Range:
    return min(x[0] for x in r), max(x[1] for x in r)


def _maximum(block: Block, op: Operator, r: list[Range]) -> Range:
    return max(r[0][0], r[1][0]), max(r[0][1], r[1][1])


def _minimum(block: Block, op: Operator, r: list[Range]) -> Range:
    return min(r[0][0], r[1][0]), min(r[0][1], r[1][1])


# operator -> (which inputs' ranges it reads, its output's range from them)
RULES: dict[str, tuple[tuple[int, ...] | None, Callable[..., Any]]] = {
    "RESCALE": ((0,), _rescale), "ADD": ((0, 1), _add), "SUB": ((0, 1), _sub),
    "MUL": ((0, 1), _mul), "CONV2D": ((0,), _conv), "CONV3D": ((0,), _conv),
    "TRANSPOSE_CONV2D": ((0,), _conv), "DEPTHWISE_CONV2D": ((0,), _depthwise),
    "MATMUL": ((0, 1), _matmul), "REDUCE_SUM": ((0,), _reduce_sum), "CLAMP": ((0,), _clamp),
    "TABLE": ((0,), _table), "MAXIMUM": ((0, 1), _maximum), "MINIMUM": ((0, 1), _minimum),
    "RESHAPE": ((0,), _same), "TRANSPOSE": ((0,), _same), "SLICE": ((0,), _same),
    "TILE": ((0,), _same), "REVERSE": ((0,), _same), "IDENTITY": ((0,), _same),
    "CONCAT": (None, _union),
}


class BlockRanges:
    """The proven ranges of one block's tensors, each worked out when first asked for (with
    those it depends on, and no others): a lowering asks for its inputs' ranges while the
    block is traced (``Node.input_range``)."""

    def __init__(self, block: Block, inputs: dict[str, Range] | None = None,
                 steps: list[Block] | None = None) -> None:
        self.block = block
        self._inputs = block.input_ranges if inputs is None else inputs
        self._known: dict[str, Range | None] = {}
        self._producers: dict[str, Operator] | None = None
        self._steps = steps

    def step_values(self, name: str) -> np.ndarray | None:
        """The values tensor ``name`` takes in each step of a rolled loop, stacked, where the
        block is one step (``Block.step_values``); else None."""
        return self.block.step_values.get(name)

    def _step_views(self) -> list[Block]:
        """The block once per step of its rolled loop, each with that step's constants."""
        if self._steps is None:
            b, values = self.block, self.block.step_values
            count = len(next(iter(values.values())))
            self._steps = [Block(b.name, b.operators, {**b.tensors, **{
                n: replace(b.tensors[n], data=v[k]) for n, v in values.items()}},
                b.inputs, b.outputs) for k in range(count)]
        return self._steps

    def _producer(self, name: str) -> Operator | None:
        if self._producers is None:
            self._producers = {o: op for op in self.block.operators for o in op.outputs}
        return self._producers.get(name)

    def _reads(self, op: Operator) -> list[str] | None:
        """The inputs whose ranges decide ``op``'s, or None when ``op`` is not modelled."""
        rule = RULES.get(op.op)
        if rule is None or len(op.outputs) != 1:
            return None
        which = rule[0]
        names = list(op.inputs) if which is None else [op.inputs[i] for i in which]
        if any(self.block.tensors[n].dtype not in INT_RANGES for n in names):
            return None
        return names

    def get(self, name: str) -> Range | None:
        """The proven range of tensor ``name``, or None where nothing narrower than its type
        is known (or it is not an integer tensor)."""
        stack = [name]
        while stack:  # depth-first without recursion: chains run thousands of operators deep
            n = stack[-1]
            if n in self._known:
                stack.pop()
                continue
            # a variable (EXT-VARIABLE) holds whatever was last written, possibly by an operator
            # that reads it: not derived (its writer would make a cycle)
            t = self.block.tensors.get(n)
            op = self._producer(n) if t is None or not t.variable else None
            reads = self._reads(op) if op is not None else None
            pending = [r for r in reads or () if r not in self._known]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            self._known[n] = self._derive(n, op, reads)
        return self._known[name]

    def _derive(self, name: str, op: Operator | None, reads: list[str] | None) -> Range | None:
        t = self.block.tensors[name]
        if t.dtype not in INT_RANGES or t.variable:
            return None
        data = t.data if t.data is not None else self.step_values(name)
        if data is not None:
            data = np.asarray(data)
            if data.size and data.dtype.kind in "iu":
                return int(data.min()), int(data.max())
            return None
        if op is None:
            r = self._inputs.get(name)
            return r if r is not None and _fits(r, t.dtype) else None
        if reads is None:
            return None
        rs = [self._known[n] or INT_RANGES[self.block.tensors[n].dtype] for n in reads]
        # an operator reading constants that differ per step: the union over the steps
        views = (self._step_views() if any(n in self.block.step_values for n in op.inputs)
                 else [self.block])
        try:
            found = [RULES[op.op][1](view, op, rs) for view in views]
            r = None if None in found else _union(self.block, op, found)
        except (KeyError, IndexError, ValueError, TypeError):
            r = None  # a malformed operator: profiles/ refuses it; no range here
        if r is None or r[0] > r[1] or not _fits(r, t.dtype):
            return None
        return int(r[0]), int(r[1])


def block_ranges(block: Block) -> dict[str, Range]:
    """Every proven range of ``block`` (constants: their values), by tensor name."""
    ranges = BlockRanges(block)
    return {n: r for n in block.tensors if (r := ranges.get(n)) is not None}


def carried_ranges(body: Block, carried: int, init: list[Range | None],
                   steps: int) -> dict[str, Range]:
    """The ranges of a rolled loop's carried values over every step (tosa_jax.reroll): the
    first ``carried`` inputs of the step ``body``, whose next values are its first ``carried``
    outputs, start in ``init`` (None: any value of the type).

    X_0 = init, X_k+1 = X_k | step(X_k) (every step's constants taken together) holds the
    carried values of steps 0..k+1; where X stops growing, step(X) lies within X, and so do
    the values of every later step. An input whose range leaves its type gets none."""
    names = body.inputs[:carried]
    total: dict[str, Range | None] = dict(zip(names, init, strict=True))
    views = BlockRanges(body)._step_views() if body.step_values else None
    # what does not depend on the carried values is the same every step: worked out once
    carried_on = set(names)
    for op in body.operators:
        if carried_on.intersection(op.inputs):
            carried_on.update(op.outputs)
    fixed: dict[str, Range | None] = {}
    for _ in range(steps - 1):
        found = BlockRanges(body, {n: r for n, r in total.items() if r is not None}, views)
        found._known.update(fixed)
        grown = {}
        for n, o in zip(names, body.outputs[:carried], strict=True):
            r, step = total[n], found.get(o)
            grown[n] = None if r is None or step is None else (min(r[0], step[0]),
                                                                max(r[1], step[1]))
        fixed = {n: r for n, r in found._known.items() if n not in carried_on}
        if grown == total:
            break
        total = grown
    return {n: r for n, r in total.items() if r is not None}
