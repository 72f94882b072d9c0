"""What XLA's GPU backend gets wrong, on a GPU machine: which integer contraction forms it sums
exactly, and where given conformance tests first differ from the CPU (jaxpr equation by
equation, each equation run eagerly on both devices).

    python bench/gpu_diagnose.py SLICE_DIR TESTS.txt   (TESTS.txt: paths under SLICE_DIR/operators)

1. int8 x int8 -> int32, int32 x int32 and f32 (HIGHEST) matrix products of integer data, alone
   and with an epilogue, at several shapes: exact or not against numpy, and their time.
2. f32 convolutions of integer data: whether the result stays integral (no Winograd/FFT error).
3. For each listed test: the jitted result on the GPU against the CPU's, then the first jaxpr
   equation whose eager result differs (or the error).
4. Every float convolution and MATMUL test of the slice on the GPU in its own process (an XLA
   abort kills only that one), against tosa_jax on the CPU.
DIAG_GPU=cpu runs it on a machine without a GPU (the CPU stands in; nothing should differ).
The 2026-11-26 H200 run: bench/results/gpu_h200_2026-11-26/diagnosis.log.
"""
import inspect
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

# bench/conformance.py would shadow tosa-tools' conformance package (conformance_sut needs it)
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

CPU, GPU = jax.devices("cpu")[0], jax.devices(os.environ.get("DIAG_GPU", "cuda"))[0]
GNAME = os.environ.get("DIAG_GPU", "gpu")
HI = lax.Precision.HIGHEST
SLICE = Path(sys.argv[1])
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}]", *a, flush=True)


def timed(f, args, n=10):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


def wrap(v):
    return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


# 1. contraction forms ------------------------------------------------------------------------
rng = np.random.default_rng(0)
dims = (((2,), (1,)), ((0,), (0,)))
forms = {
    "s8dot": lambda x, y: lax.dot_general(x, y, dims, preferred_element_type=jnp.int32),
    "s32dot": lambda x, y: lax.dot_general(x.astype(jnp.int32), y.astype(jnp.int32), dims,
                                           preferred_element_type=jnp.int32),
    "f32dot": lambda x, y: lax.dot_general(x.astype(jnp.float32), y.astype(jnp.float32), dims,
                                           precision=HI,
                                           preferred_element_type=jnp.float32).astype(jnp.int32),
}
def with_epilogue(f):
    return lambda x, y: f(x, y) - 3 * jnp.sum(x.astype(jnp.int32), axis=2, keepdims=True) \
        + jnp.int32(7) * jnp.sum(y.astype(jnp.int32), axis=1, keepdims=True) + 11


for name in list(forms):
    forms[name + "+epi"] = with_epilogue(forms[name])
for b, m, k, n in [(2, 2, 6, 8), (1, 2646, 2, 2), (3, 100, 27, 16), (2, 13, 1, 5),
                   (1, 64, 1024, 64), (1, 3136, 576, 64), (1, 196, 2304, 256),
                   (8, 784, 1152, 128)]:
    a = rng.integers(-128, 128, (b, m, k), dtype=np.int8)
    c = rng.integers(-128, 128, (b, k, n), dtype=np.int8)
    raw = np.einsum("bmk,bkn->bmn", a.astype(np.int64), c.astype(np.int64))
    epi = raw - 3 * a.astype(np.int64).sum(2, keepdims=True) + 7 * c.astype(np.int64).sum(
        1, keepdims=True) + 11
    ag, cg = jax.device_put(a, GPU), jax.device_put(c, GPU)
    out = []
    for name, f in forms.items():
        try:
            jf = jax.jit(f)
            got = np.asarray(jf(ag, cg)).astype(np.int64)
            want = wrap(epi if name.endswith("epi") else raw)
            bad = int(np.sum(got != want))
            ms = timed(jf, (ag, cg))
            out.append(f"{name}:{'ok' if bad == 0 else f'BAD{bad}'}/{ms:.3f}ms")
        except Exception as e:
            out.append(f"{name}:ERR {str(e).splitlines()[0][:80]}")
    log(f"dot b{b} m{m} k{k} n{n}:", " ".join(out))

# f32 convolution of integer values (Winograd/FFT would not be exact)
for (n_, h, w_, ci, co, kh) in [(1, 56, 56, 64, 64, 3), (1, 14, 14, 256, 256, 3),
                                (2, 11, 44, 13, 3, 3)]:
    x = rng.integers(-128, 128, (n_, h, w_, ci)).astype(np.float32)
    wt = rng.integers(-128, 128, (kh, kh, ci, co)).astype(np.float32)
    ks = kh * kh * ci
    f = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                                      dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                      precision=HI))
    got = np.asarray(f(jax.device_put(x, GPU), jax.device_put(wt, GPU)))
    ref = np.asarray(f(jax.device_put(x, CPU), jax.device_put(wt, CPU)))
    log(f"f32 conv {x.shape} k{kh} (K={ks}, sums up to 2^{np.log2(ks * 16384):.0f}): "
        f"max |gpu - cpu| {np.max(np.abs(got.astype(np.float64) - ref)):.3g}, non-integers "
        f"{int(np.sum(got != np.round(got)))}")

# 2. failing tests: CPU vs GPU, equation by equation --------------------------------------------
from jax._src import core  # noqa: E402

import tosa_jax  # noqa: E402
from tosa_jax.testing import conformance_sut as sut  # noqa: E402

FAILED = [line.strip() for line in Path(sys.argv[2]).read_text().splitlines() if line.strip()]


