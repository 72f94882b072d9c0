"""jax.grad through ``model.fn`` with respect to the inputs, on the FP32 network fixtures (the
transformer encoder block above all), checked against central finite differences.

loss(x) = sum(model.fn(x)[0] * w), w a fixed seeded normal tensor. The graph is FP32 throughout
(tensor types are declared, so x64 cannot lift it to FP64), so the finite differences are taken in
FP32: for random directions d (standard normal per element, inputs are O(1)),
``fd = (loss(x + eps d) - loss(x - eps d)) / (2 eps)`` with eps = 1e-2 is compared with
``<grad, d>``. Error sources: truncation O(eps**2 * loss''') and FP32 rounding of loss,
about 2**-24 * |loss| / eps, plus the hardswish kinks (CLAMP) a step may cross; measured on
these fixtures: at most 2.1e-4 of the typical size of a directional derivative,
``s = |grad| |d| / sqrt(n)``. Tolerance: 5e-3 * s (over 20x the measured error);
a wrong or missing derivative of any operator on the path changes <grad, d> by O(s).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tosa_jax
from tosa_jax.testing import FIXTURES

EPS = 1e-2
RTOL = 5e-3
N_DIRECTIONS = 6


def _loss(name: str):
    model = tosa_jax.load(FIXTURES / f"{name}.tosa")
    x = np.load(FIXTURES / f"{name}.input.npy")
    w = np.random.default_rng(0).standard_normal(model.outputs[0].shape).astype(np.float32)

    def loss(v):
        return jnp.sum(model.fn(v)[0] * w)

    return loss, x


@pytest.mark.parametrize("name", ["encoder_fp32", "gru_fp32", "cnn_fp32"])
def test_grad_matches_central_differences(name: str) -> None:
    loss, x = _loss(name)
    grad = jax.jit(jax.grad(loss))(x)
    assert grad.shape == x.shape and grad.dtype == jnp.float32
    g = np.asarray(grad, np.float64)
    assert np.all(np.isfinite(g)) and np.any(g != 0)
    f = jax.jit(loss)
    rng = np.random.default_rng(1)
    eps = np.float32(EPS)
    for k in range(N_DIRECTIONS):
        d = rng.standard_normal(x.shape).astype(np.float32)
        fd = (float(f(x + eps * d)) - float(f(x - eps * d))) / (2 * EPS)
        gd = float(np.vdot(g, d))
        scale = np.linalg.norm(g) * np.linalg.norm(d) / np.sqrt(d.size)
        print(f"{name} direction {k}: <grad,d> = {gd:.6g}, central difference = {fd:.6g}, "
              f"|diff|/s = {abs(fd - gd) / scale:.2e}")
        assert abs(fd - gd) <= RTOL * scale, f"{name} direction {k}: {fd} vs {gd}"


def test_grad_composes_with_vmap_and_jit() -> None:
    """Per-example input gradients of a batch equal the one-at-a-time gradients."""
    loss, x = _loss("encoder_fp32")
    batch = np.stack([x, np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)])
    per_example = jax.jit(jax.vmap(jax.grad(loss)))(batch)
    for i in range(2):
        one = jax.jit(jax.grad(loss))(batch[i])
        np.testing.assert_allclose(np.asarray(per_example[i]), np.asarray(one),
                                   rtol=1e-5, atol=1e-6)
