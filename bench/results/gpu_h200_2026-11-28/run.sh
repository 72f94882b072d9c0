# Twenty-eighth session's device call (the image's jax with its CUDA plugin), from the repo root,
# .gpu28/ carried (untracked): whl/ (tosa-tools without its static libraries, tosa-opt and
# infer_shapes, and its Python dependencies), the CI slices without inputs (the runner
# regenerates them from data_gen), eight zoo graphs. Every step has a limit inside one deadline;
# results go to /tmp/o, packed into $OUT/results.tar.xz after each step.
set -u
T0=$SECONDS
R=/tmp/o; mkdir -p $R
el() { echo "[$((SECONDS-T0)) s] $*"; }
pack() { tar cJf $OUT/results.tar.xz -C /tmp o 2>/dev/null; }
lim() { local left=$(( $1 - (SECONDS-T0) )) own=$2; [ $left -lt $own ] && own=$left; [ $own -lt 1 ] && own=1; echo $own; }
python3 -m pip install -q --no-deps --no-index --no-build-isolation .gpu28/whl/*.whl 2>&1 | grep -v -i warn | tail -2
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
mkdir -p /tmp/s102 /tmp/s11 && tar xJf .gpu28/slice_v1.0.2.tar.xz -C /tmp/s102 && tar xJf .gpu28/slice_v1.1.0-draft.tar.xz -C /tmp/s11
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
S102=$(ls -d /tmp/s102/*); S11=$(ls -d /tmp/s11/*)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $R/devices.txt; nproc | tee -a $R/devices.txt
python3 -c "import jax, jaxlib, numpy; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpy', numpy.__version__, jax.devices())" 2>&1 | tail -1 | tee -a $R/devices.txt
git log --oneline -1 | tee -a $R/devices.txt
el "setup done; 1.0.2 slice: $(find $S102 -name desc.json | wc -l) tests; 1.1 slice: $(find $S11 -name desc.json | wc -l)"
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
t=$SECONDS; timeout $(lim 110 45) python3 .gpu28/maxpool.py > $R/maxpool.log 2>&1; el "maxpool: exit $? in $((SECONDS-t)) s"; grep -v -i warn $R/maxpool.log | tail -3; pack
conf slice102_int_x64off 185 70 --tests $S102 --profile tosa-pro-int
conf slice102_fp 275 85 --tests $S102 --profile tosa-pro-fp
Z=.gpu28/zoo
t=$SECONDS; l=$(lim 500 220); timeout $l python3 bench/benchmark.py --platform gpu --quick --engines tosa_jax_gpu --repeat-ref 1 --ref-budget 1 --models tests/fixtures/*.tosa $Z/lstm_fp32.tosa $Z/unet_fp32.tosa $Z/bert_tiny_fp32.tosa $Z/bert_tiny_int8.tosa $Z/unet_int8.tosa $Z/lstm_int8.tosa $Z/resnet_int8.tosa $Z/mobilenetv2_int8.tosa --json $R/benchmark_gpu.json > $R/benchmark_gpu.log 2>&1; el "benchmark: exit $? in $((SECONDS-t)) s (limit $l)"; grep -v -i warn $R/benchmark_gpu.log | tail -30; pack
conf slice11 560 60 --tests $S11
el all done
