"""Export small PyTorch models to TOSA 1.0 flatbuffers via the ExecuTorch Arm backend.

Runs in its own virtualenv (not the project's), e.g.::

    python3 -m venv /work/venv-et
    /work/venv-et/bin/pip install torch==2.13.0 executorch==1.5.1 tosa-tools==2026.8.0
    /work/venv-et/bin/python bench/export_models.py --out tests/fixtures \\
        --models cnn mlp_attn --profile INT
    /work/venv-et/bin/python bench/export_models.py --out tests/fixtures \\
        --models cnn encoder gru --profile FP

For each model NAME and profile INT it writes:

- ``DIR/NAME_int8.tosa``: the single TOSA-1.0+INT flatbuffer ExecuTorch emits
  (int8 in, int8 out; quantize/dequantize stay outside the graph);
- ``DIR/NAME_int8.input.npy``: a seeded example input, the seeded float example
  quantized with the exported input scale/zero point, in the graph's input
  shape and dtype.

For profile FP (``TosaCompileSpec("TOSA-1.0+FP")``, no quantization) it writes:

- ``DIR/NAME_fp32.tosa``: the TOSA-1.0+FP flatbuffer (float32 in, float32 out);
- ``DIR/NAME_fp32.input.npy``: the seeded float32 example input;
- ``DIR/NAME_fp32.torch.npy``: PyTorch's own float32 output of the same eval-mode
  module on that input (computed here, so torch is no test dependency).

Weights, calibration batches and examples are seeded, so reruns are reproducible.
Check a fixture against the reference model (tosa-tools, in /work/venv)::

    tosa_reference_model --tosa_file DIR/cnn_int8.tosa --ifm_name <in> \\
        --ifm_file DIR/cnn_int8.input.npy --ofm_name <out> --ofm_file out.npy \\
        --flatbuffer_dir . --output_dir OUTDIR

(``<in>``/``<out>`` are printed by this script.)
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

SEED = 0
N_CALIB = 16

PROFILES: dict[str, str] = {"INT": "TOSA-1.0+INT", "FP": "TOSA-1.0+FP"}
SUFFIX: dict[str, str] = {"INT": "int8", "FP": "fp32"}
# The models exported when --models is not given (the fixtures of tests/).
DEFAULT_MODELS: dict[str, list[str]] = {"INT": ["cnn", "mlp_attn"], "FP": ["cnn", "encoder", "gru"]}


class DwBlock(nn.Module):
    """MobileNet-style block: depthwise 3x3, pointwise 1x1, hardswish, residual add."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(ch, ch, 3, padding=1, groups=ch)
        self.pw = nn.Conv2d(ch, ch, 1)
        self.act = nn.Hardswish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.pw(self.act(self.dw(x))))


class SmallCNN(nn.Module):
    """Conv stem, two depthwise-separable residual blocks, average pool, linear head."""

    def __init__(self, ch: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, ch, 3, stride=2, padding=1)
        self.act = nn.Hardswish()
        self.blocks = nn.Sequential(DwBlock(ch), DwBlock(ch))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(ch, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.act(self.stem(x)))
        return self.head(torch.flatten(self.pool(x), 1))


class MlpAttn(nn.Module):
    """Pre-norm single-head self-attention, then a GELU MLP; both residual."""

    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.scale = dim**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        x = x + self.proj(torch.matmul(att, v))
        return x + self.fc2(nn.functional.gelu(self.fc1(x)))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: multi-head self-attention (nn.MultiheadAttention,
    4 heads) and a GELU MLP, each behind a LayerNorm and inside a residual."""

    def __init__(self, dim: int = 32, heads: int = 4, hidden: int = 64) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class GruNet(nn.Module):
    """One-layer batch-first GRU over a short sequence, then a linear head on every step."""

    def __init__(self, features: int = 8, hidden: int = 16, out: int = 4) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(x)[0])


@dataclass(frozen=True)
class ModelDef:
    """A model factory and its float input shape."""

    build: Callable[[], nn.Module]
    shape: tuple[int, ...]


MODELS: dict[str, ModelDef] = {
    "cnn": ModelDef(SmallCNN, (1, 3, 32, 32)),
    "mlp_attn": ModelDef(MlpAttn, (1, 16, 32)),
    "encoder": ModelDef(EncoderBlock, (1, 16, 32)),
    "gru": ModelDef(GruNet, (1, 8, 8)),
}


def input_qparams(gm: torch.fx.GraphModule) -> tuple[float, int, int, int]:
    """Return (scale, zero_point, qmin, qmax) of the quantize op on the first input."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        for user in node.users:
            if "quantize_per_tensor" in str(user.target):
                _, scale, zp, qmin, qmax, _ = user.args
                return float(scale), int(zp), int(qmin), int(qmax)
    raise RuntimeError("no quantize_per_tensor on the graph input")


