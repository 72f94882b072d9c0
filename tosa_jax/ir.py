"""Graph IR: TOSA graphs as plain Python data, independent of flatbuffers and of JAX.

Element types are the schema's names ("INT8", "INT48", "SHAPE", ...). Constant data is held as
numpy arrays in the natural host dtype of each element type (see ``HOST_DTYPES``): INT4 unpacked
into int8, INT48 and SHAPE widened to int64, BOOL as bool. TOSA 1.1 (draft) adds INT64, the MX
element types FP4E2M1/FP6E2M3/FP6E3M2 (ml_dtypes, packed 4 or 6 bits in a file), the scale
type FP8UE8M0 and MXINT8 (the int8 code of the value code / 64).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from tosa_jax.errors import TosaFormatError, TosaValidationError

# Host (numpy) representation of each TOSA element type.
HOST_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT4": np.dtype(np.int8),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT48": np.dtype(np.int64),
    "SHAPE": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "FP32": np.dtype(np.float32),
    "FP8E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "FP8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    # TOSA 1.1 (draft): EXT-INT64, the microscaling (MX) element and scale types.
    "INT64": np.dtype(np.int64),
    "FP8UE8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "FP4E2M1": np.dtype(ml_dtypes.float4_e2m1fn),
    "FP6E2M3": np.dtype(ml_dtypes.float6_e2m3fn),
    "FP6E3M2": np.dtype(ml_dtypes.float6_e3m2fn),
    # MXINT8 holds the int8 code q of the value q / 64 (the OCP MX spec's scaled integer).
    "MXINT8": np.dtype(np.int8),
}

# Element types that only TOSA 1.1 (draft) graphs may use: a 1.0-stamped graph refuses them.
TYPES_1_1 = frozenset({"INT64", "FP8UE8M0", "FP4E2M1", "FP6E2M3", "FP6E3M2", "MXINT8"})

# Storage width in bits of one element in a flatbuffer's data vector.
STORAGE_BITS: dict[str, int] = {
    "BOOL": 8, "INT4": 4, "INT8": 8, "INT16": 16, "INT32": 32, "INT48": 48, "SHAPE": 64,
    "FP16": 16, "BF16": 16, "FP32": 32, "FP8E4M3": 8, "FP8E5M2": 8,
    "INT64": 64, "FP8UE8M0": 8, "FP4E2M1": 4, "FP6E2M3": 6, "FP6E3M2": 6, "MXINT8": 8,
}

INTEGER_TYPES = ("INT4", "INT8", "INT16", "INT32", "INT48", "INT64")
FLOAT_TYPES = ("FP16", "BF16", "FP32", "FP8E4M3", "FP8E5M2", "FP8UE8M0", "FP4E2M1", "FP6E2M3",
               "FP6E3M2")
# Integer types carried as 64-bit ``Wide`` pairs of 32-bit words inside a graph function, and
# returned to callers as numpy int64 (no 64-bit JAX type is needed: see lowering/numerics.py).
WIDE_TYPES = ("INT48", "INT64")
# Element types a graph function carries as raw uint8 codes (XLA has no FP6 arithmetic; host
# arrays view them so).
CODE_TYPES = ("FP6E2M3", "FP6E3M2")


def is_1_1(version: tuple[int, int, int, bool]) -> bool:
    """Whether a graph's version stamp asks for TOSA 1.1 (draft) rules."""
    return tuple(version[:2]) >= (1, 1)


def num_elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# Value range and width in bits of each integer element type (UINT8/16: RESCALE's unsigned views).
INT_RANGES: dict[str, tuple[int, int]] = {
    "INT4": (-8, 7), "INT8": (-128, 127), "INT16": (-32768, 32767),
    "INT32": (-(1 << 31), (1 << 31) - 1), "INT48": (-(1 << 47), (1 << 47) - 1),
    "INT64": (-(1 << 63), (1 << 63) - 1),
    "UINT8": (0, 255), "UINT16": (0, 65535),
}
INT_BITS: dict[str, int] = {"INT4": 4, "INT8": 8, "INT16": 16, "INT32": 32, "INT48": 48,
                            "INT64": 64}


