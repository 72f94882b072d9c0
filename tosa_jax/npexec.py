"""Graph functions run by numpy, without XLA: the first result of a small graph.

A graph run once (a test, a debugging run, ``tosa_jax.reference_model.run`` inside ExecuTorch's
test suite) pays for an XLA executable it uses once: a quick-tier compile on its first run
(75 ms for cnn_int8's 28 operators), and on every later process XLA's rebuild of the cached
executable (2-30 ms) and its first run, where the reference model answers in well under a
millisecond. This module runs the traced graph function itself, one numpy call per JAX
primitive of its jaxpr (cnn_int8: 375 of them).

By default only programs whose every value is a boolean or an integer are taken
(``from_jaxpr`` raises ``Unsupported`` for anything else, and the caller compiles as before).
Each kernel computes its primitive's exact XLA semantics on integers (two's-complement
wrap-around, shifts by the width or more, division by zero, index clamping), so that the results
are bit-identical to the XLA executable's, and through it to the reference model's: checked
primitive by primitive against XLA (tests/unit/test_npexec.py) and, in CI, on every integer graph
of the conformance slices, whose SUT runs both engines (tosa_jax.testing.conformance_sut).

``from_jaxpr(..., floats=True)`` also takes floating-point programs (``load(...,
numpy_floats=True)``, which ``tosa_jax.reference_model`` uses: a test suite runs each graph once).
Conversions, comparisons, selections and the IEEE operations (+ - * /, sqrt) round as XLA's do,
but the transcendental functions, the summation order of products and reductions, XLA's
fusion (multiply-add contraction, excess precision of 16-bit types) and its CPU code's flushing
of subnormals to zero (numpy keeps them, as the reference model does) do not: a float result meets
TOSA's compliance modes (the conformance slices in CI judge both engines' float results with the
official verifier) without being XLA's bits, so a model takes one engine for all its calls.

A program is plain data (lists, dicts, strings, numbers, numpy arrays): the compile cache keeps
it, and a later process runs it without importing JAX.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes  # noqa: F401  (numpy then knows bfloat16, float8_e4m3fn... by name)
import numpy as np

FORMAT = 2
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
# Eqns whose operands are all known when the program is made are computed then (literals,
# small constants): their results up to this many elements become literals of the program.
FOLD_MAX = 64
_NOT_FOLDED = frozenset({"cond", "while", "scan", "iota", "reduce_window"})
MAX_MACS = 100_000_000  # integer multiply-adds a call: not traced for numpy above
MAX_ELEMENTS = 1 << 20  # in the largest tensor
# The estimate (ns): a numpy call's own cost, then per element written and per multiply-add
# (the products run by the BLAS, operands converted and a convolution's patches copied first);
# fitted on the fixtures and the zoo's integer graphs, within a factor of 2.
_NS_CALL, _NS_ELEMENT, _NS_MAC = 4_000, 1.0, 1.0
# float64 holds every integer below 2^53 exactly, float32 every one below 2^24: an integer
# matrix product whose partial sums all stay below this in magnitude (max|a| * max|b| * K) is
# computed exactly by the BLAS in that type, whatever its order of summation (far faster than
# numpy's integer loops; float32 twice float64's speed), then wrapped to the result type as
# XLA's integer arithmetic wraps.
_EXACT_F64 = float(2 ** 53)
_EXACT_F32 = float(2 ** 24)
# The BLAS's products are cut into tiles of at most this many multiply-adds (m * n * k), run
# one after another on the calling thread. numpy's OpenBLAS hands a product larger than this
# (its threshold, 65,536 * 4) to its worker threads, and where the other cores are busy (the
# optimized XLA compile runs beside a model's numpy calls) the caller waits for a worker to be
# scheduled. Measured 2026-11-28 (2-core Xeon), interleaved fresh processes: bert_tiny_int8's
# calls 4-6 from an empty cache, while XLA compiles, 37-182 -> 28-34 ms; its first result from
# the cache with the other core busy 65-173 -> 59-62 ms; idle, within noise (60-67, 61-64).
BLAS_TILE_MACS = 1 << 18


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


def from_jaxpr(closed: Any, platform: str = "cpu", floats: bool = False) -> dict[str, Any]:
    """The program of a ClosedJaxpr: its inputs are the jaxpr's inputs, in order. ``floats``:
    take floating-point values too (``program["floats"]`` says whether it holds any)."""
    conv = _Converter(platform, floats)
    program = conv.program(closed.jaxpr, list(closed.consts))
    program["format"] = FORMAT
    program["bytes"] = conv.bytes
    program["floats"] = conv.has_floats
    return program


_FLOATS = frozenset(
    [np.dtype(t) for t in (np.float16, np.float32, np.float64)]
    + [np.dtype(getattr(ml_dtypes, name)) for name in dir(ml_dtypes)
       if name.startswith(("bfloat", "float")) and isinstance(getattr(ml_dtypes, name), type)])


def is_float(dtype: np.dtype) -> bool:
    """numpy's floats and ml_dtypes' (bfloat16, float8_*, float4_e2m1fn...)."""
    return dtype in _FLOATS


def _code(dtype: np.dtype) -> str:
    """A dtype as plain data: numpy's code ("<i4"), or ml_dtypes' name ("bfloat16": its code,
    "<V2" or "<f1", would lose the type)."""
    return dtype.name if dtype.type.__module__ == "ml_dtypes" else dtype.str


def _np_dtype(aval: Any) -> np.dtype:
    dtype = np.dtype(aval.dtype)
    if dtype.kind not in "biu" and not is_float(dtype):
        raise Unsupported(f"a {dtype} value")
    return dtype


class _Converter:
    def __init__(self, platform: str, floats: bool = False) -> None:
        self.platform = platform
        self.floats = floats
        self.has_floats = False
        # An upper bound on the memory a run takes: every value kept to the end, and the
        # float64 copies of the matrix products' operands (a convolution's patches).
        self.bytes = 0

    def program(self, jaxpr: Any, consts: list[Any]) -> dict[str, Any]:
        shapes: list[tuple[int, ...]] = []
        dtypes: list[np.dtype] = []

        def fresh(v: Any) -> int:
            """A new slot for the value of ``v``."""
            dtypes.append(self.dtype(v.aval))
            self.bytes += dtypes[-1].itemsize * _size(v.aval.shape)
            shapes.append(tuple(v.aval.shape))
            return len(shapes) - 1

        slots: dict[Any, int] = {}
        const_slots = {}
        for v, c in zip(jaxpr.constvars, consts, strict=True):
            slots[v] = fresh(v)
            const_slots[slots[v]] = np.asarray(c)
        inputs = []
        for v in jaxpr.invars:
            slots[v] = fresh(v)
            inputs.append(slots[v])
        eqns: list[tuple[str, Any, list[Any], list[int]]] = []
        self._eqns(jaxpr, slots, fresh, eqns)
        outputs = [self._arg(v, slots) for v in jaxpr.outvars]
        known = {k: c for k, c in const_slots.items() if c.size <= FOLD_MAX}
        eqns = _live(_fold(eqns, outputs, dtypes, known), outputs)
        _lazy_broadcasts(eqns, shapes, outputs)
        out_avals = [(tuple(v.aval.shape), _code(self.dtype(v.aval))) for v in jaxpr.outvars]
        return {"n": len(shapes), "inputs": inputs, "consts": const_slots, "eqns": eqns,
                "outputs": outputs, "out_avals": out_avals, "cost_ns": _cost(eqns, shapes)}

    def dtype(self, aval: Any) -> np.dtype:
        dtype = _np_dtype(aval)
        if is_float(dtype):
            if not self.floats:
                raise Unsupported(f"a {dtype} value")
            self.has_floats = True
        return dtype

    def _arg(self, v: Any, slots: dict[Any, int]) -> Any:
        if hasattr(v, "val"):  # a Literal
            return _literal(v.val, self.dtype(v.aval))
        return slots[v]

    def _eqns(self, jaxpr: Any, slots: dict[Any, int], fresh: Callable[[Any], int],
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
                self._inline(sub, ins, e.outvars, slots, fresh, eqns)
                continue
            ins = [self._arg(v, slots) for v in e.invars]
            outs = []
            for v in e.outvars:
                if type(v).__name__ == "DropVar":
                    outs.append(-1)
                else:
                    slots[v] = fresh(v)
                    outs.append(slots[v])
            encode = _ENCODERS.get(name)
            if encode is None:
                raise Unsupported(f"primitive {name}")
            eqns.append((name, encode(self, e), ins, outs))

    def _inline(self, sub: Any, ins: Sequence[Any], outs: Sequence[Any],
                slots: dict[Any, int], fresh: Callable[[Any], int], eqns: list[Any]) -> None:
        """A call's jaxpr in place, its values in slots of their own (a jaxpr called twice is
        inlined twice); its parameters and results are the caller's slots, not copies."""
        inner = sub.jaxpr if hasattr(sub, "jaxpr") else sub
        consts = list(sub.consts) if hasattr(sub, "consts") else []
        own: dict[Any, int] = {}
        for v, c in zip(inner.constvars, consts, strict=True):
            own[v] = fresh(v)
            eqns.append(("const", np.asarray(c), [], [own[v]]))
        for v, a in zip(inner.invars, ins, strict=True):
            src = self._arg(a, slots)
            if type(src) is int:
                own[v] = src
            else:  # a literal argument
                own[v] = fresh(v)
                eqns.append(("copy", None, [src], [own[v]]))
        self._eqns(inner, own, fresh, eqns)
        for v, a in zip(outs, inner.outvars, strict=True):
            if type(v).__name__ == "DropVar":
                continue
            src = self._arg(a, own)
            if type(src) is int:
                slots[v] = src
            else:
                slots[v] = fresh(v)
                eqns.append(("copy", None, [src], [slots[v]]))


