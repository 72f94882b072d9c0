#!/usr/bin/env bash
# The test suite (what CI runs): lint, unit tests, fixture networks and the conformance slice,
# every integer result judged by the TOSA reference model. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" test
cd "$ROOT"
ruff check .
python -m pytest "$@"
