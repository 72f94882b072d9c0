"""Export small PyTorch models to TOSA 1.0 flatbuffers via the ExecuTorch Arm backend.

The pipeline is the package's (``tosa_jax.export_torch``, tosa_jax/frontends/pytorch.py);
it needs the torch extra, in the project's virtualenv or one of its own, e.g.::

    pip install -e '.[torch]'     # torch==2.13.0, executorch==1.5.1, tosa-tools==2026.8.0
    python bench/export_models.py --out tests/fixtures \\
        --models cnn mlp_attn --profile INT
    python bench/export_models.py --out tests/fixtures \\
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

import tosa_jax
from tosa_jax.frontends.pytorch import export_torch

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


# ---- Benchmark zoo (issue 6): seeded networks of the kinds users bring. -------------------


def _divisible(v: float, d: int = 8) -> int:
    """Round channel counts the MobileNet way (multiple of d, never more than 10% below v)."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear project (BN, ReLU6); residual
    when stride 1 and channels match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hid, 1, bias=False), nn.BatchNorm2d(hid), nn.ReLU6()]
        layers += [
            nn.Conv2d(hid, hid, 3, stride, 1, groups=hid, bias=False), nn.BatchNorm2d(hid),
            nn.ReLU6(), nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018 layout: 17 inverted residuals, 1280-wide head conv)
    with a width multiplier; 224x224x3 input, 1000 classes."""

    CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))  # (expand t, channels c, repeats n, stride s)

    def __init__(self, width: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        cin = _divisible(32 * width)
        last = _divisible(1280 * max(1.0, width))
        layers: list[nn.Module] = [
            nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU6()]
        for t, c, n, s in self.CFG:
            cout = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, ReLU, identity or 1x1-strided projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.short(x))


class ResNet18(nn.Module):
    """ResNet-18 layout (7x7/2 stem, 3x3/2 max pool, 4 stages of 2 basic blocks) at a base width
    (64 in the original); 1000 classes."""

    def __init__(self, base: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], base
        for i, cout in enumerate((base, 2 * base, 4 * base, 8 * base)):
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class BertLayer(nn.Module):
    """Post-norm BERT encoder layer: multi-head self-attention written out the way BERT
    implementations do (q/k/v linears, heads split by view/permute), GELU feed-forward."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.ln2 = nn.LayerNorm(dim, eps=1e-12)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.hd).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.hd**-0.5, dim=-1)
        ctx = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.fc2(nn.functional.gelu(self.fc1(x))))


class BertTiny(nn.Module):
    """BERT-tiny-like encoder (2 layers, hidden 128, 2 heads, FFN 512) on float embeddings
    [1, seq, 128]: an embedding LayerNorm, the layers, and a tanh pooler on the first token."""

    def __init__(self, dim: int = 128, heads: int = 2, ffn: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.Sequential(*(BertLayer(dim, heads, ffn) for _ in range(layers)))
        self.pool = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layers(self.ln(x))
        return torch.tanh(self.pool(h[:, 0]))


class LstmNet(nn.Module):
    """Two-layer batch-first LSTM (hidden 128) over a sequence, linear head on every step."""

    def __init__(self, features: int = 32, hidden: int = 128, out: int = 16) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0])


class ResBlock(nn.Module):
    """Diffusion-UNet residual block: GroupNorm, SiLU, 3x3 conv (twice), 1x1 skip if needed."""

    def __init__(self, cin: int, cout: int, groups: int = 8) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(self.act(self.n1(x)))
        return self.skip(x) + self.c2(self.act(self.n2(h)))


