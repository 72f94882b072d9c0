"""tosa_jax on TFLite models against the TFLite interpreter itself (LiteRT, reference kernels).

The command line of ``tosa_jax.testing.tflite_litert`` (options: ``--help``; usage: that module's
docstring). The harness lives there so that tests/ exercise it without importing bench/.
"""

import sys

from tosa_jax.testing.tflite_litert import main

if __name__ == "__main__":
    sys.exit(main())
