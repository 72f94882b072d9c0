"""Cost estimates: cycles and time per operator, partition and network, on each device model.

The model, per operator on a device:

* work: MACs from the shapes (CONV2D, DEPTHWISE_CONV2D, TRANSPOSE_CONV2D, CONV3D, MATMUL, pools),
  rounded up to the NPU's micro-block (output width x height x depth, and 8 input channels per
  step) so that thin layers (3 input channels, one output row) cost what the hardware spends on
  them; output elements for elementwise operators, table lookups and data movement; input
  elements for reductions.
* NPU compute cycles = ``alpha * work + gamma * output elements + delta * aux + beta`` per
  class: ``work`` is in cycles of the whole MAC array at full use, so ``alpha`` is the inverse
  utilisation; ``gamma`` the output stage's cycles per element (scaling, rounding, and a fused
  TABLE lookup, which has its own ``gamma_lut``); ``aux`` the elements of MATMUL's second
  operand, which Vela transposes before the product; ``beta`` the fixed cost of one NPU command
  (block setup, weight and bias fetch, pipeline fill).
* memory cycles = activation bytes / SRAM bandwidth + weight bytes / off-chip bandwidth.
* operator cycles = max(compute, memory), as Vela does: the NPU overlaps DMA with compute.
* NPU fusion, as Vela does it: a RESCALE, TABLE or CLAMP right after the operator that makes its
  input (sole consumer) runs in that operator's output stage, and a RESCALE that only feeds
  ADD/SUB/MUL is the binary operator's input scaling: both cost nothing of their own; RESHAPE is
  free (a view) unless its input is read elsewhere too (then Vela copies it); an operator
  whose inputs are all constants is folded at compile time.

The NPU parameters per family and class, and a fixed cost per NPU partition, were fitted
(non-negative least squares on the relative error) to Vela 5.2's own estimates: its per-layer
cycles (``vela --verbose-performance``) and its ``cycles_total`` per partition, for the default
placement of the fixture networks cnn_int8 and mlp_attn_int8, the GraphBuilder networks of
tests/tj_hw_graphs.py and the INT8 networks of the model zoo (bench/zoo.py: bert_tiny, lstm,
mobilenetv2, resnet, unet) on ethos-u55-128, ethos-u65-256 and ethos-u85-256.
``bench/vela_cycles.py --zoo --fit`` re-derives them and reports the fit in sample and leaving
one network out (the honest figure for a network never seen).

CPU and GPU: MACs at ``1/alpha_mac`` of the peak rate, other operators at ``elems_per_cycle``,
plus ``beta`` per kernel, as stated in ``HOST_PARAMS`` (assumed, no oracle). Transfers between
devices go through shared off-chip memory: bytes / the slower side's bandwidth, plus a fixed
synchronisation latency.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from tosa_jax.hw_models.partition import Transfer

from tosa_jax.ir import Block, Graph, Operator, Tensor, num_elements

# -- operator classes ------------------------------------------------------------------------

CONV_OPS = frozenset({"CONV2D", "CONV3D", "TRANSPOSE_CONV2D"})
POOL_OPS = frozenset({"AVG_POOL2D", "MAX_POOL2D"})
REDUCE_OPS = frozenset({"REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PRODUCT", "REDUCE_ALL",
                        "REDUCE_ANY", "ARGMAX"})
MOVE_OPS = frozenset({"TRANSPOSE", "SLICE", "CONCAT", "PAD", "TILE", "REVERSE", "GATHER",
                      "SCATTER", "RESIZE"})
FREE_OPS = frozenset({"RESHAPE", "IDENTITY", "CONST", "CONST_SHAPE"})
FUSIBLE_OPS = frozenset({"RESCALE", "TABLE", "CLAMP"})
BINARY_OPS = frozenset({"ADD", "SUB", "MUL"})
CLASSES = ("conv", "dwconv", "matmul", "pool", "reduce", "elementwise", "move", "fft")


def op_class(op: str) -> str:
    if op in CONV_OPS:
        return "conv"
    if op == "DEPTHWISE_CONV2D":
        return "dwconv"
    if op == "MATMUL":
        return "matmul"
    if op in POOL_OPS:
        return "pool"
    if op in REDUCE_OPS:
        return "reduce"
    if op in MOVE_OPS:
        return "move"
    if op in ("FFT2D", "RFFT2D"):
        return "fft"
    return "elementwise"


# Micro-block of the NPU's MAC array (output width, height, depth) and input channels per step:
# Arm Ethos-U55/U65 TRM "MAC unit" (these are the block sizes Vela's architecture_features uses
# for the U55/U65 configs); for U85 the same per-MAC geometry is assumed.
UBLOCK: dict[int, tuple[int, int, int]] = {
    32: (1, 1, 4), 64: (1, 1, 8), 128: (2, 1, 8), 256: (2, 2, 8), 512: (2, 2, 8),
    1024: (4, 2, 16), 2048: (4, 4, 16),
}
IFM_STEP = 8

# Fitted NPU parameters per family and class: (alpha, gamma, gamma_lut, delta, beta), see the
# module docstring. Classes missing for a family use DEFAULT_NPU.
# Regenerate with ``bench/vela_cycles.py --fit``.
NPU_PARAMS: dict[str, dict[str, tuple[float, ...]]] = {
    "ethos-u55": {
        "conv": (1.0349, 0.5278, 0.4706, 0.0, 1425.0303),
        "dwconv": (0.0, 0.8894, 1.1732, 0.0, 2900.8503),
        "elementwise": (0.8124, 0.2638, 0.5487, 0.0, 25.2568),
        "matmul": (100.176, 13.1193, 1.0, 0.0, 0.0),
        "move": (0.1353, 0.1353, 1.0, 0.0, 1099.8696),
        "partition": (0.0,),
        "pool": (3.7154, 0.8793, 1.0, 0.0, 1312.486),
        "reduce": (0.2726, 3.744, 0.0, 0.0, 215.9219),
    },
    "ethos-u65": {
        "conv": (0.6109, 0.3309, 0.7167, 0.0, 1397.3019),
        "dwconv": (0.7377, 0.2228, 1.3513, 0.0, 1122.435),
        "elementwise": (0.5656, 0.0, 0.6322, 0.0, 2.9241),
        "matmul": (35.0932, 55.366, 1.0, 4.817, 7329.9304),
        "move": (0.0483, 0.0483, 1.0, 0.0, 949.3597),
        "partition": (0.0,),
        "pool": (4.6609, 0.1848, 1.0, 0.0, 1777.4478),
        "reduce": (0.1515, 3.4791, 0.0, 0.0, 235.5308),
    },
    "ethos-u85": {
        "conv": (0.3856, 0.6122, 0.2628, 0.0, 1807.8116),
        "dwconv": (0.0, 0.4576, 0.0, 0.0, 3545.7948),
        "elementwise": (0.2115, 0.2018, 0.0098, 0.0, 25.8508),
        "matmul": (1.2184, 0.0, 1.0, 0.0, 488.2175),
        "move": (0.3846, 0.3846, 1.0, 0.0, 590.5523),
        "partition": (0.0,),
        "pool": (1.9345, 2.0549, 1.0, 0.0, 619.6444),
        "reduce": (0.0, 1.2924, 0.0, 0.0, 222.7451),
    },
}
DEFAULT_NPU: dict[str, tuple[float, float, float, float, float]] = {
    "conv": (2.0, 1.0, 1.0, 0.0, 300.0), "dwconv": (2.0, 1.0, 1.0, 0.0, 300.0),
    "matmul": (8.0, 1.0, 1.0, 1.0, 500.0), "pool": (2.0, 1.0, 1.0, 0.0, 300.0),
    "reduce": (1.0, 1.0, 1.0, 0.0, 100.0), "elementwise": (0.0, 1.0, 1.0, 0.0, 100.0),
    "move": (0.0, 1.0, 1.0, 0.0, 200.0), "fft": (4.0, 1.0, 1.0, 0.0, 500.0),
}
# Host devices (assumed, no oracle): alpha = 1 / utilisation of the peak MAC rate; beta = cycles
# to dispatch one kernel (CPU: a function call and loop setup; GPU: a kernel launch, ~5 us).
HOST_PARAMS: dict[str, dict[str, Any]] = {
    "cpu": {"alpha_mac": 2.0, "elems_per_cycle": 8.0, "beta": 200.0},
    "gpu": {"alpha_mac": 2.5, "elems_per_cycle": 64.0, "beta": 4000.0},
}
# Transfers between devices: assumed synchronisation latency (cache maintenance and a doorbell
# or interrupt) on top of the copy itself.
TRANSFER_LATENCY_S = 2e-6


# -- results ---------------------------------------------------------------------------------


@dataclass
class OpCost:
    index: int           # main-block operator index
    op: str
    output: str
    device: str
    partition: int
    op_class: str
    macs: int
    work: float          # the class's unit of work (rounded MACs, elements)
    compute_cycles: float
    memory_cycles: float
    cycles: float
    time_s: float
    activation_bytes: int
    weight_bytes: int
    fused_into: str | None = None  # "output stage of <tensor>", "input of <tensor>", "folded"
    out_elements: int = 0
    lut: bool = False      # NPU: a TABLE runs in this operator's output stage
    aux_elements: int = 0  # NPU: MATMUL's second operand, which Vela transposes first


@dataclass
class TransferCost(Transfer):
    """A crossing tensor and the time its move takes."""

    time_s: float


@dataclass
class PartitionCost:
    index: int
    device: str
    ops: list[OpCost]
    cycles: float
    time_s: float
    macs: int
    peak_bytes: int       # activations live at once (liveness over the partition's schedule)
    weight_bytes: int
    vela_cycles: float | None = None
    # the partition's operators, counted as everywhere (see ``count_ops``): its
    # ``Partition.op_indices``; ``fused`` of them cost nothing of their own on this device
    op_count: int = 0
    fused: int = 0


@dataclass
class NetworkCost:
    target: list[str]
    partitions: list[PartitionCost]
    transfers: list[TransferCost]
    time_s: float          # partitions and transfers, one after another
    macs: int
    peak_bytes: int        # activations live at once over the whole schedule
    weight_bytes: int
    per_device: dict[str, dict[str, float]] = field(default_factory=dict)
    op_count: int = 0      # ``count_ops``: the same count as the partitions' and devices' sums

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


def count_ops(pg: Any) -> int:
    """THE operator count of hw_models (tables, summaries, pictures, JSON): operators of the
    main block that run somewhere, i.e. every operator except CONST, CONST_SHAPE and operators
    computed from constants only (those are folded: copied into each partition that reads them,
    never run). Operators fused into another's output stage (a RESCALE after a convolution on an
    NPU) do count: they are in the graph and placed; their cost is their host's."""
    return sum(len(p.op_indices) for p in pg.partitions)


