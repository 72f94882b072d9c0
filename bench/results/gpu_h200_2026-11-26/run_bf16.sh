# The device call of the thirteenth session (see ../gpu_h200_2026-11-26.md), run from the repo
# root with .gpu/ holding: whl/ (tosa-tools and its deps), slice.tar.xz (the CI slice),
# zooio/ and etlstm/ (graphs with the reference model's .io.npz), old/ (HEAD before the change
# in the installed layout), ab.py (this folder's) and gcheck.py (the ninth session's).
set -u
python3 -m pip install -q --no-deps --no-index --no-build-isolation .gpu/whl/*.whl 2>&1 | tail -1
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . 2>&1 | tail -1
mkdir -p /tmp/g && tar xJf .gpu/slice.tar.xz -C /tmp/g
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
SLICE=$(ls -d /tmp/g/tosa-tools-* | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import jax, jaxlib; print(jax.__version__, jaxlib.__version__, jax.devices())"
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/unit/test_numerics.py -k "bf16 or on_cpu_else" 2>&1 | tail -3; echo "== unit $((SECONDS-t0)) s"
t0=$SECONDS; timeout 120 python3 bench/conformance.py run --tests "$SLICE" --test-type positive --profile tosa-pro-int -j 16 --strict --json $OUT/conf_int_x64_off.json 2>&1 | grep -E "wall|FAIL|failed" | head -8; echo "== slice int x64 off $((SECONDS-t0)) s"
for g in cnn_int8 mlp_attn_int8 bert_tiny_int8 unet_int8 lstm_int8 resnet_int8 mobilenetv2_int8; do for t in old new; do
  if [ $t = old ]; then PP=.gpu/old; else PP=; fi
  PYTHONPATH=$PP timeout 80 python3 .gpu/ab.py $t .gpu/zooio/$g.tosa 2>&1 | grep -E '^\{|Error' | tee -a $OUT/ab.jsonl
done; done
t0=$SECONDS; timeout 120 python3 bench/conformance.py run --tests "$SLICE" --test-type positive --profile tosa-pro-int -j 16 --strict --x64 --json $OUT/conf_int_x64_on.json 2>&1 | grep -E "wall|FAIL|failed" | head -8; echo "== slice int x64 on $((SECONDS-t0)) s"
t0=$SECONDS; timeout 90 python3 bench/conformance.py run --tests "$SLICE" --test-type positive --profile tosa-pro-fp --operators CONV2D CONV3D DEPTHWISE_CONV2D TRANSPOSE_CONV2D MATMUL -j 16 --strict 2>&1 | grep -E "wall|FAIL|failed" | head -5; echo "== fp contractions $((SECONDS-t0)) s"
t0=$SECONDS; timeout 120 python3 .gpu/gcheck.py 2>&1 | grep -v Warn | tail -12; echo "== graphs $((SECONDS-t0)) s"
