"""Integer graph functions run by numpy, without XLA: the first result of a small graph.

A graph run once (a test, a debugging run, ``tosa_jax.reference_model.run`` inside ExecuTorch's
test suite) pays for an XLA executable it uses once: a quick-tier compile on its first run
(75 ms for cnn_int8's 28 operators), and on every later process XLA's rebuild of the cached
executable (2-30 ms) and its first run, where the reference model answers in well under a
millisecond. This module runs the traced graph function itself, one numpy call per JAX
primitive of its jaxpr (cnn_int8: 375 of them).

Only programs whose every value is a boolean or an integer are taken (``from_jaxpr`` raises
``Unsupported`` for anything else, and the caller compiles as before). Each kernel computes its
primitive's exact XLA semantics on integers (two's-complement wrap-around, shifts by the width or
more, division by zero, index clamping), so that the results are bit-identical to the XLA
executable's, and through it to the reference model's: checked primitive by primitive against
XLA (tests/unit/test_npexec.py) and, in CI, on every integer graph of the conformance slices,
whose SUT runs both engines (tosa_jax.testing.conformance_sut). Floating-point programs are left
to XLA: numpy's
summation order and XLA's multiply-add contraction would change a float result's last bits from
one call to the next.

A program is plain data (lists, dicts, strings, numbers, numpy arrays): the compile cache keeps
it, and a later process runs it without importing JAX.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FORMAT = 1
# Which graphs start on numpy: those whose run is estimated (``cost_ms``) at most BUDGET_MS.
# Their calls run on numpy until XLA's optimized executable is ready (compiled from the second
# call on, in the background), so a loop over samples waits for no compile but runs slower
# for its first seconds. Measured 2026-11-27 (Zen 3, one core busy), first result, fresh
# process, empty cache, XLA's quick tier -> numpy, two runs each: cnn_int8 (estimated 2.6 ms a
# run) 0.39 -> 0.17 s, mlp_attn_int8 (2.6 ms) 0.71-0.79 -> 0.28-0.37 s, lstm_int8 (58 ms)
# 2.4-2.7 -> 1.4-1.8 s, bert_tiny_int8 (93 ms) 2.1-2.3 -> 1.2 s, whose next calls then take
# 100-370 ms on numpy (with the compile beside them) against 27-30 ms on the quick tier, until
# the optimized executable takes over; unet_int8 (182 ms) 5.2 -> 1.7-1.9 s, but 0.4-0.9 s a
# call after that: over the budget, as are resnet_int8 and mobilenetv2_int8 (540 ms).
BUDGET_MS = 100.0
MAX_MACS = 100_000_000  # integer multiply-adds a call: not traced for numpy above
MAX_ELEMENTS = 1 << 20  # in the largest tensor
# The estimate (ns): a numpy call's own cost, then per element written and per multiply-add
# (the products run in float64 by the BLAS, operands converted and a convolution's patches
# copied first); fitted on the fixtures and the zoo's integer graphs, within a factor of 2.
_NS_CALL, _NS_ELEMENT, _NS_MAC = 4_000, 1.0, 1.0
# float64 holds every integer below 2^53 exactly: an integer matrix product whose partial sums
# all stay below this in magnitude (max|a| * max|b| * K) is computed exactly by the BLAS in
# float64 (far faster than numpy's integer loops), then wrapped to the result type as XLA's
# integer arithmetic wraps.
_EXACT_F64 = float(2 ** 53)


def enabled() -> bool:
    """``TOSA_JAX_NPEXEC=0`` turns the numpy programs off (every call then runs XLA's code)."""
    return os.environ.get("TOSA_JAX_NPEXEC", "1").strip().lower() not in ("0", "off", "false",
                                                                          "no")


def cost_ms(program: dict[str, Any]) -> float:
    """The estimated time of one run of ``program`` (a while loop's body counted once)."""
    return program["cost_ns"] / 1e6


class Unsupported(Exception):
    """The jaxpr holds something this module does not run (a float, a primitive)."""


# -- conversion from a jaxpr (needs JAX's objects, not JAX itself) ------------------------------


def from_jaxpr(closed: Any, platform: str = "cpu") -> dict[str, Any]:
    """The program of a ClosedJaxpr: its inputs are the jaxpr's inputs, in order."""
    conv = _Converter(platform)
    program = conv.program(closed.jaxpr, list(closed.consts))
    program["format"] = FORMAT
    program["bytes"] = conv.bytes
    return program


def _np_dtype(aval: Any) -> np.dtype:
    dtype = np.dtype(aval.dtype)
    if dtype.kind not in "biu":
        raise Unsupported(f"a {dtype} value")
    return dtype


class _Converter:
    def __init__(self, platform: str) -> None:
        self.platform = platform
        # An upper bound on the memory a run takes: every value kept to the end, and the
        # float64 copies of the matrix products' operands (a convolution's patches).
        self.bytes = 0

    def program(self, jaxpr: Any, consts: list[Any]) -> dict[str, Any]:
        slots: dict[Any, int] = {}
        shapes: list[tuple[int, ...]] = []

        def slot(v: Any) -> int:
            if v not in slots:
                self.bytes += _np_dtype(v.aval).itemsize * _size(v.aval.shape)
                slots[v] = len(slots)
                shapes.append(tuple(v.aval.shape))
            return slots[v]

        const_slots = {}
        for v, c in zip(jaxpr.constvars, consts, strict=True):
            const_slots[slot(v)] = np.asarray(c)
        inputs = [slot(v) for v in jaxpr.invars]
        eqns: list[tuple[str, Any, list[Any], list[int]]] = []
        self._eqns(jaxpr, slots, slot, eqns)
        outputs = [self._arg(v, slots) for v in jaxpr.outvars]
        _lazy_broadcasts(eqns, shapes, outputs)
        out_avals = [(tuple(v.aval.shape), _np_dtype(v.aval).str) for v in jaxpr.outvars]
        return {"n": len(slots), "inputs": inputs, "consts": const_slots, "eqns": eqns,
                "outputs": outputs, "out_avals": out_avals, "cost_ns": _cost(eqns, shapes)}

    def _arg(self, v: Any, slots: dict[Any, int]) -> Any:
        if hasattr(v, "val"):  # a Literal
            return np.asarray(v.val, _np_dtype(v.aval))
        return slots[v]

    def _eqns(self, jaxpr: Any, slots: dict[Any, int], slot: Callable[[Any], int],
              eqns: list[Any]) -> None:
        # Values known at conversion (platform_index) fold the cond that reads them.
        known: dict[Any, int] = {}
        for e in jaxpr.eqns:
            name = e.primitive.name
            p = e.params
            if name == "platform_index":
                known[e.outvars[0]] = _platform_index(p["platforms"], self.platform)
                continue
            if name in ("jit", "pjit", "custom_jvp_call", "custom_vjp_call", "closed_call",
                        "core_call", "remat", "checkpoint") or (
                    name == "cond" and e.invars[0] in known):
                if name == "cond":
                    index = min(max(known[e.invars[0]], 0), len(p["branches"]) - 1)
                    sub, ins = p["branches"][index], e.invars[1:]
                else:
                    sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
                    ins = e.invars
                    if sub is None:
                        raise Unsupported(f"primitive {name}")
                self._inline(sub, ins, e.outvars, slots, slot, eqns)
                continue
            ins = [self._arg(v, slots) for v in e.invars]
            outs = [-1 if type(v).__name__ == "DropVar" else slot(v) for v in e.outvars]
            encode = _ENCODERS.get(name)
            if encode is None:
                raise Unsupported(f"primitive {name}")
            eqns.append((name, encode(self, e), ins, outs))

    def _inline(self, sub: Any, ins: Sequence[Any], outs: Sequence[Any],
                slots: dict[Any, int], slot: Callable[[Any], int], eqns: list[Any]) -> None:
        inner = sub.jaxpr if hasattr(sub, "jaxpr") else sub
        consts = list(sub.consts) if hasattr(sub, "consts") else []
        for v, c in zip(inner.constvars, consts, strict=True):
            eqns.append(("const", np.asarray(c), [], [slot(v)]))
        for v, a in zip(inner.invars, ins, strict=True):
            src = self._arg(a, slots)
            eqns.append(("copy", None, [src], [slot(v)]))
        self._eqns(inner, slots, slot, eqns)
        for v, a in zip(outs, inner.outvars, strict=True):
            if type(v).__name__ == "DropVar":
                continue
            eqns.append(("copy", None, [self._arg(a, slots)], [slot(v)]))


# Primitives of one result whose numpy kernels broadcast their operands against each other.
_ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "eq", "ne", "lt", "le",
    "gt", "ge", "shift_left", "shift_right_arithmetic", "shift_right_logical", "select_n",
    "clamp"})