def _fold(eqns: list[Any], outputs: list[Any], dtypes: list[np.dtype],
          known: dict[int, np.ndarray]) -> list[Any]:
    """The eqns with copies (and conversions to the same type) replaced by their operand, and
    the eqns whose operands are all known at conversion (literals, small constants) computed
    now, by the same kernels, where their results are small (FOLD_MAX elements): their uses
    then read the values as literals. ``outputs`` is updated in place."""
    alias: dict[int, Any] = {}

    def operand(i: Any) -> Any:
        if type(i) is not int:
            return i
        i = alias.get(i, i)
        return known.get(i, i) if type(i) is int else i

    kept = []
    for name, params, ins, outs in eqns:
        ins = [operand(i) for i in ins]
        if name in ("copy", "copy_p") or (
                name == "convert_element_type" and type(ins[0]) is int
                and dtypes[ins[0]] == dtypes[outs[0]]):
            alias[outs[0]] = ins[0]
            continue
        if name == "const":
            if params.size <= FOLD_MAX:
                known[outs[0]] = _literal(params, params.dtype)
                continue
        elif name not in _NOT_FOLDED and all(type(i) is not int for i in ins):
            try:
                with np.errstate(all="ignore"):
                    result = _KERNELS[name](params, *ins)
            except Exception:  # (left to the run, where it fails as it would have)
                result = None
            results = result if type(result) is list else [result]
            if result is not None and all(np.size(r) <= FOLD_MAX for r in results):
                for o, r in zip(outs, results, strict=True):
                    if o >= 0:
                        known[o] = _literal(r, dtypes[o])
                continue
        kept.append((name, params, ins, outs))
    outputs[:] = [operand(o) for o in outputs]
    return kept


