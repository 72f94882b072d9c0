# Seventeenth session's device call (H100/H200, the image's jax with its CUDA plugin), from the
# repo root, .whl/ (tosa-tools trimmed + deps) and .gpu17/ (slice.tar.xz, s2.tar.xz, zoo/) carried.
# Every step has a limit inside one deadline; results go to /tmp/o, packed into
# $OUT/results.tar.xz after each step (the tool returns at most 8 files).
set -u
T0=$SECONDS
R=/tmp/o; mkdir -p $R
el() { echo "[$((SECONDS-T0)) s] $*"; }
pack() { tar cJf $OUT/results.tar.xz -C /tmp o 2>/dev/null; }
lim() { local until=$1 own=$2 left=$(( $1 - (SECONDS-T0) )); [ $left -lt $own ] && own=$left; [ $own -lt 1 ] && own=1; echo $own; }
python3 -m pip install -q --no-deps --no-index --no-build-isolation .whl/*.whl 2>&1 | grep -v -i warn | tail -2
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
mkdir -p /tmp/g /tmp/s2 && tar xJf .gpu17/slice.tar.xz -C /tmp/g && tar xJf .gpu17/s2.tar.xz -C /tmp/s2
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
SLICE=$(dirname $(find /tmp/g -name operators -type d | head -1)); S2=$(dirname $(find /tmp/s2 -name operators -type d | head -1))
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $R/devices.txt; nproc
python3 -c "import jax, jaxlib, numpy; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpy', numpy.__version__, jax.devices())" 2>&1 | tail -1 | tee -a $R/devices.txt
el "setup done; slice $SLICE: $(find $SLICE -name desc.json | wc -l) tests; s2 $S2: $(find $S2 -name desc.json | wc -l)"
conf() {  # conf NAME UNTIL OWN ARGS...
  local name=$1 l=$(lim $2 $3); shift 3; local t=$SECONDS
  timeout $l python3 bench/conformance.py run --test-type positive -j 16 --json $R/$name.json "$@" > $R/$name.log 2>&1
  local rc=$?; grep -E "passed|failed|FAIL|wall|Error|run so far" $R/$name.log | tail -5
  el "$name: exit $rc in $((SECONDS-t)) s (limit $l)"; pack
}
conf slice_int_x64off 80 70 --tests $SLICE --profile tosa-pro-int
conf slice_fp 170 90 --tests $SLICE --profile tosa-pro-fp
t=$SECONDS; timeout $(lim 240 70) python3 bench/erf_ulp.py > $R/erf_ulp_gpu.log 2>&1; el "erf_ulp: exit $? in $((SECONDS-t)) s"; tail -3 $R/erf_ulp_gpu.log; pack
conf s2_matmul_conv2d 300 100 --tests $S2 --operators MATMUL CONV2D
conf s2_depthwise 300 70 --tests $S2 --operators DEPTHWISE_CONV2D
conf s2_transpose 300 60 --tests $S2 --operators TRANSPOSE_CONV2D
conf s2_conv3d 300 50 --tests $S2 --operators CONV3D
t=$SECONDS; l=$(lim 400 100); timeout $l python3 bench/benchmark.py --platform gpu --quick --engines tosa_jax_gpu --repeat-ref 1 --ref-budget 1 --models tests/fixtures .gpu17/zoo --json $R/benchmark_gpu.json > $R/benchmark_gpu.log 2>&1; el "benchmark: exit $? in $((SECONDS-t)) s (limit $l)"; grep -v -i warn $R/benchmark_gpu.log | tail -20; pack
t=$SECONDS; l=$(lim 440 40); timeout $l python3 bench/first_result.py tests/fixtures/cnn_int8.tosa .gpu17/zoo/bert_tiny_int8.tosa 2>&1 | grep -v -i warn | tee $R/first_result.log; el "first_result in $((SECONDS-t)) s"; pack
mkdir -p /tmp/fc && timeout 20 python3 -c "import tosa_jax, numpy as np; m=tosa_jax.load('tests/fixtures/cnn_int8.tosa', cache='/tmp/fc'); m(np.load('tests/fixtures/cnn_int8.input.npy'))" >/dev/null 2>&1
timeout $(lim 465 25) python3 .gpu17/prof_cached.py tests/fixtures/cnn_int8.tosa /tmp/fc $R/prof_cached.txt 2>&1 | grep -v -i warn; pack
conf slice_int_x64on 525 60 --tests $SLICE --profile tosa-pro-int --x64
el all done
