"""``evaluate()``: run a graph exported with batch 1 over a whole dataset.

The samples are cut into large batches; each batch runs as one call of one compiled function,
split across all local JAX devices along the batch axis (``jax.shard_map``: each device holds
``batch_size / devices`` samples), and on each device a loop over chunks of a few vmapped
samples (``batched``). Every sample is computed by the same lowering as a single call, so
integer results are bit-identical to running the samples one by one; batching changes only how
many run at once.

Several processes or hosts: after ``jax.distributed.initialize(...)`` in each process (``tosa-jax
eval --coordinator HOST:PORT --num-processes N --process-id I``), every process calls ``evaluate``
with the same dataset; the mesh then spans the devices of all processes (one SPMD program, as JAX
runs it across hosts), each process reads and runs only the samples of its own devices' shards,
and the outputs are gathered so that every process returns all of them. XLA's CPU backend runs
such programs across processes in jax 0.10.2 (its cross-process collectives use gloo, the
default); the program itself has no collective, only the gather of the outputs does.
"""

from __future__ import annotations

import functools
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tosa_jax.errors import TosaInputError, TosaLimitError
from tosa_jax.ir import INT_RANGES, BlockScaled, host_to_value, storage_bytes, value_to_host
from tosa_jax.limits import human_bytes
from tosa_jax.model import (
    LARGE_FLOAT_MACS,
    Model,
    TensorSpec,
    compile_lowered,
    compiled_bytes,
    load,
    no_gc,
    usable_cores,
    xla_options,
)

Metric = Callable[[np.ndarray, np.ndarray], float]


