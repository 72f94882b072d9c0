"""ExecuTorch-exported int8 networks (tests/fixtures, made by bench/export_models.py): tosa_jax
must be bit-identical to the reference model, with x64 off and on and batched through vmap."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import tosa_jax
from tosa_jax.testing import FIXTURES

NETWORKS = ["cnn_int8", "mlp_attn_int8"]


def _inputs(model: tosa_jax.Model, name: str, seed: int) -> dict[str, np.ndarray]:
    """The exporter's example input for seed 0, seeded random int8 otherwise."""
    spec = model.inputs[0]
    if seed == 0:
        return {spec.name: np.load(FIXTURES / f"{name}.input.npy")}
    rng = np.random.default_rng(seed)
    return {spec.name: rng.integers(-128, 128, spec.shape).astype(spec.np_dtype)}


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name", NETWORKS)
def test_network_bit_exact(reference, name: str, x64: bool) -> None:
    path = FIXTURES / f"{name}.tosa"
    with jax.enable_x64(x64):
        model = tosa_jax.load(path)
        outs = [s.name for s in model.outputs]
        for seed in range(3):
            inputs = _inputs(model, name, seed)
            want = reference(path, inputs, outs)
            got = model.run(inputs)
            for n in outs:
                assert got[n].dtype == want[n].dtype
                np.testing.assert_array_equal(got[n], want[n], err_msg=f"{name} seed {seed} {n}")


@pytest.mark.parametrize("name", NETWORKS)
def test_network_vmap_matches_reference(reference, name: str) -> None:
    path = FIXTURES / f"{name}.tosa"
    model = tosa_jax.load(path)
    spec, out = model.inputs[0], model.outputs[0].name
    rng = np.random.default_rng(7)
    batch = rng.integers(-128, 128, (4,) + spec.shape).astype(spec.np_dtype)
    got = np.asarray(jax.jit(jax.vmap(model.fn))(batch)[0])
    for i in range(4):
        want = reference(path, {spec.name: batch[i]}, [out])[out]
        np.testing.assert_array_equal(got[i], want)
