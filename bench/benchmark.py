"""tosa_jax against the TOSA reference model and IREE (llvm-cpu), in one run on one machine.

    python bench/benchmark.py [--models DIR_OR_FILE ...] [--json out.json] [--quick]
                              [--engines tosa_jax,reference,iree] [--batch 64]

For every graph (``*.tosa``; a directory is taken smallest file first; by default the fixture
networks and the zoo in ``.cache/zoo``) and every engine:

* **latency, batch 1**: median of repeated calls after warm-up, one sample (``NAME.input.npy``
  when it exists, else seeded random data);
* **throughput, batch N** (64): tosa_jax evaluates the batch in one call of
  ``jit(tosa_jax.evaluate.batched(model.fn, chunk))`` on one CPU device (a loop over chunks of
  vmapped samples, ``chunk`` as ``evaluate`` chooses it: ``auto_chunk``);
  the reference model and IREE have batch-1 graphs, so they loop over the N samples;
* **batch N through ``tosa_jax.evaluate``**: what a user calls (numpy in and out), timed over
  repeated calls after the first (which compiles), sharded over one CPU device per core
  (``--host-devices``, as ``tosa-jax eval`` does by default);
* **first result**: what a fresh process pays from the file to the first result. tosa_jax:
  ``tosa_jax.load(path)`` + the first call in a new process (import apart), once with an empty
  compile cache and once more, in another process, from the cache it filled; trace + lower and
  XLA compile apart (per operator: operators other than CONST / CONST_SHAPE). IREE:
  ``tosa-opt`` (flatbuffer -> MLIR) + ``iree-compile`` + module load + run;
* **peak memory**: each engine runs on each graph in its own fresh process, whose resident-set
  high-water mark (``VmHWM``) is read after the batch-1 phase and again after the batch-N phase;
  the process's RSS before the graph is loaded is reported as its baseline. For tosa_jax also
  XLA's own estimate (``memory_analysis``: arguments + outputs + temporaries), for IREE and the
  reference model's command line the peak RSS of the compiler / the CLI process.

The reference model is timed in-process through its Python binding (``tosa_reference_model.run``,
no process start, no file I/O: the stricter comparison for us) and, once or a few times, as the
command line a user would run (process start and .npy I/O included); ``tosa-jax run`` is timed
the same way (``tjCLI``), a new process each time, from the compile cache the first-result
workers filled and one untimed run of its own (a small float graph runs on its numpy program,
an entry of its own), without importing JAX (``tosa_jax.hostexec``, ``tosa_jax.npexec``).
The reference model's batch-N loop covers fewer samples on slow graphs (``--ref-budget``
seconds): the count is in the JSON.

Every engine's batch-1 outputs are compared with the reference model's: integer outputs must be
identical, float outputs within a relative tolerance; a mismatch is flagged in the table.

Ratios: ``x ref`` = reference ms / tosa_jax ms; ``x IREE lat`` = IREE ms / tosa_jax ms (> 1: we
are faster); ``x IREE thr`` = tosa_jax samples/s / IREE samples/s; ``x compile`` = IREE first
call / tosa_jax first call.

Wall times stretch on a loaded machine, long calls most (a batch call is preempted more often
than a short batch-1 call): the CPU time of each measurement (all threads of the worker process)
is recorded beside it, with ratios of its own, as the load-robust figure. The workers inherit the
environment (``XLA_FLAGS``, ``JAX_PLATFORMS``...).

On a GPU (``--platform gpu``; ``scripts/gpu_check.sh`` runs it with the INT conformance slice):
tosa_jax also runs every graph on the GPU, its outputs checked against the reference model like
the others (integers identical); the GPU table follows the CPU one.

IREE runs in its own environment (``--iree-python``, default ``/work/venv-iree/bin/python`` or
``$TOSA_JAX_IREE_PYTHON``): its numpy pin differs from tosa-tools'.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = [ROOT / "tests" / "fixtures", ROOT / ".cache" / "zoo"]
ENGINES = ("tosa_jax", "reference", "iree")
WORKERS = (*ENGINES, "tosa_jax_first")
SEED = 1234

# ---------------------------------------------------------------------------------- helpers
# (used by the parent and by every worker; numpy and the standard library only)


try:
    from tosa_jax.testing import median_ms
except ImportError:  # the IREE worker's own environment has no tosa_jax: the file is stdlib-only
    import importlib.util

    _spec = importlib.util.spec_from_file_location("tosa_jax_testing",
                                                   ROOT / "tosa_jax" / "testing" / "__init__.py")
    assert _spec is not None and _spec.loader is not None
    _testing = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_testing)
    median_ms = _testing.median_ms

CPU_MS: list[float] = []  # CPU ms per call of the last _median_ms (all threads of the process)


def _median_ms(fn: Any, repeat: int, budget_s: float | None = None,
               min_s: float = 0.0) -> tuple[float, int]:
    """tosa_jax.testing.median_ms, with the CPU time per call going to CPU_MS."""
    return median_ms(fn, repeat, budget_s, cpu_ms=CPU_MS, min_s=min_s)


def _proc_status(key: str) -> int | None:
    """A /proc/self/status memory field in bytes (VmRSS, VmHWM), None where unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_rss() -> int:
    """The process's resident-set high-water mark in bytes."""
    hwm = _proc_status("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> bool:
    """Restart the high-water mark from the current RSS (Linux: clear_refs 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _run_measured(cmd: list[str]) -> tuple[subprocess.CompletedProcess, int]:
    """Run a command; returns its completed process and that child's own peak RSS in bytes
    (wait4's rusage: this child only, not every child the caller ever waited for)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read()),
                usage.ru_maxrss * 1024)


def _load_inputs(work: Path, n_inputs: int, batch: bool) -> list[np.ndarray]:
    suffix = "_b" if batch else ""
    return [np.load(work / f"in{i}{suffix}.npy") for i in range(n_inputs)]


def _save_outputs(path: Path, outs: list[Any]) -> None:
    np.savez(path, *[np.asarray(o) for o in outs])


# ---------------------------------------------------------------------------------- workers
# Each runs in a fresh process, times one engine on one graph and prints one JSON line.


def worker_tosa_jax(args: argparse.Namespace) -> dict:
    if args.platform == "gpu":  # JAX's name of the GPU platform: cuda (or rocm)
        os.environ["JAX_PLATFORMS"] = os.environ.get("TOSA_JAX_GPU_PLATFORM", "cuda")
    else:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    import tosa_jax
    from tosa_jax.evaluate import auto_chunk, batched
    from tosa_jax.lowering.numerics import lowering_for
    from tosa_jax.model import compile_lowered, no_gc, without_locations

    if args.platform != "gpu" and args.host_devices > 1:
        # evaluate() shards a batch over the local devices: one CPU device per core, as
        # `tosa-jax eval` has by default (IREE's task system uses every core too). Batch-1 calls
        # run on device 0 as before. (This worker runs on the CPU unless --platform gpu; the
        # parent passes no --platform for it, so "auto" must count as the CPU here: before, the
        # test was == "cpu" and evaluate ran on one device.)
        jax.config.update("jax_num_cpu_devices", args.host_devices)

    work = Path(args.work)
    # JAX's one-time set-up of a process (backend, MLIR context and dialects: ~0.1 s), apart
    # from the graph's own trace and lowering; the first-result figures include it.
    t0 = time.perf_counter()
    jax.jit(lambda v: v + 1).lower(np.int32(1)).compile()
    jax_init_ms = (time.perf_counter() - t0) * 1e3
    base = _proc_status("VmRSS")
    t0 = time.perf_counter()
    model = tosa_jax.load(args.model, cache=False)
    load_s = time.perf_counter() - t0
    x = [jax.device_put(a) for a in _load_inputs(work, len(model.inputs), False)]
    jax.block_until_ready(x)

    # First call, from a loaded Model: trace, XLA compile, run; the program model(x) compiles,
    # lowered and compiled as Model does it (traced for this platform alone, the garbage
    # collector held off while tracing, the source locations dropped, large kernels as
    # arguments (tosa_jax.hoist); its XLA options; a small graph without intra-op tasks).
    t0 = time.perf_counter()
    lowered = model._lower(tuple(x))
    t1 = time.perf_counter()
    compiled = compile_lowered(lowered, model.xla_options(tuple(x)),
                               sequential=model.sequential(tuple(x)))
    t2 = time.perf_counter()
    outs = jax.block_until_ready(compiled(*x))
    t3 = time.perf_counter()
    mem = compiled.memory_analysis()
    xla_bytes = None if mem is None else (mem.argument_size_in_bytes + mem.output_size_in_bytes
                                          + mem.temp_size_in_bytes - mem.alias_size_in_bytes)
    _save_outputs(work / f"out_{args.engine_tag}.npz", [np.asarray(o) for o in outs])

    for _ in range(args.warmup):
        jax.block_until_ready(compiled(*x))
    lat_ms, lat_n = _median_ms(lambda: jax.block_until_ready(compiled(*x)), args.repeat,
                               args.budget, args.min_time)
    lat_cpu = CPU_MS[-1]
    # The public API (input checks, device transfer from numpy) on the same executable.
    xh = _load_inputs(work, len(model.inputs), False)
    model.compile(*xh)  # the optimized executable (not the quick tier of a first call)
    jax.block_until_ready(model(*xh))
    api_ms, _ = _median_ms(lambda: jax.block_until_ready(model(*xh)), args.repeat, args.budget,
                           args.min_time)
    peak_b1 = _peak_rss()

    res: dict[str, Any] = {
        "jax_init_ms": jax_init_ms,
        "load_ms": load_s * 1e3, "trace_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3,
        "first_call_ms": (load_s + t3 - t0) * 1e3, "latency_ms": lat_ms, "latency_calls": lat_n,
        "latency_cpu_ms": lat_cpu,
        "api_latency_ms": api_ms, "xla_bytes": xla_bytes, "rss_base": base,
        "rss_peak_b1": peak_b1, "device": str(jax.devices()[0]),
    }
    if args.batch > 1:
        reset = _reset_peak()
        xb = [jax.device_put(a) for a in _load_inputs(work, len(model.inputs), True)]
        # what tosa_jax.evaluate runs per device, with the chunk it chooses (here over the
        # whole batch on device 0)
        chunk = auto_chunk(model, jax.devices()[0].platform, devices=1)
        fb = jax.jit(batched(model.fn, chunk))
        platform = jax.devices()[0].platform
        t0 = time.perf_counter()
        with no_gc(), lowering_for(platform):
            lowered_b = without_locations(fb.lower(*xb))
        cb = compile_lowered(lowered_b, model.xla_options(tuple(xb)))
        res["compile_b_ms"] = (time.perf_counter() - t0) * 1e3
        outs_b = jax.block_until_ready(cb(*xb))
        # sample 0 of the batch must be the batch-1 result
        # (floats: the batched kernels may sum in another order, so within a tolerance)
        res["batch_consistent"] = all(
            np.array_equal(np.asarray(ob)[0], np.asarray(o)) if np.asarray(o).dtype.kind in "iub"
            else np.allclose(np.asarray(ob)[0], np.asarray(o), rtol=1e-4, atol=1e-5)
            for ob, o in zip(outs_b, outs))
        jax.block_until_ready(cb(*xb))
        b_ms, b_n = _median_ms(lambda: jax.block_until_ready(cb(*xb)), args.repeat_b,
                               args.budget, args.min_time)
        res.update(batch_ms=b_ms, batch_calls=b_n, batch_samples=args.batch,
                   throughput=args.batch / (b_ms / 1e3), batch_cpu_ms=CPU_MS[-1],
                   rss_peak_b=_peak_rss() if reset else None)
        # What a user calls: tosa_jax.evaluate on the same samples, repeated (numpy in and
        # out, batches sharded over the local devices); the first call compiles.
        xe = _load_inputs(work, len(model.inputs), True)
        xe = xe[0] if len(xe) == 1 else tuple(xe)
        t0 = time.perf_counter()
        first = tosa_jax.evaluate(model, xe, batch_size=args.batch, progress=False)
        res["evaluate_first_ms"] = (time.perf_counter() - t0) * 1e3
        res.update(evaluate_devices=first.devices, evaluate_chunk=first.chunk, batch_chunk=chunk)
        e_ms, e_n = _median_ms(
            lambda: tosa_jax.evaluate(model, xe, batch_size=args.batch, progress=False),
            args.repeat_b, args.budget, args.min_time)
        res.update(evaluate_ms=e_ms, evaluate_calls=e_n,
                   evaluate_throughput=args.batch / (e_ms / 1e3), evaluate_cpu_ms=CPU_MS[-1])
    return res


def worker_tosa_jax_first(args: argparse.Namespace) -> dict:
    """What a user's fresh process pays: import, ``tosa_jax.load(path)``, the first call, with
    the compile cache in ``--cache-dir`` (empty the first time, filled the second)."""
    t_start, c_start = time.perf_counter(), time.process_time()
    import jax

    import tosa_jax

    t_imp, c_imp = time.perf_counter(), time.process_time()
    model = tosa_jax.load(args.model, cache=args.cache_dir)
    x = _load_inputs(Path(args.work), len(model.inputs), False)
    outs = jax.block_until_ready(model(*x))
    t_end, c_end = time.perf_counter(), time.process_time()
    del outs
    ops = sum(op.op not in ("CONST", "CONST_SHAPE") for op in model.graph.main.operators)
    return {"import_ms": (t_imp - t_start) * 1e3, "import_cpu_ms": (c_imp - c_start) * 1e3,
            "first_result_ms": (t_end - t_imp) * 1e3,
            "first_result_cpu_ms": (c_end - c_imp) * 1e3,
            "source": model.compile_source, "ops": ops}


def worker_reference(args: argparse.Namespace) -> dict:
    import tosa_reference_model as ref

    work = Path(args.work)
    base = _proc_status("VmRSS")
    data = Path(args.model).read_bytes()
    n_in = int(args.n_inputs)
    x = _load_inputs(work, n_in, False)
    t0 = time.perf_counter()
    outs, status = ref.run(data, x)
    first_ms = (time.perf_counter() - t0) * 1e3
    if str(status).split(".")[-1] != "TOSA_VALID":
        raise SystemExit(f"reference model: {status}")
    _save_outputs(work / "out_reference.npz", outs)
    lat_ms, lat_n = _median_ms(lambda: ref.run(data, x), args.repeat_ref,
                               max(args.ref_budget / 2, first_ms / 1e3))
    res: dict[str, Any] = {"first_call_ms": first_ms, "latency_ms": lat_ms,
                           "latency_cpu_ms": CPU_MS[-1],
                           "latency_calls": lat_n + 1, "rss_base": base,
                           "rss_peak_b1": _peak_rss()}
    if args.batch > 1:
        reset = _reset_peak()
        xb = _load_inputs(work, n_in, True)
        # Loop over the batch-1 graph: as many samples as fit the budget (at least 1).
        n = max(1, min(args.batch, math.ceil(args.ref_budget / max(lat_ms / 1e3, 1e-6))))
        t0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(n):
            ref.run(data, [b[i:i + 1].reshape(a.shape) for b, a in zip(xb, x)])
        dt = time.perf_counter() - t0
        res.update(batch_ms=dt * 1e3, batch_samples=n, throughput=n / dt,
                   batch_cpu_ms=(time.process_time() - cpu0) * 1e3,
                   rss_peak_b=_peak_rss() if reset else None)
    return res


def worker_iree(args: argparse.Namespace) -> dict:
    """IREE: flatbuffer -> generic TOSA MLIR (tosa-opt) -> iree-compile llvm-cpu (host CPU)."""
    work = Path(args.work)
    tosa_opt = args.tosa_opt
    compiler = str(Path(sys.executable).parent / "iree-compile")
    if not Path(compiler).exists():
        compiler = shutil.which("iree-compile") or "iree-compile"
    mlir, vmfb = work / "graph.mlir", work / "graph.vmfb"
    t0 = time.perf_counter()
    p = subprocess.run([tosa_opt, "--mlir-print-op-generic", "--tosa-deserialize",
                        f"--tosa-deserialize-filename={args.model}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tosa-opt failed: {p.stderr[-2000:]}")
    mlir.write_text("\n".join(ln for ln in p.stdout.splitlines()
                              if not ln.startswith("WARNING")))
    t1 = time.perf_counter()
    p, compiler_rss = _run_measured(
        [compiler, "--iree-input-type=tosa", "--iree-hal-target-device=local",
         "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
         str(mlir), "-o", str(vmfb)])
    t2 = time.perf_counter()
    if p.returncode != 0:
        raise SystemExit(f"iree-compile failed: {p.stderr[-3000:]}")

    base = _proc_status("VmRSS")
    import iree.runtime as rt

    t3 = time.perf_counter()
    config = rt.Config("local-task")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, vmfb.read_bytes()))
    fn = ctx.modules.module["main"]
    x = _load_inputs(work, int(args.n_inputs), False)

    def call(inputs: list[np.ndarray]) -> list[np.ndarray]:
        r = fn(*inputs)
        r = r if isinstance(r, (tuple, list)) else [r]
        return [o.to_host() for o in r]

    outs = call(x)
    t4 = time.perf_counter()
    _save_outputs(work / "out_iree.npz", outs)
    for _ in range(args.warmup):
        call(x)
    lat_ms, lat_n = _median_ms(lambda: call(x), args.repeat, args.budget, args.min_time)
    res: dict[str, Any] = {"latency_cpu_ms": CPU_MS[-1],
        "tosa_opt_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3,
        "load_run_ms": (t4 - t3) * 1e3, "first_call_ms": (t2 - t0 + t4 - t3) * 1e3,
        "latency_ms": lat_ms, "latency_calls": lat_n, "compiler_rss": compiler_rss,
        "rss_base": base, "rss_peak_b1": _peak_rss(), "vmfb_bytes": vmfb.stat().st_size,
    }
    if args.batch > 1:
        reset = _reset_peak()
        xb = _load_inputs(work, int(args.n_inputs), True)
        samples = [[b[i:i + 1].reshape(a.shape) for b, a in zip(xb, x)]
                   for i in range(args.batch)]

        def loop() -> None:
            for s in samples:
                call(s)

        loop()
        b_ms, b_n = _median_ms(loop, args.repeat_b, args.budget, args.min_time)
        res.update(batch_ms=b_ms, batch_calls=b_n, batch_samples=args.batch,
                   throughput=args.batch / (b_ms / 1e3), batch_cpu_ms=CPU_MS[-1],
                   rss_peak_b=_peak_rss() if reset else None)
    return res


