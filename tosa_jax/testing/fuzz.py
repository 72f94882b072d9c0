"""Fuzz the reader and loader: mutated and truncated TOSA files must never crash, hang or raise
anything but a TosaError, and every case stays within a time and memory bound.

    python bench/fuzz.py --cases 10000 -j 2 [--seed 0] [--conformance DIR] [--json fuzz.json]
    python bench/fuzz.py --replay 1234 [--write case.tosa]      # one case, in this process

Seeds: the fixture networks (tests/fixtures), small graphs built here with ``GraphBuilder`` that
cover the element types, and optionally the smallest conformance graph of each operator under
``--conformance`` (the output of ``bench/conformance.py generate``). Case ``i`` is a pure function
of ``(--seed, i)``: the first cases truncate the smallest seed at every offset, the rest apply
byte mutations (bit flips, insertions, deletions, truncation, 32-bit words set to out-of-range
offsets, splices) or structural ones made through the flatbuffer object API (2^40-element and
negative shapes, dangling and cyclic tensor references, missing regions, blocks, tensors and
operators, wrong element types, operator codes and attribute tables, corrupted attribute values).

Every case is loaded with ``tosa_jax.load`` under tight limits and, if it loads, called once with
zero inputs of the declared shapes. Cases run in worker processes (``-j``) that each hold an
address-space limit (``--mem-gib``); the parent gives each case ``--timeout`` seconds. A worker
that dies is a crash and one that overruns is a hang: both are counted, saved (``--save``) and
the worker restarted. Outcomes: ``ran`` (loaded and ran), ``rejected`` (a TosaError, at load or
at call, counted per error type), ``failure`` (any other exception: a bug), ``crash``, ``hang``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tosa_jax.testing import FIXTURES

# Limits each case is loaded under: small enough that zero inputs and a run stay cheap.
MAX_ELEMENTS = 1 << 22
MAX_BYTES = 1 << 28

# --------------------------------------------------------------------------------- seeds


def _int8_cnn() -> Any:
    import tosa_jax

    rng = np.random.default_rng(1)
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 6, 6, 2), "INT8")
    acc = b.op("CONV2D", [x, b.const(rng.integers(-127, 128, (3, 3, 3, 2)), "INT8"),
                          b.const(rng.integers(-999, 999, (3,)), "INT32"),
                          b.const([0], "INT8"), b.const([0], "INT8")],
               (1, 4, 4, 3), "INT32", pad=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1),
               acc_type="INT32", local_bound=False)
    y = b.op("RESCALE", [acc, b.const([1 << 30], "INT32"), b.const([38], "INT8"),
                         b.const([0], "INT32"), b.const([-3], "INT8")],
             (1, 4, 4, 3), "INT8", scale32=True, rounding_mode="SINGLE_ROUND",
             per_channel=False, input_unsigned=False, output_unsigned=False)
    y = b.op("CLAMP", [y], (1, 4, 4, 3), "INT8", min_val=-100, max_val=100,
             nan_mode="PROPAGATE")
    y = b.op("MAX_POOL2D", [y], (1, 2, 2, 3), "INT8", kernel=(2, 2), stride=(2, 2),
             pad=(0, 0, 0, 0), nan_mode="PROPAGATE")
    y = b.op("RESHAPE", [y, b.const([1, 12], "SHAPE")], (1, 12), "INT8")
    return b.build([y])


def _int_mix() -> Any:
    import tosa_jax

    rng = np.random.default_rng(2)
    b = tosa_jax.GraphBuilder()
    a = b.input("a", (2, 8), "INT16")
    c = b.input("c", (2, 8), "INT32")
    t = b.input("t", (2, 8), "INT8")
    a32 = b.op("CAST", [a], (2, 8), "INT32")
    s = b.op("ADD", [a32, c], (2, 8), "INT32")
    m = b.op("MUL", [s, c, b.const([3], "INT8")], (2, 8), "INT32")
    r = b.op("ARITHMETIC_RIGHT_SHIFT", [m, b.const(np.full((1, 8), 2), "INT32")], (2, 8),
             "INT32", round=True)
    red = b.op("REDUCE_SUM", [r], (2, 1), "INT32", axis=1)
    eq = b.op("EQUAL", [s, c], (2, 8), "BOOL")
    sel = b.op("SELECT", [eq, s, r], (2, 8), "INT32")
    tab = b.op("TABLE", [t, b.const(rng.integers(-128, 128, (256,)), "INT8")], (2, 8), "INT8")
    arg = b.op("ARGMAX", [tab], (2,), "INT32", axis=1, nan_mode="PROPAGATE")
    return b.build([red, sel, arg])


def _layout() -> Any:
    import tosa_jax

    b = tosa_jax.GraphBuilder()
    x = b.input("x", (2, 3, 4), "INT8")
    t = b.op("TRANSPOSE", [x], (4, 2, 3), "INT8", perms=(2, 0, 1))
    p = b.op("PAD", [t, b.const([0, 0, 1, 1, 0, 2], "SHAPE"), b.const([5], "INT8")],
             (4, 4, 5), "INT8")
    s = b.op("SLICE", [p, b.const([0, 1, 1], "SHAPE"), b.const([4, 2, 3], "SHAPE")],
             (4, 2, 3), "INT8")
    c = b.op("CONCAT", [s, t], (8, 2, 3), "INT8", axis=0)
    g = b.op("GATHER", [c, b.const(np.arange(32).reshape(8, 4) % 2, "INT32")], (8, 4, 3),
             "INT8")
    tl = b.op("TILE", [g, b.const([1, 2, 1], "SHAPE")], (8, 8, 3), "INT8")
    return b.build([tl])


def _fp32() -> Any:
    import tosa_jax

    rng = np.random.default_rng(3)
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 4, 8), "FP32")
    w = b.const(rng.standard_normal((1, 8, 5)).astype(np.float32), "FP32")
    zp = b.const([0.0], "FP32")
    m = b.op("MATMUL", [x, w, zp, zp], (1, 4, 5), "FP32")
    s = b.op("SIGMOID", [m], (1, 4, 5), "FP32")
    e = b.op("EXP", [s], (1, 4, 5), "FP32")
    a = b.op("ADD", [e, b.const(rng.standard_normal((1, 1, 5)).astype(np.float32), "FP32")],
             (1, 4, 5), "FP32")
    r = b.op("REDUCE_SUM", [a], (1, 4, 1), "FP32", axis=2)
    return b.build([r])


def _wide() -> Any:
    import tosa_jax

    rng = np.random.default_rng(4)
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 4, 4, 2), "INT8")
    acc = b.op("CONV2D", [x, b.const(rng.integers(-8, 8, (2, 1, 1, 2)), "INT4"),
                          b.const([7, -7], "INT32"), b.const([0], "INT8"),
                          b.const([0], "INT4")],
               (1, 4, 4, 2), "INT32", pad=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1),
               acc_type="INT32", local_bound=False)
    h = b.input("h", (1, 4, 4, 2), "INT16")
    acc48 = b.op("CONV2D", [h, b.const(rng.integers(-127, 128, (2, 1, 1, 2)), "INT8"),
                            b.const([1 << 40, -5], "INT48"), b.const([0], "INT16"),
                            b.const([0], "INT8")],
                 (1, 4, 4, 2), "INT48", pad=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1),
                 acc_type="INT48", local_bound=False)
    out48 = b.op("RESCALE", [acc48, b.const([23456], "INT16"), b.const([30], "INT8"),
                             b.const([0], "INT48"), b.const([0], "INT32")],
                 (1, 4, 4, 2), "INT32", scale32=False, rounding_mode="SINGLE_ROUND",
                 per_channel=False, input_unsigned=False, output_unsigned=False)
    return b.build([acc, out48])


BUILT_SEEDS: dict[str, Callable[[], Any]] = {
    "int8_cnn": _int8_cnn, "int_mix": _int_mix, "layout": _layout, "fp32": _fp32,
    "wide": _wide,
}


def seed_files(conformance: Path | None = None, fixtures: bool = True) -> dict[str, bytes]:
    """The seeds by name: built graphs, fixture networks, one conformance graph per operator."""
    import tosa_jax

    seeds = {name: tosa_jax.write(build()) for name, build in BUILT_SEEDS.items()}
    if fixtures:
        for path in sorted(FIXTURES.glob("*.tosa")):
            seeds[path.stem] = path.read_bytes()
    if conformance is not None:
        smallest: dict[str, Path] = {}
        for path in sorted(conformance.rglob("*.tosa")):
            op = path.parent.parent.name
            if op not in smallest or path.stat().st_size < smallest[op].stat().st_size:
                smallest[op] = path
        for op, path in sorted(smallest.items()):
            seeds[f"conf_{op}"] = path.read_bytes()
    return seeds


# ----------------------------------------------------------------------------- mutators

INTERESTING_WORDS = (0, 1, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                     0xFFFFFFFC, 0x100000)


def _bitflip(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    for _i in range(rng.choice((1, 1, 2, 4, 8, 32))):
        p = rng.randrange(len(d) * 8)
        d[p // 8] ^= 1 << (p % 8)
    return d


def _insert(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    p = rng.randrange(len(d) + 1)
    d[p:p] = bytes(rng.randrange(256) for _i in range(rng.choice((1, 2, 4, 8, 64))))
    return d


def _delete(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    p = rng.randrange(len(d))
    del d[p:p + rng.choice((1, 2, 4, 8, 64))]
    return d


def _truncate(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    return d[:rng.randrange(len(d))]


def _word(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    """Set aligned 32-bit words (offsets, lengths) to values pointing out of range."""
    for _i in range(rng.choice((1, 1, 2, 4))):
        p = rng.randrange(max(1, len(d) // 4)) * 4
        v = rng.choice(INTERESTING_WORDS + (len(d), len(d) - 4, len(d) + 4, len(d) // 2))
        d[p:p + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")
    return d


def _splice(d: bytearray, rng: random.Random, others: list[bytes]) -> bytearray:
    o = rng.choice(others)
    a, n = rng.randrange(len(o)), rng.choice((4, 16, 256, 4096))
    p = rng.randrange(len(d))
    d[p:p + n] = o[a:a + n]
    return d


def _repeat(d: bytearray, rng: random.Random, _: list[bytes]) -> bytearray:
    p, n = rng.randrange(len(d)), rng.choice((4, 8, 64))
    d[p:p] = d[p:p + n] * rng.choice((2, 16, 256))
    return d


BYTE_MUTATORS = {"bitflip": _bitflip, "insert": _insert, "delete": _delete,
                 "truncate": _truncate, "offset_word": _word, "splice": _splice,
                 "repeat": _repeat}


def _fb() -> Any:
    # Structural mutations need to write what our writer never would: the flatc bindings do.
    from tosa_jax._schema import tosa_generated

    return tosa_generated


def _unpack(data: bytes) -> Any:
    fb = _fb()
    return fb.TosaGraphT.InitFromObj(fb.TosaGraph.GetRootAs(data, 0))


def _pack(g: Any) -> bytes:
    """Pack a mutated object tree; equal strings (and ``Shared`` tables) are written once."""
    import flatbuffers

    class SharingBuilder(flatbuffers.Builder):
        def CreateString(self, s: Any, encoding: str = "utf-8",  # noqa: N802
                         errors: str = "strict") -> int:
            if s not in strings:
                strings[s] = super().CreateString(s, encoding, errors)
            return strings[s]

    strings: dict[Any, int] = {}
    builder = SharingBuilder(1024)
    builder.Finish(g.Pack(builder), b"TOSA")
    return bytes(builder.Output())


class Shared:
    """A table packed once, however many times it is listed: one offset, many references."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.offset: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.obj, name)

    def Pack(self, builder: Any) -> int:  # noqa: N802 - the flatc object API's name
        if self.offset is None:
            self.offset = self.obj.Pack(builder)
        return self.offset


