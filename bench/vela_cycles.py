"""Our NPU cycle estimates against Vela 5.2's, per NPU partition.

For each network x accelerator: partition the graph (``tosa_jax.hw_models.partition``), write every
NPU partition as a .tosa file, compile it with the Vela CLI (``vela --accelerator-config ACC
--verbose-performance``), count refusals (a partition Vela does not compile, or compiles with
operators left on the CPU), and put our estimated cycles beside Vela's ``cycles_total`` (its
summary CSV). Prints a table and writes JSON.

    python bench/vela_cycles.py [--json vela_cycles.json] [--zoo] [--fit] [NET.tosa ...]

``--fit`` also fits the NPU cost parameters (``cost.NPU_PARAMS`` per family and operator class)
to Vela's per-layer cycles and partition totals, prints them (for pasting into
hw_models/cost.py) and says how well they do in sample and leaving one network out. Defaults:
the INT8 fixture networks and the GraphBuilder networks of tests/tj_hw_graphs.py (``--zoo`` adds
the INT8 zoo networks, ``--mixed`` a second placement that splits each network more), on
ethos-u55-128, ethos-u65-256 and ethos-u85-256.
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
from tosa_jax.hw_models import cost as costmod
from tosa_jax.hw_models import estimate, get_device, partition

import tosa_jax

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
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


def _nnls(a: np.ndarray, b: np.ndarray, iters: int = 500) -> np.ndarray:
    """Non-negative least squares (Lawson-Hanson active set), numpy only."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, bool)
    for _ in range(iters):
        w = a.T @ (b - a @ x)
        if passive.all() or (w[~passive] <= 1e-12).all():
            break
        j = np.argmax(np.where(passive, -np.inf, w))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
    return x


NPARAM = 5
TOTAL_WEIGHT = 12.0  # a partition total counts as much as this many per-layer samples


def fit(records: list[dict]) -> dict[str, dict[str, tuple[float, ...]]]:
    """NPU parameters per family: one non-negative least-squares fit of the relative error, on
    both Vela's per-layer cycles (an operator at a time) and its partition totals (which also
    hold what Vela adds that we do not model one by one). Terms no sample uses keep the
    defaults."""
    out: dict[str, dict[str, tuple[float, ...]]] = {}
    for family in sorted({r["family"] for r in records}):
        recs = [r for r in records if r["family"] == family]
        classes = sorted({c for r in recs for c, _, _ in r["ops"]})
        col = {c: k * NPARAM for k, c in enumerate(classes)}
        size = len(classes) * NPARAM + 1  # the last column: a per-partition overhead (off)
        rows_a, rows_b = [], []
        for r in recs:
            for c, feats, y in r["rows"]:
                v = np.zeros(size)
                v[col[c]:col[c] + NPARAM] = np.array(feats) / y
                rows_a.append(v)
                rows_b.append(1.0)
            v = np.zeros(size)
            for c, feats, _ in r["ops"]:
                v[col[c]:col[c] + NPARAM] += np.array(feats) / r["vela"]
            # no per-partition term: what a tiny partition costs Vela (a few hundred cycles)
            # says it is small, and a fitted one only soaks up the big networks' misfit
            v[-1] = 0.0
            rows_a.append(TOTAL_WEIGHT * v)  # the totals are what we are judged on
            rows_b.append(TOTAL_WEIGHT)
        a, b = np.array(rows_a), np.array(rows_b)
        theta = _nnls(a, b)
        used = np.abs(a).sum(axis=0) > 0
        fam: dict[str, tuple[float, ...]] = {}
        for c in classes:
            default = costmod.DEFAULT_NPU.get(c, (1.0, 1.0, 1.0, 0.0, 100.0))
            fam[c] = tuple(round(float(theta[col[c] + j]), 4) if used[col[c] + j]
                           else default[j] for j in range(NPARAM))
        fam["partition"] = (0.0,)
        out[family] = fam
    return out