def _lazy_broadcasts(eqns: list[Any], shapes: list[tuple[int, ...]], outputs: list[Any]) -> None:
    """Leave unmaterialized the broadcasts whose every use is an elementwise primitive with
    another operand of the full shape: numpy's own broadcasting then gives the same values, and
    a broadcast copy (and arithmetic on a strided view) costs more than the arithmetic itself."""
    uses: dict[int, list[int]] = {}
    for k, (_, _, ins, _) in enumerate(eqns):
        for i in ins:
            if type(i) is int:
                uses.setdefault(i, []).append(k)
    lazy = {}
    for k, (name, _, _, outs) in enumerate(eqns):
        if name == "broadcast_in_dim" and outs[0] not in outputs:
            s = outs[0]
            if all(eqns[u][0] in _ELEMENTWISE and shapes[eqns[u][3][0]] == shapes[s]
                   for u in uses.get(s, [])):
                lazy[s] = k
    changed = True
    while changed:  # each use needs a materialized operand of the full shape
        changed = False
        for s in list(lazy):
            if not all(any(type(i) is int and i not in lazy and shapes[i] == shapes[s]
                           for i in eqns[u][2]) for u in uses.get(s, [])):
                del lazy[s]
                changed = True
    for k in lazy.values():
        name, params, ins, outs = eqns[k]
        eqns[k] = ("broadcast_lazy", params, ins, outs)


