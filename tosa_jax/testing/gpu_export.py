"""Every graph exported for the CUDA and ROCm platforms on a machine without a GPU, and its
StableHLO checked for what would tie integer exactness to the CPU.

    python bench/gpu_export.py                          # fixtures, zoo (if exported), CI slices
    python bench/gpu_export.py --sources fixtures slice --sample 25 --x64 --json out.json

``jax.export`` lowers a jitted function for a named platform without its hardware. For each graph
(``model.fn``, or ``model.fn_with_state`` for a graph with variables) and platform, a
single-platform export; the exported module is serialized (a shippable artifact) and scanned:

* **same as CPU**: whether the serialized StableHLO is byte-identical to the CPU export's
  (reported). Graphs with integer contractions or FP8 convolutions differ: those lower per
  backend (``lowering.numerics.on_cpu_else``), because XLA's GPU backend (H200, jax 0.11.2)
  compiles no integer convolution of TOSA's (cuDNN takes int8 ones with an int8 or f32 result
  only), summed int8 x int8 -> int32 products of short contractions wrong, and aborted on an
  FP8 convolution. Off the CPU, 8-bit integer contractions are exact BF16 x BF16 -> F32
  products (``numerics.exact_bf16_dot``), wider ones int32 x int32.
* **64-bit types**: i64/ui64/f64 (or complex) element types of values (not of attributes such as
  reduce_window's padding) anywhere in the module. TOSA's INT48
  and the 64-bit steps of RESCALE are carried as 32-bit pairs (``numerics.Wide``), so none may
  appear, with ``jax_enable_x64`` off or on.
* **custom calls**: every target. A CPU-only one (LAPACK, DUCC, host callbacks) fails the graph;
  others are reported.
* **integer convolutions and dots** (``stablehlo.convolution``/``dot_general`` on integer
  operands), and **FP8 convolutions** (a convolution of values converted from an FP8 type):
  counted; in a GPU export any integer convolution, integer dot of other than int32 operands or
  FP8 convolution fails the graph (the forms above; ``scripts/gpu_check.sh`` shows on a GPU that
  what remains is exact).
* **BF16 dots** (BF16 operands, F32 result: the exact form of 8-bit integer products) counted.
* **float contractions below HIGHEST precision** (other than BF16 dots): on a GPU, DEFAULT
  precision lets XLA use TF32 (FP32 inputs rounded to 10 mantissa bits); reported.

Exit status 1 when a graph fails to export or fails a check (64-bit type, CPU-only call).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tosa_jax.testing import CACHE, FIXTURES

ZOO_DIR = Path(os.environ.get("TOSA_JAX_ZOO_DIR") or CACHE / "zoo")
PLATFORMS = ("cuda", "rocm")
SLICES = {"slice": "1.0.2", "slice-1.1": "1.1.0-draft"}  # source name: the slice's TOSA version

_TENSOR = r"tensor<[^>]*>"
# an attribute's typed value (reduce_window's padding is dense<...> : tensor<4x2xi64>): not data
DENSE_ATTRIBUTE = re.compile(r"\b(?!value\b)[\w.]+ = dense<[^>]*> : tensor<[^>]*>")
WIDE_TYPE = re.compile(r"tensor<(?:[0-9?]+x)*((?:ui|i|f)64|complex<f(?:32|64)>)>")
CUSTOM_CALL = re.compile(r'(?:call_target_name = "|stablehlo\.custom_call @)([\w$.\-]+)')
CONTRACTION = re.compile(rf"stablehlo\.(convolution|dot_general)\b.*: \(({_TENSOR}), "
                         rf"({_TENSOR})\) -> ({_TENSOR})")
GROUPS = re.compile(r"feature_group_count = (\d+)")
FROM_F8 = re.compile(r"(%[\w#]+) = stablehlo\.convert (%[\w#]+) : \(tensor<[^>]*xf8[^>]*>\)")
CONV_OPERANDS = re.compile(r"stablehlo\.convolution\((%[\w#]+), (%[\w#]+)\)")
CPU_ONLY_CALL = re.compile(r"lapack|ducc|cpu|host_callback|pocketfft", re.IGNORECASE)


def element_type(tensor_type: str) -> str:
    """'tensor<1x3x8xi8>' -> 'i8'."""
    return tensor_type[len("tensor<"):-1].split("x")[-1]


def _is_int(t: str) -> bool:
    return t.startswith(("i", "ui")) and t != "i1"


@dataclass
class Scan:
    """What one exported module holds (see the module docstring)."""

    lines: int = 0
    wide_types: dict[str, int] = field(default_factory=dict)
    custom_calls: dict[str, int] = field(default_factory=dict)
    int_convolutions: dict[str, int] = field(default_factory=dict)
    int_dots: dict[str, int] = field(default_factory=dict)
    fp8_convolutions: int = 0
    bf16_dots: int = 0
    float_below_highest: int = 0
    platform: str = "cpu"

    @property
    def cpu_only_calls(self) -> list[str]:
        return sorted(c for c in self.custom_calls if CPU_ONLY_CALL.search(c))

    def problems(self) -> list[str]:
        out = []
        if self.wide_types:
            out.append(f"64-bit types {self.wide_types}")
        if self.cpu_only_calls:
            out.append(f"CPU-only custom calls {self.cpu_only_calls}")
        if self.platform != "cpu":  # what XLA's GPU backend cannot compile, or compiles wrong
            if self.int_convolutions:
                out.append(f"integer convolutions {self.int_convolutions}")
            narrow = {k: n for k, n in self.int_dots.items() if not k.startswith("i32,i32->")}
            if narrow:
                out.append(f"integer dots of narrow operands {narrow}")
            if self.fp8_convolutions:
                out.append(f"{self.fp8_convolutions} FP8 convolutions")
        return out


def scan(text: str, platform: str = "cpu") -> Scan:
    """Scan a StableHLO module's text, exported for ``platform``."""
    s = Scan(lines=text.count("\n"), platform=platform)
    from_f8 = {m.group(1) for m in FROM_F8.finditer(text)}
    s.fp8_convolutions = sum(1 for m in CONV_OPERANDS.finditer(text)
                             if from_f8.intersection(m.groups()))
    values = DENSE_ATTRIBUTE.sub("", text)
    s.wide_types = dict(Counter(m.group(1) for m in WIDE_TYPE.finditer(values)))
    s.custom_calls = dict(Counter(CUSTOM_CALL.findall(text)))
    convs: Counter[str] = Counter()
    dots: Counter[str] = Counter()
    for line in text.splitlines():
        m = CONTRACTION.search(line)
        if not m:
            continue
        op, lhs, rhs, out = m.group(1), *(element_type(t) for t in m.groups()[1:])
        if _is_int(lhs) or _is_int(rhs):
            groups = GROUPS.search(line) if op == "convolution" else None
            grouped = "" if groups is None or groups.group(1) == "1" else " grouped"
            (convs if op == "convolution" else dots)[f"{lhs},{rhs}->{out}{grouped}"] += 1
        elif op == "dot_general" and lhs == rhs == "bf16" and out == "f32":
            s.bf16_dots += 1
        elif "HIGHEST" not in line:
            s.float_below_highest += 1
    s.int_convolutions, s.int_dots = dict(convs), dict(dots)
    return s


