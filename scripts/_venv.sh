# Sourced by the other scripts: make (or reuse) .venv with the project installed.
# Usage: source scripts/_venv.sh [EXTRA]   e.g. "test" installs the test tools too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRA="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# Reinstall only when pyproject.toml or the extra changed.
STAMP="$VENV/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)-${EXTRA:-runtime}"
if [ ! -f "$STAMP" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  if [ -n "$EXTRA" ]; then
    "$VENV/bin/python" -m pip install -q -e "$ROOT[$EXTRA]"
  else
    "$VENV/bin/python" -m pip install -q -e "$ROOT"
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
