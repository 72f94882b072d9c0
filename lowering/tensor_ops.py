"""Tensor operators (spec chapter "Tensor Operators"): ARGMAX, AVG_POOL2D, CONV2D, CONV3D,
DEPTHWISE_CONV2D, MATMUL, MAX_POOL2D, TRANSPOSE_CONV2D.

Integer sums are exact. The convolutions share one core (``_ConvGeometry`` / ``_int_conv``):

* every convolution is a correlation over an explicitly padded input with a weight in the
  canonical layout ``[spatial..., I, O]`` (TRANSPOSE_CONV2D: the input dilated by the stride and
  the kernel flipped). Padding positions hold ``input_zp`` in the raw domain, so that they
  contribute zero after the zero point is subtracted, as the pseudocode's out-of-bounds reads do;
* int8 inputs (with int8 or int4 weights) accumulate in int32: one int8 x int8 convolution with
  ``preferred_element_type=int32`` and the zero points folded out algebraically,
  ``sum (x - zp)(w - wzp) = sum x w - wzp sum x - zp sum w + K zp wzp``. The int32 accumulator
  may not overflow (apply_add_s REQUIREs it), so two's-complement wrap-around in the partial
  sums still gives the exact result;
* int16 inputs accumulate in INT48: the input splits into a signed high byte and an unsigned low
  byte, ``x = 256 hi + lo`` (the low byte held as the int8 ``lo - 128``, i.e. with a zero point
  of -128, so both halves use the same int8 x int8 correlations); each partial sum is exact in
  int32 as long as its contraction is short enough (checked from the static shapes, and split
  into slices of the kernel and input channels when not), and the parts are combined as
  ``numerics.Wide``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.errors import TosaValidationError
from tosa_jax.ir import FLOAT_TYPES, BlockScaled
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import (
    DEVICE_DTYPES,
    INT_RANGES,
    Wide,
    apply_scale_32,
    as_i32,
    as_wide,
    block_dequantize,
    block_dequantize_host,
    cpu_dot,
    filled,
    int_dot_general,
    lax_sum,
    lx,
    offcpu_int_dot,
    on_cpu_else,
    reciprocal_scale,
    reduce_identity,
    saturate_cast,
    stop_reshapes,
    stops_reshapes,
    wide,
    wide_add,
    wide_from_numpy,
    wide_mul32,
    wide_reduce_extreme,
    wide_shl,
    wide_sub,
    wide_sum32,
)

_I32_MAX = (1 << 31) - 1


def _wrap32(v: Any) -> Any:
    """A Python integer (or int64 array) reduced to the int32 range modulo 2**32 (the value
    int32 math holds)."""
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _const_eval(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, computed now (a host constant) when every argument is a host constant, so
    that XLA never sees, or folds, a computation on constants (slow, and not always exact)."""
    if all(isinstance(a, np.ndarray) for a in args):
        with jax.ensure_compile_time_eval():
            return np.asarray(fn(*args))
    return fn(*args)


def _int32_sum(x: Any, axis: int) -> Any:
    """The int32 sum of ``x`` along ``axis`` (kept), modulo 2**32: with numpy for a host
    constant (a MATMUL's constant operand), where JAX would compile and run programs while the
    graph is traced."""
    if isinstance(x, np.ndarray):
        return np.sum(x.astype(np.int32), axis=axis, keepdims=True, dtype=np.int32)
    return lax_sum(as_i32(x), axis, jnp.int32)


def _times(v: Any, k: int) -> Any:
    """int32 ``v * k`` (modulo 2**32): with numpy for a host constant ``v``."""
    return v * np.int32(k) if isinstance(v, np.ndarray) else lx(lax.mul, v, np.int32(k))


def _scalar(node: Node, index: int, value: Any) -> int | float:
    """A zero point: a compile-time constant [1] tensor, as a Python number.

    EXT-DYNAMIC lets it arrive at run time; a floating-point zero point must be 0 (ERROR_IF in
    every operator that takes one), so a run-time one is taken as the 0 it has to be."""
    if node.inputs[index].dtype in FLOAT_TYPES and not isinstance(value, np.ndarray):
        return 0.0
    if not isinstance(value, np.ndarray):
        # an integer one: only int8 may be non-zero (ERROR_IF), so any other type's is the 0
        # it has to be; an int8 one stays a traced int32 scalar (see _dynamic_zp_conv)
        if node.inputs[index].dtype != "INT8":
            return 0
        return as_i32(jnp.asarray(value).reshape(-1)[0])
    v = constant(node, index, value).reshape(-1)[0]
    return float(v) if node.inputs[index].dtype in FLOAT_TYPES else int(v)


def _zero_points(node: Node, zps: list[tuple[str, int, Any]]) -> list[int | float]:
    """Each zero point (name, input index, value) as a number; their ERROR_IFs are profiles/'."""
    return [_scalar(node, index, value) for _name, index, value in zps]


# ----------------------------------------------------------------------------- convolution core


@dataclass(frozen=True)
class _ConvGeometry:
    """A correlation over an explicitly padded input: static description for lax."""

    pads: tuple[tuple[int, int], ...]  # per spatial dim (low, high), applied after dilation
    lhs_dilation: tuple[int, ...]  # input dilation (TRANSPOSE_CONV2D's stride), else 1
    strides: tuple[int, ...]
    dilation: tuple[int, ...]  # kernel dilation
    groups: int  # feature_group_count (DEPTHWISE_CONV2D: C)
    out_spatial: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.strides)

    def specs(self) -> tuple[str, str, str]:
        sp = "DHW"[3 - self.rank:]
        return f"N{sp}C", f"{sp}IO", f"N{sp}C"


def _pad_input(x: Any, value: int | float, g: _ConvGeometry) -> Any:
    """Zero-point padding of the raw input (and, for TRANSPOSE_CONV2D, the stride's holes)."""
    config = [(0, 0, 0)] + [(lo, hi, e - 1) for (lo, hi), e in zip(g.pads, g.lhs_dilation)]
    config.append((0, 0, 0))
    if all(c == (0, 0, 0) for c in config):
        return x
    return lax.pad(x, np.asarray(value, x.dtype), config)  # (a numpy scalar traces faster)


# A convolution of few input channels over a large output runs as one matrix product over
# gathered patches (im2col): XLA CPU's convolution kernels handle a contraction of 3 channels
# badly. Measured on this machine (int8, batch 1): ResNet's 7x7/2 stem on 224x224x3 9.5 -> 2.6 ms
# of CPU, MobileNetV2's 3x3/2 stem 1.8 -> 0.6 ms; cnn_int8's 3x3/2 stem on 32x32x3, min of 300
# calls: 51 -> 22 us (not at 8x8 outputs: 14 -> 17 us). Since the patches are gathered one axis at
# a time (_im2col_conv), float ones gain from 16x16 outputs on too (cnn_fp32's stem, the whole
# graph: 0.08-0.13 -> 0.04-0.10 ms, separate processes, 2026-11-26). A stride-1 convolution over
# space-to-depth blocks, tried for the strided ones, was no faster.
_IM2COL_MAX_CHANNELS = 4
_IM2COL_MIN_POSITIONS = 256
# But the patches are a copy of the input taps times over, written a few channels at a time,
# and for a float convolution with many taps that copy costs more than XLA's own convolution
# (Eigen's, which packs its operands itself): ResNet's FP32 7x7/2 stem, 1.8 M patch elements a
# sample, 2.3-2.4 ms a call on im2col (1.5 of them the patches) against 1.4 ms direct; the whole
# resnet_fp32 8.2 -> 7.1 ms at batch 1 (Xeon, AVX-512, 2026-11-28). The 3x3 stems (MobileNetV2's
# 0.34 M elements, cnn_fp32's) are as fast or faster on im2col. Integer ones keep it at any size:
# Eigen's integer convolutions are far slower (above). Counted a sample: both costs scale with N.
_IM2COL_MAX_FLOAT_PATCHES = 1 << 20


def _np_or_jnp(w: Any) -> Any:
    """numpy for a constant (computed now, once), else jax.numpy."""
    return np if isinstance(w, np.ndarray) else jnp


def _weight_matrix(w: Any) -> tuple[Any, int]:
    """A canonical [spatial..., I, O] weight as a matrix and the dimension to contract: a
    constant that is a view of TOSA's [O, spatial..., I] (_canonical_weight) as its [O, K]
    rows, so that no transposed copy of the weights is made (a constant's bytes are copied into
    the program as they are laid out: MobileNetV2's 13.6 MB of transposed 1x1 weights took 13 ms
    of its tracing); else [K, O]."""
    if isinstance(w, np.ndarray):
        rows = np.moveaxis(w, -1, 0)
        if rows.flags.c_contiguous:
            return rows.reshape(rows.shape[0], -1), 1
    return _np_or_jnp(w).reshape(w, (-1, w.shape[-1])), 0


