"""Exact integer numerics shared by the lowerings (and only here).

Everything is built from 32-bit JAX operations, so results are the same with ``jax_enable_x64``
on or off and on any device. Values the spec computes in 64 bits (int48 tensors, products in
apply_scale_32/16 and MUL with shift) are carried as a ``Wide`` pair: a signed high word and an
unsigned low word, value = hi * 2**32 + lo, arithmetic modulo 2**64. One exception, explicit:
apply_scale_32 with constant scales is one primitive (``scale_32_p``, int32 in and out), which
XLA CPU gets as int64 arithmetic in the lowered module and every other platform as those
32-bit forms.

Rule for callers: pass explicit dtypes to reductions (``jnp.sum(x, dtype=jnp.int32)``) and never
mix numpy int64 scalars into integer arithmetic; with x64 on, either would widen to int64.
"""

from __future__ import annotations

import contextvars
import functools
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# (jax.extend.core and jax.extend.mlir name the same objects, but importing jax.extend imports
# Pallas too: 12 ms of a first result)
from jax._src.core import Primitive
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax.interpreters import batching, mlir

# The type tables and the Wide pair live with the IR; re-exported here for the lowerings.
from tosa_jax.ir import (  # noqa: F401
    CODE_TYPES,
    INT_RANGES,
    BlockScaled,
    Wide,
    wide_from_numpy,
    wide_to_numpy,
)
from tosa_jax.violations import REQUIRE_RULES

Array = Any  # a jax.Array or numpy array

I32 = jnp.int32
U32 = jnp.uint32


# ----------------------------------------------------------------------------- type ranges

DEVICE_DTYPES = {"BOOL": jnp.bool_, "INT4": jnp.int8, "INT8": jnp.int8, "INT16": jnp.int16,
                 "INT32": jnp.int32, "FP16": jnp.float16, "BF16": jnp.bfloat16,
                 "FP32": jnp.float32, "FP8E4M3": jnp.float8_e4m3fn, "FP8E5M2": jnp.float8_e5m2,
                 # TOSA 1.1 (draft); INT64, like INT48, is a ``Wide`` pair, never a JAX type.
                 # XLA (jax 0.10.2, CPU) cannot compile the FP6 types: they travel as their
                 # uint8 codes (see CODE_TYPES, fp6_decode / fp6_encode).
                 "FP8UE8M0": jnp.float8_e8m0fnu, "FP4E2M1": jnp.float4_e2m1fn,
                 "FP6E2M3": jnp.uint8, "FP6E3M2": jnp.uint8, "MXINT8": jnp.int8}


def minimum_s(dtype: str) -> int:
    return INT_RANGES[dtype][0]


def maximum_s(dtype: str) -> int:
    return INT_RANGES[dtype][1]


def no_fold(x: Array) -> Array:
    """A host constant (numpy) as a JAX value that XLA will not constant-fold; others unchanged.

    XLA's CPU constant folder (jax 0.10.2) miscomputes a gather of a constant whenever a
    bitcast_convert follows it (it reads the gathered literal in the wrong layout): e.g. RESIZE
    of a CONST into Wide products. Apply to constant operands of gathers.
    """
    return lax.optimization_barrier(jnp.asarray(x)) if isinstance(x, np.ndarray) else x


def _traced_ints(x: Any, size: int = 0) -> bool:
    """``x`` is a traced integer array of at least ``size`` elements: what the program-shaping
    helpers below act on (constants and floats pass through them as they are)."""
    return (isinstance(x, jax.core.Tracer) and x.size >= size
            and np.dtype(x.dtype).kind in "iu")


def fusion_boundary(x: Array, own_kernel: bool = True) -> Array:
    """``x`` unchanged, computed once: XLA will not copy the operations that produce it into
    each of its users.

    XLA CPU (jax 0.10.2) duplicates a cheap elementwise producer into every fusion that uses it
    when its result is smaller than the L2 cache; along a chain of shared values (an unrolled
    LSTM's cell state, a RESCALE feeding a convolution and a residual ADD) the copies compound:
    the int8 LSTM's 8,700 operations became 61,000 optimized instructions, recomputed at run
    time and rebuilt by every load from the compile cache. An optimization barrier does not
    stop it (XLA CPU removes barriers before fusion); an operation XLA never duplicates does.

    On the CPU that is OR with 0 over a window of one element (``_own_kernel``): a
    reduce_window is not loop-fusible there, so the producers form a vectorized loop fusion of
    their own and the window a small kernel of its own. Before (2026-11-28), OR over a
    broadcast pair of ``x``: a reduction, which XLA CPU fuses with its producers into a loop
    that computes the whole chain per element without vectorizing it; unet_int8's 2x upsampling
    + RESCALE + CONCAT, 98,304 elements: 97 us as that loop, 23 us as a loop of its own plus
    13 us of window. unet_int8 batch 1 1.48-1.51 -> 1.39-1.40 ms (min of 300 calls, two
    interleaved rounds), evaluate(64) 711-765 -> 801-819 samples/s; the other integer graphs
    within noise (mobilenetv2_int8, resnet_int8, bert_tiny_int8, lstm_int8, cnn_int8,
    mlp_attn_int8), their optimized instruction counts within 3%. Not max, nor any reduction
    XLA simplifies: it would be removed, or (an int8 max) handed to YNNPACK as a fusion of its
    own, which builds a kernel pipeline on its first run (bert_tiny_int8, ten of them: batch 1
    2.3-2.7 -> 1.7-1.9 ms). Other platforms keep the pair's OR (GPUs unmeasured). Exact for
    every integer type; integer arrays of more than one element, others are returned as they
    are. ``own_kernel=False``: the pair's OR on the CPU too."""
    if not _traced_ints(x, 2):
        return x
    return on_cpu_else(_own_kernel, _or_pair, x) if own_kernel else _or_pair(x)


def _own_kernel(x: Array) -> Array:
    """``x`` through OR with 0 over windows of one element: on XLA CPU a kernel of its own,
    which its producers do not fuse into (see fusion_boundary, gather_indices)."""
    ones = (1,) * x.ndim
    return lax.reduce_window(x, np.array(0, x.dtype), lax.bitwise_or, ones, ones, "VALID")


def _or_pair(x: Array) -> Array:
    """``x`` as OR over a broadcast pair of itself: a reduction, never duplicated by XLA.
    (lax.reduce_or: the same StableHLO as lax.reduce with bitwise_or as its computation, and
    0.08 ms a call to trace where that takes 0.33.)"""
    pair = lax.broadcast_in_dim(x, (*x.shape, 2), tuple(range(x.ndim)))
    return lax.reduce_or(pair, (x.ndim,))


def stop_reshapes(x: Array) -> Array:
    """``x`` unchanged: on the CPU behind an optimization barrier, which XLA CPU removes before
    fusion (none reaches the executable), so that XLA's simplifier settles at once.

    A reduction that keeps its axis (TOSA's REDUCE_*) reaches XLA as a reduce and a reshape that
    restores the axis. XLA's simplification pipeline (jax 0.10.2) moves that reshape past one
    elementwise operation of constant operands per run (its reshape mover), and reruns the
    whole pipeline, over the whole module, until nothing changes, 25 runs at most: the RESCALEs
    after a group norm's or a softmax's statistics kept it running to that cap (unet_int8: 25
    runs of it and 19 of the one after scatter expansion, 0.75 s of algebraic simplification
    in a 1.8-2.2 s quick-tier compile). Behind the barrier the reshape stays where it is, a
    copy-free change of shape (the optimized program keeps it as a bitcast, and two sums in a
    row are no longer merged into one reduce: unet_int8 +3% instructions, the other integer
    graphs within 1%). Integer arrays only: a float graph's chains are short, its pipeline
    settles in a few runs, and its program stays as XLA makes it. Off the CPU ``x`` as it is;
    so are constants."""
    if not _traced_ints(x):
        return x
    return on_cpu_else(lax.optimization_barrier, lambda v: v, x)


def stops_reshapes(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An operator's lowering whose results (arrays, or a Wide's words) pass ``stop_reshapes``:
    the operators whose result XLA forms with a reshape at its end (a reduction keeping its
    axis, RESHAPE, a convolution or matrix product XLA rewrites as a dot of fewer dimensions, a
    global pooling)."""

    @functools.wraps(fn)
    def lowered(*args: Any, **kwargs: Any) -> Any:
        return jax.tree.map(stop_reshapes, fn(*args, **kwargs))

    return lowered


# From this many elements a table lookup's indices are computed in a kernel of their own on the
# CPU (below it the extra kernel's fixed cost, a few microseconds, outweighs the gain).
OWN_KERNEL_ELEMENTS = 4096


def gather_indices(x: Array) -> Array:
    """``x``, the indices of a table lookup, unchanged, computed on the CPU in a kernel of their
    own rather than inside the gather's.

    XLA CPU (jax 0.10.2) runs a loop fusion that holds a gather element by element, and fuses
    the indices' producers into it: a RESCALE or a whole group norm (100-180 int32 operations
    an element) then runs unvectorized (unet_int8's group norm + SiLU TABLE + pad: 0.8 ms for
    98,304 elements). A reduce_window is not loop-fusible on XLA CPU, so its producers form a
    vectorized loop of their own; OR with 0 over a window of one element is ``x`` itself and,
    unlike a max or a sum, XLA does not simplify it away (``_own_kernel``, also
    ``fusion_boundary``'s on the CPU, which only shared values take: the indices have one
    user). Off the CPU, gathers fuse well: ``x`` as it is; so are constants and arrays of
    fewer than OWN_KERNEL_ELEMENTS."""
    if not _traced_ints(x, OWN_KERNEL_ELEMENTS):
        return x
    return on_cpu_else(_own_kernel, lambda v: v, x)


def is_host(*xs: Any) -> bool:
    """True when no argument is traced: each is known now (numpy, Python, a concrete array).

    Constant operands (RESCALE's multipliers and shifts, constant subgraphs) are prepared with
    numpy: each JAX operation on concrete values would dispatch, and compile, on its own."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def as_i32(x: Array) -> Array:
    """Sign-extend (or keep) an integer value as int32."""
    if isinstance(x, jax.Array) and x.dtype == np.int32:
        return x
    if isinstance(x, jax.Array):
        return lax.convert_element_type(x, I32)
    return jnp.asarray(x).astype(I32)


def bitcast_u32(x: Array) -> Array:
    if not (isinstance(x, jax.Array) and x.dtype == np.int32):
        x = jnp.asarray(x, I32)
    return lax.bitcast_convert_type(x, U32)


def bitcast_i32(x: Array) -> Array:
    if not (isinstance(x, jax.Array) and x.dtype == np.uint32):
        x = jnp.asarray(x, U32)
    return lax.bitcast_convert_type(x, I32)


# ----------------------------------------------------------------------------- per backend
# XLA's backends do not all compile the same integer contractions, or compile them right.
# Measured on an H200 (jax 0.11.2, CUDA 13, 2026-11-26): the GPU backend gave wrong sums for
# int8 x int8 -> int32 matrix products of short contractions (2 and 6 terms: every element off),
# compiles integer convolutions only as cuDNN's int8 convolutions with an int8 or f32 result
# (none of TOSA's: "Can't lower one or more integer convolutions to idioms supported by CuDNN"),
# and aborted in its cuDNN padding pass on an FP8 convolution; int32 x int32 -> int32 products
# were exact at every size tried (K = 1 to 2,304), but run without tensor cores. 8-bit products
# therefore run off the CPU as exact BF16 x BF16 -> F32 ones (exact_bf16_dot): on the H200,
# bit-exact on the CI slice (x64 off and on), ExecuTorch's and the zoo's int8 graphs, and batch 64
# 1.8-6x the int32 form's throughput (resnet_int8 2,244 -> 13,579 samples/s, 2026-11-26). The CPU
# keeps its fast int8 forms.


# TOSA_JAX_GPU_FORMS=1 lowers with the off-CPU forms for the CPU too, so that the CPU's tests and
# conformance runs judge their exactness against the reference model (what only a GPU can show is
# whether XLA's GPU backend compiles them right: scripts/gpu_check.sh). Part of the compile
# cache's key (tosa_jax.model).
GPU_FORMS_ENV = "TOSA_JAX_GPU_FORMS"


# The platform a trace is for, where its caller knows it (tosa_jax.Model, evaluate): then only
# that platform's form is traced. Else both are, and lowering picks one.
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("tosa_jax_lowering_for",
                                                                    default=None)


@contextmanager
def lowering_for(platform: str | None) -> Iterator[None]:
    """Trace for ``platform`` ("cpu", "cuda", "rocm"...) in this block. The caller keeps one
    jitted function per platform: JAX's trace cache does not know this choice."""
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)


def lowering_target() -> str | None:
    """The platform of the trace in progress, where ``lowering_for`` says it."""
    return _TARGET.get()


def on_cpu_else(cpu: Any, other: Any, *args: Any) -> Any:
    """``cpu(*args)`` when the program is compiled for XLA's CPU backend, ``other(*args)`` for
    any other (GPU) backend. Inside ``lowering_for`` only that platform's form is traced; else
    both are, and lowering keeps the target's (``lax.platform_dependent``: a CPU program holds
    nothing of ``other``; tracing both cost resnet_int8 +40-60 ms, mobilenetv2_int8 +60-200)."""
    if os.environ.get(GPU_FORMS_ENV, "") not in ("", "0"):
        return other(*args)
    target = _TARGET.get()
    if target is not None:
        return (cpu if target == "cpu" else other)(*args)
    return lax.platform_dependent(*args, cpu=cpu, default=other)


# cpu_dot's two rows for one from this many multiply-adds: a smaller product runs faster in
# XLA's own loop than through a YNNPACK call (cnn_int8's 16 x 10 classifier, batch 1:
# 0.065-0.068 -> 0.072-0.073 ms as two rows; lstm_int8's 32 x 512 and 128 x 512 products of each
# step not slower as two).
ROW_DOT_MIN_MACS = 1 << 14
# Float products of one row as two rows too, where the graph asks (``row_pairs``, set by the
# Model for the CPU): XLA CPU compiles each float product of one row into a kernel of its own
# (its tiled matrix-vector emitter), 10-20 ms of LLVM each (cnn_fp32's 16 x 10 classifier 19 ms
# of a 94 ms codegen; gru_fp32's seven products 11-13 ms each), where a product of two rows is a
# library call, YNNPACK's or Eigen's, with no code to generate. The call costs about half a
# microsecond more a product at run time, so only graphs with few such products take it
# (tosa_jax.model.ROW_PAIR_PRODUCTS).
_ROW_PAIRS: contextvars.ContextVar[bool] = contextvars.ContextVar("tosa_jax_row_pairs",
                                                                  default=False)
