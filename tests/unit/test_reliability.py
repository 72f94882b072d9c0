"""Reliability under bad input, load and concurrency (the CI slice; the long runs are
``bench/fuzz.py`` and ``bench/leak.py``).

* Damaged files (every truncation of a small file, a fixed slice of the fuzzer's cases, bit flips
  drawn by hypothesis, hand-made structural damage) are refused with a TosaError, or load and run.
* Declared sizes are checked against configurable limits before anything is allocated: a file
  that claims a 2^40-element tensor is refused with the figure, and memory does not move.
* Integer and FP results are bit-identical across repeated calls, batch sizes 1, 7 and 64 (vmap),
  jax_enable_x64 on and off, and 8 threads calling one Model at once; the integer ones are also
  those of the reference model.
* A Model, with its compiled executables, is garbage-collected once dropped.
"""

from __future__ import annotations

import gc
import resource
import threading
import weakref

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tosa_jax
from tosa_jax import hostexec, limits
from tosa_jax.testing import fuzz, leak


@pytest.fixture(scope="module")
def seeds() -> dict[str, bytes]:
    return fuzz.seed_files(fixtures=True)


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------- bad input


def test_truncated_at_every_offset(seeds: dict[str, bytes]) -> None:
    data = seeds["fp32"]
    for n in range(len(data)):
        result = fuzz.run_case(data[:n], call=False)
        assert result["outcome"] == "rejected", (n, result)


def test_fuzz_slice(seeds: dict[str, bytes]) -> None:
    """A fixed slice of the fuzzer's cases, in this process: no exception but a TosaError."""
    cases = fuzz.Cases(seeds, seed=0, sweep=False)
    outcomes: dict[str, int] = {}
    for i in range(200):
        _, kind, data = cases(i)
        result = fuzz.run_case(data, call=True)
        assert result["outcome"] in ("ran", "rejected"), (i, kind, result)
        key = result["outcome"] if result["outcome"] == "ran" else result["error"]
        outcomes[key] = outcomes.get(key, 0) + 1
    # The slice reaches every stage: some cases load and run, others are refused as corrupt,
    # over a limit, invalid or of another version.
    assert outcomes.get("ran", 0) >= 10
    for error in ("TosaFormatError", "TosaLimitError", "TosaValidationError", "TosaVersionError"):
        assert outcomes.get(error, 0) >= 3, outcomes


@settings(derandomize=True, max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bit_flips_and_words_property(seeds: dict[str, bytes], data: st.DataObject) -> None:
    blob = bytearray(seeds[data.draw(st.sampled_from(["int8_cnn", "int_mix", "wide"]))])
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(blob) - 1))
        if data.draw(st.booleans()):
            blob[pos] ^= 1 << data.draw(st.integers(0, 7))
        else:  # a 32-bit offset or length pointing anywhere
            pos -= pos % 4
            blob[pos:pos + 4] = data.draw(st.integers(0, 2 ** 32 - 1)).to_bytes(4, "little")
    try:
        tosa_jax.load(bytes(blob))
    except tosa_jax.TosaError:
        pass


def _damage(data: bytes, mutate) -> bytes:
    g = fuzz._unpack(data)
    mutate(g, fuzz._main_block(g))
    return fuzz._pack(g)


def _set_input(g, blk, name: str) -> None:
    next(o for o in blk.operators if o.inputs).inputs[0] = name


def _cycle(g, blk) -> None:
    next(o for o in blk.operators if o.inputs).inputs[0] = blk.operators[-1].outputs[0]


def _own_output(g, blk) -> None:
    op = next(o for o in blk.operators if o.inputs)
    op.inputs[0] = op.outputs[0]


def _attr_table(g, blk) -> None:
    fb = fuzz._fb()
    op = next(o for o in blk.operators if fb.Op.CONV2D == o.op)
    op.attributeType, op.attribute = fb.Attribute.TileAttribute, fb.TileAttributeT()


