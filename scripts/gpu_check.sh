#!/usr/bin/env bash
# tosa_jax on a GPU machine, judged by the oracles: run this when one is available.
#
#   bash scripts/gpu_check.sh [OUT_DIR]          (default OUT_DIR: gpu_check_out)
#
# 1. The venv with the test tools, plus JAX's GPU plugin for the installed jax version
#    (pip install "jax[cuda12]==VERSION"; for ROCm set TOSA_JAX_GPU_PLATFORM=rocm, which installs
#    jax-rocm7-plugin and jax-rocm7-pjrt). Without network: put the wheels in a directory and
#    set TOSA_JAX_GPU_WHEELS=DIR (installed with --no-index --find-links).
# 2. The INT conformance slice (PRO-INT tests of the CI slice, every extension) run on the GPU
#    by the official runner and judged by tosa_verify against the reference model, with
#    jax_enable_x64 off and on. TOSA_JAX_GPU_SLICE_PROFILE=all runs the whole slice.
# 3. bench/benchmark.py --platform gpu on the fixtures (and the zoo in .cache/zoo when it was
#    exported): tosa_jax's GPU outputs against the reference model (integers identical), with
#    latency and throughput beside the CPU's.
# 4. bench/gpu_export.py on the fixtures and the slice (needs no GPU; the record of what the
#    GPU was given).
# Every step runs; the exit status is 1 when any failed. Logs and JSON go to OUT_DIR.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:-gpu_check_out}" && cd "${1:-gpu_check_out}" && pwd)"
cd "$ROOT"
source scripts/_venv.sh test
set +e
PLATFORM="${TOSA_JAX_GPU_PLATFORM:-cuda}"
export TOSA_JAX_GPU_PLATFORM="$PLATFORM"
# several processes share the GPU (the conformance runner's jobs): no preallocation
export XLA_PYTHON_CLIENT_PREALLOCATE=false

have_gpu() { JAX_PLATFORMS="$PLATFORM" python -c "import jax; print(jax.devices())" >/dev/null 2>&1; }
if ! have_gpu; then
  version="$(python -c 'import jax; print(jax.__version__)')"
  if [ "$PLATFORM" = rocm ]; then pkgs=("jax-rocm7-plugin==$version" "jax-rocm7-pjrt==$version")
  else pkgs=("jax[cuda12]==$version"); fi
  echo "== installing ${pkgs[*]}"
  if [ -n "${TOSA_JAX_GPU_WHEELS:-}" ]; then
    python -m pip install -q --no-index --find-links "$TOSA_JAX_GPU_WHEELS" "${pkgs[@]}"
  else
    python -m pip install -q "${pkgs[@]}"
  fi
fi
if ! have_gpu; then
  JAX_PLATFORMS="$PLATFORM" python -c "import jax; print(jax.devices())"
  echo "gpu_check: JAX finds no $PLATFORM device" >&2
  exit 2
fi
JAX_PLATFORMS="$PLATFORM" python -c "import jax; print('devices:', jax.devices())" | tee "$OUT/devices.txt"
command -v nvidia-smi >/dev/null && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1

status=0
step() {  # step NAME COMMAND...: run, log, remember a failure
  local name="$1"; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || status=1
}

SLICE="$(python - <<'EOF'
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("conf", Path("bench/conformance.py"))
conf = importlib.util.module_from_spec(spec); sys.modules["conf"] = conf; spec.loader.exec_module(conf)
sel = conf.Selection(version="1.0.2", profiles=("all",), extensions=("all",), test_type="positive")
print(conf.cached_slice(Path(".cache/conformance"), sel, 2))
EOF
)"
PROFILE="${TOSA_JAX_GPU_SLICE_PROFILE:-tosa-pro-int}"
JOBS="${TOSA_JAX_CONFORMANCE_JOBS:-2}"
for x64 in off on; do
  flag=(); [ "$x64" = on ] && flag=(--x64)
  step "conformance_${PROFILE}_x64_$x64" env JAX_PLATFORMS="$PLATFORM" \
    python bench/conformance.py run --tests "$SLICE" --profile "$PROFILE" --test-type positive \
    -j "$JOBS" --strict --json "$OUT/conformance_${PROFILE}_x64_$x64.json" "${flag[@]}"
done
models=(tests/fixtures)
[ -d .cache/zoo ] && models+=(.cache/zoo)
step benchmark_gpu python bench/benchmark.py --platform gpu --models "${models[@]}" \
  --engines tosa_jax,reference --json "$OUT/benchmark_gpu.json"
step gpu_export python bench/gpu_export.py --sources fixtures zoo slice \
  --json "$OUT/gpu_export.json"
echo "gpu_check: $([ $status -eq 0 ] && echo passed || echo FAILED); results in $OUT"
exit $status