def reference_cli(model: Path, work: Path, names_in: list[str], names_out: list[str],
                  repeat: int, exe: str) -> dict:
    """The reference model's command line, as a user runs it: process start and .npy I/O
    included, and the CLI process's peak RSS."""
    out_dir = work / "cli_out"
    out_dir.mkdir(exist_ok=True)
    cmd = [exe, "--tosa_file", model.name, "--flatbuffer_dir", str(model.parent),
           "--output_dir", str(out_dir), "--ofm_name", ",".join(names_out),
           "--ofm_file", ",".join(f"out{i}.npy" for i in range(len(names_out)))]
    if names_in:
        cmd += ["--ifm_name", ",".join(names_in),
                "--ifm_file", ",".join(str(work / f"in{i}.npy") for i in range(len(names_in)))]
    times, peak = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        p, rss = _run_measured(cmd)
        times.append(time.perf_counter() - t0)
        peak = max(peak, rss)
        if p.returncode != 0:
            return {"error": f"reference CLI failed: {p.stdout[-500:]} {p.stderr[-500:]}"}
    return {"latency_ms": statistics.median(times) * 1e3, "calls": len(times),
            "rss_peak": peak}


def tosa_jax_cli(model: Path, work: Path, names_out: list[str], n_inputs: int, repeat: int,
                 exe: str, cache_dir: Path) -> dict:
    """``tosa-jax run`` from the compile cache the first-result workers filled, as a user runs
    it again: the whole process (start, imports, .npy I/O), like the reference model's CLI
    beside it. Its outputs are kept for the check against the reference model's."""
    out_dir = work / "tj_cli_out"
    cmd = [exe, "run", str(model), *(str(work / f"in{i}.npy") for i in range(n_inputs)),
           "-o", str(out_dir)]
    env = {**os.environ, "TOSA_JAX_CACHE_DIR": str(cache_dir)}
    # Once untimed: the CLI runs a small float graph on its numpy program, an entry of its own
    # that the first-result workers (model(x): XLA's float code) did not write.
    subprocess.run(cmd, capture_output=True, text=True, env=env)
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            return {"error": f"tosa-jax run failed: {p.stdout[-500:]} {p.stderr[-500:]}"}
    _save_outputs(work / "out_tosa_jax_cli.npz",
                  [np.load(out_dir / f"{n}.npy") for n in names_out])
    return {"latency_ms": statistics.median(times) * 1e3, "calls": len(times),
            "from_cache": "compile cache" in p.stderr + p.stdout}


