#!/usr/bin/env bash
# The main job on a bundled example: run an ExecuTorch-exported int8 CNN with tosa_jax.
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
cd "$ROOT"
tosa-jax info tests/fixtures/cnn_int8.tosa
tosa-jax run tests/fixtures/cnn_int8.tosa tests/fixtures/cnn_int8.input.npy --print -o .cache/example
