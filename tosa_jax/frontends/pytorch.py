"""PyTorch module -> TOSA flatbuffer through ExecuTorch's Arm backend (``tosa_jax.from_torch``).

Needs ``pip install 'tosa_jax[torch]'`` (torch 2.13.0, executorch 1.5.1, tosa-tools 2026.8.0);
nothing here imports torch until it is called. The pipeline is the one ExecuTorch documents for
its TOSA backend:

1. ``torch.export.export(module, example_inputs, strict=True)``; its ``.module()`` is taken with
   ``check_guards=False``: with torch 2.13 the guards submodule call it inserts otherwise
   breaks ExecuTorch's decomposition passes ("call_module is not supported");
2. INT only: ``TOSAQuantizer`` with the symmetric int8 configuration (per-channel weights by
   default), calibrated on the caller's samples (post-training quantization);
3. ``to_edge_transform_and_lower`` with the ``TOSAPartitioner``, which writes the ``.tosa``.

The INT graph takes and returns int8: the quantize/dequantize of the graph's inputs and outputs
stay outside it, as in ExecuTorch; their parameters are ``TorchExport.input_qparams`` and
``output_qparams``, and ``quantize_inputs`` / ``dequantize_outputs`` apply them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tosa_jax import serialization
from tosa_jax.errors import TosaConverterError, TosaInputError
from tosa_jax.frontends import _tools
from tosa_jax.ir import Graph


@dataclass(frozen=True)
class QParams:
    """An int8 graph boundary's quantization: real = (q - zero_point) * scale."""

    scale: float
    zero_point: int
    qmin: int
    qmax: int

    def quantize(self, x: Any) -> np.ndarray:
        """Round half to even, as torch's quantize_per_tensor (and the dropped graph op) does."""
        q = np.clip(np.round(np.asarray(x, np.float32) / np.float32(self.scale))
                    + self.zero_point, self.qmin, self.qmax)
        return q.astype(np.int8)

    def dequantize(self, q: Any) -> np.ndarray:
        return ((np.asarray(q).astype(np.float32) - self.zero_point)
                * np.float32(self.scale)).astype(np.float32)


@dataclass
class TorchExport:
    """What ``export_torch`` made: the ``.tosa`` bytes, the tosa_jax Graph read from them, the
    graph module ExecuTorch lowered (quantized for INT) and the boundary quantization."""

    tosa: bytes
    graph: Graph
    spec: str
    graph_module: Any = None  # torch.fx.GraphModule that was lowered
    input_qparams: list[QParams | None] = field(default_factory=list)
    output_qparams: list[QParams | None] = field(default_factory=list)

    def save(self, path: str | Path) -> Path:
        """Write the ``.tosa`` flatbuffer."""
        path = Path(path)
        path.write_bytes(self.tosa)
        return path

    def quantize_inputs(self, *xs: Any) -> list[np.ndarray]:
        """Float inputs as the graph takes them (int8 for INT, unchanged for FP)."""
        if len(xs) != len(self.input_qparams):
            raise TosaInputError(f"the graph takes {len(self.input_qparams)} input(s), "
                                 f"got {len(xs)}")
        return [q.quantize(_numpy(x)) if q else _numpy(x)
                for q, x in zip(self.input_qparams, xs)]

    def dequantize_outputs(self, *ys: Any) -> list[np.ndarray]:
        """Graph outputs as floats (INT) or unchanged (FP)."""
        qs = self.output_qparams or [None] * len(ys)
        return [q.dequantize(y) if q else np.asarray(y) for q, y in zip(qs, ys)]


def _numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _require() -> None:
    for pkg in ("torch", "executorch"):
        if _tools.package_version(pkg) is None:
            raise _tools.missing("torch", f"{pkg} (PyTorch -> TOSA via ExecuTorch's Arm backend)")


def _qparams(gm: Any, target: str, placeholders: bool) -> list[QParams | None]:
    """Quantization of each graph input (``quantize_per_tensor`` right after a placeholder) or
    output (``dequantize_per_tensor`` feeding the output node), None where there is none."""
    nodes = list(gm.graph.nodes)
    if placeholders:
        ends = [n for n in nodes if n.op == "placeholder"]
        found = [next((u for u in n.users if target in str(u.target)), None) for n in ends]
    else:
        out = next(n for n in nodes if n.op == "output")
        args = out.args[0] if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
        found = [a if target in str(getattr(a, "target", "")) else None for a in args]
    result: list[QParams | None] = []
    for node in found:
        if node is None:
            result.append(None)
            continue
        _, scale, zp, qmin, qmax, _ = node.args
        result.append(QParams(float(scale), int(zp), int(qmin), int(qmax)))
    return result


