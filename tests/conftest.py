"""pytest configuration: the tests' own compile cache, the ``reference`` and ``scale_form``
fixtures.

Helpers shared with bench/ (oracles, networks, the conformance harness) live in
``tosa_jax.testing``: tests/ and bench/ never import each other."""

from __future__ import annotations

import os
import tempfile

import pytest

# The persistent compile cache: the tests' own, never the user's (tests of the cache make more).
os.environ.setdefault("TOSA_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="tosa_jax_test_cache-"))
# (tosa_jax.testing also turns the reference model's gdb backtrace on ERROR_IF graphs off.)

from tosa_jax.testing.reference import run_reference  # noqa: E402


@pytest.fixture
def reference():
    """``reference(tosa_bytes_or_path, {input: array}, [output names]) -> {name: array}``."""
    return run_reference


@pytest.fixture(params=["int64", "int32-forms"])
def scale_form(request, monkeypatch) -> str:
    """Run a test twice: with apply_scale_32 as XLA CPU's int64 primitive, and as the 32-bit
    forms every other platform lowers it to (TOSA_JAX_GPU_FORMS traces those for the CPU)."""
    if request.param == "int32-forms":
        monkeypatch.setenv("TOSA_JAX_GPU_FORMS", "1")
    return request.param
