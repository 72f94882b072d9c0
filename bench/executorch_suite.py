"""ExecuTorch's own Arm TOSA tests as a benchmark: the reference model against tosa_jax, one run.

Needs torch and executorch (``pip install 'tosa_jax[executorch]'``, ORACLES.md §3, §6); kept out
of CI. Each selected test (``-k tosa`` tests of ExecuTorch 1.5.1's ``backends/arm/test``) is
exported once; its output comparison (``ArmTester.run_method_and_compare_outputs``) then runs
twice on the same random inputs (the torch RNG state is restored in between): once with the
tosa-tools reference model, once with tosa_jax (through ``tosa_jax.executorch``'s routing). The
test's own tolerances judge each engine. Printed: pass/fail per engine and test, tests where the
engines differ, the time inside each engine per test and in total, and tests that never reached
an engine (failed or skipped before running a graph) counted apart.

    python bench/executorch_suite.py --ops add softmax --models ds_cnn --per-file 10
    python bench/executorch_suite.py --json bench/results/executorch_suite.json
    python bench/executorch_suite.py --ops --models --tosa-1-1    # the 85 TOSA 1.1 tests only
    python bench/executorch_suite.py --ops all --models --shard 0/4   # every operator file, 1/4
    python bench/executorch_suite.py --merge shard0.json shard1.json ...  # their combined table

The pytest outcome of each test follows the reference model; the table is the result.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

OPS = ["add", "softmax", "sigmoid", "relu", "conv2d", "linear", "avg_pool2d", "mean_dim", "amax",
       "any", "select", "sum", "cond", "while"]  # test_mean_dim.py holds mean too
MODELS = ["ds_cnn", "resnet8", "deep_autoencoder", "lstm_arm"]
# The test files whose ``-k tosa`` tests emit TOSA 1.1.0-draft graphs (TOSA-1.1+FP+mxfp: MXFP
# block-scaled convolution and linear, FFT): 85 tests in ExecuTorch 1.5.1 (``--tosa-1-1``).
TOSA_1_1 = ["ops/test_mxfp_conv2d.py", "ops/mxfp/test_mxfp_linear.py", "ops/test_fft.py"]


@dataclass
class Record:
    test: str
    outcome: str = "?"                          # pytest's (follows the reference model)
    engines: dict[str, str] = field(default_factory=dict)    # engine -> pass / fail
    seconds: dict[str, float] = field(default_factory=dict)  # engine -> time inside it
    calls: dict[str, int] = field(default_factory=dict)      # engine -> graphs run
    errors: dict[str, str] = field(default_factory=dict)
    wall: float = 0.0


class _Timed:
    """A stand-in for the ``tosa_reference_model`` module that times ``run`` of an engine."""

    def __init__(self, engine: Any, name: str, bench: SuiteBench) -> None:
        self.GraphStatus = engine.GraphStatus
        self._engine, self._name, self._bench = engine, name, bench

    def run(self, *args: Any, **kwargs: Any) -> Any:
        rec, save = self._bench.current, self._bench.save_graphs
        if save and rec is not None and self._name == "ref" and args:
            name = re.sub(r"[^\w.-]+", "_", rec.test)[-150:]
            with open(os.path.join(save, f"{name}.{rec.calls.get('ref', 0)}.tosa"), "wb") as f:
                f.write(bytes(args[0]))
        start = time.perf_counter()
        try:
            return self._engine.run(*args, **kwargs)
        finally:
            rec = self._bench.current
            if rec is not None:
                rec.seconds[self._name] = (rec.seconds.get(self._name, 0.0)
                                           + time.perf_counter() - start)
                rec.calls[self._name] = rec.calls.get(self._name, 0) + 1


class SuiteBench:
    """A pytest plugin object: runs every output comparison on both engines."""

    def __init__(self, per_file: int | None, save_graphs: str | None = None,
                 shard: tuple[int, int] | None = None) -> None:
        self.per_file = per_file
        self.shard = shard
        self.save_graphs = save_graphs
        self.records: dict[str, Record] = {}
        self.current: Record | None = None
        self.started = time.perf_counter()

    def pytest_configure(self, config: Any) -> None:
        import torch
        import tosa_reference_model
        from executorch.backends.arm.test.tester import test_pipeline
        from executorch.backends.arm.test.tester.arm_tester import ArmTester

        from tosa_jax import hostexec, reference_model
        hostexec.prepare()  # as the plugin does (tosa_jax.executorch.pytest_configure)
        engines = {"ref": _Timed(tosa_reference_model, "ref", self),
                   "tosa_jax": _Timed(reference_model, "tosa_jax", self)}
        original = ArmTester.run_method_and_compare_outputs
        bench = self

        def tensors(obj: Any) -> list[Any]:
            if isinstance(obj, torch.Tensor):
                return [obj]
            if isinstance(obj, (tuple, list)):
                return [t for o in obj for t in tensors(o)]
            if isinstance(obj, dict):
                return [t for o in obj.values() for t in tensors(o)]
            return []

        @functools.wraps(original)  # pipelines name their stages after the method
        def both_engines(tester: Any, *args: Any, **kwargs: Any) -> Any:
            rng = torch.get_rng_state()
            # The test's input tensors as they were: a model that works in place (x -= y)
            # changes them when the first engine's run computes the eager reference, and the
            # second engine's run would start from the changed ones.
            inputs = tensors((args, kwargs, getattr(tester, "example_inputs", None)))
            with torch.no_grad():
                originals = [t.detach().clone() for t in inputs]
            failure: dict[str, BaseException] = {}
            for name, engine in engines.items():
                torch.set_rng_state(rng)
                with torch.no_grad():
                    for t, s in zip(inputs, originals, strict=True):
                        t.copy_(s)
                saved = sys.modules.get("tosa_reference_model")
                sys.modules["tosa_reference_model"] = engine  # type: ignore[assignment]
                try:
                    original(tester, *args, **kwargs)
                except Exception as e:  # the test's verdict for this engine
                    failure[name] = e
                finally:
                    sys.modules["tosa_reference_model"] = saved  # type: ignore[assignment]
            rec = bench.current
            if rec is not None:
                for name in engines:
                    if name in failure:
                        rec.engines[name] = "fail"
                        rec.errors.setdefault(name, f"{type(failure[name]).__name__}: "
                                              f"{str(failure[name])[:300]}")
                    else:
                        rec.engines.setdefault(name, "pass")
            if "ref" in failure:
                raise failure["ref"]
            return tester

        ArmTester.run_method_and_compare_outputs = both_engines
        test_pipeline.TOSAPipeline.is_tosa_ref_model_available = staticmethod(lambda: True)

    @pytest.hookimpl(trylast=True)  # after -k has deselected
    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        """Keep ``per_file`` tests of each file, spread evenly over its selected ones, and of
        those the shard's (every N-th, from the I-th)."""
        if not self.per_file and not self.shard:
            return
        by_file: dict[str, list[Any]] = {}
        for item in items:
            by_file.setdefault(str(item.path), []).append(item)
        keep = set()
        for group in by_file.values():
            if self.per_file:
                step = max(len(group) / self.per_file, 1.0)
                group = [group[int(i * step)] for i in range(min(self.per_file, len(group)))]
            if self.shard:
                group = group[self.shard[0]::self.shard[1]]
            keep |= {id(item) for item in group}
        dropped = [i for i in items if id(i) not in keep]
        items[:] = [i for i in items if id(i) in keep]
        config.hook.pytest_deselected(items=dropped)

    def pytest_runtest_setup(self, item: Any) -> None:
        self.current = self.records.setdefault(item.nodeid, Record(item.nodeid))
        self.current.wall = time.perf_counter()

    def pytest_runtest_logreport(self, report: Any) -> None:
        rec = self.records.get(report.nodeid)
        if rec is None or (report.when != "call" and not (report.failed or report.skipped)):
            return
        rec.outcome = report.outcome
        if report.failed and rec.engines.get("ref") == "pass":
            # failed outside the output comparison: the same for both engines
            for name in rec.engines:
                rec.engines[name] = "fail"
                rec.errors.setdefault(name, f"after the comparison: {str(report.longrepr)[-300:]}")

    def pytest_runtest_teardown(self, item: Any) -> None:
        rec = self.records.get(item.nodeid)
        if rec is not None:
            rec.wall = time.perf_counter() - rec.wall
        self.current = None