def _main_block(g: Any) -> Any:
    return g.regions[0].blocks[0]


def _any_tensor(g: Any, rng: random.Random) -> Any:
    return rng.choice(_main_block(g).tensors)


def _any_op(g: Any, rng: random.Random) -> Any:
    ops = _main_block(g).operators
    return rng.choice(ops) if ops else None


def _m_huge_shape(g: Any, rng: random.Random) -> None:
    _any_tensor(g, rng).shape = rng.choice((
        [1 << 20, 1 << 20], [1 << 10, 1 << 10, 1 << 10, 1 << 10], [2 ** 31 - 1] * 4,
        [65536, 65536], [1, 1 << 24], [4096, 4096, 64], [2 ** 31 - 1]))


def _m_bad_shape(g: Any, rng: random.Random) -> None:
    t = _any_tensor(g, rng)
    shape = list(t.shape) if t.shape is not None else []
    choice = rng.randrange(5)
    if choice == 0 and shape:
        shape[rng.randrange(len(shape))] = -rng.choice((1, 2, 2 ** 31))
    elif choice == 1:
        shape.append(rng.choice((1, 2, 3)))
    elif choice == 2 and shape:
        shape.pop(rng.randrange(len(shape)))
    elif choice == 3 and shape:
        i = rng.randrange(len(shape))
        shape[i] = max(0, shape[i] + rng.choice((-1, 1, 7)))
    else:
        shape = [1] * rng.choice((17, 64, 1000))
    t.shape = shape