# ---------------------------------------------------------------------------------- parent


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cores": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in lscpu.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Hypervisor vendor"):
                info[k.strip()] = v.strip()
    except OSError:
        pass
    try:
        mem = Path("/proc/meminfo").read_text().split("\n")[0].split()
        info["memory_gib"] = round(int(mem[1]) / 2**20, 1)
        info["loadavg_at_start"] = os.getloadavg()
    except (OSError, IndexError, ValueError):
        pass
    import jax

    import tosa_jax  # noqa: F401

    info["jax"] = jax.__version__
    info["devices"] = [str(d) for d in jax.devices()]
    for mod in ("tosa_reference_model",):
        try:
            from importlib.metadata import version

            info["tosa-tools"] = version("tosa-tools")
        except Exception:  # noqa: BLE001
            info[mod] = "?"
    return info


def gpu_available() -> bool:
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def find_models(specs: list[Path]) -> list[Path]:
    out: list[Path] = []
    for s in specs:
        if s.is_dir():
            out += sorted(s.glob("*.tosa"), key=lambda p: (p.stat().st_size, p.name))
        elif s.exists():
            out.append(s)
    return out


def prepare_inputs(model_path: Path, work: Path, batch: int) -> tuple[list[str], list[str], list]:
    """Batch-1 inputs (the graph's example .npy when there is one, else seeded random data) and
    batch-N inputs (sample 0 = the batch-1 sample, the rest seeded random in the same range)."""
    import tosa_jax

    model = tosa_jax.load(model_path)
    rng = np.random.default_rng(SEED)
    example = model_path.with_suffix(".input.npy")
    for i, spec in enumerate(model.inputs):
        dt = spec.np_dtype
        ex = example if i == 0 else model_path.with_suffix(f".input{i}.npy")
        if ex.exists() and np.load(ex).shape == tuple(spec.shape):
            x1 = np.load(ex).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            x1 = rng.integers(max(info.min, -128), min(info.max, 127) + 1, spec.shape).astype(dt)
        elif dt.kind == "b":
            x1 = rng.integers(0, 2, spec.shape).astype(dt)
        else:
            x1 = rng.standard_normal(spec.shape).astype(dt)
        np.save(work / f"in{i}.npy", x1)
        if batch > 1:
            if dt.kind in "iu":
                lo, hi = int(x1.min()), int(x1.max())
                rest = rng.integers(lo, hi + 1, (batch - 1,) + x1.shape).astype(dt)
            elif dt.kind == "b":
                rest = rng.integers(0, 2, (batch - 1,) + x1.shape).astype(dt)
            else:
                std = float(np.std(x1)) or 1.0
                rest = (rng.standard_normal((batch - 1,) + x1.shape) * std
                        + float(np.mean(x1))).astype(dt)
            np.save(work / f"in{i}_b.npy", np.concatenate([x1[None], rest]))
    return ([s.name for s in model.inputs], [s.name for s in model.outputs],
            [s.dtype for s in model.outputs])


