"""Test oracles shared by the test files: the official TOSA reference model (tosa-tools).

Named uniquely: tosa-tools installs a top-level ``tests`` package, so ours is never imported as
``tests.x``; conftest.py puts this directory on sys.path.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures"



def reference_model_path() -> str | None:
    """The tosa_reference_model of the running environment, if tosa-tools is installed."""
    beside = Path(sys.executable).parent / "tosa_reference_model"
    return str(beside) if beside.exists() else shutil.which("tosa_reference_model")


def run_reference(tosa: bytes | str | os.PathLike, inputs: dict[str, np.ndarray],
                  outputs: list[str]) -> dict[str, np.ndarray]:
    """Run a graph on the reference model; returns its outputs by name (INT48 as int64)."""
    exe = reference_model_path()
    if exe is None:
        pytest.skip("tosa-tools (tosa_reference_model) is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = d / "graph.tosa"
        if isinstance(tosa, (bytes, bytearray)):
            path.write_bytes(tosa)
        else:
            shutil.copy(tosa, path)
        names, files = [], []
        for i, (name, arr) in enumerate(inputs.items()):
            np.save(d / f"in{i}.npy", arr)
            names.append(name)
            files.append(str(d / f"in{i}.npy"))
        ofiles = [f"out{i}.npy" for i in range(len(outputs))]
        cmd = [exe, "--tosa_file", path.name, "--flatbuffer_dir", str(d),
               "--output_dir", str(d), "--ofm_name", ",".join(outputs),
               "--ofm_file", ",".join(ofiles)]
        if names:
            cmd += ["--ifm_name", ",".join(names), "--ifm_file", ",".join(files)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"reference model failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return {n: np.load(d / f) for n, f in zip(outputs, ofiles)}


def check_exact(reference, b, outputs: list[str] | None = None,
                inputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run ``b`` (a GraphBuilder, built with ``outputs``, or a Graph) on the reference model and
    on tosa_jax (x64 off and on); demand identical results and dtypes (NaN equal to NaN).
    Returns the reference outputs."""
    import jax

    import tosa_jax

    graph = b if isinstance(b, tosa_jax.Graph) else b.build(outputs)
    outputs = list(graph.main.outputs)
    data = tosa_jax.write(graph)
    ref = reference(data, inputs or {}, outputs)
    for x64 in (False, True):
        with jax.enable_x64(x64):
            got = tosa_jax.load(data).run(inputs or {})
        for name in outputs:
            assert got[name].dtype == ref[name].dtype, (name, x64)
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} x64={x64}")
    return ref


def bench_conformance() -> ModuleType:
    """bench/conformance.py, the conformance harness, as a module.

    It is a script, not a package module (and "conformance" is also the name of a tosa-tools
    package): loaded by path under a name of its own, once."""
    name = "tosa_jax_bench_conformance"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parents[1] / "bench" / "conformance.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