def _cost(eqns: list[Any], shapes: list[tuple[int, ...]]) -> float:
    """The estimated nanoseconds of a run of these eqns (see _NS_CALL)."""
    total = 0.0
    for name, params, ins, outs in eqns:
        written = sum(_size(shapes[o]) for o in outs if o >= 0)
        total += _NS_CALL + _NS_ELEMENT * written
        if name == "dot_general":
            k = _size([shapes[ins[0]][d] for d in params["lc"]]) if type(ins[0]) is int else 1
            total += _NS_MAC * written * k
        elif name == "conv_general_dilated" and type(ins[1]) is int:
            rhs = shapes[ins[1]]
            total += _NS_MAC * written * _size(rhs) // max(rhs[params["rhs_spec"][0]], 1)
        elif name == "cond":
            total += max(b["cost_ns"] for b in params)
        elif name == "while":
            total += params["cond"]["cost_ns"] + params["body"]["cost_ns"]
        elif name == "scan":
            total += params["length"] * params["body"]["cost_ns"]
    return total


def _platform_index(platforms: Sequence[Any], platform: str) -> int:
    for i, names in enumerate(platforms):
        if names is not None and platform in names:
            return i
    for i, names in enumerate(platforms):
        if names is None:
            return i
    raise Unsupported(f"no branch for platform {platform}")


def _sub(conv: _Converter, closed: Any) -> dict[str, Any]:
    return conv.program(closed.jaxpr, list(closed.consts))


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _out_dtype(e: Any) -> str:
    return _np_dtype(e.outvars[0].aval).str


def _enc_none(conv: _Converter, e: Any) -> Any:
    return None


def _enc_keys(*names: str) -> Callable[[_Converter, Any], Any]:
    def encode(conv: _Converter, e: Any) -> Any:
        return {k: _plain(e.params[k]) for k in names}
    return encode


