"""Which TOSA operators each device runs: operator, type, shape and attribute constraints as data.

``unsupported_reasons(device, graph, block, op)`` returns [] when ``op`` runs on ``device`` and
otherwise readable reasons worded like Vela's constraints.

Sources:

* Ethos-U55/U65 and Ethos-U85: Vela 5.2's published TOSA constraints (``vela
  --supported-ops-report``, sections "Ethos-U55 and Ethos-U65 TOSA ..." and "Ethos-U85 TOSA
  Operator Support"), and where the report is silent or differs, what Vela 5.2 does when it
  compiles single-operator graphs (measured with ``bench/vela_agreement.py`` over the
  conformance suite; the comments of rules that come from measurement say "Vela 5.2
  behaviour"). U55 and U65 share one table.
* Mali: what Arm's ML SDK model converter (TOSA -> VGF for the Vulkan ML extensions, PyPI
  ``ai-ml-sdk-model-converter``) lowers, checked per operator x type signature of the TOSA 1.0.2
  conformance slice (bench/mali_converter.py): every operator but control flow, every element
  type, zero points (and RESCALE multiplier/shift) constant. Variables, CUSTOM and rank > 6 are
  kept out as assumptions (nothing in the slice tests them). That the converter lowers a graph
  says the GPU path takes it, not how fast any Mali runs it.
* CPU: everything (it runs tosa_jax itself).

Agreement with Vela 5.2 (``bench/vela_agreement.py``): 100% of the operators of the PRO-INT /
EXT-INT16 conformance suite and the int8 fixture networks whose compilation finishes, for
ethos-u55-128, ethos-u65-256 and ethos-u85-256. On random graphs the rules were not tuned on
(``bench/vela_random_ops.py``): U85 100%, U55/U65 about 95-97%; the known approximations are
U55/U65 NEAREST RESIZE (Vela's acceptance depends on the scale numerators and denominators in a
way not modelled here) and CONV2D/DEPTHWISE_CONV2D strides over 3 combined with dilation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np

from tosa_jax.hw_models.devices import DeviceModel
from tosa_jax.ir import FLOAT_TYPES, Block, Graph, Operator, Tensor

FLOAT = frozenset(FLOAT_TYPES)
I8, I16, I32, I48, I4, BOOL = "INT8", "INT16", "INT32", "INT48", "INT4", "BOOL"
INT_8_16_32 = frozenset((I8, I16, I32))


@dataclass
class Ctx:
    """One operator in its graph: accessors that the constraint checks share."""

    device: DeviceModel
    graph: Graph
    block: Block
    op: Operator

    def t(self, i: int) -> Tensor | None:
        if i < len(self.op.inputs) and self.op.inputs[i] in self.block.tensors:
            return self.block.tensors[self.op.inputs[i]]
        return None

    @property
    def out(self) -> Tensor:
        return self.block.tensors[self.op.outputs[0]]

    def dtype(self, i: int) -> str | None:
        t = self.t(i)
        return None if t is None else t.dtype

    def const(self, i: int) -> np.ndarray | None:
        """Operand ``i``'s value when it is known before running: a constant tensor or, on
        an Ethos-U, a RESHAPE or IDENTITY chain of one (Vela 5.2 folds those: a fully
        connected layer's weights written as RESHAPE(CONST) stay on the NPU; it does not fold
        TRANSPOSE(CONST), checked with Vela on U55-128 and U85-256)."""
        t = self.t(i)
        if t is None:
            return None
        if t.data is not None or not self.device.family.startswith("ethos"):
            return t.data
        return _folded(self.block, self.op.inputs[i])

    def consumers(self) -> list[Operator]:
        outs = set(self.op.outputs)
        return [o for o in self.block.operators if outs & set(o.inputs)]

    def is_graph_output(self) -> bool:
        return any(o in self.block.outputs for o in self.op.outputs)


def _folded(block: Block, name: str, depth: int = 0) -> np.ndarray | None:
    """The value of ``name`` if it is a constant seen through RESHAPE/IDENTITY operators."""
    t = block.tensors.get(name)
    if t is None or depth > 16:
        return None
    if t.data is not None:
        return t.data
    for op in block.operators:
        if name in op.outputs:
            if op.op in ("RESHAPE", "IDENTITY") and op.inputs:
                src = _folded(block, op.inputs[0], depth + 1)
                return None if src is None else np.asarray(src).reshape(t.shape)
            return None
    return None


Check = Callable[[Ctx], "str | None"]


@dataclass(frozen=True)
class OpRule:
    """The constraints of one operator on one device family.

    ``types``: allowed element-type signatures over the tensors ``sig`` names (``"io"``: first
    input and output; ``"iwo"``: input, weight, output; ``"iio"``: two inputs and output);
    None means any type the family accepts. ``checks`` are shape/attribute rules, each returning
    a reason or None.
    """

    types: frozenset[tuple[str, ...]] | None = None
    sig: str = "io"
    checks: tuple[Check, ...] = ()


def _signature(c: Ctx, sig: str) -> tuple[str, ...]:
    if sig == "iwo":
        return (c.dtype(0) or "", c.dtype(1) or "", c.out.dtype)
    if sig == "iio":
        return (c.dtype(0) or "", c.dtype(1) or "", c.out.dtype)
    return (c.dtype(0) or "", c.out.dtype)


def _types_reason(c: Ctx, rule: OpRule) -> str | None:
    if rule.types is None:
        return None
    s = _signature(c, rule.sig)
    if s in rule.types:
        return None
    allowed = ", ".join("(" + ",".join(x.lower() for x in t) + ")" for t in sorted(rule.types))
    return (f"DataTypes ({','.join(x.lower() for x in s)}) not supported; supported: {allowed}")


# ---------------------------------------------------------------- shared shape/attr checks

def _nhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    s = (1,) * (4 - len(shape)) + tuple(shape[-4:])
    return s[0], s[1], s[2], s[3]


def _axes_in(lo: int, hi: int, what: str = "HWC") -> Check:
    def check(c: Ctx) -> str | None:
        shapes = [c.t(0).shape if c.t(0) is not None else (), c.out.shape]
        for shape in shapes:
            n, h, w, ch = _nhwc(shape)
            vals = {"N": n, "H": h, "W": w, "C": ch}
            bad = [f"{k}={vals[k]}" for k in what if not lo <= vals[k] <= hi]
            if bad:
                return f"Tensor axis {what} must be in range {lo}..{hi}: {', '.join(bad)}"
        return None
    check.__name__ = f"axes_{what}"
    return check


def _kernel_hw(c: Ctx) -> tuple[int, int]:
    w = c.t(1).shape if c.t(1) is not None else ()
    if c.op.op == "DEPTHWISE_CONV2D":
        return w[0], w[1]
    if c.op.op == "CONV3D":
        return w[2], w[3]
    if c.op.op in ("CONV2D", "TRANSPOSE_CONV2D"):
        return w[1], w[2]
    ky, kx = c.op.attrs.get("kernel", (1, 1))
    return ky, kx


def _used_taps(k: int, dil: int, stride: int, pad_before: int, size_in: int, size_out: int) -> int:
    """How many taps of a kernel axis (first to last) ever read a real (not padding) input."""
    used = []
    for t in range(k):
        c = t * dil - pad_before
        o = max(0, -(c // stride) if c < 0 else 0)  # first output whose tap lands at >= 0
        if o < size_out and o * stride + c < size_in:
            used.append(t)
    return used[-1] - used[0] + 1 if used else 1


def _effective_kernel(c: Ctx) -> tuple[int, int, bool]:
    """(kernel_y, kernel_x, dilated) as Vela 5.2 convolves: it drops kernel taps that only ever
    read padding (seen on the conformance suite's 8192-wide kernels with 8192 strides), and a
    dilation only matters along an axis with more than one tap left."""
    ky, kx = _kernel_hw(c)
    a = c.op.attrs
    dil = tuple(a.get("dilation", (1, 1)))[-2:]
    if c.op.op not in ("CONV2D", "DEPTHWISE_CONV2D", "CONV3D") or ky * kx <= 64:
        return ky, kx, any(d != 1 for d in dil)
    ih, iw = c.t(0).shape[-3:-1]
    oh, ow = c.out.shape[-3:-1]
    sy, sx = tuple(a.get("stride", (1, 1)))[-2:]
    pad = tuple(a.get("pad", (0, 0, 0, 0)))
    pt, pl = pad[-4], pad[-2]
    ey = _used_taps(ky, dil[0], sy, pt, ih, oh)
    ex = _used_taps(kx, dil[1], sx, pl, iw, ow)
    return ey, ex, (ey > 1 and dil[0] != 1) or (ex > 1 and dil[1] != 1)


def _live_outputs(k: int, dil: int, stride: int, pad_before: int, size_in: int,
                  size_out: int) -> int:
    """How many output positions along an axis read any real input (0, 1 or 2 = "several")."""
    n = 0
    for o in range(size_out):
        lo = o * stride - pad_before
        if lo >= size_in:
            break
        if any(0 <= lo + t * dil < size_in for t in range(k)):
            n += 1
            if n == 2:
                break
    return n


def _strides_that_matter(c: Ctx) -> tuple[int, ...]:
    """The strides of the axes (H, W) along which more than one output reads real input: Vela
    5.2 compiles any stride where only one does (e.g. a 1-high output)."""
    a = c.op.attrs
    stride = tuple(a.get("stride", (1, 1)))[-2:]
    if c.op.op == "TRANSPOSE_CONV2D":
        return stride
    ky, kx = _kernel_hw(c)
    dil = tuple(a.get("dilation", (1, 1)))[-2:]
    pad = tuple(a.get("pad", (0, 0, 0, 0)))
    ih, iw = c.t(0).shape[-3:-1]
    oh, ow = c.out.shape[-3:-1]
    out = []
    for k, d, s, p, i, o in ((ky, dil[0], stride[0], pad[-4], ih, oh),
                             (kx, dil[1], stride[1], pad[-2], iw, ow)):
        if s > 1 and _live_outputs(k, d, s, p, i, o) > 1:
            out.append(s)
    return tuple(out)


def _kernel_stride(kmax_prod: int, ky_max: int, smax: int = 3, pad_k8: bool = False,
                   stride_if_padded: bool = False, stride_if_dilated: bool = False) -> Check:
    """Kernel size and stride limits. ``pad_k8``: with padding the kernel must be <= 8x8 (AVG
    pool). ``stride_if_padded``/``stride_if_dilated``: the stride limit applies only to padded
    pools / dilated convolutions (Vela 5.2 compiles larger strides otherwise)."""
    def check(c: Ctx) -> str | None:
        ky, kx, dilated = _effective_kernel(c)
        stride = tuple(c.op.attrs.get("stride", (1, 1)))
        padded = any(c.op.attrs.get("pad", (0,)))
        if pad_k8 and padded:
            if not (1 <= kx <= 8 and 1 <= ky <= 8):
                return f"IF padding is used: 1 <= kernel_x <= 8 and 1 <= kernel_y <= 8: {ky}x{kx}"
        elif not (1 <= kx * ky <= kmax_prod and 1 <= ky <= ky_max):
            return (f"Kernel size: 1 <= kernel_x*kernel_y <= {kmax_prod} and 1 <= kernel_y <= "
                    f"{ky_max}: kernel {ky}x{kx}")
        limited = (padded or not stride_if_padded) and (dilated or not stride_if_dilated)
        if limited and not all(1 <= s <= smax for s in _strides_that_matter(c)):
            return f"Kernel stride: 1 <= stride <= {smax}: stride {stride}"
        return None
    return check


_CONV_KERNEL_STRIDE = _kernel_stride(4096, 64, stride_if_dilated=True)
_DW_KERNEL_STRIDE = _kernel_stride(4096, 64)


def _depthwise_stride(c: Ctx) -> str | None:
    if c.t(0).shape[-1] == 1:
        return _CONV_KERNEL_STRIDE(c)
    return _DW_KERNEL_STRIDE(c)


def _conv_weights(c: Ctx) -> str | None:
    w = c.const(1)
    if w is None:
        return "Weights must be constant"
    wzp = c.const(4)
    z = int(wzp.ravel()[0]) if wzp is not None and wzp.size else 0
    ww = w.astype(np.int64) - z
    # Sum of |weights| per output channel (the accumulator bound Vela checks).
    axis = tuple(range(w.ndim - 1)) if c.op.op == "DEPTHWISE_CONV2D" else tuple(range(1, w.ndim))
    if int(np.abs(ww).sum(axis=axis).max(initial=0)) > 127 * 65536:
        return "Sum of absolute weights must not exceed 127*65536"
    b = c.const(2)
    if b is None:
        return "Bias must be constant"
    if b.size and (int(b.min()) < -(1 << 39) or int(b.max()) > (1 << 39) - 1):
        return "Bias must fit in signed int40: -549755813888..549755813887"
    return None


def _followed_by_rescale(c: Ctx) -> str | None:
    """U55/U65: a MAC operator's int48 (EXT-INT16) result must be rescaled on the NPU."""
    if c.out.dtype != I48:
        return None
    users = c.consumers()
    if c.is_graph_output() or not users or any(u.op != "RESCALE" for u in users):
        return (f"{c.op.op} with {c.out.dtype.lower()} output is only supported if followed by "
                "RESCALE to i8_t, i16_t or i32_t (Vela: 'Non-passthrough operation could not run "
                "on NPU')")
    return None


def _transpose_conv_stride(c: Ctx) -> str | None:
    # Report: (1,1), (2,2); (1,2) only if IFM and kernel height are 1; (2,1) only if IFM and
    # kernel width are 1. Vela 5.2 behaviour: the stride along an axis where the IFM and the
    # kernel are both 1 wide does not matter, whichever of the two it is (it compiles stride
    # (1,2) with IFM and kernel width 1).
    sy, sx = tuple(c.op.attrs.get("stride", (1, 1)))
    _, ih, iw, _ = _nhwc(c.t(0).shape)
    _, ky, kx, _ = c.t(1).shape
    free_y, free_x = ih == 1 and ky == 1, iw == 1 and kx == 1
    if (sy, sx) in ((1, 1), (2, 2)) or (free_x and sy in (1, 2)) or (free_y and sx in (1, 2)):
        return None
    return (f"Stride combination ({sy},{sx}) not supported: (1,1), (2,2), (1,2) only if IFM and "
            "kernel height are 1, (2,1) only if IFM and kernel width are 1")


def _matmul_axes(c: Ctx) -> str | None:
    _, _, ch = c.t(0).shape
    w = c.t(1).shape[2]
    if not (1 <= w <= 65536 and 1 <= ch <= 65536):
        return f"Tensor axis: W and C in range 1..65536, N and H any: W={w}, C={ch}"
    return None


def _conv3d_kernel(c: Ctx) -> str | None:
    kd = c.t(1).shape[1]
    if kd != 1:
        return f"Kernel size: kernel_z == 1: kernel depth {kd}"
    return None


def _const_weights_bias(c: Ctx) -> str | None:
    if c.const(1) is None or c.const(2) is None:
        return f"{c.op.op} with dynamic weights and/or bias is not supported"
    return None


def _conv3d_dynamic(c: Ctx) -> str | None:
    # Vela 5.2 behaviour: the report refuses CONV3D with dynamic weights and/or bias; Vela
    # compiles it where the kernel depth and depth stride are 1 (a 2D convolution per slice).
    if c.const(1) is not None and c.const(2) is not None:
        return None
    kd, sd = c.t(1).shape[1], tuple(c.op.attrs.get("stride", (1, 1, 1)))[0]
    if kd == 1 and sd == 1:
        return None
    return ("CONV3D with dynamic weights and/or bias is only supported with kernel depth 1 and "
            f"depth stride 1: kernel depth {kd}, stride {sd}")


def _argmax(c: Ctx) -> str | None:
    shape = c.t(0).shape
    if not 1 <= len(shape) <= 4:
        return f"Rank must be in range 1..4: rank {len(shape)}"
    if c.op.attrs.get("axis") != len(shape) - 1:
        return f"Reduction axis must be channel: axis {c.op.attrs.get('axis')} of rank {len(shape)}"
    n, h, w, ch = _nhwc(shape)
    if n != 1 or not 1 <= ch <= 127 or not 1 <= h * w <= 65536:
        return f"Tensor axis: N=1, C in range 1..127, and W*H in range 1..65536: shape {shape}"
    return None


def _all_inputs_const(c: Ctx) -> bool:
    return all(c.const(i) is not None for i in range(len(c.op.inputs)))


def _lls_types(c: Ctx) -> str | None:
    # Vela 5.2 behaviour: int8/int16 LOGICAL_LEFT_SHIFT is refused unless every input is
    # constant, when Vela folds it into a constant (and the NPU only copies the result).
    if c.dtype(0) != I32 and not _all_inputs_const(c):
        return f"DataTypes: int32 only (IFM and OFM must be 32-bit): {c.dtype(0).lower()}"
    return None


def _reverse_axis(c: Ctx) -> str | None:
    # Vela 5.2 behaviour (the report says "only W-axis and H-axis", Vela does more): any axis
    # but the innermost is reversed natively; the innermost only for rank >= 4, through a
    # transpose whose N*H <= 65536 limit then applies.
    shape = c.t(0).shape
    rank, axis = len(shape), c.op.attrs.get("axis", 0)
    if axis != rank - 1:
        return None
    if rank <= 3:
        return (f"Reverse of the innermost axis is only supported for rank >= 4: axis {axis} "
                f"of rank {rank}")
    if prod(shape[:-2]) > 65536:
        return f"Reverse of the channel axis needs N*H <= 65536: shape {shape}"
    return None


def _reduce_sum(c: Ctx) -> str | None:
    shape = c.t(0).shape
    axis = c.op.attrs.get("axis", 0)
    if not 1 <= shape[axis] <= 65536:
        return f"Reduced axis must be in range 1..65536: {shape[axis]}"
    if axis != len(shape) - 1:
        before, after = prod(shape[:axis]), prod(shape[axis + 1:])
        if not (1 <= before <= 65536 and 1 <= after <= 65536):
            return ("IF reduction is not over channel: product of axes before and after the "
                    f"reduced axis must be in range 1..65536: {before}, {after}")
    return None


def _resize(c: Ctx) -> str | None:
    """U55/U65 RESIZE. Vela 5.2 behaviour (measured; the report's "upscale must be a power of
    two in 2x..8x" does not describe it): a resize to the same shape compiles; a NEAREST resize
    compiles when it upscales both H and W (2x..8x, also 3x), not when one of them keeps its
    size or shrinks; a BILINEAR upscale needs the RESCALE the report names after it."""
    ih, iw = c.t(0).shape[1:3]
    oh, ow = c.out.shape[1:3]
    if (ih, iw) == (oh, ow):
        return None
    if c.op.attrs.get("mode") == "BILINEAR":
        return _bilinear_rescale(c)
    if not (oh > ih and ow > iw):
        return (f"Upscale must be 2x..8x in both H and W: {ih}x{iw} -> {oh}x{ow} (Vela 5.2 "
                "refuses a nearest resize that keeps or shrinks one axis)")
    scale = c.const(1)
    if scale is None:
        return "RESIZE scale must be constant"
    sy_n, sy_d, sx_n, sx_d = (int(v) for v in scale.ravel()[:4])
    if not (sy_n <= 8 * sy_d and sx_n <= 8 * sx_d):
        return f"Upscale must be in range 2x..8x: scale {sy_n}/{sy_d} x {sx_n}/{sx_d}"
    return None


def _bilinear_rescale(c: Ctx) -> str | None:
    scale = c.const(1)
    if scale is None:
        return "RESIZE scale must be constant"
    sy_n, sy_d, sx_n, sx_d = (int(v) for v in scale.ravel()[:4])
    if sy_d <= 0 or sx_d <= 0 or sy_n % sy_d or sx_n % sx_d:
        return f"Upscale must be power-of-two in range 2x..8x: scale {sy_n}/{sy_d}, {sx_n}/{sx_d}"
    uy, ux = sy_n // sy_d, sx_n // sx_d
    if uy not in (1, 2, 4, 8) or ux not in (1, 2, 4, 8):
        return f"Upscale must be power-of-two in range 2x..8x: {uy}x{ux}"
    shift = (uy * ux).bit_length() - 1
    users = c.consumers()
    for u in users:
        if u.op != "RESCALE":
            break
        m, sh = (c.block.tensors[u.inputs[i]].data if i < len(u.inputs) else None
                 for i in (1, 2))
        if m is None or sh is None or np.any(m != 1) or np.any(sh != shift):
            break
    else:
        if users and not c.is_graph_output():
            return None
    return (f"Bilinear mode must be followed by RESCALE with shift=log2(upscale_x*upscale_y)="
            f"{shift} and scale=1")


_MAC_OPS = ("CONV2D", "DEPTHWISE_CONV2D", "CONV3D", "TRANSPOSE_CONV2D")


def _producer(c: Ctx, i: int) -> Operator | None:
    name = c.op.inputs[i] if i < len(c.op.inputs) else None
    return next((o for o in c.block.operators if name in o.outputs), None)


def _no_int48_standalone(c: Ctx) -> str | None:
    if c.out.dtype == I48:
        return "EXT-INT16 (INT48 types) are not supported standalone"
    if c.dtype(0) == I48:
        # Fused into the int16 convolution that produces it (Vela 5.2 compiles the pair).
        p = _producer(c, 0)
        if p is None or p.op not in _MAC_OPS:
            return ("EXT-INT16 (INT48 types) are not supported standalone: an int48 RESCALE "
                    "must follow a convolution")
    return None


# ---------------------------------------------------------------- the tables

def _same(*ts: str) -> frozenset[tuple[str, ...]]:
    return frozenset((t, t) for t in ts)


_MAC_TYPES = frozenset({(I8, I8, I32), (I8, I4, I32), (I16, I8, I48)})

# Ethos-U55 and Ethos-U65 (Vela 5.2 "Ethos-U55 and Ethos-U65 TOSA Summary Table").
U55_U65: dict[str, OpRule] = {
    "ABS": OpRule(_same(I8, I16, I32)),
    "ADD": OpRule(_same(I8, I16, I32)),
    "SUB": OpRule(_same(I8, I16, I32)),
    "MUL": OpRule(frozenset({(I8, I32), (I16, I32), (I32, I32)})),
    "MAXIMUM": OpRule(_same(I8, I16, I32)),
    "MINIMUM": OpRule(_same(I8, I16, I32)),
    "NEGATE": OpRule(_same(I8, I16, I32)),
    "CLAMP": OpRule(_same(I8, I16, I32)),
    "CLZ": OpRule(_same(I32)),
    # The report also says "Round: true only"; Vela 5.2 compiles round=false as well.
    "ARITHMETIC_RIGHT_SHIFT": OpRule(_same(I32)),
    "LOGICAL_LEFT_SHIFT": OpRule(_same(I8, I16, I32), checks=(_lls_types,)),
    # The report says "int8 only"; Vela 5.2 compiles the int16 table (int16 -> int32) too.
    "TABLE": OpRule(frozenset({(I8, I8), (I16, I32)})),
    # Vela 5.2 behaviour: N > 1 (the report says N=1), H/W over 65536 and strides over 3
    # without padding compile too.
    "AVG_POOL2D": OpRule(_same(I8, I16), checks=(
        _axes_in(1, 65536, "C"),
        _kernel_stride(65536, 256, pad_k8=True, stride_if_padded=True))),
    "MAX_POOL2D": OpRule(_same(I8, I16), checks=(
        _axes_in(1, 65536, "C"), _kernel_stride(65536, 256, stride_if_padded=True))),
    # Vela 5.2 behaviour: int16 ARGMAX is refused (the report is silent on types).
    "ARGMAX": OpRule(frozenset({(I8, I32)}), checks=(_argmax,)),
    # Vela 5.2 behaviour: strides over 3 compile when the convolution is not dilated; H and W
    # over 65536 compile (the report limits only C).
    "CONV2D": OpRule(_MAC_TYPES, "iwo", (
        _axes_in(1, 65536, "C"), _kernel_stride(4096, 64, stride_if_dilated=True),
        _conv_weights, _followed_by_rescale)),
    # Vela 5.2 behaviour: unlike CONV2D, a depthwise stride over 3 is refused (where it
    # matters) even without dilation, unless the IFM has one channel (a plain convolution).
    "DEPTHWISE_CONV2D": OpRule(_MAC_TYPES, "iwo", (
        _axes_in(1, 65536, "C"), _depthwise_stride,
        _conv_weights, _followed_by_rescale)),
    "CONV3D": OpRule(_MAC_TYPES, "iwo", (
        _axes_in(1, 65536, "C"), _conv3d_kernel, _kernel_stride(4096, 64, stride_if_dilated=True),
        _conv_weights, _followed_by_rescale)),
    "TRANSPOSE_CONV2D": OpRule(_MAC_TYPES, "iwo", (
        _axes_in(1, 65536, "C"), _kernel_stride(4096, 64), _transpose_conv_stride, _conv_weights,
        _followed_by_rescale)),
    "MATMUL": OpRule(frozenset({(I8, I8, I32)}), "iio", (_matmul_axes,)),
    "RESIZE": OpRule(frozenset({(I8, I8), (I16, I16), (I8, I32), (I16, I48)}), checks=(_resize,)),
    "TRANSPOSE": OpRule(_same(I8, I16, I32)),
    "REDUCE_SUM": OpRule(_same(I8, I16, I32), checks=(_reduce_sum,)),
    "REDUCE_MAX": OpRule(_same(I8, I16)),
    "REDUCE_MIN": OpRule(_same(I8, I16)),
    "CONCAT": OpRule(_same(I8, I16, I32)),
    "RESHAPE": OpRule(_same(I8, I16, I32)),
    "SLICE": OpRule(_same(I8, I16, I32)),
    "TILE": OpRule(_same(I8, I16, I32)),
    # Vela 5.2 behaviour: the report says "down-casting from int32 is not supported"; Vela
    # compiles int32 -> int8/int16 casts (as an NPU Add).
    "CAST": OpRule(frozenset((a, b) for a in INT_8_16_32 for b in INT_8_16_32 if a != b)),
    "RESCALE": OpRule(frozenset((a, b) for a in (I8, I16, I32, I48) for b in (I8, I16, I32)),
                      checks=(_no_int48_standalone,)),
    "IDENTITY": OpRule(_same(I4, I8, I16, I32, I48)),
    "PAD": OpRule(_same(I8, I16, I32)),
    "REVERSE": OpRule(_same(I8, I16, I32), checks=(_reverse_axis,)),
}

# Listed as not supported by the report (anything absent from U55_U65 is refused as well).
U55_U65_NOT_SUPPORTED = frozenset((
    "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT", "INTDIV", "LOGICAL_AND",
    "LOGICAL_RIGHT_SHIFT", "LOGICAL_OR", "LOGICAL_XOR", "LOGICAL_NOT", "SELECT", "EQUAL",
    "GREATER", "GREATER_EQUAL", "REDUCE_ALL", "REDUCE_ANY", "GATHER", "SCATTER"))

# Ethos-U85: the PRO-INT operator set with EXT-INT16/INT4/DOUBLEROUND (report: "Ethos-U85 TOSA
# Operator Support"); everything else falls back to the CPU.
U85_OPS = frozenset((
    "ARGMAX", "AVG_POOL2D", "CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "MATMUL", "MAX_POOL2D",
    "TRANSPOSE_CONV2D", "CLAMP", "ADD", "ARITHMETIC_RIGHT_SHIFT", "BITWISE_AND", "BITWISE_OR",
    "BITWISE_XOR", "INTDIV", "LOGICAL_AND", "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT",
    "LOGICAL_OR", "LOGICAL_XOR", "MAXIMUM", "MINIMUM", "MUL", "SUB", "TABLE", "ABS",
    "BITWISE_NOT", "CLZ", "LOGICAL_NOT", "NEGATE", "SELECT", "EQUAL", "GREATER",
    "GREATER_EQUAL", "REDUCE_ALL", "REDUCE_ANY", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_SUM",
    "CONCAT", "PAD", "RESHAPE", "REVERSE", "SLICE", "TILE", "TRANSPOSE",
    "RESIZE", "CAST", "RESCALE", "IDENTITY", "COND_IF", "WHILE_LOOP"))

U85: dict[str, OpRule] = {
    "TRANSPOSE_CONV2D": OpRule(checks=(_const_weights_bias,)),
    "CONV3D": OpRule(checks=(_conv3d_dynamic,)),
}

# Mali (the ML SDK for Vulkan path): what Arm's model converter (ai-ml-sdk-model-converter 0.11.0,
# TOSA -> VGF) lowers, checked over every operator x type signature of the TOSA 1.0.2
# conformance slice (bench/mali_converter.py). It lowers every element type of the suite (BF16
# and FP8 included) and FFT; it refuses control flow (COND_IF, WHILE_LOOP) and any operator
# whose zero points (or RESCALE multiplier/shift) are not constants ("cannot retrieve the zero
# points from op"). Variables and CUSTOM: not in the slice, kept out (assumed).
MALI_UNSUPPORTED_OPS = frozenset((
    "COND_IF", "WHILE_LOOP", "VARIABLE", "VARIABLE_READ", "VARIABLE_WRITE", "CUSTOM"))
# Operand positions that the converter needs as constants (TOSA 1.0 operand order).
MALI_CONST_OPERANDS: dict[str, tuple[int, ...]] = {
    "CONV2D": (3, 4), "CONV3D": (3, 4), "DEPTHWISE_CONV2D": (3, 4), "TRANSPOSE_CONV2D": (3, 4),
    "AVG_POOL2D": (1, 2), "MATMUL": (2, 3), "NEGATE": (1, 2), "RESCALE": (1, 2, 3, 4),
}

# Where each family's rules come from (for reports and docs).
RULE_SOURCES: dict[str, str] = {
    "ethos-u55": "Vela 5.2 SUPPORTED_OPS.md, 'Ethos-U55 and Ethos-U65 TOSA' sections",
    "ethos-u65": "Vela 5.2 SUPPORTED_OPS.md, 'Ethos-U55 and Ethos-U65 TOSA' sections",
    "ethos-u85": "Vela 5.2 SUPPORTED_OPS.md, 'Ethos-U85 TOSA Operator Support'",
    "mali": "ai-ml-sdk-model-converter 0.11.0 over the TOSA 1.0.2 conformance slice "
            "(bench/mali_converter.py)",
    "cpu": "tosa_jax runs every operator",
}

_SKIP = ("CONST", "CONST_SHAPE")


def _tensor_types(c: Ctx) -> list[str]:
    names = [n for n in c.op.inputs + c.op.outputs if n in c.block.tensors]
    return [c.block.tensors[n].dtype for n in names]


def _ethos_u55_u65(c: Ctx) -> list[str]:
    op = c.op.op
    if op in U55_U65_NOT_SUPPORTED or op not in U55_U65:
        return [f"{op} is not supported on Ethos-U55/U65 (TOSA, Vela 5.2)"]
    types = _tensor_types(c)
    if BOOL in types:
        return ["Bool is not supported (TOSA generic constraint: PRO-INT without bool)"]
    if any(t in FLOAT for t in types):
        return ["Only the PRO-INT profile is supported: floating-point tensors found"]
    return _rule_reasons(c, U55_U65[op])


def _ethos_u85(c: Ctx) -> list[str]:
    op = c.op.op
    if op in ("GATHER", "SCATTER"):
        # Vela 5.2 behaviour: the report lists them, but Vela places every TOSA GATHER and
        # SCATTER we tried (int8/16/32 values, constant or dynamic indices, N=1 or 2) on the CPU.
        return [f"{op} is not supported on the NPU (Vela 5.2 runs TOSA {op} on the CPU)"]
    if op not in U85_OPS:
        return [f"{op} is not supported on Ethos-U85 (TOSA PRO-INT baseline, Vela 5.2)"]
    if any(t in FLOAT for t in _tensor_types(c)):
        return ["Only the PRO-INT profile is supported: floating-point tensors found"]
    rule = U85.get(op)
    return [] if rule is None else _rule_reasons(c, rule)


def _rule_reasons(c: Ctx, rule: OpRule) -> list[str]:
    """The first of a rule's type signature and checks that the operator breaks, as Vela stops at
    the first broken constraint; [] when it breaks none."""
    r = _types_reason(c, rule)
    if r:
        return [r]
    for check in rule.checks:
        r = check(c)
        if r:
            return [r]
    return []


def _mali(c: Ctx) -> list[str]:
    op = c.op.op
    if op in MALI_UNSUPPORTED_OPS:
        return [f"{op} is not lowered by model-converter (TOSA -> VGF)"]
    for i in MALI_CONST_OPERANDS.get(op, ()):
        if i < len(c.op.inputs) and c.const(i) is None:
            return [f"{op} operand #{i} ({c.op.inputs[i]}) is not a constant: model-converter "
                    "needs constant zero points (and RESCALE multiplier/shift)"]
    for n in c.op.inputs + c.op.outputs:
        t = c.block.tensors.get(n)
        if t is not None and len(t.shape) > 6:
            return [f"Tensor rank must be <= 6 on the Mali class (assumed): {n} has {len(t.shape)}"]
    return []


def unsupported_reasons(device: DeviceModel, graph: Graph, block: Block, op: Operator) -> list[str]:
    """[] when ``op`` (an operator of ``block`` in ``graph``) runs on ``device``; otherwise the
    reasons it does not, worded like Vela's constraints. CONST operators run everywhere."""
    if device.kind == "cpu" or op.op in _SKIP:
        return []
    c = Ctx(device, graph, block, op)
    if device.family in ("ethos-u55", "ethos-u65"):
        return _ethos_u55_u65(c)
    if device.family == "ethos-u85":
        return _ethos_u85(c)
    if device.family == "mali":
        return _mali(c)
    return [f"no support model for device family {device.family!r}"]


def runs_on(device: DeviceModel, graph: Graph, block: Block, op: Operator) -> bool:
    return not unsupported_reasons(device, graph, block, op)