def compile_bytecode() -> str:
    """Write tosa_jax's bytecode (.pyc) as ``pip install`` does, so that a fresh worker imports
    what a user's installation imports. An editable install under PYTHONDONTWRITEBYTECODE (this
    project's machines) has none: every fresh process would compile ~170 ms of source, a cost no
    user of the wheel pays. Python reads .pyc files whatever that variable says."""
    import compileall
    import importlib.util

    roots = []
    for name in ("tosa_jax", "tosa_jax.lowering", "tosa_jax.profiles", "tosa_jax.hw_models"):
        spec = importlib.util.find_spec(name)
        roots += list(spec.submodule_search_locations or []) if spec else []
    ok = all(compileall.compile_dir(r, quiet=2) for r in dict.fromkeys(roots))
    return "compiled (as pip install does)" if ok else "partly compiled"


def run_worker(python: str, engine: str, model: Path, work: Path, args: argparse.Namespace,
               n_inputs: int, extra: list[str] | None = None) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", engine, "--model", str(model),
           "--work", str(work), "--n-inputs", str(n_inputs), "--batch", str(args.batch),
           "--repeat", str(args.repeat), "--repeat-b", str(args.repeat_b),
           "--repeat-ref", str(args.repeat_ref), "--warmup", str(args.warmup),
           "--budget", str(args.budget), "--ref-budget", str(args.ref_budget),
           "--min-time", str(args.min_time),
           "--tosa-opt", args.tosa_opt, "--host-devices", str(args.host_devices),
           *(extra or [])]
    env = dict(os.environ)
    env["PYTHONPATH"] = ""  # the IREE env must not pick up ours
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            res = json.loads(line)
            res["worker_wall_s"] = wall
            return res
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][-400:]}