def _m_dangling(g: Any, rng: random.Random) -> None:
    op, blk = _any_op(g, rng), _main_block(g)
    if op is not None and op.inputs:
        op.inputs[rng.randrange(len(op.inputs))] = "no_such_tensor"
    elif blk.outputs:
        blk.outputs[0] = "no_such_tensor"


def _m_cycle(g: Any, rng: random.Random) -> None:
    """An operator reads its own output or a later operator's (a use before definition)."""
    ops = _main_block(g).operators
    i = rng.randrange(len(ops))
    j = rng.randrange(i, len(ops))
    if ops[i].inputs and ops[j].outputs:
        ops[i].inputs[rng.randrange(len(ops[i].inputs))] = ops[j].outputs[0]
    if rng.random() < 0.5 and i != j:
        ops[i], ops[j] = ops[j], ops[i]


def _m_duplicate_output(g: Any, rng: random.Random) -> None:
    ops = _main_block(g).operators
    a, b = rng.choice(ops), rng.choice(ops)
    if a.outputs and b.outputs:
        a.outputs[0] = b.outputs[0]


def _m_missing(g: Any, rng: random.Random) -> None:
    blk = _main_block(g)
    what = rng.randrange(6)
    if what == 0:
        g.regions = rng.choice(([], None))
    elif what == 1:
        g.regions[0].blocks = rng.choice(([], None))
    elif what == 2 and blk.tensors:
        blk.tensors.pop(rng.randrange(len(blk.tensors)))
    elif what == 3 and blk.operators:
        blk.operators.pop(rng.randrange(len(blk.operators)))
    elif what == 4:
        blk.inputs, blk.outputs = rng.choice(((None, blk.outputs), (blk.inputs, None)))
    else:
        g.version = None


