"""TOSA conformance suite for tosa_jax: generate it with tosa-tools, judge tosa_jax with the
official runner and verifier, print a pass table per operator.

The command line of ``tosa_jax.testing.conformance`` (commands and options: ``--help`` and that
module's docstring), where the harness lives so that tests/ use it without importing bench/::

  python bench/conformance.py generate --out /work/conf_full -j 2
  python bench/conformance.py slice            # the CI slice (cached), what scripts/test.sh runs
  python bench/conformance.py run --tests /work/conf_full -j 2 --json conformance.json
  python bench/conformance.py table --json conformance.json --markdown --out TABLE.md
"""

import sys

from tosa_jax.testing.conformance import main

if __name__ == "__main__":
    sys.exit(main())
