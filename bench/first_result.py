"""What a user's fresh process pays on this machine's default device (a GPU where JAX has one):
``import``, backend start, ``tosa_jax.load`` to the first result, from an empty compile cache
and then from the filled one, each in its own process.

    python bench/first_result.py tests/fixtures/cnn_int8.tosa .cache/zoo/resnet_int8.tosa

Inputs: ``<graph>.input.npy`` beside the graph. (bench/benchmark.py measures the CPU's first
results beside IREE's; this is the same measure for whatever device JAX picks.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time


def one(path: str, cache: str) -> str:
    """In this (fresh) process: the timings of one graph, as a line."""
    t0 = time.perf_counter()
    import jax
    import numpy as np

    import tosa_jax

    t1 = time.perf_counter()
    device = jax.devices()[0]
    t2 = time.perf_counter()
    model = tosa_jax.load(path, cache=cache)
    x = np.load(path.removesuffix(".tosa") + ".input.npy")
    jax.block_until_ready(model(x))
    t3 = time.perf_counter()
    jax.block_until_ready(model(x))
    t4 = time.perf_counter()
    return (f"{path.rsplit('/', 1)[-1]}: {device.platform} import {t1 - t0:.2f} s, backend "
            f"{t2 - t1:.2f} s, load to first result {t3 - t2:.3f} s ({model.compile_source}), "
            f"second call {1e3 * (t4 - t3):.2f} ms")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(one(sys.argv[2], sys.argv[3]), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graphs", nargs="+", help="TOSA flatbuffers, each with <graph>.input.npy")
    status = 0
    for path in parser.parse_args().graphs:
        with tempfile.TemporaryDirectory() as cache:
            for _ in range(2):  # compiled, then from the cache
                proc = subprocess.run([sys.executable, __file__, "--one", path, cache],
                                      capture_output=True, text=True, timeout=600)
                lines = proc.stdout.strip().splitlines()
                print(lines[-1] if proc.returncode == 0 and lines
                      else f"{path}: failed\n{proc.stderr[-2000:]}", flush=True)
                status |= proc.returncode != 0
    return status


if __name__ == "__main__":
    sys.exit(main())
