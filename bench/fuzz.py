"""Fuzz the reader and loader: mutated and truncated TOSA files must never crash, hang or raise
anything but a TosaError, and every case stays within a time and memory bound.

The command line of ``tosa_jax.testing.fuzz`` (options: ``--help``; usage: that module's
docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys

from tosa_jax.testing.fuzz import main

if __name__ == "__main__":
    sys.exit(main())
