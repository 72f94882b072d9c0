"""The forms the lowering takes off the CPU (``lowering.numerics.on_cpu_else``: integer
convolutions and FP8 convolutions as matrix products over patches, int8 products widened to
int32), judged on the CPU by the official runner: every convolution and MATMUL test of the CI
conformance slice, lowered with ``TOSA_JAX_GPU_FORMS=1``.

Why: XLA's GPU backend compiles none of TOSA's integer convolutions, summed some int8 x int8
matrix products wrong and aborted on an FP8 convolution (H200, jax 0.11.2, 2026-11-26); those
graphs lower to other forms for it. Their arithmetic is checked here against the reference model
on every CI run; what only a GPU shows (that XLA's GPU backend compiles them right) is
``scripts/gpu_check.sh``. Uses the slice the full lane generates (skips without it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tosa_jax.lowering.numerics import GPU_FORMS_ENV
from tosa_jax.testing import conformance as conf

JOBS = int(os.environ.get("TOSA_JAX_CONFORMANCE_JOBS", "2"))
OPERATORS = ("CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D", "MATMUL")


def test_off_cpu_forms_pass_the_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if conf.tosa_tools_version() is None:
        pytest.skip("tosa-tools is not installed: no conformance slice")
    root = conf.generated_slice(conf.CI_CACHE, conf.CI_SELECTION)
    if root is None:
        pytest.skip("the CI conformance slice is not generated yet (bash scripts/test.sh)")
    tests = [t for t in conf.find_tests(root) if conf.test_operator(t) in OPERATORS]
    assert len(tests) >= 60, len(tests)  # every type signature of each (90 at seed 1)
    copies = []
    for t in tests:  # the runner writes its result files into the test directories
        copies.append(tmp_path / "tests" / t.relative_to(root))
        shutil.copytree(t, copies[-1])
    monkeypatch.setenv(GPU_FORMS_ENV, "1")  # read by the runner's tosa_jax processes
    monkeypatch.setenv("TOSA_JAX_CACHE", "0")
    report = conf.run_tests(copies, sut=conf.SUT_MODULE, jobs=JOBS, workdir=tmp_path / "runner",
                            test_type="positive")
    ours = report.results.get(conf.SUT_MODULE, [])
    assert len(ours) == len(copies)
    failed = [f"{Path(r.path).name}: {r.result} {r.message[:300]}" for r in ours
              if r.status != "passed"]
    assert not failed, failed
    assert report.totals(conf.COMPLIANCE_SUT_MODULE)["failed"] == 0
