"""Which float graphs may start on the quick tier: where it computes the optimized tier's bits.

Integer graphs start on a quick executable (``model.QUICK_OPTIONS``: LLVM's optimizer off,
XLA's elemental emitters) and move to the optimized one in the background; their results are
exact either way. A float result can differ between the two in its last bit, and a model must
not answer its first call otherwise than its later ones. In XLA's own kernels LLVM's optimizer
changes float arithmetic two ways:
- it contracts a multiply feeding an add into one fused multiply-add, rounded once (XLA CPU
  allows it always); without the optimizer both are rounded. XLA's transcendentals are
  polynomials of multiply-adds, so they differ too;
- it reorders sums: XLA marks a reduction's adds reassociable (``fadd reassoc``), and at full
  optimization an 8 x 8 x 16 mean was summed as a vector reduction, in another order.
Beside those, the two tiers compute the same:
- library kernels (Eigen's convolutions and products, YNNPACK's fusions) are the same code
  with the same options in both tiers (the quick tier of a float graph keeps the optimized
  one's library choices and threading);
- add, subtract, divide, square root, maximum, minimum, compare, select and conversions
  between FP32 and integers are correctly rounded (or exact) by IEEE 754, whatever the code.

So a float graph is tiered when its quick executable's optimized HLO proves it (``inexact``
finds nothing): every float value of XLA's own kernels is FP32, made by those operations, with
no multiply (or divide, which LLVM may turn into one) and add in one kernel and no float sum;
every top-level product and convolution is one XLA gives Eigen (not a matrix-vector product, a
small product or an unusual layout, which XLA compiles into its own loops); a candidate's sums
go to YNNPACK (REDUCE_FUSION). ``candidate`` is the cheap test on the TOSA graph, at load, that
spares the quick compile of graphs that cannot pass (transcendentals, FP16, depthwise
convolutions lowered as multiply-adds, small graphs).

Checked (2-core AMD EPYC, jax 0.10.2, 2026-11-29) on 5,636 conformance tests (the generated
PRO-FP suite's convolutions, products, pools, sums, MUL and RECIPROCAL; both CI slices), at
any size: 896 proven, all bit-identical on both tiers; 15 matrix-vector products differed
before the product rule. resnet_fp32's first result 0.32-0.34 -> 0.19-0.20 s. The conformance
SUT requires the optimized bits of every FP32 graph answered by its quick tier, and
tests/unit/test_float_tier.py checks random CNNs.
"""

from __future__ import annotations

import math
import re

from tosa_jax.ir import FLOAT_TYPES, INT_RANGES, Graph

# Smaller float graphs are not tried: their sums (a mean of a few thousand elements) and small
# convolutions are mostly XLA's own code, which ``inexact`` refuses after the quick compile,
# then only added to the first result (10 of 12 random FP32 CNNs of 16-32 px refused,
# tests/unit/test_float_tier.py); and they compile in 0.1-0.2 s. (model.LARGE_FLOAT_MACS
# likewise gives such graphs' products to Eigen's threads.)
MIN_MACS = 10_000_000
# TOSA operators on FP32 tensors whose lowerings compute with the operations above or a library
# product or convolution (MUL: a kernel where it meets an add fails ``inexact``).
CANDIDATE_OPS = frozenset({
    "ABS", "ADD", "ARGMAX", "AVG_POOL2D", "CAST", "CEIL", "CLAMP", "CONCAT", "CONST",
    "CONST_SHAPE", "CONV2D", "CONV3D", "EQUAL", "FLOOR", "GATHER", "GREATER", "GREATER_EQUAL",
    "IDENTITY", "MATMUL", "MAX_POOL2D", "MAXIMUM", "MINIMUM", "MUL", "NEGATE", "PAD",
    "RECIPROCAL", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_SUM", "RESHAPE", "REVERSE", "SCATTER",
    "SELECT", "SLICE", "SUB", "TILE", "TRANSPOSE", "TRANSPOSE_CONV2D"})

# Tensor types of a candidate: FP32, integers (exact in both tiers), booleans, shapes.
PLAIN_TYPES = frozenset({"FP32", "BOOL", "SHAPE", *INT_RANGES})
# A candidate's reductions go to YNNPACK (library code, in both tiers; ``model.xla_options``):
# XLA's own float sums are reassociable (module docstring).
REDUCE_FUSION = "LIBRARY_FUSION_TYPE_REDUCE"