# -- tensor helpers --------------------------------------------------------------------------


def _bytes(t: Tensor) -> int:
    from tosa_jax.ir import STORAGE_BITS

    return (num_elements(t.shape) * STORAGE_BITS.get(t.dtype, 32) + 7) // 8


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def op_macs(block: Block, op: Operator) -> int:
    """Multiply-accumulates of one operator, from its shapes (0 for operators without MACs)."""
    t = block.tensors
    out = t[op.outputs[0]].shape if op.outputs else ()
    if op.op in ("CONV2D", "DEPTHWISE_CONV2D", "CONV3D", "TRANSPOSE_CONV2D"):
        w = t[op.inputs[1]].shape
        if op.op == "CONV2D":          # weights [OC, KH, KW, IC]
            return num_elements(out) * w[1] * w[2] * w[3]
        if op.op == "CONV3D":          # [OC, KD, KH, KW, IC]
            return num_elements(out) * w[1] * w[2] * w[3] * w[4]
        if op.op == "DEPTHWISE_CONV2D":  # [KH, KW, C, M]
            return num_elements(out) * w[0] * w[1]
        ins = t[op.inputs[0]].shape    # TRANSPOSE_CONV2D: each input pixel scatters a kernel
        return num_elements(ins[:3]) * w[0] * w[1] * w[2] * w[3]
    if op.op == "MATMUL":              # [N, H, C] x [N, C, W]
        a = t[op.inputs[0]].shape
        return num_elements(out) * a[2]
    if op.op in POOL_OPS:
        k = op.attrs.get("kernel", (1, 1))
        return num_elements(out) * k[0] * k[1]
    return 0


