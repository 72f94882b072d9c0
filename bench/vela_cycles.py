"""Our NPU cycle estimates against Vela 5.2's, per NPU partition.

The command line of ``tosa_jax.testing.vela_cycles`` (options: ``--help``; usage: that module's
docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys

from tosa_jax.testing.vela_cycles import main

if __name__ == "__main__":
    sys.exit(main())
