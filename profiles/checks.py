"""Static analysis of a TOSA graph against TOSA 1.0.2: type support, ERROR_IF rules, levels.

One pass over every operator of every block (the IR only) produces, per operator, an ``OpInfo``:
the matched row of the spec's Supported Data Types table, the profile/extension options that
include it (and what else the operator needs: EXT-DYNAMIC for non-constant CTC inputs, the
rounding extensions of RESCALE), the values its level limits constrain, and every ERROR_IF that
the graph breaks as a ``Violation`` naming operator, argument, rule and values.

Rules come from three places of the specification, all checkable before execution:

* the operator's Arguments table (tosa.xml, via ``spec_data``): input/output counts, ranks,
  shapes (symbols such as ``[N,IH,IW,C]`` must agree between arguments), element types that
  must agree (``in_out_t``), fixed sizes of attribute arrays, and CTC inputs;
* the Supported Data Types table: the combination of element types must be one of its rows;
* the operator's pseudocode ERROR_IFs (and those of the helpers it calls: broadcast_shape,
  idiv_check), one function per operator below, named after it. Output shapes must equal the
  shapes the inputs and attributes derive ("the shape of each output argument must be derivable
  from operator input arguments and attributes", Operators chapter).

Graph structure (Operator Graphs section): every name an operator or block uses is a tensor
of its block, each tensor is produced once, operators have a topological order (they may be
listed in another; a cycle is refused), control flow names existing blocks and never recurses,
and graph inputs/outputs are not shape_t.

REQUIRE conditions make a result unpredictable, not an error, and LEVEL_CHECKs are REQUIREs:
level values are recorded and judged against a level by the caller, never refused here. Value
rules on compile-time-constant inputs (zero points, RESIZE scales ...) are checked where those
inputs are constants; under EXT-DYNAMIC they are graph inputs, known only when the graph runs:
the zero-point rules are then recorded as ``RuntimeCheck``s (``GraphAnalysis.runtime_checks``),
which the run checks (tosa_jax.executor).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import product
from typing import Any

import numpy as np

from tosa_jax.ir import FLOAT_TYPES, STORAGE_BITS, Block, Graph, Operator, Tensor, is_1_1
from tosa_jax.profiles import spec_data

SPEC_OPERATORS: dict[str, Any] = spec_data.OPERATORS
ACC_TYPES = ("INT32", "INT48", "FP16", "FP32")
ACC_TYPES_1_1 = ACC_TYPES + ("BF16",)


def spec_operators(v11: bool = False) -> dict[str, Any]:
    """The operators of TOSA 1.0.2, or of the TOSA 1.1 draft (loaded on first use: 1.1 graphs
    only pay for its larger tables)."""
    if not v11:
        return SPEC_OPERATORS
    from tosa_jax.profiles import spec_data_1_1

    return spec_data_1_1.OPERATORS
NAN_MODES = ("PROPAGATE", "IGNORE")
RESIZE_MODES = ("NEAREST", "BILINEAR")  # the schema's names (spec: NEAREST_NEIGHBOR, BILINEAR)
ROUNDING_EXTENSIONS = {name: v["extension"]
                       for name, v in spec_data.ENUMS["rounding_mode_t"].items()}
# Bytes of one element for the level's size limit: the storage width, INT4 counted as a byte.
ELEMENT_BYTES = {t: max(1, bits // 8) for t, bits in STORAGE_BITS.items()}


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (block, operator index, operator), which argument, the rule as the
    spec words it, and the values that break it."""

    block: str
    index: int | None
    op: str | None
    argument: str | None
    rule: str
    values: str = ""
    location: str | None = None

    def where(self) -> str:
        if self.op is None:
            return f"block {self.block!r}"
        loc = f", at {self.location}" if self.location else ""
        return f"{self.op} (operator #{self.index} of block {self.block!r}{loc})"

    def __str__(self) -> str:
        arg = f" argument {self.argument!r}:" if self.argument else ""
        vals = f" ({self.values})" if self.values else ""
        return f"{self.where()}:{arg} {self.rule}{vals}"


@dataclass(frozen=True)
class RuntimeCheck:
    """An ERROR_IF on the values of an input that is not a constant (under EXT-DYNAMIC, a zero
    point given when the graph runs): ``violated(values)`` (numpy or JAX, elementwise) says
    where the rule breaks. Checked by the run (tosa_jax.executor, in a checked program; the
    Model, on graph inputs), which reports it as ``str(self)`` says."""

    block: str
    index: int
    op: str
    argument: str
    tensor: str
    rule: str
    violated: Callable[[Any], Any]
    location: str | None = None

    def __str__(self) -> str:
        loc = f", at {self.location}" if self.location else ""
        return (f"{self.op} (operator #{self.index} of block {self.block!r}{loc}): argument "
                f"{self.argument!r}: {self.rule} fails for these inputs ({self.argument} is "
                f"tensor {self.tensor!r}, given when the graph runs)")


@dataclass
class OpInfo:
    """What one operator needs: its type-support row(s), profile/extension options, levels."""

    block: str
    index: int
    op: str
    location: str | None = None
    mode: str | None = None
    types: dict[str, str] = field(default_factory=dict)
    # Alternatives, each a tuple of profile/extension names that together include the operator.
    options: tuple[tuple[str, ...], ...] = ()
    # Extensions needed beyond the type-support row (with the reason), added to every option.
    extra: dict[str, str] = field(default_factory=dict)
    # (limit name, value, what) for every LEVEL_CHECK(value <= limit) of the operator.
    levels: list[tuple[str, int, str]] = field(default_factory=list)

    def all_options(self) -> tuple[tuple[str, ...], ...]:
        if not self.extra:
            return self.options
        extra = tuple(sorted(self.extra))
        return tuple(tuple(dict.fromkeys(o + extra)) for o in self.options)


# --------------------------------------------------------------------------------------------
# the Arguments table, prepared once per operator


_SHAPE_ITEM = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


@dataclass(frozen=True)
class _Arg:
    name: str
    category: str
    type: str
    element_type: str
    shape_symbol: str | None          # "shape1": the whole shape is a symbol
    dims: tuple[str, ...] | None      # "[N,IH,IW,C]" -> ("N", "IH", "IW", "C")
    rank: tuple[int | str, int | str] | None
    ctc: tuple[str, ...]
    ctc_remove: tuple[str, ...]
    level_limits: tuple[tuple[str, str], ...]
    optional: bool
    is_list: bool


@dataclass(frozen=True)
class _OpSpec:
    name: str
    inputs: tuple[_Arg, ...]
    outputs: tuple[_Arg, ...]
    attributes: tuple[_Arg, ...]
    typesupport: tuple[dict[str, Any], ...]
    type_names: tuple[str, ...]


def _arg(a: dict[str, Any]) -> _Arg:
    shape = a["shape"]
    symbol, dims = None, None
    if shape.startswith("[") and shape.endswith("]"):
        dims = tuple(d.strip() for d in shape[1:-1].split(","))
    elif shape != "-":
        symbol = shape
    return _Arg(a["name"], a["category"], a["type"], a["element_type"], symbol, dims,
                a["rank"], a["ctc"], a["ctc_remove"], a["level_limits"], a["optional"],
                a["type"] in ("tensor_list_t", "shape_list_t"))


@cache
def op_spec(name: str, v11: bool = False) -> _OpSpec | None:
    """The prepared Arguments and Supported Data Types tables of operator ``name`` (of TOSA
    1.0.2, or with ``v11`` of the TOSA 1.1 draft)."""
    spec = spec_operators(v11).get(name)
    if spec is None:
        return None
    args = [_arg(a) for a in spec["arguments"]]
    rows = spec["typesupport"]
    if v11 and name == "CONV2D":
        rows = _conv2d_1_1_rows(rows)
    elif v11 and name in ("CONV3D", "TRANSPOSE_CONV2D"):
        # tosa-tools 2026.8 keeps these on their single-type rows (its generator's
        # TYPE_CONV_V100): its reference model refuses the draft table's "Mixed precision"
        # rows (FP16 x FP8E4M3, BF16 x BF16 -> FP32, block-scaled weights...) as
        # "Unsupported operation type".
        rows = tuple(r for r in rows if not r["mode"].startswith("Mixed precision"))
    return _OpSpec(name, tuple(a for a in args if a.category == "input"),
                   tuple(a for a in args if a.category == "output"),
                   tuple(a for a in args if a.category == "attribute"),
                   rows, spec["type_names"])


# TOSA 1.1 CONV2D's floating-point rows as tosa-tools 2026.8 defines them (its generator's
# _setTypesConv2d and _get_conv_accum_output_dtypes_from_tgTypes; its reference model accepts
# exactly these and refuses the others as "Unsupported operation type"), where the draft's
# tosa.xml (spec commit 653c153) lists other mixed-precision rows. in_t and weight_t are any two
# of FP8E4M3, FP8E5M2, FP16, BF16, FP32 and the bs32 block-scaled types (whose zero points are
# FP32); out_t is FP32 (acc_t FP32), or FP16 when neither is BF16 or FP32 (acc_t FP16 or FP32),
# or BF16 when neither is FP16 or FP32 (acc_t BF16 or FP32). The integer rows stay the table's.
_CONV2D_1_1_PLAIN = ("FP8E4M3", "FP8E5M2", "FP16", "BF16", "FP32")
_CONV2D_1_1_SCALED = tuple(f"BS32_FP8UE8M0_{t}" for t in (
    "FP8E4M3", "FP8E5M2", "FP6E3M2", "FP6E2M3", "FP4E2M1", "MXINT8"))
_CONV2D_1_1_ACC = {"FP32": ("FP32",), "FP16": ("FP16", "FP32"), "BF16": ("BF16", "FP32")}


def _type_extensions(t: str) -> tuple[str, ...]:
    """The extensions an element type of a float CONV2D row asks for (none: PRO-FP's own)."""
    if t.startswith("BS32_FP8UE8M0_"):
        value = t.removeprefix("BS32_FP8UE8M0_")
        return ("EXT-MX-COMMON", "EXT-MX-" + ("INT8" if value == "MXINT8" else value))
    return {"FP8E4M3": ("EXT-FP8E4M3",), "FP8E5M2": ("EXT-FP8E5M2",),
            "BF16": ("EXT-BF16",)}.get(t, ())


