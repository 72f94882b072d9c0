"""Unrolled recurrences rolled back into loops, before tracing.

Exporters unroll recurrent layers over time: ExecuTorch's int8 LSTM of 15 time steps is 15
copies of the same 123 operators (their constants included), each reading the state the
previous copy wrote. Traced copy by copy, XLA compiles every copy (lstm_int8: 13,000 HLO
instructions, 6 s) and rebuilds every copy from the compile cache. ``plan`` finds such runs of
repeated operators in a block; the executor (``run_block``) traces one step of each inside
``lax.scan``. Nothing else changes: every step runs the same operators, lowered by the same
lowerings with the same constants, in the same order, so results are the same.

A run is found from the IR alone (not from tensor names): operators whose signature (operator,
attributes, shapes and types) repeats with a period ``P`` for at least ``MIN_STEPS`` periods.
The windows of the run must be wired alike: each input of a step's operator is produced in
the same step (by the same position), in the previous step (a carried value: the loop's
state), or outside the run. Inputs from outside that differ from step to step are fed to the
loop one per step (``xs``) when they are computed values; where they are constants that
differ (a SLICE's start per time step), the operators that read them cannot be part of one
step's program, and run before the loop, unrolled as before, when they do not depend on the
carried state; their results are fed one per step. Constants that are equal in every step
are the step's constants, as in the unrolled graph (lowerings see them as numpy values).
Values computed in the loop that are used after it come out stacked (``ys``) or as the
final state. Anything else (variables, control flow, 64-bit pairs, block-scaled values
crossing the loop's boundary) leaves the block unrolled.

Inside the loop a step's per-step scales and zero points arrive traced; their values in every
step are known (``Block.step_values``), and so are the carried values' ranges over all steps
(``tosa_jax.ranges.carried_ranges``): RESCALE keeps the short exact forms it takes unrolled.

Where it pays, measured on this project's 2-core CI machine (jax 0.10.2): only steps that
compute integers are rolled, and only runs of at least ``MIN_STEPS`` steps.
- The zoo's int8 LSTM (2 layers of 15 steps, all rolled): 12,912 -> 2,518 HLO instructions;
  XLA compile 3.9 s -> 0.9 s; rebuilding the executable from the cache 340 ms -> 60 ms;
  batch 1 0.35 -> 0.26 ms; batch 64 about as fast (14,000-17,000 samples/s unrolled,
  13,600-14,800 rolled).
- ExecuTorch's int8 LSTM test (2 layers of 5 steps, 4 rolled: the first step lacks an
  operator): 4,326 -> 2,491 instructions, compile 1.07 -> 0.71 s, rebuild 90 -> 49 ms, batch 1
  0.057 -> 0.055 ms. Its 16-bit-activation variant: 5,681 -> 3,184 instructions, compile 1.27
  -> 0.84 s, rebuild 137 -> 64 ms, but batch 1 0.056 -> 0.13 ms and batch 64 at half the
  rate: XLA's runtime hands that program's independent kernels to other threads and waits
  for them (profiled: "ThunkExecutor::Execute (wait for completion)"), which the int8 one
  does not. Rolled, a one-shot run (a test suite's) is faster; a loop of calls slower.
- Float steps lower to a few kernels that XLA fuses across step boundaries; in a loop each
  step pays the loop's own kernels: the zoo's FP32 LSTM ran batch 1 in 0.33 ms rolled against
  0.13 ms unrolled, for a compile 0.1 s shorter.

For the CPU only (a trace that ``lowering.numerics.lowering_for`` says is for another
platform stays unrolled): on an H200 (jax 0.11.2, CUDA 13) the rolled int8 LSTM compiled in
2.4 s against 4.2 s, but ran batch 1 in 0.60 ms against 0.28 ms and batch 64 at 3,833
against 6,377 samples/s (XLA's GPU while loop), bit-exact both ways.

``TOSA_JAX_ROLL=0`` turns this off (the compile cache keys hold it).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from tosa_jax.ir import (
    CONSTANT_OPS,
    INT_RANGES,
    STATEFUL_OPS,
    WIDE_TYPES,
    Block,
    Operator,
    Tensor,
    trace_constants,
)
from tosa_jax.ranges import BlockRanges, carried_ranges

ENV = "TOSA_JAX_ROLL"
MIN_STEPS = 4         # steps rolled into one loop (see the module docstring)
MIN_BODY = 4          # operators of one step that compute (constants aside)
MAX_PERIOD = 1024     # operators of one step, constants included
MAX_ATTEMPTS = 64     # candidate runs checked per block


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


@dataclass(frozen=True)
class Loop:
    """A run of ``steps`` windows of ``period`` operators, block indices [start, stop).

    ``outside``: block indices of the run's operators that run before the loop, unrolled (all
    its constants, and the operators that read constants differing per step). ``body``: one
    step as a block; its inputs are the carried values, then the per-step values, then the
    loop-invariant values; its outputs the next carried values, then the values used after
    the loop. ``init``: the tensors holding the carried values' initial values; ``xs``: per
    per-step input, its tensor in each step; ``invariants``: tensors the step reads as they
    are; ``ys``: per stacked output, its tensor in each step (None: not used after the loop);
    ``finals``: per carried value, the tensor that takes its last value (or None)."""

    start: int
    stop: int
    period: int
    steps: int
    outside: tuple[int, ...]
    body: Block
    init: tuple[str, ...]
    xs: tuple[tuple[str, ...], ...]
    invariants: tuple[str, ...]
    ys: tuple[tuple[str | None, ...], ...]
    finals: tuple[str | None, ...]


_PLANS: dict[int, tuple[weakref.ref[Block], tuple[Loop, ...]]] = {}


def plan(block: Block) -> tuple[Loop, ...]:
    """The loops of ``block`` (none when rolling is off); worked out once per block."""
    if not enabled():
        return ()
    hit = _PLANS.get(id(block))
    if hit is not None and hit[0]() is block:
        return hit[1]
    loops = _Planner(block).loops()
    for key in [k for k, (ref, _) in list(_PLANS.items()) if ref() is None]:
        # blocks gone (their plans hold constants); pop, not del: threads tracing two graphs
        # at once (the conformance runner's workers, a background upgrade) may both find one
        _PLANS.pop(key, None)
    _PLANS[id(block)] = (weakref.ref(block), loops)
    return loops


def _signature(block: Block, op: Operator) -> tuple[Any, ...]:
    t = block.tensors
    return (op.op, repr(sorted(op.attrs.items())),
            tuple((t[n].shape, t[n].dtype, t[n].block_size) for n in op.inputs),
            tuple((t[n].shape, t[n].dtype, t[n].block_size) for n in op.outputs))


def _same_attrs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) or isinstance(b[k], np.ndarray)
        else a[k] == b[k] for k in a)


def _same_data(a: Tensor, b: Tensor) -> bool:
    if a.data is None or b.data is None or a.block_scaled or b.block_scaled:
        return False
    return (a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
            and np.array_equal(a.data, b.data, equal_nan=a.data.dtype.kind == "f"))


class _Planner:
    def __init__(self, block: Block) -> None:
        self.block = block
        # The operators other than CONST / CONST_SHAPE, by position (``index``: their block
        # indices). Exporters place constants where they are first used and share equal ones,
        # so steps differ in where (and whether) they have them: to the planner a constant is
        # a value from outside the run, fed to the loop as any other.
        self.index = [i for i, op in enumerate(block.operators) if op.op not in CONSTANT_OPS]
        self.ops = [block.operators[i] for i in self.index]
        self.producer: dict[str, tuple[int, int]] = {}
        self.users: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            for k, name in enumerate(op.outputs):
                self.producer[name] = (i, k)
            for name in op.inputs:
                self.users.setdefault(name, []).append(i)
        self.block_outputs = set(block.outputs)
        self.constant = trace_constants(block)
        self.ranges: BlockRanges | None = None

    def _is_constant_op(self, i: int) -> bool:
        return all(n in self.constant for n in self.ops[i].outputs)

    def candidates(self) -> list[tuple[int, int, int]]:
        """(start, period, steps) of runs whose signatures repeat, most operators first."""
        n = len(self.ops)
        ids: dict[tuple[Any, ...], int] = {}
        sig = np.array([ids.setdefault(_signature(self.block, op), len(ids)) for op in self.ops],
                       np.int64)
        self.sig = sig
        work = np.cumsum([0] + [0 if self._is_constant_op(i) else 1 for i in range(n)])
        found = []
        for p in range(1, min(MAX_PERIOD, n // MIN_STEPS) + 1):
            eq = np.concatenate([[False], sig[:-p] == sig[p:], [False]])
            edges = np.flatnonzero(eq[1:] != eq[:-1])
            a, e = edges[::2], edges[1::2]
            steps = (e - a + p) // p
            mid = a + steps // 2 * p  # (a first window may be folded into constants)
            keep = (steps >= MIN_STEPS) & (work[np.minimum(mid + p, n)] - work[mid] >= MIN_BODY)
            found.extend((int(x), p, int(k)) for x, k in zip(a[keep], steps[keep], strict=True))
        found.sort(key=lambda c: (-c[1] * c[2], c[1]))
        return found

    def loops(self) -> tuple[Loop, ...]:
        if any(t.variable for t in self.block.tensors.values()):
            return ()
        taken: list[tuple[int, int]] = []
        loops = []
        for attempt, (a, p, steps) in enumerate(self.candidates()):
            if attempt >= MAX_ATTEMPTS:
                break
            first, last = self.index[a], self.index[a + p * steps - 1] + 1  # block indices
            if any(first < e and s < last for s, e in taken):
                continue
            loop = self.build(a, p, steps)
            if loop is not None and not any(loop.start < e and s < loop.stop for s, e in taken):
                taken.append((loop.start, loop.stop))
                loops.append(loop)
        return tuple(sorted(loops, key=lambda lp: lp.start))

    # ---- one candidate
    def _kind(self, start: int, stop: int, p: int, i: int, name: str) -> tuple[Any, ...]:
        """How operator ``i`` of the run [start, stop) of windows of ``p`` gets ``name``:
        ('int', j, k) from position j of its own window, ('carry', j, k) from the previous
        window, ('ext',) from outside the run, ('far',) from an earlier window."""
        src = self.producer.get(name)
        if src is None or not start <= src[0] < stop:
            return ("ext",)
        w, j = divmod(src[0] - start, p)
        here = (i - start) // p
        if w == here:
            return ("int", j, src[1])
        if w == here - 1:
            return ("carry", j, src[1])
        return ("far",)

    def _window_kinds(self, start: int, stop: int, p: int, w: int) -> list[tuple[Any, ...]]:
        base = start + w * p
        return [self._kind(start, stop, p, base + j, n)
                for j in range(p) for n in self.ops[base + j].inputs]

    def _same_window(self, x: int, y: int, p: int) -> bool:
        """Operators x.. and y.. have the same signatures for ``p`` operators."""
        return 0 <= x and x + p <= len(self.sig) and bool(
            np.array_equal(self.sig[x:x + p], self.sig[y:y + p]))

    def _aligned(self, a: int, p: int, stop: int) -> int:
        """Where in the run steps begin: the window offset that the fewest computed values
        cross (an exporter's step may begin anywhere in the repeating signature; a window
        that cuts a step in two carries its halves' values, and a per-step slice of the
        input may land in the window before its step)."""
        cross = np.zeros(p + 1, np.int64)
        for i in range(a, stop):
            for name in self.ops[i].inputs:
                src = self.producer.get(name)
                if src is None or not a <= src[0] < stop or self._is_constant_op(src[0]):
                    continue
                d = i - src[0]
                if d >= p:
                    cross[0] += 1
                    cross[p] -= 1
                    continue
                lo = (src[0] + 1 - a) % p  # boundaries at a + o + m p in (src, i]
                hi = lo + d
                cross[lo] += 1
                cross[min(hi, p)] -= 1
                if hi > p:
                    cross[0] += 1
                    cross[hi - p] -= 1
        return int(np.argmin(np.cumsum(cross[:p])))

    def build(self, a: int, p: int, steps: int) -> Loop | None:
        stop = a + p * steps
        if any(op.op in STATEFUL_OPS for op in self.ops[a:stop]):  # never in a loop
            return None
        offset = self._aligned(a, p, stop)
        if offset:
            a, steps = a + offset, steps - 1
            # the operators of a step may repeat past the run's end, or before its start,
            # once the windows begin where steps do
            while self._same_window(a + p * steps, a, p):
                steps += 1
            while self._same_window(a - p, a, p):
                a, steps = a - p, steps + 1
            stop = a + p * steps
        # the windows wired like the middle one, around it
        kinds = [self._window_kinds(a, stop, p, w) for w in range(steps)]
        mid = steps // 2
        pattern = kinds[mid]
        if any(k[0] == "far" for k in pattern):
            return None

        def like(w: int, first: bool) -> bool:
            return all(k == q or (first and q[0] == "carry" and k[0] in ("ext", "carry"))
                       for k, q in zip(kinds[w], pattern, strict=True))

        hi = mid
        while hi + 1 < steps and like(hi + 1, False):
            hi += 1
        lo = mid
        while lo > 0 and like(lo - 1, False):
            lo -= 1
        if lo > 0 and like(lo - 1, True):  # its carried inputs come from before the loop
            lo -= 1

        def constness(w: int) -> list[bool]:
            return [self._is_constant_op(a + w * p + j) for j in range(p)]

        same = constness(mid)

        def covers(w: int) -> bool:
            """Window w computes at most what the step computes. A first step from a constant
            state folds more of its operators into constants; in the loop it computes them
            from the state it is given, as the other steps do. (A window that computes what
            the step takes as a constant cannot be a step.)"""
            return all(c or not k for c, k in zip(constness(w), same, strict=True))

        while not covers(lo):
            lo += 1
        while not covers(hi):
            hi -= 1
        if hi - lo + 1 < MIN_STEPS or not all(covers(w) for w in range(lo, hi + 1)):
            return None
        start, steps = a + lo * p, hi - lo + 1
        stop = start + p * steps
        kinds = [self._window_kinds(start, stop, p, w) for w in range(steps)]
        if any(k != q for w in range(1, steps) for k, q in zip(kinds[w], pattern, strict=True)):
            return None
        if any(k != q and not (q[0] == "carry" and k[0] == "ext")
               for k, q in zip(kinds[0], pattern, strict=True)):
            return None
        return self._loop(start, p, steps, pattern)

    def _loop(self, start: int, p: int, steps: int, pattern: list[tuple[Any, ...]]) -> Loop | None:
        ops, t = self.ops, self.block.tensors
        stop = start + p * steps

        def op_at(w: int, j: int) -> Operator:
            return ops[start + w * p + j]

        def names(j: int, slot: int) -> tuple[str, ...]:  # input ``slot`` of position j, per step
            return tuple(op_at(w, j).inputs[slot] for w in range(steps))

        def out_names(j: int, k: int) -> tuple[str, ...]:
            return tuple(op_at(w, j).outputs[k] for w in range(steps))

        if not all(_same_attrs(op_at(0, j).attrs, op_at(w, j).attrs)
                   for j in range(p) for w in range(1, steps)):
            return None  # (signatures compare attributes by their repr)

        kind: dict[tuple[int, int], tuple[Any, ...]] = {}
        it = iter(pattern)
        for j in range(p):
            for slot in range(len(ops[start + j].inputs)):
                kind[j, slot] = next(it)
        constant_op = [self._is_constant_op(start + steps // 2 * p + j) for j in range(p)]
        # per position: are its constant outputs the same in every step?
        uniform = [False] * p

        def input_class(j: int, slot: int) -> str:
            """'same' (one value for every step), 'dyn' (a computed value per step) or 'vary'
            (a constant that differs between steps)."""
            k = kind[j, slot]
            if k[0] == "ext":
                ns = names(j, slot)
                if all(n == ns[0] for n in ns):
                    return "same"
                if all(n in self.constant for n in ns):
                    return "same" if all(_same_data(t[ns[0]], t[n]) for n in ns) else "vary"
                return "vary" if any(n in self.constant for n in ns) else "dyn"
            if constant_op[k[1]]:
                return "same" if uniform[k[1]] else "vary"
            return "dyn"

        for j in range(p):  # (constants computed from constants: CONST ops are outside)
            if constant_op[j]:
                uniform[j] = all(input_class(j, s) == "same"
                                 for s in range(len(ops[start + j].inputs)))
        # operators that read a constant differing per step run before the loop, with what
        # they read; none of them may depend on the carried state
        hoist = {j for j in range(p) if not constant_op[j] and any(
            input_class(j, s) == "vary" and s not in _run_time_inputs(ops[start + j].op)
            for s in range(len(ops[start + j].inputs)))}
        recurrent = [False] * p
        for j in range(p):
            recurrent[j] = any(kind[j, s][0] == "carry" or (
                kind[j, s][0] == "int" and recurrent[kind[j, s][1]])
                for s in range(len(ops[start + j].inputs)))
        todo = list(hoist)
        while todo:
            j = todo.pop()
            if recurrent[j]:
                return None
            for s in range(len(ops[start + j].inputs)):
                k = kind[j, s]
                if k[0] == "int" and not constant_op[k[1]] and k[1] not in hoist:
                    hoist.add(k[1])
                    todo.append(k[1])
        body_pos = [j for j in range(p) if j not in hoist and (not constant_op[j] or uniform[j])]
        needed: set[int] = set()  # the step's own constants: those its operators read
        for j in reversed(body_pos):
            if not constant_op[j] or j in needed:
                needed.update(k[1] for s in range(len(ops[start + j].inputs))
                              if (k := kind[j, s])[0] == "int")
        body_pos = [j for j in body_pos if not constant_op[j] or j in needed]
        computing = [j for j in body_pos if not constant_op[j]]
        if len(computing) < MIN_BODY or not any(
                t[n].dtype in INT_RANGES for j in computing for n in op_at(0, j).outputs):
            return None  # float steps: see the module docstring

        outside_users = {}  # tensor -> used after (or before) the run, or a block output
        for w in range(steps):
            for j in body_pos:
                for n in op_at(w, j).outputs:
                    outside_users[n] = n in self.block_outputs or any(
                        not start <= u < stop for u in self.users.get(n, ()))
        # the step's block: window 0's operators, with placeholders for carried and per-step
        # inputs
        tensors: dict[str, Tensor] = {}
        carry_key: dict[tuple[int, int], int] = {}
        carry_names: list[str] = []
        init: list[str] = []
        xs_key: dict[tuple[str, ...], str] = {}
        xs: list[tuple[str, ...]] = []
        step_values: dict[str, np.ndarray] = {}
        invariants: list[str] = []
        body_ops: list[Operator] = []

        def plain(name: str) -> bool:
            return t[name].dtype not in WIDE_TYPES and not t[name].block_scaled

        for j in body_pos:
            op = op_at(0, j)
            inputs = []
            for slot, name in enumerate(op.inputs):
                k = kind[j, slot]
                cls = input_class(j, slot)
                if k[0] == "carry":
                    if constant_op[k[1]] or k[1] not in body_pos or not plain(name):
                        return None
                    idx = carry_key.setdefault((k[1], k[2]), len(carry_key))
                    if idx == len(carry_names):
                        carry_names.append(_fresh(t, f"{op_at(0, k[1]).outputs[k[2]]}@carried"))
                        init.append(name)
                        tensors[carry_names[idx]] = _placeholder(t[name], carry_names[idx])
                    elif init[idx] != name:
                        return None
                    inputs.append(carry_names[idx])
                elif k[0] == "int" and k[1] in body_pos:
                    inputs.append(name)
                elif cls == "same":
                    tensors[name] = t[name]
                    if name not in invariants:
                        invariants.append(name)
                    inputs.append(name)
                elif cls == "dyn" or cls == "vary":  # one value per step, from outside
                    ns = names(j, slot)
                    if not plain(name):
                        return None
                    if ns not in xs_key:
                        xs_key[ns] = _fresh(t, f"{name}@step")
                        xs.append(ns)
                        tensors[xs_key[ns]] = _placeholder(t[name], xs_key[ns])
                        if all(t[n].data is not None for n in ns):  # constants of each step
                            step_values[xs_key[ns]] = np.stack([t[n].data for n in ns])
                    inputs.append(xs_key[ns])
                else:
                    return None
            for n in op.outputs:
                tensors[n] = t[n]
            body_ops.append(Operator(op.op, inputs, list(op.outputs), op.attrs, op.location))
        # what leaves the step: the next carried values, then values used after the loop
        carried = sorted(carry_key, key=carry_key.get)  # type: ignore[arg-type]
        outputs = [op_at(0, j).outputs[k] for j, k in carried]
        finals: list[str | None] = [None] * len(carried)
        ys: list[tuple[str | None, ...]] = []
        for j in body_pos:
            if constant_op[j]:
                continue
            for k in range(len(ops[start + j].outputs)):
                used = [n if outside_users[n] else None for n in out_names(j, k)]
                if not any(used):
                    continue
                if not plain(used[-1] or next(n for n in used if n)):
                    return None
                if (j, k) in carry_key and not any(used[:-1]):
                    finals[carry_key[j, k]] = used[-1]
                    continue
                outputs.append(op_at(0, j).outputs[k])
                ys.append(tuple(used))
        body = Block(f"{self.block.name}[{start}:{stop}:{p}]", body_ops, tensors,
                     carry_names + [xs_key[n] for n in xs] + invariants, outputs, step_values)
        if self.ranges is None:
            self.ranges = BlockRanges(self.block)
        body.input_ranges = carried_ranges(body, len(init), [self.ranges.get(n) for n in init],
                                           steps)
        first, last = self.index[start], self.index[stop - 1] + 1  # block indices
        before = {self.index[start + w * p + j] for w in range(steps) for j in range(p)
                  if j in hoist or constant_op[j]}
        before.update(i for i in range(first, last)
                      if self.block.operators[i].op in CONSTANT_OPS)
        return Loop(first, last, p, steps, tuple(sorted(before)), body, tuple(init), tuple(xs),
                    tuple(invariants), tuple(ys), tuple(finals))


@cache
def _run_time_inputs(op: str) -> frozenset[int]:
    """The inputs of ``op`` through which a constant that differs per step can be fed to a
    loop step: the compile-time constants that EXT-DYNAMIC lets arrive at run time (zero
    points, RESCALE's scales, MUL's shift, TABLE's table), which the lowerings take traced.
    Quantized recurrences calibrate these per time step. Shape inputs (SLICE's start) stay
    constants, as shapes are static; and weights that differ per step make repeated layers,
    not a recurrence: they stay unrolled, their constant weights in view of the lowerings."""
    from tosa_jax.profiles.checks import op_spec

    spec = op_spec(op)
    if spec is None:
        return frozenset()
    return frozenset(i for i, a in enumerate(spec.inputs)
                     if a.type == "tensor_t" and "EXT-DYNAMIC" in a.ctc_remove)


def _fresh(tensors: dict[str, Tensor], name: str) -> str:
    """A name for a placeholder that no tensor of the block has."""
    while name in tensors:
        name += "'"
    return name


def _placeholder(like: Tensor, name: str) -> Tensor:
    return Tensor(name, like.shape, like.dtype)