def _work_npu(block: Block, op: Operator, macs_per_cycle: int) -> float:
    """Work in MAC-array cycles at full utilisation, rounded to the micro-block."""
    t = block.tensors
    ux, uy, uz = UBLOCK.get(macs_per_cycle, (2, 2, 8))
    out = t[op.outputs[0]].shape
    cls = op_class(op.op)
    if cls in ("conv", "dwconv", "pool") and len(out) >= 4:
        n, oh, ow, oc = out[0], out[-3], out[-2], out[-1]
        spatial = n * _ceil_to(oh, uy) * _ceil_to(ow, ux)
        if cls == "conv":
            w = t[op.inputs[1]].shape
            kernel = num_elements(w[1:-1]) if op.op != "TRANSPOSE_CONV2D" else w[1] * w[2]
            ic = w[-1]
            return spatial * _ceil_to(oc, uz) * kernel * _ceil_to(ic, IFM_STEP) / macs_per_cycle
        if cls == "dwconv":
            w = t[op.inputs[1]].shape
            # one input channel per output: an eighth of the array's MACs
            return spatial * _ceil_to(oc, uz) * w[0] * w[1] * IFM_STEP / macs_per_cycle
        k = op.attrs.get("kernel", (1, 1))
        return spatial * _ceil_to(oc, uz) * k[0] * k[1] * IFM_STEP / macs_per_cycle
    if cls == "matmul":
        a = t[op.inputs[0]].shape
        n, h, w = out[0], out[1], out[2]
        return n * _ceil_to(h, uy * ux) * _ceil_to(w, uz) * _ceil_to(a[2], IFM_STEP) \
            / macs_per_cycle
    if cls == "reduce":
        return num_elements(t[op.inputs[0]].shape) * IFM_STEP / macs_per_cycle
    if cls == "fft":
        h, w = out[-2], out[-1]
        return num_elements(out) * (math.log2(max(h, 2)) + math.log2(max(w, 2))) * 4
    return float(num_elements(out))