STRUCTURAL = {
    "dangling": (lambda g, b: _set_input(g, b, "nowhere"), tosa_jax.TosaValidationError,
                 "'nowhere' is not a tensor|never defined"),
    "cycle": (_cycle, tosa_jax.TosaValidationError, "later operator|before it is defined"),
    "own_output": (_own_output, tosa_jax.TosaValidationError,
                   "later operator|before it is defined"),
    "no_regions": (lambda g, b: setattr(g, "regions", []), tosa_jax.TosaFormatError, "no region"),
    "no_blocks": (lambda g, b: setattr(g.regions[0], "blocks", None), tosa_jax.TosaFormatError,
                  "no block"),
    "no_version": (lambda g, b: setattr(g, "version", None), tosa_jax.TosaFormatError,
                   "no version"),
    "dropped_tensor": (lambda g, b: b.tensors.pop(0), tosa_jax.TosaValidationError,
                       "not a tensor|no tensor"),
    "unknown_dtype": (lambda g, b: setattr(b.tensors[0], "type", 99), tosa_jax.TosaFormatError,
                      "unknown element type"),
    "unknown_op": (lambda g, b: setattr(b.operators[0], "op", 999),
                   tosa_jax.TosaUnsupportedError, "unknown operator"),
    "attr_table": (_attr_table, tosa_jax.TosaValidationError, "attribute|acc_type"),
    "negative_dim": (lambda g, b: setattr(b.tensors[0], "shape", [1, -4]),
                     tosa_jax.TosaFormatError, "negative"),
    "rank_17": (lambda g, b: setattr(b.tensors[0], "shape", [1] * 17), tosa_jax.TosaLimitError,
                "rank 17"),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_structural_damage_is_named(seeds: dict[str, bytes], name: str) -> None:
    mutate, error, message = STRUCTURAL[name]
    with pytest.raises(error, match=message):
        tosa_jax.load(_damage(seeds["int8_cnn"], mutate))


def test_graph_objects_are_checked_too() -> None:
    with pytest.raises(tosa_jax.TosaValidationError, match="no region|no block"):
        tosa_jax.load(tosa_jax.Graph())
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (2,), "INT7")
    with pytest.raises(tosa_jax.TosaUnsupportedError, match="INT7"):
        tosa_jax.load(b.build([x]))


# ---------------------------------------------------------------------------- bounded memory


def test_a_2_40_element_tensor_is_refused_before_allocation(seeds: dict[str, bytes]) -> None:
    before = _maxrss_mib()
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1 << 20, 1 << 20), "INT8")
    with pytest.raises(tosa_jax.TosaLimitError, match=r"1099511627776 elements \(2\^40"):
        tosa_jax.load(tosa_jax.write(b.build([b.op("ABS", [x], (1 << 20, 1 << 20), "INT8")])))

    def huge_constant(g, blk) -> None:  # a constant claiming 2^40 values with 54 bytes of data
        t = max(blk.tensors, key=lambda t: 0 if t.data is None else len(t.data))
        t.shape = [1 << 10, 1 << 10, 1 << 10, 1 << 10]

    with pytest.raises(tosa_jax.TosaLimitError, match="1099511627776 elements"):
        tosa_jax.load(_damage(seeds["int8_cnn"], huge_constant))
    assert _maxrss_mib() - before < 32  # nothing near 1 TiB (or 1 GiB) was touched


def test_limits_are_configurable_and_cover_intermediates() -> None:
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (256, 1024), "INT32")  # 1 MiB per tensor, 3 MiB in all
    y = b.op("ABS", [b.op("NEGATE", [x, b.const([0], "INT32"), b.const([0], "INT32")],
                          (256, 1024), "INT32")], (256, 1024), "INT32")
    data = tosa_jax.write(b.build([y]))
    assert tosa_jax.load(data).declared_bytes == 3 * (1 << 20) + 8
    with pytest.raises(tosa_jax.TosaLimitError, match=r"3145736 bytes \(3.0 MiB\), over the "
                                                      r"limit of 2097152 bytes"):
        tosa_jax.load(data, max_bytes=2 << 20)
    with pytest.raises(tosa_jax.TosaLimitError, match=r"262144 elements \(2\^18.*limit of 1000"):
        tosa_jax.load(data, max_elements=1000)
    with pytest.raises(tosa_jax.TosaLimitError, match="limit of 1048576 bytes"):
        tosa_jax.load(b.build([y]), max_bytes=1 << 20)  # a Graph is checked the same way
    old = limits.MAX_BYTES
    try:
        limits.MAX_BYTES = 1 << 20  # the process-wide default
        with pytest.raises(tosa_jax.TosaLimitError):
            tosa_jax.read(data)
    finally:
        limits.MAX_BYTES = old


