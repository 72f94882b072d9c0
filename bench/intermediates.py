"""Time and memory of ``model.intermediates``: every tensor of a graph for a batch of samples in
one compiled call (``tosa_jax.inspect``), beside the plain batched call of the same graph.

    python bench/intermediates.py GRAPH.tosa [--batch 64] [--repeat 5] [--json out.json]

Prints the tensors kept and their bytes, XLA's compiled memory estimate (arguments, outputs,
temporaries) for the intermediates function and for the outputs-only function, first-call time
(trace + compile + run), the median steady-state time of ``repeat`` calls, and the process's
peak RSS. Seeded random inputs of the graph's types.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax
import numpy as np

import tosa_jax
from tosa_jax import inspect as ti
from tosa_jax.model import compiled_bytes


def _inputs(model: tosa_jax.Model, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for s in model.inputs:
        if s.np_dtype.kind == "f":
            out.append(rng.normal(size=(n, *s.shape)).astype(s.np_dtype))
        elif s.np_dtype.kind == "b":
            out.append(rng.integers(0, 2, (n, *s.shape)).astype(bool))
        else:
            info = np.iinfo(s.np_dtype)
            out.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1,
                                    (n, *s.shape)).astype(s.np_dtype))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    model = tosa_jax.load(args.graph)
    xs = _inputs(model, args.batch)
    names = [s.name for s in ti.tensor_sites(model.graph)]
    kept = ti.kept_bytes(model.graph, names, args.batch)
    print(f"{args.graph}: {len(model.graph.main.operators)} operators, {len(names)} tensors "
          f"kept (constants left out), {kept / 2**20:.1f} MiB for {args.batch} samples",
          flush=True)
    t0 = time.perf_counter()
    values = model.intermediates(*xs, batched=True)
    jax.block_until_ready(list(values.values()))
    first = time.perf_counter() - t0
    fn = model._intermediates_jit(tuple(names), True)
    need, temp = compiled_bytes(fn.lower({}, *xs).compile())
    steady = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        model.intermediates(*xs, batched=True)
        steady.append(time.perf_counter() - t0)
    plain = jax.jit(jax.vmap(model.fn))
    t0 = time.perf_counter()
    jax.block_until_ready(plain(*xs))
    plain_first = time.perf_counter() - t0
    plain_need, plain_temp = compiled_bytes(plain.lower(*xs).compile())
    plain_steady = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(plain(*xs))
        plain_steady.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res = {"graph": args.graph, "batch": args.batch, "tensors": len(names),
           "kept_mib": kept / 2**20, "first_s": first, "steady_s": float(np.median(steady)),
           "xla_mib": need / 2**20, "xla_temp_mib": temp / 2**20,
           "outputs_only_first_s": plain_first,
           "outputs_only_steady_s": float(np.median(plain_steady)),
           "outputs_only_xla_mib": plain_need / 2**20,
           "outputs_only_xla_temp_mib": plain_temp / 2**20, "peak_rss_mib": rss}
    print(f"intermediates: first call {first:.2f} s (trace+compile+run), steady "
          f"{res['steady_s'] * 1e3:.1f} ms per batch (host copies included); XLA "
          f"{res['xla_mib']:.1f} MiB ({res['xla_temp_mib']:.1f} temporaries)")
    print(f"outputs only (jit(vmap(fn))): first call {plain_first:.2f} s, steady "
          f"{res['outputs_only_steady_s'] * 1e3:.1f} ms; XLA {res['outputs_only_xla_mib']:.1f} "
          f"MiB ({res['outputs_only_xla_temp_mib']:.1f} temporaries)")
    print(f"peak RSS {rss:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
