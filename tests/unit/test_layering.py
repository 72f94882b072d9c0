"""The import graph points one way: the IR, profiles/ and hw_models/ read graphs without JAX, and
the command line answers ``--help`` without loading it (issue 17, part 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GRAPH = Path(__file__).resolve().parents[1] / "fixtures" / "cnn_int8.tosa"


def _loaded_after(code: str) -> set[str]:
    """Top-level modules of interest loaded by running ``code`` in a fresh interpreter."""
    probe = (f"{code}\nimport sys\n"
             "print('loaded:', *(m for m in ('jax', 'jaxlib', 'flatbuffers', 'tosa_jax.lowering',"
             " 'tosa_jax.model') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return set(out.splitlines()[-1].split()[1:])


_HELP = ("from tosa_jax.cli import main\n"
         "try:\n    main(['{}', '--help'])\nexcept SystemExit:\n    pass")


@pytest.mark.parametrize("code", [
    "import tosa_jax.ir",
    "import tosa_jax.profiles",
    "import tosa_jax.hw_models",
    "import tosa_jax; tosa_jax.GraphBuilder; tosa_jax.TosaError",
    *(_HELP.format(cmd) for cmd in ("info", "check", "run", "partition")),
    # reading and describing a graph needs the reader, never JAX: the commands themselves, and
    # the partitioner given a path
])
def test_no_jax_without_lowering(code: str) -> None:
    assert _loaded_after(code) == set()


@pytest.mark.parametrize("code", [
    *(f"from tosa_jax.cli import main\nassert main(['{cmd}', {str(GRAPH)!r}]) == 0"
      for cmd in ("info", "check")),
    f"from tosa_jax import hw_models\nhw_models.partition({str(GRAPH)!r}, 'ethos-u55-128')",
])
def test_reading_a_graph_needs_no_jax(code: str) -> None:
    """``tosa-jax info`` / ``check`` and the partitioner read a file with the flatbuffer reader
    alone (frontends.read_source), not through the Model."""
    assert _loaded_after(code) == {"flatbuffers"}


def test_lazy_public_names_resolve() -> None:
    import tosa_jax
    from tosa_jax.lowering.numerics import INT_RANGES, Wide

    assert tosa_jax.Wide is Wide  # one class, re-exported where the lowerings look for it
    assert INT_RANGES is tosa_jax.ir.INT_RANGES
    for name in tosa_jax.__all__:
        assert getattr(tosa_jax, name) is not None
    assert "load" in dir(tosa_jax)
    # the submodule tosa_jax.evaluate, imported first in a fresh interpreter, does not hide the
    # function of that name
    code = ("import tosa_jax.evaluate, tosa_jax\n"
            "assert callable(tosa_jax.evaluate), tosa_jax.evaluate")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    with pytest.raises(AttributeError):
        tosa_jax.no_such_name  # noqa: B018