def test_intermediates_inside_operators_are_bounded_before_running() -> None:
    """A conformance-suite DEPTHWISE_CONV2D: 49 KB of declared tensors, but its padding makes
    the compiled executable need 2.3 GiB of temporaries: refused before the first run."""
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1, 4, 2, 3), "INT8")
    y = b.op("DEPTHWISE_CONV2D", [x, b.const(np.full((8192, 2, 3, 1), 7), "INT4"),
                                  b.const([0], "INT32"), b.const([0], "INT8"),
                                  b.const([0], "INT4")],
             (1, 2, 2, 3), "INT32", pad=(8188, 8192, 8190, 4097), stride=(8192, 8192),
             dilation=(1, 4096), acc_type="INT32", local_bound=False)
    model = tosa_jax.load(b.build([y]), max_bytes=256 << 20)
    assert model.declared_bytes < 64 << 10
    before = _maxrss_mib()
    with pytest.raises(tosa_jax.TosaLimitError, match=r"needs \d+ bytes \(2.3 GiB\).*"
                                                      r"temporaries.*limit of 268435456"):
        model(np.zeros((1, 4, 2, 3), np.int8))
    assert _maxrss_mib() - before < 64


def test_references_cannot_expand_a_small_file(seeds: dict[str, bytes]) -> None:
    """Flatbuffer offsets may point many times at one table or string: refused, not expanded."""
    b = tosa_jax.GraphBuilder()
    x = b.input("x", (1 << 16,), "INT8")
    y = b.op("ADD", [x, b.const(np.ones(1 << 16), "INT8")], (1 << 16,), "INT8")
    data = tosa_jax.write(b.build([y]))

    def many_tensors(g, blk) -> None:  # 20,000 entries for one 64 KiB constant: 1.3 GB decoded
        big = max(blk.tensors, key=lambda t: 0 if t.data is None else len(t.data))
        blk.tensors += [fuzz.Shared(big)] * 20000

    def many_names(g, blk) -> None:  # 20,000 outputs named by one 64 KiB string
        blk.outputs = ["y" * 65536] * 20000

    before = _maxrss_mib()
    for mutate in (many_tensors, many_names):
        blob = _damage(data, mutate)
        assert len(blob) < 300_000
        with pytest.raises(tosa_jax.TosaFormatError, match="expand to more than"):
            tosa_jax.load(blob)
    assert _maxrss_mib() - before < 64


# ------------------------------------------------------------------- determinism under load