@dataclass
class EvalResult:
    """What ``evaluate`` returns.

    ``outputs``: every graph output by name, stacked over the samples ([N, ...]).
    ``devices``: over all ``processes`` (``jax.distributed``); ``chunk``: samples vmapped
    together on a device (``batched``).
    ``predictions``: the arg-max class of the first output per sample, along its class axis
    (``None`` when a sample's output has no single axis longer than 1 and none was named).
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
    processes: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    chunk: int = 0

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
# Metrics on class scores: "accuracy" and "top<k>" ("top5"); they need [N, classes] outputs.
SCORE_METRICS = ("accuracy",)


def _top_k(metric: Any) -> int | None:
    """k of a "top<k>" metric name (top1 is accuracy), else None."""
    if isinstance(metric, str) and metric.startswith("top") and metric[3:].isdigit():
        return int(metric[3:])
    return None


def _class_axis(spec: TensorSpec, squeeze: bool, axis: int | None, metric: Any) -> int | None:
    """The axis of a sample's output that holds the class scores, decided before anything runs.

    Without ``axis`` the output must be [classes] per sample once size-1 axes are squeezed
    (a [1, 12, 5] output has no single class axis: the arg-max over its 60 values is no class).
    ``axis`` names it in the per-sample output (the graph's shape without the batch-1 axis
    when the samples left it out); the other axes then index predictions, labels follow them."""
    per = spec.shape[1:] if squeeze and spec.shape and spec.shape[0] == 1 else spec.shape
    if axis is not None:
        if not -len(per) <= axis < len(per):
            raise TosaInputError(f"axis {axis} is not an axis of the per-sample output "
                                 f"{list(per)} of {spec.name!r}")
        return axis % len(per)
    if not (isinstance(metric, str) and (metric in SCORE_METRICS or _top_k(metric))):
        return None
    big = [d for d in per if d != 1]
    if len(big) != 1:
        raise TosaInputError(
            f"metric {metric!r} needs class scores [N, classes], but the first output "
            f"{spec.name!r} has shape {list(spec.shape)} ({list(per)} per sample, "
            f"{len(big)} axes longer than 1 after squeezing): name the class axis with "
            "axis=... (CLI --axis), or pass a callable metric")
    return next(i for i, d in enumerate(per) if d != 1)


def _check_labels(labels: Any, n: int, per: tuple[int, ...], axis: int | None) -> np.ndarray:
    """Labels against the samples, before anything runs: [N] (or [N, *other axes] when a class
    axis was named for a multi-axis output)."""
    labels = np.asarray(labels)
    if labels.ndim == 0 or labels.shape[0] != n:
        raise TosaInputError(f"{labels.shape[0] if labels.ndim else 'a scalar of'} labels for "
                             f"{n} samples: give one label per sample")
    if axis is not None:
        rest = tuple(d for i, d in enumerate(per) if i != axis)
        if labels.size == n * int(np.prod(rest, dtype=np.int64)):
            return labels.reshape(n, *rest)
        raise TosaInputError(f"labels of shape {list(labels.shape)}: the per-sample output "
                             f"{list(per)} with class axis {axis} needs labels [N, *{list(rest)}]")
    return labels.reshape(n, -1)[:, 0] if labels.size == n else labels


def class_metrics(scores: np.ndarray, labels: np.ndarray, axis: int, k: int = 5
                  ) -> dict[str, Any]:
    """Top-1 and top-k accuracy, per-class accuracy and the confusion matrix (rows: label,
    columns: predicted class) of per-sample ``scores`` [N, ...] with the class axis ``axis`` of
    a sample."""
    scores = np.moveaxis(scores, axis + 1, -1)
    classes = scores.shape[-1]
    flat = scores.reshape(-1, classes)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    pred = flat.argmax(axis=1)
    kk = min(k, classes)
    # top-k: the label's score is among the k largest (ties counted in the label's favour)
    label_score = flat[np.arange(len(y)), np.clip(y, 0, classes - 1)]
    top_k = np.sum(flat > label_score[:, None], axis=1) < kk
    valid = (y >= 0) & (y < classes)
    confusion = np.zeros((classes, classes), np.int64)
    np.add.at(confusion, (y[valid], pred[valid]), 1)
    counts = confusion.sum(axis=1)
    per_class = [float(confusion[c, c] / counts[c]) if counts[c] else None
                 for c in range(classes)]
    return {"accuracy": float(np.mean((pred == y) & valid)),
            f"top{kk}": float(np.mean(top_k & valid)),
            "per_class_accuracy": per_class, "confusion": confusion,
            "labels_out_of_range": int((~valid).sum())}


# Samples vmapped together inside the per-device loop. On CPU the best size follows the graph's
# largest activation (one sample): the activations of a chunk should stay small.
# Measured on this project's 2-core CPU (batch 64 over 2 CPU devices, one process, interleaved):
# graphs with small activations run fastest as one vmap of each device's whole share (its
# kernels grow large enough for XLA to split across threads, the loop's per-step cost goes):
# lstm_int8 (2 KiB) 13.8 ms against 29.9 ms in chunks of 4, mlp_attn_int8 (6 KiB) 0.89 against
# 1.34 ms; cnn_fp32 (16 KiB) 2.26 ms in chunks of 32, 2.46 of 16 or 8, 2.34 of 4. Larger
# activations want smaller chunks: lstm_fp32 (32 KiB) on one device 5.5 ms in chunks of 8,
# 9.6 of 16, 5.9 of 4; resnet_int8 (1.5 MiB) 374 ms in chunks of 4, 429 of 8, 452 of 32;
# unet_int8 (384 KiB) 166 / 164 / 174 ms; bert_tiny_int8 (256 KiB) the same from 2 to 32. An
# older measurement (ResNet-18/2 FP32, batch 64 on one device): 29.7 ms a sample as one vmap
# of 64, 12.5 ms in chunks of 4 (13.1 of 1, 21.8 of 16).
DEFAULT_CHUNK = 4
CHUNK_CACHE_BYTES = 256 << 10
# ... and a graph whose largest activation is this large runs one sample at a time: its
# convolutions are large enough at batch 1, and a vmapped chunk only makes them slower.
# Measured 2026-11-27 (batch 64 over 2 CPU devices, fresh processes, interleaved, samples/s,
# chunk 4 -> 1): mobilenetv2_fp32 (4.6 MiB) 112-144 -> 142-163 in five rounds, mobilenetv2_int8
# (4.6 MiB) 105-108 -> 109-118, resnet_fp32 (1.5 MiB) 72-88 -> 89-94 in three, resnet_int8
# 100-104 -> 98-108; below it no gain: unet_fp32 (384 KiB) 329-357 -> 316-375, unet_int8 187 ->
# 190, bert_tiny_int8 (256 KiB) 499 -> 449.
ONE_SAMPLE_BYTES = 1 << 20
# So does a float graph whose convolutions and matrix products run on Eigen's threads
# (model.LARGE_FLOAT_MACS). Both only where every core has a device of its own (`tosa-jax eval`,
# JAX_NUM_CPU_DEVICES): with fewer devices than cores, chunks let XLA share a device's work
# between the cores. Measured 2026-11-28 on the Intel Xeon (AVX-512) these machines now are,
# batch 64, samples/s, chunk 1 / 4 (/ 8): on 2 CPU devices unet_fp32 (384 KiB, 117 M
# multiply-adds) 702-742 / 654-673 (fresh processes, three interleaved rounds), bert_tiny_fp32
# (59 M) 1,846-2,019 / 1,837-2,070, mobilenetv2_fp32 296 / 262 / 237, resnet_fp32 252 / 250 /
# 246; on 1 device unet_fp32 375-391 / 493-510 / 584-589, bert_tiny_fp32 1,015-1,108 /
# 1,245-1,351 / 1,324-1,479, resnet_fp32 161 / 197 / 201, mobilenetv2_fp32 177 / 211 / 203,
# resnet_int8 354 / 409 / 385. Integer graphs of unet_fp32's activations keep their chunks
# either way: unet_int8 on 2 devices 821 / 879 / 900 / 871 in chunks of 1 / 2 / 4 / 8.
# Off the CPU (a GPU) a device's whole share runs as one vmap, as long as a chunk's largest
# activation stays within ACCEL_CHUNK_BYTES (memory): each step of the loop launches every kernel
# of the graph once, so fewer steps of larger kernels win. Measured 2026-11-27 on an H200 (jax
# 0.11.2, batch 64, jit(batched(model.fn, chunk)), samples/s, chunk 4 -> 16 -> 64, integers
# identical to each sample run alone): cnn_int8 97,614 -> 207,847 -> 306,087, cnn_fp32 145,460
# -> 527,200 (at 64), encoder_fp32 114,512 -> 490,594, gru_fp32 71,405 -> 434,305,
# mlp_attn_int8 99,281 -> 375,953, bert_tiny_int8 34,658 -> 74,565 -> 107,299, unet_int8
# 17,108 -> 34,907 -> 41,963, resnet_int8 (1.5 MiB) 13,389 -> 22,954 -> 24,587, lstm_int8
# 9,275 -> 32,364 -> 90,034; compile times within 10%.
ACCEL_CHUNK_BYTES = 256 << 20


def auto_chunk(model: Model, platform: str = "cpu", devices: int = 1) -> int:
    """The chunk ``evaluate`` uses by default over ``devices`` devices of this process: on CPU
    as many samples as keep the largest activation of a chunk within ``CHUNK_CACHE_BYTES`` (at
    least ``DEFAULT_CHUNK``; more than a device's share means its whole share in one vmap), one
    where a single sample's reaches ``ONE_SAMPLE_BYTES`` or its float work runs on Eigen
    (``LARGE_FLOAT_MACS``) and every core has a device; elsewhere (a GPU) as many as keep it
    within ``ACCEL_CHUNK_BYTES``."""
    largest = _largest_activation(model)
    if platform != "cpu":
        return max(1, ACCEL_CHUNK_BYTES // max(largest, 1))
    if ((largest >= ONE_SAMPLE_BYTES or model.float_macs >= LARGE_FLOAT_MACS)
            and devices >= usable_cores()):
        return 1
    return max(DEFAULT_CHUNK, CHUNK_CACHE_BYTES // max(largest, 1))


def _largest_activation(model: Model) -> int:
    """Bytes of the graph's largest non-constant tensor of static shape (one sample)."""
    cached = getattr(model, "_largest_activation", None)
    if cached is None:
        cached = max((storage_bytes(t) for r in model.graph.regions for b in r.blocks
                      for t in b.tensors.values()
                      if t.data is None and all(isinstance(d, int) and d > 0 for d in t.shape)),
                     default=0)
        model._largest_activation = cached
    return cached


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


def _global_batch(samples: np.ndarray, dtype: str, idx: np.ndarray,
                  sharding: NamedSharding) -> Any:
    """The samples ``idx`` of one input as a batch sharded by ``sharding``; only the rows of
    this process's devices are read and converted (the others belong to other processes)."""
    leaves, tree = jax.tree.flatten(host_to_value(samples[idx[:1]], dtype))

    def rows(index: tuple[slice, ...], leaf: int) -> np.ndarray:
        return np.asarray(jax.tree.leaves(host_to_value(samples[idx[index[0]]], dtype))[leaf])

    return jax.tree.unflatten(tree, [
        jax.make_array_from_callback((len(idx), *x.shape[1:]), sharding,
                                     lambda index, j=j: rows(index, j))
        for j, x in enumerate(leaves)])


def _check_same_everywhere(arrays: list[np.ndarray], n: int, batch_size: int,
                           chunk: int) -> None:
    """Across processes: the same number and shapes of samples and options, or a clear error
    (a mismatch would otherwise hang or mix the processes' datasets)."""
    sig = repr((n, [(a.shape, str(a.dtype)) for a in arrays], batch_size, chunk))
    mine = np.array([n, zlib.crc32(sig.encode()) & 0x7FFFFFFF], np.int32)
    every = multihost_utils.process_allgather(mine)
    if not (every == mine).all():
        raise TosaInputError(
            "evaluate() across processes needs the same samples and options in every process; "
            f"got sample counts {every[:, 0].tolist()} by process (or different shapes, dtypes, "
            "batch_size or chunk)")


@functools.lru_cache(maxsize=16)
def _sharding(devices: tuple[jax.Device, ...]) -> NamedSharding:
    """The batch axis split over ``devices`` (a Mesh takes tens of microseconds to build)."""
    return NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))