def _verdict(rec: Record, engine: str) -> str:
    if not rec.calls.get(engine):
        return "-"
    return rec.engines.get(engine, "fail")


def report(bench: SuiteBench, out: Any = sys.stdout) -> dict[str, Any]:
    recs = list(bench.records.values())
    ran = [r for r in recs if r.calls.get("ref") or r.calls.get("tosa_jax")]
    never = [r for r in recs if r not in ran]
    w = max([len(r.test) for r in ran] + [10])
    print(f"\n{'test':<{w}}  ref     tosa_jax  ref ms  tj ms   graphs", file=out)
    for r in ran:
        print(f"{r.test:<{w}}  {_verdict(r, 'ref'):<6}  {_verdict(r, 'tosa_jax'):<8}  "
              f"{1e3 * r.seconds.get('ref', 0):6.1f}  {1e3 * r.seconds.get('tosa_jax', 0):6.1f}"
              f"  {r.calls.get('ref', 0)}/{r.calls.get('tosa_jax', 0)}", file=out)
    differ = [r for r in ran if _verdict(r, "ref") != _verdict(r, "tosa_jax")]
    totals = {e: {"pass": sum(_verdict(r, e) == "pass" for r in ran),
                  "fail": sum(_verdict(r, e) == "fail" for r in ran),
                  "seconds": sum(r.seconds.get(e, 0.0) for r in ran),
                  "graphs": sum(r.calls.get(e, 0) for r in ran)} for e in ("ref", "tosa_jax")}
    print(f"\n{len(recs)} tests selected: {len(ran)} ran graphs on the engines, {len(never)} "
          f"never reached an engine ({sum(r.outcome == 'skipped' for r in never)} skipped, "
          f"{sum(r.outcome == 'failed' for r in never)} failed before it)", file=out)
    for e, t in totals.items():
        per = 1e3 * t["seconds"] / t["graphs"] if t["graphs"] else 0.0
        print(f"  {e:<9} {t['pass']} pass, {t['fail']} fail; {t['graphs']} graphs, "
              f"{t['seconds']:.2f} s inside the engine ({per:.1f} ms per graph)", file=out)
    if totals["ref"]["seconds"]:
        print(f"  time inside the engine, tosa_jax / reference model: "
              f"{totals['tosa_jax']['seconds'] / totals['ref']['seconds']:.2f}", file=out)
    print(f"tests where the engines differ: {len(differ)}", file=out)
    for r in differ:
        print(f"  {r.test}: ref {_verdict(r, 'ref')}, tosa_jax {_verdict(r, 'tosa_jax')}"
              f"  {r.errors.get('tosa_jax') or r.errors.get('ref', '')}", file=out)
    if never:
        print("never reached an engine:", file=out)
        for r in never:
            print(f"  {r.test}: {r.outcome}", file=out)
    return {"records": [asdict(r) for r in recs], "totals": totals,
            "differ": [r.test for r in differ], "never": [r.test for r in never]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", default=OPS,
                    help="operator test files (test_<op>.py); 'all': every ops/test_*.py")
    ap.add_argument("--models", nargs="*", default=MODELS, help="model test files (test_<m>.py)")
    ap.add_argument("--per-file", type=int, default=None,
                    help="run only the first N selected tests of each file")
    ap.add_argument("--shard", metavar="I/N", default=None,
                    help="run only the selected tests whose index within their file is I mod N "
                    "(N runs with I = 0..N-1 cover the selection once)")
    ap.add_argument("--tosa-1-1", action="store_true",
                    help="also the test files that emit TOSA 1.1 graphs (MXFP, FFT: "
                    + ", ".join(TOSA_1_1) + "); with --ops and --models given empty, only them")
    ap.add_argument("-k", default="tosa", help="pytest -k expression (default: tosa)")
    ap.add_argument("--json", help="write every record and the totals here")
    ap.add_argument("--save-graphs", metavar="DIR", help="keep every TOSA graph run, as .tosa")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="run nothing: the combined report of earlier runs' --json files "
                    "(the shards of one selection)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args(argv)
    if args.merge:
        merged = SuiteBench(None)
        for path in args.merge:
            with open(path) as f:
                for r in json.load(f)["records"]:
                    merged.records[r["test"]] = Record(**r)
        result = report(merged)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    try:
        import executorch.backends.arm.test as arm_test
    except ImportError:
        print("needs torch and executorch: pip install 'tosa_jax[executorch]'", file=sys.stderr)
        return 2
    root = list(arm_test.__path__)[0]  # a namespace package: no __file__
    if args.ops == ["all"]:
        args.ops = sorted(f[5:-3] for f in os.listdir(os.path.join(root, "ops"))
                          if f.startswith("test_") and f.endswith(".py"))
    files = [os.path.join(root, "ops", f"test_{o}.py") for o in args.ops]
    files += [os.path.join(root, "models", f"test_{m}.py") for m in args.models]
    if args.tosa_1_1:
        files += [os.path.join(root, f) for f in TOSA_1_1]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        print(f"no such test file(s): {missing}", file=sys.stderr)
        return 2
    if args.save_graphs:
        os.makedirs(args.save_graphs, exist_ok=True)
    # ExecuTorch finds flatc on the PATH: the environment's bin directory may not be on it
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    shard = None
    if args.shard:
        i, _, n = args.shard.partition("/")
        if not (i.isdigit() and n.isdigit() and int(i) < int(n)):
            print(f"--shard takes I/N with 0 <= I < N, not {args.shard!r}", file=sys.stderr)
            return 2
        shard = (int(i), int(n))
    bench = SuiteBench(args.per_file, args.save_graphs, shard)
    pytest.main(["--config-file=/dev/null", "-p", "no:cacheprovider", "-q", "-k", args.k,
                 "-W", "ignore", *files, *args.pytest_args], plugins=[bench])
    result = report(bench)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
