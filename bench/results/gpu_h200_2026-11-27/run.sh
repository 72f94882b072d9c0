# Twenty-third session's device call (the image's jax with its CUDA plugin), from the repo root,
# .whl/ (tosa-tools trimmed + deps) and .gpu23/ (the CI slices without inputs: the runner
# regenerates them from data_gen; four zoo graphs) carried. Every step has a limit inside one
# deadline; results go to /tmp/o, packed into $OUT/results.tar.xz after each step.
set -u
T0=$SECONDS
R=/tmp/o; mkdir -p $R
el() { echo "[$((SECONDS-T0)) s] $*"; }
pack() { tar cJf $OUT/results.tar.xz -C /tmp o 2>/dev/null; }
lim() { local left=$(( $1 - (SECONDS-T0) )) own=$2; [ $left -lt $own ] && own=$left; [ $own -lt 1 ] && own=1; echo $own; }
python3 -m pip install -q --no-deps --no-index --no-build-isolation .whl/*.whl 2>&1 | grep -v -i warn | tail -2
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
mkdir -p /tmp/s102 /tmp/s11 && tar xJf .gpu23/slice102.tar.xz -C /tmp/s102 && tar xJf .gpu23/slice11.tar.xz -C /tmp/s11
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
S102=$(ls -d /tmp/s102/*); S11=$(ls -d /tmp/s11/*)
NEW=(); REST=()
for d in $S11/operators/*/*/; do
  case " add_shape assert_equal_shape avg_pool2d_adaptive cast_from_block_scaled cast_to_block_scaled concat_shape dim div_ceil_shape div_floor_shape exp2_shape log2_ceil_shape log2_floor_shape matmul_t matmul_t_block_scaled max_pool2d_adaptive max_shape min_shape mod_shape mul_shape reshape_block_scaled row_gather row_gather_block_scaled slice_shape sub_shape " in
    *" $(basename $d) "*) NEW+=("$d");; *) REST+=("$d");; esac
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $R/devices.txt; nproc
python3 -c "import jax, jaxlib, numpy; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpy', numpy.__version__, jax.devices())" 2>&1 | tail -1 | tee -a $R/devices.txt
el "setup done; 1.0.2 slice: $(find $S102 -name desc.json | wc -l) tests; 1.1 slice: $(find $S11 -name desc.json | wc -l) tests, ${#NEW[@]} new operators, ${#REST[@]} others"
fails() {  # the tests tosa_jax did not pass, from a step's JSON
  python3 - "$R/$1.json" <<'PY' 2>/dev/null | tee -a $R/$1.fails
import json, sys
d = json.load(open(sys.argv[1]))
for sut, b in d["suts"].items():
    for t in b["tests"]:
        if t["status"] == "failed":
            print(sut.rsplit(".", 1)[-1], t["test"], t["result"], t["message"][:300].replace("\n", " | "))
PY
}
conf() {  # conf NAME UNTIL OWN ARGS...
  local name=$1 l=$(lim $2 $3); shift 3; local t=$SECONDS
  timeout $l python3 bench/conformance.py run --test-type positive -j 16 --json $R/$name.json "$@" > $R/$name.log 2>&1
  local rc=$?; grep -E "passed|failed|FAIL|wall|Error|run so far" $R/$name.log | tail -4
  el "$name: exit $rc in $((SECONDS-t)) s (limit $l)"; fails $name | head -20; pack
}
conf slice11_new 95 70 --tests "${NEW[@]}"
conf slice11_rest 250 150 --tests "${REST[@]}"
conf slice102_int_x64off 310 60 --tests $S102 --profile tosa-pro-int
conf slice102_fp 390 80 --tests $S102 --profile tosa-pro-fp
t=$SECONDS
for g in tests/fixtures/cnn_int8.tosa .gpu23/zoo/bert_tiny_int8.tosa; do
  rm -rf /tmp/fc; mkdir /tmp/fc
  for round in compiled cached; do
    timeout $(lim 425 20) python3 .gpu23/calls.py $g /tmp/fc $R/calls_prof.txt 2>&1 | grep -v -i warn | tee -a $R/calls.log
  done
done
el "calls: $((SECONDS-t)) s"; pack
t=$SECONDS; l=$(lim 500 75); timeout $l python3 bench/benchmark.py --platform gpu --quick --engines tosa_jax_gpu --repeat-ref 1 --ref-budget 1 --models tests/fixtures .gpu23/zoo --json $R/benchmark_gpu.json > $R/benchmark_gpu.log 2>&1; el "benchmark: exit $? in $((SECONDS-t)) s (limit $l)"; grep -v -i warn $R/benchmark_gpu.log | tail -22; pack
conf slice102_int_x64on 555 55 --tests $S102 --profile tosa-pro-int --x64
el all done