def _m_wrong_type(g: Any, rng: random.Random) -> None:
    t = _any_tensor(g, rng)
    t.type = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99, 2 ** 32 - 1))


def _m_wrong_op(g: Any, rng: random.Random) -> None:
    op = _any_op(g, rng)
    if op is None:
        return
    if rng.random() < 0.5:
        op.op = rng.choice((0, rng.randrange(1, 120), 2 ** 32 - 1))
    else:  # keep the attribute table, change the operator it belongs to (or the reverse)
        fb = _fb()
        names = [n for n in vars(fb.Attribute) if not n.startswith("_") and n != "NONE"]
        name = rng.choice(names)
        op.attributeType = getattr(fb.Attribute, name)
        op.attribute = getattr(fb, name + "T")()


def _m_attr_values(g: Any, rng: random.Random) -> None:
    ops = [o for o in _main_block(g).operators if o.attribute is not None]
    if not ops:
        return
    attr = rng.choice(ops).attribute
    fields = [k for k in vars(attr)]
    if not fields:
        return
    key = rng.choice(fields)
    value = getattr(attr, key)
    extremes = (0, -1, 1, 2, 7, 2 ** 31 - 1, -(2 ** 31), 1 << 20)
    if isinstance(value, bool):
        setattr(attr, key, not value)
    elif isinstance(value, int):
        setattr(attr, key, rng.choice(extremes + (rng.randrange(0, 64),)))
    elif isinstance(value, (np.ndarray, list)) or value is None:
        n = rng.choice((0, 1, 2, 3, 4, 6, 8))
        if key in ("minVal", "maxVal"):
            setattr(attr, key, np.array([rng.randrange(256) for _ in range(n)], np.uint8))
        else:
            setattr(attr, key, np.array([rng.choice(extremes) for _ in range(n)], np.int32))
    elif isinstance(value, (str, bytes)):
        setattr(attr, key, rng.choice(("", "x" * 1000, "main")))


