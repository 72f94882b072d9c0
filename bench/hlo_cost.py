"""What a graph costs XLA, attributed to TOSA operators: jaxpr equations, optimized HLO
instructions, trace + lower, compile, first result from the compile cache, batch-1 latency.

The number of HLO instructions is what a cached load pays for (XLA rebuilds the executable from
the serialized entry at roughly 20-35 us of CPU per optimized instruction) and what compiling
pays for; jaxpr equations are what tracing pays for (40-60 us each). Each graph runs in fresh
processes:

1. ``load(cache=False)``, ``jax.jit(model.fn)`` traced and lowered (timed: CPU and wall),
   equations counted (sub-jaxprs included), compiled with the options Model uses (timed),
   optimized HLO instructions counted in ``compiled.as_text()`` (fused computations included);
   with ``--attribute``, traced once more with each lowering under a ``jax.named_scope`` of its
   operator name, and equations and optimized instructions counted per operator;
   with ``--save-exe FILE``, the optimized executable serialized there (for ``--latency``);
2. ``load(cache=DIR)`` + first call (fills an empty cache), then another process the same
   (from the cache): the first result from the cache, after import (CPU and wall).

``--latency A B ...`` compares saved executables of one graph (say, before and after a change)
in one process: min over interleaved rounds of batch-1 calls (run it under ``nice -n -15``).

    python bench/hlo_cost.py tests/fixtures/*_int8.tosa [--attribute] [--json out.json]

Measured 2026-11-23 on the 2-core machine (load 1-5), main a0f056a against branch hlo, each
figure the min of 2 fresh processes per side, sides interleaved (CPU ms; "cached" = load + first
call in a second process from the compile cache; "rebuild" = XLA rebuilding the serialized
executable; batch 1 = min of interleaved calls, nice -15):

    graph            ops  eqns          HLO instructions  trace+lower  compile
    cnn_int8          28   398 ->  307     939 ->   692     68 ->  62    829 ->  681
    mlp_attn_int8    100   873 ->  546    2147 ->  1334    194 -> 130   1125 ->  939
    bert_tiny_int8   365  2961 -> 1948   14230 ->  4225    398 -> 365   5419 -> 2785
    resnet_int8       89  1091 ->  866    3536 ->  2146    195 -> 152   3161 -> 2986
    mobilenetv2_int8 149  2734 -> 2125    6487 ->  4693    296 -> 415   3252 -> 2523
    unet_int8        651  5128 -> 3346   10050 ->  6907    566 -> 564   5778 -> 4898
    lstm_int8       1216  8657 -> 6331   60958 -> 12912    693 -> 663  23393 -> 6555

    graph            cached        rebuild       batch 1 ms
    cnn_int8           74 ->  59     16 ->  10   0.096 -> 0.094
    mlp_attn_int8     107 ->  95     51 ->  31   0.051 -> 0.044
    bert_tiny_int8    451 -> 207    272 ->  81   3.03  -> 2.25
    resnet_int8       225 -> 179     78 ->  60   9.93  -> 9.42
    mobilenetv2_int8  488 -> 338    122 -> 100   7.82  -> 7.35
    unet_int8         360 -> 254    184 -> 127   4.61  -> 3.90
    lstm_int8        1653 -> 533   1235 -> 236   0.559 -> 0.365
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tosa_jax.testing import sample_inputs

_METADATA = re.compile(r'op_name="([^"]*)"')


def count_eqns(jaxpr: Any, per_op: Counter | None = None) -> int:
    """Equations of a jaxpr and of every jaxpr inside it (cond/while/scan/pjit bodies)."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        if per_op is not None:
            per_op[_op_of(str(eqn.source_info.name_stack))] += 1
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if isinstance(sub, ClosedJaxpr):
                    n += count_eqns(sub.jaxpr, per_op)
                elif isinstance(sub, Jaxpr):
                    n += count_eqns(sub, per_op)
    return n


def _op_of(name_stack: str) -> str:
    """The TOSA operator of a name stack (the first all-capitals scope), or "-" for none."""
    for part in name_stack.split("/"):
        if part and part.replace("_", "").isalnum() and part.isupper():
            return part
    return "-"


