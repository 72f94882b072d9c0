"""TOSA flatbuffer -> TOSA MLIR -> TOSA flatbuffer (tosa-opt, ``tosa_jax.convert``) over the
CI conformance slice (or any test directories): does the round trip keep every graph?

    python bench/mlir_roundtrip.py [--tests DIR] [--run all|changed|none] [--ref] [-k SUBSTR]

For each ``test.tosa``: the round trip through MLIR text, then

* the graphs compared structure for structure (``same_graph``): version (major.minor: tosa-opt
  writes 1.0.0 or 1.1.0-draft, so a 1.0.2-draft stamp comes back 1.0.0), regions, blocks,
  interface names, operators in order with their attributes, and every tensor's shape, type,
  constant data and variable flags (intermediate tensor names may change: tosa-opt renames
  them; they are matched by position);
* ``--run changed`` (default) runs tosa_jax on both graphs with the test's own inputs where the
  structure differs, ``--run all`` everywhere: outputs must be bit-identical (NaN equal NaN);
* ``--ref``: the TOSA reference model on both graphs too (in process), which must agree.

The slice is ``.cache/conformance`` (made by tests/conformance/test_conformance_slice.py).
Prints one line per failure and the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tosa_jax.testing import CACHE


def same_graph(g0: Any, g1: Any) -> str | None:
    """None when two Graphs are the same up to intermediate tensor names, else the first
    difference."""
    if g0.version[:2] != g1.version[:2]:  # tosa-opt stamps 1.0.0 or 1.1.0 draft, no patch
        return f"version {g0.version} != {g1.version}"
    if len(g0.regions) != len(g1.regions):
        return f"{len(g0.regions)} regions != {len(g1.regions)}"
    for r0, r1 in zip(g0.regions, g1.regions):
        if len(r0.blocks) != len(r1.blocks):
            return f"region {r0.name}: {len(r0.blocks)} blocks != {len(r1.blocks)}"
        for b0, b1 in zip(r0.blocks, r1.blocks):
            where = f"region {r0.name} block {b0.name}"
            if (b0.inputs, b0.outputs) != (b1.inputs, b1.outputs) and r0 is g0.regions[0]:
                return f"{where}: interface {b0.inputs}->{b0.outputs} != {b1.inputs}->{b1.outputs}"
            if len(b0.operators) != len(b1.operators):
                return f"{where}: {len(b0.operators)} operators != {len(b1.operators)}"
            names = dict(zip(b0.inputs, b1.inputs))
            for i, (o0, o1) in enumerate(zip(b0.operators, b1.operators)):
                if o0.op != o1.op or repr(o0.attrs) != repr(o1.attrs):
                    return f"{where} op {i}: {o0.op} {o0.attrs} != {o1.op} {o1.attrs}"
                if len(o0.inputs) != len(o1.inputs) or len(o0.outputs) != len(o1.outputs):
                    return f"{where} op {i} {o0.op}: operand counts differ"
                for t0, t1 in zip(o0.inputs, o1.inputs):
                    if names.setdefault(t0, t1) != t1:
                        return f"{where} op {i} {o0.op}: input {t0} wired differently"
                names.update(zip(o0.outputs, o1.outputs))
            for t0, t1 in names.items():
                a, b = b0.tensors.get(t0), b1.tensors.get(t1)
                if a is None or b is None:
                    continue  # a name of an enclosing block (control flow)
                if not _same_tensor(a, b):
                    return (f"{where}: tensor {t0} {a.shape} {a.dtype} != {t1} {b.shape} "
                            f"{b.dtype} (or its data or variable flags)")
    return None


def _same_tensor(a: Any, b: Any) -> bool:
    if (a.shape, a.dtype, a.variable) != (b.shape, b.dtype, b.variable):
        return False
    if a.variable and a.variable_key != b.variable_key:
        return False
    if (a.data is None) != (b.data is None):
        return False
    return a.data is None or (a.data.dtype == b.data.dtype and np.array_equal(
        a.data, b.data, equal_nan=a.data.dtype.kind == "f"))


def test_inputs(test_dir: Path, model: Any) -> dict[str, np.ndarray]:
    """The conformance test's inputs, as tosa_jax takes them (the SUT's conversion)."""
    from tosa_jax.testing import conformance_sut as sut
    desc = json.loads((test_dir / "desc.json").read_text())
    types = {s.name: sut._tosa_dtype_name(s) for s in model.inputs}
    return {n: sut._convert_input(n, np.load(test_dir / f), types.get(n, ""))
            for n, f in zip(desc["ifm_name"], desc["ifm_file"])}


def same_outputs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> str | None:
    for name, x in a.items():
        y = b.get(name)
        if y is None:
            return f"output {name} missing"
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"output {name}: {x.dtype}{x.shape} != {y.dtype}{y.shape}"
        if x.dtype.kind == "V" or str(x.dtype) in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            x, y = x.view(f"u{x.dtype.itemsize}"), y.view(f"u{y.dtype.itemsize}")
        if not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return f"output {name} differs"
    return None


def reference_same(t0: bytes, t1: bytes, test_dir: Path) -> str | None:
    import tosa_reference_model as ref

    desc = json.loads((test_dir / "desc.json").read_text())
    inputs = [np.load(test_dir / f) for f in desc["ifm_file"]]
    try:
        o0, s0 = ref.run(t0, inputs)
    except ValueError:  # inputs the binding does not take (raw bf16/fp8 files, say)
        return None
    o1, s1 = ref.run(t1, inputs)
    if s0 != s1:
        return f"reference model status {s0} != {s1}"
    for a, b in zip(o0, o1):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind == "V":
            a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            return "reference model outputs differ"
    return None


def round_trip(test_dir: Path, run: str, ref: bool) -> tuple[str, str | None]:
    """("same" | "ran" | error kind, detail) for one test directory."""
    import tosa_jax

    original = (test_dir / "test.tosa").read_bytes()
    try:
        text = tosa_jax.convert(original, "mlir", progress=False)
        back = tosa_jax.convert(text, "tosa", progress=False)
    except tosa_jax.TosaError as e:
        return "convert-failed", f"{type(e).__name__}: {str(e)[:300]}"
    g0, g1 = tosa_jax.read(original), tosa_jax.read(back)
    diff = same_graph(g0, g1)
    if ref:
        bad = reference_same(original, back, test_dir)
        if bad:
            return "reference-differs", bad
    if run == "all" or (run == "changed" and diff):
        m0, m1 = tosa_jax.load(g0), tosa_jax.load(g1)
        inputs = test_inputs(test_dir, m0)
        bad = same_outputs(m0.run(inputs), m1.run(inputs))
        if bad:
            return "outputs-differ", f"{bad} (structure: {diff})"
        return ("ran-changed" if diff else "ran-same"), diff
    return ("structure-differs", diff) if diff else ("same", None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=Path, default=CACHE / "conformance")
    ap.add_argument("--run", choices=["all", "changed", "none"], default="changed")
    ap.add_argument("--ref", action="store_true", help="the reference model on both graphs too")
    ap.add_argument("-k", help="only tests whose path contains this")
    args = ap.parse_args()
    tests = sorted(p.parent for p in args.tests.rglob("desc.json"))
    tests = [t for t in tests if not args.k or args.k in str(t)]
    tests = [t for t in tests
             if not json.loads((t / "desc.json").read_text()).get("expected_failure")]
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for i, t in enumerate(tests):
        kind, detail = round_trip(t, args.run, args.ref)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in ("same", "ran-same", "ran-changed"):
            print(f"{kind}: {t.name}: {detail}", flush=True)
        if (i + 1) % 50 == 0:
            print(f"... {i + 1}/{len(tests)} in {time.perf_counter() - t0:.0f} s: {counts}",
                  file=sys.stderr, flush=True)
    print(f"{len(tests)} tests in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
