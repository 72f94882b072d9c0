"""Helpers shared by tests/ and bench/ (so neither imports the other): finding conformance tests
on disk and timing calls. Standard library only: benchmark workers import it before JAX."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
              cpu_ms: list[float] | None = None) -> tuple[float, int]:
    """Median wall time of ``fn()`` in ms over ``repeat`` calls (fewer if ``budget_s`` runs out,
    at least one); returns (median, calls made).

    ``cpu_ms``: the process's CPU time per call (all threads) is appended there; on a loaded
    machine it stays near the quiet machine's work while wall times stretch."""
    times: list[float] = []
    start, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
    if cpu_ms is not None:
        cpu_ms.append((time.process_time() - cpu0) / len(times) * 1e3)
    return statistics.median(times) * 1e3, len(times)