def _patches(x: Any, kernel: tuple[int, ...], g: _ConvGeometry) -> Any:
    """The padded input's windows as [N, O-spatial..., k1, k2, ..., C]."""
    # One spatial axis at a time: its taps' strided slices stacked on a new axis before the
    # channels, [N, O1, X2, k1, C] then [N, O1, O2, k1, k2, C]. XLA CPU compiles a slice per
    # tap of all axes at once (concatenated) as one kernel per tap: ResNet's 7x7 stem took 49
    # kernels, ~0.6 s of compile and 3-4 ms a call for its patches; per axis, 3 kernels, 78 ms
    # and 0.8 ms (the same values).
    patches = x
    for axis, (k, d, s, o) in enumerate(zip(kernel, g.dilation, g.strides, g.out_spatial),
                                        start=1):
        limit = list(patches.shape)
        taps = []
        for p in range(k):
            limit[axis] = p * d + (o - 1) * s + 1
            start = [0] * patches.ndim
            start[axis] = p * d
            strides = [1] * patches.ndim
            strides[axis] = s
            tap = lax.slice(patches, start, limit, strides)
            taps.append(lax.expand_dims(tap, (tap.ndim - 1,)))
        patches = lax.concatenate(taps, patches.ndim - 1)
    return patches


def _im2col_conv(x: Any, w: Any, g: _ConvGeometry, acc: Any, precision: Any) -> Any:
    """The correlation as [N, O-spatial..., taps * I] patches times the [taps * I, O] weight
    (patch order: kernel position, then channel, as the weight's row-major reshape)."""
    patches = _patches(x, w.shape[:g.rank], g)
    patches = lax.reshape(patches, (*patches.shape[:1 + g.rank],
                                    math.prod(patches.shape[1 + g.rank:])))
    matrix, k = _weight_matrix(w)
    return cpu_dot(patches, matrix, (((x.ndim - 1,), (k,)), ((), ())), acc, precision)


