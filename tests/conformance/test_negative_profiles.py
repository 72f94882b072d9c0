"""profiles/ alone refuses every ERROR_IF test of the official TOSA 1.0.2 suite (issue 17, part 1),
and of the TOSA 1.1.0-draft operators (issue 13).

The lowerings assume a validated graph and check nothing of their own, so this is the proof that
nothing is lost: every negative test (``expected_failure``, all profiles and extensions, about
570) is read and handed to ``tosa_jax.profiles`` in a fresh interpreter that never imports the
lowerings or JAX; each must break an ERROR_IF, need what no profile offers, or break a limit of
the 8K level (which the reference model applies by default). A few declare a negative dimension
(an output size the broken stride or padding makes negative): the reader refuses those, since the
IR cannot hold them (12 of the 570, tosa-tools 2026.8.0; at most 20 allowed). The
tests are generated once per tosa-tools version into ``.cache/conformance/`` (``python
bench/conformance.py slice`` does it first, with progress).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tosa_jax.testing import conformance as conf
from tosa_jax.testing import find_tests

JOBS = int(os.environ.get("TOSA_JAX_CONFORMANCE_JOBS", "2"))

_CHECK = r'''
import json, sys
from pathlib import Path
import tosa_jax
from tosa_jax import profiles
from tosa_jax.serialization import read

level = profiles.Target(level=profiles.level_name("8K"))
not_refused, refused_by = [], {}
for d in map(Path, json.load(sys.stdin)):
    desc = json.loads((d / "desc.json").read_text())
    try:
        graph = read((d / desc["tosa_file"]).read_bytes())
    except tosa_jax.TosaError as e:
        refused_by["read"] = refused_by.get("read", 0) + 1
        continue
    analysis = profiles.analyse(graph)
    if analysis.violations:
        by = "ERROR_IF"
    elif profiles.requirements_of(analysis).unsatisfiable:
        by = "profile"
    elif profiles.check_target(analysis, level):
        by = "level"
    else:
        not_refused.append(d.name)
        continue
    refused_by[by] = refused_by.get(by, 0) + 1
loaded = [m for m in ("jax", "tosa_jax.lowering", "tosa_jax.executor") if m in sys.modules]
print(json.dumps({"not_refused": not_refused, "refused_by": refused_by, "loaded": loaded}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("version, at_least", [("1.0.2", 500), ("1.1.0-draft", 140)])
def test_every_negative_test_is_refused_before_lowering(version: str, at_least: int) -> None:
    """1.0.2: the whole suite's ERROR_IF tests; 1.1.0-draft: those of the operators 1.1 adds
    (MATMUL_T, ROW_GATHER and their block-scaled types, the block-scaled operators, the
    ADAPTIVE pools, the shape operators)."""
    if conf.tosa_tools_version() is None:
        pytest.skip("tosa-tools is not installed (pip install tosa-tools==2026.8.0)")
    selection = conf.CI_NEGATIVES if version == "1.0.2" else conf.CI_NEGATIVES_1_1
    root = conf.cached_slice(conf.CI_CACHE, selection, JOBS, whole=True)
    tests = find_tests(root, negative=True)
    assert len(tests) >= at_least, f"only {len(tests)} negative tests under {root}"
    proc = subprocess.run([sys.executable, "-c", _CHECK], input=json.dumps(list(map(str, tests))),
                          capture_output=True, text=True, timeout=1800, check=True)
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["loaded"] == [], f"validation imported {result['loaded']}"
    assert result["not_refused"] == [], (
        f"{len(result['not_refused'])} of {len(tests)} negative tests pass profiles/: "
        f"{result['not_refused'][:20]}")
    assert sum(result["refused_by"].values()) == len(tests)
    assert result["refused_by"].get("read", 0) <= 20, result["refused_by"]
