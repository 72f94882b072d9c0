"""Our NPU cycle estimates against Vela 5.2's, per NPU partition.

For each network x accelerator: partition the graph (``tosa_jax.hw_models.partition``), write every
NPU partition as a .tosa file, compile it with the Vela CLI (``vela --accelerator-config ACC
--verbose-performance``), count refusals (a partition Vela does not compile, or compiles with
operators left on the CPU), and put our estimated cycles beside Vela's ``cycles_total`` (its
summary CSV). Prints a table and writes JSON.

    python bench/vela_cycles.py [--json vela_cycles.json] [--zoo] [NET.tosa ...]
    python bench/vela_cycles.py --held-out 50 [--json F]   # networks nothing was set on
    python bench/vela_cycles.py --fit [--search]           # fit error of cost.VELA_FIT

``--held-out N``: N networks per accelerator from tests/networks.py ``random_network``
(seeds from 100000), compiled in-process with Vela's engine (regor, as the CLI does), ours/Vela
per network (total cycles of the NPU partitions) and per fused operator group (Vela's
per-operation cycles, its ``--verbose-performance`` table). ``--fit``: the error of the
unpublished parameters ``cost.VELA_FIT`` on the fitting set (fixtures, testing.networks,
random_network seeds 0-15). Defaults: the INT8 fixture networks and the GraphBuilder networks
of tests/networks.py (``--zoo`` adds the INT8 zoo networks, ``--mixed`` a second placement
that splits each network more), on ethos-u55-128, ethos-u65-256 and ethos-u85-256.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tosa_jax
from tosa_jax.hw_models import cost as costmod
from tosa_jax.hw_models import estimate, get_device, partition
from tosa_jax.hw_models import vela as vela_mod
from tosa_jax.testing import CACHE, FIXTURES, networks

ACCELERATORS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
NETWORKS = ("cnn_int8", "mlp_attn_int8")


def vela_exe() -> str:
    beside = Path(sys.executable).parent / "vela"
    return str(beside) if beside.exists() else (shutil.which("vela") or "vela")


def run_vela(path: Path, accelerator: str, out: Path) -> dict:
    """Compile one .tosa with the Vela CLI; returns its summary, per-layer rows and verdict."""
    cmd = [vela_exe(), "--accelerator-config", accelerator, "--verbose-performance",
           "--output-dir", str(out), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    summary = next(iter(sorted(out.glob(f"{path.stem}_summary_*.csv"))), None)
    per_layer = out / f"{path.stem}_per-layer.csv"
    result: dict = {"command": " ".join(cmd), "returncode": proc.returncode}
    cpu_ops = None
    for line in text.splitlines():
        if line.startswith("CPU operators"):
            cpu_ops = int(line.split("=")[1].split()[0])
    if summary is None or "Traceback" in text or "could not run on NPU" in text:
        err = [ln for ln in text.splitlines() if "Error" in ln or "could not" in ln]
        result.update(compiled=False, refused=True, error=(err[-1] if err else text[-500:]))
        return result
    row = next(csv.DictReader(summary.open()))
    result.update(compiled=True, refused=bool(cpu_ops), cpu_operators=cpu_ops,
                  cycles_total=float(row["cycles_total"]), cycles_npu=float(row["cycles_npu"]),
                  nn_macs=int(float(row["nn_macs"])))
    if per_layer.exists():
        result["layers"] = [{"op": r["Original Operator"], "vela_op": r["NNG Operator"],
                             "cycles": float(r["Op Cycles"]), "name": r["Name"]}
                            for r in csv.DictReader(per_layer.open())]
    return result


def _base(name: str) -> str:
    """Vela's per-layer name, less the suffixes of the operations it derives from one op."""
    for sep in ("/", "#"):
        name = name.split(sep)[0] if sep in name and not name.startswith(sep) else name
    for suffix in ("_copy", "_int32", "_reducesum"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def groups(ops: list) -> list[tuple[list[str], object]]:
    """Our operator costs as Vela reports them: each costed operator with the names of the
    chain it heads (its output, then the operators fused into its output stage or viewing it),
    since Vela names a layer after one of them."""
    chain = {}  # producer output -> consumer output
    for c in ops:
        for how in ("output stage of ", "view of "):
            if c.fused_into and c.fused_into.startswith(how):
                chain[c.fused_into[len(how):]] = c.output
    out = []
    for c in ops:
        if c.fused_into is not None:
            continue
        names = [c.output]
        while names[-1] in chain and chain[names[-1]] not in names:
            names.append(chain[names[-1]])
        out.append((names[::-1], c))
    return out


FIT_GRID = {"overhead": [0, 100, 200, 300, 400, 600, 800, 1200],
            "ew_scale": [1, 1.5, 2, 2.5, 3], "ao_scale": [0.5, 0.7, 0.85, 1, 1.2, 1.5, 2],
            "wd_bytes_per_cycle": [2, 4, 8, 16, 32], "mem_scale": [0.5, 1, 1.5, 2, 3, 4],
            "mm_scale": [0.8, 1, 1.2, 1.4, 1.6], "w_ratio": [0.6, 0.7, 0.8, 0.9, 1.0],
            "move_cpe": [0.3, 0.5, 0.8], "acc_elems": [1024, 2048, 4096]}
FIT_SEEDS = range(16)  # random_network seeds of the fitting set (held-out: --seed0 100000)


def fit_error(cases: list) -> tuple[float, float, int, int]:
    """(median |ours/Vela - 1| per operator group, the same per partition total, counts)."""
    ops, tots = [], []
    for pg, k, v, p in cases:
        pc = estimate(pg).partitions[k]
        ops += [abs(mine / cyc - 1) for _, mine, cyc in compare_ops(pg, pc, p, v)]
        tots.append(abs(pc.cycles / v["total"] - 1))
    return float(np.median(ops)), float(np.median(tots)), len(ops), len(tots)


def fit_vela(accelerators: list[str], search: bool) -> dict:
    """The fitting set: the INT8 fixtures, tests/networks.py's networks and random_network
    seeds 0-15. Reports the fit error of cost.VELA_FIT per family; with ``search``, also a
    coordinate search over FIT_GRID (mean |log ratio| per operator + 2 x per total), printed,
    not applied (on the held-out networks the searched values did worse than the ones set)."""

    nets = [tosa_jax.read(FIXTURES / f"{n}.tosa") for n in NETWORKS]
    nets += [make() for make in networks.NETWORKS.values()]
    nets += [networks.random_network(s) for s in FIT_SEEDS]
    out = {}
    for acc in accelerators:
        fam = get_device(acc).family
        cases = []
        for g in nets:
            pg = partition(g, acc)
            for p in pg.partitions:
                if get_device(p.device).kind == "npu":
                    v = vela_layers(tosa_jax.write(p.graph), acc)
                    if v:
                        cases.append((pg, p.index, v, p))
        res = dict(zip(("median_op_abs_err", "median_total_abs_err", "op_groups",
                        "partitions"), fit_error(cases)))
        if search:
            params = costmod.U85_FIT if fam == "ethos-u85" else costmod.VELA_FIT[fam]
            kept = dict(params)

            def objective(cases: list = cases) -> float:
                e = []
                t = []
                for pg, k, v, p in cases:
                    pc = estimate(pg).partitions[k]
                    e += [abs(np.log(max(m, 1.0) / c)) for _, m, c in compare_ops(pg, pc, p, v)]
                    t.append(abs(np.log(pc.cycles / v["total"])))
                return float(np.mean(e) + 2 * np.mean(t))

            best = objective()
            for _ in range(2):
                for key, grid in FIT_GRID.items():
                    if key not in params:
                        continue
                    for val in grid:
                        old, params[key] = params[key], val
                        o = objective()
                        if o < best - 1e-9:
                            best = o
                        else:
                            params[key] = old
            res["searched"] = dict(params)
            res["searched_error"] = fit_error(cases)[:2]
            params.clear()
            params.update(kept)
        out[acc] = res
        print(f"{acc}: {json.dumps(res)}", flush=True)
    return out


def vela_layers(data: bytes, accelerator: str) -> dict | None:
    """Vela 5.2 in-process (regor, the engine the ``vela`` CLI runs for TOSA, same default
    configs): its total cycles ("Total Cycles" of its report, the CLI's cycles_total, which is
    the sum of its per-operation cycles) and cycles per TOSA operator index (its per-layer
    table, summed over the operations derived from one operator). None if it does not compile
    every operator for the NPU."""
    v = vela_mod.vela_verdict(data, accelerator)  # also checks placement
    if not v.compiled or not all(x for x in v.on_npu.values()):
        return None
    regor, _ = vela_mod._require_vela()
    name, system, options = vela_mod._configs(accelerator)
    m = regor.compile(name, data, "TOSA", system, options=options, verbose=False)
    t = m.opt_database.tables

    def rows(table: str) -> list[dict[str, str]]:
        tb = t.get(table)
        return [] if tb is None else [dict(zip(tb.header, r, strict=False)) for r in tb.data]

    ext = {r["id"]: int(r["ext_key"]) for r in rows("source") if r.get("ext_key", "")}
    per_op: dict[int, float] = {}
    total = 0.0
    for r in rows("perf"):
        cyc = float(r["op_cycles"] or 0)
        total += cyc
        k = ext.get(r["source_id"])
        if k is not None and cyc > 0:
            per_op[k] = per_op.get(k, 0.0) + cyc
    return {"total": total, "per_op": per_op}


def owners(ops: list) -> dict[int, int]:
    """Operator index -> the index of the costed operator that carries its cost: itself, or
    (transitively) the operator whose output stage, input or view it is. Vela too books a
    fused group's cycles on one of its members, so both sides are compared per group."""
    by_out = {c.output: c.index for c in ops}
    fused = {c.index: c.fused_into for c in ops}
    out: dict[int, int] = {}
    for c in ops:
        i, seen = c.index, set()
        while fused.get(i) and i not in seen:
            seen.add(i)
            why = fused[i]
            name = why.split(" of ", 1)[1] if " of " in why else None
            if name is None or name not in by_out:
                break
            i = by_out[name]
        out[c.index] = i
    return out


def compare_ops(pg, pc, p, v: dict) -> list[tuple[int, float, float]]:
    """(owner operator index, ours, Vela) per fused group of one NPU partition."""
    own = owners(pc.ops)
    mine: dict[int, float] = {}
    for c in pc.ops:
        mine[own[c.index]] = mine.get(own[c.index], 0.0) + c.cycles
    theirs: dict[int, float] = {}
    for sub_k, cyc in v["per_op"].items():
        i = p.source_indices[sub_k]
        theirs[own.get(i, i)] = theirs.get(own.get(i, i), 0.0) + cyc
    return [(i, mine.get(i, 0.0), cyc) for i, cyc in theirs.items()]


def held_out(n: int, accelerators: list[str], seed0: int, out_json: str | None) -> int:
    """Ours / Vela on ``n`` generated networks per accelerator (tests/networks.py
    ``random_network``, seeds ``seed0 ..``: never used to set a parameter), per network and
    per operator."""

    result: dict = {"vela": "5.2.0", "seeds": [seed0, seed0 + n - 1], "accelerators": {}}
    t0 = time.time()
    for acc in accelerators:
        nets, ops, skipped = [], [], 0
        for k in range(n):
            g = networks.random_network(seed0 + k)
            pg = partition(g, acc)
            ours = estimate(pg)
            vela_total = our_total = 0.0
            ok = True
            for p, pc in zip(pg.partitions, ours.partitions):
                if get_device(p.device).kind != "npu":
                    continue
                v = vela_layers(tosa_jax.write(p.graph), acc)
                if v is None:
                    ok = False
                    break
                vela_total += v["total"]
                our_total += pc.cycles
                for i, mine, cyc in compare_ops(pg, pc, p, v):
                    ops.append({"network": seed0 + k, "op": g.main.operators[i].op,
                                "index": i, "vela": cyc, "ours": mine})
            if not ok or not vela_total:
                skipped += 1
                continue
            nets.append({"seed": seed0 + k, "ops": ours.op_count, "vela": vela_total,
                         "ours": our_total, "ratio": our_total / vela_total})
            if (k + 1) % 10 == 0:
                print(f"  {acc}: {k + 1}/{n} networks, {time.time() - t0:.0f} s", flush=True)
        ratios = np.array([x["ratio"] for x in nets])
        op_ratios = np.array([o["ours"] / o["vela"] for o in ops])
        summary = {
            "networks": len(nets), "skipped": skipped,
            "within_30pct": int(np.sum(np.abs(ratios - 1) <= 0.3)),
            "median_abs_error": float(np.median(np.abs(ratios - 1))),
            "ratio_p5_p50_p95": [float(np.percentile(ratios, q)) for q in (5, 50, 95)],
            "operators": len(ops),
            "ops_within_50pct": int(np.sum(np.abs(op_ratios - 1) <= 0.5)),
            "op_ratio_p5_p50_p95": [float(np.percentile(op_ratios, q)) for q in (5, 50, 95)],
        }
        by_op: dict[str, list[float]] = {}
        for o in ops:
            by_op.setdefault(o["op"], []).append(o["ours"] / o["vela"])
        summary["per_operator_type"] = {
            op: {"n": len(r), "median_ratio": float(np.median(r)),
                 "within_50pct": int(np.sum(np.abs(np.array(r) - 1) <= 0.5))}
            for op, r in sorted(by_op.items())}
        result["accelerators"][acc] = {"summary": summary, "networks": nets, "ops": ops}
    print(f"\nheld-out networks (random_network seeds {seed0}..{seed0 + n - 1}), ours/Vela 5.2 "
          "total cycles of the NPU partitions; per operator: Vela's per-layer cycles")
    print(f"{'accelerator':<15}{'nets':>5}{'in+-30%':>9}{'med|err|':>9}{'p5':>6}{'p50':>6}"
          f"{'p95':>6}{'ops':>6}{'op in+-50%':>11}{'op p5':>7}{'op p50':>7}{'op p95':>7}")
    for acc, r in result["accelerators"].items():
        s = r["summary"]
        q, oq = s["ratio_p5_p50_p95"], s["op_ratio_p5_p50_p95"]
        print(f"{acc:<15}{s['networks']:>5}{s['within_30pct'] / s['networks']:>9.0%}"
              f"{s['median_abs_error']:>9.1%}{q[0]:>6.2f}{q[1]:>6.2f}{q[2]:>6.2f}"
              f"{s['operators']:>6}{s['ops_within_50pct'] / s['operators']:>11.0%}"
              f"{oq[0]:>7.2f}{oq[1]:>7.2f}{oq[2]:>7.2f}")
    for acc, r in result["accelerators"].items():
        print(f"\n{acc}: per operator type (n, median ours/Vela, share within +-50%)")
        for op, d in r["summary"]["per_operator_type"].items():
            share = d["within_50pct"] / d["n"]
            print(f"  {op:<18}{d['n']:>5}{d['median_ratio']:>8.2f}{share:>8.0%}")
    print(f"{time.time() - t0:.0f} s")
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("networks", nargs="*", help=".tosa files (default: the INT8 fixtures)")
    ap.add_argument("--accelerators", nargs="+", default=list(ACCELERATORS))
    ap.add_argument("--zoo", action="store_true", help="add the INT .tosa files in .cache/zoo")
    ap.add_argument("--fit", action="store_true",
                    help="instead: the fit error of cost.VELA_FIT on the fitting set")
    ap.add_argument("--search", action="store_true",
                    help="with --fit: also search the unpublished parameters (printed)")
    ap.add_argument("--no-synthetic", action="store_true",
                    help="leave out the GraphBuilder networks of tests/networks.py")
    ap.add_argument("--mixed", action="store_true",
                    help="also place TABLE, pools and REDUCE_MAX on the CPU (more partitions)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--held-out", type=int, default=0, metavar="N",
                    help="instead: N generated networks per accelerator (never fitted to), "
                         "ours/Vela per network and per operator")
    ap.add_argument("--seed0", type=int, default=100_000,
                    help="first random_network seed of --held-out")
    ap.add_argument("--keep", help="keep the partitions and Vela's output in this directory")
    args = ap.parse_args(argv)
    if args.held_out:
        return held_out(args.held_out, args.accelerators, args.seed0, args.json)
    if args.fit:
        fitted = fit_vela(args.accelerators, args.search)
        if args.json:
            Path(args.json).write_text(json.dumps(fitted, indent=1))
        return 0
    # (name, graph, kind)
    nets = [(Path(n).stem, tosa_jax.read(Path(n).read_bytes()), "file") for n in args.networks]
    if not args.networks:
        nets = [(n, tosa_jax.read((FIXTURES / f"{n}.tosa").read_bytes()), "fixture")
                for n in NETWORKS]
        if not args.no_synthetic:

            nets += [(n, make(), "synthetic") for n, make in networks.NETWORKS.items()]
    if args.zoo:
        nets += [(p.stem, tosa_jax.read(p.read_bytes()), "zoo")
                 for p in sorted((CACHE / "zoo").rglob("*.tosa"))
                 if "int" in p.stem.lower()]
    policies = {"default": None}
    if args.mixed:
        # also a placement with every TABLE and pool on the CPU: more, smaller NPU partitions
        policies["mixed"] = {"TABLE": "cpu", "AVG_POOL2D": "cpu", "MAX_POOL2D": "cpu",
                             "REDUCE_MAX": "cpu"}
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vela_cycles_"))
    rows: list[dict] = []
    refusals = 0
    t0 = time.time()
    for (stem, graph, kind), acc, (pol_name, policy) in (
            (n, a, p) for n in nets for a in args.accelerators for p in policies.items()):
        if True:
            pg = partition(graph, acc, policy)
            d = work / f"{stem}_{acc}_{pol_name}"
            paths = pg.write(d, stem=stem)
            ours = estimate(pg)
            for p, path, pc in zip(pg.partitions, paths, ours.partitions):
                if get_device(p.device).kind != "npu":
                    continue
                v = run_vela(path, acc, d / f"vela_{p.index}")
                refusals += bool(v.get("refused"))
                row = {"network": stem, "accelerator": acc, "policy": pol_name,
                       "kind": kind, "partition": p.index,
                       "ops": len(p.op_indices), "ours_cycles": round(pc.cycles),
                       "vela_cycles": v.get("cycles_total"), "ours_macs": pc.macs,
                       "vela_macs": v.get("nn_macs"), "compiled": v["compiled"],
                       "refused": bool(v.get("refused")), "vela_command": v["command"]}
                if not v["compiled"]:
                    row["error"] = v.get("error")
                if v.get("cycles_total"):
                    row["ratio"] = round(pc.cycles / v["cycles_total"], 3)
                rows.append(row)
    print(f"{'network':<16}{'accelerator':<15}{'policy':<8}{'part':>5}{'ops':>5}{'ours':>10}"
          f"{'vela':>10}{'ratio':>7}  {'compiled':<9}kind")
    for r in rows:
        vc = f"{r['vela_cycles']:.0f}" if r["vela_cycles"] else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        print(f"{r['network']:<16}{r['accelerator']:<15}{r['policy']:<8}{r['partition']:>5}"
              f"{r['ops']:>5}{r['ours_cycles']:>10}{vc:>10}{ratio:>7}  "
              f"{'yes' if r['compiled'] and not r['refused'] else 'REFUSED':<9}"
              f"{r['kind']}")
    summary = {}
    for key in dict.fromkeys(r["kind"] for r in rows):
        sel = [r for r in rows if r["kind"] == key]
        ratios = [r["ratio"] for r in sel if "ratio" in r]
        within = sum(0.7 <= x <= 1.3 for x in ratios)
        summary[key] = {"compared": len(ratios), "within_30pct": within,
                        "median_ratio": float(np.median(ratios)) if ratios else None}
        print(f"{key:>9}: {within}/{len(ratios)} NPU partitions within +-30% of Vela"
              + (f", median ours/Vela {np.median(ratios):.2f}, range "
                 f"{min(ratios):.2f}..{max(ratios):.2f}" if ratios else ""))
    print(f"NPU partitions compiled: {len(rows)}, Vela refusals: {refusals}, "
          f"{time.time() - t0:.1f} s; files in {work}")
    result = {"vela": "5.2.0", "rows": rows, "refusals": refusals, "summary": summary}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if refusals == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
