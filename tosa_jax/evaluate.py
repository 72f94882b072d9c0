"""``evaluate()``: run a graph exported with batch 1 over a whole dataset.

The samples are cut into large batches; each batch runs as one call of one compiled function,
split across all local JAX devices along the batch axis (``jax.shard_map``: each device holds
``batch_size / devices`` samples), and on each device a loop over chunks of a few vmapped
samples (``batched``). Every sample is computed by the same lowering as a single call, so
integer results are bit-identical to running the samples one by one; batching changes only how
many run at once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tosa_jax.errors import TosaInputError, TosaLimitError
from tosa_jax.executor import host_to_value
from tosa_jax.limits import human_bytes
from tosa_jax.lowering.numerics import INT_RANGES, Wide, wide_to_numpy
from tosa_jax.model import Model, TensorSpec, compiled_bytes, load

Metric = Callable[[np.ndarray, np.ndarray], float]


@dataclass
class EvalResult:
    """What ``evaluate`` returns.

    ``outputs``: every graph output by name, stacked over the samples ([N, ...]).
    ``predictions``: the arg-max class of the first output per sample (classification graphs;
    ``None`` when the output has a single element per sample).
    ``metric``: the metric's value when labels were given, else ``None``.
    """

    outputs: dict[str, np.ndarray]
    predictions: np.ndarray | None
    metric: float | None
    metric_name: str | None
    samples: int
    seconds: float
    devices: int
    batch_size: int
    first_batch_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("inf")

    def __repr__(self) -> str:
        metric = f", {self.metric_name}={self.metric:.4f}" if self.metric is not None else ""
        return (f"<EvalResult {self.samples} samples on {self.devices} device(s) in "
                f"{self.seconds:.3f} s ({self.samples_per_second:.1f}/s){metric}>")


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy: the fraction of samples whose arg-max class equals the label."""
    return float(np.mean(predictions == labels))


METRICS: dict[str, Metric] = {"accuracy": accuracy}


# Samples vmapped together inside the per-device loop. Measured on this project's 2-core CPU
# (batch 64, per sample): ResNet-18/2 FP32 29.7 ms as one vmap of 64, 12.5 ms as a loop over
# chunks of 4 (13.1 of 1, 21.8 of 16); int8 11.3 -> 7.8 ms. XLA CPU's convolution kernels run
# small batches well and large ones through slower paths.
DEFAULT_CHUNK = 4


