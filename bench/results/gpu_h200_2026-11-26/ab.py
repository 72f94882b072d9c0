"""GPU A/B of one tosa_jax tree (the one on PYTHONPATH): per graph (a .tosa beside its .io.npz of
the reference model's inputs and outputs), batch-1 latency and batch-64 throughput
(benchmark.py's batched form), outputs checked at batch 1 and for every sample of batch 64.

    python ab.py TAG graph.tosa...        # one JSON line per graph (run_bf16.sh)
"""

import json
import sys
import time

import jax
import numpy as np

import tosa_jax
from tosa_jax.evaluate import DEFAULT_CHUNK, batched
from tosa_jax.lowering.numerics import lowering_for
from tosa_jax.model import compile_lowered, without_locations

tag, paths = sys.argv[1], sys.argv[2:]
plat = jax.devices()[0].platform


def med(f, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


for p in paths:
    d = np.load(p[:-5] + ".io.npz")
    m = tosa_jax.load(p, cache=False)
    x = [jax.device_put(d["in_" + t.name]) for t in m.inputs]
    want = [d["out_" + t.name] for t in m.outputs]
    f = jax.jit(m.fn)
    t0 = time.perf_counter()
    with lowering_for(plat):
        lo = without_locations(f.lower(*x))
    c1 = compile_lowered(lo, m.xla_options(tuple(x)))
    comp1 = time.perf_counter() - t0
    got = [np.asarray(o) for o in jax.block_until_ready(c1(*x))]
    ok1 = all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    b1 = med(lambda: c1(*x), 30)  # noqa: B023
    xb = [jax.device_put(np.repeat(np.asarray(a)[None], 64, axis=0)) for a in x]
    fb = jax.jit(batched(m.fn, DEFAULT_CHUNK))
    t0 = time.perf_counter()
    with lowering_for(plat):
        lob = without_locations(fb.lower(*xb))
    cb = compile_lowered(lob, m.xla_options(tuple(xb)))
    compb = time.perf_counter() - t0
    gb = [np.asarray(o) for o in jax.block_until_ready(cb(*xb))]
    okb = all(np.array_equal(g[i], w) for g, w in zip(gb, want, strict=True) for i in range(64))
    bms = med(lambda: cb(*xb), 15)  # noqa: B023
    hlo = lob.as_text()
    r = dict(tree=tag, graph=p.split("/")[-1][:-5], exact_b1=ok1, exact_b64=okb,
             compile_b1_s=round(comp1, 2), compile_b64_s=round(compb, 2), b1_ms=round(b1, 4),
             b64_ms=round(bms, 3), samples_per_s=round(64e3 / bms), bf16_dots=hlo.count("bf16>"),
             device=str(jax.devices()[0]), src=tosa_jax.__file__)
    print(json.dumps(r), flush=True)
