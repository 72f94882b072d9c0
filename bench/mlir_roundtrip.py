"""TOSA flatbuffer -> TOSA MLIR -> TOSA flatbuffer (tosa-opt, ``tosa_jax.convert``) over the CI
conformance slice (or any test directories): does the round trip keep every graph?

The command line of ``tosa_jax.testing.mlir_roundtrip`` (options: ``--help``; usage: that
module's docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/conformance.py would stand in for
# tosa-tools' top-level "conformance" package, which the conformance runner (used here in this
# process) imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tosa_jax.testing.mlir_roundtrip import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
