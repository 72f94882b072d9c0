"""ERF's f32 accuracy, every value: tosa_jax's erf (lowering.activation_funcs) against scipy's
float64 erf, in units of the f32 result's last place (ERF allows 5 ULP), over every f32 in
[2**-6, 4.5] (erf rounds to 1 above ~3.92) and every 61st below it down to the smallest normal,
with a sample of negatives and the special values; XLA's own erf beside it.

    python bench/erf_ulp.py          # the check (~1-5 min on 2 cores; needs scipy)
    python bench/erf_ulp.py --fit    # refit the coefficients (prints them)

Subnormal inputs are left out: XLA's CPU and GPU code flush them to zero, as the spec allows.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    from scipy.special import erf as erf64
except ImportError:
    sys.exit("bench/erf_ulp.py needs scipy (float64 erf): pip install scipy")

SPLIT, ONE, SMALL_DEGREE, LARGE_DEGREE = 0.75, 3.92, 5, 16


def _minimax_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, degree: int) -> tuple:
    """Coefficients (highest degree first) of a polynomial p with max |w * (p(x) - y)| near its
    least value: weighted least squares, reweighted by each point's error (Lawson's method)."""
    ww = np.ones_like(x)
    for _ in range(30):
        c = np.polynomial.polynomial.polyfit(x, y, degree, w=w * ww)
        e = np.abs(w * (np.polynomial.polynomial.polyval(x, c) - y))
        ww *= (e / e.max() + 1e-3) ** 0.5
        ww /= ww.mean()
    print(f"  max relative error {e.max():.3g}")
    return tuple(float(v) for v in c[::-1])


def fit() -> None:
    """erf(z)/z in s = z*z on [0, SPLIT] (relative error, reweighted); erf(z) on [SPLIT, ONE] in
    u = (z - mid) / half-width, a Chebyshev least-squares fit turned into powers of u (its
    coefficients stay below 1: Horner's rule in f32 adds about an ULP)."""
    z = np.linspace(1e-4, SPLIT, 200001)
    y = erf64(z) / z
    print("ERF_SMALL =", _minimax_fit(z * z, y, 1 / y, SMALL_DEGREE))
    z = np.linspace(SPLIT, ONE, 400001)
    u = (z - (ONE + SPLIT) / 2) / ((ONE - SPLIT) / 2)
    c = np.polynomial.chebyshev.chebfit(u, erf64(z), LARGE_DEGREE)
    ulp = 2.0 ** (np.floor(np.log2(erf64(z))) - 23)
    err = np.abs(np.polynomial.chebyshev.chebval(u, c) - erf64(z)) / ulp
    print(f"  max error {err.max():.3g} ULP")
    print("ERF_LARGE =", tuple(float(v) for v in np.polynomial.chebyshev.cheb2poly(c)[::-1]))


def ulps(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|y - erf(x)| in ULPs of the f32 binade of the exact erf(x)."""
    ref = erf64(x.astype(np.float64))
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126))) - 23)
    return np.abs(y.astype(np.float64) - ref) / ulp


def check() -> int:
    import jax
    from jax import lax

    from tosa_jax.lowering.activation_funcs import _erf

    fns = {"tosa_jax": jax.jit(_erf), "lax.erf": jax.jit(lax.erf)}
    bits = lambda v: int(np.float32(v).view(np.uint32))  # noqa: E731
    lo, top, chunk = bits(2.0 ** -6), bits(4.5), 1 << 24
    ranges = [(bits(2.0 ** -126), lo, 61)] + [(a, min(a + chunk, top), 1)
                                              for a in range(lo, top, chunk)]
    worst = {k: (0.0, 0.0) for k in fns}
    t0 = time.time()
    for a, b, step in ranges:
        x = np.arange(a, b, step, dtype=np.uint32).view(np.float32)
        for k, f in fns.items():
            u = ulps(x, np.asarray(f(x)))
            i = int(np.argmax(u))
            worst[k] = max(worst[k], (float(u[i]), float(x[i])))
        print(f"[{time.time() - t0:4.0f} s] up to {x[-1]:.4g}: " + ", ".join(
            f"{k} {u:.2f} ULP at {at:.6g}" for k, (u, at) in worst.items()), flush=True)
    x = -np.random.default_rng(0).uniform(0, 6, 1 << 22).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)
    y = np.asarray(fns["tosa_jax"](np.concatenate([x, special])))
    neg = float(ulps(x, y[:len(x)]).max())
    want = np.array([0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0], np.float32)
    specials_ok = bool(np.array_equal(y[len(x):], want, equal_nan=True)
                       and np.signbit(y[len(x) + 1]))
    print(f"negatives (sample of {len(x):,}): {neg:.2f} ULP at most; "
          f"0, -0, +-inf, nan, +-1e30 -> {y[len(x):]} ({'right' if specials_ok else 'WRONG'})")
    bound = max(worst["tosa_jax"][0], neg)
    print(f"tosa_jax erf: {bound:.2f} ULP at most ({'within' if bound <= 5 else 'OVER'} 5)")
    return 0 if bound <= 5 and specials_ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", action="store_true", help="refit and print the coefficients")
    sys.exit(fit() if p.parse_args().fit else check())