def hlo_instructions(text: str, per_op: Counter | None = None) -> int:
    """Instructions of an optimized HLO module (every computation: fusions included). Per
    operator: by the instruction's metadata; those without (constants and their broadcasts,
    parameters) count for the operator that has most instructions in their computation."""
    n = 0
    comp: Counter = Counter()
    loose = 0
    for line in text.splitlines() + ["}"]:
        s = line.strip()
        if s == "}" or s.endswith("{"):  # a computation ends or starts
            if per_op is not None and (comp or loose):
                per_op.update(comp)
                per_op[comp.most_common(1)[0][0] if comp else "-"] += loose
            comp, loose = Counter(), 0
            continue
        if " = " not in s or s.startswith(("HloModule", "//")):
            continue
        n += 1
        m = _METADATA.search(s)
        if m:
            comp[_op_of(m.group(1))] += 1
        else:
            loose += 1
    return n


def worker_compile(path: str, attribute: bool, save_exe: str | None) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    import tosa_jax
    from tosa_jax.model import compile_lowered, without_locations

    jax.jit(lambda v: v + 1).lower(np.int32(1)).compile()  # JAX's one-time set-up
    model = tosa_jax.load(path, cache=False)
    x = [jax.device_put(a) for a in sample_inputs(model, path)]
    jax.block_until_ready(x)
    f = jax.jit(model.fn)
    c0, t0 = time.process_time(), time.perf_counter()
    traced = f.trace(*x)
    lowered = without_locations(traced.lower())  # as Model compiles it
    c1, t1 = time.process_time(), time.perf_counter()
    compiled = compile_lowered(lowered, model.xla_options(tuple(x)),
                               sequential=model.sequential(tuple(x)))
    c2, t2 = time.process_time(), time.perf_counter()
    text = compiled.as_text()
    ops = Counter(op.op for op in model.graph.main.operators
                  if op.op not in ("CONST", "CONST_SHAPE"))
    res: dict[str, Any] = {
        "ops": sum(ops.values()), "eqns": count_eqns(traced.jaxpr.jaxpr),
        "hlo": hlo_instructions(text), "stablehlo_lines": lowered.as_text().count("\n"),
        "trace_cpu_ms": (c1 - c0) * 1e3, "trace_ms": (t1 - t0) * 1e3,
        "compile_cpu_ms": (c2 - c1) * 1e3, "compile_ms": (t2 - t1) * 1e3,
        "op_counts": dict(ops)}
    if save_exe:
        import pickle

        from jax.experimental import serialize_executable

        outs = [np.asarray(o) for o in jax.block_until_ready(compiled(*x))]
        with open(save_exe, "wb") as fh:
            pickle.dump({"exe": serialize_executable.serialize(compiled),
                         "inputs": [np.asarray(a) for a in x], "outputs": outs}, fh)
    if attribute:
        from tosa_jax.lowering import LOWERINGS

        def scoped(name: str, fn: Any) -> Any:
            import functools

            @functools.wraps(fn)
            def inner(*a: Any, **k: Any) -> Any:
                with jax.named_scope(name):
                    return fn(*a, **k)
            return inner

        for name, fn in list(LOWERINGS.items()):
            LOWERINGS[name] = scoped(name, fn)
        # a fresh model: its graph function looks the lowerings up when traced
        m2 = tosa_jax.load(path, cache=False)
        tr = jax.jit(m2.fn).trace(*x)
        eq: Counter = Counter()
        count_eqns(tr.jaxpr.jaxpr, eq)
        hl: Counter = Counter()
        hlo_instructions(compile_lowered(tr.lower(), m2.xla_options(tuple(x))).as_text(), hl)
        res["eqns_by_op"], res["hlo_by_op"] = dict(eq), dict(hl)
    return res


def worker_first(path: str, cache_dir: str) -> dict:
    """A user's fresh process: load + first call with the compile cache in ``cache_dir``."""
    t_start = time.perf_counter()
    import jax

    import tosa_jax

    c0, t0 = time.process_time(), time.perf_counter()
    model = tosa_jax.load(path, cache=cache_dir)
    jax.block_until_ready(model(*sample_inputs(model, path)))
    c1, t1 = time.process_time(), time.perf_counter()
    return {"import_ms": (t0 - t_start) * 1e3, "first_ms": (t1 - t0) * 1e3,
            "first_cpu_ms": (c1 - c0) * 1e3, "source": model.compile_source}


