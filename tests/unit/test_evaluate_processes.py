"""``tosa-jax eval`` across several processes (jax.distributed, here two local CPU processes on
127.0.0.1): each runs its share of the samples on a mesh over both processes' devices, and the
outputs are those of one process, bit for bit (integer graphs: of single calls, which the other
evaluate tests tie to the reference model)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import tosa_jax
from tosa_jax.testing import FIXTURES

TIMEOUT = 240  # seconds for a whole group of processes; joining waits at most 120 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _eval(graph: Path, samples: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tosa_jax.cli", "eval", str(graph), str(samples), "-q",
            "-o", str(out), "--timeout", "120", *extra]


def _run_together(commands: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start the commands at once and wait for all (killing all after TIMEOUT seconds). Their
    output goes to files, not pipes: a process whose pipe nobody reads yet (the others are
    waited for in turn) blocks in its next write, XLA's logging threads too, and can miss its
    heartbeats (once, on a loaded machine, the coordinator declared one of these processes dead
    and its log was never shown)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    with contextlib.ExitStack() as stack:
        files = [(stack.enter_context(tempfile.TemporaryFile("w+")),
                  stack.enter_context(tempfile.TemporaryFile("w+"))) for _ in commands]
        procs = [subprocess.Popen(c, stdout=o, stderr=e, text=True, env=env)
                 for c, (o, e) in zip(commands, files)]
        try:
            for p in procs:
                p.wait(timeout=TIMEOUT)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        done = []
        for c, p, (o, e) in zip(commands, procs, files):
            o.seek(0)
            e.seek(0)
            done.append(subprocess.CompletedProcess(c, p.returncode, o.read(), e.read()))
    return done


def _processes(graph: Path, samples: Path, out: Path, n: int, *extra: str,
               samples_of: dict[int, Path] | None = None) -> list[subprocess.CompletedProcess]:
    port = _free_port()
    return _run_together([
        _eval(graph, (samples_of or {}).get(i, samples), out, "--coordinator",
              f"127.0.0.1:{port}", "--num-processes", str(n), "--process-id", str(i), *extra)
        for i in range(n)])


def test_two_processes_equal_single_calls(tmp_path: Path) -> None:
    """INT8 CNN, 19 samples in batches of 8 (the last one padded) over 2 processes x 2 host
    devices each: the outputs equal single calls, and the metric is computed over all."""
    graph = FIXTURES / "cnn_int8.tosa"
    model = tosa_jax.load(graph)
    spec = model.inputs[0]
    xs = np.random.default_rng(11).integers(-128, 128, (19, *spec.shape[1:])).astype(np.int8)
    labels = np.arange(19) % 10
    np.save(tmp_path / "xs.npy", xs)
    np.save(tmp_path / "y.npy", labels)
    runs = _processes(graph, tmp_path / "xs.npy", tmp_path / "out", 2, "-b", "8",
                      "--host-devices", "2", "--labels", str(tmp_path / "y.npy"))
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert "19 samples on 4 device(s) in 2 processes, batch 8" in runs[0].stdout
    assert "samples on" not in runs[1].stdout  # process 0 prints and writes (gloo chats)
    got = np.load(tmp_path / "out" / f"{model.outputs[0].name}.npy")
    single = np.stack([np.asarray(model(x[None]))[0] for x in xs])
    np.testing.assert_array_equal(got, single)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "predictions.npy"),
                                  single.argmax(axis=1))
    assert f"accuracy: {np.mean(single.argmax(axis=1) == labels):.4f}" in runs[0].stdout


@pytest.mark.parametrize("name", ["cnn_fp32"])
def test_two_processes_equal_one_process_fp32(tmp_path: Path, name: str) -> None:
    """FP32: 2 processes x 1 device run the same per-device program as 1 process x 2 host
    devices, so their outputs are bit-identical; a process given other samples is refused."""
    graph = FIXTURES / f"{name}.tosa"
    model = tosa_jax.load(graph)
    spec = model.inputs[0]
    xs = np.random.default_rng(12).standard_normal((10, *spec.shape[1:])).astype(np.float32)
    np.save(tmp_path / "xs.npy", xs)
    np.save(tmp_path / "fewer.npy", xs[:9])
    one = _run_together([_eval(graph, tmp_path / "xs.npy", tmp_path / "one", "-b", "4",
                               "--host-devices", "2")])[0]
    assert one.returncode == 0, one.stderr
    runs = _processes(graph, tmp_path / "xs.npy", tmp_path / "two", 2, "-b", "4")
    for r in runs:
        assert r.returncode == 0, r.stderr
    out = f"{model.outputs[0].name}.npy"
    np.testing.assert_array_equal(np.load(tmp_path / "two" / out), np.load(tmp_path / "one" / out))
    bad = _processes(graph, tmp_path / "xs.npy", tmp_path / "bad", 2, "-b", "4",
                     samples_of={1: tmp_path / "fewer.npy"})
    for r in bad:
        assert r.returncode == 2, r.stderr
        assert "same samples and options in every process" in r.stderr
        assert "[10, 9]" in r.stderr


def test_processes_of_different_cores_agree_on_the_chunk(tmp_path: Path) -> None:
    """A float graph on Eigen (LARGE_FLOAT_MACS) runs one sample at a time where every core has
    a device, in chunks elsewhere (evaluate.auto_chunk): one process held to one core and one
    with two would choose differently, and the processes must run one program. They agree on
    the smaller chunk, where before each took its own and the run was refused."""
    from tosa_jax.evaluate import usable_cores
    from tosa_jax.ir import GraphBuilder
    from tosa_jax.model import LARGE_FLOAT_MACS

    if usable_cores() < 2 or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs two cores and CPU affinity")
    k = -(-LARGE_FLOAT_MACS // (64 * 64))
    b = GraphBuilder()
    a = b.input("a", (1, 64, k), "FP32")
    weight = np.random.default_rng(13).standard_normal((1, k, 64)).astype(np.float32)
    w = b.const(weight, "FP32")
    zp = b.const([0.0], "FP32")
    graph = tmp_path / "matmul.tosa"
    graph.write_bytes(tosa_jax.write(b.build([b.op("MATMUL", [a, w, zp, zp], (1, 64, 64),
                                                   "FP32", name="y")])))
    xs = np.random.default_rng(14).standard_normal((6, 64, k)).astype(np.float32)
    np.save(tmp_path / "xs.npy", xs)
    port = _free_port()
    commands = [_eval(graph, tmp_path / "xs.npy", tmp_path / "out", "-b", "6", "--coordinator",
                      f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i))
                for i in range(2)]
    one_core = next(iter(os.sched_getaffinity(0)))
    commands[0] = [sys.executable, "-c",
                   f"import os, runpy, sys; os.sched_setaffinity(0, {{{one_core}}}); "
                   "sys.argv = ['tosa-jax'] + sys.argv[1:]; "
                   "runpy.run_module('tosa_jax.cli', run_name='__main__')",
                   *commands[0][3:]]
    for r in _run_together(commands):
        assert r.returncode == 0, r.stderr
    model = tosa_jax.load(graph)
    got = np.load(tmp_path / "out" / "y.npy")
    single = np.stack([model.run({"a": x[None]})["y"][0] for x in xs])
    np.testing.assert_allclose(got, single, rtol=1e-5, atol=1e-4)
    # and against the reference model in FP64 (the verifier's reference), within the dot-product
    # bound: k products, each output within k ULPs of sum |a * w|
    from tosa_jax.testing.reference import run_reference

    wv = np.abs(weight[0].astype(np.float64))
    for x, y in zip(xs, got, strict=True):
        want = run_reference(graph, {"a": x[None]}, ["y"], precise=True)["y"][0]
        bound = k * np.finfo(np.float32).eps * (np.abs(x.astype(np.float64)) @ wv)
        assert np.all(np.abs(y - want) <= bound)