def compare(work: Path, engine: str, ref_dtypes: list[str]) -> dict:
    """The engine's batch-1 outputs against the reference model's."""
    try:
        want = np.load(work / "out_reference.npz")
        got = np.load(work / f"out_{engine}.npz")
    except OSError as e:
        return {"match": None, "detail": f"missing outputs: {e}"}
    worst, exact = 0.0, True
    for k, dt in zip(want.files, ref_dtypes):
        w, g = want[k], got[k] if k in got.files else None
        if g is None or w.shape != g.shape:
            return {"match": False, "detail": f"output {k}: shape {None if g is None else g.shape}"
                                              f" != {w.shape}"}
        if dt.startswith("FP") or dt == "BF16":
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            scale = max(1.0, float(np.max(np.abs(w64)))) if w64.size else 1.0
            err = float(np.max(np.abs(w64 - g64))) / scale if w64.size else 0.0
            worst = max(worst, err)
            exact &= err == 0.0
        elif not np.array_equal(w.astype(np.int64), g.astype(np.int64)):
            diff = int(np.sum(w.astype(np.int64) != g.astype(np.int64)))
            return {"match": False, "detail": f"output {k}: {diff} of {w.size} integers differ"}
    ok = worst <= 1e-3
    return {"match": ok, "bit_exact": exact, "max_rel_err": worst,
            "detail": "" if ok else f"max relative error {worst:.2e}"}