def _literal(value: Any, dtype: np.dtype) -> Any:
    """A value known at conversion: an array, or a numpy scalar for one of rank 0 (the
    kernels take either; a scalar loads from the cache 5x faster)."""
    a = np.asarray(value, dtype)
    return a[()] if a.ndim == 0 else a


def _live(eqns: list[Any], outputs: list[Any]) -> list[Any]:
    """The eqns an output depends on (every primitive here is pure)."""
    live = {o for o in outputs if type(o) is int}
    kept = []
    for eqn in reversed(eqns):
        if any(o in live for o in eqn[3]):
            kept.append(eqn)
            live.update(i for i in eqn[2] if type(i) is int)
    kept.reverse()
    return kept


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
    results = {o for o in outputs if type(o) is int}
    for k, (_, _, ins, _) in enumerate(eqns):
        for i in ins:
            if type(i) is int:
                uses.setdefault(i, []).append(k)
    lazy = {}
    for k, (name, _, _, outs) in enumerate(eqns):
        if name == "broadcast_in_dim" and outs[0] not in results:
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
        elif name == "tosa_apply_scale_32":  # (about five int64 passes)
            total += 5 * _NS_ELEMENT * written
        elif name == "cond":
            total += max(b["cost_ns"] for b in params)
        elif name == "reduce_window":  # (the reducer's eqns, on whole arrays, per position)
            steps = _size(params["window"])
            total += steps * (params["reducer"]["cost_ns"]
                              + len(params["reducer"]["eqns"]) * _NS_ELEMENT * written)
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
    return math.prod(shape)


