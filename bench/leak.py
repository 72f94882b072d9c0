"""No state leaks: load and call many small distinct graphs in one process; memory must plateau.

The command line of ``tosa_jax.testing.leak`` (options: ``--help``; usage: that module's
docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys

from tosa_jax.testing.leak import main

if __name__ == "__main__":
    sys.exit(main())