def _plain(v: Any) -> Any:
    """A parameter as plain data: tuples of ints (nested), numbers, strings, numpy dtypes."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, np.dtype) or type(v).__name__ == "dtype":
        return np.dtype(v).str
    if isinstance(v, np.integer):
        return int(v)
    raise Unsupported(f"parameter {v!r}")


def _enc_reshape(conv: _Converter, e: Any) -> Any:
    if e.params.get("dimensions") is not None:
        raise Unsupported("reshape with dimensions")
    return {"new_sizes": _plain(e.params["new_sizes"])}


def _enc_convert(conv: _Converter, e: Any) -> Any:
    return _out_dtype(e)


def _enc_dot(conv: _Converter, e: Any) -> Any:
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    conv.bytes += 8 * sum(_size(v.aval.shape) for v in (*e.invars, *e.outvars))
    return {"lc": tuple(lc), "rc": tuple(rc), "lb": tuple(lb), "rb": tuple(rb),
            "out": _out_dtype(e)}


def _enc_conv(conv: _Converter, e: Any) -> Any:
    p = e.params
    dn = p["dimension_numbers"]
    if p["batch_group_count"] != 1:
        raise Unsupported("conv_general_dilated batch_group_count")
    padding = p["padding"]
    if isinstance(padding, str):
        raise Unsupported("conv_general_dilated padding " + padding)
    # the patches: every output position times the kernel's window of input features, in
    # float64, beside the padded input
    lhs, rhs, out = e.invars[0].aval, e.invars[1].aval, e.outvars[0].aval
    window = _size(rhs.shape) // rhs.shape[dn.rhs_spec[0]]
    padded = lhs.shape[dn.lhs_spec[0]] * lhs.shape[dn.lhs_spec[1]]
    for k, d in enumerate(dn.lhs_spec[2:]):
        lo, hi = padding[k]
        ldil = (p["lhs_dilation"] or (1,) * len(padding))[k]
        padded *= max((lhs.shape[d] - 1) * ldil + 1 + lo + hi, 0)
    conv.bytes += 8 * (_size(out.shape) // out.shape[dn.out_spec[1]] * window
                       + _size(out.shape) + _size(rhs.shape)) + 2 * padded * lhs.dtype.itemsize
    return {"strides": tuple(p["window_strides"]), "padding": _plain(padding),
            "lhs_dilation": tuple(p["lhs_dilation"] or ()),
            "rhs_dilation": tuple(p["rhs_dilation"] or ()),
            "lhs_spec": tuple(dn.lhs_spec), "rhs_spec": tuple(dn.rhs_spec),
            "out_spec": tuple(dn.out_spec), "groups": int(p["feature_group_count"]),
            "out": _out_dtype(e)}


def _enc_gather(conv: _Converter, e: Any) -> Any:
    p = e.params
    dn = p["dimension_numbers"]
    return {"offset_dims": tuple(dn.offset_dims),
            "collapsed": tuple(dn.collapsed_slice_dims),
            "start_index_map": tuple(dn.start_index_map),
            "operand_batching": tuple(getattr(dn, "operand_batching_dims", ())),
            "indices_batching": tuple(getattr(dn, "start_indices_batching_dims", ())),
            "slice_sizes": tuple(p["slice_sizes"]), "mode": _mode(p["mode"]),
            "fill": p.get("fill_value")}


def _enc_scatter(conv: _Converter, e: Any) -> Any:
    p = e.params
    dn = p["dimension_numbers"]
    return {"update_window_dims": tuple(dn.update_window_dims),
            "inserted": tuple(dn.inserted_window_dims),
            "to_operand": tuple(dn.scatter_dims_to_operand_dims),
            "operand_batching": tuple(getattr(dn, "operand_batching_dims", ())),
            "indices_batching": tuple(getattr(dn, "scatter_indices_batching_dims", ())),
            "mode": "clip" if "CLIP" in str(p["mode"]).upper() else "drop"}


def _mode(mode: Any) -> str:
    text = str(mode).upper()
    if "FILL" in text:
        return "fill"
    if "CLIP" in text or "PROMISE" in text:
        return "clip"
    raise Unsupported(f"gather/scatter mode {mode}")


def _enc_window(conv: _Converter, e: Any) -> Any:
    p = e.params
    if any(d != 1 for d in p["base_dilation"]):
        raise Unsupported("reduce_window base dilation")
    return {"window": tuple(p["window_dimensions"]), "strides": tuple(p["window_strides"]),
            "padding": _plain(p["padding"]), "dilation": tuple(p["window_dilation"])}


def _enc_cond(conv: _Converter, e: Any) -> Any:
    return [_sub(conv, b) for b in e.params["branches"]]


def _enc_while(conv: _Converter, e: Any) -> Any:
    p = e.params
    return {"cond": _sub(conv, p["cond_jaxpr"]), "body": _sub(conv, p["body_jaxpr"]),
            "cond_nconsts": p["cond_nconsts"], "body_nconsts": p["body_nconsts"]}


def _enc_scan(conv: _Converter, e: Any) -> Any:
    p = e.params
    return {"body": _sub(conv, p["jaxpr"]), "consts": p["num_consts"],
            "carry": p["num_carry"], "length": p["length"], "reverse": bool(p["reverse"])}


def _enc_iota(conv: _Converter, e: Any) -> Any:
    p = e.params
    return {"dtype": _out_dtype(e), "shape": tuple(p["shape"]), "dimension": p["dimension"]}


def _enc_argminmax(conv: _Converter, e: Any) -> Any:
    return {"axes": tuple(e.params["axes"]), "out": _out_dtype(e)}


# -- execution (numpy only) ---------------------------------------------------------------------


def run(program: dict[str, Any], args: Sequence[Any]) -> list[np.ndarray]:
    """The program's outputs for ``args`` (numpy arrays of its inputs' types)."""
    with np.errstate(all="ignore"):  # integer wrap-around is the defined result
        # C order, as XLA's results are: a caller may read the bytes (ExecuTorch's runner
        # does), and a transpose or a broadcast is a strided view here
        return [np.asarray(o, order="C") for o in _run(program, [np.asarray(a) for a in args])]


def _run(program: dict[str, Any], args: Sequence[np.ndarray]) -> list[Any]:
    env: list[Any] = [None] * program["n"]
    for s, a in zip(program["inputs"], args, strict=True):
        env[s] = a
    for s, c in program["consts"].items():
        env[s] = c
    kernels = _KERNELS
    for name, params, ins, outs in program["eqns"]:
        vals = [env[i] if type(i) is int else i for i in ins]
        result = kernels[name](params, *vals)
        if type(result) is not list:  # (the kernels of several results return lists)
            env[outs[0]] = result
        else:
            for s, r in zip(outs, result, strict=True):
                if s >= 0:
                    env[s] = r
    return [env[o] if type(o) is int else o for o in program["outputs"]]


def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


def _signed(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"i{dtype.itemsize}")


def _amount(s: np.ndarray) -> int | None:
    """A shift amount given as one number, as XLA reads it (unsigned); None for an array."""
    if np.ndim(s) != 0:
        return None
    return int(s) & ((1 << (8 * np.asarray(s).dtype.itemsize)) - 1)


def _shift_left(p: Any, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    n = _amount(s)
    if n is not None:
        return np.zeros_like(x) if n >= bits else np.left_shift(x, x.dtype.type(n))
    u = np.asarray(s).astype(_unsigned(s.dtype))  # XLA: the amount as unsigned
    ok = u < bits
    r = np.left_shift(x, np.where(ok, u, 0).astype(x.dtype))
    return np.where(ok, r, np.zeros((), x.dtype))


def _shift_right_arithmetic(p: Any, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    n = _amount(s)
    if n is not None and x.dtype.kind == "i":  # the sign fills past the width
        return np.right_shift(x, x.dtype.type(min(n, bits - 1)))
    u = np.asarray(s).astype(_unsigned(s.dtype))
    xs = np.asarray(x).view(_signed(x.dtype))
    r = np.right_shift(xs, np.minimum(u, bits - 1).astype(xs.dtype))  # the sign fills past it
    return np.asarray(r).view(x.dtype)


def _shift_right_logical(p: Any, x: np.ndarray, s: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    n = _amount(s)
    if n is not None:
        if n >= bits:
            return np.zeros_like(x)
        u = _unsigned(x.dtype)
        return np.right_shift(np.asarray(x).view(u), u.type(n)).view(x.dtype)
    u = np.asarray(s).astype(_unsigned(s.dtype))
    xu = np.asarray(x).view(_unsigned(x.dtype))
    ok = u < bits
    r = np.right_shift(xu, np.where(ok, u, 0).astype(xu.dtype))
    return np.where(ok, r, np.zeros((), xu.dtype)).view(x.dtype)


def _div(p: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XLA's integer division: truncated; x / 0 = -1 (all ones), MIN / -1 = MIN."""
    dtype = np.result_type(a, b)
    wide = np.int64 if dtype.itemsize < 8 or dtype.kind == "i" else np.uint64
    a64, b64 = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    zero = b64 == 0
    safe = np.where(zero, 1, b64)
    if dtype.kind == "u":
        q = a64 // safe
    else:
        q = np.abs(a64) // np.abs(safe)
        q = np.where((a64 < 0) != (safe < 0), -q, q)
    return np.where(zero, np.asarray(-1).astype(dtype), q.astype(dtype))