# -- fusion on the NPU -----------------------------------------------------------------------


def npu_fusion(block: Block, const_tensors: set[str]) -> dict[int, str]:
    """Operators of a block that cost nothing of their own on an Ethos-U NPU: index -> why."""
    producer: dict[str, int] = {}
    users: dict[str, list[int]] = {}
    for i, op in enumerate(block.operators):
        for o in op.outputs:
            producer[o] = i
        for n in op.inputs:
            users.setdefault(n, []).append(i)
    fused: dict[int, str] = {}
    for i, op in enumerate(block.operators):
        data_in = [n for n in op.inputs if n not in const_tensors]
        if op.op in ("CONST", "CONST_SHAPE") or not data_in:
            fused[i] = "folded"
            continue
        if op.op in FREE_OPS:
            # a view, unless its input is also read elsewhere: then Vela copies it
            if len(users.get(data_in[0], [])) == 1:
                fused[i] = f"view of {data_in[0]}"
            continue
        if op.op not in FUSIBLE_OPS:
            continue
        outs = users.get(op.outputs[0], [])
        if op.op == "RESCALE" and outs and all(block.operators[u].op in BINARY_OPS for u in outs) \
                and block.tensors[op.outputs[0]].dtype == "INT32":
            fused[i] = f"input of {block.operators[outs[0]].outputs[0]}"
            continue
        src = producer.get(data_in[0])
        if src is not None and len(users.get(data_in[0], [])) == 1 \
                and block.operators[src].op not in MOVE_OPS | FREE_OPS:
            fused[i] = f"output stage of {block.operators[src].outputs[0]}"
    return fused


def _const_tensors(block: Block) -> set[str]:
    """Tensors known before running: constants and what is computed from constants only."""
    const: set[str] = set()
    for op in block.operators:
        if op.op in ("CONST", "CONST_SHAPE") or (op.inputs and all(n in const
                                                                  for n in op.inputs)):
            const.update(op.outputs)
    return const


# -- per operator ----------------------------------------------------------------------------


def _params(device: Any, cls: str) -> tuple[float, ...]:
    table = NPU_PARAMS.get(device.family, {})
    return table.get(cls, DEFAULT_NPU.get(cls, (1.0, 1.0, 1.0, 0.0, 100.0)))


def partition_overhead_cycles(device: Any) -> float:
    """Cycles an NPU spends on a partition besides its operators (NPU_PARAMS "partition")."""
    if device.kind != "npu":
        return 0.0
    return NPU_PARAMS.get(device.family, {}).get("partition", (1000.0,))[0]


def npu_features(c: OpCost) -> tuple[float, float, float, float, float]:
    """The terms the NPU parameters multiply: (work, plain output elements, output elements
    through a fused TABLE, elements of an implicit operand transpose, 1)."""
    return (c.work, 0.0 if c.lut else float(c.out_elements),
            float(c.out_elements) if c.lut else 0.0, float(c.aux_elements), 1.0)