def storage_bytes(t: Tensor) -> int:
    """Bytes of a tensor packed as in a flatbuffer (INT4 half a byte, INT48 six)."""
    return (num_elements(t.shape) * STORAGE_BITS.get(t.dtype, 32) + 7) // 8


class Wide(NamedTuple):
    """A 64-bit two's-complement integer tensor as (int32 hi, uint32 lo), value = hi * 2**32 + lo:
    how INT48 values (and the spec's 64-bit steps) travel without 64-bit JAX types. A JAX pytree
    (a NamedTuple); numpy words for constants, JAX arrays inside a traced function."""

    hi: Any
    lo: Any

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.hi))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def reshape(self, shape: Any) -> Wide:
        import jax.numpy as jnp  # only called while lowering, when JAX is loaded anyway

        return Wide(jnp.reshape(self.hi, shape), jnp.reshape(self.lo, shape))

    def map(self, f: Any) -> Wide:
        """Apply a data-movement function (transpose, slice, ...) to both words."""
        return Wide(f(self.hi), f(self.lo))


def wide_from_numpy(values: np.ndarray) -> Wide:
    v = np.asarray(values, dtype=np.int64)
    return Wide((v >> 32).astype(np.int32), (v & 0xFFFFFFFF).astype(np.uint32))


def wide_to_numpy(w: Wide) -> np.ndarray:
    hi = np.asarray(w.hi).astype(np.int64)
    lo = np.asarray(w.lo).astype(np.int64)
    return (hi << 32) | lo


class BlockScaled(NamedTuple):
    """The value of a TOSA 1.1 block-scaled tensor (``block_scale_t``, e.g.
    bs32_fp8ue8m0_fp8e4m3_t): its values, and one scale per block of ``block_size`` values along
    the innermost axis (scales shape = values shape with the last dimension / block_size). A JAX
    pytree: numpy arrays for constants and at the caller's side, JAX arrays inside a graph
    function. The element at [..., c] is ``scales[..., c // block_size] * values[..., c]``."""

    values: Any
    scales: Any

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.values))


def block_scale_shape(shape: tuple[int, ...], block_size: int) -> tuple[int, ...]:
    """The scales' shape of a block-scaled tensor (BLOCK_SCALED_LAYOUT in tensor_read.tosac)."""
    return tuple(shape[:-1]) + (shape[-1] // block_size,) if shape else ()


@dataclass
class Tensor:
    """A named tensor of a block; ``data`` is set for constants (CONST/CONST_SHAPE outputs).

    A TOSA 1.1 block-scaled tensor has ``block_size`` > 0: ``dtype`` is its value type,
    ``scale_dtype`` its scale type (FP8UE8M0) and, for a constant, ``scale_data`` its scales."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None
    variable: bool = False
    variable_name: str | None = None
    scale_dtype: str | None = None
    block_size: int = 0
    scale_data: np.ndarray | None = None

    @property
    def block_scaled(self) -> bool:
        return self.block_size > 0

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return block_scale_shape(self.shape, self.block_size)

    @property
    def type_name(self) -> str:
        """The element type as the spec's type tables name it: ``BS32_FP8UE8M0_FP8E4M3`` for
        block_scale_t<BLOCK_SHAPE_32, fp8ue8m0_t, fp8e4m3_t>, else ``dtype``."""
        if not self.block_scaled:
            return self.dtype
        return f"BS{self.block_size}_{self.scale_dtype}_{self.dtype}"

    @property
    def variable_key(self) -> str:
        """The name of the variable a variable tensor holds (EXT-VARIABLE): ``variable_name``,
        the variable's globally unique identifier, or the tensor's own name when unset."""
        return self.variable_name or self.name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        same_data = (self.data is None and other.data is None) or (
            self.data is not None and other.data is not None
            and self.data.dtype == other.data.dtype
            and np.array_equal(self.data, other.data, equal_nan=self.data.dtype.kind == "f")
        )
        same_scales = (self.scale_data is None and other.scale_data is None) or (
            self.scale_data is not None and other.scale_data is not None
            and np.array_equal(self.scale_data, other.scale_data, equal_nan=True))
        return (self.name, self.shape, self.dtype, self.variable, self.variable_name,
                self.scale_dtype, self.block_size) == (
            other.name, other.shape, other.dtype, other.variable, other.variable_name,
            other.scale_dtype, other.block_size) and same_data and same_scales


@dataclass
class Operator:
    """One operator: its TOSA name, input and output tensor names, attributes by spec name."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    location: str | None = None


@dataclass
class Block:
    """A basic block: operators in order, its tensors by name, its inputs and outputs."""

    name: str
    operators: list[Operator] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # One step of a rolled loop (tosa_jax.reroll): for each input fed per step whose values are
    # constants of the unrolled graph, those values, stacked (the step reads them traced; the
    # range analysis and the lowerings' choice of exact forms may rely on every one of them).
    step_values: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    # ... and for inputs carried from step to step, the range their values are proven to lie in
    # over every step (tosa_jax.ranges.carried_ranges).
    input_ranges: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False,
                                                     repr=False)


