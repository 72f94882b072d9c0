"""Make the TFLite test models (tests/fixtures/tflite/): seeded Keras networks converted by
TensorFlow's TFLite converter, each as float32 and as int8 post-training quantized.

Runs in its own virtualenv with TensorFlow (not a dependency of the project)::

    python3 -m venv .cache/venv-tf && .cache/venv-tf/bin/pip install tensorflow-cpu==2.21.0
    .cache/venv-tf/bin/python bench/make_tflite_models.py --out tests/fixtures/tflite

Models (batch 1; weights from ``keras.utils.set_random_seed``; no training, no download):

- ``cnn``: two 3x3 convolutions (ReLU, the second strided), 2x2 max pool, dense head;
- ``mobilenet``: a MobileNetV2 inverted residual (1x1 expand, batch norm, ReLU6, 3x3
  depthwise, 1x1 project, residual add), hard-swish, global average pool, dense head;
- ``lstm`` and ``gru``: one unrolled recurrent layer over 8 steps, dense head on every step;
- ``transformer``: a pre-norm encoder block: layer norm, 2-head self-attention (softmax),
  residual, layer norm, GELU MLP, residual;
- ``op_*``: one operator each (sigmoid, tanh, softmax, GELU, layer norm, dense) on [1, 4, 64],
  to tell which operator a network's difference to LiteRT comes from.

``NAME_fp32.tflite`` is the float model; ``NAME_int8.tflite`` full-integer int8 (int8 input and
output, per-channel weights, as TFLite's converter does by default) calibrated on 64 seeded
N(0, 1) samples. The test data are drawn separately (tests/test_frontends_tflite.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SEED = 0
N_CALIB = 64


def build(name: str):  # -> keras.Model
    import keras
    from keras import layers

    keras.utils.set_random_seed(SEED)
    if name == "cnn":
        x = inp = keras.Input((16, 16, 3), batch_size=1)
        x = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
        x = layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D(2)(x)
        x = layers.Flatten()(x)
        out = layers.Dense(10)(x)
    elif name == "mobilenet":
        x = inp = keras.Input((16, 16, 8), batch_size=1)
        h = layers.Conv2D(32, 1, use_bias=False)(x)
        h = layers.BatchNormalization()(h, training=False)
        h = layers.ReLU(6.0)(h)
        h = layers.DepthwiseConv2D(3, padding="same", use_bias=False)(h)
        h = layers.BatchNormalization()(h, training=False)
        h = layers.ReLU(6.0)(h)
        h = layers.Conv2D(8, 1, use_bias=False)(h)
        h = layers.BatchNormalization()(h, training=False)
        x = layers.Add()([x, h])
        x = layers.Activation("hard_swish")(x)
        x = layers.GlobalAveragePooling2D()(x)
        out = layers.Dense(10)(x)
    elif name in ("lstm", "gru"):
        x = inp = keras.Input((8, 4), batch_size=1)
        rnn = layers.LSTM if name == "lstm" else layers.GRU
        x = rnn(16, return_sequences=True, unroll=True)(x)
        out = layers.Dense(4)(x)
    elif name == "transformer":
        x = inp = keras.Input((8, 16), batch_size=1)
        h = layers.LayerNormalization()(x)
        h = layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
        x = layers.Add()([x, h])
        h = layers.LayerNormalization()(x)
        h = layers.Dense(32, activation="gelu")(h)
        h = layers.Dense(16)(h)
        out = layers.Add()([x, h])
    elif name.startswith("op_"):  # one operator, to tell which one a network's difference is in
        x = inp = keras.Input((4, 64), batch_size=1)
        out = {"op_sigmoid": layers.Activation("sigmoid"), "op_tanh": layers.Activation("tanh"),
               "op_softmax": layers.Softmax(), "op_gelu": layers.Activation("gelu"),
               "op_layernorm": layers.LayerNormalization(),
               "op_dense": layers.Dense(64)}[name](x)
    else:
        raise ValueError(name)
    model = keras.Model(inp, out, name=name)
    # Batch norms with non-trivial statistics, so folding them is tested.
    rng = np.random.default_rng(SEED + 3)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, n).astype(np.float32),
                               rng.normal(0, 0.1, n).astype(np.float32),
                               rng.normal(0, 0.1, n).astype(np.float32),
                               rng.uniform(0.5, 2.0, n).astype(np.float32)])
    return model


MODELS = ["cnn", "mobilenet", "lstm", "gru", "transformer"]
OPS = ["op_sigmoid", "op_tanh", "op_softmax", "op_gelu", "op_layernorm", "op_dense"]


def convert(model, quantize: bool) -> bytes:
    import tensorflow as tf

    shape = tuple(model.inputs[0].shape)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if quantize:
        rng = np.random.default_rng(SEED + 1)
        calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(N_CALIB)]
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([c] for c in calib)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="+", choices=MODELS + OPS,
                    default=MODELS + OPS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        model = build(name)
        for quantize, suffix in ((False, "fp32"), (True, "int8")):
            data = convert(model, quantize)
            path = args.out / f"{name}_{suffix}.tflite"
            path.write_bytes(data)
            print(f"{path}: {len(data)} bytes", flush=True)


if __name__ == "__main__":
    main()
