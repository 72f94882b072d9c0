"""A fresh process's first result from a filled compile cache, profiled (cProfile, top 30)."""
import cProfile
import pstats
import sys
import time

t0 = time.perf_counter()
import jax  # noqa: E402
import numpy as np  # noqa: E402

import tosa_jax  # noqa: E402

t1 = time.perf_counter()
jax.devices()
t2 = time.perf_counter()
path, cache, out = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.load(path.removesuffix(".tosa") + ".input.npy")
pr = cProfile.Profile()
pr.enable()
t3 = time.perf_counter()
model = tosa_jax.load(path, cache=cache)
t4 = time.perf_counter()
jax.block_until_ready(model(x))
t5 = time.perf_counter()
pr.disable()
print(f"{path}: import {t1-t0:.2f} s, backend {t2-t1:.2f} s, load {t4-t3:.3f} s, first call "
      f"{t5-t4:.3f} s ({model.compile_source})")
with open(out, "w") as f:
    pstats.Stats(pr, stream=f).sort_stats("cumulative").print_stats(40)
    pstats.Stats(pr, stream=f).sort_stats("tottime").print_stats(25)