# cpu_dot's FP32 products of one row with a weight of at most this many elements (a small
# recurrent step's product, a small classifier) are multiplications and a sum over the
# contracted axis: a loop that XLA fuses with the row's consumers, where a product is a kernel
# of its own (8-14 ms of LLVM each) or, as two rows, a library call. gru_fp32's seven 16 x 48
# steps (AMD EPYC, 2026-11-28, two interleaved benchmark runs): XLA compile 144/121 -> 100/100
# ms, first result 201/198 -> 188/179 ms (IREE's 780), batch 1 0.0077 -> 0.009 ms (IREE's
# 0.029); cnn_fp32's 16 x 10 classifier within noise. A larger weight loses at run time
# (lstm_fp32's 128 x 512 steps: batch 1 0.094 -> 0.18 ms, evaluate 46,000 -> 7,000 samples/s).
# Every platform's trace takes this form (float products reach cpu_dot on all); GPUs unmeasured.
TINY_ROW_PRODUCT = 4096


@contextmanager
def row_pairs(on: bool = True) -> Iterator[None]:
    """Trace ``cpu_dot``'s float products of one row as products of two rows (see above)."""
    token = _ROW_PAIRS.set(on)
    try:
        yield
    finally:
        _ROW_PAIRS.reset(token)


def cpu_dot(a: Array, b: Array, dims: Any, acc: Any, precision: Any = None) -> Array:
    """``lax.dot_general(a, b, dims)`` into ``acc`` as XLA CPU runs it best. A product of 8-bit
    integers with one row (no batch dimensions, one lhs row: batch 1's classifier) of
    ROW_DOT_MIN_MACS or more is computed over two copies of the row, the first result kept:
    XLA CPU gives YNNPACK no product of one row, and its own loops widen the operands to int32
    first, a constant weight into a constant four times larger. mobilenetv2_int8's 1280 x 1000
    classifier, alone: 166 -> 73 us, its executable 7.05 -> 1.29 MB (Xeon, 2026-11-28). (Under
    vmap, evaluate's batches, the copy doubles that product's rows: 0.4% of mobilenetv2_int8's
    multiply-adds.) FP32 products of one row likewise inside ``row_pairs``, whatever their
    size (see ROW_DOT_MIN_MACS), but those of a weight of at most TINY_ROW_PRODUCT elements as
    multiplications and a sum. A batched product of 8-bit integers (attention's heads) takes
    its operands computed apart (``_batched_bytes``)."""
    (ca, _), (ba, _) = dims
    free = [d for d in range(np.ndim(a)) if d not in ca and d not in ba]
    one_row = not ba and free and math.prod(np.shape(a)[d] for d in free) == 1
    if (one_row and np.dtype(acc) == np.float32 and len(ca) == 1 and np.ndim(b) == 2
            and not dims[1][1] and math.prod(np.shape(b)) <= TINY_ROW_PRODUCT):
        # products and a sum over the contracted axis, in the loop of the row's consumers
        kb = dims[0][1][0]
        row = lax.convert_element_type(lax.reshape(a, (np.shape(b)[kb],)), acc)
        terms = lax.mul(lax.broadcast_in_dim(row, np.shape(b), (kb,)),
                        lax.convert_element_type(b, acc))
        return lax.reshape(lax.reduce_sum(terms, (kb,)),
                           (1,) * (np.ndim(a) - 1) + (np.shape(b)[1 - kb],))
    if one_row and (
            (np.dtype(acc) == np.float32 and _ROW_PAIRS.get())
            or (jnp.issubdtype(acc, jnp.integer)
                and all(np.dtype(v.dtype) in _BYTE_BOUND for v in (a, b))
                and math.prod(np.shape(b)) >= ROW_DOT_MIN_MACS)):
        # the row broadcast to two, not concatenated with itself: XLA fused the row's producers
        # into a concatenation once per copy (bert_tiny_fp32's classifier row: a kernel of 82
        # instructions, 23 ms of LLVM; broadcast, 8 ms)
        two = list(np.shape(a))
        two[free[0]] = 2
        y = lax.dot_general(lax.broadcast_in_dim(a, tuple(two), tuple(range(len(two)))), b, dims,
                            precision=precision, preferred_element_type=acc)
        return lax.slice_in_dim(y, 0, 1, axis=0)  # (no batch axes: the lhs's free axes lead)
    if ba and jnp.issubdtype(acc, jnp.integer) and _batched_bytes(a, b, dims):
        a, b = fusion_boundary(a), fusion_boundary(b)
    return lax.dot_general(a, b, dims, precision=precision, preferred_element_type=acc)


def _batched_bytes(a: Array, b: Array, dims: Any) -> bool:
    """Whether ``cpu_dot``'s batched product of ``a`` and ``b`` takes its operands through
    fusion_boundary: 8-bit integers whose product per batch element (head) is a matrix product
    (more than one row and column) of ROW_DOT_MIN_MACS or more, what YNNPACK takes and runs
    faster than XLA's own loop.

    XLA CPU gives YNNPACK a product only when its operands are in canonical layout. In a graph
    the heads' TRANSPOSE is folded into the product's dimensions (its lhs then not canonical),
    and XLA widens both operands to int32 for a loop of its own; computed apart, an operand
    reaches the product as it is. One product alone, a transpose [2, 128, 64] x [2, 64, 128]:
    141 -> 54-58 us (61-63 as one product per head). bert_tiny_int8's four attention products
    (AMD EPYC, 2026-11-28; 91 us each in XLA's loop), two benchmark runs each, the same hour:
    batch 1 1.11/1.02 -> 0.80/0.78 ms, batch 64 963/1,184 -> 1,722/1,765 samples/s, evaluate
    1,522/1,497 -> 2,012/1,985, bit-exact."""
    if not all(np.dtype(v.dtype) in _BYTE_BOUND for v in (a, b)):
        return False
    (ca, cb), (ba, bb) = dims
    rows = math.prod(d for i, d in enumerate(np.shape(a)) if i not in ca and i not in ba)
    cols = math.prod(d for i, d in enumerate(np.shape(b)) if i not in cb and i not in bb)
    depth = math.prod(np.shape(a)[i] for i in ca)
    return rows > 1 and cols > 1 and rows * depth * cols >= ROW_DOT_MIN_MACS


def int_dot_general(a: Array, b: Array, dims: Any) -> Array:
    """``lax.dot_general`` of integer operands, summed as int32 modulo 2**32 (exact wherever
    TOSA's int32 accumulator may not overflow): int8 operands as they are on the CPU
    (``cpu_dot``), ``offcpu_int_dot`` elsewhere."""
    def native(a: Array, b: Array) -> Array:
        return cpu_dot(a, b, dims, I32)

    if np.dtype(a.dtype) == np.int32 and np.dtype(b.dtype) == np.int32:
        return native(a, b)
    return on_cpu_else(native, lambda a, b: offcpu_int_dot(a, b, dims), a, b)


def offcpu_int_dot(a: Array, b: Array, dims: Any) -> Array:
    """The int32 ``dot_general`` of integer operands off the CPU: 8-bit operands as an exact
    BF16 product (``exact_bf16_dot``, the GPU's tensor cores), wider ones as int32 x int32."""
    if np.dtype(a.dtype) in _BYTE_BOUND and np.dtype(b.dtype) in _BYTE_BOUND:
        return exact_bf16_dot(a, b, dims)
    return lax.dot_general(as_i32(a), as_i32(b), dims, preferred_element_type=I32)


# Largest |value| of 8-bit integer types: exact in BF16, whose 8 significant bits hold every
# integer up to 256.
_BYTE_BOUND = {np.dtype(np.int8): 128, np.dtype(np.uint8): 255}
_F32_EXACT = 1 << 24  # every integer of magnitude up to 2**24 is an f32


