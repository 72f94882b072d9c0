"""See inside a network: every intermediate tensor, per-operator comparisons, the first divergence,
quantization health, and pictures (Model Explorer node data, a self-contained HTML report).

* ``intermediates(model, *inputs)``: every tensor of the entry block (or the ``names`` chosen) from
  one compiled call; ``batched=True`` runs a stack of samples as one ``jax.vmap``; a partitioned
  model (``hw_models``) gives the tensors of every partition, crossing tensors included.
* ``compare(model, inputs, against=...)``: against ``"reference"`` (the TOSA reference model run on
  a copy of the graph whose outputs are the wanted tensors), another Model, or a dump
  ({name: array} or an ``.npz``); per operator: bit-exact or not, max |diff|, mismatching
  elements, SQNR, saturation; ``first_divergence`` in graph order.
* ``compare_models(int_model, fp_model, samples)``: top-1 agreement and output SQNR over a dataset
  (run sharded by ``evaluate``) and a per-layer table of matched tensors.

What is and is not available: the tensors of the entry block (its inputs, every operator's outputs,
constants when asked). Tensors of the blocks that COND_IF / WHILE_LOOP run are not: those blocks
are traced inside ``lax.cond`` / ``lax.while_loop`` (a loop body has one value per iteration, a
branch only when taken); the control-flow operator's own outputs, in the calling block, are.
Variables (EXT-VARIABLE) are read from the model's state, which ``intermediates`` does not change;
a variable tensor's value is the last one written in the block.
"""

from __future__ import annotations

import copy
import html
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import jax
import numpy as np

from tosa_jax.errors import TosaInputError, TosaLimitError, TosaUnsupportedError
from tosa_jax.executor import graph_variables, initial_values, run_block
from tosa_jax.ir import INT_RANGES, INTEGER_TYPES, Block, BlockScaled, Graph, Wide, wide_to_numpy
from tosa_jax.limits import human_bytes, tensor_bytes

CONST_OPS = ("CONST", "CONST_SHAPE")


# -- which tensors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSite:
    """Where a tensor of the entry block comes from: the operator index in the block (-1 for a
    block input or a variable), the operator, and the tensor."""

    index: int
    op: str
    name: str
    shape: tuple[int, ...]
    dtype: str


def tensor_sites(graph: Graph, constants: bool = False) -> list[TensorSite]:
    """The entry block's tensors in graph order: its inputs, then each operator's outputs.

    Constants (CONST outputs) only when ``constants``; SHAPE tensors never (they are not data).
    Tensors of blocks that control-flow operators run are not listed (see the module doc).
    """
    block = graph.main
    sites = [TensorSite(-1, "INPUT", n, block.tensors[n].shape, block.tensors[n].dtype)
             for n in block.inputs]
    for i, op in enumerate(block.operators):
        if op.op in CONST_OPS and not constants:
            continue
        for n in op.outputs:
            t = block.tensors[n]
            if t.dtype != "SHAPE":
                sites.append(TensorSite(i, op.op, n, t.shape, t.dtype))
    return sites


def _block_names(block: Block) -> set[str]:
    return set(block.tensors)


def _chosen(graph: Graph, names: Iterable[str] | None, constants: bool) -> list[str]:
    if names is None:
        return list(dict.fromkeys(s.name for s in tensor_sites(graph, constants)))
    names = list(dict.fromkeys(names))
    main = _block_names(graph.main)
    for n in names:
        if n in main:
            if graph.main.tensors[n].dtype == "SHAPE":
                raise TosaInputError(f"tensor {n!r} is a SHAPE tensor, not data")
            continue
        inner = [b.name for r in graph.regions for b in r.blocks
                 if b is not graph.main and n in b.tensors]
        if inner:
            raise TosaUnsupportedError(
                f"tensor {n!r} belongs to block(s) {inner} that a COND_IF / WHILE_LOOP runs: "
                "their tensors live inside lax.cond / lax.while_loop and are not returned; the "
                "control-flow operator's outputs in the calling block are")
        raise TosaInputError(f"no tensor {n!r} in the graph's entry block")
    return names


# -- intermediates -------------------------------------------------------------------------------


def intermediates_function(graph: Graph, names: Sequence[str]
                           ) -> Callable[..., dict[str, Any]]:
    """The pure function ``fn(state, *inputs) -> {name: value}`` of the chosen tensors.

    The graph is walked once by the executor (``run_block(..., keep=)``), so the values are those
    the graph function computes; use it under your own ``jit`` / ``vmap``. ``state`` holds
    variables (EXT-VARIABLE); ``{}`` for most graphs."""
    names = list(names)
    has_vars = bool(graph_variables(graph))

    def fn(state: dict[str, Any], *args: Any) -> dict[str, Any]:
        full = initial_values(graph) if has_vars else {}
        full.update(state)
        keep: dict[str, Any] = {}
        _, after = run_block(graph, graph.main, args, full, keep)
        keys = {n: t.variable_key for n, t in graph.main.tensors.items() if t.variable}
        return {n: (keep[n] if n in keep else after[keys[n]]) for n in names}

    return fn


def _to_numpy(value: Any) -> Any:
    """Host values: INT48/INT64 as int64, a block-scaled tensor as a BlockScaled numpy pair."""
    if isinstance(value, BlockScaled):
        return BlockScaled(_to_numpy(value.values), _to_numpy(value.scales))
    return wide_to_numpy(value) if isinstance(value, Wide) else np.asarray(value)


def kept_bytes(graph: Graph, names: Sequence[str], samples: int = 1) -> int:
    """Host bytes of the chosen tensors for ``samples`` samples (what ``intermediates`` returns)."""
    return samples * sum(tensor_bytes(graph.main.tensors[n].shape, graph.main.tensors[n].dtype)
                         for n in names)