def latency(files: list[str], rounds: int, calls: int) -> tuple[list[float], list[float]]:
    """Min batch-1 latency (ms) of each saved executable, over interleaved rounds in this
    process (their outputs must be identical), and min CPU time (ms) to rebuild each from its
    serialized form (what a load from the compile cache pays in XLA), over ``rounds``."""
    import pickle

    import jax
    from jax.experimental import serialize_executable

    blobs = []
    for f in files:
        with open(f, "rb") as fh:
            blobs.append(pickle.load(fh))
    rebuild = [float("inf")] * len(files)
    for _ in range(rounds):
        for i, d in enumerate(blobs):
            c0 = time.process_time()
            serialize_executable.deserialize_and_load(*d["exe"])
            rebuild[i] = min(rebuild[i], (time.process_time() - c0) * 1e3)
    exes, first = [], None
    for f, d in zip(files, blobs, strict=True):
        exe = serialize_executable.deserialize_and_load(*d["exe"])
        x = [jax.device_put(a) for a in d["inputs"]]
        outs = [np.asarray(o) for o in jax.block_until_ready(exe(*x))]
        ref = first if first is not None else outs
        if any(not np.array_equal(a, b) for a, b in zip(ref, outs, strict=True)):
            raise SystemExit(f"{f}: outputs differ from {files[0]}'s")
        first = ref
        exes.append((exe, x))
    best = [float("inf")] * len(exes)
    for _ in range(rounds):
        for i, (exe, x) in enumerate(exes):
            for _ in range(calls):
                t0 = time.perf_counter()
                jax.block_until_ready(exe(*x))
                best[i] = min(best[i], time.perf_counter() - t0)
    return [b * 1e3 for b in best], rebuild


def _run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{args}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(path: str, attribute: bool, save_exe: str | None, repeat: int) -> dict:
    runs = [_run(["--worker-compile", path] + (["--attribute"] if attribute and i == 0 else [])
                 + (["--save-exe", save_exe] if save_exe and i == 0 else []))
            for i in range(repeat)]
    res = runs[0]
    for k in ("trace_cpu_ms", "trace_ms", "compile_cpu_ms", "compile_ms"):
        res[k] = min(r[k] for r in runs)
    cached = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            first = _run(["--worker-first", path, d])
            cached.append(_run(["--worker-first", path, d]))
            # (a small graph's numpy program, tosa_jax.npexec, comes from the cache too)
            assert cached[-1]["source"] in ("cache", "numpy, cache"), cached[-1]
    res["first_ms"] = first["first_ms"]
    res["cached_ms"] = min(c["first_ms"] for c in cached)
    res["cached_cpu_ms"] = min(c["first_cpu_ms"] for c in cached)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*")
    ap.add_argument("--attribute", action="store_true", help="equations and HLO per operator")
    ap.add_argument("--top", type=int, default=8, help="operators listed per graph")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per figure (min)")
    ap.add_argument("--save-exe", help="directory: save each graph's executable there")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--latency", nargs="+", help="saved executables of one graph to compare")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--worker-compile", help=argparse.SUPPRESS)
    ap.add_argument("--worker-first", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_compile:
        print(json.dumps(worker_compile(args.worker_compile, args.attribute, args.save_exe)))
        return
    if args.worker_first:
        print(json.dumps(worker_first(*args.worker_first)))
        return
    if args.latency:
        ms, rebuild = latency(args.latency, args.rounds, args.calls)
        for f, m, r in zip(args.latency, ms, rebuild, strict=True):
            print(f"{f}: batch-1 {m:.4f} ms, rebuilt from its serialized form in {r:.0f} ms CPU")
        return
    print(f"{'graph':<18}{'ops':>5}{'eqns':>7}{'HLO':>7}{'trace ms':>9}{'(cpu)':>7}"
          f"{'compile ms':>11}{'(cpu)':>7}{'1st ms':>8}{'cached ms':>10}{'(cpu)':>7}", flush=True)
    results = {}
    for g in args.graphs:
        exe = None
        if args.save_exe:
            os.makedirs(args.save_exe, exist_ok=True)
            exe = os.path.join(args.save_exe, Path(g).stem + ".exe")
        r = measure(g, args.attribute, exe, args.repeat)
        results[Path(g).stem] = r
        print(f"{Path(g).stem:<18}{r['ops']:>5}{r['eqns']:>7}{r['hlo']:>7}"
              f"{r['trace_ms']:>9.0f}{r['trace_cpu_ms']:>7.0f}{r['compile_ms']:>11.0f}"
              f"{r['compile_cpu_ms']:>7.0f}{r['first_ms']:>8.0f}{r['cached_ms']:>10.0f}"
              f"{r['cached_cpu_ms']:>7.0f}", flush=True)
        if args.attribute:
            eq, hl = r["eqns_by_op"], r["hlo_by_op"]
            for op in sorted(hl, key=lambda o: -hl[o])[:args.top]:
                n, e = r["op_counts"].get(op, 0), eq.get(op, 0)
                print(f"    {op:<16} x{n:<5} eqns {e:>6} ({e / max(n, 1):5.1f}/op)  "
                      f"HLO {hl[op]:>6} ({hl[op] / max(n, 1):5.1f}/op)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
