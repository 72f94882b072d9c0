"""Image operators (spec chapter "Image Operators"): RESIZE.

Every sampling position depends only on the output coordinate and the static scale, offset and
border, so the source rows/columns (iy0, iy1, ix0, ix1) and the fractions (dy, dx) are computed
in Python before tracing; the traced work is gathers and the weighted sum. The integer modes
are exact: int8 bilinear sums fit int32 (|v| * scale_y_n * scale_x_n <= 2^7 * 2^22), int16
bilinear is summed into 64-bit ``Wide`` pairs (|v| * 2^22 reaches 2^37) for its INT48 output.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.errors import TosaValidationError
from tosa_jax.ir import FLOAT_TYPES, HOST_DTYPES, BlockScaled
from tosa_jax.lowering import Node, constant, lowering
from tosa_jax.lowering.numerics import as_i32, no_fold, wide_add, wide_mul32


def _idiv_floor(a: int, b: int) -> int:
    """idiv_floor: integer division rounding towards minus infinity (Python // does that)."""
    return a // b


def _axis_plan(out_size: int, in_size: int, scale_n: int, scale_d: int,
               offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each output coordinate o: (i0, i1, d) of the spec (d = remainder, 0 <= d < scale_n),
    and i, the index before clamping (i0 clamps i, i1 clamps i + 1)."""
    i0, i1, d, raw = [], [], [], []
    for o in range(out_size):
        v = o * scale_d + offset       # int32_t y = oy * scale_y_d + offset_y
        i = _idiv_floor(v, scale_n)    # int16_t iy = idiv_floor(y, scale_y_n)
        d.append(v - i * scale_n)      # int16_t ry = y - iy * scale_y_n
        i0.append(max(i, 0))           # iy0 = apply_max_s(iy, 0)
        i1.append(min(i + 1, in_size - 1))  # iy1 = apply_min_s(iy + 1, IH - 1)
        raw.append(i)
    return (np.array(i0, np.int32), np.array(i1, np.int32), np.array(d, np.int64),
            np.array(raw, np.int64))


_PERIOD_MAX = 8  # periodic sampling patterns up to this period are taken by strided slices


def _period(index: np.ndarray) -> int | None:
    """The smallest period p (p <= _PERIOD_MAX) with index[o + p] = index[o] + q for one step
    q >= 1 whatever o, once the clamping at the edges is undone: an integer scale factor
    (2x upsampling: p = 2, q = 1), or a nearest pattern that repeats."""
    for p in range(1, min(_PERIOD_MAX, len(index) - 1) + 1):
        steps = index[p:] - index[:-p]
        if steps.min() == steps.max() and steps[0] >= 1:
            return p
    return None


def _take(x: Any, index: np.ndarray, axis: int, unclamped: np.ndarray | None = None) -> Any:
    """x gathered at static indices along ``axis`` (in range: iy0 >= 0, iy1 <= IH - 1).

    ``unclamped``: the same indices before the clamping to [0, I - 1]. Where they are periodic
    (an integer scale factor), the take is p strided slices of the edge-replicated input,
    interleaved: XLA fuses them as plain loads, where a gather is an indexed load per element
    that XLA also recomputes in each consumer (UNet's 2x bilinear upsampling: 2 gathers of
    [32, 32, 64] fused into a transposed concatenation, recomputed twice, ~0.5 ms)."""
    size = x.shape[axis]
    p = None
    if unclamped is not None and np.array_equal(np.clip(unclamped, 0, size - 1), index):
        p = _period(unclamped)
    if p is None:
        return jnp.take(x, jnp.asarray(index), axis=axis, mode="clip")
    out = len(unclamped)
    q = int(unclamped[p] - unclamped[0])
    rounds = -(-out // p)  # the last round may be partial: continue the pattern, cut after
    ext = np.concatenate([unclamped[:p] + q * k for k in range(rounds)])
    lo, hi = max(0, -int(ext.min())), max(0, int(ext.max()) - (size - 1))
    if lo or hi:  # edge replication: what the clamped index reads
        first = lax.slice_in_dim(x, 0, 1, axis=axis)
        last = lax.slice_in_dim(x, size - 1, size, axis=axis)
        x = lax.concatenate([first] * lo + [x] + [last] * hi, axis)
    parts = [lax.slice_in_dim(x, int(ext[r]) + lo, int(ext[r]) + lo + (rounds - 1) * q + 1, q,
                              axis) for r in range(p)]
    if p > 1:  # [..., rounds, p, ...] -> [..., rounds * p, ...]
        stacked = jnp.stack(parts, axis=axis + 1)
        parts = [stacked.reshape(x.shape[:axis] + (rounds * p,) + x.shape[axis + 1:])]
    return parts[0] if rounds * p == out else lax.slice_in_dim(parts[0], 0, out, axis=axis)


def _bcast(w: np.ndarray, axis: int) -> np.ndarray:
    """A per-row (axis 1) or per-column (axis 2) weight, shaped to broadcast over NHWC."""
    return w.reshape((1, -1, 1, 1) if axis == 1 else (1, 1, -1, 1))


@lowering("RESIZE")
def resize(node: Node, input: Any, scale: Any, offset: Any, border: Any, *, mode: str) -> Any:
    """Nearest or bilinear resize with rational scale (scale_n / scale_d), offset and border."""
    if isinstance(input, BlockScaled):
        # TOSA 1.1 block-scaled input (NEAREST_NEIGHBOR only, ERROR_IF in profiles/): each
        # output element is the value and the scale of the one input element read
        # (tensor_read_value_scale / tensor_write_value_scale); C is whole blocks, so the
        # scales [N, IH, IW, C / block] are resampled with the same rows and columns.
        if mode != "NEAREST":
            raise TosaValidationError(f"RESIZE: {mode} of a block-scaled tensor")
        return BlockScaled(*(resize(node, v, scale, offset, border, mode=mode)
                             for v in (input.values, input.scales)))
    scale = [int(v) for v in constant(node, 1, scale).reshape(-1)]
    offset = [int(v) for v in constant(node, 2, offset).reshape(-1)]
    border = [int(v) for v in constant(node, 3, border).reshape(-1)]
    in_t, out_t = node.inputs[0].dtype, node.out.dtype
    _n, ih, iw, _c = node.inputs[0].shape
    _n, oh, ow, _c = node.out.shape
    scale_y_n, scale_y_d, scale_x_n, scale_x_d = scale
    iy0, iy1, dy, iy = _axis_plan(oh, ih, scale_y_n, scale_y_d, offset[0])
    ix0, ix1, dx, ix = _axis_plan(ow, iw, scale_x_n, scale_x_d, offset[1])
    is_float = in_t in FLOAT_TYPES
    # no_fold: a CONST input must not be constant-folded through the gathers (XLA bug, numerics).
    x = no_fold(input)

    if mode == "NEAREST":
        # The input value closest to the sample position, for float and integer types alike:
        # ry / scale_n >= 0.5 decided exactly, as 2 * ry >= scale_n. The float pseudocode's
        # "dy >= 0.5" with dy in resize_t is judged against fp64 (Precision Requirements);
        # rounded to bf16 or fp16, 204 / 409 becomes 0.5 and would take the next row.
        near_y = 2 * dy >= scale_y_n
        near_x = 2 * dx >= scale_x_n
        rows = _take(x, np.where(near_y, iy1, iy0), 1, iy + near_y)
        return _take(rows, np.where(near_x, ix1, ix0), 2, ix + near_x).astype(x.dtype)
    if mode != "BILINEAR":
        raise TosaValidationError(f"RESIZE: unknown mode {mode!r}")

    if is_float:
        # acc = v00*(1-dy)*(1-dx) + v01*(1-dy)*dx + v10*dy*(1-dx) + v11*dy*dx, in resize_t.
        ft = HOST_DTYPES[in_t].type  # resize_t on the host, for the static fractions dy, dx
        fy = dy.astype(ft) / ft(scale_y_n)
        fx = dx.astype(ft) / ft(scale_x_n)
        wy0, wy1 = _bcast(ft(1.0) - fy, 1), _bcast(fy, 1)
        wx0, wx1 = _bcast(ft(1.0) - fx, 2), _bcast(fx, 2)
        r0, r1 = _take(x, iy0, 1, iy), _take(x, iy1, 1, iy + 1)
        v00, v01 = _take(r0, ix0, 2, ix), _take(r0, ix1, 2, ix + 1)
        v10, v11 = _take(r1, ix0, 2, ix), _take(r1, ix1, 2, ix + 1)
        acc = v00 * wy0 * wx0
        acc = acc + v01 * wy0 * wx1
        acc = acc + v10 * wy1 * wx0
        acc = acc + v11 * wy1 * wx1
        return acc.astype(x.dtype)

    # Integer bilinear: unit = scale_n, weights (unit_y - dy, dy) x (unit_x - dx, dx). Integer
    # sums are exact in any order, so the rows are blended first, then the columns:
    #   acc = sum_a sum_b v[a][b] * wy[a] * wx[b] = sum_b wx[b] * (sum_a wy[a] * v[a][b]).
    wy0 = _bcast((scale_y_n - dy).astype(np.int32), 1)
    wy1 = _bcast(dy.astype(np.int32), 1)
    wx0 = _bcast((scale_x_n - dx).astype(np.int32), 2)
    wx1 = _bcast(dx.astype(np.int32), 2)
    v = as_i32(x)  # in_s_t, widened for the products
    # |rows| <= 2^15 * scale_y_n <= 2^26: exact in int32 for int8 and int16.
    rows = _take(v, iy0, 1, iy) * wy0 + _take(v, iy1, 1, iy + 1) * wy1
    c0, c1 = _take(rows, ix0, 2, ix), _take(rows, ix1, 2, ix + 1)
    if out_t == "INT48":
        # int16 input: products reach 2^26 * 2^11 = 2^37, so they are summed in 64 bits.
        return wide_add(wide_mul32(c0, wx0), wide_mul32(c1, wx1))
    if out_t != "INT32":
        raise TosaValidationError(f"RESIZE: BILINEAR from {in_t} to {out_t} is not supported")
    # int8 input: |acc| <= 2^7 * 2^22 = 2^29 fits int32.
    return c0 * wx0 + c1 * wx1

