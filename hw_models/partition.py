"""Placement of a TOSA graph's operators on device models, and the partitions that follow.

``partition(graph, target)`` gives every operator a device (the first target device that supports
it, else the CPU fallback, or what a user policy says), orders the operators so that operators of
one device run back to back, cuts that order where the device changes, and makes each run a
partition: a valid single-block TOSA graph of its own, whose inputs and outputs are the tensors
that cross between devices. ``PartitionedGraph.model()`` runs the partitions one after another,
each as its own jitted function on its own JAX device.

Reads the IR only (hw_models never imports lowering/); running goes through the public
``tosa_jax.load``.
"""

from __future__ import annotations

import copy
import heapq
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tosa_jax.errors import TosaError, TosaHardwareError, TosaInputError
from tosa_jax.ir import Block, Graph, Operator, Region, storage_bytes

# Operators that make data rather than compute it: they travel with their consumers, copied into
# every partition that needs them, and are never placed on a device of their own.
CONST_OPS = frozenset({"CONST", "CONST_SHAPE"})
# Operators that tie a graph together across blocks or calls (control flow, variables): a graph
# that has them stays whole, on one device.
WHOLE_GRAPH_OPS = frozenset({"COND_IF", "WHILE_LOOP", "VARIABLE", "VARIABLE_READ",
                             "VARIABLE_WRITE"})

# A policy: a callable ``op -> device name | None`` (None: the default placement), or a mapping
# from operator index, location, output tensor name or operator type to a device name.
Policy = Callable[[Operator], "str | None"] | Mapping[Any, str]


class TosaPartitionError(TosaHardwareError):
    """A graph cannot be partitioned as asked (unknown device, bad policy)."""


@dataclass
class Transfer:
    """A tensor that one partition produces and another consumes on another device."""

    tensor: str
    source: int
    dest: int
    source_device: str
    dest_device: str
    nbytes: int


@dataclass
class Partition:
    """A contiguous run of operators on one device, as a graph of its own."""

    index: int
    device: str
    graph: Graph
    op_indices: list[int]  # indices into the original main block's operators (CONSTs excluded)
    inputs: list[str]      # tensors it takes (graph inputs or other partitions' outputs)
    outputs: list[str]     # tensors it gives (graph outputs or other partitions' inputs)
    # the original main-block index of each operator of ``graph.main`` (constants included)
    source_indices: list[int] = field(default_factory=list)

    @property
    def block(self) -> Block:
        return self.graph.main


@dataclass
class PartitionedGraph:
    """The result of ``partition()``: the placement of every operator and the partitions."""

    graph: Graph
    target: list[str]
    fallback: str
    placement: dict[int, str]            # main-block operator index -> device (CONSTs excluded)
    reasons: dict[int, list[str]]        # operator index -> why it left the preferred device
    order: list[int]                     # the schedule: non-constant operator indices
    partitions: list[Partition]
    transfers: list[Transfer]
    whole: str | None = None             # why the graph was kept whole, when it was
    notes: list[str] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        """Devices used, in order of first use."""
        seen: list[str] = []
        for p in self.partitions:
            if p.device not in seen:
                seen.append(p.device)
        return seen

    def write(self, out_dir: str | os.PathLike, stem: str = "part") -> list[Path]:
        """Write each partition as ``<stem>_<index>_<device>.tosa``; returns the paths."""
        from tosa_jax.serialization import write

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for p in self.partitions:
            path = out / f"{stem}_{p.index}_{p.device}.tosa"
            path.write_bytes(write(p.graph))
            paths.append(path)
        return paths

    def model(self, devices: Any = None, by: str = "device", **load_options: Any
              ) -> PartitionedModel:
        """A runnable model: each partition jitted on its own JAX device (see PartitionedModel)."""
        return PartitionedModel(self, devices=devices, by=by, **load_options)

    def summary(self) -> str:
        lines = [f"{len(self.partitions)} partition(s) on {', '.join(self.devices) or '-'}"]
        if self.whole:
            lines.append(f"kept whole: {self.whole}")
        for p in self.partitions:
            lines.append(f"  #{p.index} {p.device:<16} {len(p.op_indices):4d} ops  "
                         f"in {p.inputs}  out {p.outputs}")
        return "\n".join(lines)


