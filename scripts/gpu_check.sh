#!/usr/bin/env bash
# tosa_jax on a GPU machine, judged by the oracles: run this when one is available.
#
#   bash scripts/gpu_check.sh [OUT_DIR]          (default OUT_DIR: gpu_check_out)
#
# 1. An environment with the test tools and JAX's GPU plugin:
#    - by default the venv of scripts/_venv.sh (test extra) plus the plugin for its jax version
#      (pip install "jax[cuda12]==VERSION"; TOSA_JAX_GPU_PLATFORM=rocm installs jax-rocm7-plugin
#      and jax-rocm7-pjrt). Without network, TOSA_JAX_GPU_WHEELS=DIR holds the wheels.
#    - or TOSA_JAX_GPU_PYTHON=python3: a Python that already has JAX with its GPU plugin (a GPU
#      machine's image, offline). tosa_jax (editable) and tosa-tools with its Python
#      dependencies are installed into its environment from TOSA_JAX_GPU_WHEELS, without
#      dependencies and without network (tosa-tools pins an older numpy than such images have;
#      the image's numpy, ml_dtypes and flatbuffers are kept).
# 2. The CI's conformance slice (tosa_jax.testing.conformance.CI_SELECTION; taken from
#    .cache/conformance, generated there if missing) run on the GPU by the official runner and
#    judged by tosa_verify against the reference model: its PRO-INT tests with jax_enable_x64
#    off and on (integers must be identical), its PRO-FP tests with x64 off (the spec's
#    compliance bounds). TOSA_JAX_GPU_SLICE_PROFILE=all runs the whole slice in one step.
#    Then the TOSA 1.1.0-draft slice (CI_SELECTION_1_1), every profile and extension, x64 off.
# 3. bench/benchmark.py --platform gpu on the fixtures and the zoo in .cache/zoo (when exported):
#    tosa_jax's GPU outputs against the reference model (integers identical), batch-1 latency,
#    batch throughput and evaluate. TOSA_JAX_GPU_BENCH_ENGINES (default tosa_jax_gpu: the GPU
#    alone; tosa_jax,reference adds the CPU figures of the same machine);
#    TOSA_JAX_GPU_BENCH_ARGS: more options, e.g. "--repeat-ref 1 --ref-budget 1".
# 4. bench/first_result.py: a fresh process's first result on the GPU, compiled and then
#    from the persistent compile cache (cnn_int8; resnet_int8 and lstm_int8 of the zoo).
# 5. bench/gpu_export.py on the fixtures and the slices (needs no GPU; the record of what the GPU
#    was given). TOSA_JAX_GPU_EXPORT=0 leaves it out (CI's tests/unit/test_gpu_export.py runs it).
# TOSA_JAX_CONFORMANCE_JOBS: the runner's processes (default: the cores, at most 16);
# TOSA_JAX_GPU_STEP_TIMEOUT: seconds a step may take (default: no limit).
# Every step runs; the exit status is 1 when any failed. Logs and JSON go to OUT_DIR.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:-gpu_check_out}" && cd "${1:-gpu_check_out}" && pwd)"
cd "$ROOT"
PLATFORM="${TOSA_JAX_GPU_PLATFORM:-cuda}"
export TOSA_JAX_GPU_PLATFORM="$PLATFORM"
WHEELS="${TOSA_JAX_GPU_WHEELS:-}"
if [ -n "${TOSA_JAX_GPU_PYTHON:-}" ]; then
  PY="$(command -v "$TOSA_JAX_GPU_PYTHON")" || { echo "gpu_check: no $TOSA_JAX_GPU_PYTHON" >&2; exit 2; }
  pipi=("$PY" -m pip install -q --no-deps --no-index --no-build-isolation)
  if ! "$PY" -c "import runner.tosa_verif_run_tests" >/dev/null 2>&1; then
    [ -n "$WHEELS" ] || { echo "gpu_check: tosa-tools missing: set TOSA_JAX_GPU_WHEELS" >&2; exit 2; }
    echo "== installing the wheels of $WHEELS into $PY's environment"
    if ! "${pipi[@]}" "$WHEELS"/*.whl; then
      # (an H200 image's pip failed on the whole list at once, IndexError, 2026-11-28; each
      # wheel alone installed)
      for w in "$WHEELS"/*.whl; do "${pipi[@]}" "$w" || exit 2; done
    fi
  fi
  if ! "${pipi[@]}" -e "$ROOT"; then
    # An old setuptools cannot make editable installs offline: the installed layout
    # (lowering/ as tosa_jax.lowering...) as a folder of links on PYTHONPATH instead.
    echo "== tosa_jax from $ROOT through links (no editable install here)"
    SRC="$(mktemp -d)/tosa_jax"
    mkdir "$SRC"
    ln -s "$ROOT"/tosa_jax/* "$SRC"/
    for d in lowering profiles hw_models; do ln -s "$ROOT/$d" "$SRC/$d"; done
    export PYTHONPATH="$(dirname "$SRC")${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export PATH="$(dirname "$PY"):$PATH"
else
  source scripts/_venv.sh test
  set +e
  PY=python
fi
set +e
# several processes share the GPU (the conformance runner's jobs): no preallocation
export XLA_PYTHON_CLIENT_PREALLOCATE=false

have_gpu() { JAX_PLATFORMS="$PLATFORM" "$PY" -c "import jax; print(jax.devices())" >/dev/null 2>&1; }
if ! have_gpu && [ -z "${TOSA_JAX_GPU_PYTHON:-}" ]; then
  version="$("$PY" -c 'import jax; print(jax.__version__)')"
  if [ "$PLATFORM" = rocm ]; then pkgs=("jax-rocm7-plugin==$version" "jax-rocm7-pjrt==$version")
  else pkgs=("jax[cuda12]==$version"); fi
  echo "== installing ${pkgs[*]}"
  if [ -n "$WHEELS" ]; then
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" "${pkgs[@]}"
  else
    "$PY" -m pip install -q "${pkgs[@]}"
  fi
fi
if ! have_gpu; then
  JAX_PLATFORMS="$PLATFORM" "$PY" -c "import jax; print(jax.devices())"
  echo "gpu_check: JAX finds no $PLATFORM device" >&2
  exit 2
fi
JAX_PLATFORMS="$PLATFORM" "$PY" -c "import jax, jaxlib; print('jax', jax.__version__, \
'jaxlib', jaxlib.__version__, 'devices:', jax.devices())" | tee "$OUT/devices.txt"
command -v nvidia-smi >/dev/null && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1

status=0
LIMIT=()
[ -n "${TOSA_JAX_GPU_STEP_TIMEOUT:-}" ] && LIMIT=(timeout "$TOSA_JAX_GPU_STEP_TIMEOUT")
step() {  # step NAME COMMAND...: run, log, remember a failure
  local name="$1"; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "${LIMIT[@]}" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || status=1
}

SLICE="$("$PY" -c "
from tosa_jax.testing import conformance as c
print(c.cached_slice(c.CI_CACHE, c.CI_SELECTION, progress=True))" | tail -n 1)" || exit 2
SLICE11="$("$PY" -c "
from tosa_jax.testing import conformance as c
print(c.cached_slice(c.CI_CACHE, c.CI_SELECTION_1_1, progress=True))" | tail -n 1)" || exit 2
CORES="$(nproc)"
JOBS="${TOSA_JAX_CONFORMANCE_JOBS:-$((CORES < 16 ? CORES : 16))}"
conformance() {  # conformance PROFILE X64(on/off)
  local flag=(); [ "$2" = on ] && flag=(--x64)
  [ "$1" = all ] || flag+=(--profile "$1")
  step "conformance_$1_x64_$2" env JAX_PLATFORMS="$PLATFORM" \
    "$PY" bench/conformance.py run --tests "$SLICE" --test-type positive \
    -j "$JOBS" --strict --json "$OUT/conformance_$1_x64_$2.json" "${flag[@]}"
}
if [ "${TOSA_JAX_GPU_SLICE_PROFILE:-}" = all ]; then
  conformance all off
else
  conformance tosa-pro-int off
  conformance tosa-pro-int on
  conformance tosa-pro-fp off
fi
step conformance_1.1 env JAX_PLATFORMS="$PLATFORM" "$PY" bench/conformance.py run \
  --tests "$SLICE11" --test-type positive -j "$JOBS" --strict --json "$OUT/conformance_1.1.json"
models=(tests/fixtures)
[ -d .cache/zoo ] && models+=(.cache/zoo)
read -r -a bench_args <<<"${TOSA_JAX_GPU_BENCH_ARGS:-}"
step benchmark_gpu "$PY" bench/benchmark.py --platform gpu --quick --models "${models[@]}" \
  --engines "${TOSA_JAX_GPU_BENCH_ENGINES:-tosa_jax_gpu}" --json "$OUT/benchmark_gpu.json" \
  "${bench_args[@]}"
first=(tests/fixtures/cnn_int8.tosa)
for g in resnet_int8 lstm_int8; do [ -f ".cache/zoo/$g.tosa" ] && first+=(".cache/zoo/$g.tosa"); done
step first_result_gpu env JAX_PLATFORMS="$PLATFORM" "$PY" bench/first_result.py "${first[@]}"
if [ "${TOSA_JAX_GPU_EXPORT:-1}" != 0 ]; then
  step gpu_export "$PY" bench/gpu_export.py --sources fixtures zoo slice slice-1.1 \
    --json "$OUT/gpu_export.json"
fi
echo "gpu_check: $([ $status -eq 0 ] && echo passed || echo FAILED); results in $OUT"
exit $status
