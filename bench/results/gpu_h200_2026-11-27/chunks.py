"""Batch-64 throughput of jit(batched(model.fn, chunk)) for several chunks on this machine's
default device (what tosa_jax.evaluate runs per device), each chunk's integers checked equal to
chunk 1's (each sample alone)."""
import sys
import time

import jax
import numpy as np

import tosa_jax
from tosa_jax.evaluate import _largest_activation, batched

N = int(sys.argv[1])
CHUNKS = [int(c) for c in sys.argv[2].split(",")]
print("device", jax.devices()[0], flush=True)
for path in sys.argv[3:]:
    m = tosa_jax.load(path, cache=False)
    x0 = np.load(path.removesuffix(".tosa") + ".input.npy")
    rng = np.random.default_rng(0)
    if np.issubdtype(x0.dtype, np.integer):
        xs = rng.integers(np.iinfo(x0.dtype).min, np.iinfo(x0.dtype).max, (N, *x0.shape),
                          endpoint=True).astype(x0.dtype)
    else:
        xs = (x0[None] + rng.standard_normal((N, *x0.shape)).astype(x0.dtype) * x0.std())
    xd = jax.device_put(xs)
    line, want = [], None
    for c in [1, *CHUNKS]:
        f = jax.jit(batched(m.fn, c))
        t = time.perf_counter()
        compiled = f.lower(xd).compile()
        tc = time.perf_counter() - t
        out = jax.block_until_ready(compiled(xd))
        outs = [np.asarray(o) for o in jax.tree.leaves(out)]
        if want is None:
            want = outs
            same = "base"
        elif all(o.dtype.kind in "iub" for o in outs):
            same = "exact" if all(np.array_equal(a, b) for a, b in zip(want, outs)) else "DIFFERS"
        else:
            err = max(float(np.max(np.abs(a.astype(np.float64) - b) / (np.abs(a) + 1e-30)))
                      for a, b in zip(want, outs))
            same = f"rel {err:.1e}"
        times = []
        for _ in range(10):
            t = time.perf_counter()
            jax.block_until_ready(compiled(xd))
            times.append(time.perf_counter() - t)
        ms = 1e3 * float(np.median(times))
        line.append(f"c{c}: {ms:.3f} ms {N / ms * 1e3:,.0f}/s compile {tc:.2f} s {same}")
    print(f"{path.rsplit('/', 1)[-1]} (largest activation {_largest_activation(m) >> 10} KiB): "
          + " | ".join(line), flush=True)
