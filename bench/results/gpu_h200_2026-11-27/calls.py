"""Per-call times of a fresh process's first calls (compiled, then from the cache), and a profile
of the cached process's second call: the seventeenth session's 3.8 ms second call on the GPU."""
import cProfile
import io
import pstats
import sys
import time

import jax
import numpy as np

import tosa_jax

path, cache, out = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.load(path.removesuffix(".tosa") + ".input.npy")
t0 = time.perf_counter()
m = tosa_jax.load(path, cache=cache)
times = []
for i in range(8):
    t = time.perf_counter()
    if i == 1:
        pr = cProfile.Profile()
        pr.enable()
    jax.block_until_ready(m(x))
    if i == 1:
        pr.disable()
    times.append(1e3 * (time.perf_counter() - t))
print(f"{path.rsplit('/', 1)[-1]} {m.compile_source}: calls ms " +
      " ".join(f"{t:.2f}" for t in times), flush=True)
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(25)
with open(out, "a") as f:
    f.write(f"== {path} {m.compile_source}: second call\n{s.getvalue()}\n")
