"""The pytest plugin ``-p tosa_jax.executorch``: ExecuTorch's run_tosa_graph on tosa_jax.

The routing itself is checked without ExecuTorch; the end-to-end run of one of ExecuTorch's own
tests needs torch and executorch (``tosa_jax[executorch]``) and is skipped without them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tosa_jax import executorch as plugin
from tosa_jax import reference_model


def _imported() -> object:
    import tosa_reference_model  # resolved at call time, as runner_utils.run_tosa_graph does

    return tosa_reference_model


def test_routing_only_inside_the_wrapped_call():
    before = sys.modules.get("tosa_reference_model")
    wrapped = plugin._with_tosa_jax(_imported)
    engine = wrapped()
    assert engine is plugin.ENGINE and engine.GraphStatus is reference_model.GraphStatus
    assert sys.modules.get("tosa_reference_model") is before

    def failing() -> None:
        _imported()
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        plugin._with_tosa_jax(failing)()
    assert sys.modules.get("tosa_reference_model") is before


def test_engine_runs_tosa_jax_and_counts():
    import numpy as np

    import tosa_jax
    from tosa_jax import GraphBuilder

    b = GraphBuilder()
    y = b.op("ABS", [b.input("x", (3,), "INT32")], (3,), "INT32")
    g = tosa_jax.write(b.build([y]))
    calls = plugin.engine_calls()
    outs, status = plugin.ENGINE.run(g, [np.array([-1, 0, 5], np.int32)])
    assert status == reference_model.GraphStatus.TOSA_VALID
    np.testing.assert_array_equal(outs[0], [1, 0, 5])
    assert plugin.engine_calls() == calls + 1 and plugin.engine_seconds() > 0


def test_executorch_test_runs_on_tosa_jax(tmp_path):
    """One of ExecuTorch's own Arm tests, run by pytest with the plugin: it passes, and its
    graph went to tosa_jax (the plugin's summary line)."""
    pytest.importorskip("torch")
    arm_test = pytest.importorskip("executorch.backends.arm.test")
    test = os.path.join(list(arm_test.__path__)[0], "ops", "test_add.py")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--config-file=/dev/null", "-p", "no:cacheprovider",
         "-q", "-p", "tosa_jax.executorch", f"{test}::test_add_tensor_tosa_INT_2[4d_randn_1]"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 TOSA graph(s) run by tosa_jax" in proc.stdout