def _rem(p: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XLA's integer remainder: the dividend's sign; x % 0 = x."""
    dtype = np.result_type(a, b)
    a64, b64 = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    zero = b64 == 0
    r = np.fmod(a64, np.where(zero, 1, b64))
    return np.where(zero, a64, r).astype(dtype)


def _convert(p: str, x: np.ndarray) -> np.ndarray:
    dtype = np.dtype(p)
    if dtype.kind == "b":
        return np.asarray(x) != 0
    return np.asarray(x).astype(dtype)


def _bitcast(p: str, x: np.ndarray) -> np.ndarray:
    dtype = np.dtype(p)
    x = np.asarray(x)
    if not x.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-D)
        x = x.copy()
    if dtype.itemsize == x.dtype.itemsize:
        return x.view(dtype)
    if dtype.itemsize < x.dtype.itemsize:  # one element becomes a last axis of several
        return x.reshape(*x.shape, 1).view(dtype)
    return x.view(dtype).reshape(x.shape[:-1])


def _broadcast_in_dim(p: dict[str, Any], x: np.ndarray, *dyn: Any) -> np.ndarray:
    shape = p["shape"]
    full = [1] * len(shape)
    for i, d in enumerate(p["broadcast_dimensions"]):
        full[d] = np.shape(x)[i]
    return np.broadcast_to(np.reshape(x, full), shape)


def _broadcast_lazy(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """broadcast_in_dim's axes only (see _lazy_broadcasts)."""
    if np.ndim(x) == 0:
        return x
    full = [1] * len(p["shape"])
    for i, d in enumerate(p["broadcast_dimensions"]):
        full[d] = np.shape(x)[i]
    return np.reshape(x, full)


def _slice(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    strides = p["strides"] or (1,) * len(p["start_indices"])
    return x[tuple(slice(a, b, s) for a, b, s in zip(p["start_indices"], p["limit_indices"],
                                                       strides, strict=True))]


def _pad(p: dict[str, Any], x: np.ndarray, value: np.ndarray) -> np.ndarray:
    """lax.pad: ``lo``/``hi`` elements (negative: removed) and ``interior`` between each two."""
    x = np.asarray(x)
    config = p["padding_config"]
    sizes = [max(lo + hi + ((n - 1) * (i + 1) + 1 if n else 0), 0)
             for n, (lo, hi, i) in zip(x.shape, config, strict=True)]
    out = np.full(sizes, value, x.dtype)
    dst, src = [], []
    for n, size, (lo, _, interior) in zip(x.shape, sizes, config, strict=True):
        step = interior + 1
        first = -(lo // step) if lo < 0 else 0  # the first source element that lands inside
        last = min(n - 1, (size - 1 - lo) // step)
        if last < first:
            return out  # nothing of x remains
        dst.append(slice(lo + first * step, lo + last * step + 1, step))
        src.append(slice(first, last + 1))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _select_n(p: Any, which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if len(cases) == 1:
        return cases[0]
    if len(cases) == 2:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which).astype(np.intp), np.broadcast_arrays(*cases))


def _clamp(p: Any, lo: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


def _reducer(ufunc: np.ufunc, logical: np.ufunc | None = None) -> Callable[..., Any]:
    def reduce(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        f = logical if logical is not None and x.dtype == np.bool_ else ufunc
        return np.asarray(f.reduce(x, axis=tuple(p["axes"]), dtype=x.dtype))
    return reduce


def _argminmax(f: Callable[..., Any]) -> Callable[..., Any]:
    def kernel(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        return f(x, axis=p["axes"][0]).astype(np.dtype(p["out"]))
    return kernel


def _int_matmul(a: np.ndarray, b: np.ndarray, out: np.dtype) -> np.ndarray:
    """a @ b (batched) with integer semantics: exact, wrapped to ``out``."""
    if a.size == 0 or b.size == 0:
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(out)
    amax = float(max(-int(a.min()), int(a.max())))
    bmax = float(max(-int(b.min()), int(b.max())))
    if amax * bmax * a.shape[-1] < _EXACT_F64:
        r = np.matmul(a.astype(np.float64), b.astype(np.float64))
        return r.astype(np.int64).astype(out)
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(out)


def _dot_general(p: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lc, rc, lb, rb = p["lc"], p["rc"], p["lb"], p["rb"]
    a, b = np.asarray(a), np.asarray(b)
    lf = [d for d in range(a.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(b.ndim) if d not in rc and d not in rb]
    batch = [a.shape[d] for d in lb]
    m = [a.shape[d] for d in lf]
    n = [b.shape[d] for d in rf]
    k = int(np.prod([a.shape[d] for d in lc], dtype=np.int64))
    nb, nm, nn = (int(np.prod(s, dtype=np.int64)) for s in (batch, m, n))
    am = np.transpose(a, (*lb, *lf, *lc)).reshape(nb, nm, k)
    bm = np.transpose(b, (*rb, *rc, *rf)).reshape(nb, k, nn)
    return _int_matmul(am, bm, np.dtype(p["out"])).reshape(*batch, *m, *n)


def _windows(x: np.ndarray, window: Sequence[int], strides: Sequence[int],
             dilation: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    """x's windows along ``axes``: those axes become the output positions, and one window axis
    per entry is appended at the end."""
    span = [(w - 1) * d + 1 for w, d in zip(window, dilation, strict=True)]
    v = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(axes))
    index = [slice(None)] * v.ndim
    for j, (ax, s, d) in enumerate(zip(axes, strides, dilation, strict=True)):
        index[ax] = slice(None, None, s)
        index[x.ndim + j] = slice(None, None, d)
    return v[tuple(index)]


def _conv(p: dict[str, Any], lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    out = np.dtype(p["out"])
    x = np.transpose(np.asarray(lhs), p["lhs_spec"])
    w = np.transpose(np.asarray(rhs), p["rhs_spec"])
    nsp = x.ndim - 2
    ldil = p["lhs_dilation"] or (1,) * nsp
    if any(d != 1 for d in ldil):
        x = _pad({"padding_config": [(0, 0, 0), (0, 0, 0)] + [(0, 0, d - 1) for d in ldil]},
                 x, np.zeros((), x.dtype))
    x = _pad({"padding_config": [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0)
                                                          for lo, hi in p["padding"]]},
             x, np.zeros((), x.dtype))
    rdil = p["rhs_dilation"] or (1,) * nsp
    win = _windows(x, w.shape[2:], p["strides"], rdil, range(2, 2 + nsp))
    n, c = x.shape[:2]
    pos = win.shape[2:2 + nsp]
    g = p["groups"]
    o, i = w.shape[:2]
    kprod = int(np.prod(w.shape[2:], dtype=np.int64))
    npos = int(np.prod(pos, dtype=np.int64))
    # (n, g, i, pos..., k...) -> (g, n*pos, i*k)
    cols = win.reshape(n, g, i, npos, kprod).transpose(1, 0, 3, 2, 4).reshape(
        g, n * npos, i * kprod)
    wg = w.reshape(g, o // g, i * kprod).transpose(0, 2, 1)
    r = _int_matmul(cols, wg, out)  # (g, n*npos, o/g)
    r = r.reshape(g, n, npos, o // g).transpose(1, 0, 3, 2).reshape(n, o, *pos)
    inverse = np.argsort(p["out_spec"])
    return np.transpose(r, inverse)


def _reduce_window(ufunc: np.ufunc, init: str) -> Callable[..., Any]:
    def kernel(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if init == "zero":
            fill = np.zeros((), x.dtype)
        else:
            info = np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
            fill = np.asarray((info.min if init == "min" else info.max) if info else
                              (init == "max"), x.dtype)
        x = _pad({"padding_config": [(lo, hi, 0) for lo, hi in p["padding"]]}, x, fill)
        win = _windows(x, p["window"], p["strides"], p["dilation"], range(x.ndim))
        axes = tuple(range(x.ndim, win.ndim))
        return ufunc.reduce(win, axis=axes, dtype=x.dtype) if init == "zero" else \
            ufunc.reduce(win, axis=axes)
    return kernel


def _window_index(indices: np.ndarray, index_map: Sequence[int],
                  operand_batching: Sequence[int], indices_batching: Sequence[int],
                  shape: Sequence[int], window: Sequence[int], clip: bool,
                  ) -> tuple[list[np.ndarray], np.ndarray]:
    """For XLA's gather and scatter: the full index of every element of every window (batch
    axes, then one axis per operand dimension), and whether each window lies in bounds. A
    window's start is its index vector (the last axis of ``indices``) for the dimensions of
    ``index_map``, its batch position for the batching dimensions, 0 for the others; with
    ``clip``, clamped so that the window fits, as XLA does."""
    batch_shape = indices.shape[:-1]
    nb, rank = len(batch_shape), len(shape)
    starts = [np.zeros(batch_shape, np.int64) for _ in range(rank)]
    for k, d in enumerate(index_map):
        starts[d] = indices[..., k]
    for od, idd in zip(operand_batching, indices_batching, strict=True):
        axis = [1] * nb
        axis[idd] = batch_shape[idd]
        starts[od] = np.broadcast_to(np.arange(batch_shape[idd]).reshape(axis), batch_shape)
    in_bounds = np.ones(batch_shape, bool)
    index = []
    for d in range(rank):
        hi = shape[d] - window[d]
        in_bounds &= (starts[d] >= 0) & (starts[d] <= hi)
        start = np.clip(starts[d], 0, max(hi, 0)) if clip else starts[d]
        offsets = np.arange(window[d]).reshape([1] * nb + [window[d] if j == d else 1
                                                           for j in range(rank)])
        index.append(start.reshape(batch_shape + (1,) * rank) + offsets)
    return index, in_bounds


def _gather(p: dict[str, Any], operand: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """XLA's gather, the index vector in the last axis of ``indices`` (as JAX makes it)."""
    operand, indices = np.asarray(operand), np.asarray(indices).astype(np.int64)
    sizes = p["slice_sizes"]
    if (p["mode"] == "clip" and not p["offset_dims"] and not p["operand_batching"]
            and sorted(p["collapsed"]) == list(range(operand.ndim))):
        # single elements (a TABLE lookup): plain indexing of the clamped indices
        index: list[Any] = [0] * operand.ndim
        for k, d in enumerate(p["start_index_map"]):
            index[d] = np.clip(indices[..., k], 0, operand.shape[d] - 1)
        return operand[tuple(index)] if operand.ndim else np.broadcast_to(
            operand, indices.shape[:-1]).copy()
    batch_shape = indices.shape[:-1]
    nb = len(batch_shape)
    index, in_bounds = _window_index(indices, p["start_index_map"], p["operand_batching"],
                                     p["indices_batching"], operand.shape, sizes, clip=True)
    gathered = operand[tuple(index)]  # batch..., sizes...
    if p["mode"] == "fill":
        fill = p["fill"]
        if fill is None:
            fill = np.iinfo(operand.dtype).min if operand.dtype.kind == "i" else (
                np.iinfo(operand.dtype).max if operand.dtype.kind == "u" else True)
        mask = in_bounds.reshape(batch_shape + (1,) * operand.ndim)
        gathered = np.where(mask, gathered, np.asarray(fill).astype(operand.dtype))
    dropped = set(p["collapsed"]) | set(p["operand_batching"])
    gathered = gathered.reshape(batch_shape + tuple(
        s for d, s in enumerate(sizes) if d not in dropped))
    # Offset axes go to offset_dims; batch axes fill the rest, in order.
    rank = nb + len(p["offset_dims"])
    batch_pos = [a for a in range(rank) if a not in p["offset_dims"]]
    perm = [0] * rank
    for j, a in enumerate(batch_pos):
        perm[a] = j
    for j, a in enumerate(p["offset_dims"]):
        perm[a] = nb + j
    return np.transpose(gathered, perm)


def _scatter(p: dict[str, Any], operand: np.ndarray, indices: np.ndarray,
             updates: np.ndarray) -> np.ndarray:
    """XLA's scatter (replace), the index vector in the last axis of ``indices``."""
    result = np.array(operand, copy=True)
    indices, updates = np.asarray(indices).astype(np.int64), np.asarray(updates)
    batch_shape = indices.shape[:-1]
    nb = len(batch_shape)
    window_dims = p["update_window_dims"]
    upd_batch = [a for a in range(updates.ndim) if a not in window_dims]
    # updates as (batch..., window...)
    upd = np.transpose(updates, (*upd_batch, *window_dims))
    window_shape = upd.shape[nb:]
    inserted = set(p["inserted"]) | set(p["operand_batching"])
    full_window = []  # per operand dimension: the window extent (1 where inserted)
    it = iter(window_shape)
    for d in range(result.ndim):
        full_window.append(1 if d in inserted else next(it))
    upd = upd.reshape(batch_shape + tuple(full_window))
    clip = p["mode"] == "clip"
    index, in_bounds = _window_index(indices, p["to_operand"], p["operand_batching"],
                                     p["indices_batching"], result.shape, full_window, clip)
    if clip:
        in_bounds[...] = True
    keep = in_bounds.reshape(batch_shape + (1,) * result.ndim)
    full_shape = batch_shape + tuple(full_window)
    keep = np.broadcast_to(keep, full_shape)
    idx = tuple(np.broadcast_to(i, full_shape)[keep] for i in index)
    result[idx] = np.broadcast_to(upd, full_shape)[keep]
    return result


def _clz(p: Any, x: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    u = np.asarray(x).view(_unsigned(x.dtype)).astype(np.float64)  # exact up to 32 bits
    _, exponent = np.frexp(u)  # the bit length (0 for 0)
    return (bits - exponent).astype(x.dtype)


def _iota(p: dict[str, Any]) -> np.ndarray:
    shape = p["shape"]
    ar = np.arange(shape[p["dimension"]], dtype=np.dtype(p["dtype"]))
    return np.broadcast_to(ar.reshape([-1 if j == p["dimension"] else 1
                                       for j in range(len(shape))]), shape)


def _cond(p: list[dict[str, Any]], index: np.ndarray, *ops: np.ndarray) -> list[Any]:
    i = int(np.clip(np.asarray(index).astype(np.int64), 0, len(p) - 1))
    return _run(p[i], ops)


def _while(p: dict[str, Any], *vals: np.ndarray) -> list[Any]:
    cc, bc = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = vals[:cc], vals[cc:cc + bc], list(vals[cc + bc:])
    while bool(_run(p["cond"], [*cconsts, *carry])[0]):
        carry = _run(p["body"], [*bconsts, *carry])
    return carry


def _scan(p: dict[str, Any], *vals: np.ndarray) -> list[Any]:
    nc, nk = p["consts"], p["carry"]
    consts, carry, xs = vals[:nc], list(vals[nc:nc + nk]), vals[nc + nk:]
    steps = range(p["length"] - 1, -1, -1) if p["reverse"] else range(p["length"])
    ys: list[list[Any]] = []
    for i in steps:
        out = _run(p["body"], [*consts, *carry, *(x[i] for x in xs)])
        carry, y = out[:nk], out[nk:]
        ys.append(y)
    if p["reverse"]:
        ys.reverse()
    body_outs = p["body"]["out_avals"][nk:]
    stacked = [np.stack([y[j] for y in ys]) if ys else np.zeros((0, *shape), dtype)
               for j, (shape, dtype) in enumerate(body_outs)]
    return [*carry, *stacked]


def _integer_pow(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    y = p["y"]
    if y < 0:
        raise ValueError("integer_pow of an integer by a negative power")
    r = np.ones_like(x)
    base = np.asarray(x)
    while y:
        if y & 1:
            r = r * base
        base = base * base
        y >>= 1
    return r


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    return lambda p, x: f(x)


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Any]:
    return lambda p, a, b: f(a, b)


_KERNELS: dict[str, Callable[..., Any]] = {
    "const": lambda p: p,
    "copy": lambda p, x: x,
    "copy_p": lambda p, x: x,
    "optimization_barrier": lambda p, *xs: list(xs),
    "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
    "div": _div, "rem": _rem,
    "max": _binary(np.maximum), "min": _binary(np.minimum),
    "and": _binary(np.bitwise_and), "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor), "not": _unary(np.invert),
    "eq": _binary(np.equal), "ne": _binary(np.not_equal), "lt": _binary(np.less),
    "le": _binary(np.less_equal), "gt": _binary(np.greater), "ge": _binary(np.greater_equal),
    "neg": _unary(np.negative), "abs": _unary(np.abs), "sign": _unary(np.sign),
    "shift_left": _shift_left, "shift_right_arithmetic": _shift_right_arithmetic,
    "shift_right_logical": _shift_right_logical, "clz": _clz,
    "integer_pow": _integer_pow,
    "convert_element_type": _convert, "bitcast_convert_type": _bitcast,
    "select_n": _select_n, "clamp": _clamp,
    "broadcast_in_dim": _broadcast_in_dim, "broadcast_lazy": _broadcast_lazy,
    "reshape": lambda p, x, *dyn: np.reshape(x, p["new_sizes"]),
    "squeeze": lambda p, x: np.reshape(x, [n for d, n in enumerate(np.shape(x))
                                           if d not in p["dimensions"]]),
    "transpose": lambda p, x: np.transpose(x, p["permutation"]),
    "slice": _slice, "pad": _pad,
    "concatenate": lambda p, *xs: np.concatenate(xs, axis=p["dimension"]),
    "rev": lambda p, x: np.flip(x, axis=p["dimensions"]),
    "stack": lambda p, *xs: np.stack(xs, axis=p["axis"]),
    "tile": lambda p, x: np.tile(x, p["reps"]),
    "iota": _iota,
    "reduce_sum": _reducer(np.add, np.logical_or),
    "reduce_prod": _reducer(np.multiply, np.logical_and),
    "reduce_max": _reducer(np.maximum), "reduce_min": _reducer(np.minimum),
    "reduce_and": _reducer(np.bitwise_and, np.logical_and),
    "reduce_or": _reducer(np.bitwise_or, np.logical_or),
    "reduce_xor": _reducer(np.bitwise_xor, np.logical_xor),
    "argmax": _argminmax(np.argmax), "argmin": _argminmax(np.argmin),
    "dot_general": _dot_general, "conv_general_dilated": _conv,
    "reduce_window_sum": _reduce_window(np.add, "zero"),
    "reduce_window_max": _reduce_window(np.maximum, "min"),
    "reduce_window_min": _reduce_window(np.minimum, "max"),
    "gather": _gather, "scatter": _scatter,
    "cond": _cond, "while": _while, "scan": _scan,
}

_ENCODERS: dict[str, Callable[[_Converter, Any], Any]] = {
    **{k: _enc_none for k in (
        "copy", "copy_p", "optimization_barrier", "add", "sub", "mul", "div", "rem", "max",
        "min", "and", "or", "xor", "not", "eq", "ne", "lt", "le", "gt", "ge", "neg", "abs",
        "sign", "shift_left", "shift_right_arithmetic", "shift_right_logical", "clz",
        "select_n", "clamp")},
    "integer_pow": _enc_keys("y"),
    "convert_element_type": _enc_convert, "bitcast_convert_type": _enc_convert,
    "broadcast_in_dim": _enc_keys("shape", "broadcast_dimensions"),
    "reshape": _enc_reshape,
    "squeeze": _enc_keys("dimensions"),
    "transpose": _enc_keys("permutation"),
    "slice": _enc_keys("start_indices", "limit_indices", "strides"),
    "pad": _enc_keys("padding_config"), "concatenate": _enc_keys("dimension"),
    "rev": _enc_keys("dimensions"), "stack": _enc_keys("axis"), "tile": _enc_keys("reps"),
    "iota": _enc_iota,
    **{k: _enc_keys("axes") for k in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
                                      "reduce_and", "reduce_or", "reduce_xor")},
    "argmax": _enc_argminmax, "argmin": _enc_argminmax,
    "dot_general": _enc_dot, "conv_general_dilated": _enc_conv,
    **{k: _enc_window for k in ("reduce_window_sum", "reduce_window_max",
                                "reduce_window_min")},
    "gather": _enc_gather, "scatter": _enc_scatter,
    "cond": _enc_cond, "while": _enc_while, "scan": _enc_scan,
}