def _rows(out: Any, index: Any) -> Any:
    """``out[index]``; of a block-scaled output, of its values and its scales alike."""
    if isinstance(out, BlockScaled):
        return BlockScaled(out.values[index], out.scales[index])
    return out[index]


def _concat(parts: list[Any]) -> Any:
    """The batches of one output, concatenated (a block-scaled one part by part)."""
    if isinstance(parts[0], BlockScaled):
        return BlockScaled(np.concatenate([p.values for p in parts]),
                           np.concatenate([p.scales for p in parts]))
    return np.concatenate(parts)


def _compiled_step(model: Model, sharding: NamedSharding, args: list[Any], chunk: int) -> Any:
    """The batched function, sharded by ``sharding``, compiled for the signature of ``args``
    (host arrays or global arrays of the whole batch):
    built, traced, compiled and checked against ``limits.max_bytes`` once per model and key
    (argument shapes and dtypes, devices, chunk, x64), then kept on the model, so a second
    ``evaluate`` call on the same model neither traces nor compiles."""
    mesh = sharding.mesh
    leaves = jax.tree.leaves(args)
    key = (tuple((a.shape, str(a.dtype)) for a in leaves),
           tuple((d.platform, d.process_index, d.id) for d in mesh.devices.flat),
           chunk, bool(jax.config.jax_enable_x64))
    cache = model._evaluate_cache
    compiled = cache.get(key)
    if compiled is not None:
        return compiled
    # each device runs its own shard of the batch: no communication between devices
    step = jax.jit(jax.shard_map(batched(model.fn, chunk), mesh=mesh,
                                 in_specs=PartitionSpec("batch"),
                                 out_specs=PartitionSpec("batch")))
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                          args)
    from tosa_jax.lowering.numerics import lowering_for

    with no_gc(), lowering_for(mesh.devices.flat[0].platform):  # a new function: traced anew
        lowered = step.lower(*shapes)
    compiled = compile_lowered(lowered, xla_options(model.conv_kinds,
                                                    mesh.devices.flat[0].platform,
                                                    model.float_macs))
    need, _ = compiled_bytes(compiled)
    devices = mesh.devices.size
    if need > model.limits.max_bytes * devices:
        raise TosaLimitError(
            f"a batch of {leaves[0].shape[0]} samples needs {human_bytes(need)} of memory, over "
            f"the limit of {human_bytes(model.limits.max_bytes)} per device: lower batch_size")
    cache[key] = compiled
    return compiled