# -- devices -------------------------------------------------------------------------------


def _device_models() -> Any:
    from tosa_jax.hw_models import devices  # the device catalogue (data)

    return devices


def _get_device(name: str) -> Any:
    devices = _device_models()
    try:
        return devices.get_device(name)
    except (KeyError, ValueError, TosaError) as e:
        raise TosaPartitionError(
            f"unknown device {name!r}; known devices: {sorted(devices.DEVICES)}") from e


def default_fallback() -> str:
    """The CPU that runs what no accelerator takes: a device named "cpu", else the first CPU."""
    devices = _device_models().DEVICES
    if "cpu" in devices:
        return "cpu"
    for name, d in devices.items():
        if getattr(d, "kind", None) == "cpu":
            return name
    raise TosaPartitionError("no CPU device model to fall back to")


def _unsupported(device: Any, graph: Graph, block: Block, op: Operator) -> list[str]:
    if getattr(device, "kind", None) == "cpu":
        return []  # the fallback runs everything tosa_jax runs
    from tosa_jax.hw_models import support

    return list(support.unsupported_reasons(device, graph, block, op))


# -- placement -----------------------------------------------------------------------------


def _policy_choice(policy: Policy | None, index: int, op: Operator) -> str | None:
    if policy is None:
        return None
    if callable(policy) and not isinstance(policy, Mapping):
        return policy(op)
    for key in (index, op.location, *op.outputs, op.op):
        if key is not None and key in policy:
            return policy[key]
    return None


def _const_like(block: Block) -> set[int]:
    """Operators that only make constants: CONST/CONST_SHAPE, and operators whose inputs are all
    such constants (a RESCALE of a constant, shape arithmetic): decided before running, they
    are copied into each partition that reads them rather than sent between devices."""
    produced_by: dict[str, int] = {}
    const: set[int] = set()
    for i, op in enumerate(block.operators):
        if op.op in CONST_OPS or (
                op.op not in WHOLE_GRAPH_OPS and op.inputs
                and all(produced_by.get(n) in const for n in op.inputs)):
            const.add(i)
        for o in op.outputs:
            produced_by[o] = i
    return const


def _schedule(block: Block, ops: list[int], placement: dict[int, str]) -> list[int]:
    """A topological order of ``ops`` that keeps operators of one device together: among the
    ready operators, one on the current device first, then the lowest index (deterministic)."""
    producer = {o: i for i in ops for o in block.operators[i].outputs}
    deps = {i: {producer[n] for n in block.operators[i].inputs if n in producer} - {i}
            for i in ops}
    users: dict[int, list[int]] = {i: [] for i in ops}
    for i, ds in deps.items():
        for d in ds:
            users[d].append(i)
    waiting = {i: len(ds) for i, ds in deps.items()}
    ready: dict[str, list[int]] = {}
    for i in ops:
        if not waiting[i]:
            heapq.heappush(ready.setdefault(placement[i], []), i)
    order: list[int] = []
    current: str | None = None
    while len(order) < len(ops):
        if current not in ready or not ready[current]:
            # change device: to the one whose next ready operator comes first in the file
            current = min((h[0], d) for d, h in ready.items() if h)[1]
        i = heapq.heappop(ready[current])
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready.setdefault(placement[u], []), u)
    return order