def exact_bf16_dot(a: Array, b: Array, dims: Any) -> Array:
    """The int32 ``dot_general`` of 8-bit integer operands as a BF16 x BF16 -> F32 product: the
    operands are exact in BF16, each product is exact, and every partial sum of a contraction of
    K terms is at most K * max|a| * max|b| < 2**24 in magnitude, so exact in F32 whatever the
    order of summation (tensor cores, split-K). Longer contractions are cut into chunks that
    obey the bound along their longest contracting dimension (zero-padded to a whole number of
    chunks), each chunk an extra batch dimension, and the chunks' sums are added in int32
    (modulo 2**32, as the int32 accumulator). Off the CPU this runs on the GPU's tensor cores,
    where an int32 product does not (and an int8 one summed wrong, see above)."""
    (ca, cb), (ba, bb) = ((tuple(d) for d in dims[0]), (tuple(d) for d in dims[1]))
    bound = _BYTE_BOUND[np.dtype(a.dtype)] * _BYTE_BOUND[np.dtype(b.dtype)]
    limit = (_F32_EXACT - 1) // bound  # terms per chunk: partial sums below 2**24
    k = int(np.prod([a.shape[d] for d in ca], dtype=np.int64))
    if k <= limit:
        y = lax.dot_general(lax.convert_element_type(a, jnp.bfloat16),
                            lax.convert_element_type(b, jnp.bfloat16), ((ca, cb), (ba, bb)),
                            preferred_element_type=jnp.float32)
        return lax.convert_element_type(y, I32)
    i = max(range(len(ca)), key=lambda j: a.shape[ca[j]])
    n = a.shape[ca[i]]
    per_chunk = limit // (k // n)  # elements of that dimension a chunk may hold
    if per_chunk < 1:  # the other contracting dimensions alone are too long (not in TOSA's)
        return lax.dot_general(as_i32(a), as_i32(b), dims, preferred_element_type=I32)
    a = lax.convert_element_type(a, jnp.bfloat16)
    b = lax.convert_element_type(b, jnp.bfloat16)
    chunks = -(-n // per_chunk)
    # a divisor of n close above the fewest chunks avoids padding (256 channels: 4 x 64)
    chunks = next((m for m in range(chunks, 2 * chunks + 1) if n % m == 0), chunks)
    size = -(-n // chunks)

    def split(t: Array, axis: int, contract: tuple[int, ...], batch: tuple[int, ...]) -> Any:
        if chunks * size != n:
            pad = [(0, 0, 0)] * t.ndim
            pad[axis] = (0, chunks * size - n, 0)
            t = lax.pad(t, np.zeros((), t.dtype), pad)
        t = lax.reshape(t, (*t.shape[:axis], chunks, size, *t.shape[axis + 1:]))

        def moved(d: int) -> int:
            return d + (d >= axis)  # dimensions after the split one move by one
        contract = tuple(axis + 1 if d == axis else moved(d) for d in contract)
        return t, contract, (axis, *(moved(d) for d in batch))

    a, ca2, ba2 = split(a, ca[i], ca, ba)
    b, cb2, bb2 = split(b, cb[i], cb, bb)
    y = lax.dot_general(a, b, ((ca2, cb2), (ba2, bb2)), preferred_element_type=jnp.float32)
    # [chunks, batch..., free...]: each chunk's sum is exact; their sum modulo 2**32
    return lax.reduce(lax.convert_element_type(y, I32), np.int32(0), lax.add, (0,))


# ----------------------------------------------------------------------------- run-time REQUIREs
# The REQUIREs that depend on tensor values (an int32 ADD that overflows, a GATHER index out of
# range, POW of a negative base): the spec calls such a graph's result unpredictable, and the
# reference model's binding returns TOSA_UNPREDICTABLE. Checked only where asked for
# (``load(..., check_requires=True)``, ``reference_model.run``): while the executor traces an
# operator it collects what the lowering reports through ``require`` and carries the first
# violation through the graph as one more value (tosa_jax.executor). The rules are those the
# reference model of tosa-tools 2026.8 checks while running, each probed against it in
# tests/unit/test_requires.py; like it, the accumulators of convolutions and MATMUL and their
# bias additions are not checked (they wrap).
# The rule texts live in tosa_jax.violations (REQUIRE_RULES: no JAX, a flag is decoded without it).

_REQUIRES: contextvars.ContextVar[list[tuple[str, Any]] | None] = contextvars.ContextVar(
    "tosa_jax_requires", default=None)


@contextmanager
def collecting_requires(sink: list[tuple[str, Any]] | None) -> Iterator[None]:
    """Collect the ``require`` reports of the lowerings traced in this block into ``sink``
    (None: none are computed)."""
    token = _REQUIRES.set(sink)
    try:
        yield
    finally:
        _REQUIRES.reset(token)


def requiring() -> bool:
    """True while REQUIREs are collected: only then does a lowering compute them."""
    return _REQUIRES.get() is not None


def require(rule: str, violated: Array) -> None:
    """REQUIRE ``rule`` fails wherever ``violated`` is true. A known value (constants) is
    decided now, with numpy; a traced one becomes one boolean of the program."""
    sink = _REQUIRES.get()
    if sink is None:
        return
    if rule not in REQUIRE_RULES:
        raise KeyError(rule)
    sink.append((rule, bool(np.any(violated)) if is_host(violated) else jnp.any(violated)))


def add_overflows(a: Array, b: Array, sub: bool = False) -> Array:
    """Where the int32 a + b (a - b) leaves the int32 range: exact in int64 for known
    values, from the signs of the wrapped result for traced ones."""
    if is_host(a, b):
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        r = a - b if sub else a + b
        return (r < -(1 << 31)) | (r > (1 << 31) - 1)
    a, b = as_i32(a), as_i32(b)
    r = a - b if sub else a + b
    # a sum overflows when both operands have the sign its result lacks (a difference, when
    # a and b differ in sign and the result's sign is b's)
    return ((a ^ r) & ((a ^ b) if sub else (b ^ r))) < 0


def wide_add_overflows(a: Wide, b: Wide, sub: bool = False) -> Array:
    """add_overflows for INT64 (EXT-INT64) pairs of words: the signs of the high words of the
    operands and of the wrapped result."""
    r = wide_sub(a, b) if sub else wide_add(a, b)
    return ((a.hi ^ r.hi) & ((a.hi ^ b.hi) if sub else (b.hi ^ r.hi))) < 0


def wide_partial_sum_overflows(x: Wide, axis: int) -> Array:
    """partial_sum_overflows for INT64 pairs of words: the running sums by a scan of wide_add
    (addition modulo 2**64 is associative), each checked against the one before it."""
    p = lax.associative_scan(wide_add, x, axis=axis)
    q = wide_sub(p, x)  # the running sum before each element
    return ((q.hi ^ p.hi) & (x.hi ^ p.hi)) < 0


def wide_is_min(a: Wide) -> Array:
    """Where an INT64 pair holds INT64_MIN, the value whose negation overflows."""
    return (a.hi == np.int32(-(1 << 31))) & (a.lo == 0)


def partial_sum_overflows(x: Array, axis: int) -> Array:
    """Where a partial sum of int32 values along ``axis``, added in index order from 0 as
    REDUCE_SUM's apply_add_s does, leaves the int32 range. Up to the first overflow the
    wrapped running sum is exact, so the first one shows in the signs, as in add_overflows."""
    if is_host(x):
        p = np.cumsum(np.asarray(x, np.int64), axis=axis)
        return (p < -(1 << 31)) | (p > (1 << 31) - 1)
    x = as_i32(x)
    p = jnp.cumsum(x, axis=axis, dtype=I32)
    return (((p - x) ^ p) & (x ^ p)) < 0


# ----------------------------------------------------------------------------- lax operands
# The integer hot paths (RESCALE, clips, the Wide products of constants) bind lax primitives:
# each jax.numpy function or operator on a traced value is a jitted wrapper whose cache misses
# for every new shape (about 0.3 ms of tracing a call), where a lax primitive binds one
# equation (about 20 us). Their constants stay numpy until they become operands here.


def filled(like: Array, value: Any) -> Array:
    """An array of ``like``'s shape and dtype holding ``value`` everywhere: one broadcast_in_dim
    of a numpy scalar. (lax.full_like, the same program, traces about 0.25 ms a call through its
    sharding logic: a float CLAMP's two bounds took 0.85 ms where the operator now takes 0.33.)"""
    return lax.broadcast_in_dim(np.asarray(value, like.dtype), np.shape(like), ())


def broadcast_to(x: Array, shape: tuple[int, ...]) -> Array:
    """numpy's broadcast_to of a traced value as one broadcast_in_dim (jax.numpy's traces about
    0.1 ms more a call); ``x`` itself where it has the shape, host values by jax.numpy's."""
    shape = tuple(shape)
    if np.shape(x) == shape:
        return x
    if is_host(x):
        return jnp.broadcast_to(x, shape)
    return lax.broadcast_in_dim(x, shape, tuple(range(len(shape) - np.ndim(x), len(shape))))


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes of two shapes, the common case (``b`` broadcasts to ``a``: a scalar,
    a per-channel constant) without numpy's machinery, which costs ~10 us a call in tracing."""
    if a == b or not b:
        return a
    if len(b) <= len(a) and all(y == 1 or y == x for x, y in zip(a[len(a) - len(b):], b)):
        return a
    return np.broadcast_shapes(a, b)


def lax_const(c: Any, like: Array) -> Array:
    """A host constant as an operand of a lax operation with ``like`` (``c`` broadcasts to
    ``like``'s shape as in numpy, in ``like``'s dtype): a scalar literal when every element is
    the same, else one broadcast_in_dim."""
    c = np.asarray(c)
    if c.size and (c.ndim == 0 or (c == c.flat[0]).all()):
        return np.asarray(c.flat[0]).astype(like.dtype)
    shape = np.shape(like)
    assert broadcast_shape(shape, c.shape) == shape, (c.shape, shape)
    c = c.reshape(c.shape[next((i for i, n in enumerate(c.shape) if n != 1), c.ndim):])
    return lax.broadcast_in_dim(c.astype(like.dtype), shape,
                                tuple(range(len(shape) - c.ndim, len(shape))))


# The constant right operand that leaves an integer operand as it is, by operation: such an
# operation is not traced (a zero bias, a zero point of 0: 17 of mobilenetv2_int8's 2,187
# equations, 44 of unet_int8's). Integers only: a float -0.0 + 0.0 is +0.0.
_IDENTITY = {lax.add: 0, lax.sub: 0, lax.bitwise_or: 0, lax.bitwise_xor: 0, lax.shift_left: 0,
             lax.shift_right_arithmetic: 0, lax.shift_right_logical: 0, lax.mul: 1}


def lx(f: Any, a: Array, b: Any) -> Array:
    """The lax binary operation ``f(a, b)`` of a traced ``a`` and a host constant (or traced
    value, or scalar) ``b``, numpy's broadcasting applied; ``a`` itself where ``b`` is the
    operation's identity on integers (_IDENTITY)."""
    if not isinstance(b, jax.Array):
        b = np.asarray(b)
        if b.ndim == 0:  # the common case, kept short: tracing pays this per operation
            if _is_identity(f, a, b):
                return a
            return f(a, b.astype(a.dtype))
    shape = broadcast_shape(np.shape(a), np.shape(b))
    if isinstance(b, jax.Array):  # traced (a rolled loop's per-step scale): broadcast both
        return f(*(broadcast_to(x, shape) for x in (a, b)))
    if shape != np.shape(a):  # a constant wider than ``a``: broadcast ``a`` first
        a = broadcast_to(a, shape)
    c = lax_const(b, a)
    return a if isinstance(c, np.ndarray) and _is_identity(f, a, c) else f(a, c)


def _is_identity(f: Any, a: Any, b: np.ndarray) -> bool:
    """``b`` (a host scalar) is the identity of ``f`` on ``a``'s integers (_IDENTITY)."""
    one = _IDENTITY.get(f)
    return one is not None and b == one and np.dtype(a.dtype).kind in "iu"


def lax_binary(f: Any, a: Any, b: Any) -> Array | None:
    """The lax binary operation ``f(a, b)`` of two operands of one element type (either may be
    a host constant), numpy's broadcasting applied; None for operands of different types (the
    caller's jax.numpy form then promotes them)."""
    if np.dtype(getattr(a, "dtype", type(a))) != np.dtype(getattr(b, "dtype", type(b))):
        return None
    return lx(f, a, b)


# XLA's CPU compiler rewrites a reduction of more than 32 elements along a dimension into a
# reduce_window of 32 and a reduction of what that leaves (its TreeReductionRewriter; without
# YNNPACK's reduce fusions, which the float convolutional graphs' options leave out) and runs a
# max reduce_window element by element. The order-free kinds (max, min, or, and) combine the
# axis's blocks of 32 elementwise first, a chain over slices that XLA vectorises and fuses with
# the reduction of the 32 that remain (one kernel; not a reduction over the blocks, which XLA
# would merge with the other into one of the whole axis): a softmax's maximum over 128 keys
# with its NaN mask, [1, 2, 128, 128] FP32 (bert_tiny's), 42 us as XLA's reduce_window, 23.5 as
# the blocks' reductions then a chain (three kernels with the mask's), 9 as the chain then one
# reduction (min of 2,000 calls, bert_tiny_fp32's XLA options; Xeon, 2026-11-28; 17 either way
# with YNNPACK's reduce fusions); bert_tiny_fp32 batch 1, median of 300 calls, three
# interleaved rounds: 1.66/1.76/1.72 -> 1.50/1.54/1.58 ms, outputs bit-identical. Float sums
# too (REDUCE_SUM's float results may take any order of the sum: its compliance is a dot
# product's bound), but each block is summed, the blocks' sums computed once (fusion_boundary
# on their bits) and summed by a second reduction: a chain over the blocks is
# copied by XLA, up to 31 additions, into every element of the fusion that reads the sum (a
# group norm's normalization, unet_fp32's, 35 -> 106 us each), and with a boundary after it
# still cost 60 equations to trace a sum (unet_fp32 trace + lower 70 -> 93 ms; 73 this way).
# unet_fp32's 22 group-norm reduce_windows (277 us of a 3.0 ms call) are gone: batch 1
# 2.76-2.81 -> 2.53-2.67 ms (medians, three interleaved rounds), evaluate 714-757 -> 802-822
# samples/s; the other float graphs within noise.
REDUCE_BLOCK = 32
_BLOCKED = {"max": (lax.reduce_max, lax.max), "min": (lax.reduce_min, lax.min),
            "or": (lax.reduce_or, lax.bitwise_or), "and": (lax.reduce_and, lax.bitwise_and),
            "sum": (lax.reduce_sum, lax.add)}


def reduce_identity(kind: str, dtype: Any) -> np.ndarray:
    """The value that leaves the reduction ``kind`` (max, min, or, and, sum) unchanged, in
    ``dtype`` (for a float type without infinities, FP8E4M3: its extreme finite values)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(kind in ("min", "and"))
    if kind == "sum":
        return np.zeros((), dtype)
    if kind in ("or", "and"):
        return np.asarray(0 if kind == "or" else -1).astype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        inf = np.asarray(np.inf, np.float32).astype(dtype)
        top = jnp.finfo(dtype).max if np.isnan(inf) else inf
        return np.asarray(top if kind == "min" else -top, dtype)
    info = np.iinfo(dtype)
    return np.asarray(info.max if kind == "min" else info.min, dtype)


def blocked_reduce(x: Any, kind: str, axis: int) -> Array:
    """The reduction ``kind`` (max, min, or, and: order-free; sum) of ``x`` along ``axis``,
    which it keeps (size 1), in blocks of REDUCE_BLOCK elements (the last one padded with the
    identity; see above): the order-free kinds combine up to REDUCE_BLOCK blocks elementwise,
    then reduce what remains; sums reduce each block, then the blocks' results; an axis of more
    blocks reduces each block first, then its blocks the same way. Floats: callers keep NaN out
    of max and min (XLA's may drop it)."""
    x = jnp.asarray(x)
    axis %= x.ndim
    reduce, combine = _BLOCKED[kind]
    n = x.shape[axis]
    if n <= REDUCE_BLOCK:
        return lax.expand_dims(reduce(x, (axis,)), (axis,))
    blocks = -(-n // REDUCE_BLOCK)
    if blocks * REDUCE_BLOCK != n:
        config = [(0, 0, 0)] * x.ndim
        config[axis] = (0, blocks * REDUCE_BLOCK - n, 0)
        x = lax.pad(x, reduce_identity(kind, x.dtype), config)
    if kind != "sum" and blocks <= REDUCE_BLOCK:  # the blocks combined first (see above)
        acc = lax.slice_in_dim(x, 0, REDUCE_BLOCK, axis=axis)
        for i in range(1, blocks):
            acc = combine(acc, lax.slice_in_dim(x, i * REDUCE_BLOCK, (i + 1) * REDUCE_BLOCK,
                                                axis=axis))
        return lax.expand_dims(reduce(acc, (axis,)), (axis,))
    x = reduce(lax.reshape(x, (*x.shape[:axis], blocks, REDUCE_BLOCK, *x.shape[axis + 1:])),
               (axis + 1,))
    if blocks > REDUCE_BLOCK:
        return blocked_reduce(x, kind, axis)
    if kind == "sum" and jnp.issubdtype(x.dtype, jnp.floating):
        # the blocks' sums computed once (a boundary on their bits), then summed by a second
        # reduction, which XLA cannot merge with the first across the boundary; the pair's
        # OR: the sums come from a reduction, no chain of producers to vectorize, and XLA
        # CPU's program keeps no reduce_window (test_reduction)
        bits = jnp.dtype(f"int{8 * x.dtype.itemsize}")
        x = lax.bitcast_convert_type(
            fusion_boundary(lax.bitcast_convert_type(x, bits), own_kernel=False), x.dtype)
        return lax.expand_dims(reduce(x, (axis,)), (axis,))
    acc = lax.slice_in_dim(x, 0, 1, axis=axis)
    for i in range(1, blocks):
        acc = combine(acc, lax.slice_in_dim(x, i, i + 1, axis=axis))
    return acc


def lax_sum(x: Any, axis: int, dtype: Any) -> Array:
    """``jnp.sum(x, axis, keepdims=True, dtype=dtype)`` as the lax primitives it binds: the
    conversion, the reduction and the kept axis (see above: jax.numpy's jitted wrapper costs a
    trace per new shape)."""
    x = jnp.asarray(x)
    axis %= x.ndim
    if x.dtype != dtype:
        x = lax.convert_element_type(x, dtype)
    return lax.expand_dims(lax.reduce_sum(x, (axis,)), (axis,))


def same_aval(a: Any, b: Any) -> bool:
    """Both JAX arrays of one shape and dtype: an elementwise lax operation applies as is."""
    return (isinstance(a, jax.Array) and isinstance(b, jax.Array) and a.shape == b.shape
            and a.dtype == b.dtype)


def apply_clip(value: Array, lo: int, hi: int) -> Array:
    """apply_clip_s on integer values with static bounds."""
    value = jnp.asarray(value)
    return lax.clamp(np.asarray(lo, value.dtype), value, np.asarray(hi, value.dtype))


def saturate_cast(value: Array, dtype: str) -> Array:
    """Clip an int32 value to the range of ``dtype`` and cast (the usual RESCALE/pool epilogue)."""
    lo, hi = INT_RANGES[dtype]
    if isinstance(value, np.ndarray) and dtype in ("INT4", "INT8", "INT16", "INT32"):
        return np.clip(value, lo, hi).astype(np.dtype(DEVICE_DTYPES[dtype]))  # a constant
    value = jnp.asarray(value)
    if dtype == "INT32" and value.dtype == np.int32:
        return value  # nothing to clip
    return lax.convert_element_type(apply_clip(value, lo, hi), DEVICE_DTYPES[dtype])


def wrap_cast(value: Array, dtype: str) -> Array:
    """static_cast to a narrower integer type: keep the low bits, two's complement."""
    if dtype == "INT4":
        return ((as_i32(value) << 28) >> 28).astype(jnp.int8)
    return jnp.asarray(value).astype(DEVICE_DTYPES[dtype])


# ----------------------------------------------------------------------------- 64-bit pairs


# A graph with INT48 (INT64) or block-scaled (TOSA 1.1) inputs or outputs exported by
# jax.export (model.fn) serializes them as Wide or BlockScaled pairs (they live with the IR,
# which knows no JAX: registered here, where JAX is loaded)
jax.export.register_namedtuple_serialization(Wide, serialized_name="tosa_jax.Wide")
jax.export.register_namedtuple_serialization(BlockScaled, serialized_name="tosa_jax.BlockScaled")


def wide(x: Array) -> Wide:
    """Sign-extend an int32 (or narrower) value to 64 bits."""
    x = as_i32(x)
    return Wide(x >> 31, bitcast_u32(x))


def wide_add(a: Wide, b: Wide) -> Wide:
    lo = a.lo + b.lo
    carry = (lo < a.lo).astype(I32)
    return Wide(a.hi + b.hi + carry, lo)


def wide_neg(a: Wide) -> Wide:
    return wide_add(Wide(~a.hi, ~a.lo), Wide(jnp.zeros_like(a.hi), jnp.ones_like(a.lo)))


def wide_sub(a: Wide, b: Wide) -> Wide:
    return wide_add(a, wide_neg(b))


def _mul_u32(a: Array, b: Array) -> tuple[Array, Array]:
    """Full unsigned 32x32 -> 64 product as (hi, lo) uint32 words, from 16-bit halves."""
    a0, a1 = a & 0xFFFF, a >> 16
    b0, b1 = b & 0xFFFF, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = p01 + p10
    mid_carry = (mid < p01).astype(U32)
    lo = p00 + (mid << 16)
    lo_carry = (lo < p00).astype(U32)
    hi = p11 + (mid >> 16) + (mid_carry << 16) + lo_carry
    return hi, lo


def wide_mul32(a: Array, b: Array) -> Wide:
    """Exact signed int32 x int32 product."""
    if is_host(b) and not is_host(a):  # a constant factor stays a (broadcasting) constant
        a, b = as_i32(a), np.asarray(b).astype(np.int32)
        au, bu = bitcast_u32(a), b.view(np.uint32)
    else:
        a, b = jnp.broadcast_arrays(as_i32(a), as_i32(b))
        au, bu = bitcast_u32(a), bitcast_u32(b)
    hi, lo = _mul_u32(au, bu)
    # Two's-complement correction of the unsigned product: subtract b<<32 if a<0, a<<32 if b<0.
    # (typed zeros: a Python 0 is an int64 constant under jax_enable_x64)
    hi = hi - jnp.where(a < 0, bu, U32(0)) - jnp.where(b < 0, au, U32(0))
    return Wide(bitcast_i32(hi), lo)


def wide_mul(a: Wide, m: Array) -> Wide:
    """64-bit value times a non-negative int32 multiplier (modulo 2**64)."""
    m = as_i32(m)
    hi, lo = _mul_u32(jnp.broadcast_to(a.lo, jnp.broadcast_shapes(a.lo.shape, jnp.shape(m))),
                      bitcast_u32(m))
    return Wide(bitcast_i32(hi) + a.hi * m, lo)


def wide_shl(a: Wide, k: int) -> Wide:
    """Shift left by a static amount 0 <= k < 32."""
    if k == 0:
        return a
    hi = (a.hi << k) | bitcast_i32(a.lo >> (32 - k))
    return Wide(hi, a.lo << k)


def wide_sra(a: Wide, s: Array) -> Wide:
    """Arithmetic shift right by 0 <= s <= 63 (static or per element)."""
    if is_host(s) and not is_host(a.hi, a.lo):  # shift amounts known now: numpy constants
        s = np.asarray(s).astype(np.int32)
        big = s >= 32
        s_small = np.where(big, 0, s).astype(np.int32)
        s_big = np.where(big, s - 32, 0).astype(np.int32)
    else:
        s = jnp.broadcast_to(as_i32(s), a.hi.shape) if jnp.ndim(s) else as_i32(s)
        big = s >= 32
        s_small = jnp.where(big, 0, s)
        s_big = jnp.where(big, s - 32, 0)
    hi_u = bitcast_u32(a.hi)
    # (hi << 1) << (31 - s) is hi << (32 - s) without a 32-bit shift when s == 0.
    lo_small = (a.lo >> s_small.astype(U32)) | ((hi_u << 1) << (31 - s_small).astype(U32))
    hi_small = a.hi >> s_small
    lo_big = bitcast_u32(a.hi >> s_big)
    hi_big = a.hi >> 31
    return Wide(jnp.where(big, hi_big, hi_small), jnp.where(big, lo_big, lo_small))


def wide_low32(a: Wide) -> Array:
    """static_cast<int32_t>: the low 32 bits."""
    return bitcast_i32(a.lo)


def wide_saturate32(a: Wide) -> Array:
    """Clip a 64-bit value to the int32 range."""
    low = bitcast_i32(a.lo)
    fits = a.hi == (low >> 31)
    clipped = jnp.where(a.hi < 0, jnp.int32(-(1 << 31)), jnp.int32((1 << 31) - 1))
    return jnp.where(fits, low, clipped)


def wide_select(c: Array, a: Wide, b: Wide) -> Wide:
    return Wide(jnp.where(c, a.hi, b.hi), jnp.where(c, a.lo, b.lo))


def wide_sum32(x: Array, axis: int) -> Wide:
    """Exact 64-bit sum of int32 values along ``axis`` (static), from int32 reductions.

    Each value splits into a signed high and an unsigned low 16-bit half; up to 2**15 halves sum
    exactly in int32, longer axes are summed in groups of 2**15 and the groups added as Wide.
    """
    x = as_i32(x)
    axis = axis % x.ndim
    n = x.shape[axis]
    total: Wide | None = None
    for start in range(0, max(n, 1), 1 << 15):
        part = lax.slice_in_dim(x, start, min(start + (1 << 15), n), axis=axis)
        lo = jnp.sum(part & 0xFFFF, axis=axis, dtype=I32)
        hi = jnp.sum(part >> 16, axis=axis, dtype=I32)
        s = wide_add(wide_shl(wide(hi), 16), wide(lo))
        total = s if total is None else wide_add(total, s)
    assert total is not None
    return total


def _pow2(k: Array) -> Wide:
    """1 << k for 0 <= k <= 62, as a Wide."""
    k = as_i32(k)
    big = k >= 32
    lo = jnp.where(big, 0, jnp.left_shift(jnp.uint32(1), jnp.where(big, 0, k).astype(U32)))
    hi = jnp.where(big, jnp.left_shift(1, jnp.where(big, k - 32, 0)), 0)
    return Wide(as_i32(hi), jnp.asarray(lo, U32))


# ----------------------------------------------------------------------------- scaling


def apply_scale_32(value: Array, multiplier: Array, shift: Array,
                   double_round: bool = False, value_bits: int = 32,
                   value_range: tuple[int, int] | None = None,
                   known: tuple[np.ndarray, np.ndarray] | None = None,
                   out_zp: int = 0) -> Array:
    """apply_scale_32: (value * multiplier + round) >> shift, exactly, as int32; plus
    ``out_zp`` (RESCALE's output zero point, apply_add_s: its REQUIRE keeps the sum in int32).

    ``multiplier`` and ``shift`` broadcast against ``value`` (per-channel: along the last axis).
    ``value_bits``: a bound the caller knows, |value| < 2**(value_bits - 1) (RESCALE of an
    8-bit input: 10), or ``value_range``: lo <= value <= hi (RESCALE of an 8- or 16-bit input
    less a constant zero point, or of an int32 value whose range tosa_jax.ranges proved);
    either allows a shorter exact form where it cannot overflow.
    ``known``: for a traced ``multiplier`` and ``shift``, every value they can take (one step
    of a rolled loop: the scales of every step, stacked); the short forms that hold for each of
    them apply.
    The short forms with constant scales add ``out_zp`` with their round, before their last
    shift, where the sum provably stays in int32: (X + zp 2**k) >> k = (X >> k) + zp, one
    operation fewer (_zp_term).
    """
    if is_host(value, multiplier, shift):
        host = _apply_scale_32_host(value, multiplier, shift, double_round)
        if host is not None:
            return (host.astype(np.int64) + out_zp).astype(np.int32)
    value = as_i32(value)
    scales = _const_scales(np.shape(value), multiplier, shift)
    if scales is not None:
        shifted = _scale_32_pow2(value, *scales, double_round)
        if shifted is not None:
            return lx(lax.add, shifted, np.int32(out_zp))
    if value_range is None and value_bits < 32:
        value_range = (1 - (1 << (value_bits - 1)), (1 << (value_bits - 1)) - 1)
    if scales is not None:
        wide = _scale_32_wide(value, multiplier, shift, *scales, double_round, value_range,
                              out_zp)
        if wide is not None:
            return wide
    return _apply_scale_32_forms(value, multiplier, shift, double_round, value_range, known,
                                 out_zp)


def _const_scales(shape: tuple[int, ...], multiplier: Any, shift: Any
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """Constant scales within apply_scale_32's REQUIREs (0 <= multiplier < 2**31,
    2 <= shift <= 62) that broadcast to a value of ``shape``, as int64 arrays; else None
    (traced scales, or a graph that breaks the REQUIREs: the 32-bit forms)."""
    if not is_host(multiplier, shift):
        return None
    m = np.asarray(multiplier).astype(np.int64)
    s = np.asarray(shift).astype(np.int64)
    if (not m.size or not s.size or m.min() < 0 or m.max() >= 1 << 31 or s.min() < 2
            or s.max() > 62 or broadcast_shape(broadcast_shape(shape, m.shape), s.shape) != shape):
        return None
    return m, s


def _scale_32_pow2(value: Array, m: np.ndarray, s: np.ndarray,
                   double_round: bool) -> Array | None:
    """apply_scale_32 of a traced int32 ``value`` by constant multipliers ``m`` that are powers
    of two, 2**k (shifts ``s``; ``_const_scales``), as int32 shifts, exact for every int32 value;
    else None. Half of the RESCALEs of the integer networks here are such (an int8 operand
    widened to int32 before an ADD, SUB or MUL: multiplier 2**30, shift 10-20), where the
    general forms multiply in 64 bits.

    k >= shift: (v 2**k + 2**(shift - 1)) >> shift = v 2**(k - shift), the round below the
    shift dropped, and static_cast<int32_t> keeps its low 32 bits: v << (k - shift) in int32.
    k < shift, t = shift - k <= 31: the same sum divided by 2**k is v + 2**(t - 1) over 2**t,
    rounded down: (v >> t) + bit t - 1 of v, with no sum that can overflow. DOUBLE_ROUND
    changes the round only for shifts above 31, which are left to the general forms; so are
    channels that mix the two cases."""
    if m.min() <= 0 or (m & (m - 1)).any():
        return None
    k = np.frexp(m.astype(np.float64))[1].astype(np.int64) - 1  # log2, exact below 2**53
    if (s <= k).all():
        return lx(lax.shift_left, value, _one_or_all(k - s).astype(np.int32))
    t = s - k
    if (t > 0).all() and t.max() <= 31 and not (double_round and s.max() > 31):
        t = _one_or_all(t).astype(np.int32)
        half = lx(lax.bitwise_and, lx(lax.shift_right_arithmetic, value, t - 1), np.int32(1))
        return lax.add(lx(lax.shift_right_arithmetic, value, t), half)
    return None


def _apply_scale_32_forms(value: Array, multiplier: Array, shift: Array, double_round: bool,
                          value_range: tuple[int, int] | None = None,
                          known: tuple[np.ndarray, np.ndarray] | None = None,
                          out_zp: int = 0) -> Array:
    """apply_scale_32 of a traced int32 ``value`` in 32-bit operations (apply_scale_32's
    arguments): the exact short forms its scales and the value's range allow, else the
    64-bit form of Wide pairs."""
    fixed = is_host(multiplier, shift)  # constant scales: short exact int32 forms
    plan = (multiplier, shift) if fixed else known  # the values the forms must hold for
    if plan is not None and value_range is not None:
        narrow = _scale_32_narrow(value, multiplier, shift, double_round, value_range, plan,
                                  out_zp)
        if narrow is not None:
            return narrow
        pieces = _pieces_plan(*plan, double_round, value_range)
        common = _common_shift(multiplier, shift) if fixed and not double_round else None
        if common is not None:  # no more pieces for one shift: its round and shift scalars
            most = len(pieces[0]) - 1 if pieces else 4
            one = _pieces_plan(*common, False, value_range, most)
            if one is not None:
                return _scale_32_pieces(value, *common, False, one[0], None, one[1], out_zp)
        if pieces is not None:
            return _scale_32_pieces(value, multiplier, shift, double_round, pieces[0], plan,
                                    pieces[1], out_zp)
    if plan is not None and not double_round:
        split = _split_plan(*plan, value_range or INT_RANGES["INT32"])
        if split is not None:
            return _scale_32_split(value, multiplier, shift, split[0], split[1], out_zp)
    if plan is not None:
        fast = _scale_32_const(value, multiplier, shift, double_round, plan)
        if fast is not None:
            return lx(lax.add, fast, np.int32(out_zp))
    if is_host(multiplier, shift) and 0 <= np.min(shift) and np.max(shift) <= 62:
        # constant scales: the round term from numpy
        shift = np.asarray(shift).astype(np.int32)
        multiplier = np.asarray(multiplier).astype(np.int32)
        rnd = wide_from_numpy(_pow2_host(shift.astype(np.int64) - 1))
    else:
        shift = as_i32(shift)
        rnd = _pow2(shift - 1)
    product = wide_mul32(value, multiplier)
    if double_round:
        adjust = jnp.where(shift > 31, jnp.where(value >= 0, 1 << 30, -(1 << 30)), 0)
        rnd = wide_add(Wide(jnp.broadcast_to(rnd.hi, value.shape),
                            jnp.broadcast_to(rnd.lo, value.shape)), wide(adjust))
    return lx(lax.add, wide_low32(wide_sra(wide_add(product, rnd), shift)), np.int32(out_zp))


# ------------------------------------------------------------------------- apply_scale_32 in int64
# XLA CPU has 64-bit integer vectors, so on the CPU apply_scale_32 with constant scales is the
# spec's own arithmetic: (int64(value) * multiplier + round) >> shift, as int32. It is one
# primitive (``scale_32_p``), int32 in and int32 out, lowered for the CPU to five int64
# operations and their constants: the int64 values exist only in the lowered module, never in
# a jaxpr, so jax_enable_x64 changes nothing. The short 32-bit forms cost 13 traced equations
# and about 27 optimized HLO instructions a RESCALE of an int8 convolution's accumulator (each
# instruction is paid again when XLA rebuilds a cached executable). Any other platform lowers
# the same primitive to those 32-bit forms (_apply_scale_32_forms), as every platform did before.
# Exact for every int32 value: |value * multiplier| < 2**62 and round <= 2**61 + 2**30 (taken
# only for 0 <= multiplier < 2**31 and 2 <= shift <= 62, apply_scale_32's REQUIREs; a graph
# that breaks them keeps the 32-bit forms).
class HostConst:
    """A numpy constant as a hashable primitive parameter."""

    __slots__ = ("array", "_key")

    def __init__(self, array: Any) -> None:
        a = np.array(array)
        a.flags.writeable = False
        self.array = a
        self._key = (a.shape, a.dtype.str, a.tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostConst) and self._key == other._key

    def __repr__(self) -> str:
        a = self.array
        return f"HostConst({a.tolist() if a.size <= 4 else a.shape})"


def _one_or_all(a: np.ndarray) -> np.ndarray:
    """``a``'s single value (rank 0) where all its values are one (a scalar broadcast is one
    instruction fewer than a per-channel constant's), else ``a``."""
    return a.reshape(-1)[:1].reshape(()) if a.size and (a == a.reshape(-1)[0]).all() else a


def _scale_32_wide(value: Array, multiplier: Any, shift: Any, m: np.ndarray, s: np.ndarray,
                   double_round: bool, value_range: tuple[int, int] | None,
                   out_zp: int) -> Array | None:
    """apply_scale_32 of a traced int32 ``value`` plus ``out_zp`` as one ``scale_32_p``, for
    constant scales within apply_scale_32's REQUIREs (``m``, ``s``: ``_const_scales``), where
    the trace is not for another platform than the CPU and the 32-bit forms would not run
    faster (per-channel scales on a value of WIDE_MAX_ELEMENTS or more: traced now rather than
    when lowering); else None."""
    shape = np.shape(value)
    if (_TARGET.get() not in (None, "cpu")
            or os.environ.get(GPU_FORMS_ENV, "") not in ("", "0")):
        return None
    m, s = _one_or_all(m), _one_or_all(s)
    if _forms_run_faster(shape, m, s):
        return None
    rnd = np.left_shift(np.int64(1), s - 1)
    neg = None
    if double_round and s.max() > 31:  # the round of a negative value is 2**31 less
        adjust = np.where(s > 31, np.int64(1 << 30), np.int64(0))
        rnd, neg = rnd + adjust, rnd - adjust
    # The output zero point with the round, where no sum can leave int64:
    # (X + zp 2**s) >> s = (X >> s) + zp, and the int32 result is the same modulo 2**32.
    lo, hi = value_range or INT_RANGES["INT32"]
    top = max(-int(lo), int(hi)) * int(m.max()) + (1 << int(s.max()) - 1) + (1 << 30)
    zp = int(out_zp)
    if zp and top + abs(zp) * (1 << int(s.max())) < 1 << 63:
        term = np.left_shift(np.int64(zp), s)
        rnd, neg, zp = rnd + term, None if neg is None else neg + term, 0
    forms = (HostConst(np.asarray(multiplier).astype(np.int32)),
             HostConst(np.asarray(shift).astype(np.int32)), bool(double_round),
             None if value_range is None else (int(value_range[0]), int(value_range[1])),
             int(out_zp))
    return scale_32_p.bind(value, m=HostConst(m), s=HostConst(s), rnd=HostConst(_one_or_all(rnd)),
                           neg=None if neg is None else HostConst(_one_or_all(neg)), zp=zp,
                           forms=forms)


def _scale_32_by_forms(value: Array, *, forms: tuple[Any, ...], **_: Any) -> Array:
    """scale_32_p by the 32-bit forms (off the CPU, and outside a trace)."""
    multiplier, shift, double_round, value_range, out_zp = forms
    return _apply_scale_32_forms(value, multiplier.array, shift.array, double_round,
                                 value_range, None, out_zp)


def _scale_32_cpu(ctx: Any, x: Any, *, m: HostConst, s: HostConst, rnd: HostConst,
                  neg: HostConst | None, zp: int, forms: Any) -> list[Any]:
    """scale_32_p for XLA CPU: the spec's int64 arithmetic (the 32-bit forms for a value of
    WIDE_MAX_ELEMENTS or more)."""
    (aval,) = ctx.avals_out
    shape = tuple(aval.shape)
    if _forms_run_faster(shape, m.array, s.array):
        return _scale_32_forms_rule(ctx, x, m=m, s=s, rnd=rnd, neg=neg, zp=zp, forms=forms)
    i64 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(64))
    i32 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(32))

    def const(c: np.ndarray, t: Any) -> Any:  # broadcast along the trailing axes
        dims = list(range(len(shape) - c.ndim, len(shape)))
        return hlo.broadcast_in_dim(t, hlo.constant(ir.DenseElementsAttr.get(c)), dims)

    v = hlo.convert(i64, x)
    total = hlo.multiply(v, const(m.array, i64))
    if neg is None:
        total = hlo.add(total, const(rnd.array, i64))
    else:
        nonneg = hlo.compare(v, const(np.zeros((), np.int64), i64),
                             hlo.ComparisonDirectionAttr.get("GE"))
        total = hlo.add(total, hlo.select(nonneg, const(rnd.array, i64),
                                          const(neg.array, i64)))
    out = hlo.convert(i32, hlo.shift_right_arithmetic(total, const(s.array, i64)))
    if zp:
        out = hlo.add(out, const(np.asarray(zp, np.int32), i32))
    return [out]


def _forms_run_faster(shape: tuple[int, ...], m: np.ndarray, s: np.ndarray) -> bool:
    """Whether the 32-bit forms run faster than int64 for a value of ``shape`` (see
    WIDE_MAX_ELEMENTS): per-channel scales on a large value."""
    return (m.ndim > 0 or s.ndim > 0) and math.prod(shape) >= WIDE_MAX_ELEMENTS


def _scale_32_batch(args: Any, dims: Any, **params: Any) -> tuple[Array, int]:
    """vmap: the constants broadcast along the trailing axes, so the batch axis goes first."""
    (x,), (d,) = args, dims
    return scale_32_p.bind(jnp.moveaxis(x, d, 0) if d else x, **params), 0


# With per-channel scales, on a value this large or larger the 32-bit forms run faster than
# the int64 ones: three per-channel int64 constants a lane (multiplier, round, shift) against
# the forms' int32 ones, in a vector of half the lanes. XLA CPU, AVX-512, a RESCALE alone, min
# of 300 calls, three interleaved rounds, 2026-11-28, int64 against the 32-bit forms, per
# channel: an accumulator within +-2**20 at 1 x 28 x 28 x 128 29-47 against 24-41 us, at
# 1 x 112 x 112 x 96 240-254 against 190-229, but at 1 x 16 x 16 x 192 20-26 against 22-24;
# an int8 input less its zero point at 1 x 28 x 28 x 128 27-28 against 23-24. With one scale
# for the tensor int64 is as fast or faster at any size (1 x 112 x 112 x 96: 170-177 against
# 181-185 us; an int8 input's 173-186 against 176-189; batch 1 of unet_int8, whose group norms
# rescale 98 K-element values per tensor, min of 400 calls, three interleaved processes, 1.61-
# 1.62 -> 1.54-1.56 ms with them in int64). So the form is chosen when the primitive is
# lowered, for the shape it has then (a batch's too: evaluate's programs take the 32-bit forms
# for per-channel scales).
WIDE_MAX_ELEMENTS = 1 << 16

scale_32_p = Primitive("tosa_apply_scale_32")
scale_32_p.def_impl(_scale_32_by_forms)
scale_32_p.def_abstract_eval(lambda x, **_: jax.core.ShapedArray(x.shape, I32))
_scale_32_forms_rule = mlir.lower_fun(_scale_32_by_forms, multiple_results=False)
mlir.register_lowering(scale_32_p, _scale_32_forms_rule)
mlir.register_lowering(scale_32_p, _scale_32_cpu, platform="cpu")
batching.primitive_batchers[scale_32_p] = _scale_32_batch


def _zp_term(out_zp: int, k: Any, fixed: bool, *ranges: tuple[int, int]) -> np.ndarray:
    """out_zp 2**k (int64, per channel where the last shift k is): the zero point added before
    that shift, where the scales are constants (``fixed``) and every partial sum's range in
    ``ranges`` stays in int32 with it; else 0, and the caller adds the zero point after."""
    if not out_zp or not fixed:
        return np.int64(0)
    if int(np.max(k)) > 31:  # (no nonzero out_zp 2**k fits int32 then)
        return np.int64(0)
    term = np.left_shift(np.int64(out_zp), np.asarray(k).astype(np.int64))
    if not all(_fits_i32(lo + int(term.min()), hi + int(term.max())) for lo, hi in ranges):
        return np.int64(0)
    return term


def _with_zp(c: Any, term: np.ndarray) -> Any:
    """A constant operand plus a folded zero point term (a traced one is left as it is: its
    term is 0)."""
    return c + term if np.any(term) else c


def _plus_zp(result: Array, out_zp: int, term: np.ndarray) -> Array:
    """``result`` plus the zero point where ``_zp_term`` did not fold it in."""
    return result if np.any(term) or not out_zp else lx(lax.add, result, np.int32(out_zp))


def _broadcast_value(value: Array, *consts: np.ndarray) -> Array:
    """``value`` broadcast to its shape with the constants' (a per-channel scale of a scalar)."""
    shape = np.shape(value)
    for c in consts:
        shape = broadcast_shape(shape, np.shape(c))
    return broadcast_to(value, shape)


# The short forms below take their scales as numpy constants, or traced (one step of a rolled
# loop) with every value they take known: the forms are chosen on those values, and the
# operands derived from the scales (2**(shift - 17), multiplier >> 16...) are then computed
# with numpy in int64, or traced in int32 (the forms' bounds keep each below 2**31).
def _scale_ints(*xs: Any) -> tuple[Any, ...]:
    return tuple(np.asarray(x).astype(np.int64) if is_host(x) else as_i32(x) for x in xs)


def _pow2_of(k: Any) -> Any:
    """2**k for the scales' derived shifts k >= 0 (numpy int64, or traced int32)."""
    return np.left_shift(np.int64(1), k) if is_host(k) else jnp.left_shift(jnp.int32(1), k)


def _where(c: Any, a: Any, b: Any) -> Any:
    return np.where(c, a, b) if is_host(c) else jnp.where(c, a, b)


def _operand(c: Any, like: Array) -> Any:
    """A scale operand used more than once, broadcast to ``like`` once."""
    if is_host(c):
        return lax_const(c, like) if np.ndim(c) else c
    return broadcast_to(c, like.shape)


def _mulhi_const(v: Array, m: Any) -> Array:
    """floor(v * m / 2**32) for int32 ``v`` and a scale 0 <= m < 2**31 (a constant, or traced
    with known values: see _scale_ints), from int32 products
    that cannot overflow: v = vh 2**16 + vl, m = mh 2**16 + ml (vl, ml in [0, 2**16), mh <
    2**15), v m = vh mh 2**32 + (X1 + X2) 2**16 + Y with X1 = vh ml, X2 = vl mh (each below
    2**31 in magnitude) and Y = vl ml < 2**32 (unsigned). The carries are summed apart."""
    mh, ml = (m >> 16).astype(np.int32), (m & 0xFFFF).astype(np.int32)
    vh, vl = lx(lax.shift_right_arithmetic, v, 16), lx(lax.bitwise_and, v, 0xFFFF)
    mh = _operand(mh, v)  # one broadcast, used twice
    x1, x2 = lx(lax.mul, vh, ml), lx(lax.mul, vl, mh)
    yh = bitcast_i32(lx(lax.shift_right_logical,
                        lx(lax.mul, bitcast_u32(vl), ml.astype(np.uint32)), 16))
    low16 = lax.add(lx(lax.bitwise_and, x1, 0xFFFF), lx(lax.bitwise_and, x2, 0xFFFF))
    carry = lx(lax.shift_right_arithmetic, lax.add(low16, yh), 16)
    high = lax.add(lx(lax.shift_right_arithmetic, x1, 16), lx(lax.shift_right_arithmetic, x2, 16))
    return lax.add(lax.add(lx(lax.mul, vh, mh), high), carry)


def _scale_32_narrow(value: Array, multiplier: Array, shift: Array, double_round: bool,
                     value_range: tuple[int, int] = (-511, 511),
                     plan: tuple[np.ndarray, np.ndarray] | None = None,
                     out_zp: int = 0) -> Array | None:
    """apply_scale_32 with constant scales of a value known to lie in ``value_range`` (an 8- or
    16-bit input less its zero point), in six int32 operations; None where it does not apply
    (negative multipliers; shifts outside 1..47 or on both sides of 16; a range for which an
    intermediate below could leave int32).

    m = mh 2**16 + ml (0 <= ml < 2**16, mh < 2**15): value * m = A 2**16 + B with A = value mh
    and B = value ml (|A| < 2**24 and |B| < 2**25 for |value| < 2**9; the bounds are checked
    for the given range). With r = 2**(shift - 1):
    * shift >= 17: r = 2**(shift - 17) 2**16, and floor((X 2**16 + B) / 2**shift) =
      (X + (B >> 16)) >> (shift - 16) for X = A + 2**(shift - 17);
      DOUBLE_ROUND adds +-2**30 = +-2**14 2**16 to r for shift > 31, so +-2**14 to X;
    * shift <= 16: (A << (16 - shift)) + ((B + r) >> shift), modulo 2**32 like the spec's
      static_cast<int32_t> (A << (16 - shift) may wrap; the true product does not fit then).

    ``plan``: the values of the scales to check the bounds on (the scales themselves when
    constant; every value of traced ones). ``out_zp``: as for apply_scale_32."""
    m, s = (np.asarray(v).astype(np.int64) for v in plan or (multiplier, shift))
    if m.size == 0 or m.min() < 0 or m.max() >= 1 << 31 or s.min() < 1 or s.max() > 47:
        return None
    lo, hi = int(value_range[0]), int(value_range[1])

    def span(k: int) -> tuple[int, int]:  # the range of value * c for 0 <= c <= k
        return min(lo * k, 0), max(hi * k, 0)

    a_lo, a_hi = span(int(m.max()) >> 16)  # (the largest mh: that of the largest m)
    if not _fits_i32(a_lo, a_hi):  # A exact in int32 (an int32 input's rescale: not)
        return None
    ml = m & 0xFFFF
    b_lo, b_hi = span(int(ml.max()))
    if not _fits_i32(b_lo, b_hi):  # B exact in int32
        return None
    if s.min() >= 17:
        dr = 1 << 14 if double_round and s.max() > 31 else 0
        x_lo, x_hi = a_lo + (1 << (int(s.min()) - 17)) - dr, a_hi + (1 << (int(s.max()) - 17)) + dr
        if not (_fits_i32(x_lo, x_hi) and _fits_i32(x_lo + (b_lo >> 16), x_hi + (b_hi >> 16))):
            return None
    elif s.max() <= 16:  # DOUBLE_ROUND only differs for shift > 31
        if not _fits_i32(b_lo, b_hi + (1 << (int(s.max()) - 1))):
            return None
    else:
        return None
    fixed = is_host(multiplier, shift)
    mult, sh = _scale_ints(multiplier, shift)
    value = _broadcast_value(value, mult, sh)
    op_mh, op_ml = (mult >> 16).astype(np.int32), (mult & 0xFFFF).astype(np.int32)
    if s.min() >= 17:
        zp = _zp_term(out_zp, s - 16, fixed, (x_lo, x_hi),
                      (x_lo + (b_lo >> 16), x_hi + (b_hi >> 16)))
        x = lx(lax.add, lx(lax.mul, value, op_mh),
               _with_zp(_pow2_of(sh - 17), zp).astype(np.int32))
        if dr:
            # +-2**14 by the value's sign: (c ^ sgn) - sgn negates c where sgn = -1
            sgn = lx(lax.shift_right_arithmetic, value, 31)
            pos = _where(sh > 31, 1 << 14, 0).astype(np.int32)
            x = lax.add(x, lax.sub(lx(lax.bitwise_xor, sgn, pos), sgn))
        if ml.any():  # else B = 0 (multipliers of 2**16, e.g. int8 ADD's 2**30): X alone
            x = lax.add(x, lx(lax.shift_right_arithmetic, lx(lax.mul, value, op_ml), 16))
        return _plus_zp(lx(lax.shift_right_arithmetic, x, (sh - 16).astype(np.int32)), out_zp, zp)
    a = lx(lax.shift_left, lx(lax.mul, value, op_mh), (16 - sh).astype(np.int32))
    if not ml.any():  # (B + r) >> shift = 0 for B = 0, r < 2**shift
        return lx(lax.add, a, np.int32(out_zp))
    zp = _zp_term(out_zp, s, fixed, (b_lo, b_hi + (1 << (int(s.max()) - 1))))
    rnd = _with_zp(_pow2_of(sh - 1), zp).astype(np.int32)
    return _plus_zp(lax.add(a, lx(lax.shift_right_arithmetic,
                                  lx(lax.add, lx(lax.mul, value, op_ml), rnd),
                                  sh.astype(np.int32))), out_zp, zp)


def _pieces_plan(multiplier: Array, shift: Array, double_round: bool,
                 value_range: tuple[int, int], most: int = 4
                 ) -> tuple[list[int], tuple[int, int]] | None:
    """The bit positions 0 = u_0 < u_1 < ... < u_p = bits(max multiplier) that cut the
    multipliers into the fewest pieces (at most ``most``) for which every step of
    ``_scale_32_pieces`` provably stays in int32 for values in ``value_range``, with the range
    of the form's last sum (``_pieces_last``); None if none do (negative multipliers, or shifts
    too small for the top cut)."""
    m = np.asarray(multiplier).astype(np.int64)
    s = np.asarray(shift).astype(np.int64)
    if m.size == 0:
        return None
    m_min, m_max, s_min, s_max = int(m.min()), int(m.max()), int(s.min()), int(s.max())
    # (multipliers of up to 39 bits: 31-bit ones given one shift, _common_shift)
    if m_min < 0 or m_max >= 1 << 39 or s_min < 1 or s_max > 62:
        return None
    bits = max(m_max.bit_length(), 1)
    dr = double_round and s_max > 31
    v = max(-int(value_range[0]), int(value_range[1]))
    for p in range(1, min(most, bits) + 1):
        width = -(-bits // p)
        cuts = [min(width * j, bits) for j in range(p + 1)]
        top = cuts[-2]
        if len(set(cuts)) != p + 1 or top > s_min - 1 or (dr and top > 30):
            continue
        if v * (m_max >> top) >= 1 << 31:  # the top piece's product alone leaves int32
            continue
        t = _cascade_range(m, cuts, value_range)
        if t is None:
            continue
        pre = _pre_shift(s, top)
        if dr and int((top + pre).max()) > 30:  # +-2**30 is no whole unit of the top
            continue
        last = _pieces_last(t, s, double_round, top, pre)
        if last is not None:
            return cuts, last
    return None


def _common_shift(multiplier: np.ndarray, shift: np.ndarray,
                  most: int = 8) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel constant scales with one shift S = max(shift): multipliers
    m 2**(S - shift), as (v m 2**k + 2**(s - 1) 2**k) >> (s + k) = (v m + 2**(s - 1)) >> s
    (SINGLE_ROUND). None where the shifts are already one, or differ by more than ``most``."""
    s = np.asarray(shift).astype(np.int64)
    if s.size < 2 or s.min() == s.max() or s.max() - s.min() > most:
        return None
    m = np.asarray(multiplier).astype(np.int64)
    if m.min() < 0:
        return None
    return m << (s.max() - s), np.full_like(s, s.max())


def _cascade_range(m: np.ndarray, cuts: list[int],
                   value_range: tuple[int, int]) -> tuple[int, int] | None:
    """The range of ``_scale_32_pieces``' cascade T_{p-1} for values in ``value_range``; None
    where some step T_j could leave int32."""
    lo, hi = int(value_range[0]), int(value_range[1])
    t: tuple[int, int] | None = None
    for j in range(len(cuts) - 1):
        piece = int(((m >> cuts[j]) & ((1 << (cuts[j + 1] - cuts[j])) - 1)).max())
        t_lo, t_hi = min(lo * piece, 0), max(hi * piece, 0)  # value * piece
        if t is not None:  # + the previous step, floor-shifted down to this piece
            t_lo, t_hi = t_lo + (t[0] >> (cuts[j] - cuts[j - 1])), t_hi + (
                t[1] >> (cuts[j] - cuts[j - 1]))
        if not _fits_i32(t_lo, t_hi):
            return None
        t = (t_lo, t_hi)
    return t


def _pieces_last(t: tuple[int, int], s: np.ndarray, double_round: bool, top: int,
                 pre: np.ndarray) -> tuple[int, int] | None:
    """The range of ``_scale_32_pieces``' last sum before its round, from the cascade's range
    ``t`` (the top step shifted down by its pre-shift ``pre``, DOUBLE_ROUND's +-2**30 added),
    where the sum with the round stays in int32; else None."""
    a = int(pre.min())
    rnd = np.left_shift(np.int64(1), s - 1 - top - pre)
    d = (int((np.int64(1) << (30 - top - pre)).max())
         if double_round and int(s.max()) > 31 else 0)
    lo, hi = (t[0] >> a) - d, (t[1] >> a) + d
    return (lo, hi) if _fits_i32(lo + int(rnd.min()), hi + int(rnd.max())) else None


def _pre_shift(s: Any, top: int) -> Any:
    """How far ``_scale_32_pieces`` shifts the top step down before rounding, so that the
    round, 2**(shift - 1 - top - pre), stays below 2**31."""
    if not is_host(s):
        return jnp.maximum(s - (top + 31), 0)
    return np.maximum(np.asarray(s).astype(np.int64) - top - 31, 0)


def _scale_32_pieces(value: Array, multiplier: Array, shift: Array, double_round: bool,
                     cuts: list[int], plan: tuple[np.ndarray, np.ndarray] | None = None,
                     last: tuple[int, int] | None = None, out_zp: int = 0) -> Array:
    """apply_scale_32 with constant scales by a cascade over pieces of the multiplier, for
    values whose range ``_pieces_plan`` checked (the cuts it chose): 3 int32 operations a
    piece, where the general form takes about 20 (an int32 accumulator of an int8
    convolution: 3 pieces).

    With m = sum_j m_j 2**u_j (m_j < 2**(u_{j+1} - u_j)), T_0 = value * m_0 and
    T_j = value * m_j + (T_{j-1} >> (u_j - u_{j-1})) is floor(value * (m mod 2**u_{j+1}) /
    2**u_j) (floor((X 2**a + Y) / 2**b) = floor((X + floor(Y / 2**a)) / 2**(b - a)) for
    b >= a); then (value * m + r) >> shift = (T' + r / 2**v) >> (shift - v) for
    r = 2**(shift - 1) (DOUBLE_ROUND: +-2**30 by the value's sign for shift > 31), where
    T' = T_{p-1} >> (v - u_{p-1}), v = max(u_{p-1}, shift - 31) (the same identity: r / 2**v
    is whole as v < shift, and v <= 30 for DOUBLE_ROUND, and below 2**31).

    ``plan``: as for ``_scale_32_narrow``; ``out_zp``: as for apply_scale_32, folded in by
    the range of the last sum (``_pieces_plan``) where given."""
    pm, ps = (np.asarray(v).astype(np.int64) for v in plan or (multiplier, shift))
    fixed = is_host(multiplier, shift)
    m, s = _scale_ints(multiplier, shift)
    value = _broadcast_value(value, m, s)
    t = None
    for j in range(len(cuts) - 1):
        mask = (1 << (cuts[j + 1] - cuts[j])) - 1
        piece = ((m >> cuts[j]) & mask).astype(np.int32)
        prod = lx(lax.mul, value, piece) if ((pm >> cuts[j]) & mask).any() else None
        if t is None:
            t = prod
        else:
            t = lx(lax.shift_right_arithmetic, t, np.int32(cuts[j] - cuts[j - 1]))
            t = t if prod is None else lax.add(prod, t)
    top = cuts[-2]
    if t is None:  # every multiplier is 0: the result is r >> shift = 0
        t = lx(lax.mul, value, np.int32(0))
    pre = _pre_shift(s, top)
    if _pre_shift(ps, top).any():
        t = lx(lax.shift_right_arithmetic, t, pre.astype(np.int32))
    top_s = top + pre  # the units of t now (per channel)
    if double_round and ps.max() > 31:
        sgn = lx(lax.shift_right_arithmetic, value, 31)  # -1 for negative values, else 0
        pos = (s > 31) * _pow2_of(_where(top_s < 30, 30 - top_s, 0))
        t = lax.add(t, lax.sub(lx(lax.bitwise_xor, sgn, pos.astype(np.int32)), sgn))  # +-pos
    zp = np.int64(0)
    if out_zp and fixed and last is not None:
        rnd = np.left_shift(np.int64(1), s - 1 - top_s)
        zp = _zp_term(out_zp, s - top_s, fixed,
                      (last[0] + int(rnd.min()), last[1] + int(rnd.max())))
    t = lx(lax.add, t, _with_zp(_pow2_of(s - 1 - top_s), zp).astype(np.int32))
    return _plus_zp(lx(lax.shift_right_arithmetic, t, (s - top_s).astype(np.int32)), out_zp, zp)


def _split_plan(multiplier: Array, shift: Array, value_range: tuple[int, int]
                ) -> tuple[int, tuple[int, int]] | None:
    """The offset L (a multiple of 2**16) for which ``_scale_32_split`` is exact on values in
    ``value_range`` (its middle sum X less L spans less than 2**32 and its top steps fit int32),
    with the range of its top sum before the last shift; None where that fails (or for shifts
    outside 33..62, negative multipliers)."""
    m = np.asarray(multiplier).astype(np.int64)
    s = np.asarray(shift).astype(np.int64)
    if m.size == 0 or m.min() < 0 or m.max() >= 1 << 31 or s.min() < 33 or s.max() > 62:
        return None
    vh_lo, vh_hi = int(value_range[0]) >> 16, int(value_range[1]) >> 16
    mh, ml = int((m >> 16).max()), int((m & 0xFFFF).max())
    x_lo = min(vh_lo * ml, 0)
    x_hi = max(vh_hi * ml, 0) + 0xFFFF * mh + 0xFFFF
    offset = (x_lo >> 16) << 16
    if x_hi - offset >= 1 << 32:
        return None
    top_lo = min(vh_lo * mh, 0) + (x_lo >> 16)
    top_hi = max(vh_hi * mh, 0) + (x_hi >> 16) + int((np.int64(1) << (s - 33)).max())
    if not (_fits_i32(top_lo, top_hi) and _fits_i32(offset, offset)):
        return None
    return offset, (top_lo, top_hi)


def _scale_32_split(value: Array, multiplier: Array, shift: Array, offset: int,
                    top: tuple[int, int] | None = None, out_zp: int = 0) -> Array:
    """apply_scale_32 (SINGLE_ROUND, 33 <= shift <= 62, constant scales) in 14 int32
    operations, for values whose range ``_split_plan`` checked (any int32 value for many
    multipliers; an int32 sum of two rescaled int8 values always).

    value = vh 2**16 + vl, m = mh 2**16 + ml (vl, ml in [0, 2**16)): value * m =
    vh mh 2**32 + X' 2**16 + vl ml with X' = vh ml + vl mh. Y = vl ml < 2**32 is exact as the
    bits of an int32 product, and floor(Y / 2**16) its logical shift; X = X' + floor(Y / 2**16)
    spans less than 2**32 above ``offset``, so floor(X / 2**16) = ((X - offset) >>> 16) +
    offset / 2**16 from wrapping int32 sums; and as the round 2**(shift - 1) is a whole multiple
    of 2**32, (value m + round) >> shift = (vh mh + floor(X / 2**16) + 2**(shift - 33)) >>
    (shift - 32) (floor((A 2**a + B) / 2**b) = floor((A + floor(B / 2**a)) / 2**(b - a))).
    ``out_zp``: as for apply_scale_32, folded in by the range of the top sum (``top``,
    ``_split_plan``) where given."""
    zp = np.int64(0)
    if out_zp and top is not None and is_host(multiplier, shift):
        zp = _zp_term(out_zp, np.asarray(shift).astype(np.int64) - 32, True, top)
    m, s = _scale_ints(multiplier, shift)
    value = _broadcast_value(value, m, s)
    mh = _operand((m >> 16).astype(np.int32), value)  # one broadcast, used twice
    ml = _operand((m & 0xFFFF).astype(np.int32), value)
    vh = lx(lax.shift_right_arithmetic, value, np.int32(16))
    vl = lx(lax.bitwise_and, value, np.int32(0xFFFF))
    y = lx(lax.shift_right_logical, lx(lax.mul, vl, ml), np.int32(16))
    x = lax.add(lax.add(lx(lax.mul, vh, ml), lx(lax.mul, vl, mh)), y)
    z = lx(lax.shift_right_logical, lx(lax.sub, x, np.int32(offset)), np.int32(16))
    rnd = _with_zp(_pow2_of(s - 33) + (offset >> 16), zp).astype(np.int32)
    top = lx(lax.add, lax.add(lx(lax.mul, vh, mh), z), rnd)
    return _plus_zp(lx(lax.shift_right_arithmetic, top, (s - 32).astype(np.int32)), out_zp, zp)


def _fits_i32(lo: int, hi: int) -> bool:
    return -(1 << 31) <= lo and hi < 1 << 31


def _scale_32_const(value: Array, multiplier: Array, shift: Array, double_round: bool,
                    plan: tuple[np.ndarray, np.ndarray] | None = None) -> Array | None:
    """apply_scale_32 with constant scales in about half the operations of the 64-bit form
    (None where it does not apply: negative multipliers, shifts outside 1..62, or shifts on
    both sides of 32). Same result modulo 2**32 as the 64-bit form, for every int32 value.

    P = value * multiplier = H 2**32 + L (L the low word, unsigned), r = 2**(shift - 1):
    * shift >= 33: r is a multiple of 2**32, so (P + r) >> shift = (H + 2**(shift - 33)) >>
      (shift - 32), the low word cannot carry (L / 2**32 < 1 vanishes in the floor);
    * shift <= 31: (P + r) >> shift = H 2**(32 - shift) + (L >> shift)
      + (((L & (2**shift - 1)) + r) >> shift), all modulo 2**32 (DOUBLE_ROUND only differs
      for shift > 31).

    ``plan``: as for ``_scale_32_narrow``."""
    pm, ps = (np.asarray(v).astype(np.int64) for v in plan or (multiplier, shift))
    if pm.size == 0 or pm.min() < 0 or pm.max() >= 1 << 31:
        return None
    m, s = _scale_ints(multiplier, shift)
    m = m.astype(np.int32)
    value = _broadcast_value(value, m, s)
    if ps.min() >= 33 and ps.max() <= 62 and not double_round:
        h = _mulhi_const(value, m)
        return lx(lax.shift_right_arithmetic, lx(lax.add, h, _pow2_of(s - 33).astype(np.int32)),
                  (s - 32).astype(np.int32))
    if ps.min() >= 1 and ps.max() <= 31:
        h = _mulhi_const(value, m)
        low = bitcast_u32(lx(lax.mul, value, m))  # the low word (int32 products wrap)
        su = s.astype(np.uint32)
        mask = (_pow2_of(s) - 1).astype(np.uint32)  # (traced: 2**31 - 1 wraps to its bits)
        rnd = _pow2_of(s - 1).astype(np.uint32)
        tail = lx(lax.shift_right_logical, lx(lax.add, lx(lax.bitwise_and, low, mask), rnd), su)
        low_part = bitcast_i32(lax.add(lx(lax.shift_right_logical, low, su), tail))
        return lax.add(lx(lax.shift_left, h, (32 - s).astype(np.int32)), low_part)
    return None


def _pow2_host(k: np.ndarray) -> np.ndarray:
    """_pow2 on the host, int64: 1 << k for 0 <= k <= 62, and 0 for k < 0 (as _pow2 gives)."""
    return np.where(k >= 0, np.left_shift(np.int64(1), np.maximum(k, 0)), np.int64(0))


def _apply_scale_32_host(value: Array, multiplier: Array, shift: Array,
                         double_round: bool) -> np.ndarray | None:
    """apply_scale_32 of values known now, in numpy int64 (|value * multiplier + round| < 2**63
    for int32 operands and shift <= 62); None for shifts outside 0..62 (left to the general
    form). The low 32 bits, as static_cast<int32_t>."""
    v = np.asarray(value).astype(np.int32).astype(np.int64)
    m = np.asarray(multiplier).astype(np.int32).astype(np.int64)
    s = np.asarray(shift).astype(np.int32).astype(np.int64)
    if s.size and (s.min() < 0 or s.max() > 62):
        return None
    rnd = _pow2_host(s - 1)
    if double_round:
        rnd = rnd + np.where(s > 31, np.where(v >= 0, 1 << 30, -(1 << 30)), 0)
    return np.asarray(((v * m + rnd) >> s).astype(np.int32))


def apply_scale_host(value: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                     scale32: bool, double_round: bool) -> np.ndarray | None:
    """apply_scale_32 (``scale32``) or apply_scale_16 of values known now, in numpy int64, as
    int32; None for shifts outside 0..62 (left to the traced form). ``value`` is the int48 input
    as int64: |value * multiplier + round| < 2**63 for 48-bit values and 16-bit multipliers,
    and for int32 values and multipliers."""
    if scale32:
        return _apply_scale_32_host(value, multiplier, shift, double_round)
    v = np.asarray(value).astype(np.int64)
    m = np.asarray(multiplier).astype(np.int16).astype(np.int64)
    s = np.asarray(shift).astype(np.int32).astype(np.int64)
    if s.size and (s.min() < 0 or s.max() > 62):
        return None
    return np.asarray(((v * m + _pow2_host(s - 1)) >> s).astype(np.int32))


def apply_scale_16(value: Wide, multiplier: Array, shift: Array) -> Array:
    """apply_scale_16: (int48 value * int16 multiplier + round) >> shift, as int32."""
    shift = as_i32(shift)
    product = wide_mul(value, multiplier)
    return wide_low32(wide_sra(wide_add(product, _pow2(shift - 1)), shift))


def scale_overflows(value: Array | Wide, multiplier: Array, shift: Array,
                    scale32: bool) -> Array:
    """Where apply_scale_32's REQUIRE on its value fails (value outside
    [-(1 << (shift - 1)), 1 << (shift - 1)): only shifts below 32 restrict an int32 value), or
    apply_scale_16's result leaves int32. ``value``: the input less its zero point (int32, or a
    Wide int48); ``shift`` in 2..62 (else its own REQUIRE fails, see rescale)."""
    if is_host(*(value if isinstance(value, Wide) else (value,)), multiplier, shift):
        v = (wide_to_numpy(value) if isinstance(value, Wide) else np.asarray(value, np.int64))
        s = np.clip(np.asarray(shift, np.int64), 2, 62)
        if scale32:
            bound = np.int64(1) << (s - 1)
            return (v < -bound) | (v >= bound)
        r = (v * np.asarray(multiplier, np.int64) + (np.int64(1) << (s - 1))) >> s
        return (r < -(1 << 31)) | (r > (1 << 31) - 1)
    s = jnp.clip(as_i32(shift), 2, 62)
    if scale32:
        bound = jnp.left_shift(I32(1), jnp.minimum(s, 31) - 1)
        v = as_i32(value)
        return (s < 32) & ((v < -bound) | (v >= bound))
    v = value if isinstance(value, Wide) else wide(value)
    r = wide_sra(wide_add(wide_mul(v, multiplier), _pow2(s - 1)), s)
    return r.hi != (bitcast_i32(r.lo) >> 31)


def rounding_mul_shift(a: Array, b: Array, shift: int | Array) -> Array:
    """MUL with shift: (int64(a) * b + (1 << (shift - 1))) >> shift, as int32 (shift > 0; a
    traced shift, EXT-DYNAMIC, may also be 0: then the low 32 bits of the product)."""
    product = wide_mul32(a, b)
    if isinstance(shift, int):
        return wide_low32(wide_sra(wide_add(product, _pow2(jnp.int32(shift - 1))), shift))
    shift = as_i32(shift)
    rounded = wide_add(product, _pow2(jnp.maximum(shift - 1, 0)))
    return jnp.where(shift > 0, wide_low32(wide_sra(rounded, shift)), wide_low32(product))


def mul_shift_overflows(a: Array, b: Array, shift: int | Array) -> Array:
    """Where MUL's int32 (int64(a) * b + (1 << (shift - 1))) >> shift leaves the int32 range
    (shift > 0; a traced shift of 0 takes the low 32 bits: nothing to overflow)."""
    if is_host(a, b, shift):
        s = np.asarray(shift, np.int64)
        p = np.asarray(a, np.int64) * np.asarray(b, np.int64)
        r = (p + (np.int64(1) << np.maximum(s - 1, 0))) >> s
        return (s > 0) & ((r < -(1 << 31)) | (r > (1 << 31) - 1))
    s = jnp.asarray(shift, I32) if not isinstance(shift, int) else I32(shift)
    r = wide_sra(wide_add(wide_mul32(a, b), _pow2(jnp.maximum(s - 1, 0))), s)
    return (s > 0) & (r.hi != (bitcast_i32(r.lo) >> 31))


def _known_number(b: Any) -> bool:
    """A float bound known at trace time and not NaN: ``a >= b ? a : b`` and its NaN rule
    are then one comparison and one select (the comparison is false for a NaN ``a``).
    Written as selects, not as maximum/minimum: XLA CPU's fast min/max may drop NaNs."""
    return (isinstance(b, (np.ndarray, np.generic)) and b.ndim == 0
            and np.issubdtype(b.dtype, np.floating) and not np.isnan(b))


def _select_bound(a: Array, b: Any, compare: Any, bound_if_true: bool) -> Array:
    """``compare(a, b) ? b : a`` (``bound_if_true``) or ``compare(a, b) ? a : b`` for a float
    bound ``b`` known now, in lax: one comparison and one select."""
    a = jnp.asarray(a)
    b = np.asarray(b, a.dtype)
    which, bound = compare(a, b), filled(a, b)
    return lax.select(which, bound, a) if bound_if_true else lax.select(which, a, bound)


def apply_max_s(a: Array, b: Array, nan_mode: str = "PROPAGATE") -> Array:
    """apply_max_s: ``a >= b ? a : b``; for floats a NaN operand follows ``nan_mode``
    (compare_nan: PROPAGATE gives NaN, IGNORE gives the other operand)."""
    if _known_number(b):  # CLAMP's bounds: one comparison decides, NaN a included
        return _select_bound(a, b, lax.lt if nan_mode == "PROPAGATE" else lax.ge,
                             nan_mode == "PROPAGATE")
    a, b = jnp.asarray(a), jnp.asarray(b, jnp.asarray(a).dtype)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        return jnp.maximum(a, b)
    chosen = jnp.where(a >= b, a, b)  # a NaN b (or both) selects b
    if nan_mode == "PROPAGATE":
        return jnp.where(jnp.isnan(a), a, chosen)
    return jnp.where(jnp.isnan(b) & ~jnp.isnan(a), a, chosen)


def apply_min_s(a: Array, b: Array, nan_mode: str = "PROPAGATE") -> Array:
    """apply_min_s: ``a < b ? a : b``; NaN operands as in apply_max_s."""
    if _known_number(b):
        return _select_bound(a, b, lax.ge if nan_mode == "PROPAGATE" else lax.lt,
                             nan_mode == "PROPAGATE")
    a, b = jnp.asarray(a), jnp.asarray(b, jnp.asarray(a).dtype)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        return jnp.minimum(a, b)
    chosen = jnp.where(a < b, a, b)
    if nan_mode == "PROPAGATE":
        return jnp.where(jnp.isnan(a), a, chosen)
    return jnp.where(jnp.isnan(b) & ~jnp.isnan(a), a, chosen)


def lookup_slope_overflows(table: Array, value: Array | None) -> Array:
    """Where apply_lookup_s's REQUIRE fails: the slope between the two entries of the 513-entry
    table that a value reads (entries index and index + 1) does not fit int16. A constant table
    whose slopes all fit needs no check (False); ``value`` None: only that question, for
    constant tables (True where some slope does not fit)."""
    if is_host(table):
        t = np.asarray(table, np.int64)
        slope = t[..., 1:] - t[..., :-1]  # (tables of a rolled loop's steps: one per row)
        bad = (slope < -32768) | (slope > 32767)
        if not bad.any():
            return False
        if value is None:
            return True
        if is_host(value):
            return bad[(np.clip(np.asarray(value, np.int64), -32768, 32767) + 32768) >> 7]
        bad = jnp.asarray(bad)
    else:
        t = as_i32(jnp.reshape(table, (-1,)))
        slope = t[1:] - t[:-1]
        bad = (slope < -32768) | (slope > 32767)
    return bad[(jnp.clip(as_i32(value), -32768, 32767) + 32768) >> 7]


def apply_lookup_s(table: Array, value: Array) -> Array:
    """apply_lookup_s (spec introduction, "General Unary Functions"): 513-entry int16 table,
    input read as fixed-point 9.7, linear interpolation; returns the 16.7 result as int32.

    (table[i] << 7) + (table[i + 1] - table[i]) * fraction, with both terms of entry i in one
    row of a [512, 2] table made once from the table (numpy for a constant one) and looked up
    by one gather: about 16 optimized instructions and one kernel where two lookups of the
    table took 26 and two (ExecuTorch's int16 LSTM, 50 TABLEs: 7,815 -> 6,385 instructions)."""
    if is_host(table):
        t = np.asarray(table).astype(np.int32)
        terms = np.stack([t[:512] << 7, t[1:513] - t[:512]], axis=-1)
    else:
        t = as_i32(table)
        head = lax.slice(t, (0,), (512,))
        terms = jnp.stack([lx(lax.shift_left, head, 7),
                           lax.sub(lax.slice(t, (1,), (513,)), head)], axis=-1)
    clipped = as_i32(value)
    if np.dtype(getattr(value, "dtype", np.int32)) != np.int16:  # an int16 is in range
        clipped = apply_clip(clipped, -32768, 32767)
    clipped = gather_indices(clipped)  # (index and fraction both come from it)
    index = lx(lax.shift_right_arithmetic, lx(lax.add, clipped, 32768), 7)  # the top 9 bits
    fraction = lx(lax.bitwise_and, clipped, 0x7F)  # the low 7 bits
    index = lax.expand_dims(index, (index.ndim,))
    dims = lax.GatherDimensionNumbers(offset_dims=(index.ndim - 1,), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
    both = lax.gather(jnp.asarray(terms, jnp.int32), index, dims, (1, 2),
                      mode=lax.GatherScatterMode.CLIP)
    # slope is REQUIRE'd to fit int16, so its product with the 7-bit fraction fits int32
    return lax.add(lax.index_in_dim(both, 0, -1, False),
                   lax.mul(lax.index_in_dim(both, 1, -1, False), fraction))


def float_compute(fn: Any, x: Array) -> Array:
    """Evaluate a floating-point function in fp32 (or in the type itself when it is wider) and
    round once to the input's type: fp16/bf16 transcendental functions."""
    x = jnp.asarray(x)
    compute = jnp.float32 if x.dtype.itemsize < 4 else x.dtype
    return fn(x.astype(compute)).astype(x.dtype)


def count_leading_zeros(a: Array) -> Array:
    # On uint32: XLA's constant folder gets clz of negative *signed* values wrong (-32 for -1,
    # seen with jax 0.10 when the input is a CONST), while the unsigned form is right everywhere.
    return bitcast_i32(lax.clz(bitcast_u32(a)))


def reciprocal_scale(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """reciprocal_scale on static counts (numpy): returns (multiplier, shift) as int32 arrays."""
    value = np.asarray(value, dtype=np.int64)
    k = np.zeros_like(value)
    # k = 32 - count_leading_zeros(value - 1), i.e. the bit length of value - 1.
    v = value - 1
    while np.any(v > 0):
        k += v > 0
        v >>= 1
    numerator = ((1 << 30) + 1) << k
    return (numerator // value).astype(np.int32), (30 + k).astype(np.int32)


# ----------------------------------------------------------------------------- block scaling
# TOSA 1.1 (draft) microscaling: a block of ``block_size`` values along the innermost axis
# shares one FP8UE8M0 scale, a power of two 2^(code - 127) (code 255 is NaN).

# normal_max<out_t>() + 0.5 ulp: the largest magnitude that rounds to normal_max
# (get_largest_value_rounding_to_normal_max, numeric_conversion_helpers.tosac).
BLOCK_OUT_MAX = {"FP8E4M3": 448.0 + 16.0, "FP8E5M2": 57344.0 + 4096.0, "FP6E3M2": 28.0 + 2.0,
                 "FP6E2M3": 7.5 + 0.25, "FP4E2M1": 6.0 + 1.0, "MXINT8": 127 / 64 + 1 / 128}


def block_scale_exponent(max_abs: Array, out_t: str) -> Array:
    """calc_block_scale's exponent, exactly: for FP8E4M3 ceil(log2(max_abs / out_max)), else
    floor(log2(max_abs / out_max)) + 1, clipped to the FP8UE8M0 range [-127, 127]; int32.

    That is the smallest k with out_max * 2^k >= max_abs (FP8E4M3) or > max_abs (the others).
    With max_abs = (1 + mx) 2^ex and out_max = (1 + mo) 2^eo (mantissa fractions), k = ex - eo
    when the mantissas compare so (mo >= mx, or mo > mx), else ex - eo + 1: read from the
    bits, no logarithm and no f32 arithmetic (which XLA's CPU code would flush at subnormals).
    ``max_abs``: zero or a normal f32 (the caller scales blocks of tiny values by 2^64).
    """
    out_bits = int(np.float32(BLOCK_OUT_MAX[out_t]).view(np.uint32))
    bits = lax.bitcast_convert_type(jnp.asarray(max_abs, jnp.float32), U32)
    ex = lax.convert_element_type(bits >> 23, I32)  # the sign bit is clear: max_abs >= 0
    mx = bits & 0x7FFFFF
    mo = np.uint32(out_bits & 0x7FFFFF)
    up = (mx >= mo) if out_t != "FP8E4M3" else (mx > mo)
    k = ex - (out_bits >> 23) + lax.convert_element_type(up, I32)
    return jnp.clip(k, -127, 127)


def times_2_64(x: Array) -> Array:
    """x * 2^64, exactly, for f32 |x| < 2^-60, subnormal x included: XLA's CPU arithmetic treats
    f32 subnormals as zero (seen with jax 0.10.2), so they are rebuilt from their bits."""
    bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), U32)
    mant = (bits & 0x7FFFFF).astype(I32).astype(jnp.float32)
    subnormal = ((bits >> 23) & 0xFF) == 0
    mag = jnp.where(subnormal, mant * jnp.float32(2.0 ** -85), jnp.abs(x) * jnp.float32(2.0 ** 64))
    return jnp.where((bits >> 31) == 1, -mag, mag)


def e8m0_from_exponent(k: Array) -> Array:
    """FP8UE8M0 values 2^k from int32 exponents in [-127, 127] (code = k + 127)."""
    return lax.bitcast_convert_type((k + 127).astype(jnp.uint8), jnp.float8_e8m0fnu)


def e8m0_exponent(scale: Array) -> tuple[Array, Array]:
    """(exponent k as int32, is-NaN) of FP8UE8M0 scales."""
    code = lax.bitcast_convert_type(jnp.asarray(scale, jnp.float8_e8m0fnu), jnp.uint8)
    return code.astype(jnp.int32) - 127, code == 255


def times_pow2(x: Array, k: Array) -> Array:
    """x * 2^k for int32 k in [-127, 127], as ldexp on XLA's CPU gives it: by adding k to the
    exponent field, an integer operation (XLA reorders float multiplications: (q / 64) * 2^-126
    became q * 2^-132, a subnormal factor its CPU code flushes). A result above the f32 range is
    infinity; one below 2^-126 is flushed to zero (sign kept), as XLA's CPU arithmetic does;
    zero, a subnormal (which XLA reads as zero), infinity and NaN stay as they are. Callers:
    block values (normal or zero), and CAST_TO_BLOCK_SCALED's quotients, where a subnormal or a
    result below 2^-126 is zero in every block type."""
    bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), I32)
    field = (bits >> 23) & 0xFF
    new = field + k
    sign = bits & jnp.int32(-(2 ** 31))
    out = jnp.where(new >= 255, sign | 0x7F800000, jnp.where(new >= 1, bits + (k << 23), sign))
    return lax.bitcast_convert_type(jnp.where((field == 0) | (field == 255), bits, out),
                                    jnp.float32)


def apply_block_scale(values: Array, scale: Array, block_size: int) -> Array:
    """values (f32, innermost axis C) times their blocks' scales (innermost axis C/block_size):
    a multiplication by a power of two, exact but for results below 2^-126 (see times_pow2)."""
    k, nan = e8m0_exponent(scale)
    k = jnp.repeat(k, block_size, axis=-1)
    nan = jnp.repeat(nan, block_size, axis=-1)
    return jnp.where(nan, jnp.float32(jnp.nan), times_pow2(values, k))


def block_dequantize(values: Array, scale: Array, in_t: str, block_size: int) -> Array:
    """A block-scaled tensor's values (of type ``in_t``) as f32, each times its block's scale:
    block_value_f32 then apply_block_scale (the traced form of block_dequantize_host)."""
    return apply_block_scale(block_value_f32(values, in_t), jnp.asarray(scale), block_size)


def block_dequantize_host(values: np.ndarray, scale: np.ndarray, in_t: str,
                          block_size: int) -> np.ndarray:
    """block_value_f32 then apply_block_scale of constant operands, in numpy at trace time: the
    same exact f32 values (numpy's ldexp keeps subnormals), so a block-scaled weight reaches XLA
    as one f32 constant instead of its decoding, traced and run on every call."""
    values = np.asarray(values)
    if in_t == "MXINT8":
        x = values.astype(np.float32) * np.float32(1 / 64)
    elif in_t in CODE_TYPES:  # uint8 codes: sign bit 5, magnitude bits 0-4
        x = _fp6_table(in_t)[values & 31]
        x = np.where(values & 32, -x, x)
    else:
        x = values.astype(np.float32)
    code = np.asarray(scale).view(np.uint8)
    k = np.repeat(code.astype(np.int32) - 127, block_size, axis=-1)
    nan = np.repeat(code == 255, block_size, axis=-1)
    with np.errstate(over="ignore"):  # beyond the f32 range: inf, as the traced path gives
        return np.where(nan, np.float32(np.nan), np.ldexp(x, k)).astype(np.float32)


def mxint8_value(code: Array) -> Array:
    """MXINT8 codes (int8) as their f32 values code / 64."""
    return jnp.asarray(code).astype(jnp.float32) * jnp.float32(1 / 64)


def _fp6_table(dtype: str) -> np.ndarray:
    """The 32 non-negative values of an FP6 type by code (ml_dtypes' decoding), as f32."""
    import ml_dtypes

    dt = {"FP6E2M3": ml_dtypes.float6_e2m3fn, "FP6E3M2": ml_dtypes.float6_e3m2fn}[dtype]
    return np.arange(32, dtype=np.uint8).view(dt).astype(np.float32)


# An FP6 type's normal values are those of the FP8 type with its mantissa width, shifted in the
# code space: FP6E2M3 codes 8-31 are FP8E4M3 bits 56-79, FP6E3M2 codes 4-31 are FP8E5M2 bits
# 52-79. (FP8 type, first normal FP6 code, subnormal quantum 2^-m.)
_FP6_VIA_FP8 = {"FP6E2M3": (jnp.float8_e4m3fn, 8, 8.0), "FP6E3M2": (jnp.float8_e5m2, 4, 16.0)}
_FP6_TO_FP8_BITS = 48


def fp6_decode(code: Array, dtype: str) -> Array:
    """FP6 codes (uint8: sign bit 5, magnitude bits 0-4) as exact f32 values: normal codes
    through the FP8 type of the same mantissa width, subnormal ones as code * 2^-m."""
    f8, first_normal, quanta = _FP6_VIA_FP8[dtype]
    code = jnp.asarray(code, jnp.uint8)
    c = code & 31
    normal = lax.convert_element_type(lax.bitcast_convert_type(c + _FP6_TO_FP8_BITS, f8),
                                      jnp.float32)
    mag = jnp.where(c >= first_normal, normal,
                    lax.convert_element_type(c, jnp.float32) * jnp.float32(1 / quanta))
    return jnp.where((code & 32) != 0, -mag, mag)


def fp6_encode(x: Array, dtype: str) -> Array:
    """round_to_nearest_float<f32, fp6>: the nearest FP6 value, ties to the even code,
    saturating at the largest magnitude (FP6 has no infinity; NaN gives the largest too).

    In the normal range the FP8 type of the same mantissa width rounds alike (its conversion
    rounds to nearest even; beyond the FP6 range it gives larger codes, NaN or infinity: all
    saturate); below it the FP6 grid is uniform, code = round_half_even(|x| * 2^m)."""
    f8, first_normal, quanta = _FP6_VIA_FP8[dtype]
    mag = jnp.abs(jnp.asarray(x, jnp.float32))
    via_f8 = lax.bitcast_convert_type(lax.convert_element_type(mag, f8), jnp.uint8)
    normal = jnp.minimum(via_f8 - _FP6_TO_FP8_BITS, 31)  # uint8: no code lies below 48
    sub = lax.convert_element_type(lax.round(mag * jnp.float32(quanta),
                                             lax.RoundingMethod.TO_NEAREST_EVEN), jnp.uint8)
    code = jnp.where(mag >= jnp.float32(first_normal / quanta), normal, sub)
    code = jnp.where(jnp.isnan(mag), jnp.uint8(31), code)
    return code | jnp.where(jnp.signbit(x), jnp.uint8(32), jnp.uint8(0))


def to_block_value(x: Array, out_t: str) -> Array:
    """round_to_nearest_float<f32, out_t>: f32 -> a block element type (MXINT8: its code)."""
    if out_t == "MXINT8":
        return jnp.clip(jnp.round(x * 64), -127, 127).astype(jnp.int8)
    if out_t in CODE_TYPES:
        return fp6_encode(x, out_t)
    return x.astype(DEVICE_DTYPES[out_t])


def block_value_f32(x: Array, in_t: str) -> Array:
    """Block element values (MXINT8 and FP6 codes included) as f32, exactly."""
    if in_t == "MXINT8":
        return mxint8_value(x)
    if in_t in CODE_TYPES:
        return fp6_decode(x, in_t)
    return jnp.asarray(x).astype(jnp.float32)


# ----------------------------------------------------------------------------- INT64 (EXT-INT64)
# TOSA 1.1's int64_t arithmetic on ``Wide`` pairs: the same words as INT48, all 64 bits used.
# Every function wraps modulo 2^64 where the pseudocode's overflow is a REQUIRE failure.


def as_wide(x: Any) -> Wide:
    """A Wide of JAX arrays (numpy constants are moved to JAX)."""
    return Wide(jnp.asarray(x.hi, I32), jnp.asarray(x.lo, U32))


def wide_broadcast(*xs: Wide) -> list[Wide]:
    shape = jnp.broadcast_shapes(*(jnp.shape(x.hi) for x in xs))
    return [Wide(jnp.broadcast_to(x.hi, shape), jnp.broadcast_to(x.lo, shape)) for x in xs]


def wide_lt(a: Wide, b: Wide) -> Array:
    """Signed a < b."""
    return (a.hi < b.hi) | ((a.hi == b.hi) & (a.lo < b.lo))


def wide_eq(a: Wide, b: Wide) -> Array:
    return (a.hi == b.hi) & (a.lo == b.lo)


def wide_bitwise(a: Wide, b: Wide, f: Any) -> Wide:
    return Wide(f(a.hi, b.hi), f(a.lo, b.lo))


def wide_shl_var(a: Wide, s: Array) -> Wide:
    """Shift left by 0 <= s <= 63 per element (bits shifted out of the top are lost)."""
    s = jnp.broadcast_to(as_i32(s), a.hi.shape)
    big = s >= 32
    small = jnp.where(big, 0, s).astype(U32)
    hi_u = bitcast_u32(a.hi)
    # (lo >> 1) >> (31 - s) is lo >> (32 - s) without a 32-bit shift when s == 0
    hi_small = (hi_u << small) | ((a.lo >> 1) >> (31 - small))
    hi_big = a.lo << jnp.where(big, s - 32, 0).astype(U32)
    return Wide(bitcast_i32(jnp.where(big, hi_big, hi_small)),
                jnp.where(big, jnp.uint32(0), a.lo << small))


def wide_srl_var(a: Wide, s: Array) -> Wide:
    """Logical shift right by 0 <= s <= 63 per element."""
    s = jnp.broadcast_to(as_i32(s), a.hi.shape)
    big = s >= 32
    small = jnp.where(big, 0, s).astype(U32)
    hi_u = bitcast_u32(a.hi)
    lo_small = (a.lo >> small) | ((hi_u << 1) << (31 - small))
    lo_big = hi_u >> jnp.where(big, s - 32, 0).astype(U32)
    return Wide(bitcast_i32(jnp.where(big, jnp.uint32(0), hi_u >> small)),
                jnp.where(big, lo_big, lo_small))


def wide_mul64(a: Wide, b: Wide) -> Wide:
    """The low 64 bits of a 64 x 64 product (two's complement: signedness does not matter)."""
    a, b = wide_broadcast(a, b)
    hi, lo = _mul_u32(a.lo, b.lo)
    cross = bitcast_u32(a.hi) * b.lo + a.lo * bitcast_u32(b.hi)
    return Wide(bitcast_i32(hi + cross), lo)


def wide_abs(a: Wide) -> Wide:
    return wide_select(a.hi < 0, wide_neg(a), a)


def wide_clz(a: Wide) -> Wide:
    """count_leading_zeros of a 64-bit value, as a Wide (0..64)."""
    n = jnp.where(a.hi != 0, count_leading_zeros(a.hi), 32 + count_leading_zeros(bitcast_i32(a.lo)))
    return wide(n)


def wide_divide(a: Wide, b: Wide) -> Wide:
    """apply_intdiv_s for int64: C division, truncating toward zero (b == 0 and MIN / -1 are
    REQUIRE failures). Restoring long division of the magnitudes, one bit per step."""
    a, b = wide_broadcast(a, b)
    negative = (a.hi < 0) != (b.hi < 0)
    n, d = wide_abs(a), wide_abs(b)  # as unsigned 64-bit values (|MIN| stays 2^63)
    zero = jnp.zeros_like(n.lo)
    q = Wide(bitcast_i32(zero), zero)
    r = Wide(bitcast_i32(zero), zero)

    def ge_u(x: Wide, y: Wide) -> Array:  # unsigned x >= y
        xh, yh = bitcast_u32(x.hi), bitcast_u32(y.hi)
        return (xh > yh) | ((xh == yh) & (x.lo >= y.lo))

    def step(i: Any, qr: tuple[Wide, Wide]) -> tuple[Wide, Wide]:
        q, r = qr
        bit = 63 - i
        nbit = jnp.where(bit >= 32, bitcast_u32(n.hi) >> jnp.maximum(bit - 32, 0).astype(U32),
                         n.lo >> jnp.minimum(bit, 31).astype(U32)) & 1
        r = wide_shl(r, 1)
        r = Wide(r.hi, r.lo | nbit)
        take = ge_u(r, d)
        r = wide_select(take, wide_sub(r, d), r)
        q = wide_shl(q, 1)
        q = Wide(q.hi, q.lo | take.astype(U32))
        return q, r

    q, _ = lax.fori_loop(0, 64, step, (q, r))
    return wide_select(negative, wide_neg(q), q)


def wide_reduce_sum(x: Wide, axis: int) -> Wide:
    """Sum along ``axis`` modulo 2^64: the high words, and the low words in 16-bit halves."""
    hi = wide_sum32(x.hi, axis)  # only its low word survives << 32
    lo_hi = wide_sum32(bitcast_i32(x.lo >> 16), axis)
    lo_lo = wide_sum32(bitcast_i32(x.lo & 0xFFFF), axis)
    total = wide_add(Wide(bitcast_i32(hi.lo), jnp.zeros_like(hi.lo)), lo_lo)
    return wide_add(total, wide_shl(lo_hi, 16))


def wide_reduce_extreme(x: Wide, axis: int, largest: bool) -> Wide:
    """REDUCE_MAX / REDUCE_MIN along ``axis`` (keeps the axis, as the spec's output does)."""
    def pick(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
        wa, wb = Wide(*a), Wide(*b)
        take_b = wide_lt(wa, wb) if largest else wide_lt(wb, wa)
        return jnp.where(take_b, b[0], a[0]), jnp.where(take_b, b[1], a[1])

    init = ((jnp.int32(-(1 << 31)), jnp.uint32(0)) if largest
            else (jnp.int32((1 << 31) - 1), jnp.uint32(0xFFFFFFFF)))
    hi, lo = lax.reduce((jnp.asarray(x.hi), jnp.asarray(x.lo)), init, pick, (axis,))
    return Wide(jnp.expand_dims(hi, axis), jnp.expand_dims(lo, axis))


# ----------------------------------------------------------------------------- float accumulation


def sequential_sum(x: Array, axis: int, acc_dtype: Any) -> Array:
    """``acc = 0; for each index along axis: acc = acc + value`` in index order, rounded to
    ``acc_dtype`` after every add (keepdims): the spec's REDUCE_SUM loop, as the reference model
    runs it. For FP16 (acc_t fp16) a tree sum, or one in a wider type, differs by ulps that add
    up over a long axis. The partial sum is a loop carry, so XLA cannot keep excess precision
    between adds."""
    xs = jnp.moveaxis(jnp.asarray(x), axis, 0).astype(acc_dtype)

    def add(acc: Array, value: Array) -> tuple[Array, None]:
        return acc + value, None

    acc, _ = lax.scan(add, jnp.zeros(xs.shape[1:], acc_dtype), xs)
    return jnp.expand_dims(acc, axis)