def arg_specs(model: Any) -> list[Any]:
    """Abstract arguments of the model's pure function (state first for stateful graphs)."""
    import jax
    import numpy as np

    from tosa_jax.ir import BlockScaled, host_to_value
    from tosa_jax.model import TensorSpec

    def abstract(spec: Any) -> Any:
        value = host_to_value(np.zeros(spec.shape, spec.np_dtype), spec.dtype)
        if spec.block_size:  # a block-scaled input: (values, scales)
            scales = TensorSpec(spec.name, spec.scale_shape, spec.scale_dtype or "")
            value = BlockScaled(value, host_to_value(np.zeros(scales.shape, scales.np_dtype),
                                                     scales.dtype))
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), value)

    args = [abstract(s) for s in model.inputs]
    if model.variables:
        args.insert(0, {v.name: abstract(v) for v in model.variables})
    return args


def export(model: Any, platforms: Iterable[str]) -> Any:
    """``jax.export.Exported`` of the model's pure function for ``platforms``."""
    import jax

    fn = model.fn_with_state if model.variables else model.fn
    return jax.export.export(jax.jit(fn), platforms=list(platforms))(*arg_specs(model))


@dataclass
class GraphResult:
    graph: str
    source: str
    operators: int = 0
    error: str | None = None  # loading the graph (or exporting it for the CPU) failed
    seconds: float = 0.0
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and all(p.get("ok") for p in self.platforms.values())


def check_graph(path: Path, source: str, platforms: Iterable[str] = PLATFORMS) -> GraphResult:
    """Load one graph, export it for the CPU and each platform, and scan each export."""
    import tosa_jax

    r = GraphResult(str(path), source)
    t0 = time.perf_counter()
    try:
        model = tosa_jax.load(path)
        r.operators = len(model.graph.main.operators)
    except Exception as e:  # noqa: BLE001 -- a report per graph, never a stop
        r.error = f"{type(e).__name__}: {e}"[:600]
        r.seconds = time.perf_counter() - t0
        return r
    cpu = None
    for p in ("cpu", *platforms):  # one call site: the modules' source locations agree
        entry: dict[str, Any] = {"ok": False}
        try:
            exp = export(model, [p])
            module = exp.mlir_module_serialized
            if p == "cpu":
                cpu = module
                continue
            entry["serialized_bytes"] = len(exp.serialize())
            entry["same_as_cpu"] = module == cpu
            found = scan(exp.mlir_module(), p)
            entry.update(asdict(found), problems=found.problems())
            entry["ok"] = not entry["problems"]
        except Exception as e:  # noqa: BLE001
            if p == "cpu":
                r.error = f"CPU export: {type(e).__name__}: {e}"[:600]
                continue
            entry["error"] = f"{type(e).__name__}: {e}"[:600]
        r.platforms[p] = entry
    r.seconds = time.perf_counter() - t0
    return r


