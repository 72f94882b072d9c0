"""The one home of what tests/ and bench/ share, so that neither imports the other (issue 17).

This package itself is standard library only (benchmark workers import it before JAX): finding
conformance tests on disk, timing calls, the source tree's paths. Its modules, imported by name:

* ``reference``: the TOSA reference model as an oracle (exact and FP64), FP network tolerances;
* ``networks``: small INT8 networks built with GraphBuilder (partitioning, Vela comparisons);
* ``conformance`` (+ ``conformance_sut``): the official conformance suite, generated, sliced and
  run with tosa_jax as the system under test (``bench/conformance.py`` is its command line);
* ``fuzz``, ``leak``, ``gpu_export``, ``mlir_roundtrip``, ``tflite_litert``, ``vela_cycles``,
  ``digits``: the harnesses behind the ``bench/`` scripts of those names, which the tests also
  exercise.

The runtime (``tosa_jax``, ``lowering``, ``profiles``, ``hw_models``) never imports this package
(tests/unit/test_layering.py); it needs the test extra (``pip install -e '.[test]'``) and, for
the paths below, a source checkout.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# On an ERROR_IF graph the reference model (binding and CLI) forks gdb to print its own stack,
# 10 to 20 s a graph here; it reads this variable at each failure (tosa-tools' func_debug.cc) and
# returns the same status without the backtrace. Every test, benchmark and conformance run that
# uses the reference model as an oracle goes through this package.
os.environ.setdefault("TOSA_MODEL_NO_BACKTRACE", "1")

REPO = Path(__file__).resolve().parents[2]  # the source checkout (an editable install)
FIXTURES = REPO / "tests" / "fixtures"  # graphs and inputs the tests and benchmarks share
CACHE = REPO / ".cache"  # generated suites, exported zoo networks (git-ignored)


def sample_inputs(model: Any, graph: str | Path) -> list[Any]:
    """Inputs for one call of ``model``: the graph's saved sample (``<graph>.input.npy`` beside
    it) where it has one input of that shape and type, else zeros."""
    import numpy as np

    xs = [np.zeros(s.shape, s.np_dtype) for s in model.inputs]
    sample = Path(graph).with_suffix(".input.npy")
    if len(xs) == 1 and sample.exists():
        a = np.load(sample)
        if a.shape == xs[0].shape and a.dtype == xs[0].dtype:
            xs[0] = a
    return xs


def traced_primitives(graph: Any, platform: str, *args: Any) -> list[str]:
    """The primitives of ``graph``'s function traced for ``platform`` on ``args``, in order
    (top level): which form of a platform-dependent lowering a program holds."""
    import jax

    import tosa_jax
    from tosa_jax.lowering.numerics import lowering_for

    model = tosa_jax.load(graph, cache=False)
    with lowering_for(platform):
        jaxpr = jax.make_jaxpr(model.fn)(*args)
    return [e.primitive.name for e in jaxpr.jaxpr.eqns]


def find_tests(*roots: str | Path, negative: bool | None = None) -> list[Path]:
    """Conformance test directories (those holding a desc.json) under ``roots``, sorted.

    ``negative``: None keeps all; False only positive tests, True only ERROR_IF tests
    (``expected_failure`` in desc.json)."""
    tests = sorted({p.parent for root in roots for p in Path(root).rglob("desc.json")})
    if negative is None:
        return tests
    return [t for t in tests if is_negative(t) == negative]


def is_negative(test_dir: Path) -> bool:
    """A conformance test the reference model must refuse (an ERROR_IF test)."""
    return bool(json.loads((test_dir / "desc.json").read_text()).get("expected_failure", False))


def median_ms(fn: Callable[[], Any], repeat: int, budget_s: float | None = None,
              cpu_ms: list[float] | None = None, min_s: float = 0.0) -> tuple[float, int]:
    """Median wall time of ``fn()`` in ms over ``repeat`` calls, or more until ``min_s`` seconds
    have passed (fewer if ``budget_s`` runs out, at least one); returns (median, calls made).

    ``min_s``: a fast call is repeated long enough for its median to mean something (three
    calls of a few milliseconds are three draws of a busy machine's noise).
    ``cpu_ms``: the process's CPU time per call (all threads) is appended there; on a loaded
    machine it stays near the quiet machine's work while wall times stretch."""
    times: list[float] = []
    start, cpu0 = time.perf_counter(), time.process_time()
    while len(times) < max(repeat, 1) or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
    if cpu_ms is not None:
        cpu_ms.append((time.process_time() - cpu0) / len(times) * 1e3)
    return statistics.median(times) * 1e3, len(times)