def _m_data(g: Any, rng: random.Random) -> None:
    ts = [t for t in _main_block(g).tensors if t.data is not None and len(t.data)]
    if not ts:
        return
    t = rng.choice(ts)
    data = np.asarray(t.data, dtype=np.uint8)
    if rng.random() < 0.5:
        t.data = data[:rng.randrange(len(data))]
    else:
        t.data = np.concatenate([data, np.full(rng.choice((1, 64, 4096)), 0xFF, np.uint8)])


def _m_io(g: Any, rng: random.Random) -> None:
    blk = _main_block(g)
    names = [t.name for t in blk.tensors]
    if rng.random() < 0.5:
        blk.inputs = list(blk.inputs or []) + [rng.choice(names)]
    else:
        blk.outputs = list(blk.outputs or []) + [rng.choice(names)]


def _m_swap_inputs(g: Any, rng: random.Random) -> None:
    op = _any_op(g, rng)
    if op is not None and op.inputs and len(op.inputs) > 1:
        rng.shuffle(op.inputs)
    elif op is not None:
        op.inputs = list(op.inputs or []) * 2


def _m_version(g: Any, rng: random.Random) -> None:
    if g.version is not None:
        g.version._Major = rng.choice((0, 1, 2, -1))
        g.version._Minor = rng.choice((0, 1, 80, 255))
        g.version._Draft = rng.random() < 0.5


def _m_repeat_refs(g: Any, rng: random.Random) -> None:
    """Many entries pointing at the same tensor, operator or name (expansion attacks)."""
    blk = _main_block(g)
    n = rng.choice((100, 1000, 5000))
    what = rng.randrange(3)
    if what == 0:
        big = max(blk.tensors, key=lambda t: len(t.data) if t.data is not None else 0)
        blk.tensors = blk.tensors + [Shared(big)] * n
    elif what == 1 and blk.operators:
        blk.operators = blk.operators + [Shared(rng.choice(blk.operators))] * n
    else:
        blk.outputs = list(blk.outputs or []) + ["y" * rng.choice((10, 2000, 65536))] * n