def inputs_of(test_dir, model):
    feeds = sut.read_inputs(test_dir, json.loads((test_dir / "desc.json").read_text()), model)
    return [feeds[s.name] for s in model.inputs]


def eval_eqns(closed, args, dev):
    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for v, c in zip(closed.jaxpr.constvars, closed.consts):
        env[v] = jax.device_put(c, dev)
    for v, a in zip(closed.jaxpr.invars, jax.tree.leaves(args), strict=True):
        env[v] = jax.device_put(a, dev)
    trace = []
    with jax.default_device(dev):
        for eqn in closed.jaxpr.eqns:
            r = eqn.primitive.get_bind_params(eqn.params)
            subfuns, params = r if isinstance(r, tuple) else ((), r)
            outs = eqn.primitive.bind(*subfuns, *[read(v) for v in eqn.invars], **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
            trace.append((eqn, [np.asarray(o) for o in outs]))
    return trace


def describe(eqn):
    params = {k: v for k, v in eqn.params.items() if k not in ("jaxpr", "call_jaxpr", "branches")}
    s = str(params)
    return (f"{eqn.primitive.name} in={[str(v.aval) for v in eqn.invars]} "
            f"out={[str(v.aval) for v in eqn.outvars]} {s[:300]}")


for rel in FAILED:
    td = SLICE / "operators" / rel
    name = td.name
    try:
        mc = tosa_jax.load(str(td / "test.tosa"), device="cpu", cache=False)
        x = inputs_of(td, mc)
        want = [np.asarray(o) for o in jax.block_until_ready(mc(*x))]
        try:
            mg = tosa_jax.load(str(td / "test.tosa"), device=GNAME, cache=False)
            got = [np.asarray(o) for o in jax.block_until_ready(mg(*x))]
            same = all(np.array_equal(a, b) for a, b in zip(want, got))
            whole = "jit equal" if same else "jit DIFFERS"
        except Exception as e:
            whole = f"jit ERROR {str(e).splitlines()[0][:100]}"
        fx = mc._bind(tuple(x), {})
        closed = jax.make_jaxpr(mc.fn)(*fx)
        tc = eval_eqns(closed, fx, CPU)
        try:
            tg = eval_eqns(closed, fx, GPU)
        except Exception as e:
            log(f"{name}: {whole}; eager GPU ERROR {str(e).splitlines()[0][:200]}")
            continue
        first = None
        for (eqn, oc), (_, og) in zip(tc, tg):
            if not all(np.array_equal(a, b) for a, b in zip(oc, og)):
                first = eqn
                break
        where = "equal" if first is None else "first differs at " + describe(first)
        log(f"{name}: {whole}; eager {where}")
        if "DIFFERS" in whole and first is None:
            txt = jax.jit(mg.fn).lower(*jax.device_put(fx, GPU)).compile().as_text()
            Path(f"{name[:60]}.gpu.hlo.txt").write_text(txt)
    except Exception as e:
        log(f"{name}: ERROR {type(e).__name__}: {str(e)[:300]}")

# 3. float convolutions and matmuls on the GPU, one process each (a crash is an abort) ----------
fp = []
for d in sorted((SLICE / "operators" / "tensor").glob("*/*")):
    if not (d / "desc.json").is_file():
        continue
    desc = json.loads((d / "desc.json").read_text())
    prof = desc.get("test_requirements", {}).get("profiles_supported", [])
    if "tosa-pro-fp" in prof and any(d.name.startswith(p) for p in (
            "conv2d", "conv3d", "depthwise", "transpose_conv2d", "matmul")):
        fp.append(d)
CHILD = r"""
import sys, numpy as np, jax, tosa_jax, json
from pathlib import Path
from tosa_jax.testing import conformance_sut as sut
""" + inspect.getsource(inputs_of) + r"""
td = Path(sys.argv[1])
mc = tosa_jax.load(str(td / "test.tosa"), device="cpu", cache=False)
x = inputs_of(td, mc)
want = [np.asarray(o).astype(np.float64) for o in mc(*x)]
mg = tosa_jax.load(str(td / "test.tosa"), device=sys.argv[2], cache=False)
got = [np.asarray(o).astype(np.float64) for o in mg(*x)]
fin = [np.isfinite(a) & np.isfinite(b) for a, b in zip(want, got)]
err = max(float(np.max(np.abs(a - b)[f] / np.maximum(np.abs(a[f]), 1e-30), initial=0))
          for a, b, f in zip(want, got, fin))
nonfin = sum(int(np.sum(~f & ~((a == b) | (np.isnan(a) & np.isnan(b)))))
             for a, b, f in zip(want, got, fin))
print("maxrel", err, "nonfinite-mismatch", nonfin)
"""


def child(d):
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, str(d), GNAME],
                           capture_output=True, text=True, timeout=90,
                           env={**os.environ,
                                "JAX_PLATFORMS": "cuda,cpu" if GNAME == "gpu" else "cpu"})
        tail = (p.stdout.strip().splitlines() or [""])[-1]
        if p.returncode != 0:
            err = [x for x in p.stderr.splitlines() if "Check failed" in x or "Error" in x]
            return f"rc={p.returncode} {(err or [p.stderr[-200:]])[-1][:200]}"
        return tail
    except subprocess.TimeoutExpired:
        return "TIMEOUT"


with ThreadPoolExecutor(12) as ex:
    for d, r in zip(fp, ex.map(child, fp)):
        log(f"FP {d.name}: {r}")
log("done")