def bench_model(model: Path, args: argparse.Namespace, gpu: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="tj_bench_", dir=args.scratch))
    row: dict[str, Any] = {"graph": model.name, "bytes": model.stat().st_size}
    try:
        names_in, names_out, dtypes = prepare_inputs(model, work, args.batch)
        n_in = len(names_in)
        py = sys.executable
        engines = args.engines.split(",")
        # The reference model always runs: its outputs are the oracle for the others (without
        # its batch loop when it is not benchmarked itself).
        row["reference"] = run_worker(py, "reference", model, work, args, n_in,
                                      None if "reference" in engines else ["--batch", "1"])
        ref_exe = str(Path(py).parent / "tosa_reference_model")
        if Path(ref_exe).exists() and "reference" in engines:
            row["reference_cli"] = reference_cli(model, work, names_in, names_out,
                                                 args.repeat_cli, ref_exe)
        if "tosa_jax" in engines:
            cache_dir = work / "compile_cache"  # empty: the first process compiles
            for tag in ("tosa_jax_first", "tosa_jax_cached"):
                row[tag] = run_worker(py, "tosa_jax_first", model, work, args, n_in,
                                      ["--cache-dir", str(cache_dir)])
            tj_exe = Path(py).parent / "tosa-jax"
            if tj_exe.exists():
                row["tosa_jax_cli"] = tosa_jax_cli(model, work, names_out, n_in,
                                                   args.repeat_cli, str(tj_exe), cache_dir)
                row["tosa_jax_cli"]["check"] = compare(work, "tosa_jax_cli", dtypes)
            row["tosa_jax"] = run_worker(py, "tosa_jax", model, work, args, n_in,
                                         ["--engine-tag", "tosa_jax"])
            row["tosa_jax"]["check"] = compare(work, "tosa_jax", dtypes)
        if gpu and ("tosa_jax" in engines or "tosa_jax_gpu" in engines):
            row["tosa_jax_gpu"] = run_worker(py, "tosa_jax", model, work, args, n_in,
                                             ["--platform", "gpu", "--engine-tag",
                                              "tosa_jax_gpu"])
            row["tosa_jax_gpu"]["check"] = compare(work, "tosa_jax_gpu", dtypes)
        if "iree" in engines and args.iree_python:
            row["iree"] = run_worker(args.iree_python, "iree", model, work, args, n_in)
            row["iree"]["check"] = compare(work, "iree", dtypes)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return row


def _get(row: dict, engine: str, key: str) -> float | None:
    v = row.get(engine, {}).get(key)
    return v if isinstance(v, (int, float)) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def add_ratios(row: dict) -> None:
    tj, ref, iree = "tosa_jax", "reference", "iree"
    row["ratios"] = {
        "vs_reference_latency": _ratio(_get(row, ref, "latency_ms"), _get(row, tj, "latency_ms")),
        "vs_reference_cli_latency": _ratio(_get(row, "reference_cli", "latency_ms"),
                                           _get(row, tj, "latency_ms")),
        "vs_reference_throughput": _ratio(_get(row, tj, "throughput"),
                                          _get(row, ref, "throughput")),
        "vs_iree_latency": _ratio(_get(row, iree, "latency_ms"), _get(row, tj, "latency_ms")),
        "vs_iree_throughput": _ratio(_get(row, tj, "throughput"), _get(row, iree, "throughput")),
        "vs_iree_first_call": _ratio(_get(row, iree, "first_call_ms"),
                                     _get(row, "tosa_jax_first", "first_result_ms")),
        "vs_iree_evaluate": _ratio(_get(row, tj, "evaluate_throughput"),
                                   _get(row, iree, "throughput")),
        # the same from CPU time (all threads): robust to a loaded machine
        "cpu_vs_reference_latency": _ratio(_get(row, ref, "latency_cpu_ms"),
                                           _get(row, tj, "latency_cpu_ms")),
        "cpu_vs_iree_latency": _ratio(_get(row, iree, "latency_cpu_ms"),
                                      _get(row, tj, "latency_cpu_ms")),
        "cpu_vs_iree_throughput": _ratio(_cpu_per_sample(row, iree),
                                         _cpu_per_sample(row, tj)),
    }


def _cpu_per_sample(row: dict, engine: str) -> float | None:
    cpu, n = _get(row, engine, "batch_cpu_ms"), _get(row, engine, "batch_samples")
    return cpu / n if cpu and n else None


def _f(v: float | None, fmt: str, width: int) -> str:
    return f"{'-' if v is None else format(v, fmt):>{width}}"


def _check_mark(row: dict, engine: str) -> str:
    r = row.get(engine)
    if r is None:
        return "-"
    if "error" in r:
        return "ERR"
    c = r.get("check", {})
    if c.get("match") is None:
        return "?"
    if not c["match"]:
        return "WRONG"
    return "exact" if c.get("bit_exact") else f"{c['max_rel_err']:.0e}"