STRUCT_MUTATORS = {
    "huge_shape": _m_huge_shape, "bad_shape": _m_bad_shape, "dangling_ref": _m_dangling,
    "cyclic_ref": _m_cycle, "duplicate_output": _m_duplicate_output, "missing": _m_missing,
    "wrong_dtype": _m_wrong_type, "wrong_op": _m_wrong_op, "attr_values": _m_attr_values,
    "data_length": _m_data, "io_names": _m_io, "swap_inputs": _m_swap_inputs,
    "version": _m_version, "repeat_refs": _m_repeat_refs,
}


def structural(data: bytes, name: str, rng: random.Random) -> bytes:
    """Apply structural mutation ``name`` to a (valid) seed through the flatbuffer object API."""
    for _attempt in range(20):  # a value the schema field cannot hold: draw again
        g = _unpack(data)
        STRUCT_MUTATORS[name](g, rng)
        try:
            return _pack(g)
        except (TypeError, ValueError, OverflowError, struct.error):
            continue
    return data


class Cases:
    """Case ``i`` of a run: ``(seed name, mutation, bytes)``, a pure function of (seed, i)."""

    def __init__(self, seeds: dict[str, bytes], seed: int = 0, sweep: bool = True) -> None:
        self.seeds = seeds
        self.names = sorted(seeds)
        self.seed = seed
        self.sweep_name = min(self.names, key=lambda n: len(seeds[n]))
        self.sweep_len = len(seeds[self.sweep_name]) if sweep else 0

    def __call__(self, i: int) -> tuple[str, str, bytes]:
        if i < self.sweep_len:
            return self.sweep_name, "truncate_sweep", self.seeds[self.sweep_name][:i]
        rng = random.Random(self.seed * 1_000_003 + i)
        name = rng.choice(self.names)
        data = self.seeds[name]
        if rng.random() < 0.5:
            kind = rng.choice(sorted(BYTE_MUTATORS))
            out = bytes(BYTE_MUTATORS[kind](bytearray(data), rng, list(self.seeds.values())))
        else:
            kind = rng.choice(sorted(STRUCT_MUTATORS))
            out = structural(data, kind, rng)
            if rng.random() < 0.2:  # and a byte mutation on top
                extra = rng.choice(sorted(BYTE_MUTATORS))
                kind = f"{kind}+{extra}"
                out = bytes(BYTE_MUTATORS[extra](bytearray(out), rng, [data]))
        return name, kind, out


# ----------------------------------------------------------------------------- running