# HLO operations correctly rounded or exact whatever the code (see the module docstring), and
# the multiply (refused with an add in one kernel); reductions: of maxima or minima only.
EXACT_HLO = frozenset("""
    parameter constant broadcast bitcast reshape transpose copy slice dynamic-slice
    dynamic-update-slice concatenate pad reverse iota tuple get-tuple-element select compare
    add subtract maximum minimum clamp negate abs convert floor ceil round-nearest-even
    round-nearest-afz sign is-finite bitcast-convert divide sqrt reduce reduce-window multiply
    and or not xor gather scatter""".split())
# Operations of the executable's top level: library calls, copies and control flow.
LIBRARY_HLO = frozenset({"dot", "convolution", "custom-call", "fusion", "while", "conditional"})

_FLOAT = re.compile(r"\b(f16|bf16|f32|f64|f8e\w*|f4e\w*|f6e\w*)\[")
_HEAD = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([a-z][\w\-]*)\((.*)$")
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\](?:\{([\d,]*)\})?")
_OPERAND = re.compile(r"%([\w.\-]+)")
_BODIES = re.compile(r"(?:calls|to_apply)=%?([\w.\-]+)")
_CALLEES = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)=\{?%?([\w.\-]+)")


def candidate(graph: Graph, float_macs: int, conv_kinds: list[str]) -> bool:
    """Whether the graph may pass ``inexact``: a graph of MIN_MACS float multiply-adds or more
    a call, of float convolutions and no integer ones (``conv_kinds``, the model's: the
    options of ``model.xla_options`` apply), whose tensors are FP32 or integers and whose
    operators on floats are CANDIDATE_OPS."""
    if float_macs < MIN_MACS or conv_kinds != ["float"]:
        return False
    for region in graph.regions:
        for block in region.blocks:
            dtypes = {name: t.dtype for name, t in block.tensors.items()}
            if any(d not in PLAIN_TYPES for d in dtypes.values()):
                return False
            for op in block.operators:
                if op.op not in CANDIDATE_OPS and any(
                        dtypes.get(n) in FLOAT_TYPES for n in (*op.inputs, *op.outputs)):
                    return False
    return True


def _shape(dtype: str) -> tuple[list[int], list[int]] | None:
    """The dimensions and layout (minor to major) of an HLO array type ``f32[2,3]{1,0}``."""
    m = _ARRAY.fullmatch(dtype.strip())
    if m is None:
        return None
    dims = [int(d) for d in m.group(2).split(",") if d]
    layout = [int(d) for d in m.group(3).split(",") if d] if m.group(3) is not None else None
    return dims, layout if layout is not None else list(range(len(dims) - 1, -1, -1))


def _row_major(dtype: str, min_bytes: int = 16) -> list[int] | None:
    """The dimensions of an f32 array in row-major layout of at least ``min_bytes`` (what
    XLA aligns for its libraries), else None."""
    shape = _shape(dtype)
    if shape is None or not dtype.strip().startswith("f32["):
        return None
    dims, layout = shape
    if layout != list(range(len(dims) - 1, -1, -1)) or 4 * math.prod(dims) < min_bytes:
        return None
    return dims


def _eigen_dot(dtype: str, operands: list[str], rest: str) -> bool:
    """Whether XLA CPU runs this top-level dot on Eigen: a matrix product of row-major
    operands in the canonical form, not a matrix-vector product nor one it compiles into its
    own loops (XLA's GetDotImplementationStrategy, its tiled GEMM's bounds included)."""
    out = _row_major(dtype)
    if out is None or len(out) != 2 or len(operands) != 2:
        return False
    lhs, rhs = (_row_major(t) for t in operands)
    if (lhs is None or rhs is None or len(lhs) != 2 or len(rhs) != 2
            or "lhs_contracting_dims={1}" not in rest or "rhs_contracting_dims={0}" not in rest
            or "batch_dims" in rest):
        return False
    (m, k), n = lhs, rhs[1]
    small = k <= 128 and ((m <= 32 and n <= 128) or (m <= 128 and n <= 32))
    naive = min(m, k) <= 3 and min(k, n) <= 3  # (older XLA: both operands that small)
    return min(m, n) > 1 and not naive and not small


def _eigen_convolution(dtype: str, operands: list[str], rest: str) -> bool:
    """Whether XLA CPU runs this top-level convolution on Eigen: NHWC input, HWIO kernel,
    NHWC output (1 to 3 spatial dimensions), no reversed window, row-major f32 arrays of at
    least 16 bytes (XLA's PotentiallyImplementedAsEigenConvolution and CanUseEigenConvolution)."""
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", rest)
    if (labels is None or len(operands) != 2 or "rhs_reversal" in rest
            or "group_count" in rest):  # (grouped: stricter than XLA's predicate)
        return False
    spatial = "".join(str(i) for i in range(len(labels.group(1)) - 2))
    if (not 1 <= len(spatial) <= 3 or labels.groups() != (f"b{spatial}f", f"{spatial}io",
                                                          f"b{spatial}f")):
        return False
    return all(_row_major(t) is not None for t in (dtype, *operands))


def _sums(computations: dict[str, list[tuple[str, str, str, str]]], rest: str) -> bool:
    """Whether a reduction's reducer computes floats otherwise than by maxima and minima."""
    return any(_FLOAT.search(dtype) and opcode not in ("parameter", "maximum", "minimum",
                                                       "select", "tuple")
               for callee in _CALLEES.findall(rest)
               for _, dtype, opcode, _ in computations.get(callee, ()))


def inexact(hlo: str) -> str | None:
    """Why the optimized HLO module ``hlo`` (an executable's ``as_text()``) may compute other
    float bits at full optimization than without it; None when it cannot (module docstring)."""
    computations: dict[str, list[tuple[str, str, str, str]]] = {}
    body: list[tuple[str, str, str, str]] | None = None
    for line in hlo.splitlines():
        head = _HEAD.match(line)
        if head:
            body = computations.setdefault(head.group(1), [])
        elif line.startswith("}"):
            body = None
        elif body is not None and (m := _INSTR.match(line)):
            body.append(m.groups())  # (name, type, opcode, operands and attributes)
    kernels: list[str] = []
    thunks = set(computations)  # the entry, loop bodies, branches: not a fusion's or reducer's
    for instructions in computations.values():
        for _, _, opcode, rest in instructions:
            thunks.difference_update(_BODIES.findall(rest))
            if opcode == "fusion" and "kind=kCustom" not in rest:  # a library fusion: YNNPACK
                kernels.append(_CALLEES.findall(rest)[0])
    for name in thunks:  # library calls, copies, control flow, and kernels of one operation
        types = {instr: dtype for instr, dtype, _, _ in computations[name]}
        for instr, dtype, opcode, rest in computations[name]:
            if not _FLOAT.search(dtype):
                continue
            if opcode not in LIBRARY_HLO | EXACT_HLO:
                return f"{opcode} ({instr})"
            operands = [types.get(o, "") for o in _OPERAND.findall(rest.split(")", 1)[0])]
            if opcode == "dot" and not _eigen_dot(dtype, operands, rest):
                return f"a product XLA compiles itself ({instr})"
            if opcode == "convolution" and not _eigen_convolution(dtype, operands, rest):
                return f"a convolution XLA compiles itself ({instr})"
            if opcode in ("reduce", "reduce-window") and _sums(computations, rest):
                return f"a float sum or product ({instr})"
    for kernel in kernels:  # XLA's own code: a fusion's computation and those it calls
        seen, todo, opcodes = set(), [kernel], set()
        while todo:
            name = todo.pop()
            if name in seen or name not in computations:
                continue
            seen.add(name)
            for instr, dtype, opcode, rest in computations[name]:
                callees = _CALLEES.findall(rest)
                todo += callees
                floats = _FLOAT.findall(dtype)
                if not floats:
                    continue  # integers: exact in both tiers
                if any(t != "f32" for t in floats) or opcode not in EXACT_HLO:
                    return f"{opcode} {floats[0]} ({instr})"
                if opcode in ("reduce", "reduce-window") and _sums(computations, rest):
                    return f"a float sum or product ({instr})"  # reassociable (docstring)
                opcodes.add(opcode)
        if opcodes & {"multiply", "divide"} and opcodes & {"add", "subtract"}:
            return f"a multiply and an add in one kernel ({kernel})"
    return None