def _out_dtype(e: Any) -> str:
    return _code(_np_dtype(e.outvars[0].aval))


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
        return _code(np.dtype(v))
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


def _enc_reduce_window(conv: _Converter, e: Any) -> Any:
    """The general form (a reducer of its own, several operands): the reducer as a program."""
    return {**_enc_window(conv, e),
            "reducer": conv.program(e.params["jaxpr"], list(e.params["consts"]))}


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


def _enc_scale_32(conv: _Converter, e: Any) -> Any:
    p = e.params
    conv.bytes += 3 * 8 * _size(e.outvars[0].aval.shape)  # its int64 values
    return {"m": p["m"].array, "s": p["s"].array, "rnd": p["rnd"].array,
            "neg": None if p["neg"] is None else p["neg"].array, "zp": p["zp"]}


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
    # (a literal output is copied: the caller may write into its result)
    return [env[o] if type(o) is int else np.array(o) for o in program["outputs"]]


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
    if is_float(dtype):
        return np.true_divide(a, b)
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
    if is_float(dtype):
        return np.fmod(a, b)
    a64, b64 = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    zero = b64 == 0
    r = np.fmod(a64, np.where(zero, 1, b64))
    return np.where(zero, a64, r).astype(dtype)


def _convert(p: str, x: np.ndarray) -> np.ndarray:
    dtype = np.dtype(p)
    x = np.asarray(x)
    if dtype.kind == "b":
        return x != 0
    if x.dtype in _FLOATS and dtype.kind in "iu":
        # XLA's: truncated toward zero, saturated at the type's bounds, NaN -> 0 (numpy's
        # cast leaves out-of-range values undefined)
        if x.dtype.itemsize >= 4 and dtype.itemsize <= 4 and x.size:
            # (min - 1 and max + 1 are powers of two, or 0 and 1: exact in a float32)
            lo, hi = _OPEN_BOUNDS[dtype]
            if x.min() > lo and x.max() < hi:  # (False for NaN)
                return x.astype(dtype)  # in range: numpy's cast is XLA's
        info = np.iinfo(dtype)
        f = np.trunc(x.astype(np.float64))
        r = np.where(f == f, np.minimum(np.maximum(f, info.min), info.max), 0.0).astype(dtype)
        if dtype.itemsize == 8:  # (2^63 - 1 is not a float64: the bound rounds to 2^63)
            r = np.where(f >= float(info.max), info.max, r).astype(dtype)
        return r
    if dtype == _FLOAT4 and x.dtype in _FLOATS:
        # the type has no NaN: XLA makes one -0 (ml_dtypes -0 or +0, by the NaN's sign)
        return np.where(np.isnan(x), np.float32(-0.0), x).astype(dtype)
    return x.astype(dtype)


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
    r = np.reshape(x, full)
    if tuple(full) == tuple(shape):  # new axes of 1 only
        return r
    out = np.empty(shape, r.dtype)  # (a copy: 4x faster than np.broadcast_to's view)
    out[...] = r
    return out


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