def predict(record: dict, params: dict) -> float:
    """Our total for a partition record under ``params`` (the max with memory included)."""
    fam = params.get(record["family"], {})
    total = fam.get("partition", (0.0,))[0]
    for c, feats, mem in record["ops"]:
        theta = fam.get(c, costmod.DEFAULT_NPU.get(c, (1.0, 1.0, 1.0, 0.0, 100.0)))
        total += max(float(np.dot(feats, theta)), mem)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("networks", nargs="*", help=".tosa files (default: the INT8 fixtures)")
    ap.add_argument("--accelerators", nargs="+", default=list(ACCELERATORS))
    ap.add_argument("--zoo", action="store_true", help="add the INT .tosa files in .cache/zoo")
    ap.add_argument("--fit", action="store_true", help="fit and print cost.NPU_PARAMS")
    ap.add_argument("--no-synthetic", action="store_true",
                    help="leave out the GraphBuilder networks of tests/tj_hw_graphs.py")
    ap.add_argument("--mixed", action="store_true",
                    help="also place TABLE, pools and REDUCE_MAX on the CPU (more partitions)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="keep the partitions and Vela's output in this directory")
    args = ap.parse_args(argv)
    # (name, graph, kind)
    nets = [(Path(n).stem, tosa_jax.read(Path(n).read_bytes()), "file") for n in args.networks]
    if not args.networks:
        nets = [(n, tosa_jax.read((FIXTURES / f"{n}.tosa").read_bytes()), "fixture")
                for n in NETWORKS]
        if not args.no_synthetic:
            sys.path.insert(0, str(ROOT / "tests"))
            import tj_hw_graphs

            nets += [(n, make(), "synthetic") for n, make in tj_hw_graphs.NETWORKS.items()]
    if args.zoo:
        nets += [(p.stem, tosa_jax.read(p.read_bytes()), "zoo")
                 for p in sorted((ROOT / ".cache" / "zoo").rglob("*.tosa"))
                 if "int" in p.stem.lower()]
    policies = {"default": None}
    if args.mixed:
        # also a placement with every TABLE and pool on the CPU: more, smaller NPU partitions
        policies["mixed"] = {"TABLE": "cpu", "AVG_POOL2D": "cpu", "MAX_POOL2D": "cpu",
                             "REDUCE_MAX": "cpu"}
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vela_cycles_"))
    rows: list[dict] = []
    records: list[dict] = []
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
                if v.get("cycles_total"):
                    fam = get_device(acc).family
                    rec = {"network": stem, "family": fam, "vela": v["cycles_total"],
                           "ops": [(c.op_class, costmod.npu_features(c), c.memory_cycles)
                                   for c in pc.ops if c.fused_into is None], "rows": []}
                    vela_by: dict[str, float] = {}
                    for lay in v.get("layers", []):
                        key = _base(lay["name"])
                        vela_by[key] = vela_by.get(key, 0.0) + lay["cycles"]
                    for names, c in groups(pc.ops):
                        name = next((n for n in names if n in vela_by), None)
                        if name is not None and vela_by[name] > 0:
                            rec["rows"].append((c.op_class, costmod.npu_features(c),
                                                vela_by.pop(name)))
                    records.append(rec)
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
    if args.fit:
        # leave one network out: fit on the others, predict it (what a new network would see)
        loo = []
        for net in sorted({r["network"] for r in records}):
            params = fit([r for r in records if r["network"] != net])
            loo += [predict(r, params) / r["vela"] for r in records if r["network"] == net]
        params = fit(records)
        own = [predict(r, params) / r["vela"] for r in records]
        for key, ratios in (("fit, in sample", own), ("leave one network out", loo)):
            within = sum(0.7 <= x <= 1.3 for x in ratios)
            print(f"{key}: {within}/{len(ratios)} partitions within +-30%, median "
                  f"{np.median(ratios):.2f}, range {min(ratios):.2f}..{max(ratios):.2f}")
            result[key.replace(" ", "_").replace(",", "")] = {
                "within_30pct": within, "compared": len(ratios),
                "median_ratio": float(np.median(ratios))}
        result["fitted_params"] = params
        print("NPU_PARAMS = " + json.dumps(params))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if refusals == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
