"""The benchmark model zoo: seeded INT8 and FP32 TOSA graphs of common network kinds, exported
by bench/export_models.py (ExecuTorch Arm backend) and cached, not committed.

    /work/venv/bin/python bench/zoo.py            # export what is missing/stale, then check all
    /work/venv/bin/python bench/zoo.py --no-check # only make sure the files exist

``ensure_zoo()`` returns the files per model, (re)exporting a model when any of its files is
missing or its stamp (the SHA-256 of export_models.py) differs. The exporter runs in its own
virtualenv: ``$TOSA_JAX_ET_PYTHON`` (default: this interpreter), with tosa_jax and its torch
extra installed (torch 2.13, executorch 1.5.1; see export_models.py). The cache directory
defaults to REPO/.cache/zoo (git-ignored), or ``$TOSA_JAX_ZOO_DIR``.

The check (``main``) loads every graph in tosa_jax and compares it with oracles: INT8 graphs
against the TOSA reference model on the seeded input (bit-identical, jax_enable_x64 off and on);
FP32 graphs against PyTorch's output and the reference model's FP32 run (max |diff|).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPORTER = REPO / "bench" / "export_models.py"
DEFAULT_CACHE = REPO / ".cache" / "zoo"
# The exporter uses tosa_jax.export_torch: an env with tosa_jax and its torch extra installed
# (pip install -e '.[torch]'); by default the one running this script.
DEFAULT_ET_PYTHON = sys.executable
# Quickest export first (the order of export_models.ZOO, which needs torch to import).
ZOO = ["bert_tiny", "unet", "resnet", "mobilenetv2", "lstm"]


def zoo_files(cache_dir: Path, name: str) -> dict[str, Path]:
    """The files the exporter writes for one zoo model."""
    return {
        "int8": cache_dir / f"{name}_int8.tosa",
        "int8_input": cache_dir / f"{name}_int8.input.npy",
        "fp32": cache_dir / f"{name}_fp32.tosa",
        "fp32_input": cache_dir / f"{name}_fp32.input.npy",
        "fp32_torch": cache_dir / f"{name}_fp32.torch.npy",
    }


def exporter_stamp() -> str:
    """SHA-256 of export_models.py: a cached export is stale when the exporter changed."""
    return hashlib.sha256(EXPORTER.read_bytes()).hexdigest()


def _fresh(cache_dir: Path, name: str, stamp: str) -> bool:
    s = cache_dir / f"{name}.stamp"
    return (s.exists() and s.read_text().strip() == stamp
            and all(p.exists() for p in zoo_files(cache_dir, name).values()))


def ensure_zoo(cache_dir: str | os.PathLike | None = None, names: list[str] | None = None,
               python: str | None = None, verbose: bool = True) -> dict[str, dict[str, Path]]:
    """Make sure the zoo graphs exist in ``cache_dir``; returns {name: {kind: path}} with kinds
    int8, int8_input, fp32, fp32_input, fp32_torch. Missing or stale models are exported one by
    one (each takes seconds to minutes); a failed export raises RuntimeError with its log."""
    cache = Path(cache_dir or os.environ.get("TOSA_JAX_ZOO_DIR") or DEFAULT_CACHE)
    names = list(names or ZOO)
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        raise ValueError(f"unknown zoo models {unknown}; known: {ZOO}")
    cache.mkdir(parents=True, exist_ok=True)
    stamp = exporter_stamp()
    exe = python or os.environ.get("TOSA_JAX_ET_PYTHON", DEFAULT_ET_PYTHON)
    for name in names:
        if _fresh(cache, name, stamp):
            continue
        if not Path(exe).exists():
            raise RuntimeError(f"zoo model {name!r} must be exported, but the ExecuTorch python "
                               f"{exe!r} does not exist: set TOSA_JAX_ET_PYTHON")
        (cache / f"{name}.stamp").unlink(missing_ok=True)
        if verbose:
            print(f"exporting zoo model {name} into {cache} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([exe, str(EXPORTER), "--zoo", "--models", name, "--out", str(cache)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"exporting {name} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        (cache / f"{name}.stamp").write_text(stamp + "\n")
        if verbose:
            print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return {n: zoo_files(cache, n) for n in names}


def check_model(name: str, files: dict[str, Path]) -> dict:
    """Load both graphs in tosa_jax and compare them with the reference model (and PyTorch)."""
    import jax
    import numpy as np

    import tosa_jax
    from tosa_jax.testing.reference import run_reference, run_reference_fp

    row: dict = {"model": name}
    for kind in ("int8", "fp32"):
        path = files[kind]
        graph = tosa_jax.read(path.read_bytes())
        ops = Counter(op.op for b in graph.regions[0].blocks for op in b.operators)
        t0 = time.perf_counter()
        model = tosa_jax.load(path)
        x = np.load(files[f"{kind}_input"])
        inp, outs = model.inputs[0].name, [o.name for o in model.outputs]
        row[kind] = info = {
            "bytes": path.stat().st_size, "operators": sum(ops.values()),
            "op_counts": dict(sorted(ops.items())),
            "input": [list(model.inputs[0].shape), model.inputs[0].dtype],
        }
        try:
            got = model.run({inp: x})
            info["tosa_jax_first_run_s"] = round(time.perf_counter() - t0, 2)
        except Exception as e:  # report, do not stop the other models
            info["error"] = f"{type(e).__name__}: {e}"
            continue
        t0 = time.perf_counter()
        if kind == "int8":
            ref = run_reference(path, {inp: x}, outs)
            info["reference_s"] = round(time.perf_counter() - t0, 2)
            with jax.enable_x64(True):
                got64 = tosa_jax.load(path).run({inp: x})
            info["exact_vs_reference"] = all(
                got[o].dtype == ref[o].dtype and np.array_equal(got[o], ref[o])
                and np.array_equal(got64[o], ref[o]) for o in outs)
            info["mismatches"] = int(sum(np.sum(got[o] != ref[o]) for o in outs))
            # A degenerate export (all outputs one value) would make "exact" say little.
            info["distinct_output_values"] = int(len(np.unique(ref[outs[0]])))
        else:
            ref = run_reference_fp(path, {inp: x}, outs, precise=False)
            info["reference_s"] = round(time.perf_counter() - t0, 2)
            want = np.load(files["fp32_torch"]).astype(np.float64)
            o = outs[0]
            tj = got[o].astype(np.float64)
            info["max_abs_vs_torch"] = float(np.max(np.abs(tj - want)))
            info["max_abs_vs_reference"] = float(np.max(np.abs(tj - ref[o])))
            info["reference_vs_torch"] = float(np.max(np.abs(ref[o] - want)))
            info["max_abs_torch_output"] = float(np.max(np.abs(want)))
    return row


def main() -> None:
    """Export the zoo if needed, then check every model and print a table (and JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None, help=f"default {DEFAULT_CACHE}")
    ap.add_argument("--models", nargs="+", choices=ZOO, default=ZOO)
    ap.add_argument("--no-check", action="store_true", help="only export what is missing")
    ap.add_argument("--json", type=Path, help="write the check results here")
    args = ap.parse_args()
    zoo = ensure_zoo(args.cache, args.models)
    if args.no_check:
        for name, files in zoo.items():
            print(name, *(str(p) for p in files.values()))
        return
    rows = []
    for name, files in zoo.items():
        row = check_model(name, files)
        rows.append(row)
        i, f = row["int8"], row["fp32"]
        print(f"{name:12} INT8 {i['bytes'] / 1e6:7.2f} MB {i['operators']:4d} ops "
              f"exact={i.get('exact_vs_reference', i.get('error'))} | FP32 {f['bytes'] / 1e6:7.2f} "
              f"MB {f['operators']:4d} ops vs torch {f.get('max_abs_vs_torch', f.get('error'))} "
              f"vs ref {f.get('max_abs_vs_reference', '-')}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