def partition(graph: Graph, target: str | Sequence[str], policy: Policy | None = None, *,
              fallback: str | None = None) -> PartitionedGraph:
    """Place every operator of ``graph`` on a device and cut the graph into partitions.

    ``target``: a device name (e.g. "ethos-u55-128") or a list of them, in order of preference;
    what none of them supports runs on ``fallback`` (default: the CPU device model).
    ``policy``: a callable ``op -> device name`` (None keeps the default placement), or a mapping
    from operator index, location, output tensor name or operator type to a device name. A
    policy wins over support: it is the user's decision (any refusal is kept in ``notes``).
    """
    from tosa_jax.frontends import read_source

    graph = read_source(graph)
    targets = [target] if isinstance(target, str) else list(target)
    if not targets:
        raise TosaPartitionError("no target device given")
    fallback = fallback or default_fallback()
    models = {n: _get_device(n) for n in dict.fromkeys([*targets, fallback])}
    if policy is not None and not callable(policy) and not isinstance(policy, Mapping):
        raise TosaPartitionError("policy must be a callable op -> device name, or a mapping")

    block = graph.main
    # constant-only operators are copied to their users; one that makes a graph output
    # (a graph of constants only) is computed on a device like any other
    const = {i for i in _const_like(block)
             if block.operators[i].op in CONST_OPS
             or not set(block.operators[i].outputs) & set(block.outputs)}
    ops = [i for i in range(len(block.operators)) if i not in const]

    def check_policy(name: str) -> str:
        if name not in models:
            models[name] = _get_device(name)
        return name

    whole = _whole_reason(graph)
    if whole is not None:
        return _whole_graph(graph, targets, fallback, models, whole, ops, policy)

    placement: dict[int, str] = {}
    reasons: dict[int, list[str]] = {}
    notes: list[str] = []
    for i in ops:
        op = block.operators[i]
        chosen = _policy_choice(policy, i, op)
        if chosen is not None:
            placement[i] = check_policy(chosen)
            refused = _unsupported(models[chosen], graph, block, op)
            if refused:
                notes.append(f"policy puts {op.op} #{i} on {chosen}, which reports: "
                             + "; ".join(refused))
            continue
        why: list[str] = []
        for name in targets:
            refused = _unsupported(models[name], graph, block, op)
            if not refused:
                placement[i] = name
                break
            why.extend(f"{name}: {r}" for r in refused)
        else:
            placement[i] = fallback
        if why:
            reasons[i] = why
    order = _schedule(block, ops, placement)
    runs: list[tuple[str, list[int]]] = []
    for i in order:
        if runs and runs[-1][0] == placement[i]:
            runs[-1][1].append(i)
        else:
            runs.append((placement[i], [i]))
    parts = _build_partitions(graph, runs, const)
    return PartitionedGraph(graph, targets, fallback, placement, reasons, order, parts,
                            _transfers(graph, parts), None, notes)


def _whole_reason(graph: Graph) -> str | None:
    if len(graph.regions) > 1 or len(graph.regions[0].blocks) > 1:
        return "the graph has more than one block (control flow)"
    used = {op.op for op in graph.main.operators} & WHOLE_GRAPH_OPS
    if used:
        return f"the graph uses {', '.join(sorted(used))}"
    if any(t.variable for t in graph.main.tensors.values()):
        return "the graph has variables"
    return None


def _whole_graph(graph: Graph, targets: list[str], fallback: str, models: dict[str, Any],
                 why: str, ops: list[int], policy: Policy | None) -> PartitionedGraph:
    """The whole graph on the first target that supports every operator of every block."""
    reasons: list[str] = []
    chosen = fallback
    for name in targets:
        refused = [f"{name}: {op.op} in block {b.name!r}: {r}"
                   for region in graph.regions for b in region.blocks for op in b.operators
                   if op.op not in CONST_OPS
                   for r in _unsupported(models[name], graph, b, op)]
        if not refused:
            chosen = name
            break
        reasons.extend(refused)
    notes = ["a policy is not applied to a graph kept whole"] if policy is not None else []
    block = graph.main
    part = Partition(0, chosen, copy.deepcopy(graph), list(ops), list(block.inputs),
                     list(block.outputs), list(range(len(block.operators))))
    return PartitionedGraph(graph, targets, fallback, {i: chosen for i in ops},
                            {ops[0]: reasons} if reasons and ops else {}, list(ops), [part],
                            _transfers(graph, [part]), why, notes)