Io = list[tuple[str, tuple[int, ...], str]]


def graph_io(path: Path) -> tuple[Io, Io, str]:
    """Read (inputs, outputs, version) from a TOSA flatbuffer; tensors as (name, shape, dtype)."""
    from tosa.DType import DType
    from tosa.TosaGraph import TosaGraph

    dtypes = {v: k for k, v in vars(DType).items() if not k.startswith("_")}
    g = TosaGraph.GetRootAs(path.read_bytes(), 0)
    v = g.Version()
    version = f"{v._Major()}.{v._Minor()}.{v._Patch()}{' draft' if v._Draft() else ''}"
    block = g.Regions(0).Blocks(0)
    tensors = {}
    for i in range(block.TensorsLength()):
        t = block.Tensors(i)
        tensors[t.Name().decode()] = (tuple(int(d) for d in t.ShapeAsNumpy()), dtypes[t.Type()])
    ins = [block.Inputs(i).decode() for i in range(block.InputsLength())]
    outs = [block.Outputs(i).decode() for i in range(block.OutputsLength())]
    return [(n, *tensors[n]) for n in ins], [(n, *tensors[n]) for n in outs], version


def export(name: str, profile: str, out_dir: Path) -> Path:
    """Export model `name` for `profile`; write the .tosa and example input into out_dir."""
    from executorch.backends.arm.quantizer import (
        TOSAQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    mdef = MODELS[name]
    torch.manual_seed(SEED)
    model = mdef.build().eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    example = (torch.randn(mdef.shape, generator=gen),)
    calib = [(torch.randn(mdef.shape, generator=gen),) for _ in range(N_CALIB)]

    stem = f"{name}_{SUFFIX[profile]}"
    with tempfile.TemporaryDirectory() as tmp:
        spec = TosaCompileSpec(PROFILES[profile])
        spec.dump_intermediate_artifacts_to(tmp)
        with torch.no_grad():
            # check_guards=False: with torch 2.13 the guards submodule call otherwise breaks
            # ExecuTorch's decomposition passes ("call_module is not supported").
            gm = torch.export.export(model, example, strict=True).module(check_guards=False)
            if profile == "INT":
                quantizer = TOSAQuantizer(spec)
                quantizer.set_global(get_symmetric_quantization_config())
                gm = quantizer._quantize_with_submodules(gm, calib, False, True)
            to_edge_transform_and_lower(
                torch.export.export(gm, example, strict=True),
                partitioner=[TOSAPartitioner(spec)],
            )
        found = sorted(Path(tmp).rglob("*.tosa"))
        if len(found) != 1:
            raise RuntimeError(f"{name}: expected one .tosa, got {[str(p) for p in found]}")
        dst = out_dir / f"{stem}.tosa"
        shutil.copyfile(found[0], dst)

    inputs, outputs, version = graph_io(dst)
    ((in_name, in_shape, in_dtype),) = inputs
    if profile == "FP":
        arr = example[0].numpy().astype(np.float32).reshape(in_shape)
        np.save(out_dir / f"{stem}.input.npy", arr)
        with torch.no_grad():
            want = model(*example).numpy().astype(np.float32)
        ((out_name, out_shape, _),) = outputs
        np.save(out_dir / f"{stem}.torch.npy", want.reshape(out_shape))
        print(
            f"{dst}: {dst.stat().st_size} B, TOSA {version}, in {in_name} {in_shape} {in_dtype}, "
            f"out {out_name} {out_shape}"
        )
        return dst
    scale, zp, qmin, qmax = input_qparams(gm)
    q = torch.clamp(torch.round(example[0] / scale) + zp, qmin, qmax)
    arr = q.numpy().astype(np.dtype(in_dtype.lower())).reshape(in_shape)
    np.save(out_dir / f"{stem}.input.npy", arr)
    print(
        f"{dst}: {dst.stat().st_size} B, TOSA {version}, in {in_name} {in_shape} {in_dtype} "
        f"(scale={scale:.6g}, zp={zp}), out {[o[0] for o in outputs]}"
    )
    return dst


def main() -> None:
    """Parse arguments and export every requested model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    defaults = "; ".join(f"{k}: {' '.join(v)}" for k, v in DEFAULT_MODELS.items())
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), help=f"default: {defaults}")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="INT")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models or DEFAULT_MODELS[args.profile]:
        t0 = time.perf_counter()
        export(name, args.profile, args.out)
        print(f"{name}: exported in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