def print_table(rows: list[dict], machine: dict, batch: int) -> None:
    print(f"machine: {machine.get('Model name', '?')}, {machine.get('cores')} cores, "
          f"{machine.get('memory_gib', '?')} GiB, jax {machine.get('jax')} "
          f"{machine.get('devices')}, load at start {machine.get('loadavg_at_start')}")
    print("\nlatency, batch 1 (ms, median) and throughput, batch "
          f"{batch} (samples/s); ratios > 1 mean tosa_jax is faster")
    head = (f"{'graph':<22}{'tj ms':>8}{'ref ms':>9}{'refCLI':>8}{'tjCLI':>7}{'IREE ms':>8}"
            f"{'x ref':>7}"
            f"{'x IREE':>7}{'tj/s':>9}{'eval/s':>9}{'ref/s':>8}{'IREE/s':>8}{'xIREE':>7}"
            f"  check tj/tjCLI/IREE")
    print(head)
    for r in rows:
        q = r.get("ratios", {})
        print(f"{r['graph'][:21]:<22}"
              f"{_f(_get(r, 'tosa_jax', 'latency_ms'), '.3f', 8)}"
              f"{_f(_get(r, 'reference', 'latency_ms'), '.1f', 9)}"
              f"{_f(_get(r, 'reference_cli', 'latency_ms'), '.0f', 8)}"
              f"{_f(_get(r, 'tosa_jax_cli', 'latency_ms'), '.0f', 7)}"
              f"{_f(_get(r, 'iree', 'latency_ms'), '.3f', 8)}"
              f"{_f(q.get('vs_reference_latency'), '.0f', 7)}"
              f"{_f(q.get('vs_iree_latency'), '.2f', 7)}"
              f"{_f(_get(r, 'tosa_jax', 'throughput'), '.0f', 9)}"
              f"{_f(_get(r, 'tosa_jax', 'evaluate_throughput'), '.0f', 9)}"
              f"{_f(_get(r, 'reference', 'throughput'), '.1f', 8)}"
              f"{_f(_get(r, 'iree', 'throughput'), '.0f', 8)}"
              f"{_f(q.get('vs_iree_evaluate'), '.2f', 7)}"
              f"  {_check_mark(r, 'tosa_jax')}/{_check_mark(r, 'tosa_jax_cli')}/"
              f"{_check_mark(r, 'iree')}")
    print("\nfirst result (s; a fresh process: load + first call, after import; 'cached': a "
          "second process, compile cache filled), trace+lower per operator (ms), XLA compile "
          "(s), and peak memory (MiB: process high-water mark; XLA: compiled estimate)")
    print(f"{'graph':<22}{'ops':>5}{'import':>7}{'tj 1st':>8}{'cached':>7}{'ms/op':>6}"
          f"{'compile':>8}{'IREE 1st':>9}{'(compile)':>10}{'xIREE':>7}{'tj RSS':>8}{'XLA':>7}"
          f"{'ref RSS':>8}{'refCLI':>8}{'IREE RSS':>9}{'iree-c':>8}")
    mib = 2**20

    def m(r: dict, e: str, k: str) -> float | None:
        v = _get(r, e, k)
        return None if v is None else v / mib

    def peak(r: dict, e: str) -> float | None:
        vals = [v for v in (m(r, e, "rss_peak_b1"), m(r, e, "rss_peak_b")) if v is not None]
        return max(vals) if vals else None

    def sec(r: dict, e: str, k: str) -> float | None:
        v = _get(r, e, k)
        return None if v is None else v / 1e3

    for r in rows:
        ops = _get(r, "tosa_jax_first", "ops")
        trace = _get(r, "tosa_jax", "trace_ms")
        print(f"{r['graph'][:21]:<22}{_f(ops, 'd', 5)}"
              f"{_f(sec(r, 'tosa_jax_first', 'import_ms'), '.2f', 7)}"
              f"{_f(sec(r, 'tosa_jax_first', 'first_result_ms'), '.3f', 8)}"
              f"{_f(sec(r, 'tosa_jax_cached', 'first_result_ms'), '.3f', 7)}"
              f"{_f(trace / ops if trace and ops else None, '.2f', 6)}"
              f"{_f(sec(r, 'tosa_jax', 'compile_ms'), '.2f', 8)}"
              f"{_f(sec(r, 'iree', 'first_call_ms'), '.2f', 9)}"
              f"{_f(sec(r, 'iree', 'compile_ms'), '.2f', 10)}"
              f"{_f(r.get('ratios', {}).get('vs_iree_first_call'), '.2f', 7)}"
              f"{_f(peak(r, 'tosa_jax'), '.0f', 8)}{_f(m(r, 'tosa_jax', 'xla_bytes'), '.1f', 7)}"
              f"{_f(peak(r, 'reference'), '.0f', 8)}"
              f"{_f(m(r, 'reference_cli', 'rss_peak'), '.0f', 8)}"
              f"{_f(peak(r, 'iree'), '.0f', 9)}{_f(m(r, 'iree', 'compiler_rss'), '.0f', 8)}")
    print("\nCPU time (ms, all threads of the process; robust to other load): batch 1 per call, "
          f"batch {batch} per sample")
    print(f"{'graph':<22}{'tj b1':>8}{'ref b1':>9}{'IREE b1':>9}{'x ref':>7}{'x IREE':>8}"
          f"{'tj bN':>8}{'IREE bN':>9}{'x IREE':>8}")
    for r in rows:
        q = r.get("ratios", {})
        print(f"{r['graph'][:21]:<22}{_f(_get(r, 'tosa_jax', 'latency_cpu_ms'), '.3f', 8)}"
              f"{_f(_get(r, 'reference', 'latency_cpu_ms'), '.1f', 9)}"
              f"{_f(_get(r, 'iree', 'latency_cpu_ms'), '.3f', 9)}"
              f"{_f(q.get('cpu_vs_reference_latency'), '.0f', 7)}"
              f"{_f(q.get('cpu_vs_iree_latency'), '.2f', 8)}"
              f"{_f(_cpu_per_sample(r, 'tosa_jax'), '.3f', 8)}"
              f"{_f(_cpu_per_sample(r, 'iree'), '.3f', 9)}"
              f"{_f(q.get('cpu_vs_iree_throughput'), '.2f', 8)}")
    errors = [(r["graph"], e, r[e]["error"]) for r in rows for e in
              ("tosa_jax", "tosa_jax_first", "tosa_jax_cached", "tosa_jax_cli", "tosa_jax_gpu",
               "reference", "reference_cli", "iree")
              if isinstance(r.get(e), dict) and "error" in r[e]]
    wrong = [(r["graph"], e, r[e]["check"]["detail"]) for r in rows
             for e in ("tosa_jax", "tosa_jax_cli", "tosa_jax_gpu", "iree")
             if isinstance(r.get(e), dict) and r[e].get("check", {}).get("match") is False]
    for g, e, msg in errors:
        print(f"ERROR {g} {e}: {msg}")
    for g, e, msg in wrong:
        print(f"WRONG RESULT {g} {e} (vs the reference model): {msg}")
    if any("tosa_jax_gpu" in r for r in rows):
        print(f"\ntosa_jax on the GPU: trace+lower and XLA compile (s), batch 1 (ms, median; "
              f"the CPU's beside it), batch {batch} and evaluate (samples/s), check")
        print(f"{'graph':<22}{'trace':>7}{'compile':>8}{'b1 ms':>8}{'CPU ms':>8}{'API ms':>8}"
              f"{'batch/s':>9}{'eval/s':>9}  check")
        for r in rows:
            g = "tosa_jax_gpu"
            print(f"{r['graph'][:21]:<22}{_f(sec(r, g, 'trace_ms'), '.2f', 7)}"
                  f"{_f(sec(r, g, 'compile_ms'), '.2f', 8)}"
                  f"{_f(_get(r, g, 'latency_ms'), '.3f', 8)}"
                  f"{_f(_get(r, 'tosa_jax', 'latency_ms'), '.3f', 8)}"
                  f"{_f(_get(r, g, 'api_latency_ms'), '.3f', 8)}"
                  f"{_f(_get(r, g, 'throughput'), '.0f', 9)}"
                  f"{_f(_get(r, g, 'evaluate_throughput'), '.0f', 9)}  {_check_mark(r, g)}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", type=Path, default=None,
                    help="graphs or directories of *.tosa (default: fixtures and .cache/zoo)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (whole zoo fast)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="of tosa_jax, reference, iree and tosa_jax_gpu (tosa_jax on the GPU "
                         "alone; tosa_jax includes it when there is a GPU); the reference "
                         "model always runs once, as the oracle")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=None, help="batch-1 calls timed (default 100)")
    ap.add_argument("--repeat-b", type=int, default=None, help="batch calls timed (default 5)")
    ap.add_argument("--repeat-ref", type=int, default=None,
                    help="reference model batch-1 calls (default 20, fewer on slow graphs)")
    ap.add_argument("--repeat-cli", type=int, default=None, help="reference CLI runs (default 3)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timed calls per measurement (stops repeating beyond)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds a tosa_jax or IREE timing repeats its calls at least "
                         "(default 1, --quick 0.5): fast calls' medians over enough calls")
    ap.add_argument("--ref-budget", type=float, default=None,
                    help="seconds for the reference model's batch loop and repeats")
    ap.add_argument("--timeout", type=float, default=900, help="per engine and graph, seconds")
    ap.add_argument("--iree-python", default=os.environ.get(
        "TOSA_JAX_IREE_PYTHON", "/work/venv-iree/bin/python"))
    ap.add_argument("--tosa-opt", default=None)
    ap.add_argument("--scratch", default=None, help="directory for temporary files")
    ap.add_argument("--keep", action="store_true", help="keep the temporary files")
    ap.add_argument("--platform", choices=["auto", "cpu", "gpu"], default="auto",
                    help="where tosa_jax runs besides the CPU: auto (a GPU when JAX sees one), "
                         "cpu (only), gpu (required: an error without one; exit status 1 when "
                         "a GPU result is wrong or missing). $TOSA_JAX_GPU_PLATFORM: cuda "
                         "(default) or rocm")
    ap.add_argument("--no-gpu", action="store_true", help="the same as --platform cpu")
    ap.add_argument("--show", type=Path, help="print the tables of a saved JSON file and stop")
    # worker mode (internal)
    ap.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help=argparse.SUPPRESS)
    ap.add_argument("--host-devices", type=int, default=os.cpu_count() or 1,
                    help="CPU devices for tosa_jax.evaluate's shards (default: one per core)")
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--n-inputs", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--engine-tag", default="tosa_jax", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    q = args.quick
    defaults = {"repeat": 30 if q else 100, "repeat_b": 3 if q else 5,
                "repeat_ref": 5 if q else 20, "repeat_cli": 1 if q else 3,
                "warmup": 3 if q else 10, "budget": 5.0 if q else 20.0,
                "ref_budget": 10.0 if q else 60.0, "min_time": 0.5 if q else 1.0}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.tosa_opt is None:
        beside = Path(sys.executable).parent / "tosa-opt"
        args.tosa_opt = str(beside) if beside.exists() else (shutil.which("tosa-opt")
                                                             or "tosa-opt")
    if args.iree_python and not Path(args.iree_python).exists():
        args.iree_python = None
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        fn = {"tosa_jax": worker_tosa_jax, "reference": worker_reference,
              "iree": worker_iree, "tosa_jax_first": worker_tosa_jax_first}[args.worker]
        print(json.dumps(fn(args)))
        return
    if args.show:
        saved = json.loads(args.show.read_text())
        print_table(saved["results"], saved["machine"], saved["settings"]["batch"])
        return
    models = find_models(args.models or DEFAULT_MODELS)
    if not models:
        raise SystemExit("no .tosa graphs found")
    machine = machine_info()
    machine["bytecode"] = compile_bytecode()
    gpu = args.platform != "cpu" and not args.no_gpu and gpu_available()
    if args.platform == "gpu" and not gpu:
        raise SystemExit("--platform gpu: JAX sees no GPU (install jax[cuda12] or the ROCm "
                         "plugin, and check JAX_PLATFORMS)")
    settings = {k: getattr(args, k) for k in ("batch", "repeat", "repeat_b", "repeat_ref",
                                              "repeat_cli", "warmup", "budget", "ref_budget",
                                              "min_time", "quick")}
    rows = []
    for m in models:
        t0 = time.perf_counter()
        row = bench_model(m, args, gpu)
        add_ratios(row)
        rows.append(row)
        print(f"[{m.name}: {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        if args.json:  # after each graph, so a long run leaves partial results
            args.json.write_text(json.dumps({"machine": machine, "settings": settings,
                                             "results": rows}, indent=1, default=str))
    print_table(rows, machine, args.batch)
    if args.platform == "gpu":
        bad = [r["graph"] for r in rows if "error" in r.get("tosa_jax_gpu", {"error": 1})
               or r["tosa_jax_gpu"].get("check", {}).get("match") is not True]
        if bad:
            raise SystemExit(f"tosa_jax on GPU failed or disagreed with the reference model on "
                             f"{bad}")


if __name__ == "__main__":
    main()
