"""Flatbuffer bindings generated from the TOSA schema (tosa.fbs of tosa-tools 2026.8.0).

Regenerate with (tosa-tools installs both flatc and the schema):

    SITE="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    flatc --python --gen-onefile --gen-object-api -o tosa_jax/_schema "$SITE/bin/tosa.fbs"

The schema is a superset of TOSA 1.0 (it also carries 1.1-draft operators); the reader decides
what it accepts.
"""
