"""Both engines on conformance graphs with random inputs: the reference model binding's status
(VALID / UNPREDICTABLE where the values break a REQUIRE / ERROR) against
tosa_jax.reference_model's, and integer outputs where both are valid.

The command line of ``tosa_jax.testing.requires_diff`` (where the harness lives):

  python bench/requires_diff.py --tests .cache/conformance/<slice> [--json diff.json]
"""

import sys

from tosa_jax.testing.requires_diff import main

if __name__ == "__main__":
    sys.exit(main())