def _build_partitions(graph: Graph, runs: list[tuple[str, list[int]]], const: set[int]
                      ) -> list[Partition]:
    block = graph.main
    producer = {o: i for i, op in enumerate(block.operators) for o in op.outputs}
    # Tensors needed outside the run that makes them: by a later run, or as graph outputs.
    needed_by: dict[str, set[int]] = {}
    for k, (_, idx) in enumerate(runs):
        for i in idx:
            for n in block.operators[i].inputs:
                needed_by.setdefault(n, set()).add(k)
    graph_outputs = set(block.outputs)
    graph_inputs = {n: j for j, n in enumerate(block.inputs)}
    parts: list[Partition] = []
    for k, (device, idx) in enumerate(runs):
        mine = set(idx)
        # Constants this run reads, with the constant operators that make them (transitively).
        consts: set[int] = set()
        stack = [producer[n] for i in idx for n in block.operators[i].inputs
                 if producer.get(n) in const]
        while stack:
            c = stack.pop()
            if c not in consts:
                consts.add(c)
                stack.extend(producer[n] for n in block.operators[c].inputs if n in producer)
        inputs: list[str] = []
        for i in idx:
            for n in block.operators[i].inputs:
                p = producer.get(n)
                if (p is None or p not in const) and (p is None or p not in mine) \
                        and n not in inputs:
                    inputs.append(n)
        inputs.sort(key=lambda n: (0, graph_inputs[n]) if n in graph_inputs else (1, 0))
        outputs: list[str] = []
        for i in idx:
            for n in block.operators[i].outputs:
                if n in graph_outputs or needed_by.get(n, set()) - {k}:
                    outputs.append(n)
        order = [block.operators[c] for c in sorted(consts)] + [block.operators[i] for i in idx]
        names = dict.fromkeys(n for op in order for n in (*op.inputs, *op.outputs))
        tensors = {n: copy.copy(block.tensors[n]) for n in names}
        sub = Block("main", [copy.deepcopy(op) for op in order], tensors, inputs, outputs)
        parts.append(Partition(k, device, Graph(graph.version, [Region("main", [sub])]),
                               list(idx), inputs, outputs, [*sorted(consts), *idx]))
    return parts


def _transfers(graph: Graph, parts: list[Partition]) -> list[Transfer]:
    """Each tensor that reaches a partition from a partition on another device."""
    made: dict[str, int] = {}
    for p in parts:
        for n in p.outputs:
            made.setdefault(n, p.index)
    out: list[Transfer] = []
    for p in parts:
        for n in p.inputs:
            src = made.get(n, -1)
            if src < 0:
                continue  # a graph input: the caller puts it where the first user runs
            src_dev = parts[src].device
            if src_dev != p.device:
                out.append(Transfer(n, src, p.index, src_dev, p.device,
                                    storage_bytes(graph.main.tensors[n])))
    return out


# -- running -------------------------------------------------------------------------------