def _scale_32(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """numerics.scale_32_p: apply_scale_32 in int64 (its constants made at the trace), as
    int32, plus the zero point not folded into the round (wrapping, as XLA's int32 add)."""
    v = np.asarray(x).astype(np.int64)
    rnd = p["rnd"] if p["neg"] is None else np.where(v >= 0, p["rnd"], p["neg"])
    out = ((v * p["m"] + rnd) >> p["s"]).astype(np.int32)
    return np.add(out, np.int32(p["zp"]), dtype=np.int32) if p["zp"] else out


def _reducer(ufunc: np.ufunc, logical: np.ufunc | None = None) -> Callable[..., Any]:
    def reduce(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        f = logical if logical is not None and x.dtype == np.bool_ else ufunc
        small = x.dtype in _FLOATS and x.dtype.itemsize < 4  # in float32, as XLA's CPU code
        acc = np.dtype(np.float32) if small else x.dtype
        initial = _identity(f, acc) if x.size == 0 else None  # (an empty max: -inf, INT_MIN)
        kw = {} if initial is None else {"initial": initial}
        r = f.reduce(x.astype(acc) if small else x, axis=tuple(p["axes"]), dtype=acc, **kw)
        return np.asarray(r).astype(x.dtype) if small else np.asarray(r)
    return reduce


def _identity(f: np.ufunc, dtype: np.dtype) -> Any:
    """The value XLA starts a reduction from (the result of an empty one)."""
    if f is np.maximum or f is np.minimum:
        if is_float(dtype):
            return -np.inf if f is np.maximum else np.inf
        info = np.iinfo(dtype)
        return info.min if f is np.maximum else info.max
    return None


def _argminmax(f: Callable[..., Any]) -> Callable[..., Any]:
    def kernel(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        return f(x, axis=p["axes"][0]).astype(np.dtype(p["out"]))
    return kernel


def _blas_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for float operands [..., M, K] and [..., K, N] of one type, in tiles of at most
    BLAS_TILE_MACS multiply-adds (each on the calling thread): each result element is the dot
    product of a row and a column, summed in the BLAS's order for the tile's size (exact for
    _matmul's integers)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if m * n * k <= BLAS_TILE_MACS:
        return np.matmul(a, b)
    out = np.empty((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), m, n), a.dtype)
    tn = n if k * n <= BLAS_TILE_MACS else max(1, BLAS_TILE_MACS // k)
    tm = max(1, BLAS_TILE_MACS // (k * tn))
    for i in range(0, m, tm):
        for j in range(0, n, tn):
            np.matmul(a[..., i:i + tm, :], b[..., :, j:j + tn], out=out[..., i:i + tm, j:j + tn])
    return out


def _matmul(a: np.ndarray, b: np.ndarray, out: np.dtype) -> np.ndarray:
    """a @ b (batched) as XLA's: integers exact and wrapped to ``out``; floats accumulated in
    float32 (float64 for float64), the BLAS's summation order."""
    if is_float(out) or is_float(a.dtype) or is_float(b.dtype):
        acc = np.float64 if out.itemsize == 8 else np.float32
        return _blas_matmul(a.astype(acc, copy=False), b.astype(acc, copy=False)).astype(
            out, copy=False)
    if a.size == 0 or b.size == 0:
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(out)
    amax = float(max(-int(a.min()), int(a.max())))
    bmax = float(max(-int(b.min()), int(b.max())))
    bound = amax * bmax * a.shape[-1]
    if bound < _EXACT_F64:
        acc = np.float32 if bound < _EXACT_F32 else np.float64
        r = _blas_matmul(a.astype(acc), b.astype(acc))
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
    k = math.prod(a.shape[d] for d in lc)
    nb, nm, nn = math.prod(batch), math.prod(m), math.prod(n)
    am = np.transpose(a, (*lb, *lf, *lc)).reshape(nb, nm, k)
    bm = np.transpose(b, (*rb, *rc, *rf)).reshape(nb, k, nn)
    return _matmul(am, bm, np.dtype(p["out"])).reshape(*batch, *m, *n)


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
    kprod = math.prod(w.shape[2:])
    npos = math.prod(pos)
    # (n, g, i, pos..., k...) -> (g, n*pos, i*k)
    cols = win.reshape(n, g, i, npos, kprod).transpose(1, 0, 3, 2, 4).reshape(
        g, n * npos, i * kprod)
    wg = w.reshape(g, o // g, i * kprod).transpose(0, 2, 1)
    r = _matmul(cols, wg, out)  # (g, n*npos, o/g)
    r = r.reshape(g, n, npos, o // g).transpose(1, 0, 3, 2).reshape(n, o, *pos)
    inverse = np.argsort(p["out_spec"])
    return np.transpose(r, inverse)


def _reduce_window(ufunc: np.ufunc, init: str) -> Callable[..., Any]:
    def kernel(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if is_float(x.dtype) and x.dtype.itemsize < 4:  # in float32 (inf: the padding)
            return kernel(p, x.astype(np.float32)).astype(x.dtype)
        if init == "zero":
            fill = np.zeros((), x.dtype)
        elif is_float(x.dtype):
            fill = np.asarray(-np.inf if init == "min" else np.inf, x.dtype)
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


def _reduce_window_general(p: dict[str, Any], *vals: np.ndarray) -> Any:
    """lax.reduce_window with its own reducer: each output element folds its window, in
    order, into the initial values; the reducer's program runs on whole arrays (one step per
    window position), its primitives being elementwise."""
    n = len(vals) // 2
    operands, inits = vals[:n], vals[n:]
    rank = np.ndim(operands[0])
    if (all(w == 1 for w in (*p["window"], *p["strides"], *p["dilation"]))
            and not any(lo or hi for lo, hi in p["padding"])):
        # one element a window (numerics.gather_indices' kernel split): one fold of each
        # element into the initial values, on the arrays as they are
        acc = _run(p["reducer"], [*(np.broadcast_to(np.asarray(i), np.shape(x))
                                    for i, x in zip(inits, operands, strict=True)),
                                  *(np.asarray(x) for x in operands)])
        acc = [np.asarray(a, np.asarray(i).dtype) for a, i in zip(acc, inits, strict=True)]
        return acc if n > 1 else acc[0]
    flat = []
    for x, init in zip(operands, inits, strict=True):
        x = _pad({"padding_config": [(lo, hi, 0) for lo, hi in p["padding"]]}, np.asarray(x),
                 np.asarray(init))
        win = _windows(x, p["window"], p["strides"], p["dilation"], range(rank))
        flat.append(win.reshape(*win.shape[:rank], -1))
    acc = [np.broadcast_to(np.asarray(init), flat[0].shape[:rank]) for init in inits]
    for k in range(flat[0].shape[-1]):
        acc = _run(p["reducer"], [*acc, *(f[..., k] for f in flat)])
    acc = [np.asarray(a, np.asarray(i).dtype) for a, i in zip(acc, inits, strict=True)]
    return acc if n > 1 else acc[0]


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
        if fill is None and is_float(operand.dtype):
            fill = np.nan
        elif fill is None:
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
    """By squaring, the products in JAX's order (a float's last bit depends on it)."""
    y = p["y"]
    base = np.asarray(x)
    if y < 0 and not is_float(base.dtype):
        raise ValueError("integer_pow of an integer by a negative power")
    r = None
    n = abs(y)
    while n:
        if n & 1:
            r = base if r is None else r * base
        n >>= 1
        if n:
            base = base * base
    r = np.ones_like(x) if r is None else r
    return np.true_divide(np.ones((), r.dtype), r) if y < 0 else r


# -- floating-point primitives (programs taken with floats=True) --------------------------------

_FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn)
# The open interval of the floats an integer type's conversion takes without saturating.
_OPEN_BOUNDS = {np.dtype(t): (float(np.iinfo(t).min) - 1.0, float(np.iinfo(t).max) + 1.0)
                for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)}


def _float(f: Callable[..., np.ndarray], exact: bool = False) -> Callable[..., Any]:
    """A float function computed in float64 and rounded once to the operands' type: within
    about half a unit in the last place (numpy's float32 functions err by up to 2 or more).
    ``exact``: one whose results the type holds exactly (floor, rounding), computed in the
    operands' type, or in float32 for the types of fewer bits."""
    wide, native = (np.float32, 4) if exact else (np.float64, 8)

    def kernel(p: Any, *xs: np.ndarray) -> np.ndarray:
        xs = tuple(np.asarray(x) for x in xs)
        dtype = xs[0].dtype
        if dtype.itemsize >= native:
            return f(*xs)
        return np.asarray(f(*(x.astype(wide) for x in xs))).astype(dtype)
    return kernel


def _sign(p: Any, x: np.ndarray) -> np.ndarray:
    """lax.sign: a float zero keeps its sign (numpy's gives +0)."""
    x = np.asarray(x)
    return np.where(x == 0, x, np.sign(x)) if x.dtype in _FLOATS else np.sign(x)


def _logistic(x: np.ndarray) -> np.ndarray:
    one = np.ones((), x.dtype)
    return one / (one + np.exp(-x))


def _round(p: int, x: np.ndarray) -> np.ndarray:
    """lax.round: method 1 to nearest even, 0 half away from zero (exactly: the truncation,
    one further from zero where the dropped fraction is a half or more)."""
    if p == 1:
        return np.rint(x)
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)


# lax.round's kernels by method, built once (not a closure per call)
_ROUNDS = {method: _float(functools.partial(_round, method), exact=True) for method in (0, 1)}


def _enc_round(conv: _Converter, e: Any) -> Any:
    return int(e.params["rounding_method"])


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    return lambda p, x: f(x)


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Any]:
    return lambda p, a, b: f(a, b)


_FLOAT_KERNELS: dict[str, Callable[..., Any]] = {
    "exp": _float(np.exp), "exp2": _float(np.exp2), "log": _float(np.log),
    "log1p": _float(np.log1p), "expm1": _float(np.expm1), "tanh": _float(np.tanh),
    "logistic": _float(_logistic), "sqrt": _float(np.sqrt),
    "rsqrt": _float(lambda x: np.ones((), x.dtype) / np.sqrt(x)), "cbrt": _float(np.cbrt),
    "sin": _float(np.sin), "cos": _float(np.cos), "tan": _float(np.tan),
    "asin": _float(np.arcsin), "acos": _float(np.arccos), "atan": _float(np.arctan),
    "sinh": _float(np.sinh), "cosh": _float(np.cosh), "asinh": _float(np.arcsinh),
    "acosh": _float(np.arccosh), "atanh": _float(np.arctanh),
    "atan2": _float(np.arctan2), "pow": _float(np.power),
    "nextafter": _binary(np.nextafter),  # (in the type itself: ml_dtypes has its own)
    "floor": _float(np.floor, exact=True), "ceil": _float(np.ceil, exact=True),
    "is_finite": lambda p, x: np.isfinite(np.asarray(x).astype(np.float32)
                                          if np.asarray(x).itemsize < 4 else x),
    "square": lambda p, x: np.multiply(x, x),
    "round": lambda p, x: _ROUNDS[p](None, x),
}

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
    "neg": _unary(np.negative), "abs": _unary(np.abs), "sign": _sign,
    "shift_left": _shift_left, "shift_right_arithmetic": _shift_right_arithmetic,
    "shift_right_logical": _shift_right_logical, "clz": _clz,
    "integer_pow": _integer_pow,
    "convert_element_type": _convert, "bitcast_convert_type": _bitcast,
    "select_n": _select_n, "clamp": _clamp, "tosa_apply_scale_32": _scale_32,
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
    "reduce_window": _reduce_window_general,
    "gather": _gather, "scatter": _scatter,
    "cond": _cond, "while": _while, "scan": _scan,
    **_FLOAT_KERNELS,
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
    "tosa_apply_scale_32": _enc_scale_32,
    "dot_general": _enc_dot, "conv_general_dilated": _enc_conv,
    **{k: _enc_window for k in ("reduce_window_sum", "reduce_window_max",
                                "reduce_window_min")},
    "reduce_window": _enc_reduce_window,
    "gather": _enc_gather, "scatter": _enc_scatter,
    "cond": _enc_cond, "while": _enc_while, "scan": _enc_scan,
    **{k: _enc_none for k in _FLOAT_KERNELS if k != "round"},
    "round": _enc_round,
}