def batched(fn: Callable[..., Any], chunk: int = DEFAULT_CHUNK) -> Callable[..., Any]:
    """``fn`` (one sample in, one sample out) over a leading sample axis of every argument: a
    ``lax.map`` over chunks of ``chunk`` samples, each chunk ``jax.vmap``ped. The chunk is the
    largest divisor of the sample count not above ``chunk``."""

    def run(*xs: Any) -> Any:
        n = jax.tree.leaves(xs)[0].shape[0]
        c = max(d for d in range(1, min(chunk, n) + 1) if n % d == 0)
        split = jax.tree.map(lambda a: a.reshape(n // c, c, *a.shape[1:]), xs)
        out = jax.lax.map(lambda args: jax.vmap(fn)(*args), split)
        return jax.tree.map(lambda a: a.reshape(n, *a.shape[2:]), out)

    return run


def _as_batch(spec: TensorSpec, value: Any, n: int | None) -> tuple[np.ndarray, bool]:
    """The caller's samples for one input as [N, *spec.shape]; True when the caller left out
    the graph's leading batch-1 axis ([N, *spec.shape[1:]]), so outputs leave it out too."""
    value = np.asarray(value)
    raw = value.dtype.kind == "V" or (spec.dtype.startswith("FP8") and value.dtype == np.uint8)
    if raw and value.dtype.itemsize == spec.np_dtype.itemsize:
        value = value.view(spec.np_dtype)  # bf16/fp8 .npy files hold raw records
    shape = tuple(value.shape)
    if shape[1:] == spec.shape:
        squeezed = False
    elif spec.shape and spec.shape[0] == 1 and shape[1:] == spec.shape[1:]:
        squeezed = True
        value = value[:, None]
    else:
        per = f"{list(spec.shape)}" + (f" or {list(spec.shape[1:])}"
                                       if spec.shape and spec.shape[0] == 1 else "")
        raise TosaInputError(f"input {spec.name!r}: expected samples of shape {per} stacked on a "
                             f"leading axis, got an array of shape {list(shape)}")
    if n is not None and value.shape[0] != n:
        raise TosaInputError(f"input {spec.name!r} has {value.shape[0]} samples, another input "
                             f"has {n}")
    if value.dtype != spec.np_dtype:
        raise TosaInputError(f"input {spec.name!r}: expected {spec.dtype} (numpy "
                             f"{spec.np_dtype}), got {value.dtype}")
    if spec.dtype in ("INT48", "INT4") and value.size:
        lo, hi = INT_RANGES[spec.dtype]
        if value.min() < lo or value.max() > hi:
            raise TosaInputError(f"input {spec.name!r}: values outside the {spec.dtype} range "
                                 f"[{lo}, {hi}]")
    return value, squeezed


def _bind(model: Model, inputs: Any) -> list[np.ndarray | Any]:
    names = [s.name for s in model.inputs]
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise TosaInputError(f"input names do not match the graph: unknown {unknown}, "
                                 f"missing {missing}; the graph's inputs are {names}")
        return [inputs[n] for n in names]
    if isinstance(inputs, (list, tuple)) and len(names) > 1:
        if len(inputs) != len(names):
            raise TosaInputError(f"the graph takes {len(names)} inputs {names}, "
                                 f"got {len(inputs)}")
        return list(inputs)
    if len(names) != 1:
        raise TosaInputError(f"the graph takes {len(names)} inputs {names}: pass a tuple or a "
                             "mapping {name: samples}")
    return [inputs]


class _Progress:
    """A one-line progress bar on stderr (no dependency)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.t0 = total, enabled, time.perf_counter()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * done / max(self.total, 1))
        rate = done / max(time.perf_counter() - self.t0, 1e-9)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"samples, {rate:.0f}/s")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def evaluate(model: Model | str | bytes, inputs: Any, labels: Any = None,
             metric: str | Metric | None = "accuracy", batch_size: int = 256,
             devices: Sequence[jax.Device] | None = None,
             progress: bool | None = None, chunk: int = DEFAULT_CHUNK) -> EvalResult:
    """Run a batch-1 graph over N samples in vmapped batches sharded over the local devices.

    ``inputs``: for a one-input graph an array of samples, [N, *shape] or, when the graph's
    first axis is 1, [N, *shape[1:]]; for several inputs a tuple in graph order or a mapping
    by name. ``labels``: [N] class indices, compared with the arg-max of the first output by
    ``metric`` ("accuracy", or a callable ``metric(predictions, labels) -> float``).
    ``batch_size`` is rounded up to a multiple of the device count; the last batch is padded
    (with copies of its last sample, whose outputs are dropped). ``devices``: default all of
    JAX's local devices (the model's own device when it was loaded with one).
    ``progress``: a progress bar on stderr (default: when stderr is a terminal). ``chunk``:
    samples vmapped together inside each device's loop (see ``batched``).
    """
    if not isinstance(model, Model):
        model = load(model)
    if model.variables:
        raise TosaInputError("evaluate() runs samples independently, but this graph has "
                             f"variables (EXT-VARIABLE) {[v.name for v in model.variables]} "
                             "whose state carries across calls: call the model sample by sample")
    if isinstance(metric, str) and metric not in METRICS:
        raise TosaInputError(f"unknown metric {metric!r}; known: {sorted(METRICS)} or a callable")
    if batch_size < 1:
        raise TosaInputError(f"batch_size must be at least 1, got {batch_size}")

    arrays: list[np.ndarray] = []
    squeezed: list[bool] = []
    n: int | None = None
    for spec, value in zip(model.inputs, _bind(model, inputs)):
        arr, sq = _as_batch(spec, value, n)
        arrays.append(arr)
        squeezed.append(sq)
        n = arr.shape[0]
    n = n or 0
    if n == 0:
        raise TosaInputError("evaluate() needs at least one sample")
    squeeze = all(squeezed)

    if devices is None:
        devices = [model.device] if model.device is not None else jax.local_devices()
    devices = list(devices)
    if chunk < 1:
        raise TosaInputError(f"chunk must be at least 1, got {chunk}")
    per_device = -(-min(batch_size, n) // len(devices))
    per_device = -(-per_device // min(chunk, per_device)) * min(chunk, per_device)
    batch = per_device * len(devices)
    mesh = Mesh(np.array(devices), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    # each device runs its own shard of the batch: no communication between devices
    step = jax.jit(jax.shard_map(batched(model.fn, chunk), mesh=mesh,
                                 in_specs=PartitionSpec("batch"),
                                 out_specs=PartitionSpec("batch")))

    def put(start: int) -> list[Any]:
        idx = np.minimum(np.arange(start, start + batch), n - 1)  # pad with the last sample
        return [jax.device_put(host_to_value(a[idx], s.dtype), sharding)
                for a, s in zip(arrays, model.inputs)]

    def to_host(outs: tuple[Any, ...], count: int) -> list[np.ndarray]:
        return [(wide_to_numpy(o) if isinstance(o, Wide) else np.asarray(o))[:count]
                for o in outs]

    bar = _Progress(n, sys.stderr.isatty() if progress is None else progress)
    t0 = time.perf_counter()
    first = put(0)
    compiled = step.lower(*first).compile()  # every batch has this one signature
    need, _ = compiled_bytes(compiled)
    if need > model.limits.max_bytes * len(devices):
        raise TosaLimitError(
            f"a batch of {batch} samples needs {human_bytes(need)} of memory, over the "
            f"limit of {human_bytes(model.limits.max_bytes)} per device: lower batch_size")
    collected: list[list[np.ndarray]] = []
    pending: tuple[tuple[Any, ...], int] | None = None
    first_seconds = 0.0
    for start in range(0, n, batch):
        outs = compiled(*(first if start == 0 else put(start)))  # dispatched asynchronously
        if pending is not None:  # fetch the previous batch while this one runs
            collected.append(to_host(*pending))
            bar.update(min(start, n))
        pending = (outs, min(batch, n - start))
        if start == 0:
            jax.block_until_ready(outs)
            first_seconds = time.perf_counter() - t0
    assert pending is not None
    collected.append(to_host(*pending))
    seconds = time.perf_counter() - t0
    bar.update(n)

    outputs = {}
    for i, spec in enumerate(model.outputs):
        out = np.concatenate([c[i] for c in collected])
        if squeeze and spec.shape and spec.shape[0] == 1:
            out = out[:, 0]
        outputs[spec.name] = out
    first_out = outputs[model.outputs[0].name]
    per_sample = first_out.reshape(n, -1)
    predictions = per_sample.argmax(axis=1) if per_sample.shape[1] > 1 else None

    value = None
    name = None
    if labels is not None and metric is not None:
        labels = np.asarray(labels).reshape(-1)
        if labels.shape[0] != n:
            raise TosaInputError(f"{labels.shape[0]} labels for {n} samples")
        fn = METRICS[metric] if isinstance(metric, str) else metric
        name = metric if isinstance(metric, str) else getattr(metric, "__name__", "metric")
        if predictions is None and isinstance(metric, str):
            raise TosaInputError(f"metric {metric!r} needs a class score vector per sample; the "
                                 f"first output has shape {list(model.outputs[0].shape)}")
        value = float(fn(predictions if predictions is not None else first_out, labels))
    return EvalResult(outputs, predictions, value, name, n, seconds, len(devices), batch,
                      first_batch_seconds=first_seconds)