def evaluate(model: Model | str | bytes, inputs: Any, labels: Any = None,
             metric: str | Metric | None = "accuracy", batch_size: int = 256,
             devices: Sequence[jax.Device] | None = None,
             progress: bool | None = None, chunk: int | None = None,
             axis: int | None = None, top_k: int = 5) -> EvalResult:
    """Run a batch-1 graph over N samples in vmapped batches sharded over the local devices.

    ``inputs``: for a one-input graph an array of samples, [N, *shape] or, when the graph's
    first axis is 1, [N, *shape[1:]]; for several inputs a tuple in graph order or a mapping
    by name. ``labels``: [N] class indices, compared with the arg-max of the first output by
    ``metric`` ("accuracy", or a callable ``metric(predictions, labels) -> float``).
    ``batch_size`` is rounded up to a multiple of the device count; the last batch is padded
    (with copies of its last sample, whose outputs are dropped). ``devices``: default all of
    JAX's devices, across all processes when ``jax.distributed`` is initialized (then every
    process must call ``evaluate`` with the same samples and options; each runs its share and
    all return every output); of the model's platform when it was loaded with a device.
    ``progress``: a progress bar on stderr (default: when stderr is a terminal, in process 0).
    ``chunk``: samples vmapped together inside each device's loop (see ``batched``); default
    ``auto_chunk`` (on CPU from the graph's largest activation: a small graph runs each device's
    whole share as one vmap).

    Metrics on class scores ("accuracy", "top<k>") are refused, before anything runs, on a first
    output that is not [N, classes] once size-1 axes are squeezed, unless ``axis`` names the
    class axis of a sample's output; labels are checked against the sample count first too.
    With labels, ``extra`` holds top-1 and top-``top_k`` accuracy, per-class accuracy and the
    confusion matrix (``class_metrics``).
    """
    if not isinstance(model, Model):
        model = load(model)
    if model.variables:
        raise TosaInputError("evaluate() runs samples independently, but this graph has "
                             f"variables (EXT-VARIABLE) {[v.name for v in model.variables]} "
                             "whose state carries across calls: call the model sample by sample")
    if isinstance(metric, str) and metric not in METRICS and not _top_k(metric):
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
    model.check_input_values(arrays)  # every sample's zero points (EXT-DYNAMIC)
    n = n or 0
    if n == 0:
        raise TosaInputError("evaluate() needs at least one sample")
    squeeze = all(squeezed)
    out_spec = model.outputs[0]
    class_axis = _class_axis(out_spec, squeeze, axis, metric if labels is not None else None)
    if class_axis is None:  # predictions only where the output has one class axis
        try:
            class_axis = _class_axis(out_spec, squeeze, None, "accuracy")
        except TosaInputError:
            class_axis = None
    per = out_spec.shape[1:] if squeeze and out_spec.shape and out_spec.shape[0] == 1 \
        else out_spec.shape
    if labels is not None:
        labels = _check_labels(labels, n, per, class_axis)

    if devices is None:
        platform = model.device.platform if model.device is not None else None
        devices = jax.devices(platform)  # every process's devices, in process order
        if jax.process_count() == 1 and model.device is not None:
            devices = [model.device]
    devices = list(devices)
    processes = len({d.process_index for d in devices})
    if chunk is None:
        local = sum(d.process_index == jax.process_index() for d in devices)
        chunk = auto_chunk(model, devices[0].platform, local)
        if processes > 1:  # hosts may differ in cores and devices: one chunk, the smallest
            chunk = int(np.min(multihost_utils.process_allgather(np.int32(chunk))))
    if processes > 1:
        _check_same_everywhere(arrays, n, batch_size, chunk)
    if chunk < 1:
        raise TosaInputError(f"chunk must be at least 1, got {chunk}")
    per_device = -(-min(batch_size, n) // len(devices))
    per_device = -(-per_device // min(chunk, per_device)) * min(chunk, per_device)
    batch = per_device * len(devices)
    sharding = _sharding(tuple(devices))

    def put(start: int) -> list[Any]:
        if processes > 1:  # only this process's rows are read
            idx = np.minimum(np.arange(start, start + batch), n - 1)  # pad with the last sample
            return [_global_batch(a, s.dtype, idx, sharding)
                    for a, s in zip(arrays, model.inputs)]
        # One process: host arrays, which the compiled function splits over the devices
        # itself (cheaper than device_put first); a full batch is a view of the samples, the
        # last one is padded.
        rows: slice | np.ndarray = (slice(start, start + batch) if start + batch <= n else
                                    np.minimum(np.arange(start, start + batch), n - 1))
        return [host_to_value(a[rows], s.dtype) for a, s in zip(arrays, model.inputs)]

    def to_host(outs: tuple[Any, ...], count: int) -> list[np.ndarray]:
        if processes > 1:  # the other processes' shards: gathered to every process
            outs = multihost_utils.process_allgather(outs, tiled=True)
        return [_rows(value_to_host(o, spec.dtype), slice(0, count))
                for o, spec in zip(outs, model.outputs, strict=True)]

    bar = _Progress(n, (sys.stderr.isatty() and jax.process_index() == 0) if progress is None
                    else progress)
    t0 = time.perf_counter()
    first = put(0)
    compiled = _compiled_step(model, sharding, first, chunk)  # one signature for all
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
        out = collected[0][i] if len(collected) == 1 else _concat([c[i] for c in collected])
        if squeeze and spec.shape and spec.shape[0] == 1:
            out = _rows(out, (slice(None), 0))
        outputs[spec.name] = out
    first_out = outputs[model.outputs[0].name]
    if isinstance(first_out, BlockScaled):  # scores: the values (a metric reads them so)
        first_out = first_out.values
    scores = first_out.reshape(n, *per)
    predictions = scores.argmax(axis=class_axis + 1) if class_axis is not None else None

    value = None
    name = None
    extra: dict[str, Any] = {}
    if labels is not None and class_axis is not None:
        extra = class_metrics(scores, labels, class_axis, _top_k(metric) or top_k)
    if labels is not None and metric is not None:
        name = metric if isinstance(metric, str) else getattr(metric, "__name__", "metric")
        if isinstance(metric, str) and _top_k(metric):
            value = float(extra[f"top{min(_top_k(metric), per[class_axis])}"])
        else:
            fn = METRICS[metric] if isinstance(metric, str) else metric
            value = float(fn(predictions if predictions is not None else first_out, labels))
    return EvalResult(outputs, predictions, value, name, n, seconds, len(devices), batch,
                      first_batch_seconds=first_seconds, extra=extra,
                      processes=processes, chunk=min(chunk, per_device))