def _inputs(model: tosa_jax.Model, batch: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in model.inputs:
        if s.np_dtype.kind == "f":
            out.append(rng.standard_normal((batch, *s.shape)).astype(s.np_dtype))
        else:
            info = np.iinfo(s.np_dtype)
            out.append(rng.integers(info.min, info.max, (batch, *s.shape), endpoint=True,
                                    dtype=s.np_dtype))
    return out


def _as_numpy(outs) -> list[np.ndarray]:
    return [np.asarray(o) for o in (outs if isinstance(outs, tuple) else (outs,))]


@pytest.mark.parametrize("graph", ["int8_cnn", "wide", "fp32"])
def test_bit_identical_across_calls_batches_and_x64(graph: str, seeds: dict[str, bytes],
                                                    reference) -> None:
    data = seeds[graph]
    model = tosa_jax.load(data)
    xs = _inputs(model, 64, seed=5)
    single = [_as_numpy(model(*(x[i] for x in xs))) for i in range(64)]
    again = [_as_numpy(model(*(x[i] for x in xs))) for i in range(64)]
    for a, b in zip(single, again):
        for u, v in zip(a, b):
            assert u.tobytes() == v.tobytes()
    for x64 in (False, True):
        with jax.enable_x64(x64):
            m = tosa_jax.load(data)
            batched = jax.jit(jax.vmap(m.fn))
            for n in (1, 7, 64):
                outs = batched(*(x[:n] for x in xs))
                for k, spec in enumerate(m.outputs):
                    got = outs[k]
                    got = (tosa_jax.lowering.numerics.wide_to_numpy(got)
                           if isinstance(got, tosa_jax.Wide) else np.asarray(got))
                    for i in range(n):
                        assert got[i].dtype == single[i][k].dtype
                        if graph == "fp32":
                            # XLA CPU picks a matrix-product kernel per batch shape, and its
                            # order of summation with it: on an AVX2 machine (Zen 3) a batch of
                            # 7 rounds MATMUL differently from 1 (the spec bounds float results,
                            # DOT_PRODUCT mode for MATMUL; bits are promised for integers)
                            np.testing.assert_array_max_ulp(got[i], single[i][k], maxulp=8)
                        else:
                            assert got[i].tobytes() == single[i][k].tobytes(), (x64, n, i, spec)
    if graph != "fp32":  # integers: the reference model's values too
        names = [s.name for s in model.outputs]
        for i in (0, 63):
            ref = reference(data, {s.name: x[i] for s, x in zip(model.inputs, xs)}, names)
            for k, name in enumerate(names):
                np.testing.assert_array_equal(single[i][k], ref[name])


@pytest.mark.parametrize("graph", ["int8_cnn", "fp32"])
def test_eight_threads_calling_one_model(graph: str, seeds: dict[str, bytes]) -> None:
    data = seeds[graph]
    expected_model = tosa_jax.load(data)
    xs = _inputs(expected_model, 32, seed=9)
    expected = [_as_numpy(expected_model(*(x[i] for x in xs))) for i in range(32)]

    def race(model: tosa_jax.Model) -> None:
        start = threading.Barrier(8)
        errors: list[BaseException] = []
        mismatches: list[tuple[int, int]] = []

        def work(t: int) -> None:
            try:
                start.wait()
                for _round in range(3):
                    for i in range(t, 32, 8):
                        got = _as_numpy(model(*(x[i] for x in xs)))
                        if any(g.tobytes() != e.tobytes() for g, e in zip(got, expected[i])):
                            mismatches.append((t, i))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and not mismatches, (errors, mismatches)

    # fresh, no cache: the threads race for its first (compiling) call too
    model = tosa_jax.load(data, cache=False)
    race(model)
    if model._np_handover is not None:  # an integer graph starts on numpy (tosa_jax.npexec)
        model._np_handover.join()
        model(*(x[0] for x in xs))
    assert len(model._executables) == 1
    # from the compile cache (the optimized executable: a quick-tier one runs once without
    # JAX), the threads share the executable run without JAX
    expected_model.compile(*(x[0] for x in xs))
    cached = tosa_jax.load(data)
    race(cached)
    if cached._np_handover is not None:
        cached._np_handover.join()
    assert isinstance(cached._host, hostexec.HostExecutable) and not cached._executables


# ---------------------------------------------------------------------------- no state leaks


def test_a_dropped_model_is_collected(seeds: dict[str, bytes]) -> None:
    model = tosa_jax.load(seeds["int8_cnn"])
    model(*(x[0] for x in _inputs(model, 1, 0)))
    # the jitted graph functions (one per platform traced for; none if it came from the cache)
    refs = [weakref.ref(model), *map(weakref.ref, model._jitted_fns.values()),
            weakref.ref(model.graph)]
    del model
    gc.collect()
    assert all(r() is None for r in refs)


def test_many_graphs_release_their_models() -> None:
    result = leak.run(30, every=5, quiet=True)
    assert result["models_collected"] == result["models_sampled"] == 6
