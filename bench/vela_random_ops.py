"""Random single-operator TOSA graphs for checking hw_models.support against Vela on cases that
the rules were not derived from (the rules were tuned on the conformance suite).

    python bench/vela_random_ops.py [-n 300] [--seed 1] [--timeout 5] [--json out.json]

Each graph is one operator (optionally followed by the RESCALE a network would put after a
convolution) with random shapes, element types and attributes, drawn to exercise the shape and
attribute rules (kernels, strides, padding, dilation, axes, permutations, constant or dynamic
weights). Graphs that break a TOSA ERROR_IF (``tosa_jax.profiles.validate``) are redrawn. Prints
agreement per accelerator and the disagreements.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tosa_jax import TosaError, write
from tosa_jax.hw_models.devices import get_device
from tosa_jax.hw_models.support import unsupported_reasons
from tosa_jax.hw_models.vela import VelaWorker
from tosa_jax.ir import Graph, GraphBuilder
from tosa_jax.profiles import validate

ACCELERATORS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
R = np.random.Generator


def _rescale(b: GraphBuilder, x: str, shape: tuple[int, ...], in_t: str, out_t: str) -> str:
    scale32 = in_t != "INT48"
    m = b.const([1 << 30] if scale32 else [1 << 14], "INT32" if scale32 else "INT16")
    s = b.const([36], "INT8")
    zi, zo = b.const([0], in_t if in_t != "INT48" else "INT48"), b.const([0], out_t)
    return b.op("RESCALE", [x, m, s, zi, zo], shape, out_t, scale32=scale32,
                rounding_mode="SINGLE_ROUND", per_channel=False, input_unsigned=False,
                output_unsigned=False)


def _div_pad(size: int, pad0: int, pad1: int, k: int, d: int, s: int) -> tuple[int, int]:
    """Bump pad1 so that (size - 1 + pads - (k-1)*d) is a multiple of the stride (ERROR_IF)."""
    span = size - 1 + pad0 + pad1 - (k - 1) * d
    return pad1 + (-span) % s, (span + (-span) % s) // s + 1


def conv(rng: R, op: str) -> Graph:
    b = GraphBuilder()
    i16 = rng.random() < 0.25
    in_t, acc = ("INT16", "INT48") if i16 else ("INT8", "INT32")
    n, h, w, c = int(rng.choice([1, 1, 2])), int(rng.integers(1, 40)), int(rng.integers(1, 40)), \
        int(rng.integers(1, 17))
    ky, kx = (int(rng.choice([1, 2, 3, 5, 9])) for _ in range(2))
    sy, sx = (int(rng.choice([1, 1, 2, 3, 4, 8])) for _ in range(2))
    dy, dx = (int(rng.choice([1, 1, 1, 2, 3])) for _ in range(2))
    pt, pb, pl, pr = (int(rng.choice([0, 0, 1, 2, 4])) for _ in range(4))
    pb, oh = _div_pad(h, pt, pb, ky, dy, sy)
    pr, ow = _div_pad(w, pl, pr, kx, dx, sx)
    if oh < 1 or ow < 1:
        raise ValueError("empty output")
    x = b.input("x", (n, h, w, c), in_t)
    if op == "DEPTHWISE_CONV2D":
        m = int(rng.choice([1, 1, 2]))
        wshape, oc = (ky, kx, c, m), c * m
    else:
        oc = int(rng.integers(1, 17))
        wshape = (oc, ky, kx, c)
    if rng.random() < 0.7:
        wt = b.const(rng.integers(-127, 128, wshape), "INT8")
    else:
        wt = b.input("w", wshape, "INT8")
    bias = b.const(rng.integers(-1000, 1000, (oc,)), acc) if rng.random() < 0.8 else \
        b.input("bias", (oc,), acc)
    zi, zw = b.const([0], in_t), b.const([0], "INT8")
    y = b.op(op, [x, wt, bias, zi, zw], (n, oh, ow, oc), acc, pad=(pt, pb, pl, pr),
             stride=(sy, sx), dilation=(dy, dx), acc_type=acc, local_bound=False)
    if rng.random() < 0.6:
        y = _rescale(b, y, (n, oh, ow, oc), acc, in_t)
    return b.build([y])


def transpose_conv(rng: R) -> Graph:
    b = GraphBuilder()
    i16 = rng.random() < 0.25
    in_t, acc = ("INT16", "INT48") if i16 else ("INT8", "INT32")
    n, h, w, c = 1, int(rng.choice([1, 3, 9, 20])), int(rng.choice([1, 3, 9, 20])), \
        int(rng.integers(1, 9))
    ky, kx = (int(rng.choice([1, 2, 3, 5])) for _ in range(2))
    sy, sx = (int(rng.choice([1, 2, 2, 3])) for _ in range(2))
    pads = [int(rng.choice([0, 0, -1, 1])) for _ in range(4)]
    pads = [max(p, -(k - 1)) for p, k in zip(pads, (ky, ky, kx, kx), strict=True)]
    oh = (h - 1) * sy + pads[0] + pads[1] + ky
    ow = (w - 1) * sx + pads[2] + pads[3] + kx
    oc = int(rng.integers(1, 9))
    x = b.input("x", (n, h, w, c), in_t)
    wt = b.const(rng.integers(-127, 128, (oc, ky, kx, c)), "INT8")
    bias = b.const(rng.integers(-100, 100, (oc,)), acc)
    zi, zw = b.const([0], in_t), b.const([0], "INT8")
    y = b.op("TRANSPOSE_CONV2D", [x, wt, bias, zi, zw], (n, oh, ow, oc), acc,
             out_pad=tuple(pads), stride=(sy, sx), acc_type=acc, local_bound=False)
    if rng.random() < 0.6:
        y = _rescale(b, y, (n, oh, ow, oc), acc, in_t)
    return b.build([y])


def pool(rng: R, op: str) -> Graph:
    b = GraphBuilder()
    dt = str(rng.choice(["INT8", "INT16"]))
    n, h, w, c = int(rng.choice([1, 1, 2])), int(rng.integers(1, 40)), int(rng.integers(1, 40)), \
        int(rng.integers(1, 9))
    ky, kx = (int(rng.choice([1, 2, 3, 5, 9, 12])) for _ in range(2))
    sy, sx = (int(rng.choice([1, 2, 3, 4, 7])) for _ in range(2))
    padded = rng.random() < 0.5
    pt, pb, pl, pr = ((int(rng.integers(0, k)) if padded else 0) for k in (ky, ky, kx, kx))
    pb, oh = _div_pad(h, pt, pb, ky, 1, sy)
    pr, ow = _div_pad(w, pl, pr, kx, 1, sx)
    if oh < 1 or ow < 1 or pb >= ky or pr >= kx:
        raise ValueError("bad pool")
    x = b.input("x", (n, h, w, c), dt)
    if op == "AVG_POOL2D":
        zi, zo = b.const([0], dt), b.const([0], dt)
        y = b.op(op, [x, zi, zo], (n, oh, ow, c), dt, kernel=(ky, kx), stride=(sy, sx),
                 pad=(pt, pb, pl, pr), acc_type="INT32")
    else:
        y = b.op(op, [x], (n, oh, ow, c), dt, kernel=(ky, kx), stride=(sy, sx),
                 pad=(pt, pb, pl, pr), nan_mode="PROPAGATE")
    return b.build([y])


def _shape(rng: R, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
    rank = int(rng.integers(lo, hi + 1))
    return tuple(int(rng.choice([1, 2, 3, 5, 8, 13, 30])) for _ in range(rank))


def reverse(rng: R) -> Graph:
    b = GraphBuilder()
    dt = str(rng.choice(["INT8", "INT16", "INT32"]))
    shape = _shape(rng, 1, 6)
    x = b.input("x", shape, dt)
    return b.build([b.op("REVERSE", [x], shape, dt, axis=int(rng.integers(0, len(shape))))])


def transpose(rng: R) -> Graph:
    b = GraphBuilder()
    dt = str(rng.choice(["INT8", "INT16", "INT32"]))
    shape = _shape(rng, 2, 6)
    perm = tuple(int(p) for p in rng.permutation(len(shape)))
    x = b.input("x", shape, dt)
    return b.build([b.op("TRANSPOSE", [x], tuple(shape[p] for p in perm), dt, perms=perm)])


def argmax(rng: R) -> Graph:
    b = GraphBuilder()
    dt = str(rng.choice(["INT8", "INT16"]))
    shape = _shape(rng, 1, 5)
    axis = int(rng.integers(0, len(shape)))
    x = b.input("x", shape, dt)
    out = shape[:axis] + shape[axis + 1:]
    return b.build([b.op("ARGMAX", [x], out, "INT32", axis=axis, nan_mode="PROPAGATE")])


def reduce(rng: R) -> Graph:
    b = GraphBuilder()
    op = str(rng.choice(["REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN"]))
    dt = "INT32" if op == "REDUCE_SUM" else str(rng.choice(["INT8", "INT16", "INT32"]))
    shape = _shape(rng, 1, 5)
    axis = int(rng.integers(0, len(shape)))
    x = b.input("x", shape, dt)
    out = tuple(1 if i == axis else d for i, d in enumerate(shape))
    return b.build([b.op(op, [x], out, dt, axis=axis)])


def matmul(rng: R) -> Graph:
    b = GraphBuilder()
    dt, acc = ("INT16", "INT48") if rng.random() < 0.3 else ("INT8", "INT32")
    n, h, c, w = (int(rng.integers(1, 3)), int(rng.integers(1, 20)), int(rng.integers(1, 70)),
                  int(rng.integers(1, 20)))
    a = b.input("a", (n, h, c), dt)
    bb = b.input("b", (n, c, w), dt) if rng.random() < 0.7 else \
        b.const(rng.integers(-100, 100, (n, c, w)), dt)
    za, zb = b.const([0], dt), b.const([0], dt)
    y = b.op("MATMUL", [a, bb, za, zb], (n, h, w), acc)
    if rng.random() < 0.5:
        y = _rescale(b, y, (n, h, w), acc, dt)
    return b.build([y])


def resize(rng: R) -> Graph:
    b = GraphBuilder()
    dt = str(rng.choice(["INT8", "INT16"]))
    mode = str(rng.choice(["NEAREST", "BILINEAR"]))
    h, w, c = int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 5))
    yn, xn = (int(rng.choice([1, 2, 3, 4, 8])) for _ in range(2))
    yd, xd = (int(rng.choice([1, 1, 1, 2])) for _ in range(2))
    by, bx = (-(h - 1) * yn) % yd, (-(w - 1) * xn) % xd
    oh, ow = ((h - 1) * yn + by) // yd + 1, ((w - 1) * xn + bx) // xd + 1
    out_t = dt if mode == "NEAREST" else ("INT32" if dt == "INT8" else "INT48")
    x = b.input("x", (1, h, w, c), dt)
    sc, off, bo = (b.const([yn, yd, xn, xd], "SHAPE"), b.const([0, 0], "SHAPE"),
                   b.const([by, bx], "SHAPE"))
    y = b.op("RESIZE", [x, sc, off, bo], (1, oh, ow, c), out_t, mode=mode)
    if mode == "BILINEAR" and rng.random() < 0.6:
        y = _rescale(b, y, (1, oh, ow, c), out_t, dt)
    return b.build([y])


def elementwise(rng: R) -> Graph:
    b = GraphBuilder()
    op = str(rng.choice(["ADD", "SUB", "MAXIMUM", "MINIMUM", "LOGICAL_LEFT_SHIFT",
                         "ARITHMETIC_RIGHT_SHIFT", "MUL", "ABS", "CLZ", "TABLE", "CAST"]))
    dt = str(rng.choice(["INT8", "INT16", "INT32"]))
    shape = _shape(rng, 1, 5)
    x = b.input("x", shape, dt)
    if op in ("ADD", "SUB", "MAXIMUM", "MINIMUM", "LOGICAL_LEFT_SHIFT"):
        y = b.op(op, [x, b.input("y", shape, dt)], shape, dt)
    elif op == "ARITHMETIC_RIGHT_SHIFT":
        y = b.op(op, [x, b.input("y", shape, dt)], shape, dt, round=bool(rng.random() < 0.5))
    elif op == "MUL":
        y = b.op(op, [x, b.input("y", shape, dt), b.const([0], "INT8")], shape, "INT32")
    elif op == "ABS":
        y = b.op(op, [x], shape, dt)
    elif op == "CLZ":
        x = b.input("x32", shape, "INT32")
        y = b.op(op, [x], shape, "INT32")
    elif op == "TABLE":
        if dt == "INT16":
            y = b.op(op, [x, b.const(rng.integers(-1000, 1000, (513,)), "INT16")], shape,
                     "INT32")
        else:
            x = b.input("x8", shape, "INT8")
            y = b.op(op, [x, b.const(rng.integers(-128, 128, (256,)), "INT8")], shape, "INT8")
    else:
        out = str(rng.choice([t for t in ("INT8", "INT16", "INT32") if t != dt]))
        y = b.op("CAST", [x], shape, out)
    g = b.build([y])
    g.main.inputs = [i for i in g.main.inputs if any(i in o.inputs for o in g.main.operators)]
    return g


GENERATORS: list[tuple[str, Callable[[R], Graph]]] = [
    ("conv2d", lambda r: conv(r, "CONV2D")), ("depthwise", lambda r: conv(r, "DEPTHWISE_CONV2D")),
    ("transpose_conv2d", transpose_conv), ("avg_pool2d", lambda r: pool(r, "AVG_POOL2D")),
    ("max_pool2d", lambda r: pool(r, "MAX_POOL2D")), ("reverse", reverse),
    ("transpose", transpose), ("argmax", argmax), ("reduce", reduce), ("matmul", matmul),
    ("resize", resize), ("elementwise", elementwise),
]


def draw(rng: R, gen: Callable[[R], Graph]) -> Graph:
    for _ in range(200):
        try:
            g = gen(rng)
            validate(g)
            return g
        except (ValueError, TosaError):
            continue
    raise RuntimeError("could not draw a valid graph")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=300, help="graphs in all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated generator names")
    args = ap.parse_args(argv)
    gens = [g for g in GENERATORS if not args.only or g[0] in args.only.split(",")]
    rng = np.random.default_rng(args.seed)
    cases: list[dict[str, Any]] = []
    with VelaWorker() as worker, tempfile.TemporaryDirectory() as tmp:
        for i in range(args.n):
            name, gen = gens[i % len(gens)]
            g = draw(rng, gen)
            path = Path(tmp) / f"g{i}.tosa"
            path.write_bytes(write(g))
            for acc in ACCELERATORS:
                v = worker.verdict(path, acc, args.timeout)
                dev = get_device(acc)
                for k, op in enumerate(g.main.operators):
                    if op.op in ("CONST", "CONST_SHAPE"):
                        continue
                    reasons = unsupported_reasons(dev, g, g.main, op)
                    t = {}
                    for n in op.inputs + op.outputs:
                        tn = g.main.tensors[n]
                        small = tn.data is not None and tn.data.size <= 8
                        t[n] = (tn.shape, tn.dtype, tn.data.ravel().tolist() if small
                                else tn.data is not None)
                    cases.append({"gen": name, "graph": i, "op": op.op, "accelerator": acc,
                                  "ours": not reasons, "reasons": reasons,
                                  "vela": v.on_npu.get(k), "vela_error": v.error,
                                  "attrs": {a: str(x) for a, x in op.attrs.items()},
                                  "tensors": {n: str(x) for n, x in t.items()}})
    worst = 100.0
    for acc in ACCELERATORS:
        known = [c for c in cases if c["accelerator"] == acc and c["vela"] is not None]
        agree = sum(c["ours"] == c["vela"] for c in known)
        pct = 100.0 * agree / max(1, len(known))
        worst = min(worst, pct)
        unknown = sum(1 for c in cases if c["accelerator"] == acc and c["vela"] is None)
        print(f"{acc:16} {agree}/{len(known)} agree ({pct:.2f}%), Vela unknown {unknown}")
    for c in cases:
        if c["vela"] is not None and c["ours"] != c["vela"]:
            side = "ours NPU, Vela CPU" if c["ours"] else "ours CPU, Vela NPU"
            why = c["reasons"][0] if c["reasons"] else (c["vela_error"] or "")[:80]
            print(f"  {c['accelerator']} {c['op']} [{side}] {why} {c['attrs']} {c['tensors']}")
    if args.json:
        args.json.write_text(json.dumps(cases, indent=1))
    return 0 if worst >= 99.0 else 1


if __name__ == "__main__":
    sys.exit(main())