def slice_tests(jobs: int = 2, version: str = "1.0.2") -> list[Path]:
    """A CI conformance slice's test.tosa files, TOSA 1.0.2's or 1.1.0-draft's (generated into
    .cache/conformance once)."""
    from tosa_jax.testing import conformance as conf

    root = conf.cached_slice(conf.CI_CACHE, conf.CI_SELECTIONS[version], jobs)
    return [t / "test.tosa" for t in conf.find_tests(root)]


def sample(items: list[Path], every: int) -> list[Path]:
    """Every ``every``-th item (deterministic), the first included."""
    return items[::max(every, 1)]


def graphs(sources: Iterable[str], every: int = 1, jobs: int = 2,
           paths: Iterable[Path] = ()) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for p in paths:  # any graphs, or directories searched for *.tosa
        out += [(g, "paths") for g in (sorted(p.rglob("*.tosa")) if p.is_dir() else [p])]
    for src in sources:
        if src == "fixtures":
            out += [(p, src) for p in sorted(FIXTURES.glob("*.tosa"))]
        elif src == "zoo":
            out += [(p, src) for p in sorted(ZOO_DIR.glob("*.tosa"))]
        elif src in SLICES:
            out += [(p, src) for p in sample(slice_tests(jobs, SLICES[src]), every)]
        else:
            raise ValueError(f"unknown source {src!r}: fixtures, zoo, {', '.join(SLICES)}")
    return out


def summary(results: list[GraphResult], platforms: Iterable[str]) -> str:
    lines = []
    for src in sorted({r.source for r in results}):
        rs = [r for r in results if r.source == src]
        for p in platforms:
            exported = sum(1 for r in rs if "serialized_bytes" in r.platforms.get(p, {}))
            ok = sum(1 for r in rs if r.platforms.get(p, {}).get("ok"))
            same = sum(1 for r in rs if r.platforms.get(p, {}).get("same_as_cpu"))
            lines.append(f"{src:<9} {p:<5} exported {exported}/{len(rs)}, checks passed "
                         f"{ok}/{len(rs)}, same module as CPU {same}/{len(rs)}")
    calls: Counter[str] = Counter()
    convs: Counter[str] = Counter()
    dots: Counter[str] = Counter()
    wide: Counter[str] = Counter()
    low = bf16 = 0
    graphs_with_int_conv = 0
    for r in results:
        for e in r.platforms.values():
            calls.update(e.get("custom_calls", {}))
            convs.update(e.get("int_convolutions", {}))
            dots.update(e.get("int_dots", {}))
            wide.update(e.get("wide_types", {}))
            low += e.get("float_below_highest", 0)
            bf16 += e.get("bf16_dots", 0)
        graphs_with_int_conv += any(e.get("int_convolutions") for e in r.platforms.values())
    lines.append(f"custom calls: {dict(calls) or 'none'}; 64-bit types: {dict(wide) or 'none'}")
    lines.append(f"integer convolutions (over all platforms' exports) in {graphs_with_int_conv} "
                 f"graphs: {dict(convs) or 'none'}; integer dots: {dict(dots) or 'none'}; "
                 f"BF16 dots (exact 8-bit integer products): {bf16}")
    lines.append(f"float convolutions/dots below HIGHEST precision: {low}")
    for r in results:
        if r.error:
            lines.append(f"FAILED {r.graph}: {r.error}")
        for p, e in r.platforms.items():
            if not e.get("ok"):
                lines.append(f"FAILED {r.graph} [{p}]: {e.get('error') or e.get('problems')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="*", default=["fixtures", "zoo", "slice", "slice-1.1"],
                    help="fixtures, zoo (.cache/zoo or $TOSA_JAX_ZOO_DIR), slice (TOSA 1.0.2's "
                         "CI slice), slice-1.1 (1.1.0-draft's); given empty: only --paths")
    ap.add_argument("--paths", nargs="*", type=Path, default=[],
                    help="more graphs, or directories searched for *.tosa")
    ap.add_argument("--sample", type=int, default=1, metavar="K",
                    help="only every K-th graph of a slice (default all)")
    ap.add_argument("--platforms", nargs="+", default=list(PLATFORMS))
    ap.add_argument("--x64", action="store_true", help="with jax_enable_x64 on")
    ap.add_argument("--jobs", type=int, default=2, help="slice generation processes")
    ap.add_argument("--json", type=Path, help="write the per-graph results here")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", args.x64)
    todo = graphs(args.sources, args.sample, args.jobs, args.paths)
    results = []
    t0 = time.perf_counter()
    for i, (path, src) in enumerate(todo, 1):
        results.append(check_graph(path, src, args.platforms))
        if i % 25 == 0 or i == len(todo):
            bad = sum(not r.ok for r in results)
            print(f"[{i}/{len(todo)} graphs, {bad} failed, {time.perf_counter() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
    print(f"jax {jax.__version__}, x64 {'on' if args.x64 else 'off'}, "
          f"{time.perf_counter() - t0:.0f} s")
    print(summary(results, args.platforms))
    if args.json:
        args.json.write_text(json.dumps({"x64": args.x64, "jax": jax.__version__,
                                         "results": [asdict(r) for r in results]}, indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
