"""pytest configuration: puts tests/ on sys.path for tj_oracle and provides fixtures."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# The persistent compile cache: the tests' own, never the user's (tests of the cache make more).
os.environ.setdefault("TOSA_JAX_CACHE_DIR", tempfile.mkdtemp(prefix="tosa_jax_test_cache-"))

from tj_oracle import run_reference  # noqa: E402


@pytest.fixture
def reference():
    """``reference(tosa_bytes_or_path, {input: array}, [output names]) -> {name: array}``."""
    return run_reference
