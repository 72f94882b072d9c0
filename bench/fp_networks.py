"""Largest differences between tosa_jax, the TOSA reference model (FP32 and precise FP64) and
PyTorch on the FP32 network fixtures (tests/fixtures/*_fp32.*, from bench/export_models.py).

    /work/venv/bin/python bench/fp_networks.py

Prints one row per network: max |a - b| over the output for each pair, the network tolerance
T = B * 2**-23 * max|ref64| of tests/test_networks_fp.py (B: summed per-operator allowance in
ulp, see tosa_jax/testing/reference.py) and the output scale max|ref64|.
"""

from __future__ import annotations

import numpy as np

import tosa_jax
from tosa_jax.testing import FIXTURES
from tosa_jax.testing.reference import error_budget, network_tolerance, run_reference_fp

NETWORKS = ["cnn_fp32", "encoder_fp32", "gru_fp32"]


def main() -> None:
    """Print the table."""
    cols = ["network", "tj-torch", "tj-ref64", "ref32-torch", "ref32-ref64", "torch-ref64",
            "tj-ref32", "T", "B(ulp)", "max|ref64|"]
    print(" | ".join(f"{c:>12}" for c in cols))
    for name in NETWORKS:
        path = FIXTURES / f"{name}.tosa"
        model = tosa_jax.load(path)
        inp, out = model.inputs[0].name, model.outputs[0].name
        x = np.load(FIXTURES / f"{name}.input.npy")
        torch_out = np.load(FIXTURES / f"{name}.torch.npy").astype(np.float64)
        tj = model.run({inp: x})[out].astype(np.float64)
        ref32 = run_reference_fp(path, {inp: x}, [out], precise=False)[out].astype(np.float64)
        ref64 = run_reference_fp(path, {inp: x}, [out], precise=True)[out]

        def d(a: np.ndarray, b: np.ndarray) -> str:
            return f"{np.max(np.abs(a - b)):.3g}"

        row = [name, d(tj, torch_out), d(tj, ref64), d(ref32, torch_out), d(ref32, ref64),
               d(torch_out, ref64), d(tj, ref32), f"{network_tolerance(model.graph, ref64):.3g}",
               f"{error_budget(model.graph)[0]:g}", f"{np.max(np.abs(ref64)):.3g}"]
        print(" | ".join(f"{c:>12}" for c in row))


if __name__ == "__main__":
    main()
