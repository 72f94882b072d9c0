#!/usr/bin/env bash
# The test suite, in two lanes; extra arguments go to pytest.
#   bash scripts/test.sh          full lane (CI): lint, every test, the conformance slice; every
#                                 integer result judged by the TOSA reference model
#   bash scripts/test.sh --fast   development lane: lint and the unit and network tests, without
#                                 the generated conformance slice (tests that read it skip
#                                 until the full lane has generated it), on every core (pytest-xdist;
#                                 TOSA_JAX_TEST_WORKERS=1 runs them in one process); a file's
#                                 tests stay on one worker (--dist loadfile): they share its
#                                 fixtures and JAX's compiled functions, 15 % less CPU than
#                                 spreading them test by test
# Tests marked slow (minutes each) run in neither lane: pytest -m slow.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" test
cd "$ROOT"
if [ "${1:-}" = "--fast" ]; then
  shift
  ruff check .
  exec python -m pytest -n "${TOSA_JAX_TEST_WORKERS:-auto}" --dist loadfile -m "not slow" \
    --ignore=tests/conformance "$@"
fi
ruff check .
# The conformance slice (drawn at generator seed 1, CI_SEED in tosa_jax/testing/conformance.py,
# not the official suite's 42) is generated once per tosa-tools version and seed into
# .cache/conformance (minutes; progress on stderr) and reused by later runs on this machine.
python bench/conformance.py slice || echo "conformance slice: generation failed (pytest reports it)" >&2
python -m pytest "$@"