def _conv2d_1_1_rows(table: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    known = {tuple(sorted(r["types"].items())): r for r in table}
    rows = [r for r in table if r["types"]["in_t"] not in FLOAT_TYPES
            and not r["types"]["in_t"].startswith("BS")]
    for in_t, weight_t in product(_CONV2D_1_1_PLAIN + _CONV2D_1_1_SCALED, repeat=2):
        pair = {in_t, weight_t}
        outs = ["FP32"]
        if not pair & {"BF16", "FP32"}:
            outs.append("FP16")
        if not pair & {"FP16", "FP32"}:
            outs.append("BF16")
        for out_t in outs:
            for acc_t in _CONV2D_1_1_ACC[out_t]:
                types = {"in_t": in_t, "weight_t": weight_t, "out_t": out_t, "acc_t": acc_t,
                         "in_zp_t": "FP32" if in_t.startswith("BS") else in_t,
                         "weight_zp_t": "FP32" if weight_t.startswith("BS") else weight_t}
                row = known.get(tuple(sorted(types.items())))
                if row is None:
                    exts = tuple(dict.fromkeys(e for t in (in_t, weight_t, out_t, acc_t)
                                               for e in _type_extensions(t)))
                    row = {"mode": "Mixed precision fp (tosa-tools 2026.8)", "types": types,
                           "options": (exts or ("PRO-FP",),)}
                rows.append(row)
    return tuple(rows)


@cache
def _compile(expr: str) -> Any:
    py = expr.replace("/", "//")
    if not re.fullmatch(r"[A-Za-z_0-9+\-*/() ]+", py):
        raise ValueError(f"unexpected expression {expr!r} in the spec data")
    return compile(py, f"<spec {expr}>", "eval")


def _eval(expr: str, env: dict[str, int], ranks: dict[str, int]) -> int | None:
    """Evaluate a spec shape expression (``C*M``, ``W/2 + 1``, ``2*rank(shape1)``)."""
    text = re.sub(r"rank\((\w+)\)", lambda m: str(ranks[m.group(1)]) if m.group(1) in ranks
                  else "None", expr)
    if "None" in text:
        return None
    try:
        return int(eval(_compile(text), {"__builtins__": {}}, env))  # noqa: S307
    except (NameError, ZeroDivisionError, TypeError):
        return None


def idiv_check(numerator: int, denominator: int) -> int | None:
    """The spec's idiv_check: the exact quotient, or None where it is not exact (ERROR_IF)."""
    if denominator == 0:
        return None
    q = abs(numerator) // abs(denominator) * (1 if (numerator >= 0) == (denominator > 0) else -1)
    return q if q * denominator == numerator else None


def broadcast_shape(shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[int, ...] | None:
    """The spec's broadcast_shape, or None where it raises ERROR_IF."""
    if len(shape1) != len(shape2):
        return None
    out = []
    for a, b in zip(shape1, shape2):
        if a == 1:
            out.append(b)
        elif b != 1 and b != a:
            return None
        else:
            out.append(a)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# one operator


class OpCheck:
    """The state of checking one operator: its arguments bound to tensors, types, violations."""

    def __init__(self, analysis: GraphAnalysis, block: Block, index: int, op: Operator,
                 spec: _OpSpec) -> None:
        self.analysis = analysis
        self.block = block
        self.index = index
        self.opr = op
        self.spec = spec
        self.info = OpInfo(block.name, index, op.op, op.location)
        self.tensors: dict[str, Tensor | list[Tensor]] = {}
        self.types: dict[str, str] = {}
        self.env: dict[str, int] = {}
        self.ranks: dict[str, int] = {}
        self.deferred: list[tuple[_Arg, int, str, int]] = []
        self.named: dict[str, int] | None = None
        self.failed = False

    # -- reporting --------------------------------------------------------------------------

    def fail(self, argument: str | None, rule: str, **values: Any) -> None:
        text = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        self.analysis.violations.append(Violation(self.block.name, self.index, self.opr.op,
                                                  argument, rule, text, self.opr.location))
        self.failed = True

    def error_if(self, argument: str, rule: str, violated: Callable[[Any], Any],
                 **values: Any) -> None:
        """ERROR_IF ``rule`` on the values of ``argument``, which break it where ``violated``
        (elementwise, numpy or JAX) is true: decided now for a constant (failing with its first
        value and ``values``), else left to the run (``GraphAnalysis.runtime_checks``)."""
        data = self.const(argument)
        if data is not None:
            if data.size and np.any(violated(data)):
                v = data.reshape(-1)[0]
                self.fail(argument, rule, **{argument: float(v) if data.dtype.kind in "fV"
                                             else int(v)}, **values)
            return
        t = self.tensors.get(argument)
        if isinstance(t, Tensor):
            self.analysis.runtime_checks.append(RuntimeCheck(
                self.block.name, self.index, self.opr.op, argument, t.name, rule, violated,
                self.opr.location))

    def level(self, limit: str, value: int, what: str) -> None:
        self.info.levels.append((limit, int(value), what))

    # -- arguments --------------------------------------------------------------------------

    def t(self, name: str) -> Tensor:
        value = self.tensors[name]
        assert isinstance(value, Tensor)
        return value

    def has(self, name: str) -> bool:
        return isinstance(self.tensors.get(name), Tensor)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.t(name).shape

    def attr(self, name: str, default: Any = None) -> Any:
        return self.opr.attrs.get(name, default)

    def const(self, name: str) -> np.ndarray | None:
        """The values of a constant input (a CONST/CONST_SHAPE output), else None."""
        t = self.tensors.get(name)
        if isinstance(t, Tensor) and t.data is not None:
            return t.data
        return None

    def scalar(self, name: str) -> int | float | None:
        data = self.const(name)
        if data is None or data.size < 1:
            return None
        v = data.reshape(-1)[0]
        return float(v) if data.dtype.kind in "fV" else int(v)

    def ints(self, name: str) -> tuple[int, ...] | None:
        """An attribute array or a constant input, as Python ints."""
        if name in self.opr.attrs:
            value = self.opr.attrs[name]
            return tuple(int(v) for v in value) if value is not None else None
        data = self.const(name)
        return None if data is None else tuple(data.reshape(-1).tolist())


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


# --------------------------------------------------------------------------------------------
# the whole graph


class GraphAnalysis:
    """Analyse every block of a graph; ``infos`` per operator, ``violations`` found."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.violations: list[Violation] = []
        self.runtime_checks: list[RuntimeCheck] = []
        self.infos: list[OpInfo] = []
        self.graph_levels: list[tuple[str, int, str]] = []
        self._blocks: dict[str, Block] = {}
        self._depth: dict[str, int] = {}
        self._forward = False
        # A graph stamped 1.1 (draft) is judged by TOSA 1.1's tables, a 1.0 graph by 1.0.2's.
        self.v11 = is_1_1(graph.version)

    def run(self) -> GraphAnalysis:
        graph = self.graph
        if not graph.regions or not graph.regions[0].blocks:
            self.violations.append(Violation("", None, None, None, "the graph has no block"))
            return self
        for region in graph.regions:
            for block in region.blocks:
                if block.name in self._blocks:
                    self.violations.append(Violation(block.name, None, None, None,
                                                     "two blocks share this name"))
                self._blocks.setdefault(block.name, block)
        for region in graph.regions:  # control flow names a region (TOSA 1.0) or a block
            if region.blocks:
                self._blocks[region.name] = region.blocks[0]
        main = graph.main
        for name in main.inputs + main.outputs:
            t = main.tensors.get(name)
            if t is not None and t.dtype == "SHAPE":
                self.violations.append(Violation(
                    main.name, None, None, name,
                    "the inputs and outputs of a graph may not include elements of type shape_t",
                    f"{name} is SHAPE"))
        self._nesting(main.name, 0, ())
        for region in graph.regions:
            for block in region.blocks:
                self._block(block)
        return self

    def _nesting(self, name: str, depth: int, stack: tuple[str, ...]) -> None:
        """Nesting depth of each block under control flow (recursion is refused)."""
        if name in stack:
            self.violations.append(Violation(name, None, None, None,
                                             "control flow recurses into this block",
                                             " -> ".join(stack + (name,))))
            return
        if self._depth.get(name, -1) >= depth:
            return
        self._depth[name] = depth
        block = self._blocks.get(name)
        if block is None:
            return
        for op in block.operators:
            if op.op in ("COND_IF", "WHILE_LOOP"):
                self.graph_levels.append(("MAX_NESTING", depth + 1,
                                          f"{op.op} nesting depth in block {name!r}"))
                for key in ("then_graph", "else_graph", "cond_graph", "body_graph"):
                    sub = op.attrs.get(key)
                    if isinstance(sub, str) and sub:
                        self._nesting(sub, depth + 1, stack + (name,))

    def _block(self, block: Block) -> None:
        tensors = block.tensors
        produced: dict[str, int] = {}
        for name in block.inputs:
            if name not in tensors:
                self.violations.append(Violation(block.name, None, None, name,
                                                 "a block input is not a tensor of the block"))
            produced[name] = -1
        for name, t in tensors.items():
            if t.variable:  # EXT-VARIABLE: holds a value from the start, may be written again
                produced[name] = -1
        log2 = self.graph_levels
        for t in tensors.values():
            size = ELEMENT_BYTES.get(t.dtype, 1)
            for d in t.shape:
                size *= d
            if size > (1 << 31) - 1:
                log2.append(("MAX_LOG2_SIZE", max(size, 1).bit_length(),
                             f"tensor {t.name!r} of {size} bytes"))
            if len(t.shape) > 6:
                log2.append(("MAX_RANK", len(t.shape), f"rank of tensor {t.name!r}"))
        for i, op in enumerate(block.operators):
            for out in op.outputs:
                if out in tensors and tensors[out].variable:
                    continue
                if out in produced:
                    self.violations.append(Violation(
                        block.name, i, op.op, out, "a tensor is produced more than once",
                        "also by " + ("the block inputs" if produced[out] < 0
                                      else f"operator #{produced[out]}")))
                else:
                    produced[out] = i
        self._forward = False
        for i, op in enumerate(block.operators):
            self._operator(block, i, op, produced)
        if self._forward:
            self._cycles(block, produced)
        for name in block.outputs:
            if name not in tensors:
                self.violations.append(Violation(block.name, None, None, name,
                                                 "a block output is not a tensor of the block"))
            elif name not in produced and tensors[name].data is None:
                self.violations.append(Violation(block.name, None, None, name,
                                                 "a block output is produced by no operator"))

    def _cycles(self, block: Block, produced: dict[str, int]) -> None:
        """Operators may be listed in any order that has a topological one: refuse cycles."""
        ops = block.operators
        deps = [{produced[n] for n in op.inputs if produced.get(n, -1) >= 0} for op in ops]
        users: list[list[int]] = [[] for _ in ops]
        for i, d in enumerate(deps):
            for j in d:
                users[j].append(i)
        pending = [len(d) for d in deps]
        ready = [i for i, n in enumerate(pending) if n == 0]
        done = 0
        while ready:
            i = ready.pop()
            done += 1
            for u in users[i]:
                pending[u] -= 1
                if pending[u] == 0:
                    ready.append(u)
        if done < len(ops):
            stuck = [i for i, n in enumerate(pending) if n > 0]
            first = ops[stuck[0]]
            self.violations.append(Violation(
                block.name, stuck[0], first.op, None,
                "operators form a cycle (each needs an input from a later operator): the "
                "graph has no topological order",
                "operators " + ", ".join(f"#{i} {ops[i].op}" for i in stuck[:10]),
                first.location))

    def _operator(self, block: Block, index: int, op: Operator, produced: dict[str, int]) -> None:
        spec = op_spec(op.op, self.v11)
        if spec is None:
            stamp = ".".join(str(v) for v in self.graph.version[:3])
            later = not self.v11 and op.op in spec_operators(True)
            self.violations.append(Violation(
                block.name, index, op.op, None,
                f"not an operator of TOSA {'1.1' if self.v11 else '1.0'}"
                + (f" (it is TOSA 1.1; the graph is stamped {stamp})" if later else ""),
                location=op.location))
            return
        if op.op in ("CONST", "CONST_SHAPE") and not op.inputs and len(op.outputs) == 1:
            t = block.tensors.get(op.outputs[0])
            if t is not None and t.data is not None and (t.dtype == "SHAPE") == (
                    op.op == "CONST_SHAPE"):
                m = _type_rows(op.op, (("out_t", t.dtype),) if op.op == "CONST" else (),
                               None, None, self.v11)
                if m.error is None:  # the common case, without the general machinery
                    self.infos.append(OpInfo(block.name, index, op.op, op.location, m.mode,
                                             m.types, m.options))
                    return
        c = OpCheck(self, block, index, op, spec)
        self.infos.append(c.info)
        if op.op in VARIABLE_OPS:
            _variable(c)
            return
        for name in op.inputs:
            t = block.tensors.get(name)
            if t is not None and name not in produced and t.data is None:
                c.fail(None, "an input tensor is produced by no operator and is no block input",
                       tensor=name)
            elif t is not None and produced.get(name, -1) >= index:
                self._forward = True  # valid unless a cycle: checked for the whole block
        try:
            if not _bind(c):
                return
            _check_shapes(c)
            _match_types(c)
            _check_attributes(c)
            _check_ctc(c)
            rule = RULES.get(op.op)
            if rule is not None and not c.failed:
                rule(c)
            _level_limits(c)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            # an attribute of the wrong kind (a damaged or hand-made graph): refused, named
            c.fail(None, "malformed operator: an argument is not of the kind the spec defines",
                   error=f"{type(e).__name__}: {e}")


# --------------------------------------------------------------------------------------------
# generic rules from the Arguments table


def _bind(c: OpCheck) -> bool:
    """Bind the operator's input/output tensor names to the spec's arguments (counts first)."""
    op, spec, tensors = c.opr, c.spec, c.block.tensors
    ins, outs = list(spec.inputs), list(spec.outputs)
    for kind, names, args in (("input", op.inputs, ins), ("output", op.outputs, outs)):
        fixed = [a for a in args if not a.is_list]
        has_list = len(fixed) < len(args)
        if (len(names) != len(fixed) and not has_list) or len(names) < len(fixed):
            expected = (f"{len(fixed)} or more" if has_list else str(len(fixed)))
            c.fail(None, f"ERROR_IF(operator {kind} tensors do not meet requirement of operator "
                   f"Arguments {kind}s): {op.op} takes {expected} {kind}(s) "
                   f"({', '.join(a.name for a in args)})", got=len(names), names=list(names))
            return False
        pos = 0
        for a in args:
            if a.is_list:
                count = len(names) - len(fixed)
                chosen = names[pos:pos + count]
                pos += count
            else:
                chosen = [names[pos]]
                pos += 1
            found = []
            for n in chosen:
                t = tensors.get(n)
                if t is None:
                    c.fail(a.name, f"{kind} {n!r} is not a tensor of block {c.block.name!r}")
                    return False
                if (a.type in ("shape_t", "shape_list_t")) != (t.dtype == "SHAPE") and (
                        a.type in ("shape_t", "shape_list_t") or c.analysis.v11
                        and a.type == "tensor_t"):
                    c.fail(a.name, f"a {a.type} argument takes shape_t values, a tensor_t "
                           "argument tensors", tensor=n, element_type=t.dtype)
                    return False
                found.append(t)
            c.tensors[a.name] = found if a.is_list else found[0]
    return True


# Where the TOSA 1.1 draft's tosa.xml (spec commit 653c153) contradicts its own descriptions and
# pseudocode, which the reference model follows: ROW_GATHER_BLOCK_SCALED's values and output
# lists are [N,K,C] and [N,W*row_count,C] (rank 3), the XML says rank 4.
_RANK_ERRATA: dict[tuple[str, str], tuple[int, int]] = {
    ("ROW_GATHER_BLOCK_SCALED", "values"): (3, 3),
    ("ROW_GATHER_BLOCK_SCALED", "output"): (3, 3),
}


# TOSA 1.1 tensor lists holding a block-scaled tensor: (values, scales) when two long; the
# values are of in_out_t, the scales of scale_t (tensor-element-scale-type in tosa.xml).
_VALUE_SCALE_LISTS = {("RESHAPE_BLOCK_SCALED", "input"), ("RESHAPE_BLOCK_SCALED", "output"),
                      ("ROW_GATHER_BLOCK_SCALED", "values"), ("ROW_GATHER_BLOCK_SCALED", "output")}


def _check_shapes(c: OpCheck) -> None:
    """Ranks, shape symbols shared between arguments, element types shared between arguments."""
    env, ranks, deferred = c.env, c.ranks, c.deferred
    whole: dict[str, tuple[str, tuple[int, ...]]] = {}
    first: dict[str, str] = {}
    for a in c.spec.inputs + c.spec.outputs:
        value = c.tensors.get(a.name)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        scaled = (c.opr.op, a.name) in _VALUE_SCALE_LISTS and len(items) == 2
        for index, t in enumerate(items):
            rank = len(t.shape)
            bounds = _RANK_ERRATA.get((c.opr.op, a.name), a.rank) if c.analysis.v11 else a.rank
            if bounds is not None:
                lo, hi = bounds
                if isinstance(lo, int) and rank < lo or isinstance(hi, int) and rank > hi:
                    c.fail(a.name, f"rank must be in [{lo}, {hi}]", shape=t.shape, rank=rank)
                    continue
            if a.type == "shape_t" and t.dtype != "SHAPE":
                c.fail(a.name, "argument of type shape_t must be a SHAPE tensor", type=t.dtype)
            elif a.type == "tensor_t" and t.dtype == "SHAPE":
                c.fail(a.name, "argument of type tensor_t may not be a SHAPE", type=t.dtype)
            et = a.element_type
            dtype = t.type_name  # a TOSA 1.1 block-scaled tensor: BS32_FP8UE8M0_<value type>
            if scaled and index == 1:  # (values, scales): the scales are of scale_t
                if c.types.setdefault("scale_t", t.dtype) != t.dtype:
                    c.fail(a.name, "element type scale_t must be the same for all its "
                           "arguments", scales=t.dtype, scale_t=c.types["scale_t"])
                continue
            if et and et != "-" and a.type != "shape_t":
                if et.isupper():
                    if dtype != et:
                        c.fail(a.name, f"element type must be {et}", type=dtype)
                elif et in c.types and c.types[et] != dtype:
                    c.fail(a.name, f"element type {et} must be the same for all its arguments",
                           **{a.name: dtype, first[et]: c.types[et]})
                else:
                    c.types.setdefault(et, dtype)
                    first.setdefault(et, a.name)
        if isinstance(value, list) or not isinstance(value, Tensor):
            continue
        t = value
        if a.shape_symbol is not None:
            ranks[a.shape_symbol] = len(t.shape)
            seen = whole.get(a.shape_symbol)
            if seen is None:
                whole[a.shape_symbol] = (a.name, t.shape)
            elif seen[1] != t.shape:
                c.fail(a.name, f"shape must equal the shape of {seen[0]!r} (both {a.shape_symbol})",
                       **{a.name: t.shape, seen[0]: seen[1]})
        elif a.dims is not None and a.type in ("tensor_t", "shape_t"):
            if len(a.dims) != len(t.shape):
                c.fail(a.name, f"shape must be [{','.join(a.dims)}]", shape=t.shape)
                continue
            for i, (d, n) in enumerate(zip(a.dims, t.shape)):
                if d.isdigit():
                    if n != int(d):
                        c.fail(a.name, f"shape must be [{','.join(a.dims)}]", shape=t.shape)
                elif _SHAPE_ITEM.match(d) and d not in ("TABLE_SIZE",):
                    if d in env and env[d] != n:
                        c.fail(a.name, f"dimension {d} must agree between arguments "
                               f"(shape [{','.join(a.dims)}])",
                               **{a.name: t.shape, d: env[d]})
                    env.setdefault(d, n)
                else:
                    deferred.append((a, i, d, n))


def _check_deferred(c: OpCheck) -> None:
    """Dimensions given by expressions (``C*M``, ``W/2 + 1``, ``[rank(shape1)]``)."""
    for a, _i, d, n in c.deferred:
        want = _eval(d, c.env, c.ranks)
        if want is not None and want != n:
            t = c.t(a.name)
            c.fail(a.name, f"shape must be [{','.join(a.dims or ())}]", shape=t.shape,
                   **{d.replace(" ", ""): want})


@dataclass(frozen=True)
class _TypeMatch:
    mode: str | None
    types: dict[str, str]
    params: tuple[tuple[str, int], ...]
    options: tuple[tuple[str, ...], ...]
    error: tuple[str | None, str, dict[str, Any]] | None = None


@lru_cache(maxsize=4096)
def _type_rows(op: str, bound: tuple[tuple[str, str], ...], acc: Any, mode: Any,
               v11: bool = False) -> _TypeMatch:
    """The Supported Data Types rows of ``op`` for the bound element types (cached)."""
    spec = op_spec(op, v11)
    assert spec is not None
    rows = spec.typesupport
    matches = [r for r in rows if all(r["types"].get(k, v) == v for k, v in bound)]
    values = dict(bound)
    if matches and "acc_t" in matches[0]["types"] and any(
            a.name == "acc_type" for a in spec.attributes):
        narrowed = [r for r in matches if r["types"].get("acc_t") == acc]
        if not narrowed:
            allowed = sorted({r["types"]["acc_t"] for r in matches})
            return _TypeMatch(None, {}, (), (), (
                "acc_type", "ERROR_IF(acc_type does not match acc_t of the Supported Data Types "
                "table)", dict(acc_type=acc, allowed=allowed, **values)))
        matches = narrowed
    if op == "RESIZE" and matches:
        # the row's mode names it after its last comma: "signed 8, nearest" (1.0), "signed 8,
        # nearest neighbor" and "block scaled with fp8ue8m0 scale factor, nearest neighbor"
        # (1.1); rows without one (fp16, fp8...) take both modes
        word = {"NEAREST": "nearest", "BILINEAR": "bilinear"}.get(mode, "?")
        narrowed = [r for r in matches if "," not in r["mode"]
                    or r["mode"].rsplit(",", 1)[1].split()[0] == word]
        if not narrowed:
            return _TypeMatch(None, {}, (), (), (
                "mode", "the mode does not match the Supported Data Types row of the element "
                "types", dict(mode=mode, **values)))
        matches = narrowed
    if not matches:
        allowed = "; ".join(" ".join(f"{k}={v}" for k, v in r["types"].items() if k in values)
                            for r in rows)
        return _TypeMatch(None, {}, (), (), (
            None, "ERROR_IF(operator data types do not meet requirement of operator Supported "
            "Data Types)", dict(values, allowed=f"[{allowed}]")))
    row = matches[0]
    options = tuple(dict.fromkeys(o for r in matches for o in r["options"]))
    return _TypeMatch(row["mode"], {k: v for k, v in row["types"].items() if isinstance(v, str)},
                      tuple((k, v) for k, v in row["types"].items() if isinstance(v, int)),
                      options)


def _match_types(c: OpCheck) -> None:
    """Find the Supported Data Types rows of the operator's element types."""
    attrs = c.opr.attrs
    m = _type_rows(c.opr.op, tuple(c.types.items()), attrs.get("acc_type"), attrs.get("mode"),
                   c.analysis.v11)
    if m.error is not None:
        arg, rule, values = m.error
        c.fail(arg, rule, **values)
        return
    c.env.update(m.params)
    c.info.mode = m.mode
    c.info.types = m.types
    c.info.options = m.options
    if c.deferred:
        _check_deferred(c)


def _check_attributes(c: OpCheck) -> None:
    """Enumerated attributes and fixed-size attribute arrays."""
    attrs = c.opr.attrs
    for a in c.spec.attributes:
        if a.name not in attrs:
            continue
        value = attrs[a.name]
        if a.type == "tensor_t" and a.dims is not None and value is not None:
            n = len(value)
            want = _eval(a.dims[0], c.env, c.ranks) if len(a.dims) == 1 else None
            if want is not None and n != want:
                c.fail(a.name, f"must hold {a.dims[0]} values", got=tuple(value))
        elif a.type == "nan_propagation_mode_t" and value not in NAN_MODES + ("UNKNOWN",):
            c.fail(a.name, "must be PROPAGATE or IGNORE", got=value)
        elif a.type == "resize_mode_t" and value not in RESIZE_MODES:
            c.fail(a.name, "must be NEAREST_NEIGHBOR or BILINEAR", got=value)
        elif a.type == "rounding_mode_t":
            if value not in ROUNDING_EXTENSIONS:
                c.fail(a.name, "must be SINGLE_ROUND, INEXACT_ROUND or DOUBLE_ROUND", got=value)
            elif ROUNDING_EXTENSIONS[value]:
                c.info.extra[ROUNDING_EXTENSIONS[value]] = f"rounding_mode={value}"
        elif a.type == "acc_type_t" and value not in (
                ACC_TYPES_1_1 if c.analysis.v11 else ACC_TYPES):
            c.fail(a.name, "must be one of " + ", ".join(
                ACC_TYPES_1_1 if c.analysis.v11 else ACC_TYPES), got=value)


def _check_ctc(c: OpCheck) -> None:
    """Compile-time-constant inputs: from CONST/CONST_SHAPE, or EXT-DYNAMIC is needed."""
    for a in c.spec.inputs:
        if not a.ctc:
            continue
        t = c.tensors.get(a.name)
        if c.analysis.v11 and isinstance(t, Tensor) and (t.dtype == "SHAPE" or c.opr.op == "DIM"):
            # TOSA 1.1: shape_t values are computed at compile time (the shape operators take
            # and give only CTC values; tosa.xml marks only CONST/CONST_SHAPE outputs as CTC,
            # which would leave every shape expression non-conformant), and DIM reads only the
            # static shape of its input, never its values.
            continue
        if isinstance(t, Tensor) and t.data is None:
            if "EXT-DYNAMIC" in a.ctc_remove:
                c.info.extra.setdefault("EXT-DYNAMIC", f"{a.name} is not a constant")
            else:
                c.fail(a.name, "a compile-time-constant input must be connected to a CTC "
                       "output (CONST or CONST_SHAPE)", tensor=t.name)


def _level_limits(c: OpCheck) -> None:
    """Record the values of the operator's LEVEL_CHECKs (judged against a level later)."""
    for a in c.spec.inputs + c.spec.outputs + c.spec.attributes:
        for value, limit in a.level_limits:
            v = _level_value(c, a, value)
            if v is not None:
                c.level(limit, v, f"{value} of {a.name}")


_NAMED = {
    "kernel": ("kernel_y", "kernel_x"), "stride": ("stride_y", "stride_x"),
    "pad": ("pad_top", "pad_bottom", "pad_left", "pad_right"),
    "dilation": ("dilation_y", "dilation_x"),
    "out_pad": ("out_pad_top", "out_pad_bottom", "out_pad_left", "out_pad_right"),
}
_NAMED_3D = {
    "pad": ("pad_d0", "pad_d1", "pad_top", "pad_bottom", "pad_left", "pad_right"),
    "stride": ("stride_d", "stride_y", "stride_x"),
    "dilation": ("dilation_d", "dilation_y", "dilation_x"),
}


def named_values(c: OpCheck) -> dict[str, int]:
    """Attribute arrays by their spec element names (kernel_y, pad_top, scale_y_n ...)."""
    if c.named is not None:
        return c.named
    env: dict[str, int] = {}
    c.named = env
    table = dict(_NAMED, **_NAMED_3D) if c.opr.op == "CONV3D" else _NAMED
    for key, names in table.items():
        # attributes in TOSA 1.0; shape_t inputs in 1.1 (the ADAPTIVE pools, CONV2D_BLOCK_SCALED)
        values = c.ints(key) if key in c.opr.attrs or c.const(key) is not None else None
        if values is not None and len(values) == len(names):
            env.update(zip(names, values))
    if c.opr.op == "RESIZE":
        for key, names in (("scale", ("scale_y_n", "scale_y_d", "scale_x_n", "scale_x_d")),
                           ("offset", ("offset_y", "offset_x")),
                           ("border", ("border_y", "border_x"))):
            values = c.ints(key)
            if values is not None and len(values) == len(names):
                env.update(zip(names, values))
    return env


def _level_value(c: OpCheck, a: _Arg, expr: str) -> int | None:
    ranks = c.ranks
    m = re.fullmatch(r"rank\((\w+)\)", expr)
    if m:
        t = c.tensors.get(a.name)
        if isinstance(t, Tensor):
            return len(t.shape) if a.type != "shape_t" else int(t.shape[0]) if t.shape else 0
        return ranks.get(m.group(1))
    m = re.fullmatch(r"tensor_list_shape\((\w+)\)", expr)
    if m:
        t = c.tensors.get(m.group(1))
        return len(t) if isinstance(t, list) else None
    env = dict(c.env)
    env.update(named_values(c))
    if "/" in expr:  # scale_y_n/scale_y_d: integer division of the pseudocode
        n, d = (s.strip() for s in expr.split("/"))
        if n in env and d in env and env[d] > 0:
            return env[n] // env[d]
        return None
    return _eval(expr, env, ranks)


# --------------------------------------------------------------------------------------------
# operator pseudocode ERROR_IFs, one function per operator


def _nonzero(values: Any) -> Any:
    """values != 0, elementwise; an INT48 value traced as a (hi, lo) pair (tosa_jax.Wide) is
    nonzero where either half is."""
    if hasattr(values, "hi") and hasattr(values, "lo"):
        return (values.hi != 0) | (values.lo != 0)
    return values != 0


def _not_unsigned_16_zp(values: Any) -> Any:
    """An unsigned int16 zero point other than 0 and 32768 (stored as int16: -32768)."""
    u = values.astype(np.int32) & 0xFFFF
    return (u != 0) & (u != 32768)


def _zero_point(c: OpCheck, arg: str, type_var: str, what: str) -> None:
    """ERROR_IF(!is_same<T,i8_t>() && zp != 0): zero points only for int8."""
    t = c.types.get(type_var)
    if t != "INT8":
        c.error_if(arg, f"ERROR_IF(!is_same<{type_var},i8_t>() && {what} != 0): zero point "
                   "only for int8", _nonzero, **{type_var: t})


def _require_axis(c: OpCheck, rank: int, axis_rank: int | None = None) -> int | None:
    axis = c.attr("axis")
    if axis is None:
        c.fail("axis", "the axis attribute is missing")
        return None
    limit = rank if axis_rank is None else axis_rank
    if axis < 0 or axis >= limit:
        bound = "rank(shape1)" if axis_rank is None else "max(1,rank(shapes1[0]))"
        c.fail("axis", f"ERROR_IF(axis < 0 || axis >= {bound})", axis=axis, rank=rank)
        return None
    return int(axis)


def ARGMAX(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input"), c.shape("output")
    axis = _require_axis(c, len(shape1))
    if axis is not None and shape != shape1[:axis] + shape1[axis + 1:]:
        c.fail("output", "ERROR_IF(flatten(left_shape, right_shape) != shape)",
               input=shape1, axis=axis, output=shape)


def _pool(c: OpCheck) -> None:
    v = named_values(c)
    if len(v) < 8:
        return
    ky, kx, sy, sx = v["kernel_y"], v["kernel_x"], v["stride_y"], v["stride_x"]
    pt, pb, pl, pr = v["pad_top"], v["pad_bottom"], v["pad_left"], v["pad_right"]
    if ky < 1 or kx < 1:
        c.fail("kernel", "ERROR_IF(kernel_y < 1 || kernel_x < 1)", kernel=(ky, kx))
    if sy < 1 or sx < 1:
        c.fail("stride", "ERROR_IF(stride_y < 1 || stride_x < 1)", stride=(sy, sx))
    if min(pt, pb, pl, pr) < 0:
        c.fail("pad", "ERROR_IF(pad_top < 0 || pad_bottom < 0 || pad_left < 0 || "
               "pad_right < 0)", pad=(pt, pb, pl, pr))
    if pr >= kx or pl >= kx:
        c.fail("pad", "ERROR_IF(pad_right >= kernel_x || pad_left >= kernel_x)",
               pad=(pt, pb, pl, pr), kernel=(ky, kx))
    if pt >= ky or pb >= ky:
        c.fail("pad", "ERROR_IF(pad_top >= kernel_y || pad_bottom >= kernel_y)",
               pad=(pt, pb, pl, pr), kernel=(ky, kx))
    if c.failed:
        return
    _, ih, iw, _ = c.shape("input")
    _, oh, ow, _ = c.shape("output")
    for axis, (o, i, p0, p1, k, s) in (("OH", (oh, ih, pt, pb, ky, sy)),
                                       ("OW", (ow, iw, pl, pr, kx, sx))):
        q = idiv_check(i + p0 + p1 - k, s)
        dims = "IH + pad_top + pad_bottom - kernel_y, stride_y" if axis == "OH" else \
            "IW + pad_left + pad_right - kernel_x, stride_x"
        if q is None:
            c.fail("output", f"ERROR_IF({axis} != idiv_check({dims}) + 1): not a multiple",
                   numerator=i + p0 + p1 - k, stride=s)
        elif o != q + 1:
            c.fail("output", f"ERROR_IF({axis} != idiv_check({dims}) + 1)",
                   **{axis: o, "expected": q + 1})


def AVG_POOL2D(c: OpCheck) -> None:  # noqa: N802
    _zero_point(c, "input_zp", "in_out_t", "input_zp")
    _zero_point(c, "output_zp", "in_out_t", "output_zp")
    _pool(c)


def MAX_POOL2D(c: OpCheck) -> None:  # noqa: N802
    _pool(c)


def _conv_out(c: OpCheck, axis: str, o: int, i: int, p0: int, p1: int, k: int, d: int,
              s: int, names: tuple[str, str, str, str, str, str]) -> None:
    num = i - 1 + p0 + p1 - (k - 1) * d
    q = idiv_check(num, s)
    rule = (f"ERROR_IF({axis} != idiv_check({names[0]} - 1 + {names[1]} + {names[2]} - "
            f"({names[3]} - 1) * {names[4]}, {names[5]}) + 1)")
    if q is None:
        c.fail("output", rule + ": not a multiple", numerator=num, stride=s)
    elif o != q + 1:
        c.fail("output", rule, **{axis: o, "expected": q + 1})


def _conv_common(c: OpCheck, pads: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...] | None, bias_channels: int, bias_rule: str) -> None:
    _zero_point(c, "input_zp", "in_t", "input_zp")
    _zero_point(c, "weight_zp", "weight_t", "weight_zp")
    _conv_header(c, pads, strides, dilations, bias_channels, bias_rule)


def _conv_header(c: OpCheck, pads: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...] | None, bias_channels: int, bias_rule: str) -> None:
    """A convolution's pad, stride, dilation and bias-length rules."""
    if min(pads) < 0:
        c.fail("pad", "ERROR_IF(pad < 0)", pad=pads)
    if min(strides) < 1:
        c.fail("stride", "ERROR_IF(stride < 1)", stride=strides)
    if dilations is not None and min(dilations) < 1:
        c.fail("dilation", "ERROR_IF(dilation < 1)", dilation=dilations)
    bc = c.shape("bias")[0]
    if bc != bias_channels and bc != 1:
        c.fail("bias", bias_rule, BC=bc, expected=bias_channels)


# The spatial axes of the convolutions: output size, then the names the spec's ERROR_IF gives
# the input size, the two paddings, the kernel size, the dilation and the stride.
_CONV_AXES = {
    "D": ("OD", ("ID", "pad_d0", "pad_d1", "KD", "dilation_d", "stride_d")),
    "H": ("OH", ("IH", "pad_top", "pad_bottom", "KH", "dilation_y", "stride_y")),
    "W": ("OW", ("IW", "pad_left", "pad_right", "KW", "dilation_x", "stride_x")),
}


def _conv_attrs(c: OpCheck) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """pad, stride and dilation of a convolution (None, after failing, when one is missing)."""
    pad, stride, dil = c.ints("pad"), c.ints("stride"), c.ints("dilation")
    if pad is None or stride is None or dil is None:
        c.fail(None, "pad, stride and dilation attributes are required")
        return None
    return pad, stride, dil


def _conv_sizes(c: OpCheck, axes: str, kernel: Sequence[int], pad: tuple[int, ...],
                stride: tuple[int, ...], dil: tuple[int, ...], input_name: str = "input") -> None:
    """Every spatial output size of a convolution (input and output: N, spatial axes, C)."""
    ins, outs = c.shape(input_name)[1:-1], c.shape("output")[1:-1]
    for n, axis in enumerate(axes):
        out_name, names = _CONV_AXES[axis]
        _conv_out(c, out_name, outs[n], ins[n], pad[2 * n], pad[2 * n + 1], kernel[n], dil[n],
                  stride[n], names)


def CONV2D(c: OpCheck) -> None:  # noqa: N802
    if (attrs := _conv_attrs(c)) is None:
        return
    _conv_common(c, *attrs, c.shape("weight")[0], "ERROR_IF(BC != OC && BC != 1)")
    if not c.failed:  # weight [OC, KH, KW, IC]
        _conv_sizes(c, "HW", c.shape("weight")[1:3], *attrs)


def CONV3D(c: OpCheck) -> None:  # noqa: N802
    if (attrs := _conv_attrs(c)) is None:
        return
    _conv_common(c, *attrs, c.shape("weight")[0], "ERROR_IF(BC != OC && BC != 1)")
    if not c.failed:  # weight [OC, KD, KH, KW, IC]
        _conv_sizes(c, "DHW", c.shape("weight")[1:4], *attrs)


def DEPTHWISE_CONV2D(c: OpCheck) -> None:  # noqa: N802
    if (attrs := _conv_attrs(c)) is None:
        return
    kh, kw, ch, m = c.shape("weight")
    _conv_common(c, *attrs, ch * m, "ERROR_IF(BC != C*M && BC != 1)")
    if not c.failed:
        _conv_sizes(c, "HW", (kh, kw), *attrs)


def TRANSPOSE_CONV2D(c: OpCheck) -> None:  # noqa: N802
    out_pad, stride = c.ints("out_pad"), c.ints("stride")
    if out_pad is None or stride is None:
        c.fail(None, "out_pad and stride attributes are required")
        return
    _zero_point(c, "input_zp", "in_t", "input_zp")
    _zero_point(c, "weight_zp", "weight_t", "weight_zp")
    oc, kh, kw, _ = c.shape("weight")
    if out_pad[0] <= -kh or out_pad[1] <= -kh:
        c.fail("out_pad", "ERROR_IF(out_pad_top <= -KH || out_pad_bottom <= -KH)",
               out_pad=out_pad, KH=kh)
    if out_pad[2] <= -kw or out_pad[3] <= -kw:
        c.fail("out_pad", "ERROR_IF(out_pad_left <= -KW || out_pad_right <= -KW)",
               out_pad=out_pad, KW=kw)
    if min(stride) < 1:
        c.fail("stride", "ERROR_IF(stride_y < 1 || stride_x < 1)", stride=stride)
    bc = c.shape("bias")[0]
    if bc != oc and bc != 1:
        c.fail("bias", "ERROR_IF(BC != OC && BC != 1)", BC=bc, OC=oc)
    if c.failed:
        return
    _, ih, iw, _ = c.shape("input")
    _, oh, ow, _ = c.shape("output")
    want_h = (ih - 1) * stride[0] + out_pad[0] + out_pad[1] + kh
    want_w = (iw - 1) * stride[1] + out_pad[2] + out_pad[3] + kw
    if oh != want_h:
        c.fail("output", "ERROR_IF(OH != (IH - 1) * stride_y + out_pad_top + out_pad_bottom + KH)",
               OH=oh, expected=want_h)
    if ow != want_w:
        c.fail("output", "ERROR_IF(OW != (IW - 1) * stride_x + out_pad_left + out_pad_right + KW)",
               OW=ow, expected=want_w)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def FFT2D(c: OpCheck) -> None:  # noqa: N802
    _, h, w = c.shape("input_real")
    if not _power_of_two(h):
        c.fail("input_real", "ERROR_IF(!power_of_two(H))", H=h)
    if not _power_of_two(w):
        c.fail("input_real", "ERROR_IF(!power_of_two(W))", W=w)


RFFT2D = FFT2D


def MATMUL(c: OpCheck) -> None:  # noqa: N802
    # The 1.0.2 pseudocode reads ERROR_IF(is_same<in_t,i8_t> && (A_zp != 0 || B_zp != 0)) under
    # the comment "Zero point only for i8_t"; the argument descriptions ("Must be zero for non-int8
    # types") and the reference model agree on the comment's meaning, which is checked here.
    # TOSA 1.1 names the types of A and B apart (A_t, B_t; MATMUL_T too).
    _zero_point(c, "A_zp", "A_t" if "A_t" in c.types else "in_t", "A_zp")
    _zero_point(c, "B_zp", "B_t" if "B_t" in c.types else "in_t", "B_zp")


def _block_multiple(c: OpCheck, arg: str, type_var: str, dim: str) -> None:
    """ERROR_IF(is_block_scale<T>() && C % get_innermost_block_size<T>() != 0)."""
    t = c.t(arg)
    if t.block_scaled and (not t.shape or t.shape[-1] % t.block_size):
        c.fail(arg, f"ERROR_IF(is_block_scale<{type_var}>() && {dim} % "
               f"get_innermost_block_size<{type_var}>() != 0)", shape=t.shape,
               block_size=t.block_size)


def _block_scaled_constants(c: OpCheck) -> None:
    """A block-scaled constant's scales have the shape its values and block size give."""
    for name in c.opr.inputs:
        t = c.block.tensors.get(name)
        if t is not None and t.scale_data is not None and t.scale_data.shape != t.scale_shape:
            c.fail(None, "the scales of a block-scaled tensor have its shape with the innermost "
                   "dimension divided by the block size", tensor=name,
                   scales=tuple(t.scale_data.shape), expected=t.scale_shape)


def _block_shapes(c: OpCheck, args: tuple[str, ...], type_var: str) -> None:
    """TOSA 1.1's rules of a block-scaled tensor argument (CAST, CONCAT, CONST, IDENTITY,
    RESHAPE, REVERSE): ERROR_IF(is_block_scale<T>() && rank(shape) == 0) and
    ERROR_IF(is_block_scale<T>() && shape[rank(shape)-1] % get_innermost_block_size<T>() != 0);
    each item of a tensor list too. A constant's scales have the shape they must have."""
    for arg in args:
        value = c.tensors.get(arg)
        for t in value if isinstance(value, list) else [value]:
            if not isinstance(t, Tensor) or not t.block_scaled:
                continue
            if not t.shape:
                c.fail(arg, f"ERROR_IF(is_block_scale<{type_var}>() && rank(shape) == 0)",
                       tensor=t.name)
            elif t.shape[-1] % t.block_size:
                c.fail(arg, f"ERROR_IF(is_block_scale<{type_var}>() && shape[rank(shape)-1] % "
                       f"get_innermost_block_size<{type_var}>() != 0)", tensor=t.name,
                       shape=t.shape, block_size=t.block_size)
    _block_scaled_constants(c)
    out = c.tensors.get("output")
    if isinstance(out, Tensor) and out.scale_data is not None \
            and out.scale_data.shape != out.scale_shape:
        c.fail("output", "the scales of a block-scaled tensor have its shape with the innermost "
               "dimension divided by the block size", scales=tuple(out.scale_data.shape),
               expected=out.scale_shape)


def CAST(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1 CAST.tosac: a block-scaled input or output is of rank >= 1 with its innermost
    dimension a multiple of the block size (which types pair: the type tables)."""
    _block_shapes(c, ("input",), "in_t")
    _block_shapes(c, ("output",), "out_t")


def IDENTITY(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1 IDENTITY.tosac: the block-scaled shape rules."""
    _block_shapes(c, ("input1", "output"), "in_out_t")


def MATMUL_T(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1 (MATMUL_T.tosac): D is 1 or N; zero points only for int8; a block-scaled A or B
    has a contraction dimension C that is a multiple of its block size."""
    n, d = c.shape("A")[0], c.shape("B")[0]
    if d != n and d != 1:
        c.fail("B", "ERROR_IF(D != N && D != 1)", N=n, D=d)
    MATMUL(c)
    _block_multiple(c, "A", "A_t", "C")
    _block_multiple(c, "B", "B_t", "C")
    _block_scaled_constants(c)


def ROW_GATHER(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1 (ROW_GATHER.tosac): ERROR_IF(row_count < 1), a block-scaled values tensor has
    C a multiple of its block size, and the output is [N, W*row_count, C]."""
    rows = c.scalar("row_count")
    if rows is not None and rows < 1:
        c.fail("row_count", "ERROR_IF(row_count < 1)", row_count=rows)
    _block_multiple(c, "values", "in_out_t", "C")
    _block_scaled_constants(c)
    (n, _k, ch), (_n, w) = c.shape("values"), c.shape("indices")
    if rows is not None and rows >= 1 and c.shape("output") != (n, w * rows, ch):
        c.fail("output", "output shape must be [N,W*row_count,C]", output=c.shape("output"),
               expected=(n, w * rows, ch))


# --- TOSA 1.1 block-scaled operators: the value and scale tensors travel separately; the
# scales' innermost dimension is the values' divided by block_size (1 or 32)


def _scales_of(c: OpCheck, data: str, scale: str, block_size: int) -> None:
    """A scale tensor's shape: its data's with the innermost dimension / block_size."""
    shape, sshape = c.shape(data), c.shape(scale)
    want = shape[:-1] + (shape[-1] // block_size,) if shape else ()
    if sshape != want:
        c.fail(scale, f"shape must be the shape of {data!r} with its innermost dimension "
               "divided by block_size", **{scale: sshape, "expected": want})


def _block_size_of(c: OpCheck) -> int:
    """The block_size attribute (BLOCK_SIZE_1 or BLOCK_SIZE_32: anything else is refused)."""
    bs = c.attr("block_size")
    if bs not in (1, 32):
        c.fail("block_size", "block_size must be BLOCK_SIZE_1 or BLOCK_SIZE_32", block_size=bs)
        return 0
    return int(bs)


def MATMUL_T_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    """MATMUL_T_BLOCK_SCALED.tosac: ERROR_IF(C % block_size != 0); ERROR_IF(block_size == 1);
    ERROR_IF(D != N && D != 1)."""
    bs = _block_size_of(c)
    (n, _h, ch), d = c.shape("A_data"), c.shape("B_data")[0]
    if bs == 1:
        c.fail("block_size", "ERROR_IF(block_size == 1)")
    elif bs and ch % bs:
        c.fail("A_data", "ERROR_IF(C % block_size != 0)", C=ch, block_size=bs)
    if d != n and d != 1:
        c.fail("B_data", "ERROR_IF(D != N && D != 1)", N=n, D=d)
    if bs > 1 and not c.failed:
        _scales_of(c, "A_data", "A_scale", bs)
        _scales_of(c, "B_data", "B_scale", bs)


def CONV2D_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    """CONV2D_BLOCK_SCALED.tosac: CONV2D's pad, stride, dilation, OH/OW and BC rules (pad,
    stride and dilation are shape_t inputs), ERROR_IF(IC % block_size != 0),
    ERROR_IF(block_size == 1)."""
    bs = _block_size_of(c)
    pad, stride, dil = c.ints("pad"), c.ints("stride"), c.ints("dilation")
    ic = c.shape("input_data")[3]
    if bs == 1:
        c.fail("block_size", "ERROR_IF(block_size == 1)")
    elif bs and ic % bs:
        c.fail("input_data", "ERROR_IF(IC % block_size != 0)", IC=ic, block_size=bs)
    if bs > 1 and not c.failed:
        _scales_of(c, "input_data", "input_scale", bs)
        _scales_of(c, "weight_data", "weight_scale", bs)
    if pad is None or stride is None or dil is None:
        return  # run-time values (EXT-DYNAMIC): judged when known
    _conv_header(c, pad, stride, dil, c.shape("weight_data")[0], "ERROR_IF(BC != OC && BC != 1)")
    if not c.failed:  # weight_data [OC, KH, KW, IC]
        _conv_sizes(c, "HW", c.shape("weight_data")[1:3], pad, stride, dil, "input_data")


def _value_scale_list(c: OpCheck, arg: str, bs: int) -> list[Tensor] | None:
    """A (values[, scales]) tensor list: ERROR_IF(len != 1 && len != 2),
    ERROR_IF((len == 1) && (block_size != 1)), ERROR_IF((len == 2) && (block_size == 1))."""
    items = c.tensors.get(arg)
    items = items if isinstance(items, list) else [items] if isinstance(items, Tensor) else []
    n = len(items)
    if n not in (1, 2):
        c.fail(arg, f"ERROR_IF({arg}_len != 1 && {arg}_len != 2)", **{f"{arg}_len": n})
        return None
    if n == 1 and bs != 1:
        c.fail("block_size", f"ERROR_IF(({arg}_len == 1) && (block_size != 1))", block_size=bs)
        return None
    if n == 2 and bs == 1:
        c.fail("block_size", f"ERROR_IF(({arg}_len == 2) && (block_size == 1))")
        return None
    return items


def _block_lists(c: OpCheck, name: str) -> tuple[int, list | None, list]:
    """The block size, the [values, scales] list argument ``name`` (None where the block size
    or the list is refused) and the output list ([] when it is not one)."""
    bs = _block_size_of(c)
    items = _value_scale_list(c, name, bs) if bs else None
    outs = c.tensors.get("output")
    return bs, items, outs if isinstance(outs, list) else []


def RESHAPE_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    """RESHAPE_BLOCK_SCALED.tosac, every ERROR_IF; the outputs are the reshaped list."""
    bs, ins, outs = _block_lists(c, "input")
    if ins is None:
        return
    if len(outs) != len(ins):
        c.fail("output", "ERROR_IF(output_len != input_len)", output_len=len(outs),
               input_len=len(ins))
        return
    new_shape = c.ints("new_value_shape")
    if new_shape is None:
        return  # a run-time shape (EXT-DYNAMIC)
    value_shape = ins[0].shape
    if math.prod(value_shape) != math.prod(new_shape):
        c.fail("new_value_shape", "ERROR_IF(tensor_size(value_shape1) != "
               "tensor_size(new_value_shape))", value_shape1=value_shape,
               new_value_shape=new_shape)
        return
    shapes = [new_shape]
    if len(ins) == 2:
        scale_shape = ins[1].shape
        if not value_shape or not new_shape:
            c.fail("input", "ERROR_IF(rank(value_shape1) == 0 || rank(new_value_shape) == 0)")
            return
        if len(value_shape) != len(scale_shape):
            c.fail("input", "ERROR_IF(rank(value_shape1) != rank(scale_shape1))",
                   value_shape1=value_shape, scale_shape1=scale_shape)
            return
        if value_shape[-1] % bs or new_shape[-1] % bs:
            c.fail("input", "ERROR_IF((value_shape1_last % block_size) != 0) or "
                   "ERROR_IF((new_value_shape_last % block_size) != 0)",
                   value_shape1=value_shape, new_value_shape=new_shape, block_size=bs)
            return
        if scale_shape[-1] != value_shape[-1] // bs:
            c.fail("input", "ERROR_IF(scale_shape1[-1] != (value_shape1_last / block_size))",
                   scale_shape1=scale_shape, value_shape1=value_shape, block_size=bs)
            return
        new_scale_shape = new_shape[:-1] + (new_shape[-1] // bs,)
        if math.prod(scale_shape) != math.prod(new_scale_shape):
            c.fail("input", "ERROR_IF(tensor_size(scale_shape1) != tensor_size(new_scale_shape))",
                   scale_shape1=scale_shape, new_scale_shape=new_scale_shape)
            return
        shapes.append(new_scale_shape)
    for t, shape in zip(outs, shapes):
        if t.shape != shape:
            c.fail("output", "output shape must be the new shape", output=t.shape,
                   expected=shape)


def ROW_GATHER_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    """ROW_GATHER_BLOCK_SCALED.tosac: ERROR_IF(C % block_size != 0), the values list rules,
    ERROR_IF(row_count < 1); outputs [N, W*row_count, C] (and the scales')."""
    bs, values, outs = _block_lists(c, "values")
    if values is None:
        return
    if len(outs) != len(values):
        c.fail("output", "the output list holds as many tensors as the values list",
               output_len=len(outs), values_len=len(values))
        return
    n, _k, ch = values[0].shape
    if ch % bs:
        c.fail("values", "ERROR_IF(C % block_size != 0)", C=ch, block_size=bs)
        return
    if len(values) == 2 and values[1].shape != values[0].shape[:2] + (ch // bs,):
        c.fail("values", "the scales are [N,K,C/block_size]", scales=values[1].shape,
               expected=values[0].shape[:2] + (ch // bs,))
        return
    rows = c.scalar("row_count")
    if rows is not None and rows < 1:
        c.fail("row_count", "ERROR_IF(row_count < 1)", row_count=rows)
        return
    w = c.shape("indices")[1]
    if rows is not None:
        for t, last in zip(outs, (ch, ch // bs)):
            if t.shape != (n, w * rows, last):
                c.fail("output", "output shape must be [N,W*row_count,C] (scales: C/block_size)",
                       output=t.shape, expected=(n, w * rows, last))


def _cast_block_shapes(c: OpCheck, data: str, scale: str) -> None:
    """CAST_TO/FROM_BLOCK_SCALED: ERROR_IF(rank(shape) == 0 || shape[rank(shape)-1] %
    block_size != 0), ERROR_IF(block_size == 1), and the scales' shape (CAST_FROM:
    ERROR_IF(rank(shape) != rank(in_scale_shape)), ERROR_IF(shape[i] != in_scale_shape[i]),
    ERROR_IF(shape[rank-1] != in_scale_shape[rank-1] * block_size))."""
    bs = _block_size_of(c)
    shape, sshape = c.shape(data), c.shape(scale)
    if not bs:
        return
    if not shape or shape[-1] % bs:
        c.fail(data, "ERROR_IF(rank(shape) == 0 || shape[rank(shape)-1] % block_size != 0)",
               shape=shape, block_size=bs)
    elif bs == 1:
        c.fail("block_size", "ERROR_IF(block_size == 1)")
    elif len(shape) != len(sshape):
        c.fail(scale, "ERROR_IF(rank(shape) != rank(in_scale_shape))", shape=shape,
               scale_shape=sshape)
    elif sshape != shape[:-1] + (shape[-1] // bs,):
        c.fail(scale, "ERROR_IF(shape[axis_index] != in_scale_shape[axis_index]) or "
               "ERROR_IF(shape[rank(shape) - 1] != in_scale_shape[rank(shape) - 1] * block_size)",
               shape=shape, scale_shape=sshape, block_size=bs)


def CAST_TO_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    _cast_block_shapes(c, "input_data", "output_scale")


def CAST_FROM_BLOCK_SCALED(c: OpCheck) -> None:  # noqa: N802
    _cast_block_shapes(c, "input_data", "input_scale")


def _shape_length(c: OpCheck, name: str) -> int:
    """The number of values of a shape_t argument (its static length)."""
    shape = c.shape(name)
    return int(shape[0]) if shape else 0


def _same_length_shapes(c: OpCheck) -> None:
    """TOSA 1.1 shape operators of two shape_t inputs: ERROR_IF(length(input1) !=
    length(input2)) (the values may be computed; their lengths are static)."""
    a, b = _shape_length(c, "input1"), _shape_length(c, "input2")
    if a != b:
        c.fail("input2", "ERROR_IF(length(input1) != length(input2))", input1=a, input2=b)


def CONCAT_SHAPE(c: OpCheck) -> None:  # noqa: N802
    """CONCAT_SHAPE.tosac: ERROR_IF(input == []); ERROR_IF(input[i] == []) for each input."""
    items = c.tensors.get("input")
    items = items if isinstance(items, list) else []
    if not items:
        c.fail("input", "ERROR_IF(input == [])")
    for i, t in enumerate(items):
        if not (t.shape and t.shape[0]):
            c.fail("input", "ERROR_IF(input[i] == [])", i=i, tensor=t.name)


def DIM(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1: ERROR_IF(axis >= rank(shape)); ERROR_IF(axis < 0)."""
    axis, rank = c.attr("axis"), len(c.shape("input1"))
    if axis is not None and not 0 <= int(axis) < rank:
        c.fail("axis", "ERROR_IF(axis >= rank(shape) || axis < 0)", axis=axis, rank=rank)


def SLICE_SHAPE(c: OpCheck) -> None:  # noqa: N802
    """TOSA 1.1: the slice [start, start + size) of the input shape_t must be inside it."""
    start, size = c.scalar("start"), c.scalar("size")
    length = len(c.ints("input") or ()) if c.const("input") is not None else None
    if size is not None and size <= 0:
        c.fail("size", "ERROR_IF(size_value <= 0)", size=size)
    if start is not None and start < 0:
        c.fail("start", "ERROR_IF(start_value < 0)", start=start)
    if None not in (start, size, length) and start + size > length:
        c.fail("size", "ERROR_IF(start_value + size_value > length(input))", start=start,
               size=size, length=length)


def CLAMP(c: OpCheck) -> None:  # noqa: N802
    lo, hi = c.attr("min_val"), c.attr("max_val")
    if lo is None or hi is None:
        c.fail(None, "min_val and max_val attributes are required")
        return
    flo, fhi = float(lo), float(hi)
    if math.isnan(flo) or math.isnan(fhi):
        c.fail("min_val", "ERROR_IF(isNaN(min_val) || isNaN(max_val))", min_val=lo, max_val=hi)
    elif fhi < flo:
        c.fail("max_val", "ERROR_IF(max_val < min_val)", min_val=lo, max_val=hi)


def _broadcast(c: OpCheck, inputs: tuple[str, ...]) -> None:
    shapes = [c.shape(n) for n in inputs]
    out = c.shape("output")
    acc: tuple[int, ...] | None = shapes[0]
    for name, s in zip(inputs[1:], shapes[1:]):
        if acc is None:
            break
        if len(s) != len(acc):
            c.fail(name, "ERROR_IF(rank(shape1) != rank(shape2)) in broadcast_shape",
                   **{n: sh for n, sh in zip(inputs, shapes)})
            return
        nxt = broadcast_shape(acc, s)
        if nxt is None:
            c.fail(name, "ERROR_IF(shape2[i] != 1 && shape2[i] != shape[i]) in broadcast_shape",
                   **{n: sh for n, sh in zip(inputs, shapes)})
            return
        acc = nxt
    if acc != out:
        c.fail("output", "ERROR_IF(shape != broadcast_shape(...))",
               output=out, broadcast=acc)


def _binary(c: OpCheck) -> None:
    _broadcast(c, ("input1", "input2"))


def SELECT(c: OpCheck) -> None:  # noqa: N802
    _broadcast(c, ("input1", "input2", "input3"))


def NEGATE(c: OpCheck) -> None:  # noqa: N802
    _zero_point(c, "input1_zp", "in_out_t", "input1_zp")
    _zero_point(c, "output_zp", "in_out_t", "output_zp")


def _reduce(c: OpCheck) -> None:
    shape1, shape = c.shape("input"), c.shape("output")
    axis = _require_axis(c, len(shape1))
    if axis is None:
        return
    if len(shape) != len(shape1):
        c.fail("output", "output must have the rank of the input", input=shape1, output=shape)
        return
    if shape[axis] != 1:
        c.fail("output", "ERROR_IF(shape[axis] != 1)", output=shape, axis=axis)
    elif shape[:axis] != shape1[:axis] or shape[axis + 1:] != shape1[axis + 1:]:
        c.fail("output", "output shape must be the input shape with shape[axis] = 1",
               input=shape1, output=shape, axis=axis)


def CONCAT(c: OpCheck) -> None:  # noqa: N802
    inputs = c.tensors["input1"]
    assert isinstance(inputs, list)
    _block_shapes(c, ("input1", "output"), "in_out_t")
    if not inputs:
        c.fail("input1", "ERROR_IF(input1 == [])")
        return
    shapes = [t.shape for t in inputs]
    out = c.shape("output")
    axis = _require_axis(c, len(shapes[0]), max(1, len(shapes[0])))
    if axis is None:
        return
    total = 0
    for k, s in enumerate(shapes):
        if len(s) != len(shapes[0]):
            c.fail("input1", "ERROR_IF(rank(shapes1[shape_index]) != rank(shapes1[0]))",
                   index=k, shape=s, first=shapes[0])
            return
        for i, (d, d0) in enumerate(zip(s, shapes[0])):
            if i == axis:
                total += d
            elif d != d0:
                c.fail("input1", "ERROR_IF(shapes1[shape_index][axis_index] != "
                       "shapes1[0][axis_index])", index=k, shape=s, first=shapes[0])
                return
    if len(out) != len(shapes[0]):
        c.fail("output", "output must have the rank of the inputs", output=out)
    elif out[axis] != total:
        c.fail("output", "ERROR_IF(axis_sum != shape[axis])", axis_sum=total, output=out)
    elif out[:axis] + out[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
        c.fail("output", "output dimensions other than axis must equal the inputs'",
               output=out, input=shapes[0])


def PAD(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input1"), c.shape("output")
    if len(shape) != len(shape1):
        c.fail("output", "ERROR_IF(rank(shape) != rank(shape1))", input1=shape1, output=shape)
        return
    padding = c.ints("padding")
    if padding is None:
        return
    if len(padding) != 2 * len(shape1):
        return  # reported by the shape rule [2*rank(shape1)]
    for i in range(len(shape)):
        lo, hi = padding[2 * i], padding[2 * i + 1]
        if lo < 0 or hi < 0:
            c.fail("padding", "ERROR_IF(padding[i * 2] < 0 || padding[(i * 2) + 1] < 0)",
                   padding=padding)
            return
        if shape[i] != lo + shape1[i] + hi:
            c.fail("output", "ERROR_IF(shape[i] != padding[i * 2] + shape1[i] + "
                   "padding[(i * 2) + 1])", i=i, input1=shape1, padding=padding, output=shape)
            return


def RESHAPE(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input1"), c.shape("output")
    _block_shapes(c, ("input1", "output"), "in_out_t")
    if math.prod(shape1) != math.prod(shape):
        c.fail("output", "ERROR_IF(tensor_size(shape1) != tensor_size(shape))",
               input1=shape1, output=shape)
        return
    new_shape = c.ints("shape")
    if new_shape is not None and new_shape != shape:
        c.fail("shape", "the shape input must equal the output's shape",
               shape=new_shape, output=shape)


def REVERSE(c: OpCheck) -> None:  # noqa: N802
    _block_shapes(c, ("input1", "output"), "in_out_t")
    axis = c.attr("axis")
    rank = len(c.shape("input1"))
    if axis is None or axis < 0 or axis >= rank:
        c.fail("axis", "ERROR_IF(axis < 0 || axis >= rank(shape))", axis=axis, rank=rank)


def SLICE(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input1"), c.shape("output")
    start, size = c.ints("start"), c.ints("size")
    if start is None or size is None:
        return
    if len(start) != len(shape1) or len(size) != len(shape1):
        c.fail("start", "ERROR_IF(rank(shape1) != length(start) || rank(shape1) != "
               "length(size))", input1=shape1, start=start, size=size)
        return
    if len(shape) != len(shape1):
        c.fail("output", "ERROR_IF(rank(shape1) != rank(shape))", input1=shape1, output=shape)
        return
    for i in range(len(shape1)):
        if start[i] < 0:
            c.fail("start", "ERROR_IF(start[index] < 0)", start=start)
        elif size[i] <= 0:
            c.fail("size", "ERROR_IF(size[index] <= 0)", size=size)
        elif start[i] + size[i] > shape1[i]:
            c.fail("size", "ERROR_IF(start[index] + size[index] > shape1[index])",
                   start=start, size=size, input1=shape1)
        elif shape[i] != size[i]:
            c.fail("output", "ERROR_IF(shape[index] != size[index])", size=size, output=shape)
        else:
            continue
        return


def TILE(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input1"), c.shape("output")
    if len(shape1) != len(shape):
        c.fail("output", "ERROR_IF(rank(shape1) != rank(shape))", input1=shape1, output=shape)
        return
    multiples = c.ints("multiples")
    if multiples is None or len(multiples) != len(shape1):
        return
    for i in range(len(shape)):
        if shape1[i] * multiples[i] != shape[i]:
            c.fail("output", "ERROR_IF(shape1[i] * multiples[i] != shape[i])",
                   input1=shape1, multiples=multiples, output=shape)
            return


def TRANSPOSE(c: OpCheck) -> None:  # noqa: N802
    shape1, shape = c.shape("input1"), c.shape("output")
    if len(shape1) != len(shape):
        c.fail("output", "ERROR_IF(rank(shape1) != rank(shape))", input1=shape1, output=shape)
        return
    if math.prod(shape1) != math.prod(shape):
        c.fail("output", "ERROR_IF(tensor_size(shape1) != tensor_size(shape))",
               input1=shape1, output=shape)
        return
    perms = c.ints("perms")
    if perms is None:
        c.fail("perms", "the perms attribute is required")
        return
    if len(perms) != len(shape1):
        return  # reported by the attribute rule [rank(shape1)]
    used = [False] * len(shape1)
    for p in perms:
        if p >= len(shape1):
            c.fail("perms", "ERROR_IF(index >= rank(shape1))", perms=perms, rank=len(shape1))
            return
        if p < 0:
            c.fail("perms", "ERROR_IF(index < 0)", perms=perms)
            return
        if used[p]:
            c.fail("perms", "ERROR_IF(indexes_used[index] == true)", perms=perms)
            return
        used[p] = True
    for i in range(len(shape)):
        if shape1[perms[i]] != shape[i]:
            c.fail("output", "ERROR_IF(shape1[perms[i]] != shape[i])",
                   input1=shape1, perms=perms, output=shape)
            return


def RESIZE(c: OpCheck) -> None:  # noqa: N802
    # TOSA 1.1: a block-scaled input or output holds whole blocks along C (its mode: the
    # block-scaled rows are the nearest-neighbor ones, _type_rows)
    _block_multiple(c, "input", "in_t", "C")
    _block_multiple(c, "output", "out_t", "C")
    v = named_values(c)
    if len(v) < 8:
        return
    _, ih, iw, _ = c.shape("input")
    _, oh, ow, _ = c.shape("output")
    yn, yd, xn, xd = v["scale_y_n"], v["scale_y_d"], v["scale_x_n"], v["scale_x_d"]
    oy, ox, by, bx = v["offset_y"], v["offset_x"], v["border_y"], v["border_x"]
    if max(oh, ow, ih, iw) >= 16384:
        c.fail("output", "ERROR_IF(max(OH,OW,IH,IW) >= 16384)", OH=oh, OW=ow, IH=ih, IW=iw)
    if min(yn, yd, xn, xd) <= 0:
        c.fail("scale", "ERROR_IF(scale_y_n <= 0 || scale_y_d <= 0 || scale_x_n <= 0 || "
               "scale_x_d <= 0)", scale=(yn, yd, xn, xd))
        return
    if yn > (1 << 11) or xn > (1 << 11):
        c.fail("scale", "ERROR_IF(scale_y_n > (1 << 11) || scale_x_n > (1 << 11))",
               scale=(yn, yd, xn, xd))
    if yd >= 16 * yn or xd >= 16 * xn:
        c.fail("scale", "ERROR_IF(scale_y_d >= 16 * scale_y_n || scale_x_d >= 16 * scale_x_n)",
               scale=(yn, yd, xn, xd))
    if oy < -yn or oy >= 16 * yn:
        c.fail("offset", "ERROR_IF(offset_y < -scale_y_n || offset_y >= 16 * scale_y_n)",
               offset=(oy, ox), scale_y_n=yn)
    if ox < -xn or ox >= 16 * xn:
        c.fail("offset", "ERROR_IF(offset_x < -scale_x_n || offset_x >= 16 * scale_x_n)",
               offset=(oy, ox), scale_x_n=xn)
    if by < -16 * yn or by >= yn:
        c.fail("border", "ERROR_IF(border_y < -16 * scale_y_n || border_y >= scale_y_n)",
               border=(by, bx), scale_y_n=yn)
    if bx < -16 * xn or bx >= xn:
        c.fail("border", "ERROR_IF(border_x < -16 * scale_x_n || border_x >= scale_x_n)",
               border=(by, bx), scale_x_n=xn)
    for axis, o, num, d in (("OH", oh, (ih - 1) * yn - oy + by, yd),
                            ("OW", ow, (iw - 1) * xn - ox + bx, xd)):
        q = idiv_check(num, d)
        rule = (f"ERROR_IF({axis} != idiv_check(({'IH' if axis == 'OH' else 'IW'} - 1) * "
                f"scale_n - offset + border, scale_d) + 1)")
        if q is None:
            c.fail("output", rule + ": not a multiple", numerator=num, scale_d=d)
        elif o != q + 1:
            c.fail("output", rule, **{axis: o, "expected": q + 1})


def RESCALE(c: OpCheck) -> None:  # noqa: N802
    in_t, out_t = c.types.get("in_t"), c.types.get("out_t")
    scale32 = bool(c.attr("scale32", False))
    per_channel = bool(c.attr("per_channel", False))
    in_u = bool(c.attr("input_unsigned", False))
    out_u = bool(c.attr("output_unsigned", False))
    rounding = c.attr("rounding_mode")
    mul_t = c.t("multiplier").dtype
    want_mul = "INT32" if scale32 else "INT16"
    if mul_t != want_mul:
        c.fail("multiplier", "if (scale32) mul_t=i32_t else mul_t=i16_t",
               scale32=scale32, mul_t=mul_t)
    rank = len(c.shape("input"))
    nc = c.shape("multiplier")[0]
    if per_channel and rank < 1:
        c.fail("per_channel", "ERROR_IF(per_channel && rank(input) < 1)", rank=rank)
    elif per_channel and nc != c.shape("input")[-1]:
        c.fail("multiplier", "if (per_channel) NC=shape[rank(shape)-1] else NC=1", NC=nc,
               shape=c.shape("input"))
    elif not per_channel and nc != 1:
        c.fail("multiplier", "if (per_channel) NC=shape[rank(shape)-1] else NC=1", NC=nc,
               per_channel=per_channel)
    if in_t != "INT8" and (in_t != "INT16" or not in_u):
        c.error_if("input_zp", "ERROR_IF(!is_same<in_t,i8_t>() && (!is_same<in_t,i16_t>() || "
                   "input_unsigned == false) && input_zp != 0)", _nonzero, in_t=in_t,
                   input_unsigned=in_u)
    if out_t != "INT8" and (out_t != "INT16" or not out_u):
        c.error_if("output_zp", "ERROR_IF(!is_same<out_t,i8_t>() && (!is_same<out_t,i16_t>() "
                   "|| output_unsigned == false) && output_zp != 0)", _nonzero, out_t=out_t,
                   output_unsigned=out_u)
    if in_t == "INT16" and in_u:
        c.error_if("input_zp", "ERROR_IF(is_same<in_t,i16_t>() && input_unsigned == true && "
                   "input_zp != 0 && input_zp != 32768)", _not_unsigned_16_zp)
    if out_t == "INT16" and out_u:
        c.error_if("output_zp", "ERROR_IF(is_same<out_t,i16_t>() && output_unsigned == true && "
                   "output_zp != 0 && output_zp != 32768)", _not_unsigned_16_zp)
    rules = (
        (scale32 and in_t == "INT48", "scale32", "ERROR_IF(scale32 && is_same<in_t,i48_t>())"),
        (not scale32 and rounding == "DOUBLE_ROUND", "rounding_mode",
         "ERROR_IF(!scale32 && (rounding_mode == DOUBLE_ROUND))"),
        (in_u and out_u, "input_unsigned", "ERROR_IF(input_unsigned && output_unsigned)"),
        (out_t == "INT32" and in_u, "input_unsigned",
         "ERROR_IF(is_same<out_t,i32_t>() && input_unsigned)"),
        (in_t == "INT32" and out_u, "output_unsigned",
         "ERROR_IF(is_same<in_t,i32_t>() && output_unsigned)"),
        (in_t == "INT48" and out_u, "output_unsigned",
         "ERROR_IF(is_same<in_t,i48_t>() && output_unsigned)"),
        (in_t == "INT48" and in_u, "input_unsigned",
         "ERROR_IF(is_same<in_t, i48_t> && input_unsigned)"),
        (in_t == "INT32" and in_u, "input_unsigned",
         "ERROR_IF(is_same<in_t, i32_t> && input_unsigned)"),
        (out_t == "INT32" and out_u, "output_unsigned",
         "ERROR_IF(is_same<out_t, i32_t> && output_unsigned)"),
    )
    for broken, arg, rule in rules:
        if broken:
            c.fail(arg, rule, in_t=in_t, out_t=out_t, scale32=scale32, rounding_mode=rounding,
                   input_unsigned=in_u, output_unsigned=out_u)


def CONST(c: OpCheck) -> None:  # noqa: N802
    out = c.t("output")
    if out.data is None:
        c.fail("values", "a constant needs its values")
    _block_shapes(c, ("output",), "out_t")


CONST_SHAPE = CONST


def _block_io(c: OpCheck, name: str) -> Block | None:
    ref = c.attr(name)
    block = c.analysis._blocks.get(ref) if isinstance(ref, str) else None
    if block is None:
        c.fail(name, "names no block of the graph", **{name: ref})
    return block


def _io(block: Block, names: list[str]) -> list[tuple[tuple[int, ...], str]]:
    return [(block.tensors[n].shape, block.tensors[n].dtype) if n in block.tensors
            else ((), "?") for n in names]


def _list(c: OpCheck, name: str) -> list[tuple[tuple[int, ...], str]]:
    value = c.tensors.get(name, [])
    assert isinstance(value, list)
    return [(t.shape, t.dtype) for t in value]


def _same_list(c: OpCheck, arg: str, rule: str, a: list[Any], b: list[Any]) -> bool:
    if [s for s, _ in a] != [s for s, _ in b]:
        c.fail(arg, rule, list=[s for s, _ in a], graph=[s for s, _ in b])
        return False
    if [t for _, t in a] != [t for _, t in b]:
        c.fail(arg, rule.replace("shape", "type"), list=[t for _, t in a],
               graph=[t for _, t in b])
        return False
    return True


def COND_IF(c: OpCheck) -> None:  # noqa: N802
    cond = c.t("condition")
    if math.prod(cond.shape) != 1:
        c.fail("condition", "ERROR_IF(tensor_size(shape) != 1)", shape=cond.shape)
    then_b, else_b = _block_io(c, "then_graph"), _block_io(c, "else_graph")
    ins, outs = _list(c, "input_list"), _list(c, "output_list")
    for key, b in (("then_graph", then_b), ("else_graph", else_b)):
        if b is None:
            continue
        _same_list(c, "input_list", f"ERROR_IF(tensor_list_shape(input_list) != "
                   f"tosa_input_shape({key}))", ins, _io(b, b.inputs))
        _same_list(c, "output_list", f"ERROR_IF(tensor_list_shape(output_list) != "
                   f"tosa_output_shape({key}))", outs, _io(b, b.outputs))


def WHILE_LOOP(c: OpCheck) -> None:  # noqa: N802
    ins, outs = _list(c, "input_list"), _list(c, "output_list")
    _same_list(c, "output_list", "ERROR_IF(tensor_list_shape(input_list) != "
               "tensor_list_shape(output_list))", ins, outs)
    cond_b, body_b = _block_io(c, "cond_graph"), _block_io(c, "body_graph")
    if cond_b is not None:
        _same_list(c, "input_list", "ERROR_IF(tensor_list_shape(input_list) != "
                   "tosa_input_shape(cond_graph))", ins, _io(cond_b, cond_b.inputs))
        out = _io(cond_b, cond_b.outputs)
        if len(out) != 1 or math.prod(out[0][0]) != 1:
            c.fail("cond_graph", "ERROR_IF(tensor_size(tosa_output_shape(cond_graph)) != 1)",
                   outputs=[s for s, _ in out])
        elif out[0][1] != "BOOL":
            c.fail("cond_graph", "ERROR_IF(tosa_output_type(cond_graph) != bool_t)",
                   type=out[0][1])
    if body_b is not None:
        _same_list(c, "input_list", "ERROR_IF(tensor_list_shape(input_list) != "
                   "tosa_input_shape(body_graph))", ins, _io(body_b, body_b.inputs))
        _same_list(c, "input_list", "ERROR_IF(tensor_list_shape(input_list) != "
                   "tosa_output_shape(body_graph))", ins, _io(body_b, body_b.outputs))


VARIABLE_OPS = ("VARIABLE", "VARIABLE_WRITE", "VARIABLE_READ")


def _variable(c: OpCheck) -> None:
    """Variable operators: only their element type is checked (they refer to variable tensors
    by name; their REQUIREs on shapes and types are run-time conditions)."""
    dtypes = {c.block.tensors[n].dtype for n in c.opr.inputs + c.opr.outputs
              if n in c.block.tensors}
    rows = [r for r in c.spec.typesupport if set(r["types"].values()) & dtypes] or \
        list(c.spec.typesupport)
    c.info.mode = rows[0]["mode"] if len(rows) == 1 else None
    c.info.options = tuple(dict.fromkeys(o for r in rows for o in r["options"]))


RULES: dict[str, Callable[[OpCheck], None]] = {
    "ARGMAX": ARGMAX, "AVG_POOL2D": AVG_POOL2D, "MAX_POOL2D": MAX_POOL2D, "CONV2D": CONV2D,
    "AVG_POOL2D_ADAPTIVE": AVG_POOL2D, "MAX_POOL2D_ADAPTIVE": MAX_POOL2D,
    "MATMUL_T": MATMUL_T, "ROW_GATHER": ROW_GATHER, "DIM": DIM,
    "MATMUL_T_BLOCK_SCALED": MATMUL_T_BLOCK_SCALED, "CONV2D_BLOCK_SCALED": CONV2D_BLOCK_SCALED,
    "RESHAPE_BLOCK_SCALED": RESHAPE_BLOCK_SCALED,
    "ROW_GATHER_BLOCK_SCALED": ROW_GATHER_BLOCK_SCALED,
    "CAST_TO_BLOCK_SCALED": CAST_TO_BLOCK_SCALED, "CAST_FROM_BLOCK_SCALED": CAST_FROM_BLOCK_SCALED,
    "CAST": CAST, "IDENTITY": IDENTITY,
    "SLICE_SHAPE": SLICE_SHAPE, "CONCAT_SHAPE": CONCAT_SHAPE,
    "ASSERT_EQUAL_SHAPE": _same_length_shapes,
    "CONV3D": CONV3D, "DEPTHWISE_CONV2D": DEPTHWISE_CONV2D, "TRANSPOSE_CONV2D": TRANSPOSE_CONV2D,
    "FFT2D": FFT2D, "RFFT2D": RFFT2D, "MATMUL": MATMUL, "CLAMP": CLAMP, "SELECT": SELECT,
    "NEGATE": NEGATE, "CONCAT": CONCAT, "PAD": PAD, "RESHAPE": RESHAPE, "REVERSE": REVERSE,
    "SLICE": SLICE, "TILE": TILE, "TRANSPOSE": TRANSPOSE, "RESIZE": RESIZE, "RESCALE": RESCALE,
    "CONST": CONST, "CONST_SHAPE": CONST_SHAPE, "COND_IF": COND_IF, "WHILE_LOOP": WHILE_LOOP,
}
for _name in ("ADD", "ARITHMETIC_RIGHT_SHIFT", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR",
              "INTDIV", "LOGICAL_AND", "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT", "LOGICAL_OR",
              "LOGICAL_XOR", "MAXIMUM", "MINIMUM", "MUL", "POW", "SUB", "EQUAL", "GREATER",
              "GREATER_EQUAL"):
    RULES[_name] = _binary
for _name in ("ADD_SHAPE", "SUB_SHAPE", "MUL_SHAPE", "DIV_CEIL_SHAPE", "DIV_FLOOR_SHAPE",
              "MOD_SHAPE", "MAX_SHAPE", "MIN_SHAPE"):
    RULES[_name] = _same_length_shapes
for _name in ("REDUCE_ALL", "REDUCE_ANY", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PRODUCT",
              "REDUCE_SUM"):
    RULES[_name] = _reduce


def analyse(graph: Graph) -> GraphAnalysis:
    """Check every operator of ``graph``; see ``GraphAnalysis``."""
    return GraphAnalysis(graph).run()
