"""tosa_jax.from_torch: PyTorch modules through ExecuTorch's Arm backend (the torch extra;
skipped without torch and executorch). Oracles: PyTorch's own output (FP), the TOSA reference
model on the exported graph (INT). (The digits study, bench/accuracy_digits.py, exports through
this same ``export_torch``: tests/test_accuracy_digits.py judges its graphs.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

import tosa_jax  # noqa: E402
from tosa_jax.testing.reference import run_reference  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc(h)


@pytest.fixture(scope="module")
def tiny() -> tuple[torch.nn.Module, tuple, list]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    example = (torch.randn(1, 3, 8, 8, generator=gen),)
    calib = [(torch.randn(1, 3, 8, 8, generator=gen),) for _ in range(8)]
    return Tiny().eval(), example, calib


def test_from_torch_fp_matches_pytorch(tiny, tmp_path: Path) -> None:
    module, example, _ = tiny
    model = tosa_jax.from_torch(module, example, progress=False)
    assert model.export.spec == "TOSA-1.0+FP"
    with torch.no_grad():
        want = module(*example).numpy()
    x = example[0].numpy()  # ExecuTorch keeps the NCHW interface
    got = np.asarray(model(x.reshape(model.inputs[0].shape)))
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-5, rtol=0)
    path = model.export.save(tmp_path / "tiny.tosa")  # the .tosa is the user's
    assert tosa_jax.read(path.read_bytes()).main.inputs == model.graph.main.inputs
    assert model.export.graph_module is not None


def test_from_torch_int_matches_reference(tiny) -> None:
    module, example, calib = tiny
    model = tosa_jax.from_torch(module, example, quantize=True, calibration=calib,
                                progress=False)
    assert model.export.spec == "TOSA-1.0+INT" and model.inputs[0].dtype == "INT8"
    (xq,) = model.export.quantize_inputs(example[0])
    xq = xq.reshape(model.inputs[0].shape)
    got = np.asarray(model(xq))
    ref = run_reference(model.export.tosa, {model.inputs[0].name: xq},
                        [model.outputs[0].name])[model.outputs[0].name]
    np.testing.assert_array_equal(got, ref)
    (y,) = model.export.dequantize_outputs(got)
    with torch.no_grad():
        want = module(*example).numpy()
    step = model.export.output_qparams[0].scale
    assert np.abs(y.reshape(want.shape) - want).max() < 8 * step  # PTQ error: a few steps


def test_bad_spec_string(tiny) -> None:
    module, example, _ = tiny
    with pytest.raises(tosa_jax.TosaInputError, match="INT spec"):
        tosa_jax.from_torch(module, example, quantize=True, spec="TOSA-1.0+FP")
