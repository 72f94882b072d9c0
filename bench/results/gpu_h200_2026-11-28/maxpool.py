"""MAX_POOL2D's new form (27th session) on this machine's default device, bit for bit against
the reference model: NaN, +-inf, signed zeros, both nan_modes, the tap chain and the
reduce_window with its first-zero mend (the unit test test_max_pool2d_fp32_special_values)."""
import sys

import jax
import numpy as np

import tosa_jax
from tosa_jax import GraphBuilder
from tosa_jax.testing.reference import run_reference

print("device:", jax.devices()[0])
rng = np.random.default_rng(7)
bad = 0
for kernel, stride, pad in (((3, 3), (2, 2), (1, 0, 1, 1)), ((9, 8), (1, 3), (4, 0, 2, 1)),
                            ((33, 34), (2, 3), (1, 0, 1, 1))):
    for nan_mode in ("PROPAGATE", "IGNORE"):
        for dtype in ("FP32", "FP16", "INT8"):
            if dtype == "INT8":
                x = rng.integers(-128, 128, (2, 40, 41, 5)).astype(np.int8)
            else:
                x = rng.standard_normal((2, 40, 41, 5)).astype(np.float32)
                for value, p in ((np.nan, 0.05), (np.inf, 0.01), (-np.inf, 0.05), (0.0, 0.2),
                                 (-0.0, 0.2)):
                    x[rng.random(x.shape) < p] = value
                x[0, :, :, 0] = np.nan
                x[1, :, :, 1] = -np.inf
                x[:, :, :, 2] = np.where(rng.random(x.shape[:3]) < 0.5, 0.0, -0.0)
                x = x.astype(np.float16 if dtype == "FP16" else np.float32)
            oh = (40 + pad[0] + pad[1] - kernel[0]) // stride[0] + 1
            ow = (41 + pad[2] + pad[3] - kernel[1]) // stride[1] + 1
            b = GraphBuilder()
            xn = b.input("x", x.shape, dtype)
            out = b.op("MAX_POOL2D", [xn], (2, oh, ow, 5), dtype, kernel=kernel, stride=stride,
                       pad=pad, nan_mode=nan_mode)
            data = tosa_jax.write(b.build([out]))
            expected = run_reference(data, {"x": x}, [out])[out]
            model = tosa_jax.load(data)
            got = np.asarray(model.run({"x": x})[out])
            view = np.int8 if dtype == "INT8" else (np.int16 if dtype == "FP16" else np.int32)
            diff = int((got.view(view) != expected.view(view)).sum())
            bad += diff > 0
            print(f"MAX_POOL2D {dtype} kernel {kernel} {nan_mode}: {diff} of {got.size} elements "
                  f"differ (device {model.device or jax.devices()[0]})", flush=True)
print("maxpool:", "FAIL" if bad else "all bit-exact")
sys.exit(1 if bad else 0)