def run_case(data: bytes, call: bool = True) -> dict[str, Any]:
    """Load ``data`` (and call the model on zero inputs); classify what happened."""
    import tosa_jax

    stage = "load"
    try:
        model = tosa_jax.load(data, max_elements=MAX_ELEMENTS, max_bytes=MAX_BYTES)
        if not call:
            return {"outcome": "loaded"}
        stage = "call"
        inputs = [np.zeros(s.shape, s.np_dtype) for s in model.inputs]
        outs = model(*inputs)
        for o in outs if isinstance(outs, tuple) else (outs,):
            np.asarray(o)  # wait for the result
        return {"outcome": "ran"}
    except tosa_jax.TosaError as e:
        return {"outcome": "rejected", "stage": stage, "error": type(e).__name__,
                "message": str(e)[:300]}
    except BaseException as e:  # noqa: BLE001 - anything else is what we are looking for
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"outcome": "failure", "stage": stage, "error": type(e).__name__,
                "message": str(e)[:300], "traceback": traceback.format_exc()[-3000:]}


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _worker(mem_gib: float) -> None:
    """Run cases read from stdin (``id length\\n`` + bytes), one JSON line per case on stdout."""
    import resource

    limit = int(mem_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    inp, out = sys.stdin.buffer, sys.stdout
    import jax  # noqa: F401 - started before the first case, not inside its time

    out.write("ready\n")
    out.flush()
    while True:
        header = inp.readline()
        if not header:
            return
        case_id, n = (int(v) for v in header.split())
        data = inp.read(n)
        t0, rss0 = time.perf_counter(), _rss_kib()
        result = run_case(data)
        rss = _rss_kib()
        result.update(case=case_id, seconds=round(time.perf_counter() - t0, 4), rss_kib=rss,
                      rss_growth_kib=rss - rss0)
        out.write(json.dumps(result) + "\n")
        out.flush()


class Worker:
    """A worker process; ``run`` gives a case at most ``timeout`` seconds."""

    def __init__(self, mem_gib: float) -> None:
        self.mem_gib = mem_gib
        self.proc: subprocess.Popen | None = None
        self.stderr = tempfile.TemporaryFile()

    def _start(self) -> None:
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONFAULTHANDLER="1",
                   XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
        self.stderr.seek(0)
        self.stderr.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tosa_jax.testing.fuzz", "--worker",
             "--mem-gib", str(self.mem_gib)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
            start_new_session=True)
        if self._readline(300) != b"ready\n":
            raise RuntimeError(f"fuzz worker failed to start: {self._stderr_tail()}")

    def _readline(self, timeout: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else None

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-2000:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self.proc = None

    def run(self, case_id: int, data: bytes, timeout: float) -> dict[str, Any]:
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"%d %d\n" % (case_id, len(data)) + data)
            self.proc.stdin.flush()
            line = self._readline(timeout)
        except BrokenPipeError:
            line = b""
        if line:
            return json.loads(line)
        if line is None:  # no answer in time
            self.stop()
            return {"outcome": "hang", "case": case_id, "seconds": timeout}
        code = self.proc.wait()
        tail = self._stderr_tail()
        self.proc = None
        return {"outcome": "crash", "case": case_id, "returncode": code,
                "signal": signal.Signals(-code).name if code < 0 else None, "stderr": tail}


def run_pool(cases: Cases, ids: list[int], jobs: int, timeout: float, mem_gib: float,
             progress: bool = True) -> list[dict[str, Any]]:
    """Run the cases ``ids`` on ``jobs`` workers; returns one result per case, in order."""
    import queue
    import threading

    todo: queue.Queue[int] = queue.Queue()
    for i in ids:
        todo.put(i)
    results: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()
    t0 = time.time()

    def drive() -> None:
        worker = Worker(mem_gib)
        try:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                seed, kind, data = cases(i)
                r = worker.run(i, data, timeout)
                r.update(seed=seed, mutation=kind, size=len(data))
                with lock:
                    results[i] = r
                    done = len(results)
                if progress and done % 500 == 0:
                    print(f"  {done}/{len(ids)} cases, {time.time() - t0:.0f} s", flush=True)
        finally:
            worker.stop()

    threads = [threading.Thread(target=drive) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in ids]