class PartitionedModel:
    """Runs a PartitionedGraph: each partition is ``tosa_jax.load``-ed on its own JAX device and
    the tensors that cross devices move with ``jax.device_put``.

    ``devices``: None (JAX's local devices), a list of ``jax.Device``, or a mapping from device
    model name (or partition index) to ``jax.Device``. With ``by="device"`` (default) each device
    model gets its own JAX device (partitions of one device share it); with ``by="partition"``
    each partition gets its own. Devices are given out in order of first use, round robin.
    """

    def __init__(self, pg: PartitionedGraph, devices: Any = None, by: str = "device",
                 **load_options: Any) -> None:
        import jax

        from tosa_jax.model import TensorSpec, load

        if by not in ("device", "partition"):
            raise TosaInputError(f"by must be 'device' or 'partition', not {by!r}")
        self.partitioned = pg
        block = pg.graph.main
        self.inputs = [TensorSpec(n, block.tensors[n].shape, block.tensors[n].dtype)
                       for n in block.inputs]
        self.outputs = [TensorSpec(n, block.tensors[n].shape, block.tensors[n].dtype)
                        for n in block.outputs]
        keys = [p.device if by == "device" else p.index for p in pg.partitions]
        if isinstance(devices, Mapping):
            assign = {k: devices[k] for k in keys}
        else:
            pool = list(devices) if devices is not None else jax.local_devices()
            distinct = list(dict.fromkeys(keys))
            assign = {k: pool[j % len(pool)] for j, k in enumerate(distinct)}
        self.jax_devices = [assign[k] for k in keys]
        self.models = [load(p.graph, device=d, **load_options)
                       for p, d in zip(pg.partitions, self.jax_devices)]
        self.moved_bytes = 0  # bytes moved between JAX devices by the last call

    def __repr__(self) -> str:
        parts = ", ".join(f"#{p.index} {p.device}@{d}" for p, d in
                          zip(self.partitioned.partitions, self.jax_devices))
        return f"<PartitionedModel {parts}>"

    def _execute(self, values: dict[str, Any]) -> dict[str, Any]:
        import jax

        env = dict(values)
        self.moved_bytes = 0
        for p, m, dev in zip(self.partitioned.partitions, self.models, self.jax_devices):
            args = []
            for n in p.inputs:
                v = env[n]
                if isinstance(v, jax.Array) and dev not in v.devices():
                    self.moved_bytes += v.nbytes
                    v = jax.device_put(v, dev)
                args.append(v)
            outs = m(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            env.update(zip(p.outputs, outs))
        for n in self.partitioned.graph.main.outputs:
            if n not in env:  # an output no operator computes at run time: a constant
                data = self.partitioned.graph.main.tensors[n].data
                if data is None:
                    raise TosaInputError(f"output {n!r} is computed by no partition")
                env[n] = data
        return env

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = [s.name for s in self.inputs]
        if args and kwargs:
            raise TosaInputError("pass inputs either by position or by name, not both")
        if kwargs:
            missing = [n for n in names if n not in kwargs]
            unknown = sorted(set(kwargs) - set(names))
            if missing or unknown:
                raise TosaInputError(f"input names do not match the graph: unknown {unknown}, "
                                     f"missing {missing}; the graph's inputs are {names}")
            return {n: kwargs[n] for n in names}
        if len(args) != len(names):
            raise TosaInputError(f"the graph takes {len(names)} input(s) {names}, got {len(args)}")
        return dict(zip(names, args))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        env = self._execute(self._bind(args, kwargs))
        outs = tuple(env[s.name] for s in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def intermediates(self, *inputs: Any, names: Any = None, constants: bool = False,
                      batched: bool = False) -> dict[str, Any]:
        """Every tensor of the graph (or the ``names`` chosen), crossing and inner tensors of
        every partition, each partition in one compiled call (``tosa_jax.inspect``)."""
        from tosa_jax.inspect import intermediates

        return intermediates(self, *inputs, names=names, constants=constants, batched=batched)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run on inputs given by name; returns numpy outputs by name."""
        import numpy as np

        if not isinstance(inputs, Mapping):
            raise TosaInputError("run() takes a mapping {input name: array}")
        env = self._execute(self._bind((), inputs))
        return {s.name: np.asarray(env[s.name]) for s in self.outputs}


def load_partitioned(source: Any, target: str | Sequence[str], policy: Policy | None = None,
                     *, devices: Any = None, by: str = "device", fallback: str | None = None,
                     **load_options: Any) -> PartitionedModel:
    """``partition(source, target, policy).model(devices)`` in one call."""
    return partition(source, target, policy, fallback=fallback).model(devices, by=by,
                                                                      **load_options)