# Operators that make constants; and operators that run blocks (EXT-CONTROLFLOW) or touch
# variables (EXT-VARIABLE), which are never evaluated as constants: their results may depend on
# the variable state, and their lowerings decide what can be decided before tracing.
CONSTANT_OPS = frozenset({"CONST", "CONST_SHAPE"})
STATEFUL_OPS = frozenset({"COND_IF", "WHILE_LOOP", "VARIABLE", "VARIABLE_READ", "VARIABLE_WRITE"})


def trace_constants(block: Block) -> set[str]:
    """The tensors of ``block`` that are numpy constants while it is traced (the executor's
    constant propagation): CONST / CONST_SHAPE outputs, and the outputs of operators other than
    STATEFUL_OPS whose inputs all are."""
    const: set[str] = set()
    for op in block.operators:
        if op.op in CONSTANT_OPS or (op.op not in STATEFUL_OPS and op.inputs
                                     and all(n in const for n in op.inputs)):
            const.update(op.outputs)
    return const


def contraction_macs(block: Block, op: Operator) -> int:
    """Multiply-accumulates of a convolution or matrix product (TOSA 1.1's MATMUL_T and
    block-scaled ones included), from its shapes (0 for other operators): each output element
    of a correlation sums kernel taps x input channels products; each input element of a
    transposed convolution scatters kernel taps x output channels of them."""
    t = block.tensors
    if op.op in ("CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D",
                 "CONV2D_BLOCK_SCALED"):
        # (CONV2D_BLOCK_SCALED: input data, input scales, weight data [OC, KH, KW, IC], ...)
        w = t[op.inputs[2 if op.op == "CONV2D_BLOCK_SCALED" else 1]].shape
        out = t[op.outputs[0]].shape
        if op.op == "DEPTHWISE_CONV2D":  # weights [KH, KW, C, M]
            return num_elements(out) * w[0] * w[1]
        if op.op == "TRANSPOSE_CONV2D":  # [OC, KH, KW, IC]
            return num_elements(t[op.inputs[0]].shape[:3]) * num_elements(w)
        return num_elements(out) * num_elements(w[1:])  # [OC, (KD,) KH, KW, IC]
    if op.op in ("MATMUL", "MATMUL_T", "MATMUL_T_BLOCK_SCALED"):  # A [N, H, C]: C a product
        return num_elements(t[op.outputs[0]].shape) * t[op.inputs[0]].shape[2]
    return 0


