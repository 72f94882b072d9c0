"""Flatbuffer bindings generated from the TOSA schema (tosa.fbs of tosa-tools 2026.8.0).

Regenerate with (tosa-tools installs both flatc and the schema); the output is byte-identical
to the committed file:

    SITE="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$SITE/bin/flatc" --python --python-typing --gen-onefile --gen-object-api \
        -o tosa_jax/_schema "$SITE/bin/tosa.fbs"

The schema is TOSA 1.1 (draft) as tosa-tools 2026.8 writes it: the 1.0 operators and types plus
1.1's (MATMUL_T, ROW_GATHER, the block-scaled and shape operators, INT64, the MX types). The
reader decides what a graph may use from its version stamp: 1.0 graphs keep TOSA 1.0's rules.
"""

from tosa_jax._schema import fasttable, tosa_generated

fasttable.install(tosa_generated)
