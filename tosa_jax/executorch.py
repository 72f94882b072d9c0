"""A pytest plugin: ExecuTorch's Arm tests run every TOSA graph on tosa_jax.

::

    pip install tosa-jax[executorch]
    T=$(python -c "import executorch.backends.arm.test as t; print(t.__path__[0])")
    pytest -p tosa_jax.executorch $T/ops -k tosa
    pytest -p tosa_jax.executorch $T/models -k tosa

ExecuTorch's test flow hands each TOSA graph to ``runner_utils.run_tosa_graph``, which imports
``tosa_reference_model`` and calls its ``run``. The plugin wraps that one function, at load
time, so that during its call the name ``tosa_reference_model`` resolves to
``tosa_jax.reference_model`` (the same calling convention); nothing of ExecuTorch is edited,
and everything else that imports ``tosa_reference_model`` (the TOSA dialect's eager operators,
other tests, the process outside that call) still gets the real binding. The pipeline's check
that a reference model is installed is answered yes: tosa_jax is one.

``engine_seconds()`` and ``engine_calls()`` give the time spent inside the engine and the
number of graphs run, for benchmarks (``bench/executorch_suite.py``).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

import pytest

from tosa_jax import hostexec, reference_model

MODULE = "tosa_reference_model"
_lock = threading.Lock()
_stats = {"calls": 0, "seconds": 0.0}


class _Engine:
    """What ``import tosa_reference_model`` gives inside run_tosa_graph: tosa_jax's ``run``
    (timed) and ``GraphStatus``."""

    GraphStatus = reference_model.GraphStatus

    def __init__(self) -> None:
        self.__name__ = MODULE
        self.__doc__ = reference_model.__doc__

    @staticmethod
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return reference_model.run(*args, **kwargs)
        finally:
            with _lock:
                _stats["calls"] += 1
                _stats["seconds"] += time.perf_counter() - start


ENGINE = _Engine()


def engine_seconds() -> float:
    """Seconds spent inside tosa_jax.reference_model.run under the plugin so far."""
    return _stats["seconds"]


def engine_calls() -> int:
    """Graphs run by tosa_jax under the plugin so far."""
    return _stats["calls"]


def _with_tosa_jax(run_tosa_graph: Any) -> Any:
    @functools.wraps(run_tosa_graph)
    def run_on_tosa_jax(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            saved = sys.modules.get(MODULE)
            sys.modules[MODULE] = ENGINE  # type: ignore[assignment]
        try:
            return run_tosa_graph(*args, **kwargs)
        finally:
            with _lock:
                if saved is None:
                    sys.modules.pop(MODULE, None)
                else:
                    sys.modules[MODULE] = saved

    run_on_tosa_jax.__tosa_jax__ = True  # type: ignore[attr-defined]
    return run_on_tosa_jax


def install() -> None:
    """Route ExecuTorch's ``run_tosa_graph`` to tosa_jax (idempotent)."""
    try:
        from executorch.backends.arm.test import runner_utils
        from executorch.backends.arm.test.tester import test_pipeline
    except ImportError as e:
        raise pytest.UsageError(
            f"-p tosa_jax.executorch needs ExecuTorch's Arm backend ({e}); install it with "
            "pip install 'tosa_jax[executorch]'") from e
    if not getattr(runner_utils.run_tosa_graph, "__tosa_jax__", False):
        runner_utils.run_tosa_graph = _with_tosa_jax(runner_utils.run_tosa_graph)
    test_pipeline.TOSAPipeline.is_tosa_ref_model_available = staticmethod(lambda: True)


def pytest_configure(config: pytest.Config) -> None:
    install()
    hostexec.prepare()  # jaxlib's extension and client, while the first test exports its model


def pytest_report_header(config: pytest.Config) -> str:
    return ("tosa_jax.executorch: ExecuTorch's TOSA graphs run on tosa_jax.reference_model "
            "(not the tosa-tools reference model)")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _stats["calls"]:
        terminalreporter.write_line(
            f"tosa_jax.executorch: {_stats['calls']} TOSA graph(s) run by tosa_jax, "
            f"{_stats['seconds']:.2f} s inside the engine")