def intermediates(model: Any, *inputs: Any, names: Iterable[str] | None = None,
                  constants: bool = False, batched: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of the entry block (or the ``names`` chosen) by name, from one compiled call.

    ``inputs`` as for ``model(*inputs)``; with ``batched=True`` each input has a leading sample
    axis and the samples run as one ``jax.vmap`` (each tensor then has that axis too). The bytes
    of the kept tensors are checked against the model's ``limits.max_bytes`` before anything is
    traced, and the compiled executable (arguments, kept tensors, temporaries) before it runs.
    A partitioned model (``hw_models``) runs each partition once, keeping its tensors.
    """
    from tosa_jax.model import Model

    if not isinstance(model, Model):
        if hasattr(model, "partitioned") and hasattr(model, "models"):
            return _partitioned_intermediates(model, inputs, names, constants, batched)
        raise TosaInputError(f"intermediates() takes a tosa_jax Model, not {type(model).__name__}")
    graph = model.graph
    chosen = _chosen(graph, names, constants)
    if batched:
        n = {np.shape(a)[0] for a in inputs if np.ndim(a)} if inputs else {1}
        if len(n) != 1:
            raise TosaInputError(f"batched inputs must share one leading sample count, got {n}")
        samples = n.pop()
    else:
        samples = 1
    need = kept_bytes(graph, chosen, samples)
    if need > model.limits.max_bytes:
        raise TosaLimitError(
            f"keeping {len(chosen)} tensors for {samples} sample(s) needs {need} bytes "
            f"({human_bytes(need)}), over the limit of {model.limits.max_bytes} bytes "
            f"({human_bytes(model.limits.max_bytes)}); nothing was run: choose fewer names, "
            "fewer samples, or raise load(..., max_bytes=...)")
    bound = _bind_batched(model, inputs) if batched else model._bind(inputs, {})
    values = model._run_kept(tuple(chosen), batched, (dict(model._state), *bound))
    return {n: _to_numpy(values[n]) for n in chosen}


def _bind_batched(model: Any, inputs: tuple[Any, ...]) -> list[Any]:
    """Stacks of samples: each input [N, *shape] of the declared type."""
    from tosa_jax.ir import host_to_value

    if len(inputs) != len(model.inputs):
        raise TosaInputError(f"the graph takes {len(model.inputs)} input(s) "
                             f"{[s.name for s in model.inputs]}, got {len(inputs)}")
    bound = []
    for spec, a in zip(model.inputs, inputs):
        a = np.asarray(a)
        if a.ndim != len(spec.shape) + 1 or tuple(a.shape[1:]) != spec.shape:
            raise TosaInputError(f"input {spec.name!r}: expected samples of shape "
                                 f"{list(spec.shape)} stacked on a leading axis, got "
                                 f"{list(a.shape)}")
        if a.dtype != spec.np_dtype:
            raise TosaInputError(f"input {spec.name!r}: expected {spec.dtype} (numpy "
                                 f"{spec.np_dtype}), got {a.dtype}")
        value = host_to_value(a, spec.dtype)
        bound.append(value if model.device is None else jax.device_put(value, model.device))
    return bound


def _partitioned_intermediates(pm: Any, inputs: tuple[Any, ...], names: Iterable[str] | None,
                               constants: bool, batched: bool) -> dict[str, np.ndarray]:
    """Each partition's tensors from one compiled call of that partition; the tensors that
    cross partitions move as ``PartitionedModel`` moves them."""
    pg = pm.partitioned
    chosen = _chosen(pg.graph, names, constants)
    samples = np.shape(inputs[0])[0] if batched and inputs else 1
    need = kept_bytes(pg.graph, chosen, samples)
    limit = min(m.limits.max_bytes for m in pm.models) if pm.models else need
    if need > limit:
        raise TosaLimitError(f"keeping {len(chosen)} tensors for {samples} sample(s) needs "
                             f"{human_bytes(need)}, over the limit of {human_bytes(limit)}")
    env: dict[str, Any] = dict(zip([s.name for s in pm.inputs], inputs))
    if len(env) != len(pm.inputs):
        raise TosaInputError(f"the graph takes {len(pm.inputs)} input(s), got {len(inputs)}")
    want = set(chosen)
    got: dict[str, np.ndarray] = {}
    for p, m, dev in zip(pg.partitions, pm.models, pm.jax_devices):
        mine = [n for n in _chosen(p.graph, None, constants) if n in want]
        keep = list(dict.fromkeys([*mine, *p.outputs]))
        args = [jax.device_put(np.asarray(env[n]), dev) for n in p.inputs]
        values = intermediates(m, *args, names=keep, batched=batched)
        env.update({n: values[n] for n in p.outputs})
        got.update({n: values[n] for n in mine})
    for n in chosen:
        if n not in got and n in env:
            got[n] = np.asarray(env[n])  # a graph input
        elif n not in got:
            data = pg.graph.main.tensors[n].data
            if data is not None:
                got[n] = data
    return {n: got[n] for n in chosen if n in got}


# -- the reference model -------------------------------------------------------------------------


def reference_intermediates(graph: Graph, inputs: Mapping[str, np.ndarray],
                            names: Iterable[str] | None = None, constants: bool = False
                            ) -> dict[str, np.ndarray]:
    """The chosen tensors as the TOSA reference model (tosa-tools) computes them, one sample.

    tosa-tools 2026.8.0's ``--dump_intermediates`` prints tensors as text (INT8 values as raw
    characters), which cannot be read back; instead the graph is written again with the wanted
    tensors as its outputs (a graph whose outputs are the prefixes' results) and run once with the
    reference model's Python binding.
    """
    try:
        import tosa_reference_model as trm
    except ImportError as e:  # pragma: no cover - needs the test extra
        raise TosaUnsupportedError("the reference model is not installed: pip install "
                                   "'tosa_jax[test]' (tosa-tools)") from e
    from tosa_jax.ir import HOST_DTYPES
    from tosa_jax.serialization import write

    chosen = _chosen(graph, names, constants)
    block = graph.main
    missing = [n for n in block.inputs if n not in inputs]
    if missing:
        raise TosaInputError(f"reference_intermediates: inputs {missing} not given")
    produced = [n for n in chosen if n not in block.inputs]
    g = copy.copy(graph)
    main = copy.copy(block)
    main.outputs = produced
    g.regions = [copy.copy(graph.regions[0]), *graph.regions[1:]]
    g.regions[0].blocks = [main, *graph.regions[0].blocks[1:]]
    args = [np.ascontiguousarray(inputs[n]) for n in block.inputs]
    outs, status = trm.run(write(g), args)
    if "VALID" not in str(status) or len(outs) != len(produced):
        raise TosaUnsupportedError(f"the reference model did not run the graph: {status}")
    got = {n: np.asarray(inputs[n]) for n in chosen if n in block.inputs}
    for n, o in zip(produced, outs):
        want = HOST_DTYPES[block.tensors[n].dtype]
        o = np.asarray(o)
        if o.dtype != want and o.dtype.itemsize == want.itemsize:
            o = o.view(want)  # bf16 / fp8 come back as raw records
        got[n] = o.astype(want, copy=False).reshape(block.tensors[n].shape)
    return {n: got[n] for n in chosen}


# -- statistics ----------------------------------------------------------------------------------


def saturation(values: np.ndarray, dtype: str) -> float | None:
    """Fraction of values at the limits of an integer type (None for other types)."""
    if dtype not in INTEGER_TYPES or values.size == 0:
        return None
    lo, hi = INT_RANGES[dtype]
    return float(np.mean((values == lo) | (values == hi)))


def sqnr_db(signal: np.ndarray, approx: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of ``approx`` against ``signal``, in dB (inf: equal)."""
    s = np.asarray(signal, np.float64)
    noise = float(np.sum((s - np.asarray(approx, np.float64)) ** 2))
    power = float(np.sum(s ** 2))
    if noise == 0.0:
        return math.inf
    if power == 0.0:
        return -math.inf
    return 10.0 * math.log10(power / noise)


def correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson correlation of two tensors (None when one is constant)."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


@dataclass
class Health:
    """Quantization health of one tensor."""

    name: str
    op: str
    index: int
    dtype: str
    shape: tuple[int, ...]
    min: float
    max: float
    mean: float
    saturation: float | None


def health(values: Mapping[str, np.ndarray], graph: Graph) -> list[Health]:
    """min, max, mean and saturation of each tensor of ``values`` (e.g. from ``intermediates``),
    in graph order."""
    sites = {s.name: s for s in tensor_sites(graph, constants=True)}
    rows = []
    for n, v in values.items():
        s = sites.get(n)
        t = graph.main.tensors[n]
        f = np.asarray(v, np.float64)
        rows.append(Health(n, s.op if s else "?", s.index if s else -1, t.dtype, t.shape,
                           float(f.min()) if f.size else math.nan,
                           float(f.max()) if f.size else math.nan,
                           float(f.mean()) if f.size else math.nan, saturation(np.asarray(v),
                                                                               t.dtype)))
    return rows


# -- INT against FP: scales and zero points the graph implies -----------------------------------


# Operators whose output carries the input's scale and zero point unchanged (layout, selection).
_SAME_SCALE = ("TRANSPOSE", "RESHAPE", "SLICE", "MAX_POOL2D", "IDENTITY", "TILE", "REVERSE",
               "PAD", "CLAMP")
_ACCUMULATORS = ("CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D", "MATMUL")


def _const(block: Block, name: str) -> np.ndarray | None:
    t = block.tensors.get(name)
    return None if t is None or t.data is None else np.asarray(t.data)


def _one_scale(s: Any) -> Any:
    """A per-channel scale whose channels agree within 2% is one per-tensor scale (their
    median): a per-tensor int8 scale reached through fitted weight scales and per-channel
    RESCALE multipliers agrees to the fit's precision; true per-channel scales differ more."""
    if np.ndim(s) and s.size:
        mid = float(np.median(s))
        if mid != 0 and np.all(np.abs(s / mid - 1) < 0.02):
            return mid
    return s


def weight_scales(graph: Graph, other: Graph, pairs: Iterable[tuple[str, str]]
                  ) -> dict[str, np.ndarray]:
    """{accumulator tensor: per-output-channel weight scale} for each matched pair of CONV2D /
    DEPTHWISE_CONV2D outputs whose integer weights (in ``graph``) have a float partner of the
    same shape (in ``other``): the least-squares scale of each output channel, sum(q f) / sum(q q).
    """
    producer = {o: op for op in graph.main.operators for o in op.outputs}
    other_producer = {o: op for op in other.main.operators for o in op.outputs}
    found = {}
    for a, b in pairs:
        op, theirs = producer.get(a), other_producer.get(b)
        if op is None or theirs is None or op.op != theirs.op or \
                op.op not in ("CONV2D", "DEPTHWISE_CONV2D"):
            continue
        q = _const(graph.main, op.inputs[1])
        f = _const(other.main, theirs.inputs[1])
        if q is None or f is None or q.shape != f.shape or q.dtype.kind not in "iu" \
                or f.dtype.kind != "f":
            continue
        if op.op == "CONV2D":  # OHWI: output channels first
            q2, f2 = q.reshape(q.shape[0], -1).T, f.reshape(f.shape[0], -1).T
        else:  # [KH, KW, C, M]: output channel c * M + m
            q2, f2 = q.reshape(-1, q.shape[2] * q.shape[3]), f.reshape(-1, f.shape[2] * f.shape[3])
        q2 = q2.astype(np.float64)
        den = np.sum(q2 * q2, axis=0)
        if np.any(den == 0):
            continue
        found[a] = np.sum(q2 * f2.astype(np.float64), axis=0) / den
    return found


def implied_qparams(graph: Graph, seeds: Mapping[str, tuple[Any, int]] | None = None,
                    weights: Mapping[str, np.ndarray] | None = None
                    ) -> dict[str, tuple[Any | None, int | None]]:
    """{tensor: (scale, zero point)} of the entry block's integer tensors, as far as the graph
    determines them.

    Zero points come from the operators that read or write a tensor (RESCALE input_zp /
    output_zp, convolution and pooling zero points; accumulators have 0). Scales are relative in
    an integer graph: they follow from ``seeds`` ({tensor: (scale, zero point)}, e.g. the
    input's quantization parameters, or the output's) along RESCALE (s_out = s_in / (multiplier
    * 2^-shift), per channel on the last axis) and scale-preserving operators (layout, pooling),
    forwards and backwards, and through integer ADD/SUB whose operands' scales agree within 2%
    (the exporters' residual pattern). Tables (TABLE) stop the chain, and so do convolutions unless
    ``weights`` gives their weights' scales ({output tensor: per-channel scale}, from
    ``weight_scales``): then s_acc = s_in * s_w per output channel.
    """
    block = graph.main
    scale: dict[str, Any] = {}
    zp: dict[str, int] = {}
    for n, (s, z) in (seeds or {}).items():
        scale[n] = np.asarray(s, np.float64) if np.ndim(s) else float(s)
        zp[n] = int(z)
    rules: list[tuple[str, str, Any]] = []  # (in, out, ratio s_in/s_out) to propagate
    forward: list[tuple[str, str, Any]] = []  # (in, out, factor s_out/s_in), forwards only
    sums: list[tuple[str, str, str]] = []  # integer ADD/SUB: (a, b, out) on a common scale
    for op in block.operators:
        ins, outs = op.inputs, op.outputs
        if op.op == "RESCALE":
            izp, ozp = _const(block, ins[3]), _const(block, ins[4])
            if izp is not None:
                zp.setdefault(ins[0], int(izp.ravel()[0]))
            if ozp is not None:
                zp.setdefault(outs[0], int(ozp.ravel()[0]))
            m, sh = _const(block, ins[1]), _const(block, ins[2])
            if m is not None and sh is not None:
                r = m.astype(np.float64) * np.exp2(-sh.astype(np.float64))
                rules.append((ins[0], outs[0], r if r.size > 1 else float(r.ravel()[0])))
        elif op.op in _ACCUMULATORS:
            zp.setdefault(outs[0], 0)
            if weights and outs[0] in weights:  # forwards only: s_out = s_in * s_w
                forward.append((ins[0], outs[0], np.asarray(weights[outs[0]], np.float64)))
            izp = _const(block, ins[3]) if len(ins) > 3 else None
            if op.op == "MATMUL":
                izp = _const(block, ins[2])
            if izp is not None:
                zp.setdefault(ins[0], int(izp.ravel()[0]))
        elif op.op in ("ADD", "SUB") and block.tensors[outs[0]].dtype in INTEGER_TYPES:
            sums.append((ins[0], ins[1], outs[0]))
        elif op.op == "AVG_POOL2D":
            izp, ozp = _const(block, ins[1]), _const(block, ins[2])
            if izp is not None:
                zp.setdefault(ins[0], int(izp.ravel()[0]))
            if ozp is not None:
                zp.setdefault(outs[0], int(ozp.ravel()[0]))
            rules.append((ins[0], outs[0], 1.0))
        elif op.op in _SAME_SCALE and block.tensors[outs[0]].dtype in INTEGER_TYPES:
            rules.append((ins[0], outs[0], 1.0))
            if ins[0] in zp:
                zp.setdefault(outs[0], zp[ins[0]])
            elif outs[0] in zp:
                zp.setdefault(ins[0], zp[outs[0]])
    changed = True
    while changed:
        changed = False
        for a, b, w in forward:
            if a in scale and b not in scale and np.ndim(scale[a]) == 0:
                scale[b] = _one_scale(scale[a] * w)
                changed = True
        for a, b, out in sums:  # the operands' scales must agree: then the sum has it too
            if out not in scale and a in scale and b in scale \
                    and np.ndim(scale[a]) == 0 and np.ndim(scale[b]) == 0 \
                    and abs(scale[a] / scale[b] - 1) < 0.02:
                scale[out] = (scale[a] + scale[b]) / 2
                zp.setdefault(out, 0)
                changed = True
        for a, b, r in rules:
            layout = np.ndim(r) == 0 and r == 1.0
            if a in scale and b not in scale and (not layout or np.ndim(scale[a]) == 0):
                scale[b] = _one_scale(scale[a] / r)
                changed = True
            elif b in scale and a not in scale and (not layout or np.ndim(scale[b]) == 0):
                scale[a] = _one_scale(scale[b] * r)
                changed = True
            if layout:
                for x, y in ((a, b), (b, a)):
                    if x in zp and y not in zp:
                        zp[y] = zp[x]
                        changed = True
    names = {n for op in block.operators for n in op.outputs} | set(block.inputs)
    return {n: (scale.get(n), zp.get(n)) for n in names
            if block.tensors[n].dtype in INTEGER_TYPES and (n in scale or n in zp)}


# -- comparison ----------------------------------------------------------------------------------


@dataclass
class LayerDiff:
    """One tensor of ours against its partner. ``method``: "exact" (same type: values compared
    as they are), "dequantized" (ours is integer, its scale and zero point implied by the graph),
    or "correlation" (no scale determinable: SQNR of the best affine fit, ``fit_sqnr``)."""

    index: int
    op: str
    tensor: str
    shape: tuple[int, ...]
    dtype: str
    partner: str
    method: str
    exact: bool
    max_abs_diff: float
    mismatches: int
    size: int
    sqnr_db: float
    saturation: float | None
    correlation: float | None = None
    min: float = math.nan
    max: float = math.nan
    mean: float = math.nan
    samples: int = 1


@dataclass
class Comparison:
    """The result of ``compare``: one row per compared tensor, in graph order."""

    against: str
    rows: list[LayerDiff]
    unmatched: list[str] = field(default_factory=list)  # our tensors with no partner
    graph_name: str = "main"

    @property
    def first_divergence(self) -> LayerDiff | None:
        """The first row (graph order) that is not bit-exact, among tensors compared as they are
        (same type); None when all are. An INT tensor against a float one is never "equal":
        read its SQNR instead."""
        return next((r for r in self.rows if not r.exact and r.method == "exact"), None)

    @property
    def all_exact(self) -> bool:
        return bool(self.rows) and all(r.exact for r in self.rows)

    def table(self, limit: int | None = None) -> str:
        """Per tensor: operator index, op, tensor, shape, dtype, max|diff|, mismatching
        elements, SQNR, saturation, method."""
        head = (f"{'#':>4} {'op':<18} {'tensor':<34} {'shape':<16} {'dtype':<6} "
                f"{'max|diff|':>10} {'mismatch':>9} {'SQNR dB':>8} {'sat %':>6} method")
        first = self.first_divergence
        verdict = ("all bit-exact" if self.all_exact else
                   f"first divergence: #{first.index} {first.op} {first.tensor!r}" if first else
                   "integer against float tensors: read SQNR (dequantized or correlation)")
        lines = [f"against {self.against}: {len(self.rows)} tensors compared, {verdict}", head]
        for r in self.rows[:limit]:
            sat = "-" if r.saturation is None else f"{100 * r.saturation:.1f}"
            sq = "inf" if r.sqnr_db == math.inf else f"{r.sqnr_db:.1f}"
            name = r.tensor if len(r.tensor) <= 34 else r.tensor[:15] + "..." + r.tensor[-16:]
            mis = "-" if r.mismatches < 0 else str(r.mismatches)
            lines.append(f"{r.index:>4} {r.op:<18} {name:<34} {str(list(r.shape)):<16} "
                         f"{r.dtype:<6} {r.max_abs_diff:>10.4g} {mis:>9} {sq:>8} "
                         f"{sat:>6} {r.method}")
        if self.unmatched:
            more = " ..." if len(self.unmatched) > 8 else ""
            lines.append(f"{len(self.unmatched)} tensor(s) with no partner: "
                         f"{', '.join(self.unmatched[:8])}{more}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
            if isinstance(v, tuple):
                return list(v)
            return v
        first = self.first_divergence
        return {"against": self.against, "all_exact": self.all_exact,
                "first_divergence": None if first is None else
                {"index": first.index, "op": first.op, "tensor": first.tensor},
                "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows],
                "unmatched": self.unmatched}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def node_data(self, metric: str = "max_abs_diff", region: str = "main"
                  ) -> dict[str, Any]:
        """Model Explorer node data ({"main": {"results": {"main/op21": {"value": v}}}}) keyed
        by the TOSA adapter's node ids ``<region>/op<N>`` (N the operator's index in its block,
        constants included). Inputs have no operator and are left out."""
        results: dict[str, Any] = {}
        for r in self.rows:
            if r.index < 0:
                continue
            v = getattr(r, metric)
            if isinstance(v, float) and not math.isfinite(v):
                v = 999.0 if v > 0 else -999.0  # Model Explorer takes finite numbers only
            results[f"{region}/op{r.index}"] = {"value": v}
        return {region: {"results": results}}


def _kind_signature(graph: Graph) -> dict[str, list[tuple[int, ...]]]:
    """Output shapes of each operator kind, in graph order."""
    kinds: dict[str, list[tuple[int, ...]]] = {}
    for s in tensor_sites(graph, constants=True):
        kinds.setdefault(s.op, []).append(s.shape)
    return kinds


def _matches(ours: Mapping[str, np.ndarray], theirs: Mapping[str, np.ndarray],
             graph: Graph, other: Graph | None, mapping: Mapping[str, str] | None
             ) -> list[tuple[str, str]]:
    """(our tensor, their tensor) pairs: the user's ``mapping`` first; then, against a dump,
    equal names. Against another graph: its inputs in order (same shapes), and equal names only
    for operator kinds that both graphs have with the same output shapes in the same order:
    ExecuTorch names tensors ``tosa_<op>_default_<k>`` with a counter per kind, so equal names
    mean the same layer only there (an INT8 graph's residual ADD and an FP32 graph's
    hardswish "+3" ADD share the name ``tosa_add_default``)."""
    pairs = dict(mapping or {})
    taken = set(pairs.values())
    if other is None:
        for n in ours:
            if n not in pairs and n in theirs and n not in taken:
                pairs[n] = n
        return [(a, b) for a, b in pairs.items() if a in ours and b in theirs]
    mine = {s.name: s for s in tensor_sites(graph, constants=True)}
    theirs_sites = {s.name: s for s in tensor_sites(other, constants=True)}
    a_in, b_in = graph.main.inputs, other.main.inputs
    if len(a_in) == len(b_in):
        for x, y in zip(a_in, b_in):
            if graph.main.tensors[x].shape == other.main.tensors[y].shape \
                    and x not in pairs and y not in taken:
                pairs[x] = y
                taken.add(y)
    ka, kb = _kind_signature(graph), _kind_signature(other)
    for n in ours:
        if n in pairs or n not in theirs or n in taken:
            continue
        a, b = mine.get(n), theirs_sites.get(n)
        if a is None or b is None or a.op != b.op or a.shape != b.shape \
                or ka.get(a.op) != kb.get(b.op):
            continue
        pairs[n] = n
    return [(a, b) for a, b in pairs.items() if a in ours and b in theirs]


def _diff_row(site: Any, name: str, partner: str, a: np.ndarray, b: np.ndarray, dtype: str,
              qparams: tuple[Any, int | None] | None, samples: int) -> LayerDiff:
    a = np.asarray(a)
    b = np.asarray(b)
    sat = saturation(a, dtype)
    fa = a.astype(np.float64)
    stats = dict(min=float(fa.min()) if fa.size else math.nan,
                 max=float(fa.max()) if fa.size else math.nan,
                 mean=float(fa.mean()) if fa.size else math.nan)
    if a.shape != b.shape:
        if a.size == b.size:
            b = b.reshape(a.shape)
        else:
            raise TosaInputError(f"tensor {name!r}: shape {list(a.shape)} against "
                                 f"{list(b.shape)} of {partner!r}")
    int_vs_float = dtype in INTEGER_TYPES and b.dtype.kind == "f"
    r = correlation(a, b)
    if not int_vs_float:
        fb = b.astype(np.float64)
        same = (a == b) | (np.isnan(fa) & np.isnan(fb)) if a.dtype.kind == "f" else (a == b)
        diff = np.abs(fa - fb)
        return LayerDiff(site.index, site.op, name, tuple(a.shape), dtype, partner, "exact",
                         bool(same.all()), float(np.nanmax(diff)) if diff.size else 0.0,
                         int((~same).sum()), int(a.size), sqnr_db(fb, fa), sat, r,
                         samples=samples, **stats)
    scale, zp = qparams if qparams else (None, None)
    if scale is not None:
        deq = (fa - (zp or 0)) * scale
        method = "dequantized"
        sq = sqnr_db(b, deq)
        diff = np.abs(deq - b)
    else:
        method = "correlation"
        sq = fit_sqnr(a, b)
        diff = None
    # values in different units: no element is "equal"; max |diff| only after dequantizing
    return LayerDiff(site.index, site.op, name, tuple(a.shape), dtype, partner, method, False,
                     float(diff.max()) if diff is not None and diff.size else math.nan,
                     -1, int(a.size), sq, sat, r, samples=samples, **stats)


def fit_sqnr(approx: np.ndarray, signal: np.ndarray) -> float:
    """SQNR (dB, as ``sqnr_db``) of the best affine map of ``approx`` onto ``signal``: what is
    left when no scale or zero point is known (the fit's residual is (1 - r^2) of the signal's
    variance, r the correlation)."""
    a = np.asarray(approx, np.float64).ravel()
    b = np.asarray(signal, np.float64).ravel()
    if a.size < 2 or a.std() == 0:
        return sqnr_db(b, np.full_like(b, b.mean()))
    slope, icpt = np.polyfit(a, b, 1)
    return sqnr_db(b, slope * a + icpt)


def _load_dump(against: Any) -> dict[str, np.ndarray]:
    if isinstance(against, Mapping):
        return {k: np.asarray(v) for k, v in against.items()}
    path = os.fspath(against)
    if not os.path.isfile(path):
        raise TosaInputError(f"{path}: no such file (give 'reference', a Model, a mapping or an "
                             ".npz of tensors)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise TosaInputError(f"{path}: cannot read tensors: {e}") from e


def _as_inputs(model: Any, x: Any) -> tuple[Any, ...]:
    if isinstance(x, Mapping):
        return tuple(x[s.name] for s in model.inputs)
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x,)


def compare(model: Any, inputs: Any, against: Any = "reference", *,
            against_inputs: Any = None, names: Iterable[str] | None = None,
            mapping: Mapping[str, str] | None = None, constants: bool = False,
            scales: Mapping[str, tuple[Any, int]] | None = None,
            batched: bool = False) -> Comparison:
    """Compare every tensor of ``model`` on ``inputs`` with a partner.

    ``against``: ``"reference"`` (the TOSA reference model on the same graph), another Model
    (run on ``against_inputs``, default the same inputs), or a dump of tensors ({name: array} or an
    ``.npz`` path). Tensors match by ``mapping`` ({ours: theirs}), then by equal names (against a
    Model: only where both graphs make that name with the same operator and shape). An integer
    tensor against a float one is dequantized with the scale and zero point the graph implies
    (``implied_qparams``, seeded by ``scales``, e.g. {input name: (scale, zero point)}), else
    compared by correlation; each row says which. ``batched``: inputs hold a leading sample axis
    (statistics over all samples; the reference model then runs sample by sample).
    """
    from tosa_jax.model import Model

    graph = model.partitioned.graph if hasattr(model, "partitioned") else model.graph
    xs = _as_inputs(model, inputs)
    ours = intermediates(model, *xs, names=names, constants=constants, batched=batched)
    other_graph: Graph | None = None
    if isinstance(against, str) and against == "reference":
        in_names = [s.name for s in model.inputs]
        if batched:
            count = np.shape(xs[0])[0]
            per = [reference_intermediates(graph, {n: np.asarray(x)[i]
                                                   for n, x in zip(in_names, xs)},
                                           list(ours)) for i in range(count)]
            theirs = {k: np.stack([p[k] for p in per]) for k in ours}
        else:
            theirs = reference_intermediates(graph, dict(zip(in_names, map(np.asarray, xs))),
                                             list(ours))
        label = "reference model (tosa-tools)"
    elif isinstance(against, Model) or hasattr(against, "partitioned"):
        other_graph = against.partitioned.graph if hasattr(against, "partitioned") \
            else against.graph
        ys = xs if against_inputs is None else _as_inputs(against, against_inputs)
        theirs = intermediates(against, *ys, constants=constants, batched=batched)
        label = "model"
    else:
        theirs = _load_dump(against)
        label = "dump" if isinstance(against, Mapping) else os.fspath(against)
    pairs = _matches(ours, theirs, graph, other_graph, mapping)
    q = implied_qparams(graph, scales, weight_scales(graph, other_graph, pairs)
                        if other_graph is not None else None)
    sites = {s.name: s for s in tensor_sites(graph, constants=True)}
    samples = np.shape(xs[0])[0] if batched and xs else 1
    rows = [_diff_row(sites[a], a, b, ours[a], theirs[b], graph.main.tensors[a].dtype,
                      q.get(a), samples) for a, b in pairs]
    order = {s.name: k for k, s in enumerate(tensor_sites(graph, constants=True))}
    rows.sort(key=lambda r: order.get(r.tensor, 0))
    matched = {a for a, _ in pairs}
    return Comparison(label, rows, [n for n in ours if n not in matched])


# -- a dataset: INT against FP -------------------------------------------------------------------


@dataclass
class ModelComparison:
    """What ``compare_models`` returns."""

    samples: int
    agreement: float | None        # top-1 agreement of the first outputs
    sqnr_db: float                 # first output of model_a against model_b's
    output_method: str             # how model_a's output was brought to model_b's type
    per_layer: Comparison          # matched tensors on the first ``layer_samples`` samples
    seconds: float

    def __repr__(self) -> str:
        agree = "-" if self.agreement is None else f"{self.agreement:.4f}"
        return (f"<ModelComparison {self.samples} samples: agreement {agree}, output SQNR "
                f"{self.sqnr_db:.1f} dB ({self.output_method}), {len(self.per_layer.rows)} "
                "matched tensors>")


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: str = "INT8") -> np.ndarray:
    """round(x / scale) + zero_point, clamped to the type (ties away from zero, as torch's
    quantize_per_tensor rounds half to even: values exactly on a tie may differ by one)."""
    from tosa_jax.ir import HOST_DTYPES

    lo, hi = INT_RANGES[dtype]
    q = np.round(np.asarray(x, np.float64) / scale) + zero_point
    return np.clip(q, lo, hi).astype(HOST_DTYPES[dtype])


def compare_models(model_a: Any, model_b: Any, samples: Any, *, samples_a: Any = None,
                   input_qparams: tuple[float, int] | None = None,
                   output_qparams: tuple[float, int] | None = None,
                   mapping: Mapping[str, str] | None = None, layer_samples: int = 8,
                   batch_size: int = 256, progress: bool | None = None) -> ModelComparison:
    """Two versions of one network over a dataset, e.g. its INT8 and FP32 exports.

    ``samples`` are ``model_b``'s inputs (stacked, one input); ``model_a`` gets ``samples_a`` if
    given, else ``samples`` quantized with ``input_qparams`` (scale, zero point) when its input
    is an integer type. Both run through ``evaluate`` (vmapped, sharded over the local devices).
    ``agreement``: fraction of samples whose arg-max of the first outputs agree. ``sqnr_db``: of
    model_a's first output against model_b's, dequantized with ``output_qparams`` or the scale
    the graph implies (``implied_qparams``, as in ``per_layer``), else by correlation.
    ``per_layer``: ``compare`` of the matched tensors on the first ``layer_samples`` samples
    (``intermediates`` batched: one call per model).
    """
    import time

    from tosa_jax.evaluate import evaluate
    from tosa_jax.model import load

    model_a = model_a if not isinstance(model_a, (str, bytes, os.PathLike)) else load(model_a)
    model_b = model_b if not isinstance(model_b, (str, bytes, os.PathLike)) else load(model_b)
    t0 = time.perf_counter()
    xb = np.asarray(samples)
    spec_a = model_a.inputs[0]
    if samples_a is not None:
        xa = np.asarray(samples_a)
    elif spec_a.dtype in INTEGER_TYPES and xb.dtype.kind == "f":
        if input_qparams is None:
            raise TosaInputError(f"model_a takes {spec_a.dtype} but the samples are "
                                 f"{xb.dtype}: give input_qparams=(scale, zero_point) or "
                                 "samples_a")
        xa = quantize(xb, *input_qparams, dtype=spec_a.dtype)
    else:
        xa = xb
    if xa.shape[0] != xb.shape[0]:
        raise TosaInputError(f"{xa.shape[0]} samples for model_a, {xb.shape[0]} for model_b")
    ra = evaluate(model_a, xa, metric=None, batch_size=batch_size, progress=progress)
    rb = evaluate(model_b, xb, metric=None, batch_size=batch_size, progress=progress)
    oa = ra.outputs[model_a.outputs[0].name]
    ob = rb.outputs[model_b.outputs[0].name]
    n = oa.shape[0]
    pa, pb = oa.reshape(n, -1), ob.reshape(n, -1)
    agreement = float(np.mean(pa.argmax(1) == pb.argmax(1))) if pa.shape[1] > 1 else None
    k = min(layer_samples, n)

    def stacked(m: Any, x: np.ndarray) -> np.ndarray:
        shape = m.inputs[0].shape
        return x[:k] if x.shape[1:] == shape else x[:k, None]

    seeds = {}
    if input_qparams is not None:
        seeds[spec_a.name] = input_qparams
    if output_qparams is not None:
        seeds[model_a.outputs[0].name] = output_qparams
    layers = compare(model_a, stacked(model_a, xa), against=model_b,
                     against_inputs=stacked(model_b, xb), mapping=mapping, scales=seeds,
                     batched=True)
    if oa.dtype.kind in "iu" and ob.dtype.kind == "f":
        # the output's scale: given, or implied by the graph (as in the per-layer table)
        pairs = [(r.tensor, r.partner) for r in layers.rows]
        implied = implied_qparams(model_a.graph, seeds,
                                  weight_scales(model_a.graph, model_b.graph, pairs))
        scale, zp = implied.get(model_a.outputs[0].name, (None, None))
        if scale is not None:
            sq = sqnr_db(ob, (oa.astype(np.float64) - (zp or 0)) * scale)
            method = "dequantized"
        else:
            sq = fit_sqnr(oa, ob)
            method = "correlation"
    else:
        sq, method = sqnr_db(ob, oa), "exact"
    return ModelComparison(n, agreement, sq, method, layers, time.perf_counter() - t0)


# -- pictures ------------------------------------------------------------------------------------


def write_node_data(comparison: Comparison, path: str | os.PathLike,
                    extra: Mapping[str, Mapping[int, Any]] | None = None) -> list[str]:
    """Write Model Explorer node-data files: ``path`` holds max |diff| per operator, and beside it
    ``<stem>.<metric>.json`` for sqnr_db, saturation, mismatches and each ``extra`` metric
    ({metric: {operator index: number, or a node-data result such as {"value": 1, "bgColor":
    "#fc8"}}}, e.g. the hardware placement and cycles). Returns the paths written."""
    base = os.fspath(path)
    stem = base[:-5] if base.endswith(".json") else base
    written = []
    for metric in ("max_abs_diff", "sqnr_db", "saturation", "mismatches"):
        data = comparison.node_data(metric)
        if metric == "saturation":
            for v in data["main"]["results"].values():
                v["value"] = -1.0 if v["value"] is None else v["value"]
        p = base if metric == "max_abs_diff" else f"{stem}.{metric}.json"
        with open(p, "w") as f:
            json.dump(data, f)
        written.append(p)
    for metric, values in (extra or {}).items():
        p = f"{stem}.{metric}.json"
        with open(p, "w") as f:
            json.dump({"main": {"results": {
                f"main/op{i}": (v if isinstance(v, Mapping) else {"value": v})
                for i, v in values.items() if i >= 0}}}, f)
        written.append(p)
    return written


def html_report(comparison: Comparison, path: str | os.PathLike | None = None,
                title: str = "tosa_jax inspect") -> str:
    """A self-contained HTML page: the comparison table with a bar per row (SQNR, or mismatch
    fraction), the first divergence highlighted. Returns the HTML (and writes it to ``path``)."""
    first = comparison.first_divergence
    finite = [r.sqnr_db for r in comparison.rows if math.isfinite(r.sqnr_db)]
    top = max(finite + [1.0])
    rows = []
    for r in comparison.rows:
        frac = max(r.mismatches, 0) / r.size if r.size else 0.0
        width = 100.0 if r.sqnr_db == math.inf else max(0.0, 100.0 * r.sqnr_db / top)
        colour = "#3a3" if r.exact else ("#d73" if frac > 0.01 else "#db3")
        mark = ' class="first"' if first is not None and r is first else ""
        sat = "-" if r.saturation is None else f"{100 * r.saturation:.1f}%"
        sq = "exact" if r.sqnr_db == math.inf else f"{r.sqnr_db:.1f}"
        rows.append(
            f"<tr{mark}><td>{r.index}</td><td>{html.escape(r.op)}</td>"
            f"<td>{html.escape(r.tensor)}</td><td>{list(r.shape)}</td><td>{r.dtype}</td>"
            f"<td>{r.max_abs_diff:.4g}</td>"
            f"<td>{'-' if r.mismatches < 0 else f'{r.mismatches}/{r.size}'}</td><td>{sq}</td>"
            f"<td>{sat}</td><td>{r.method}</td><td><div class=bar style=\"width:{width:.0f}px;"
            f"background:{colour}\"></div></td></tr>")
    if not comparison.rows:
        summary = "nothing compared"
    elif comparison.all_exact:
        summary = "all tensors bit-exact"
    elif first is not None:
        summary = (f"first divergence: operator #{first.index} {first.op} "
                   f"(tensor {html.escape(first.tensor)})")
    else:
        summary = "integer against float tensors: read SQNR"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:13px sans-serif;margin:1em}}table{{border-collapse:collapse}}
td,th{{padding:2px 6px;border-bottom:1px solid #ddd;text-align:left}}
tr.first td{{background:#fdd}}.bar{{height:10px}}</style></head><body>
<h2>{html.escape(title)}</h2><p>against {html.escape(comparison.against)}: {len(comparison.rows)}
tensors compared; {summary}. Bars: SQNR (full width: bit-exact).</p>
<table><tr><th>#</th><th>op</th><th>tensor</th><th>shape</th><th>dtype</th><th>max|diff|</th>
<th>mismatching</th><th>SQNR dB</th><th>saturation</th><th>method</th><th></th></tr>
{''.join(rows)}</table></body></html>
"""
    if path is not None:
        with open(path, "w") as f:
            f.write(page)
    return page