def _gemm_conv(x: Any, w: Any, g: _ConvGeometry, acc: Any) -> Any:
    """Any correlation (grouped too) as a matrix product over its patches, the form that runs
    off the CPU where XLA would give cuDNN a convolution it cannot take (numerics.on_cpu_else):
    integers as numerics.offcpu_int_dot (exact BF16 products of int8 operands), floats in the
    accumulator type."""
    r = g.rank
    taps, cg, oc = math.prod(w.shape[:r]), w.shape[r], w.shape[r + 1]
    patches = _patches(x, w.shape[:r], g)
    out = patches.shape[1:1 + r]
    # [N, O..., T, G, Cg] x [T, Cg, G, M], batched over the groups (output channel g * M + m
    # reads the input channels of group g, as lax's feature_group_count)
    patches = lax.reshape(patches, (x.shape[0], *out, taps, g.groups, cg))
    w = jnp.asarray(w).reshape(taps, cg, g.groups, oc // g.groups)
    dims = (((r + 1, r + 3), (0, 1)), ((r + 2,), (2,)))
    if jnp.issubdtype(acc, jnp.integer):
        y = offcpu_int_dot(patches, w, dims)  # [G, N, O..., M]
    else:
        y = lax.dot_general(patches.astype(acc), w.astype(acc), dims,
                            precision=lax.Precision.HIGHEST, preferred_element_type=acc)
    y = jnp.moveaxis(y, 0, -2)
    return lax.reshape(y, (*y.shape[:-2], oc))


def _pointwise_conv(x: Any, w: Any, g: _ConvGeometry, acc: Any, precision: Any) -> Any:
    """A kernel of one tap: every (strided) input position times the [I, O] weight."""
    n, c = x.shape[0], x.shape[-1]
    stop = tuple((o - 1) * s + 1 for o, s in zip(g.out_spatial, g.strides))
    if x.shape[1:-1] != stop or any(s != 1 for s in g.strides):
        x = lax.slice(x, (0,) * x.ndim, (n, *stop, c), (1, *g.strides, 1))
    matrix, k = _weight_matrix(w)
    return cpu_dot(x, matrix, (((x.ndim - 1,), (k,)), ((), ())), acc, precision)


def _conv(x: Any, w: Any, g: _ConvGeometry, acc: Any, gemm_off_cpu: bool = False) -> Any:
    """VALID correlation of the padded input with a canonical [spatial..., I, O] weight.
    Integer ones (and ``gemm_off_cpu``: FP8 operands) run as _gemm_conv off the CPU."""
    if jnp.issubdtype(acc, jnp.integer) or gemm_off_cpu:
        # the weight stays what it is (a numpy constant is laid out once, _weight_matrix)
        return on_cpu_else(lambda a: _cpu_conv(a, w, g, acc),
                           lambda a: _gemm_conv(a, w, g, acc), x)
    return _cpu_conv(x, w, g, acc)


def _cpu_conv(x: Any, w: Any, g: _ConvGeometry, acc: Any) -> Any:
    precision = lax.Precision.HIGHEST if jnp.issubdtype(acc, jnp.floating) else None
    # One tap (1x1 kernels: transformer linears, MobileNet's pointwise convolutions): a matrix
    # product, which XLA CPU runs through its GEMM rather than its convolution kernels.
    # Measured on this machine, batch 1, min of 150 interleaved calls: bert_tiny_fp32
    # 3.04 -> 2.05 ms, mobilenetv2_fp32 13.2 -> 11.5, mobilenetv2_int8 11.7 -> 10.1.
    if g.groups == 1 and all(d == 1 for d in g.lhs_dilation) and math.prod(w.shape[:g.rank]) == 1:
        return _pointwise_conv(x, w, g, acc, precision)
    if (g.groups == 1 and all(d == 1 for d in g.lhs_dilation)
            and 1 < math.prod(w.shape[:g.rank]) <= _TAPS_MAX
            and w.shape[g.rank] <= _IM2COL_MAX_CHANNELS
            and math.prod(g.out_spatial) >= _IM2COL_MIN_POSITIONS
            and (jnp.issubdtype(acc, jnp.integer)
                 or math.prod(g.out_spatial) * math.prod(w.shape[:g.rank + 1])
                 <= _IM2COL_MAX_FLOAT_PATCHES)):
        return _im2col_conv(x, w, g, acc, precision)
    return lax.conv_general_dilated(
        x, w, window_strides=g.strides, padding=[(0, 0)] * g.rank, rhs_dilation=g.dilation,
        dimension_numbers=g.specs(), feature_group_count=g.groups,
        preferred_element_type=acc, precision=precision)


def _weight_bound(w: Any, weight_t: str, wzp: int) -> int:
    """max |w - wzp|: from the values of a constant weight, else from the type's range."""
    if isinstance(w, np.ndarray):
        return int(np.max(np.abs(w.astype(np.int64) - wzp), initial=0))
    lo, hi = INT_RANGES[weight_t]
    return max(abs(lo - wzp), abs(hi - wzp))


def _boxes(w_shape: tuple[int, ...], g: _ConvGeometry, limit: int) -> list[tuple[slice, ...]]:
    """Split the contraction (kernel positions x input channels) into boxes of at most ``limit``
    terms, halving the longest splittable axis (input channels only when not grouped)."""
    nsp = g.rank
    todo = [tuple(slice(0, n) for n in w_shape[:nsp + 1])]
    done = []
    while todo:
        box = todo.pop()
        sizes = [s.stop - s.start for s in box]
        if math.prod(sizes) <= limit:
            done.append(box)
            continue
        axes = range(nsp + 1) if g.groups == 1 else range(nsp)
        axis = max(axes, key=lambda a: sizes[a])
        if sizes[axis] == 1:
            raise AssertionError("contraction cannot be split further")  # limit >= 1 always
        mid = box[axis].start + sizes[axis] // 2
        for part in (slice(box[axis].start, mid), slice(mid, box[axis].stop)):
            todo.append(box[:axis] + (part,) + box[axis + 1:])
    return done


def _box_conv(xp: Any, w: Any, box: tuple[slice, ...], g: _ConvGeometry, acc: Any) -> Any:
    """The correlation restricted to the kernel positions and input channels of ``box``:
    kernel offset a along a spatial dim reads the padded input from a * dilation on."""
    if all(b.start == 0 and b.stop == n for b, n in zip(box, w.shape)):
        return _conv(xp, w, g, acc)
    return _conv(_box_input(xp, box, g), w[box], g, acc)


def _box_input(xp: Any, box: tuple[slice, ...], g: _ConvGeometry) -> Any:
    """The part of the padded input that the kernel positions and channels of ``box`` read."""
    nsp = g.rank
    x_index = [slice(None)]
    for i in range(nsp):
        k = box[i].stop - box[i].start
        start = box[i].start * g.dilation[i]
        x_index.append(slice(start, start + (g.out_spatial[i] - 1) * g.strides[i]
                             + (k - 1) * g.dilation[i] + 1))
    x_index.append(box[nsp] if g.groups == 1 else slice(None))
    return xp[tuple(x_index)]


def _window_sum(xp: Any, box: tuple[slice, ...], g: _ConvGeometry) -> Any:
    """sum of the input over the window positions of ``box`` and the group's input channels:
    [N, O-spatial..., groups], modulo 2**32 (channels summed first, then a window sum)."""
    nsp = g.rank
    xs = as_i32(_box_input(xp, box, g))
    xs = xs.reshape(xs.shape[:-1] + (g.groups, xs.shape[-1] // g.groups))
    xs = jnp.sum(xs, axis=-1, dtype=jnp.int32)
    k = tuple(b.stop - b.start for b in box[:nsp])
    return lax.reduce_window(xs, np.int32(0), lax.add, (1, *k, 1), (1, *g.strides, 1), "VALID",
                             window_dilation=(1, *g.dilation, 1))


def _box_sum_w(w: Any, box: tuple[slice, ...], nsp: int, wzp: int) -> Any:
    """sum of (w - wzp) over the kernel positions and input channels of ``box``, per output
    channel, modulo 2**32 (numpy for a constant weight)."""
    axes = tuple(range(nsp + 1))
    if isinstance(w, np.ndarray):
        part = w[box]
        count = math.prod(part.shape[a] for a in axes)
        # exact in int64 (|total| < 2**63), without an int64 copy of the weight; in int32 where
        # no sum of the whole weight can reach 2**31 (numpy's int32 loops: ~60% of the time)
        exact = part.dtype.itemsize <= 2 and part.size << (8 * part.dtype.itemsize) < 1 << 31
        total = (np.sum(part, axis=axes, dtype=np.int32 if exact else np.int64).astype(np.int64)
                 - np.int64(wzp) * count)
        return _wrap_i32(total)
    return jnp.sum(as_i32(w[box]) - wzp, axis=axes, dtype=jnp.int32)


def _zp_box_sum(xp: Any, w: Any, box: tuple[slice, ...], g: _ConvGeometry, zp: Any,
                wzp: int, bias: np.ndarray | None = None) -> Any:
    """sum over ``box`` of (xp - zp) * (w - wzp) modulo 2**32, from int8 x int8 correlations:
    sum x w - wzp sum x - zp sum (w - wzp). ``zp`` may vary along the batch axis. ``bias``: a
    constant int32 bias added too, with the constant term (one operation, not two)."""
    nsp = g.rank
    oc = w.shape[nsp + 1]
    acc = _const_eval(lambda a, b: _box_conv(a, b, box, g, jnp.int32), xp, w)
    if wzp != 0:
        # sum x over the window and the group's input channels, one value per group
        # (repeated over the group's output channels).
        window = _const_eval(lambda a: _window_sum(a, box, g), xp)
        if g.groups > 1:
            window = jnp.repeat(window, oc // g.groups, axis=-1)
        acc = acc - wzp * window
    if not (isinstance(zp, int) and zp == 0):
        sum_w = _box_sum_w(w, box, nsp, wzp)
        if isinstance(zp, int) and isinstance(sum_w, np.ndarray) and isinstance(acc, jax.Array):
            # bias - zp * sum (w - wzp) modulo 2**32, a constant per output channel
            zw = (0 if bias is None else bias.astype(np.int64)) - zp * sum_w.astype(np.int64)
            return lx(lax.add, acc, _wrap_i32(zw))
        acc = acc - zp * jnp.asarray(sum_w)
    return acc if bias is None else _add_bias_i32(acc, bias)


def _add_bias_i32(acc: Any, bias: np.ndarray) -> Any:
    """An int32 accumulator plus a constant bias (wrapping: apply_add_s REQUIREs no overflow)."""
    if isinstance(acc, jax.Array):
        return lx(lax.add, acc, bias.astype(np.int32))
    return acc + jnp.asarray(bias, jnp.int32)


def _wrap_i32(v: np.ndarray) -> np.ndarray:
    """int64 values modulo 2**32 as int32 (the accumulator's wrapping sums): ``_wrap32``."""
    return np.asarray(_wrap32(np.asarray(v, np.int64))).astype(np.int32)


def _int_conv(node: Node, x: Any, w: Any, g: _ConvGeometry, zp: int, wzp: int,
              bias: np.ndarray | None = None) -> Any:
    """Exact sum over the window of (x - zp) * (w - wzp): int32 for int8 inputs, Wide for int16.

    ``w`` is canonical [spatial..., I, O] (numpy when constant). Returns [N, O-spatial..., OC].
    All correlations are int8 x int8 with int32 accumulation (the fast form on every backend).
    ``bias``: a constant int32 bias of an int8 input, added with the zero point's term.
    """
    in_t, weight_t = node.inputs[0].dtype, node.inputs[1].dtype
    nsp = g.rank
    full = tuple(slice(0, n) for n in w.shape[:nsp + 1])

    if in_t == "INT8":
        # Padding holds input_zp, so it adds zero once the zero point is folded out. The int32
        # accumulator may not overflow (REQUIRE), so wrap-around partial sums are exact.
        xp = _const_eval(lambda a: _pad_input(a, zp, g), x)
        return _zp_box_sum(xp, w, full, g, zp, wzp, bias)

    # INT16 x INT8 -> INT48 (input_zp is 0 by ERROR_IF). x = 256 * hi + lo, hi the signed high
    # byte and lo the unsigned low byte, stored as the int8 lo - 128 (a zero point of -128).
    # Each half's sum over a box of K terms is at most K * 255 * max|w - wzp| in magnitude:
    # exact in int32 (modulo 2**32 arithmetic included) when that is below 2**31, else the
    # contraction is split into boxes that are, and the boxes are added as Wide.
    def split(a: Any) -> Any:
        xp = _pad_input(a, 0, g)
        hi = (xp >> 8).astype(jnp.int8)
        lo = ((xp & 0xFF) - 128).astype(jnp.int8)
        return jnp.concatenate([hi, lo], axis=0)  # one correlation for both halves

    n = x.shape[0]
    parts = _const_eval(split, x)
    half_zp = np.concatenate([np.zeros(n, np.int32), np.full(n, -128, np.int32)])
    half_zp = half_zp.reshape((2 * n,) + (1,) * (nsp + 1))
    bound = 255 * max(_weight_bound(w, weight_t, wzp), 1)
    total: Wide | None = None
    for box in _boxes(tuple(w.shape), g, max(_I32_MAX // bound, 1)):
        s = _zp_box_sum(parts, w, box, g, half_zp, wzp)
        part = wide_add(wide_shl(wide(s[:n]), 8), wide(s[n:]))
        total = part if total is None else wide_add(total, part)
    assert total is not None
    return total


def _dynamic_zp_conv(node: Node, x: Any, w: Any, g: _ConvGeometry, zp: Any, wzp: Any) -> Any:
    """EXT-DYNAMIC: the sum over the window of (x - zp) * (w - wzp) with run-time zero points.

    int8 input: (x - zp) and (w - wzp) as int32 (9 bits each), padding 0 once the zero point is
    out, one int32 correlation; exact, as the int32 accumulator may not overflow (REQUIRE).
    int16 input: input_zp is 0 (ERROR_IF), so sum x (w - wzp) = sum x w - wzp sum x, the first
    as _int_conv does it, the window sum of x in int32 (exact while kernel volume * IC < 2**16)
    and its product with wzp in 64 bits.
    """
    if node.inputs[0].dtype == "INT8":
        xp = _pad_input(as_i32(x) - zp, 0, g)
        return _conv(xp, as_i32(w) - wzp, g, jnp.int32)
    acc = _int_conv(node, x, w, g, 0, 0)
    full = tuple(slice(0, n) for n in w.shape[:g.rank + 1])
    window = _window_sum(_pad_input(jnp.asarray(x), 0, g), full, g)
    if g.groups > 1:
        window = jnp.repeat(window, w.shape[-1] // g.groups, axis=-1)
    return wide_sub(acc, wide_mul32(window, jnp.broadcast_to(as_i32(wzp), window.shape)))


_TAPS_MAX = 64  # kernels up to 8x8 as a sum of taps; larger ones as a grouped convolution


def _depthwise_taps(x: Any, w: Any, g: _ConvGeometry, zp: int | float, wzp: int | float,
                    floating: bool, acc_t: str, bias: np.ndarray | None = None) -> Any:
    """DEPTHWISE_CONV2D as the sum over the kernel taps of a strided window of the padded input
    times that tap's per-channel weight: one fused elementwise loop. XLA CPU runs a grouped
    convolution as a generic loop, 5x (16x16x16) to 70x (112x112x32) slower than this.

    ``w`` is the TOSA [KH, KW, C, M] weight. Integers: (x - zp) and (w - wzp) as int32, their
    products and sums modulo 2**32, exact because the int32 result may not overflow (REQUIRE)
    and padding (0 once the zero point is out) adds nothing. Floats: the products and sums in
    the accumulator type, as the convolution would.

    ``bias``: a constant int32 bias of integers, added. With a constant weight and input zero
    point, the padding holds the zero point and zp * sum (w - wzp) is taken from the bias:
    sum (x - zp)(w - wzp) = sum x (w - wzp) - zp sum (w - wzp), one operation fewer."""
    kh, kw, c, m = w.shape
    fold = (bias is not None and not floating and isinstance(zp, int) and zp != 0
            and isinstance(w, np.ndarray) and not isinstance(x, np.ndarray)
            and isinstance(wzp, int))

    def taps(x: Any, w: Any) -> Any:
        # lax on a traced input: one equation a step (jax.numpy's wrappers cost ~10x to trace);
        # a constant weight is prepared in numpy, each tap's weights a broadcast constant
        host = (isinstance(w, np.ndarray) and not isinstance(x, np.ndarray)
                and isinstance(wzp, int | float))
        if floating:
            acc = DEVICE_DTYPES[acc_t]
            xs = jnp.asarray(x)
            xs = xs if xs.dtype == acc else lax.convert_element_type(xs, acc)
            ws = w.astype(np.dtype(acc)) if host else jnp.asarray(w).astype(acc)
        else:
            xs = as_i32(x)
            if not fold:
                xs = xs if isinstance(zp, int) and zp == 0 else lx(lax.sub, xs, zp)
            ws = (w.astype(np.int32) - np.int32(wzp)) if host else as_i32(w) - wzp
        config = [(0, 0, 0), (*g.pads[0], 0), (*g.pads[1], 0), (0, 0, 0)]
        xp = lax.pad(xs, np.asarray(zp if fold else 0, xs.dtype), config)
        if m > 1:  # output channel c*M+m reads input channel c
            xp = jnp.repeat(xp, m, axis=-1)
        ws = ws.reshape(kh, kw, c * m)
        (oh, ow), (sy, sx), (dy, dx) = g.out_spatial, g.strides, g.dilation
        total = None
        for i in range(kh):
            for j in range(kw):
                y, x0 = i * dy, j * dx
                window = lax.slice(xp, (0, y, x0, 0),
                                   (xp.shape[0], y + (oh - 1) * sy + 1, x0 + (ow - 1) * sx + 1,
                                    c * m), (1, sy, sx, 1))
                term = lx(lax.mul, window, ws[i, j]) if host else window * ws[i, j]
                total = term if total is None else lax.add(total, term)
        if bias is None:
            return total
        if fold:  # bias - zp * sum (w - wzp) per output channel, modulo 2**32
            offset = bias.astype(np.int64) - zp * ws.reshape(kh * kw, c * m).sum(0, np.int64)
            return lx(lax.add, total, _wrap_i32(offset))
        return _add_bias_i32(total, bias)

    if not (isinstance(zp, int | float) and isinstance(wzp, int | float)):
        return taps(x, w)  # EXT-DYNAMIC zero points: traced, so nothing to compute now
    return _const_eval(taps, x, w)


def _float_conv(x: Any, w: Any, g: _ConvGeometry, acc_t: str) -> Any:
    acc = DEVICE_DTYPES[acc_t]
    fp8 = any(np.dtype(t.dtype).itemsize == 1 for t in (x, w))

    def conv(a: Any, b: Any) -> Any:
        b = (b.astype(np.dtype(acc), copy=False) if isinstance(b, np.ndarray)
             else jnp.asarray(b).astype(acc))
        return _conv(_pad_input(a, 0.0, g).astype(acc), b, g, acc, gemm_off_cpu=fp8)

    return _const_eval(conv, x, w)


def _add_bias(node: Node, acc: Any, bias: Any, channels: int) -> Any:
    """out = static_cast<out_t>(acc) + bias[(BC == 1) ? 0 : oc] (BC is 1 or OC: profiles/)."""
    out_t = node.out.dtype
    if out_t == "INT48":
        b = bias if isinstance(bias, Wide) else wide_from_numpy(np.asarray(bias))
        return wide_add(acc, Wide(jnp.asarray(b.hi), jnp.asarray(b.lo)))
    dtype = DEVICE_DTYPES[out_t]
    # int32: apply_add_s REQUIREs no overflow, so wrapping int32 addition is exact.
    if isinstance(bias, np.ndarray) and isinstance(acc, jax.Array):
        acc = acc if acc.dtype == dtype else lax.convert_element_type(acc, dtype)
        return lx(lax.add, acc, bias.astype(np.dtype(dtype)))
    return acc.astype(dtype) + jnp.asarray(bias, dtype)


def _convolve(node: Node, x: Any, w: Any, bias: Any, zp: Any, wzp: Any, g: _ConvGeometry,
              acc_type: str) -> Any:
    """The shared body of the convolutions, once the weight is canonical."""
    if _floating(node.inputs[0]):
        acc = _float_conv(x, w, g, acc_type)
    elif not (isinstance(zp, int) and isinstance(wzp, int)):
        acc = _dynamic_zp_conv(node, x, w, g, zp, wzp)
    elif (node.inputs[0].dtype == "INT8" and node.out.dtype == "INT32"
          and isinstance(bias, np.ndarray)):
        return _int_conv(node, x, w, g, int(zp), int(wzp), bias)  # its bias: with the zp term
    else:
        acc = _int_conv(node, x, w, g, int(zp), int(wzp))
    return _add_bias(node, acc, bias, node.out.shape[-1])


def _floating(t: Any) -> bool:
    """A float operand: a float type, or a TOSA 1.1 block-scaled one (MXINT8 values too)."""
    return t.dtype in FLOAT_TYPES or t.block_scaled


def _read_operand(node: Node, index: int, x: Any, acc_t: str) -> Any:
    """``tensor_read<T, acc_t>`` of a whole convolution operand that is block-scaled (TOSA 1.1,
    ``BlockScaled``): apply_mul_s<acc_t>(scale, value) per element, exact in f32 (a power of two
    times a value of at most 8 significant bits), rounded to acc_t once. A constant (weights)
    is read in numpy at trace time. Other operands are returned as they are (the convolution
    converts them to acc_t: tensor_read's static_cast)."""
    if not isinstance(x, BlockScaled):
        return x
    t = node.inputs[index]
    acc = DEVICE_DTYPES[acc_t]
    if isinstance(x.values, np.ndarray) and isinstance(x.scales, np.ndarray):
        v = block_dequantize_host(x.values, x.scales, t.dtype, t.block_size)
        return v.astype(np.dtype(acc))
    return _read_scaled(node, index, x, acc_t).astype(acc)


def _check_acc(node: Node, acc_type: str) -> None:
    """acc_type must be the accumulator of the type-support row the tensors select."""
    in_t, w_t, out_t = node.inputs[0].dtype, node.inputs[1].dtype, node.out.dtype
    expected = {("INT8", "INT8"): "INT32", ("INT8", "INT4"): "INT32",
                ("INT16", "INT8"): "INT48"}.get((in_t, w_t))
    if not _floating(node.inputs[0]) and expected is None:
        raise TosaValidationError(f"{node.op}: no type support for in_t {in_t}, weight_t {w_t}")
    if expected is not None and (acc_type != expected or out_t != expected):
        raise TosaValidationError(
            f"{node.op}: in_t {in_t} x weight_t {w_t} needs acc_t and out_t {expected}, "
            f"got acc_type {acc_type}, out_t {out_t}")


def _canonical_weight(w: Any, perm: tuple[int, ...]) -> Any:
    return np.transpose(w, perm) if isinstance(w, np.ndarray) else jnp.transpose(w, perm)


def _forward_geometry(node: Node, spatial_in: tuple[int, ...], kernel: tuple[int, ...],
                      pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                      names: tuple[str, ...], groups: int) -> _ConvGeometry:
    """The geometry of CONV2D, CONV3D and DEPTHWISE_CONV2D (their ERROR_IFs are profiles/')."""
    nsp = len(spatial_in)
    out = node.out.shape[1:1 + nsp]
    return _ConvGeometry(tuple((pad[2 * i], pad[2 * i + 1]) for i in range(nsp)), (1,) * nsp,
                         tuple(stride), tuple(dilation), groups, tuple(out))


def _get_weight(node: Node, w: Any) -> Any:
    """A constant weight stays numpy (so its values can bound the sums); else a JAX array."""
    return w if isinstance(w, np.ndarray) else jnp.asarray(w)


# ----------------------------------------------------------------------------- operators


@lowering("ARGMAX")
@stops_reshapes
def argmax(node: Node, input: Any, *, axis: int, nan_mode: str = "PROPAGATE") -> Any:
    """Index of the first maximum along ``axis``; TOSA 1.1 may ask for an INT64 index."""
    index = _argmax32(node, input, axis=axis, nan_mode=nan_mode)
    return wide(index) if node.out.dtype == "INT64" else index


def _argmax32(node: Node, input: Any, *, axis: int, nan_mode: str = "PROPAGATE") -> Any:
    """Index of the first maximum along ``axis`` (the pseudocode updates only on a change)."""
    if isinstance(input, Wide):
        # INT64 (EXT-INT64): the maximum as a (hi, lo) pair, then the first index holding it.
        # (jnp.asarray of the pair would stack its words into a new leading axis.)
        w = as_wide(input)
        top = wide_reduce_extreme(w, axis, largest=True)  # keeps the axis: broadcasts back
        hit = (w.hi == top.hi) & (w.lo == top.lo)
        return lax.argmax(hit.astype(jnp.int32), axis, jnp.int32)
    x = jnp.asarray(input)
    if jnp.issubdtype(x.dtype, jnp.floating):
        nan = jnp.isnan(x)
        if nan_mode == "IGNORE":
            # NaNs never become the maximum; the index stays 0 when every value is NaN.
            # Ties between -inf and a NaN replaced by -inf resolve to the first real -inf.
            # (widened first: FP8E4M3 has no -inf; every float type here is exact in f32)
            key = jnp.where(nan, -jnp.inf, x.astype(jnp.float32))
            first_real = lax.argmax(~nan, axis, jnp.int32)
            idx = lax.argmax(key, axis, jnp.int32)
            top = jnp.max(key, axis=axis)
            return jnp.where(top == -jnp.inf, jnp.where(jnp.any(~nan, axis=axis), first_real, 0),
                             idx).astype(jnp.int32)
        # PROPAGATE: the first NaN wins, else the first maximum.
        has_nan = jnp.any(nan, axis=axis)
        return jnp.where(has_nan, lax.argmax(nan, axis, jnp.int32),
                         lax.argmax(jnp.where(nan, 0, x), axis, jnp.int32))
    return lax.argmax(x, axis, jnp.int32)


def _pool_geometry(node: Node, kernel: tuple[int, ...], stride: tuple[int, ...],
                   pad: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(N, IH, IW, C) of AVG_POOL2D and MAX_POOL2D (their ERROR_IFs are profiles/')."""
    n, ih, iw, c = node.inputs[0].shape
    return n, ih, iw, c


def _valid_counts(size: int, out: int, stride: int, pad: int, kernel: int) -> np.ndarray:
    """How many kernel positions of each output position fall inside the input (one axis)."""
    start = np.arange(out) * stride - pad
    return np.clip(np.minimum(start + kernel, size) - np.maximum(start, 0), 0, None)


@lowering("AVG_POOL2D")
def avg_pool2d(node: Node, input: Any, input_zp: Any, output_zp: Any, *, kernel: tuple[int, ...],
               stride: tuple[int, ...], pad: tuple[int, ...], acc_type: str) -> Any:
    in_out_t = node.out.dtype
    zp, out_zp = _zero_points(node, [("input_zp", 1, input_zp), ("output_zp", 2, output_zp)])
    _, ih, iw, _ = _pool_geometry(node, kernel, stride, pad)
    _, oh, ow, _ = node.out.shape
    pt, pb, pl, pr = pad
    window = (1, kernel[0], kernel[1], 1)
    strides = (1, stride[0], stride[1], 1)
    padding = ((0, 0), (pt, pb), (pl, pr), (0, 0))
    # count: only positions inside the input count, known before tracing.
    count = np.outer(_valid_counts(ih, oh, stride[0], pt, kernel[0]),
                     _valid_counts(iw, ow, stride[1], pl, kernel[1])).reshape(1, oh, ow, 1)

    if in_out_t in FLOAT_TYPES:
        acc = DEVICE_DTYPES[acc_type]
        x = jnp.asarray(input).astype(acc)
        total = stop_reshapes(lax.reduce_window(x, jnp.zeros((), acc), lax.add, window,
                                                strides, padding))
        return (total / count.astype(acc)).astype(DEVICE_DTYPES[in_out_t])

    if acc_type != "INT32":
        raise TosaValidationError(f"{node.op}: integer inputs need acc_type INT32, got {acc_type}")
    # acc = sum of (value - input_zp) over the valid positions: padding adds nothing (init 0).
    value = as_i32(input)  # zero points: ints, or traced int32 scalars (EXT-DYNAMIC)
    value = value if isinstance(zp, int) and zp == 0 else lx(lax.sub, value, zp)
    # (the sums behind stop_reshapes: a global pooling's is a reduce and a reshape to XLA)
    acc = stop_reshapes(lax.reduce_window(value, np.int32(0), lax.add, window, strides, padding))
    multiplier, shift = reciprocal_scale(count)
    if isinstance(zp, int) and isinstance(out_zp, int):
        # constant zero points: the sum's range (of the input's proven one, else its type's)
        # allows apply_scale_32's short forms, which add the output zero point with the round
        lo, hi = node.input_range(0) or INT_RANGES[node.inputs[0].dtype]
        taps = kernel[0] * kernel[1]
        acc = apply_scale_32(acc, multiplier, shift, False,
                             value_range=(taps * min(lo - zp, 0), taps * max(hi - zp, 0)),
                             out_zp=out_zp)
        return saturate_cast(acc, in_out_t)
    acc = apply_scale_32(acc, multiplier, shift, False)
    if not (isinstance(out_zp, int) and out_zp == 0):  # |scaled average| <= 2**16: no overflow
        acc = lx(lax.add, acc, out_zp)
    return saturate_cast(acc, in_out_t)


def _window(node: Node, kernel: Any, stride: Any, pad: Any) -> tuple[tuple[int, ...], ...]:
    """The kernel, stride and pad shape_t inputs of an ADAPTIVE pooling (compile-time values)."""
    return tuple(tuple(int(v) for v in np.asarray(constant(node, i, x)).reshape(-1))
                 for i, x in ((len(node.inputs) - 3, kernel), (len(node.inputs) - 2, stride),
                              (len(node.inputs) - 1, pad)))


@lowering("AVG_POOL2D_ADAPTIVE")
def avg_pool2d_adaptive(node: Node, input: Any, input_zp: Any, output_zp: Any, kernel: Any,
                        stride: Any, pad: Any, *, acc_type: str) -> Any:
    """TOSA 1.1: AVG_POOL2D with its kernel, stride and pad given as shape_t inputs."""
    k, s, p = _window(node, kernel, stride, pad)
    return avg_pool2d(node, input, input_zp, output_zp, kernel=k, stride=s, pad=p,
                      acc_type=acc_type)


@lowering("MAX_POOL2D_ADAPTIVE")
def max_pool2d_adaptive(node: Node, input: Any, kernel: Any, stride: Any, pad: Any, *,
                        nan_mode: str = "PROPAGATE") -> Any:
    """TOSA 1.1: MAX_POOL2D with its kernel, stride and pad given as shape_t inputs."""
    k, s, p = _window(node, kernel, stride, pad)
    return max_pool2d(node, input, kernel=k, stride=s, pad=p, nan_mode=nan_mode)


def _leftmost_max(acc: Any, value: Any) -> Any:
    """The spec's apply_max_s on values without NaN: ``acc >= value ? acc : value``, so that of
    equal values (-0.0 and +0.0) the earlier one stays, where XLA's max takes +0.0."""
    return lax.select(acc >= value, acc, value)


def _propagate_max(acc: Any, value: Any) -> Any:
    """apply_max_s with nan_mode PROPAGATE over a window, NaN carried along the chain:
    ``acc >= value or acc is NaN ? acc : value`` (a NaN value replaces acc: NaN >= value is
    false), so a window holding a NaN gives NaN and any other the earliest of equal maxima."""
    return lax.select(lax.bitwise_or(lax.ge(acc, value), lax.ne(acc, acc)), acc, value)


def _ignore_max(acc: Any, value: Any) -> Any:
    """apply_max_s with nan_mode IGNORE over a window: ``acc >= value or value is NaN ? acc :
    value``, NaN taken as no value (a NaN acc gives way to any value), so a window gives NaN
    only when every value is NaN."""
    return lax.select(lax.bitwise_or(lax.ge(acc, value), lax.ne(value, value)), acc, value)


def _window_reduce(x: Any, pad_value: Any, op: Any, kernel: tuple[int, ...],
                   stride: tuple[int, ...], pad: tuple[int, ...], out: tuple[int, ...]) -> Any:
    """``op`` (lax.max or lax.bitwise_or; for floats _leftmost_max, _propagate_max or
    _ignore_max) over each window of an [N, H, W, C] tensor, as the spec folds it: row by row
    (ky), each row left to right (kx).

    Kernels of up to _TAPS_MAX rows plus columns: over the kernel's columns (strided slices of
    the padded input), then over its rows, an elementwise chain that XLA fuses into loops over
    the channels; exact because each ``op`` is associative and keeps the earlier of equal
    values. Measured on a 3x3/2 window over 112x112x64 (ResNet's), against the reduce_window
    that XLA CPU runs element by element, one process: FP32 with its NaN mask 1.11 -> 0.48 ms,
    int8 0.39 -> 0.21 ms (Xeon, 2026-11-28). Larger kernels (up to 8192 a side) as one
    reduce_window, the sign of a zero maximum mended (_first_zero)."""
    pt, pb, pl, pr = pad
    init = jnp.asarray(pad_value, x.dtype)
    if kernel[0] + kernel[1] > _TAPS_MAX:
        window, strides = (1, *kernel, 1), (1, *stride, 1)
        padding = ((0, 0), (pt, pb), (pl, pr), (0, 0))
        if op is not _leftmost_max:
            return lax.reduce_window(x, init, op, window, strides, padding)
        best = lax.reduce_window(x, init, lax.max, window, strides, padding)
        negative = _first_zero(x, window, strides, padding) & 1
        return jnp.where(best == 0, jnp.where(negative == 1, jnp.asarray(-0.0, x.dtype),
                                              jnp.asarray(0.0, x.dtype)), best)
    xp = lax.pad(x, init, ((0, 0, 0), (pt, pb, 0), (pl, pr, 0), (0, 0, 0)))
    n, h, _, c = xp.shape
    rows = None
    for b in range(kernel[1]):
        tap = lax.slice(xp, (0, 0, b, 0), (n, h, b + (out[1] - 1) * stride[1] + 1, c),
                        (1, 1, stride[1], 1))
        rows = tap if rows is None else op(rows, tap)
    result = None
    for a in range(kernel[0]):
        tap = lax.slice(rows, (0, a, 0, 0), (n, a + (out[0] - 1) * stride[0] + 1, out[1], c),
                        (1, stride[0], 1, 1))
        result = tap if result is None else op(result, tap)
    return result


def _first_zero(x: Any, window: tuple[int, ...], strides: tuple[int, ...],
                padding: tuple[tuple[int, int], ...]) -> Any:
    """Per window, 2 * (y * W + x) + sign bit of its first zero in the spec's order, which is
    the zero of least (y, x) (a window's rows and columns are the input's, in order); uint32's
    maximum where there is none. Exact while H * W < 2^31 (the 8K level's bound on a tensor)."""
    w = x.shape[2]
    at = (lax.broadcasted_iota(jnp.uint32, x.shape, 1) * np.uint32(w)
          + lax.broadcasted_iota(jnp.uint32, x.shape, 2))
    none = np.uint32(np.iinfo(np.uint32).max)
    key = jnp.where(x == 0, 2 * at + jnp.signbit(x).astype(jnp.uint32), none)
    return lax.reduce_window(key, none, lax.min, window, strides, padding)


@lowering("MAX_POOL2D")
@stops_reshapes
def max_pool2d(node: Node, input: Any, *, kernel: tuple[int, ...], stride: tuple[int, ...],
               pad: tuple[int, ...], nan_mode: str = "PROPAGATE") -> Any:
    _pool_geometry(node, kernel, stride, pad)
    out = tuple(node.out.shape[1:3])
    x = jnp.asarray(input)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        # Padding never wins: every window holds an input value (pad < kernel) and the
        # initial value is minimum_s<in_out_t>.
        init = np.asarray(INT_RANGES[node.out.dtype][0], x.dtype)
        return _window_reduce(x, init, lax.max, kernel, stride, pad, out)
    # the "nothing yet" value: the maximum's identity, -inf (the lowest finite value where the
    # type has no infinity, FP8E4M3); every real value of a window wins over it (a numpy
    # scalar, as the IGNORE chain's NaN below: jnp.asarray would stage a device constant)
    ninf = reduce_identity("max", x.dtype)
    if kernel[0] + kernel[1] <= _TAPS_MAX:
        # Over the taps, one chain that carries NaN by nan_mode (IGNORE pads with NaN, no
        # value), then NaN made the canonical one: one padded copy of the input and one kernel,
        # where the values and their NaN flags were two padded copies and their producers
        # computed twice (resnet_fp32's 3x3/2 stem pooling: three kernels, 233 us)
        ignore = nan_mode == "IGNORE"
        best = _window_reduce(x, np.asarray(np.nan, x.dtype) if ignore else ninf,
                              _ignore_max if ignore else _propagate_max, kernel, stride, pad,
                              out)
        return lax.select(lax.ne(best, best), filled(best, np.nan), best)
    nan = jnp.isnan(x)
    best = _window_reduce(jnp.where(nan, ninf, x), ninf, _leftmost_max, kernel, stride, pad,
                          out)
    if nan_mode == "IGNORE":
        # NaN only where every value of the window is NaN.
        any_real = _window_reduce(~nan, False, lax.bitwise_or, kernel, stride, pad, out)
        return jnp.where(any_real, best, jnp.asarray(jnp.nan, x.dtype))
    any_nan = _window_reduce(nan, False, lax.bitwise_or, kernel, stride, pad, out)
    return jnp.where(any_nan, jnp.asarray(jnp.nan, x.dtype), best)


@lowering("CONV2D")
@stops_reshapes
def conv2d(node: Node, input: Any, weight: Any, bias: Any, input_zp: Any, weight_zp: Any, *,
           pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
           acc_type: str, local_bound: bool = False) -> Any:
    zp, wzp = _zero_points(node, [("input_zp", 3, input_zp), ("weight_zp", 4, weight_zp)])
    _check_acc(node, acc_type)
    input, weight = (_read_operand(node, i, v, acc_type) for i, v in ((0, input), (1, weight)))
    n, ih, iw, ic = node.inputs[0].shape
    oc, kh, kw, wic = node.inputs[1].shape
    g = _forward_geometry(node, (ih, iw), (kh, kw), pad, stride, dilation, ("H", "W"), 1)
    # [OC,KH,KW,IC] -> [KH,KW,IC,OC]
    w = _canonical_weight(_get_weight(node, weight), (1, 2, 3, 0))
    return _convolve(node, input, w, bias, zp, wzp, g, acc_type)


@lowering("CONV3D")
@stops_reshapes
def conv3d(node: Node, input: Any, weight: Any, bias: Any, input_zp: Any, weight_zp: Any, *,
           pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
           acc_type: str, local_bound: bool = False) -> Any:
    zp, wzp = _zero_points(node, [("input_zp", 3, input_zp), ("weight_zp", 4, weight_zp)])
    _check_acc(node, acc_type)
    n, id_, ih, iw, ic = node.inputs[0].shape
    oc, kd, kh, kw, wic = node.inputs[1].shape
    # pad is [d0, d1, top, bottom, left, right]: pairs per spatial dim, as the geometry wants.
    g = _forward_geometry(node, (id_, ih, iw), (kd, kh, kw), pad, stride, dilation,
                          ("D", "H", "W"), 1)
    # [OC,KD,KH,KW,IC] -> [KD,KH,KW,IC,OC]
    w = _canonical_weight(_get_weight(node, weight), (1, 2, 3, 4, 0))
    return _convolve(node, input, w, bias, zp, wzp, g, acc_type)


@lowering("DEPTHWISE_CONV2D")
@stops_reshapes
def depthwise_conv2d(node: Node, input: Any, weight: Any, bias: Any, input_zp: Any,
                     weight_zp: Any, *, pad: tuple[int, ...], stride: tuple[int, ...],
                     dilation: tuple[int, ...], acc_type: str, local_bound: bool = False) -> Any:
    zp, wzp = _zero_points(node, [("input_zp", 3, input_zp), ("weight_zp", 4, weight_zp)])
    _check_acc(node, acc_type)
    n, ih, iw, c = node.inputs[0].shape
    kh, kw, wc, m = node.inputs[1].shape
    g = _forward_geometry(node, (ih, iw), (kh, kw), pad, stride, dilation, ("H", "W"), c)
    floating = node.inputs[0].dtype in FLOAT_TYPES
    # With one input channel (DS-CNN's first layer: a 10x4 kernel, 64 output channels) the
    # operator is an ordinary convolution: XLA runs it as fast as the taps or faster, from fewer
    # instructions to compile and rebuild (ds_cnn FP 896 -> 375, INT 1,370 -> 850).
    if node.inputs[0].dtype != "INT16" and kh * kw <= _TAPS_MAX and c > 1:
        if not floating and node.out.dtype == "INT32" and isinstance(bias, np.ndarray):
            return _depthwise_taps(input, _get_weight(node, weight), g, zp, wzp, floating,
                                   acc_type, bias)  # its bias: with the zero point's term
        acc = _depthwise_taps(input, _get_weight(node, weight), g, zp, wzp, floating, acc_type)
        return _add_bias(node, acc, bias, c * m)
    # [KH,KW,C,M] -> [KH,KW,1,C*M]: with C groups, output channel c*M+m reads input channel c
    # only, which is the pseudocode's output index.
    w = _get_weight(node, weight).reshape(kh, kw, 1, c * m)
    return _convolve(node, input, w, bias, zp, wzp, g, acc_type)


@lowering("TRANSPOSE_CONV2D")
@stops_reshapes
def transpose_conv2d(node: Node, input: Any, weight: Any, bias: Any, input_zp: Any,
                     weight_zp: Any, *, out_pad: tuple[int, ...], stride: tuple[int, ...],
                     acc_type: str, local_bound: bool = False) -> Any:
    """out[oy] = sum over ky of in[(oy - out_pad_top - ky) / stride_y] (where it divides and is in
    range) * w[ky]: a correlation of the input dilated by the stride (holes read as zero after the
    zero point) with the flipped kernel, padded by KH - 1 + out_pad on each side."""
    zp, wzp = _zero_points(node, [("input_zp", 3, input_zp), ("weight_zp", 4, weight_zp)])
    _check_acc(node, acc_type)
    n, ih, iw, ic = node.inputs[0].shape
    oc, kh, kw, wic = node.inputs[1].shape
    opt, opb, opl, opr = out_pad
    oh, ow = node.out.shape[1:3]
    g = _ConvGeometry(((kh - 1 + opt, kh - 1 + opb), (kw - 1 + opl, kw - 1 + opr)),
                      tuple(stride), (1, 1), (1, 1), 1, (oh, ow))
    # [OC,KH,KW,IC] -> flipped [KH,KW,IC,OC]
    w = _canonical_weight(_get_weight(node, weight), (1, 2, 3, 0))[::-1, ::-1]
    if isinstance(w, np.ndarray):
        w = np.ascontiguousarray(w)
    return _convolve(node, input, w, bias, zp, wzp, g, acc_type)


def _dequantize(node: Node, index: int, data: Any, scale: Any, block_size: int) -> Any:
    """A block-scaled operand as f32: each value times its block's scale, exactly (a power of
    two). The pseudocode scales each block's dot product instead; the sums are the same real
    numbers, accumulated within the DOT_PRODUCT error bound in f32. (Block size, C and the
    scales' shape: ERROR_IFs checked by profiles/.)"""
    if isinstance(data, np.ndarray) and isinstance(scale, np.ndarray):  # a constant (weights)
        return block_dequantize_host(data, scale, node.inputs[index].dtype, block_size)
    return block_dequantize(data, scale, node.inputs[index].dtype, block_size)


@lowering("MATMUL_T_BLOCK_SCALED")
def matmul_t_block_scaled(node: Node, A_data: Any, A_scale: Any, B_data: Any,  # noqa: N803
                          B_scale: Any, *, block_size: int) -> Any:
    """TOSA 1.1: MATMUL_T of block-scaled A [N,H,C] and B [D,W,C] (D == N or 1), FP32 out."""
    n, h, c = node.inputs[0].shape
    d, w, _ = node.inputs[2].shape  # D == N or 1 (ERROR_IF: profiles/)
    a = _dequantize(node, 0, A_data, A_scale, block_size)
    b = _dequantize(node, 2, B_data, B_scale, block_size)
    b = jnp.broadcast_to(b, (n, w, c))
    return lax.dot_general(a, b, (((2,), (2,)), ((0,), (0,))), precision=lax.Precision.HIGHEST,
                           preferred_element_type=jnp.float32)


@lowering("CONV2D_BLOCK_SCALED")
def conv2d_block_scaled(node: Node, input_data: Any, input_scale: Any, weight_data: Any,
                        weight_scale: Any, bias: Any, pad: Any, stride: Any, dilation: Any, *,
                        block_size: int) -> Any:
    """TOSA 1.1: CONV2D of block-scaled input [N,IH,IW,IC] and weight [OC,KH,KW,IC], FP32 out,
    with pad, stride and dilation given as shape_t inputs. Out-of-bounds positions read value 0
    (scale 1): zero padding of the dequantized input."""
    pad_, stride_, dilation_ = (tuple(int(v) for v in np.asarray(constant(node, i, x)).reshape(-1))
                                for i, x in ((5, pad), (6, stride), (7, dilation)))
    n, ih, iw, ic = node.inputs[0].shape
    oc, kh, kw, wic = node.inputs[2].shape
    g = _forward_geometry(node, (ih, iw), (kh, kw), pad_, stride_, dilation_, ("H", "W"), 1)
    x = _dequantize(node, 0, input_data, input_scale, block_size)
    wt = jnp.transpose(_dequantize(node, 2, weight_data, weight_scale, block_size), (1, 2, 3, 0))
    acc = _conv(_pad_input(x, 0.0, g), wt, g, jnp.float32)
    return acc + jnp.asarray(bias).astype(jnp.float32)


def _read_scaled(node: Node, index: int, x: Any, out_t: str) -> Any:
    """``tensor_read<in_t, out_t>`` of a whole operand, as f32 holding out_t values: a
    block-scaled one (``BlockScaled``) reads apply_mul_s<out_t>(scale, value) per element,
    exact in f32 (a power of two times a value of at most 8 significant bits) and rounded to
    out_t once, as that multiplication in out_t rounds; another one is its value."""
    if not isinstance(x, BlockScaled):
        return jnp.asarray(x).astype(jnp.float32)
    t = node.inputs[index]
    v = block_dequantize(x.values, x.scales, t.dtype, t.block_size)
    return v if out_t == "FP32" else v.astype(DEVICE_DTYPES[out_t]).astype(jnp.float32)


@lowering("MATMUL_T")
def matmul_t(node: Node, A: Any, B: Any, A_zp: Any, B_zp: Any) -> Any:  # noqa: N803
    """TOSA 1.1: output[n, h, w] = sum_c (A[n, h, c] - A_zp) (B[d, w, c] - B_zp), d = 0 when
    D == 1 (B broadcast over the batch), else n. The same sums as MATMUL of A and B^T, so it
    runs MATMUL's exact integer paths on B transposed to [N, C, W]."""
    n, h, c = node.inputs[0].shape
    d, w, _ = node.inputs[1].shape  # D == N or 1 (ERROR_IF: profiles/)
    a_t, b_t, out_t = node.inputs[0].dtype, node.inputs[1].dtype, node.out.dtype
    if a_t in FLOAT_TYPES or b_t in FLOAT_TYPES or a_t == "MXINT8" or b_t == "MXINT8":
        a_zp, b_zp = _zero_points(node, [("A_zp", 2, A_zp), ("B_zp", 3, B_zp)])
        # Each product is exact in f32 (inputs of at most 11 significant bits); the sum is the
        # out_t accumulation within the DOT_PRODUCT bound, rounded to out_t once.
        a = _read_scaled(node, 0, A, out_t)
        b = _read_scaled(node, 1, B, out_t)
        acc = lax.dot_general(a, b, (((2,), (2,)), ((0,), (0,)) if d == n else ((), ())),
                              precision=lax.Precision.HIGHEST,
                              preferred_element_type=jnp.float32)
        if d != n:  # [N, H, 1, W] -> [N, H, W]
            acc = acc.reshape(n, h, w)
        return acc.astype(DEVICE_DTYPES[out_t])
    bt = (np.ascontiguousarray(np.broadcast_to(np.swapaxes(B, 1, 2), (n, c, w)))
          if isinstance(B, np.ndarray)  # (a constant weight: numpy, no program run now)
          else jnp.broadcast_to(jnp.swapaxes(jnp.asarray(B), 1, 2), (n, c, w)))
    b_tensor = dataclasses.replace(node.inputs[1], shape=(n, c, w), data=None)
    inner = dataclasses.replace(node, inputs=(node.inputs[0], b_tensor) + node.inputs[2:])
    return matmul(inner, A, bt, A_zp, B_zp)


@lowering("MATMUL")
@stops_reshapes
def matmul(node: Node, A: Any, B: Any, A_zp: Any, B_zp: Any) -> Any:  # noqa: N803
    # The spec's v1.0.2 pseudocode inverts the zero-point test by a typo (fixed later in the
    # specification): zero points are allowed for i8_t only.
    a_zp, b_zp = _zero_points(node, [("A_zp", 2, A_zp), ("B_zp", 3, B_zp)])
    n, h, c = node.inputs[0].shape
    nb, cb, w = node.inputs[1].shape
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    dims = (((2,), (1,)), ((0,), (0,)))
    if in_t in FLOAT_TYPES:
        acc = DEVICE_DTYPES[out_t]
        a, b = jnp.asarray(A).astype(acc), jnp.asarray(B).astype(acc)
        if n == nb == h == 1:  # one row: cpu_dot's (numerics.row_pairs)
            y = cpu_dot(lax.reshape(a, (1, c)), lax.reshape(b, (c, w)), (((1,), (0,)), ((), ())),
                        acc, lax.Precision.HIGHEST)
            return lax.reshape(y, (1, 1, w))
        return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST,
                               preferred_element_type=acc)
    if in_t == "INT8":
        if out_t != "INT32":
            raise TosaValidationError(f"{node.op}: int8 inputs need an INT32 output, got {out_t}")
        # sum (a - za)(b - zb) = sum ab - zb sum a - za sum b + C za zb, all modulo 2**32
        # (exact: the int32 result may not overflow, REQUIRE).
        acc = int_dot_general(jnp.asarray(A), jnp.asarray(B), dims)
        if not isinstance(a_zp, int) or not isinstance(b_zp, int):
            # EXT-DYNAMIC: run-time zero points (traced int32 scalars), the same algebra
            row = jnp.sum(as_i32(A), axis=2, keepdims=True, dtype=jnp.int32)
            col = jnp.sum(as_i32(B), axis=1, keepdims=True, dtype=jnp.int32)
            return acc - b_zp * row - a_zp * col + jnp.int32(c) * a_zp * b_zp
        # (lax operations, as in numerics: jax.numpy's operators trace a wrapper per shape)
        if b_zp != 0:
            acc = lx(lax.sub, acc, _times(_int32_sum(A, 2), b_zp))
        if a_zp != 0:
            acc = lx(lax.sub, acc, _times(_int32_sum(B, 1), a_zp))
        both = _wrap32(c * int(a_zp) * int(b_zp))
        return lx(lax.add, acc, np.int32(both)) if both else acc
    if in_t != "INT16" or out_t != "INT48":
        raise TosaValidationError(f"{node.op}: no type support for {in_t} -> {out_t}")
    # INT16 x INT16 -> INT48 (zero points 0). Each operand splits into a signed high byte and
    # an unsigned low byte held as the int8 lo - 128 (a zero point of -128): A = 256 ah + al,
    # B = 256 bh + bl. One int8 x int8 product of the stacked halves, [ah; al] x [bh, bl], gives
    # the four partial products after the zero-point terms are folded out; each is at most
    # C * 255**2 in magnitude, exact in int32 for C <= 33025 (longer rows are cut into groups
    # added as Wide). A B = 2**16 hh + 2**8 (hl + lh) + ll.
    limit = _I32_MAX // (255 * 255)
    groups = max(1, -(-c // limit))
    kc = -(-c // groups)
    padc = groups * kc - c  # zero padding (true zeros: split after padding)

    def bytes_of(t: Any, axis: int) -> Any:
        """The operand padded with zeros along C, its byte halves stacked along ``axis``."""
        t = jnp.pad(jnp.asarray(t), [(0, padc) if i == 3 - axis else (0, 0) for i in range(3)])
        return jnp.concatenate([(t >> 8).astype(jnp.int8), ((t & 0xFF) - 128).astype(jnp.int8)],
                               axis=axis)

    a8 = _const_eval(lambda t: bytes_of(t, 1).reshape(n, 2 * h, groups, kc), A)
    b8 = _const_eval(lambda t: bytes_of(t, 2).reshape(n, groups, kc, 2 * w), B)
    za = np.repeat(np.asarray([0, -128], np.int32), h).reshape(1, 1, 2 * h, 1)
    zb = np.repeat(np.asarray([0, -128], np.int32), w).reshape(1, 1, 1, 2 * w)
    s = int_dot_general(jnp.asarray(a8), jnp.asarray(b8),
                        (((3,), (2,)), ((0, 2), (0, 1))))  # [N, G, 2H, 2W]
    # sum (a - za)(b - zb) = sum a b - zb sum a - za sum b + kc za zb, per group.
    row = _const_eval(
        lambda t: jnp.sum(as_i32(t), axis=3, dtype=jnp.int32).transpose(0, 2, 1)[..., None], a8)
    col = _const_eval(lambda t: jnp.sum(as_i32(t), axis=2, dtype=jnp.int32)[:, :, None, :], b8)
    s = s - zb * row - za * col + jnp.asarray(kc * za * zb, jnp.int32)
    total = wide(s[:, 0]) if groups == 1 else wide_sum32(s, axis=1)  # [N, 2H, 2W]

    def block(i: int, j: int) -> Wide:
        return total.map(lambda t: t[:, i * h:(i + 1) * h, j * w:(j + 1) * w])

    cross = wide_add(block(0, 1), block(1, 0))
    return wide_add(wide_add(wide_shl(wide_shl(block(0, 0), 8), 8), wide_shl(cross, 8)),
                    block(1, 1))


# ----------------------------------------------------------------------------------------------
# FFT2D / RFFT2D (EXT-FFT)
#
# The pseudocode is a direct 2-D DFT: out[oy, ox] = sum x[iy, ix] exp(-i a) with
# a = sign 2 pi (ay / H + ax / W), ay = iy oy mod H, ax = ix ox mod W. exp(-i a) factors into a
# row twiddle and a column twiddle, so the sum is two dense complex matrix products (along W,
# then along H), evaluated in the graph's own precision with full-precision dot products. The
# twiddles depend only on the static shapes: they are tabulated once, with the angles that are
# multiples of pi/2 exact (so cos/sin there are exactly 0 or +-1, as RFFT2D's special case of
# sin(a) = 0 needs).


_DFT_MAX = 256  # beyond this length a dense twiddle table costs more than a fast transform


def _twiddles(n: int, sign: float, count: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of sign 2 pi ((o i) mod n) / n as [count (o), n (i)] tables."""
    k = (np.arange(count)[:, None] * np.arange(n)[None, :]) % n
    angle = sign * 2 * np.pi * k / n
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * k) % n == 0
    q = (4 * k // n) % 4
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[q], cos)
    sin = np.where(quarter, sign * np.array([0.0, 1.0, 0.0, -1.0])[q], sin)
    return cos.astype(dtype), sin.astype(dtype)


def _dot_last(x: Any, t: np.ndarray) -> Any:
    """sum_i x[..., i] t[o, i] -> [..., o], full precision."""
    return lax.dot_general(x, jnp.asarray(t), (((x.ndim - 1,), (1,)), ((), ())),
                           precision=lax.Precision.HIGHEST, preferred_element_type=x.dtype)


def _complex_stage(re: Any, im: Any, cos: np.ndarray, sin: np.ndarray) -> tuple[Any, Any]:
    """(re + i im) times exp(-i b) summed along the last axis: re cos + im sin and
    im cos - re sin, as the pseudocode's sum_real / sum_imag."""
    if im is None:
        return _dot_last(re, cos), -_dot_last(re, sin)
    return (_dot_last(re, cos) + _dot_last(im, sin),
            _dot_last(im, cos) - _dot_last(re, sin))


def _check_fft(node: Node, shapes_out: Any) -> tuple[int, int, int, Any]:
    n, h, w = node.inputs[0].shape  # powers of two, all shapes agreeing: profiles/
    dt = node.inputs[0].dtype
    if dt not in FLOAT_TYPES or any(t.dtype != dt for t in (*node.inputs, *node.outputs)):
        raise TosaValidationError(f"{node.op}: no type support for {dt}")
    return n, h, w, DEVICE_DTYPES[dt]


def _move_h_last(x: Any) -> Any:
    return jnp.swapaxes(x, 1, 2)


@lowering("FFT2D")
def fft2d(node: Node, input_real: Any, input_imag: Any, *, inverse: bool,
          local_bound: bool = False) -> tuple[Any, Any]:
    _, h, w, dt = _check_fft(node, lambda n, h, w: (n, h, w))
    sign = -1.0 if inverse else 1.0
    re, im = jnp.asarray(input_real, dt), jnp.asarray(input_imag, dt)
    if max(h, w) > _DFT_MAX:
        # Large transforms: the same sums by a fast transform on complex pairs of the graph's
        # type (the spec allows transform-based algorithms; their error is no larger). The
        # inverse is unnormalised: conj(fft(conj(x))).
        z = lax.complex(re, -im if inverse else im)
        z = jnp.fft.fft2(z, axes=(1, 2))
        return jnp.real(z).astype(dt), (-jnp.imag(z) if inverse else jnp.imag(z)).astype(dt)
    # along W: [N, H, W(ix)] -> [N, H, W(ox)]
    re, im = _complex_stage(re, im, *_twiddles(w, sign, w, dt))
    # along H: [N, W, H(iy)] -> [N, W, H(oy)]
    re, im = _complex_stage(_move_h_last(re), _move_h_last(im), *_twiddles(h, sign, h, dt))
    return _move_h_last(re), _move_h_last(im)


@lowering("RFFT2D")
def rfft2d(node: Node, input_real: Any, *, local_bound: bool = False) -> tuple[Any, Any]:
    _, h, w, dt = _check_fft(node, lambda n, h, w: (n, h, w // 2 + 1))
    re = jnp.asarray(input_real, dt)
    if max(h, w) > _DFT_MAX:
        z = jnp.fft.rfft2(re, axes=(1, 2))  # see fft2d
        return jnp.real(z).astype(dt), jnp.imag(z).astype(dt)
    # along W (real input), only the W/2 + 1 non-redundant output columns
    re, im = _complex_stage(re, None, *_twiddles(w, 1.0, w // 2 + 1, dt))
    re, im = _complex_stage(_move_h_last(re), _move_h_last(im), *_twiddles(h, 1.0, h, dt))
    return _move_h_last(re), _move_h_last(im)
