"""The import graph points one way: the IR, profiles/ and hw_models/ read graphs without JAX, and
the command line answers ``--help`` without loading it (issue 17, part 2)."""

from __future__ import annotations

import ast
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


# ---- tests/ and bench/ share tosa_jax.testing, and never import each other (issue 17, part 3)

REPO = Path(__file__).resolve().parents[2]
RUNTIME = [p for root in ("tosa_jax", "lowering", "profiles", "hw_models")
           for p in (REPO / root).rglob("*.py")
           if "testing" not in p.relative_to(REPO).parts[:2]]


def _imports(path: Path) -> set[str]:
    """Every module a file imports (``import a.b``, ``from a.b import c``: "a.b")."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _path_parts(path: Path) -> set[str]:
    """String constants used in ``x / "part"`` path expressions and in calls that load code by
    path or put a directory on ``sys.path`` (``spec_from_file_location``, ``sys.path.insert``)."""
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts.update(n.value for n in (node.left, node.right)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str))
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.endswith(("spec_from_file_location", "sys.path.insert", "sys.path.append")):
                parts.update(n.value for n in ast.walk(node)
                             if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return parts


def test_tests_and_bench_never_import_each_other() -> None:
    bench = sorted((REPO / "bench").glob("*.py"))
    tests = sorted((REPO / "tests").rglob("*.py"))
    bench_modules = {p.stem for p in bench}
    test_modules = {p.stem for p in tests}
    problems = []
    for p in tests:
        if p == Path(__file__).resolve():
            continue  # this file names bench/ to scan it
        wrong = {m for m in _imports(p) if m.split(".")[0] in bench_modules | {"bench"}}
        wrong |= {s for s in _path_parts(p) if "bench" in s.split("/")}
        if wrong:
            problems.append(f"{p.relative_to(REPO)}: {sorted(wrong)}")
    for p in bench:
        wrong = {m for m in _imports(p) if m.split(".")[0] in test_modules | {"tests"}}
        # bench/ reads tests/fixtures (data); it loads no code from tests/ and adds nothing to
        # sys.path
        text = p.read_text()
        if "sys.path.insert" in text or "sys.path.append" in text:
            wrong.add("sys.path")
        if wrong:
            problems.append(f"{p.relative_to(REPO)}: {sorted(wrong)}")
    assert problems == []
    # what they share exists once, in tosa_jax.testing: no tj_* helper modules left in tests/
    assert not [p.name for p in tests if p.stem.startswith("tj_")]


def test_runtime_never_imports_the_test_helpers() -> None:
    assert RUNTIME and len(RUNTIME) > 30
    wrong = {str(p.relative_to(REPO)): sorted(m for m in _imports(p)
                                             if m.startswith("tosa_jax.testing"))
             for p in RUNTIME}
    assert {k: v for k, v in wrong.items() if v} == {}
    # and tosa_jax.testing itself stays importable without JAX (benchmark workers import it first)
    assert _loaded_after("import tosa_jax.testing") == set()


def test_planning_loops_needs_no_jax() -> None:
    """tosa_jax.reroll plans on the IR alone (the executor, which imports JAX, runs the plan)."""
    code = ("import tosa_jax.reroll as r\nfrom tosa_jax.serialization import read\n"
            f"r.plan(read({str(GRAPH)!r}).main)")
    assert _loaded_after(code) == {"flatbuffers"}