@dataclass
class Region:
    name: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Graph:
    """A TOSA graph: its version and regions; the first region's first block is the entry."""

    version: tuple[int, int, int, bool] = (1, 0, 0, False)
    regions: list[Region] = field(default_factory=list)

    @property
    def main(self) -> Block:
        return self.regions[0].blocks[0]

    def block(self, name: str) -> Block:
        """The block a control-flow attribute (then_graph, body_graph, ...) names.

        TOSA 1.0 files name a region, whose first block runs; older serializations name a block
        (of any region). A region of that name wins over a block of that name.
        """
        for region in self.regions:
            if region.name == name and region.blocks:
                return region.blocks[0]
        for region in self.regions:
            for block in region.blocks:
                if block.name == name:
                    return block
        raise KeyError(name)

    def operator_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for region in self.regions:
            for block in region.blocks:
                for op in block.operators:
                    counts[op.op] = counts.get(op.op, 0) + 1
        return counts


class GraphBuilder:
    """Build a single-block graph in code, for tests and users without other tools.

    >>> b = GraphBuilder()
    >>> x = b.input("x", (1, 4), "INT8")
    >>> y = b.op("ABS", [x], (1, 4), "INT8")
    >>> g = b.build([y])
    """

    def __init__(self, version: tuple[int, int, int, bool] = (1, 0, 0, False)) -> None:
        self.block = Block("main")
        self.version = version
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def input(self, name: str, shape: tuple[int, ...], dtype: str) -> str:
        self.block.tensors[name] = Tensor(name, tuple(shape), dtype)
        self.block.inputs.append(name)
        return name

    def const(self, value: Any, dtype: str, name: str | None = None) -> str:
        """A CONST (or CONST_SHAPE for dtype SHAPE) operator producing ``value``."""
        name = name or self._name("const")
        data = np.asarray(value, dtype=HOST_DTYPES[dtype])
        if dtype == "SHAPE":
            data = data.reshape(-1)
        self.block.tensors[name] = Tensor(name, tuple(data.shape), dtype, data)
        self.block.operators.append(
            Operator("CONST_SHAPE" if dtype == "SHAPE" else "CONST", [], [name]))
        return name

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], dtype: str,
           name: str | None = None, **attrs: Any) -> str:
        """Append an operator with one output; returns the output's name."""
        from tosa_jax.serialization import OP_VALUES  # the schema's operators: what can be written

        if op not in OP_VALUES:
            import difflib  # (here: only an unknown name needs it)

            close = difflib.get_close_matches(op, list(OP_VALUES), n=3)
            raise TosaValidationError(f"GraphBuilder.op: {op!r} is not a TOSA operator"
                                      + (f" (did you mean {', '.join(close)}?)" if close else ""))
        out = name or self._name(op.lower())
        self.block.tensors[out] = Tensor(out, tuple(shape), dtype)
        self.block.operators.append(Operator(op, list(inputs), [out], attrs))
        return out

    def build(self, outputs: list[str]) -> Graph:
        self.block.outputs = list(outputs)
        return Graph(self.version, [Region("main", [self.block])])


def file_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of a graph file; a missing path or a directory is a TosaFormatError."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TosaFormatError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise TosaFormatError(f"{path}: not a file")
    with open(path, "rb") as f:
        return f.read()


def source_bytes(source: object) -> tuple[bytes | None, str | None]:
    """The bytes of a path or a bytes-like source and the path to name in errors (None for
    bytes); (None, None) for anything else (a Graph, a Model)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), None
    if isinstance(source, (str, os.PathLike)):
        return file_bytes(source), os.fspath(source)
    return None, None


def host_to_value(array: np.ndarray, dtype: str) -> Any:
    """Convert a caller's host array to the value the graph function takes."""
    if dtype in CODE_TYPES:  # FP6: its uint8 codes
        return np.asarray(array).view(np.uint8)
    return wide_from_numpy(array) if dtype in WIDE_TYPES else array


def value_to_host(value: Any, dtype: str) -> Any:
    """A graph function's output as the caller's host array (the inverse of host_to_value); a
    block-scaled one as a BlockScaled pair of host arrays."""
    if isinstance(value, BlockScaled):
        return BlockScaled(value_to_host(value.values, dtype), np.asarray(value.scales))
    if isinstance(value, Wide):
        return wide_to_numpy(value)
    if dtype in CODE_TYPES:
        return np.asarray(value).view(HOST_DTYPES[dtype])
    return np.asarray(value)