def tally(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per outcome, rejections per error type (and stage), failures listed."""
    outcomes = collections.Counter(r["outcome"] for r in results)
    rejections = collections.Counter(r["error"] for r in results if r["outcome"] == "rejected")
    by_stage = collections.Counter(f"{r['stage']}:{r['error']}" for r in results
                                   if r["outcome"] == "rejected")
    by_mutation: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_mutation[r["mutation"].split("+")[0]][r["outcome"]] += 1
    bad = [r for r in results if r["outcome"] in ("failure", "crash", "hang")]
    seconds = [r.get("seconds", 0.0) for r in results]
    return {
        "cases": len(results), "crashes": outcomes["crash"], "hangs": outcomes["hang"],
        "failures": outcomes["failure"], "ran": outcomes["ran"],
        "rejected": outcomes["rejected"], "rejections_by_type": dict(rejections.most_common()),
        "rejections_by_stage": dict(by_stage.most_common()),
        "by_mutation": {k: dict(v) for k, v in sorted(by_mutation.items())},
        "slowest_case_s": max(seconds, default=0.0),
        "slowest_cases": [{k: r.get(k) for k in ("case", "seed", "mutation", "outcome",
                                                 "seconds")}
                          for r in sorted(results, key=lambda r: -r.get("seconds", 0))[:5]],
        "largest_rss_growth": [{k: r.get(k) for k in ("case", "seed", "mutation", "outcome",
                                                      "rss_growth_kib", "rss_kib")}
                               for r in sorted(results,
                                               key=lambda r: -r.get("rss_growth_kib", 0))[:5]],
        "worker_rss_mib_every_1000_cases": [round(r.get("rss_kib", 0) / 1024, 1)
                                            for r in results[::1000]],
        "max_worker_rss_mib": round(max((r.get("rss_kib", 0) for r in results), default=0)
                                    / 1024, 1),
        "problems": [{k: r.get(k) for k in ("case", "seed", "mutation", "outcome", "stage",
                                            "error", "message", "signal", "traceback")}
                     for r in bad],
    }


def _print(summary: dict[str, Any]) -> None:
    print(f"\ncases {summary['cases']}   crashes {summary['crashes']}   hangs {summary['hangs']}"
          f"   failures (non-TosaError) {summary['failures']}")
    print(f"loaded and ran {summary['ran']}   rejected with a TosaError {summary['rejected']}")
    print("\nrejections by error type (stage:type):")
    for k, v in summary["rejections_by_stage"].items():
        print(f"  {k:40s} {v:6d}")
    print("\nby mutation:")
    for k, v in summary["by_mutation"].items():
        print(f"  {k:20s} " + "  ".join(f"{o} {n}" for o, n in sorted(v.items())))
    print(f"\nslowest case {summary['slowest_case_s']:.2f} s, "
          f"largest worker RSS {summary['max_worker_rss_mib']} MiB")
    for p in summary["problems"][:20]:
        print(f"\nPROBLEM case {p['case']} ({p['seed']}, {p['mutation']}): {p['outcome']} "
              f"{p.get('error') or p.get('signal') or ''} {p.get('message') or ''}")
        if p.get("traceback"):
            print(p["traceback"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument("--mem-gib", type=float, default=4.0, help="address space per worker")
    ap.add_argument("--conformance", type=Path, help="conformance tests to take seeds from")
    ap.add_argument("--no-sweep", action="store_true", help="skip the truncation sweep")
    ap.add_argument("--json", type=Path, help="write the counts here")
    ap.add_argument("--save", type=Path, help="write the cases that crashed, hung or failed here")
    ap.add_argument("--replay", type=int, help="run this one case in this process")
    ap.add_argument("--write", type=Path, help="with --replay: write the case's bytes here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.mem_gib)
        return 0
    cases = Cases(seed_files(args.conformance), args.seed, sweep=not args.no_sweep)
    if args.replay is not None:
        seed, kind, data = cases(args.replay)
        print(f"case {args.replay}: seed {seed}, mutation {kind}, {len(data)} bytes")
        if args.write:
            args.write.write_bytes(data)
        print(json.dumps(run_case(data), indent=1))
        return 0
    print(f"fuzzing {args.cases} cases on {args.jobs} worker(s): {len(cases.names)} seeds, "
          f"truncation sweep of {cases.sweep_name} ({cases.sweep_len} offsets), "
          f"timeout {args.timeout} s, {args.mem_gib} GiB per worker", flush=True)
    t0 = time.time()
    results = run_pool(cases, list(range(args.cases)), args.jobs, args.timeout, args.mem_gib)
    summary = tally(results)
    summary.update(seed=args.seed, seeds=cases.names, seconds=round(time.time() - t0, 1),
                   jobs=args.jobs, timeout_s=args.timeout, mem_gib=args.mem_gib,
                   limits={"max_elements": MAX_ELEMENTS, "max_bytes": MAX_BYTES},
                   machine=f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus")
    _print(summary)
    print(f"\n{summary['seconds']} s")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for p in summary["problems"]:
            (args.save / f"case{p['case']}.tosa").write_bytes(cases(p["case"])[2])
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 1 if summary["crashes"] or summary["hangs"] or summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