class SmallUNet(nn.Module):
    """Two-level UNet: ResBlocks, stride-2 conv down, nearest x2 up and bilinear x2 up, skip
    concatenations, GroupNorm+SiLU+conv output head."""

    def __init__(self, cin: int = 4, base: int = 32) -> None:
        super().__init__()
        self.inp = nn.Conv2d(cin, base, 3, padding=1)
        self.e1 = ResBlock(base, base)
        self.d1 = nn.Conv2d(base, base, 3, 2, 1)
        self.e2 = ResBlock(base, 2 * base)
        self.d2 = nn.Conv2d(2 * base, 2 * base, 3, 2, 1)
        self.mid = ResBlock(2 * base, 2 * base)
        self.u2 = ResBlock(4 * base, 2 * base)
        self.u1 = ResBlock(3 * base, base)
        self.out = nn.Sequential(nn.GroupNorm(8, base), nn.SiLU(), nn.Conv2d(base, cin, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.e1(self.inp(x))
        s2 = self.e2(self.d1(s1))
        h = self.mid(self.d2(s2))
        h = nn.functional.interpolate(h, scale_factor=2.0, mode="nearest")
        h = self.u2(torch.cat([h, s2], 1))
        h = nn.functional.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.out(self.u1(torch.cat([h, s1], 1)))


def settle_bn(model: nn.Module, shape: tuple[int, ...], batches: int = 4) -> nn.Module:
    """Set every BatchNorm's running statistics from seeded random batches (cumulative average),
    so a randomly initialised deep CNN keeps unit-scale activations instead of letting them
    vanish layer by layer, which would leave nothing for int8 quantization to resolve."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
            m.reset_running_stats()
    gen = torch.Generator().manual_seed(SEED + 2)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((8, *shape[1:]), generator=gen))
    return model.eval()


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
    # The zoo (--zoo), quickest export first (the LSTM is unrolled per step: the slowest).
    "bert_tiny": ModelDef(BertTiny, (1, 128, 128)),
    "unet": ModelDef(SmallUNet, (1, 4, 32, 32)),
    "resnet": ModelDef(lambda: settle_bn(ResNet18(base=32), (1, 3, 224, 224)), (1, 3, 224, 224)),
    "mobilenetv2": ModelDef(lambda: settle_bn(MobileNetV2(), (1, 3, 224, 224)), (1, 3, 224, 224)),
    "lstm": ModelDef(LstmNet, (1, 16, 32)),
}
ZOO: list[str] = ["bert_tiny", "unet", "resnet", "mobilenetv2", "lstm"]


Io = list[tuple[str, tuple[int, ...], str]]


def graph_io(graph: tosa_jax.Graph) -> tuple[Io, Io, str]:
    """(inputs, outputs, version) of a graph; tensors as (name, shape, dtype)."""
    block = graph.main
    major, minor, patch, draft = graph.version
    version = f"{major}.{minor}.{patch}{' draft' if draft else ''}"
    io = [[(n, tuple(block.tensors[n].shape), block.tensors[n].dtype) for n in names]
          for names in (block.inputs, block.outputs)]
    return io[0], io[1], version


def export(name: str, profile: str, out_dir: Path) -> Path:
    """Export model `name` for `profile`; write the .tosa and example input into out_dir."""

    mdef = MODELS[name]
    torch.manual_seed(SEED)
    model = mdef.build().eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    example = (torch.randn(mdef.shape, generator=gen),)
    calib = [(torch.randn(mdef.shape, generator=gen),) for _ in range(N_CALIB)]

    stem = f"{name}_{SUFFIX[profile]}"
    exported = export_torch(model, example, quantize=profile == "INT", calibration=calib,
                            spec=PROFILES[profile])
    dst = exported.save(out_dir / f"{stem}.tosa")

    inputs, outputs, version = graph_io(exported.graph)
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
    q = exported.input_qparams[0]
    assert q is not None, "the INT graph's input has no quantize op"
    arr = q.quantize(example[0].numpy()).reshape(in_shape)
    np.save(out_dir / f"{stem}.input.npy", arr)
    print(
        f"{dst}: {dst.stat().st_size} B, TOSA {version}, in {in_name} {in_shape} {in_dtype} "
        f"(scale={q.scale:.6g}, zp={q.zero_point}), out {[o[0] for o in outputs]}"
    )
    return dst


def main() -> None:
    """Parse arguments and export every requested model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    defaults = "; ".join(f"{k}: {' '.join(v)}" for k, v in DEFAULT_MODELS.items())
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), help=f"default: {defaults}")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="INT")
    ap.add_argument("--zoo", action="store_true",
                    help=f"export the benchmark zoo ({' '.join(ZOO)}, or the --models given) "
                    "for both profiles, INT then FP per model")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.zoo:
        jobs = [(n, p) for n in args.models or ZOO for p in ("INT", "FP")]
    else:
        jobs = [(n, args.profile) for n in args.models or DEFAULT_MODELS[args.profile]]
    for name, profile in jobs:
        t0 = time.perf_counter()
        export(name, profile, args.out)
        print(f"{name} {profile}: exported in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