def _as_tuple(sample: Any) -> tuple:
    return tuple(sample) if isinstance(sample, (tuple, list)) else (sample,)


def export_torch(module: Any, example_inputs: Sequence[Any], *, quantize: bool = False,
                 calibration: Iterable[Any] | None = None, spec: str | None = None,
                 per_channel: bool = True, progress: bool = True) -> TorchExport:
    """Export ``module`` (eval mode is the caller's) to a TOSA flatbuffer.

    ``example_inputs``: a tuple of tensors (one tensor is taken as a 1-tuple). ``quantize``:
    post-training int8 quantization (needs ``calibration``: an iterable of input tuples or
    tensors; the example alone is used when None). ``spec``: the TOSA spec string, by default
    "TOSA-1.0+INT" when quantizing, else "TOSA-1.0+FP". ``per_channel``: per-channel weight
    scales (default) or per-tensor.
    """
    _require()
    import torch
    from executorch.backends.arm.quantizer import (
        TOSAQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    spec = spec or ("TOSA-1.0+INT" if quantize else "TOSA-1.0+FP")
    if quantize and "+INT" not in spec.upper():
        raise TosaInputError(f"quantize=True needs an INT spec string, got {spec!r}")
    example = _as_tuple(example_inputs)
    calib = [_as_tuple(c) for c in calibration] if calibration is not None else [example]
    name = type(module).__name__
    with _tools.Progress(f"PyTorch {name} ({spec}, ExecuTorch Arm backend)",
                         enabled=progress) as bar, \
            tempfile.TemporaryDirectory(prefix="tosa_jax_torch_") as tmp:
        try:
            compile_spec = TosaCompileSpec(spec)
        except Exception as e:  # ExecuTorch's own words on a bad spec string
            raise TosaInputError(f"TOSA spec {spec!r}: {e}") from e
        compile_spec.dump_intermediate_artifacts_to(tmp)
        try:
            with torch.no_grad():
                bar.set_step("torch.export")
                gm = torch.export.export(module, example, strict=True).module(check_guards=False)
                if quantize:
                    bar.set_step(f"quantize, {len(calib)} calibration samples")
                    quantizer = TOSAQuantizer(compile_spec)
                    quantizer.set_global(get_symmetric_quantization_config(
                        is_per_channel=per_channel))
                    gm = quantizer._quantize_with_submodules(gm, calib, False, True)
                bar.set_step("lower to TOSA")
                to_edge_transform_and_lower(torch.export.export(gm, example, strict=True),
                                            partitioner=[TOSAPartitioner(compile_spec)])
        except TosaInputError:
            raise
        except Exception as e:
            raise TosaConverterError(f"ExecuTorch could not export {name} to {spec}: "
                                     f"{type(e).__name__}: {e}") from e
        found = sorted(Path(tmp).rglob("*.tosa"))
        if len(found) != 1:
            raise TosaConverterError(
                f"ExecuTorch delegated {len(found)} TOSA graphs for {name}, tosa_jax takes one: "
                "some operators were not lowered to TOSA (see ExecuTorch's partitioner log)"
                if found else f"ExecuTorch lowered nothing of {name} to TOSA")
        data = found[0].read_bytes()
    graph = serialization.read(data)
    return TorchExport(tosa=data, graph=graph, spec=spec, graph_module=gm,
                       input_qparams=_qparams(gm, "quantize_per_tensor", True),
                       output_qparams=_qparams(gm, "dequantize_per_tensor", False))


def from_torch(module: Any, example_inputs: Sequence[Any], *, quantize: bool = False,
               calibration: Iterable[Any] | None = None, spec: str | None = None,
               per_channel: bool = True, progress: bool = True, **load_options: Any) -> Any:
    """A tosa_jax Model of a PyTorch module, exported through ExecuTorch's Arm backend (see
    ``export_torch`` for the options; ``load_options`` go to ``tosa_jax.load``). The export
    (``.tosa`` bytes, graph module, quantization of inputs and outputs) is ``model.export``."""
    from tosa_jax.model import load

    exported = export_torch(module, example_inputs, quantize=quantize, calibration=calibration,
                            spec=spec, per_channel=per_channel, progress=progress)
    model = load(exported.graph, **load_options)
    model.export = exported
    return model

