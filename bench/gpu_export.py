"""Every graph exported for the CUDA and ROCm platforms on a machine without a GPU, and its
StableHLO checked for what would tie integer exactness to the CPU.

The command line of ``tosa_jax.testing.gpu_export`` (options: ``--help``; usage: that module's
docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys

from tosa_jax.testing.gpu_export import main

if __name__ == "__main__":
    sys.exit(main())