def _lut_fused(block: Block, fused: dict[int, str]) -> set[str]:
    """Outputs of operators whose output stage runs a fused TABLE (directly or after a
    fused RESCALE)."""
    by_output = {op.outputs[0]: i for i, op in enumerate(block.operators) if op.outputs}
    heads: set[str] = set()
    for i, why in fused.items():
        if block.operators[i].op != "TABLE" or not why.startswith("output stage of "):
            continue
        name = why[len("output stage of "):]
        while name in by_output and fused.get(by_output[name], "").startswith("output stage"):
            name = fused[by_output[name]][len("output stage of "):]
        heads.add(name)
    return heads


def _activation_bytes(block: Block, op: Operator, const: set[str], narrow: set[str]) -> int:
    total = 0
    for n in (*op.inputs, *op.outputs):
        if n in const:
            continue
        t = block.tensors[n]
        # an int32 tensor that a fused RESCALE narrows (or widens from) is stored as 8 bits
        total += num_elements(t.shape) if n in narrow else _bytes(t)
    return total


def op_costs(graph: Graph, device: Any, block: Block | None = None, partition: int = 0,
             index_map: list[int] | None = None) -> list[OpCost]:
    """Cost of every operator of ``block`` (default: the main block) on ``device``."""
    block = block or graph.main
    const = _const_tensors(block)
    npu = device.kind == "npu"
    fused = npu_fusion(block, const) if npu else {
        i: "folded" if op.inputs and all(n in const for n in op.inputs) else "view (no copy)"
        for i, op in enumerate(block.operators)
        if op.op in FREE_OPS or (op.inputs and all(n in const for n in op.inputs))}
    # tensors that live only between an operator and its fused RESCALE: 8-bit in storage
    narrow = {n for i, why in fused.items() if block.operators[i].op == "RESCALE"
              for n in (*block.operators[i].inputs[:1], *block.operators[i].outputs)
              if block.tensors[n].dtype == "INT32"} if npu else set()
    luts = _lut_fused(block, fused) if npu else set()
    costs = []
    for i, op in enumerate(block.operators):
        if op.op in ("CONST", "CONST_SHAPE"):
            continue
        idx = index_map[i] if index_map else i
        cls = op_class(op.op)
        macs = op_macs(block, op)
        weights = sum(_bytes(block.tensors[n]) for n in op.inputs[1:] if n in const) \
            if cls in ("conv", "dwconv", "matmul") else 0
        act = _activation_bytes(block, op, const, narrow)
        out = op.outputs[0] if op.outputs else ""
        why = fused.get(i)
        if why is not None:
            costs.append(OpCost(idx, op.op, out, device.name, partition, cls, macs, 0.0, 0.0,
                                0.0, 0.0, 0.0, 0, 0, why))
            continue
        n_out = num_elements(block.tensors[out].shape) if out else 0
        lut = out in luts
        aux = num_elements(block.tensors[op.inputs[1]].shape) if op.op == "MATMUL" else 0
        if npu:
            work = _work_npu(block, op, device.macs_per_cycle)
            alpha, gamma, gamma_lut, delta, beta = _params(device, cls)
            compute = alpha * work + (gamma_lut if lut else gamma) * n_out + delta * aux + beta
        else:
            p = HOST_PARAMS.get(device.kind, HOST_PARAMS["cpu"])
            dtypes = {block.tensors[n].dtype for n in op.inputs if n in block.tensors}
            rate = device.macs_per_cycle
            if dtypes & {"FP32", "FP16", "BF16"}:
                rate = device.fp32_macs_per_cycle or rate
            elif dtypes & {"INT16", "INT32", "INT48"}:
                rate = device.int16_macs_per_cycle or rate
            if macs:
                work = float(macs)
                compute = p["alpha_mac"] * macs / rate + p["beta"]
            else:
                work = float(num_elements(block.tensors[out].shape)) if out else 0.0
                compute = work / p["elems_per_cycle"] + p["beta"]
        memory = act / device.sram_bw_bytes_per_cycle + weights / device.dram_bw_bytes_per_cycle
        cycles = max(compute, memory)
        costs.append(OpCost(idx, op.op, out, device.name, partition, cls, macs, work, compute,
                            memory, cycles, cycles / device.clock_hz, act, weights, None, n_out,
                            lut, aux))
    return costs


def peak_activation_bytes(block: Block, order: Iterable[int] | None = None) -> int:
    """Most bytes of non-constant tensors live at once while the block's operators run in
    ``order`` (default: as listed): a tensor lives from its producer (or the start, for
    inputs) to its last reader (or the end, for outputs)."""
    ops = list(order) if order is not None else list(range(len(block.operators)))
    const = _const_tensors(block)
    last: dict[str, int] = {}
    for step, i in enumerate(ops):
        for n in block.operators[i].inputs:
            last[n] = step
    end = len(ops)
    for n in block.outputs:
        last[n] = end
    live = {n: _bytes(block.tensors[n]) for n in block.inputs}
    peak = sum(live.values())
    for step, i in enumerate(ops):
        op = block.operators[i]
        for n in op.outputs:
            if n not in const:
                live[n] = _bytes(block.tensors[n])
        peak = max(peak, sum(live.values()))
        for n in [n for n in live if last.get(n, -1) <= step]:
            del live[n]
    return peak


# -- partitions and the network --------------------------------------------------------------


def estimate(pg: Any, vela_cycles: dict[int, float] | None = None) -> NetworkCost:
    """Estimate a PartitionedGraph: per operator, per partition, transfers and the network."""
    from tosa_jax.hw_models.devices import get_device

    parts: list[PartitionCost] = []
    for p in pg.partitions:
        dev = get_device(p.device)
        sub = p.graph.main
        ops = op_costs(p.graph, dev, sub, p.index, p.source_indices)
        weights = sum(_bytes(sub.tensors[o]) for op in sub.operators
                      if op.op in ("CONST", "CONST_SHAPE") for o in op.outputs)
        cycles = sum(c.cycles for c in ops) + partition_overhead_cycles(dev)
        placed = set(p.op_indices)
        parts.append(PartitionCost(p.index, p.device, ops, cycles, cycles / dev.clock_hz,
                                   sum(c.macs for c in ops), peak_activation_bytes(sub), weights,
                                   (vela_cycles or {}).get(p.index), len(placed),
                                   sum(1 for c in ops if c.index in placed
                                       and c.fused_into is not None)))
    transfers = []
    for t in pg.transfers:
        a, b = get_device(t.source_device), get_device(t.dest_device)
        bw = min(a.dram_bw_bytes_per_second, b.dram_bw_bytes_per_second)
        transfers.append(TransferCost(**asdict(t), time_s=t.nbytes / bw + TRANSFER_LATENCY_S))
    per_device: dict[str, dict[str, float]] = {}
    for pc in parts:
        d = per_device.setdefault(pc.device, {"cycles": 0.0, "time_s": 0.0, "macs": 0,
                                              "partitions": 0, "ops": 0, "fused": 0,
                                              "weight_bytes": 0})
        d["cycles"] += pc.cycles
        d["time_s"] += pc.time_s
        d["macs"] += pc.macs
        d["partitions"] += 1
        d["ops"] += pc.op_count
        d["fused"] += pc.fused
        d["weight_bytes"] += pc.weight_bytes
    main = pg.graph.main
    return NetworkCost(
        list(pg.target), parts, transfers,
        sum(pc.time_s for pc in parts) + sum(t.time_s for t in transfers),
        sum(pc.macs for pc in parts), peak_activation_bytes(main, _full_order(pg)),
        sum(pc.weight_bytes for pc in parts), per_device, count_ops(pg))


def _full_order(pg: Any) -> list[int]:
    """The whole schedule: constants where the file has them, then the partitions' order."""
    block = pg.graph.main
    scheduled = set(pg.order)
    rest = [i for i in range(len(block.operators)) if i not in scheduled]
    return rest + list(pg.order)


def vela_cycles_total(path: str | os.PathLike, accelerator: str,
                      out_dir: str | os.PathLike) -> float | None:
    """Vela 5.2's own estimate for a .tosa file: ``cycles_total`` of its summary CSV (the
    ``vela`` CLI of this Python environment, default system config). None when Vela is not
    installed or does not compile the graph."""
    import csv
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / "vela"
    exe = str(beside) if beside.exists() else shutil.which("vela")
    if exe is None:
        return None
    out = Path(out_dir)
    proc = subprocess.run([exe, "--accelerator-config", accelerator, "--output-dir", str(out),
                           os.fspath(path)], capture_output=True, text=True, timeout=600)
    if "Traceback" in proc.stdout + proc.stderr:
        return None
    for summary in sorted(out.glob(f"{Path(path).stem}_summary_*.csv")):
        with summary.open() as f:
            return float(next(csv.DictReader(f))["cycles_total"])
    return None
