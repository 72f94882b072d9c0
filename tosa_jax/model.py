"""``load()`` and the ``Model``: a TOSA graph as one jitted XLA function."""

from __future__ import annotations

import gc
import hashlib
import math
import os
import stat
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tosa_jax import float_tier, hoist, hostexec, npexec
from tosa_jax.cache import CompileCache, code_digest, open_cache
from tosa_jax.errors import (
    TosaFormatError,
    TosaInputError,
    TosaLimitError,
    TosaUnpredictableWarning,
    TosaValidationError,
)
from tosa_jax.ir import (
    CODE_TYPES,
    FLOAT_TYPES,
    HOST_DTYPES,
    INT_RANGES,
    WIDE_TYPES,
    BlockScaled,
    Graph,
    Tensor,
    Wide,
    block_scale_shape,
    contraction_macs,
    file_bytes,
    host_to_value,
    source_bytes,
    value_to_host,
    wide_to_numpy,
)
from tosa_jax.limits import Limits, check_graph, human_bytes


def host_leaves(spec: TensorSpec) -> list[tuple[tuple[int, ...], str]]:
    """The (shape, numpy type) of each array that a tensor of ``spec`` is in the graph function,
    in the order JAX flattens it: INT48/INT64 a ``Wide`` (int32 hi, uint32 lo words), FP6 its
    uint8 codes, a block-scaled tensor its values' arrays then its scales; the cached
    executable's parameters and results are these (``tosa_jax.hostexec``)."""
    if spec.block_size:
        return (host_leaves(TensorSpec(spec.name, spec.shape, spec.dtype))
                + host_leaves(TensorSpec(spec.name, spec.scale_shape, spec.scale_dtype or "")))
    if spec.dtype in WIDE_TYPES:
        return [(spec.shape, "int32"), (spec.shape, "uint32")]
    if spec.dtype in CODE_TYPES:
        return [(spec.shape, "uint8")]
    dtype = HOST_DTYPES.get(spec.dtype)
    return [(spec.shape, "none" if dtype is None else dtype.name)]


def _flat(value: Any) -> list[Any]:
    """A bound input's arrays in host_leaves' order (``Wide`` and ``BlockScaled`` are tuples)."""
    return [leaf for v in value for leaf in _flat(v)] if isinstance(value, tuple) else [value]


def _regroup(results: Iterator[np.ndarray], spec: TensorSpec) -> Any:
    """An output as the graph function returns it, from the executable's next flat results."""
    if spec.block_size:
        return BlockScaled(_regroup(results, TensorSpec(spec.name, spec.shape, spec.dtype)),
                           next(results))
    return Wide(next(results), next(results)) if spec.dtype in WIDE_TYPES else next(results)


class _LazyJax:
    """JAX, imported where a model first needs it: a model that runs its executable from the
    compile cache through ``tosa_jax.hostexec`` never does."""

    def __getattr__(self, name: str) -> Any:
        import jax as module

        globals()["jax"] = module
        _inline_cpu_dispatch()
        return getattr(module, name)


jax: Any = _LazyJax()


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, static shape and TOSA element type.

    A TOSA 1.1 block-scaled tensor (``block_size`` > 0) crosses the interface as a
    ``tosa_jax.BlockScaled(values, scales)`` pair (a plain 2-tuple is accepted as input):
    ``dtype`` is the values' type, ``scale_dtype`` the scales' (shape ``scale_shape``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale_dtype: str | None = None
    block_size: int = 0

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype callers pass (and get back) for this tensor."""
        return HOST_DTYPES[self.dtype]

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return block_scale_shape(self.shape, self.block_size)

    @classmethod
    def of(cls, t: Tensor, name: str | None = None) -> TensorSpec:
        return cls(name or t.name, t.shape, t.dtype, t.scale_dtype, t.block_size)

    def __repr__(self) -> str:
        if self.block_size:
            return (f"TensorSpec({self.name!r}, {list(self.shape)}, {self.dtype}, "
                    f"scales {self.scale_dtype} per {self.block_size})")
        return f"TensorSpec({self.name!r}, {list(self.shape)}, {self.dtype})"


def _read(source: str | os.PathLike | bytes | bytearray | memoryview | Graph | Model,
          limits: Limits | None = None) -> tuple[Graph, str | None]:
    """The Graph and the SHA-256 of the bytes it was read from (None for a Graph or Model)."""
    data, label = source_bytes(source)
    if data is None:  # a Graph or a Model, or a type the reader refuses
        from tosa_jax import frontends

        return frontends.read_source(source, limits), None
    return _parse(data, label, limits), hashlib.sha256(data).hexdigest()


def compiled_bytes(compiled: Any) -> tuple[int, int]:
    """Bytes a compiled executable needs for its arguments, outputs and temporaries together,
    and for its temporaries alone; (0, 0) when the backend does not say."""
    stats = compiled.memory_analysis()
    if stats is None:
        return 0, 0
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes), stats.temp_size_in_bytes


class Model:
    """A loaded TOSA graph. Call it like a function; it compiles once per input signature.

    * ``model(*arrays)`` or ``model(**by_name)``: one output returns an array, several a tuple
      in output order. Outputs are numpy arrays where the model runs on the host (no ``device``
      asked for and JAX's default device a CPU: ``model.host_outputs``), so that a call served
      from the compile cache needs no JAX (``tosa_jax.hostexec``); JAX arrays on the device
      otherwise. INT48 and INT64 outputs are numpy int64 either way.
    * ``model.run({name: array}) -> {name: numpy array}`` for name-based use.
    * ``model.fn``: the pure JAX function (inputs in order -> tuple of outputs), for use in the
      caller's own ``jit``/``vmap``/``grad``. It always returns a tuple, even of one output, so
      that code transforming it sees one pytree structure whatever the graph; INT48 and INT64
      values are ``tosa_jax.Wide`` pairs there (no 64-bit JAX types). ``model(...)`` is the
      convenience around it: inputs checked and converted, one output unwrapped, INT48 and
      INT64 as numpy int64.
      ``model.fn`` checks only that its arguments have the declared shapes and JAX dtypes.

    Stateful graphs (EXT-VARIABLE) keep their variables in the Model, across calls: each call
    reads them and commits what the graph writes (only when the call succeeds).

    * ``model.variables``: name, shape and type of each variable (``[]`` for most graphs);
    * ``model.state -> {name: numpy array}``: the values they hold now;
    * ``model.set_state({name: array})`` sets some or all of them; ``model.reset_state()`` puts
      every one back to its initial value (the graph's ``initial_value``, zeros where none);
    * ``model.fn_with_state(state, *inputs) -> (outputs, new_state)``: the pure function, state
      as ``{name: value}`` (variables left out start from their initial values; the returned
      state holds all). Such a graph's ``model.fn`` raises: its outputs depend on the state.
    """

    def __init__(self, graph: Graph | None, *, device: jax.Device | str | None = None,
                 limits: Limits | None = None, profile: str | list[str] | None = None,
                 extensions: list[str] | None = None, level: str | None = None,
                 cache: bool | str | os.PathLike | CompileCache | None = None,
                 digest: str | None = None, tiered: bool | None = None,
                 meta: dict[str, Any] | None = None,
                 reader: Callable[[], Graph] | None = None,
                 check_requires: bool = False, numpy_floats: bool = False) -> None:
        self.limits = limits or Limits.default()
        self.check_requires = bool(check_requires)
        self.numpy_floats = bool(numpy_floats)
        self._target = (profile, extensions, level)
        self._graph, self._reader = graph, reader
        if graph is not None:
            # Sizes and structure are checked before anything is traced or allocated.
            self.declared_bytes = check_graph(graph, self.limits)
            # TOSA 1.0.2 ERROR_IFs, and what the graph needs against what was asked for
            # (tosa_jax.profiles; None accepts whatever the graph needs).
            self._requirements = _validate(graph, profile, extensions, level)
            self._functions()
            from tosa_jax.executor import graph_variables

            block = graph.main
            self.inputs = [TensorSpec.of(block.tensors[n], n) for n in block.inputs]
            self.outputs = [TensorSpec.of(block.tensors[n], n) for n in block.outputs]
            self.variables = [TensorSpec(k, t.shape, t.dtype)
                              for k, t in graph_variables(graph).items()]
            floats = _has_floats(graph)
            self._input_rules: list[tuple[int, Any]] | None = _input_rules(
                graph, self._requirements)
            self.conv_kinds = _conv_kinds(graph)
            self.float_macs = _macs(graph, floats=True)
            self.int_macs = _macs(graph, floats=False)
            self.largest_value = _largest_value(graph)
            # (float-only rules: graphs without floats skip the passes)
            self.transcendentals = _transcendentals(graph) if floats else 0
            self.narrow_floats = floats and _narrow_floats(graph)
            self.row_products = _row_products(graph) if floats else 0
            self.float_tier = floats and float_tier.candidate(graph, self.float_macs,
                                                                   self.conv_kinds)
        else:
            # From the cache's record of this graph, loaded and validated with these options
            # before: the graph is read (and its functions built) only when something needs
            # them, which a run from cached executables does not.
            assert meta is not None and reader is not None
            self._requirements = None
            self.declared_bytes = meta["declared_bytes"]
            self.inputs = [TensorSpec(n, tuple(s), t, *more) for n, s, t, *more in meta["inputs"]]
            self.outputs = [TensorSpec(n, tuple(s), t, *more)
                            for n, s, t, *more in meta["outputs"]]
            self.variables = []
            floats = meta["floats"]
            self._input_rules = None if meta.get("input_rules", 1) else []  # None: not read
            self.conv_kinds = meta["conv_kinds"]
            self.float_macs = meta["float_macs"]
            self.int_macs = meta["int_macs"]
            self.largest_value = meta["largest_value"]
            self.transcendentals = meta["transcendentals"]
            self.narrow_floats = meta["narrow_floats"]
            self.row_products = meta["row_products"]
            self.float_tier = meta["float_tier"]
        self.device = _device(device)
        # model(...) returns numpy arrays (the host's), not JAX arrays: see the class docstring
        self.host_outputs = self.device is None and hostexec.default_is_cpu()
        self._state: dict[str, Any] = {}
        self._state_lock = threading.Lock()
        if self.variables:
            self.reset_state()
        # One executable per input signature, built (or read from the persistent cache) once.
        self._executables: dict[tuple[Any, ...], _Slot] = {}
        self.floats = floats
        self.tiered = (tiering_enabled() if tiered is None else bool(tiered)
                       ) and (not floats or self.float_tier)
        self._build_lock = threading.Lock()
        self.cache = open_cache(cache)
        if (floats and self.float_macs >= LARGE_FLOAT_MACS and self.device is None
                and self.cache is not None):
            # A graph whose float work runs on Eigen (convolutions and matrix products, see
            # LARGE_FLOAT_CONV_OPTIONS): its first run would generate oneDNN's GEMM kernel,
            # which a thread does now (hostexec.prepare). From the cache's record, beside
            # reading and rebuilding the executable for the host path: from the cache, after
            # import, three interleaved processes each (Xeon, 2026-11-28): bert_tiny_fp32
            # 64-67 -> 51-63 ms, unet_fp32 73-76 -> 58-60, resnet_fp32 149-157 -> 130-132.
            # Else on JAX's client, while this thread traces (Python: one core) and XLA
            # compiles; it also leaves the warm-up's executable in the cache for the next
            # process. Not for small graphs: cnn_fp32 (0.3 M) was slower by the thread
            # (2026-11-27).
            hostexec.prepare(self.cache, jax_client=graph is not None)
        # "cache" or "compiled", for the last build; "numpy" ("numpy, cache") where the first
        # call ran the numpy program traced here (from the cache)
        self.compile_source: str | None = None
        self._digest = digest  # SHA-256 of the graph's bytes; None: computed when first needed
        # tosa_jax.inspect: jitted intermediates functions, and their executables by signature
        self._kept: dict[tuple[Any, ...], Any] = {}
        self._kept_exes: dict[tuple[Any, ...], Any] = {}
        self._jitted_fns: dict[str, Any] = {}  # per platform (_lower)
        # evaluate()'s compiled batched functions, by signature, devices, chunk and x64
        self._evaluate_cache: dict[tuple[Any, ...], Any] = {}
        # The cached executable run without JAX (run() only): None not looked up yet, False none
        self._host: hostexec.HostExecutable | None | bool = None
        self._host_upgrade: threading.Thread | None = None  # see _upgrade_host
        # The program run by numpy (tosa_jax.npexec): None not looked up yet, False none
        self._np: dict[str, Any] | bool | None = None
        self._np_calls = 0
        self._np_handover: threading.Thread | None = None  # see _np_run
        self._np_traced: tuple[Any, Any] | None = None  # see _lower

    def _functions(self) -> None:
        # The executor imports every lowering (tens of ms): a model whose executables come from
        # the compile cache never traces, so it never needs them.
        from tosa_jax.executor import graph_function, graph_state_function, graph_variables

        graph = self.graph
        self._fn = graph_function(graph)
        self._fn_with_state = graph_state_function(graph)
        self._traced = self._fn_with_state if graph_variables(graph) else self._fn
        if self.check_requires:  # the compiled function also returns the REQUIRE flag
            checks = self.requirements.runtime_checks  # (the validation's: no second analysis)
            self._traced = (graph_state_function(graph, True, checks) if graph_variables(graph)
                            else graph_function(graph, True, checks))

    @property
    def graph(self) -> Graph:
        """The IR of the graph (read now if the model came from the compile cache)."""
        if self._graph is None:
            self._graph = self._reader()
        return self._graph

    @property
    def requirements(self) -> Any:
        """What the graph needs: profiles, extensions, level (``tosa_jax.profiles``)."""
        if self._requirements is None:
            self._requirements = _validate(self.graph, *self._target)
        return self._requirements

    @property
    def fn(self) -> Callable[..., tuple[Any, ...]]:
        if not hasattr(self, "_fn"):
            self._functions()
        return self._fn

    @property
    def fn_with_state(self) -> Callable[..., Any]:
        if not hasattr(self, "_fn_with_state"):
            self._functions()
        return self._fn_with_state

    def _lower(self, args: tuple[Any, ...]) -> Any:
        """The graph function traced and lowered for ``args``' platform: only that platform's
        forms are traced (lowering.numerics.lowering_for), with one jitted function per platform
        so that JAX's trace cache never hands one platform's trace to another."""
        platform = self._platform(args)
        from tosa_jax.lowering.numerics import lowering_for

        # The trace the numpy program was made from, for the same arguments, is lowered as it
        # is (20 ms of cnn_int8's 94 ms lowering: jitted.lower re-traces part of it)
        traced, self._np_traced = self._np_traced, None
        with no_gc(), lowering_for(platform):
            if traced is None or traced[0] != (platform, self._signature(args)):
                traced = (None, self._jitted(platform).trace(*args))
            # Kernels as arguments (tosa_jax.hoist) where measured: on the CPU. A GPU's
            # convolutions may want their kernels in another layout, which XLA gives a literal
            # once, at compile time, and an argument at every call.
            lowered = hoist.lower(traced[1], args) if platform == "cpu" else traced[1].lower()
            return without_locations(lowered)

    def _jitted(self, platform: str) -> Any:
        """The graph function jitted for ``platform``; its functions are built here where the
        model came from the cache's record (read lazily: ``_functions``)."""
        jitted = self._jitted_fns.get(platform)
        if jitted is None:
            if not hasattr(self, "_traced"):
                self._functions()
            from tosa_jax.lowering.numerics import row_pairs

            base = self._traced
            pairs = platform == "cpu" and 0 < self.row_products <= ROW_PAIR_PRODUCTS

            def fn(*a: Any) -> Any:  # (the name of the lowered module, as before)
                with row_pairs(pairs):  # (inside: every trace of this function alike)
                    return base(*a)

            jitted = self._jitted_fns[platform] = jax.jit(fn)
        return jitted

    def _meta(self) -> dict[str, Any]:
        """What a later load of the same bytes with the same options takes from the cache."""
        return {"declared_bytes": self.declared_bytes, "floats": _has_floats(self.graph),
                "input_rules": len(self._input_value_rules()),
                "conv_kinds": self.conv_kinds, "float_macs": self.float_macs,
                "int_macs": self.int_macs, "largest_value": self.largest_value,
                "transcendentals": self.transcendentals, "narrow_floats": self.narrow_floats,
                "row_products": self.row_products, "float_tier": self.float_tier,
                "inputs": [(s.name, list(s.shape), s.dtype, s.scale_dtype, s.block_size)
                           for s in self.inputs],
                "outputs": [(s.name, list(s.shape), s.dtype, s.scale_dtype, s.block_size)
                            for s in self.outputs]}

    @property
    def version(self) -> str:
        major, minor, patch, draft = self.graph.version
        return f"{major}.{minor}.{patch}" + ("-draft" if draft else "")

    def __repr__(self) -> str:
        return f"<tosa_jax.Model TOSA {self.version} inputs={self.inputs} outputs={self.outputs}>"

    # -- inputs --------------------------------------------------------------------------

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              check_values: bool = True) -> list[Any]:
        names = [s.name for s in self.inputs]
        if args and kwargs:
            raise TosaInputError("pass inputs either by position or by name, not both")
        if kwargs:
            unknown = sorted(set(kwargs) - set(names))
            missing = [n for n in names if n not in kwargs]
            if unknown or missing:
                raise TosaInputError(
                    f"input names do not match the graph: unknown {unknown}, missing {missing}; "
                    f"the graph's inputs are {names}")
            args = tuple(kwargs[n] for n in names)
        if len(args) != len(names):
            raise TosaInputError(f"the graph takes {len(names)} input(s) {names}, got {len(args)}")
        bound = [self._check_input(spec, a) for spec, a in zip(self.inputs, args, strict=False)]
        if check_values:
            self.check_input_values(bound)
        return bound

    def _input_value_rules(self) -> list[tuple[int, Any]]:
        if self._input_rules is None:
            self._input_rules = _input_rules(self.graph, self.requirements)
        return self._input_rules

    def check_input_values(self, values: Sequence[Any]) -> None:
        """Raise TosaValidationError where the inputs (in graph order; with a leading sample
        axis or not) break an ERROR_IF on their values: the zero points that an EXT-DYNAMIC
        graph takes as inputs. Checked on the host before every run (a few scalars); values
        that the graph computes are checked in checked programs (``check_requires``)."""
        for position, check in self._input_value_rules():
            value = values[position]
            value = value if isinstance(value, Wide) else np.asarray(value)
            bad = np.asarray(check.violated(value))
            if bad.any():
                found = (np.asarray(value) if not isinstance(value, Wide)
                         else wide_to_numpy(value))[bad]
                raise TosaValidationError(f"{check}: {check.argument} = {found.reshape(-1)[0]}")

    def _check_input(self, spec: TensorSpec, value: Any) -> Any:
        if spec.block_size:
            if not isinstance(value, tuple) or len(value) != 2:
                raise TosaInputError(
                    f"input {spec.name!r} is block-scaled ({spec.dtype} values, {spec.scale_dtype} "
                    f"scales per {spec.block_size}): pass tosa_jax.BlockScaled(values, scales), "
                    f"got {type(value).__name__}")
            scales = TensorSpec(f"{spec.name}' scales", spec.scale_shape, spec.scale_dtype or "")
            return BlockScaled(self._check_input(TensorSpec(spec.name, spec.shape, spec.dtype),
                                                 value[0]),
                               self._check_input(scales, value[1]))
        if not hasattr(value, "dtype") or not hasattr(value, "shape"):
            value = np.asarray(value)
        raw = np.dtype(value.dtype).kind == "V" or (
            spec.dtype.startswith("FP8") and np.dtype(value.dtype) == np.uint8)
        if raw and value.dtype.itemsize == spec.np_dtype.itemsize:
            # numpy has no bf16/fp8: such .npy files (the reference model's) hold raw records,
            # or, for FP8E5M2, uint8 bit patterns.
            value = np.asarray(value).view(spec.np_dtype)
        if tuple(value.shape) != spec.shape:
            raise TosaInputError(f"input {spec.name!r}: expected shape {list(spec.shape)}, "
                                 f"got {list(value.shape)}")
        if np.dtype(value.dtype) != spec.np_dtype:
            raise TosaInputError(f"input {spec.name!r}: expected {spec.dtype} "
                                 f"(numpy {spec.np_dtype}), got {np.dtype(value.dtype)}")
        if spec.dtype in ("INT48", "INT64", "INT4"):
            host = np.asarray(value)
            lo, hi = INT_RANGES[spec.dtype]
            if host.size and (host.min() < lo or host.max() > hi):
                raise TosaInputError(f"input {spec.name!r}: values outside the {spec.dtype} "
                                     f"range [{lo}, {hi}]")
            value = host_to_value(host, spec.dtype)
        elif spec.dtype in CODE_TYPES:
            value = host_to_value(np.asarray(value), spec.dtype)
        if self.device is not None:
            value = jax.device_put(value, self.device)
        return value

    # -- calling -------------------------------------------------------------------------

    def _signature(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        leaves, tree = jax.tree.flatten(args)
        # np.dtype itself, not its name: str() of a dtype costs ~5 us a call
        return (jax.config.jax_enable_x64, tree,
                *((tuple(a.shape), np.dtype(a.dtype), _placement(a)) for a in leaves))

    def _slot(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], _Slot]:
        """The executable in use for these arguments' signature: built once per signature,
        from the persistent cache when it holds one (no tracing, lowering or compiling)."""
        sig = self._signature(args)
        slot = self._executables.get(sig)
        if slot is None:
            with self._build_lock:
                slot = self._executables.get(sig)
                if slot is None:
                    first = _FirstResult()
                    try:
                        slot = self._build(args, optimize=not self.tiered, first=first)
                    except BaseException:
                        first.out()
                        raise
                    slot.first = first
                    self._executables[sig] = slot
        return sig, slot

    def _call(self, args: tuple[Any, ...]) -> Any:
        """Run the executable for ``args``. A quick-tier one is replaced by the optimized
        executable, compiled in the background once a result is out: from its second call, or
        after its first when the persistent cache will keep the optimized one and the graph
        does EAGER_UPGRADE_FLOPS or more (later processes then load optimized code, not the
        quick tier's, which runs up to 20x slower)."""
        sig, slot = self._slot(args)
        first, slot.first = slot.first, None
        try:
            outs = slot.exe(*args)
        except BaseException:
            if first is not None:
                first.out()
            raise
        if first is not None:
            first.out(outs)
        if slot.tier == 0:
            slot.calls += 1
            if slot.calls == 2 or (slot.calls == 1 and self.cache is not None):
                # Not a daemon, also when called from one (a thread inherits its starter's
                # daemon flag: the conformance runner's workers are daemons): a compile cut
                # off at interpreter exit aborts the process ("FATAL: exception not
                # rethrown"); Python's exit waits for it (the tosa-jax command leaves with
                # os._exit).
                threading.Thread(target=self._upgrade,
                                 args=(sig, args, slot, outs, slot.calls == 1),
                                 name="tosa_jax-optimize", daemon=False).start()
        return outs

    def _upgrade(self, sig: tuple[Any, ...], args: tuple[Any, ...], quick: _Slot,
                 result: Any, first: bool) -> None:
        """Replace a quick executable by the optimized one, from the quick one's lowering when
        this process made it (on any error the quick one stays: it computes the same).
        ``first``: asked after the first call, for the cache (only for heavy graphs)."""
        try:
            jax.block_until_ready(result)  # a result is out before the compile starts
        except Exception:
            pass
        if first and _flops(quick.exe) < EAGER_UPGRADE_FLOPS:
            quick.lowered = None  # not held for a second call that may never come
            return  # later processes would gain little: upgraded from the second call
        with self._build_lock:  # one upgrade per slot (the second call may also ask for it)
            if quick.upgrading:
                return
            quick.upgrading = True
        try:
            slot = self._build(args, optimize=True, lookup=False, lowered=quick.lowered)
        except Exception:
            return
        if not self._same_bits(slot):
            return
        self._executables[sig] = slot

    def _same_bits(self, optimized: _Slot) -> bool:
        """Whether an optimized executable may take over from this process's quick one: an
        integer graph's always; a float graph's where its own HLO is proven too
        (tosa_jax.float_tier; so far always, where the quick one's was), else the quick one
        keeps answering, as the first call did."""
        return not self.floats or float_tier.inexact(optimized.exe.as_text()) is None

    def _disk_key(self, args: tuple[Any, ...]) -> dict[str, Any] | None:
        """Everything that decides the executable XLA builds for ``args``; None when the graph
        has no bytes to name it by (a Graph built in Python that cannot be written)."""
        if self._digest is None:
            try:
                from tosa_jax import serialization

                self._digest = hashlib.sha256(serialization.write(self.graph)).hexdigest()
            except Exception:
                return None
        leaves, tree = jax.tree.flatten(args)
        devices = sorted({d for a in leaves for d in _devices(a)}, key=lambda d: d.id)
        if not devices:
            devices = [self.device or jax.devices()[0]]
        client = devices[0].client
        import jaxlib

        return {
            "format": 1, "graph": self._program_digest(), "code": code_digest(),
            "args": [[list(a.shape), str(a.dtype)] for a in leaves], "tree": str(tree),
            "x64": bool(jax.config.jax_enable_x64),
            "matmul_precision": str(jax.config.jax_default_matmul_precision),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "platform": client.platform, "platform_version": client.platform_version,
            "devices": [[d.id, d.device_kind] for d in devices],
            "device_count": len(client.devices()),
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "machine": hostexec.machine_id(),
            **hostexec.program_options(),
        }

    def _build(self, args: tuple[Any, ...], optimize: bool, lookup: bool = True,
               lowered: Any = None, first: _FirstResult | None = None) -> _Slot:
        """Compile for ``args`` (or load from the persistent cache), and refuse an executable
        whose arguments, outputs and temporaries need more than ``limits.max_bytes``.

        ``optimize=False`` compiles the quick tier (LLVM's optimizer off, see QUICK_OPTIONS);
        a cached executable is taken whatever its tier. The declared tensors are checked at load
        time; this also bounds what the operators hold inside (a convolution's padded input,
        say), before any of it is allocated. ``first``: what the cache writes of an executable
        compiled here wait for (its first result), else they start at once."""
        key = self._disk_key(args) if self.cache is not None else None
        entry = self.cache.get(key) if key is not None and lookup else None
        exe = None
        if entry is not None:
            exe = _deserialize(entry, args, self.device)
            need, temp, tier = entry.get("need", 0), entry.get("temp", 0), entry.get("tier", 1)
        if exe is None:
            entry = None
            tier = 1 if optimize or not _quick_tier_helps(args) else 0
            if lowered is None:
                lowered = self._lower(args)
            exe = self._compile_tier(lowered, args, tier)
            if tier == 0 and self.floats and float_tier.inexact(exe.as_text()) is not None:
                # Its float bits may differ from the optimized tier's: that one answers
                self.tiered, tier = False, 1
                exe = self._compile_tier(lowered, args, tier)
            need, temp = compiled_bytes(exe)
        if lookup:
            self.compile_source = "cache" if entry is not None else "compiled"
        if need > self.limits.max_bytes:
            raise TosaLimitError(
                f"compiled, the graph needs {need} bytes ({human_bytes(need)}) of memory "
                f"for its arguments, outputs and intermediates ({temp} bytes of them "
                f"temporaries), over the limit of {self.limits.max_bytes} bytes "
                f"({human_bytes(self.limits.max_bytes)}); nothing was allocated; "
                "raise it with load(..., max_bytes=...) if this is intended")
        if key is not None and entry is None:
            blob = _Serialized(exe)
            after = first.wait if first is not None else None

            def payload() -> dict[str, Any] | None:
                made = _serialize(exe, blob)
                return None if made is None else {**made, "need": need, "temp": temp,
                                                  "tier": tier}

            self.cache.put_later(key, payload, after)
            self._put_host(args, exe, need, tier, blob, after)
        # A quick executable keeps its lowering (constants included) for the optimized compile
        # that replaces it after the first call, where a cache will keep that one.
        keep = entry is None and tier == 0 and self.cache is not None
        return _Slot(exe, tier, lowered if keep else None)

    def _compile_tier(self, lowered: Any, args: tuple[Any, ...], tier: int) -> Any:
        """Compile ``lowered`` at ``tier`` (1 optimized, 0 quick). A float graph's quick tier
        keeps the optimized tier's library options (tosa_jax.float_tier)."""
        options = self.xla_options(args)
        if tier == 0:
            options.update(QUICK_OPTIONS if self.floats else quick_options(self.int_macs))
        # (a float graph's two tiers alike: its library kernels split their work alike)
        sequential = (tier == 1 or self.floats) and self.sequential(args)
        return compile_lowered(lowered, options, sequential=sequential)

    # -- small graphs run by numpy (tosa_jax.npexec) ------------------------------------------

    def _np_applies(self) -> bool:
        """Whether calls may start on the numpy program: an integer graph (any graph, with
        ``numpy_floats``) with outputs on the host, no variables, and little enough work
        (npexec.MAX_MACS, MAX_ELEMENTS; then the traced program's estimate, npexec.BUDGET_MS)
        that numpy answers in about the time a quick-tier executable would, its compile
        spared."""
        return (npexec.enabled() and (self.numpy_floats or not self.floats)
                and self.host_outputs and not self.variables and self.device is None
                and self.int_macs + self.float_macs <= npexec.MAX_MACS
                and self.largest_value <= npexec.MAX_ELEMENTS)

    @property
    def _np_floats(self) -> bool:
        """Whether the numpy program may compute in floats: a float graph loaded with
        ``numpy_floats`` (an integer graph's program stays integer whatever the option says:
        its results are the reference model's bits)."""
        return self.numpy_floats and self.floats

    def _np_run(self, bound: list[Any]) -> list[Any] | None:
        """The outputs computed by the graph's numpy program, or None where there is none (the
        caller then compiles, or loads a cached executable: the same integers). A graph's first
        call runs the program (traced here, or read from the compile cache without JAX); its
        second hands the calls over to the optimized XLA executable, built (or loaded) in the
        background while the program keeps answering: a loop over samples gets XLA's speed,
        a graph run once pays no XLA compile or rebuild at all."""
        if self._np is False:
            return None
        with self._build_lock:
            if self._np is None:
                program = None
                if self._np_applies() and not self._executables and self._host is None:
                    program = self._np_program(bound)
                self._np = program if program is not None else False
            program = self._np
            if program is False:
                return None
            self._np_calls += 1
            # (a float program keeps the calls: XLA's float results are not its bits)
            hand_over = self._np_calls == 2 and not program["floats"]
        assert isinstance(program, dict)
        try:
            results = npexec.run(program, [leaf for a in bound for leaf in _flat(a)])
        except Exception as exc:  # a defect of ours: said, and XLA's executable answers
            warnings.warn(f"tosa_jax.npexec failed ({type(exc).__name__}: {exc}); running the "
                          "graph's XLA executable instead", RuntimeWarning, stacklevel=4)
            self._np = False
            return None
        if hand_over:
            # Started once this call's result is computed: lowering holds the GIL, and numpy's
            # calls would wait on it (cnn_int8's second call 40-100 ms, measured 2026-11-27).
            # Not a daemon: see _call.
            self._np_handover = threading.Thread(
                target=self._np_hand_over, args=(list(bound),), name="tosa_jax-optimize",
                daemon=False)
            self._np_handover.start()
        it = iter(results)
        return [*(_regroup(it, spec) for spec in self.outputs), *it]  # (+ the REQUIRE flag)

    def _np_key(self) -> dict[str, Any] | None:
        if self.cache is None or self._digest is None:
            return None
        args = [leaf for s in self.inputs for leaf in host_leaves(s)]
        return {"kind": "npexec", "format": npexec.FORMAT, "graph": self._program_digest(),
                "floats": self._np_floats,
                "code": code_digest(), "args": [[list(s), d] for s, d in args],
                "runtime": hostexec.runtime_id()}

    def _np_program(self, bound: list[Any]) -> dict[str, Any] | None:
        """The numpy program of the graph function: from the compile cache, else traced (a
        graph it cannot run is recorded there too, so later processes do not trace it)."""
        key = self._np_key()
        if key is not None:
            entry = self.cache.get(key)
            if isinstance(entry, dict):
                program = entry.get("program")
                try:  # (an entry of an unexpected form is not trusted: XLA's way)
                    if (not isinstance(program, dict)
                            or program["bytes"] > self.limits.max_bytes
                            or npexec.cost_ms(program) > npexec.BUDGET_MS):
                        return None
                except Exception:
                    return None
                self.compile_source = "numpy, cache"
                return program
        try:
            from tosa_jax.lowering.numerics import lowering_for

            with no_gc(), lowering_for("cpu"):
                traced = self._jitted("cpu").trace(*bound)
            program = npexec.from_jaxpr(traced.jaxpr, floats=self._np_floats)
            # (over the memory limit: XLA's executable refuses it with its own figures)
            if (npexec.cost_ms(program) > npexec.BUDGET_MS
                    or program["bytes"] > self.limits.max_bytes):
                program = None
        except npexec.Unsupported:
            program = None
        except Exception:  # a graph JAX cannot trace is refused by the compiled path, as before
            return None
        if key is not None:
            self.cache.put_later(key, lambda: {"program": program})
        if program is not None:
            self.compile_source = "numpy"
            # kept for the optimized executable's lowering (_lower), from the second call
            self._np_traced = (("cpu", self._signature(tuple(bound))), traced)
        return program

    def _np_hand_over(self, bound: list[Any]) -> None:
        """Load (or build) the executable the calls go to after the numpy program's first:
        the cached one without JAX where there is one, else the optimized XLA executable."""
        try:
            if self._host_run(bound) is None:
                args = tuple(bound)
                sig = self._signature(args)
                if sig not in self._executables:
                    self._executables[sig] = self._build(args, optimize=True)
        except Exception:  # the compiled path will say why, on the next call
            pass
        self._np = False

    # -- the cached executable without JAX (tosa_jax.hostexec) -------------------------------

    def _host_key(self) -> dict[str, Any] | None:
        """The key of this graph's host entry; None where the host path does not apply: no
        cache, a device asked for, variables, arrays of a type it does not carry
        (``hostexec.CARRIED_NUMPY``), or a jaxlib it was not tested on (``hostexec.enabled``)."""
        if (self.cache is None or self.device is not None or self.variables
                or self._digest is None or not hostexec.enabled()):
            return None
        args = [leaf for s in self.inputs for leaf in host_leaves(s)]
        outs = [leaf for s in self.outputs for leaf in host_leaves(s)]
        if any(dtype not in hostexec.CARRIED_NUMPY for _, dtype in (*args, *outs)):
            return None
        return hostexec.host_key(self._program_digest(), args)

    def _host_fits(self, host: hostexec.HostExecutable) -> bool:
        """Whether the executable's results are the outputs' flat arrays (and the REQUIRE flag
        of a checked program), as ``_host_outputs`` regroups them."""
        outs = [(s, np.dtype(d)) for spec in self.outputs for s, d in host_leaves(spec)]
        return (host.outs[:len(outs)] == outs
                and len(host.outs) == len(outs) + int(self.check_requires))

    def _program_digest(self) -> str:
        """The graph's digest, marked when the program also checks the REQUIREs: the two
        programs of one graph are different executables in the compile cache."""
        assert self._digest is not None
        return self._digest + ("+requires" if self.check_requires else "")

    def _put_host(self, args: tuple[Any, ...], exe: Any, need: int, tier: int,
                  blob: Callable[[], bytes], after: Callable[[], None] | None) -> None:
        """Store the host entry of an executable just compiled: CPU device 0, JAX's default
        configuration, plain tensors. (Not of one loaded from the cache: XLA serializes a
        deserialized CPU executable without its object code, and running that fails.)"""
        key = self._host_key()
        if key is None:
            return
        devices = {d for a in jax.tree.leaves(args) for d in _devices(a)} or {jax.devices()[0]}
        if (len(devices) != 1 or next(iter(devices)).platform != "cpu"
                or next(iter(devices)).id != 0 or jax.config.jax_enable_x64
                or jax.config.jax_default_matmul_precision is not None):
            return

        def payload() -> dict[str, Any] | None:
            entry = hostexec.entry_of(exe, blob)
            return None if entry is None else {**entry, "need": need, "tier": tier}

        self.cache.put_later(key, payload, after)

    def _host_run(self, arrays: list[Any]) -> list[np.ndarray] | None:
        """The outputs of the cached executable run without JAX, or None where there is none
        to run (the caller then takes the JAX path, which computes the same). Not once a JAX
        executable is in use. A quick-tier one keeps answering while the optimized executable
        is built through JAX in the background (``_upgrade_host``), from its second call."""
        if self._host is False:
            return None
        with self._build_lock:
            if self._host is None:
                key = self._host_key()
                host = None
                if key is not None and not self._executables and hostexec.default_is_cpu():
                    host = hostexec.load_entry(self.cache, key)
                if (host is None or host.need > self.limits.max_bytes
                        or not self._host_fits(host)):
                    self._host = False  # the JAX path refuses it, with the figures
                    return None
                self._host, self.compile_source = host, "cache"
            host = self._host
            if self._executables:
                self._host = False
                return None
            if host.tier == 0 and host.calls == 1:
                # Not a daemon (see _call); started once: a failed build leaves the quick one
                self._host_upgrade = threading.Thread(
                    target=self._upgrade_host, args=(tuple(arrays),), name="tosa_jax-optimize",
                    daemon=False)
                self._host_upgrade.start()
            host.calls += 1
        try:
            results = host([leaf for a in arrays for leaf in _flat(a)])
        except Exception:  # XLA could not run it (nothing else can raise here): JAX's way
            self._host = False
            return None
        it = iter(results)
        return [*(_regroup(it, spec) for spec in self.outputs), *it]  # (+ the REQUIRE flag)

    def _upgrade_host(self, args: tuple[Any, ...]) -> None:
        """Compile the optimized executable for ``args`` (a quick-tier host executable's
        inputs) through JAX, and hand the calls over to it. Before, the second call of a quick
        host executable imported JAX and loaded the quick tier there, then upgraded: a stall of
        0.6 s (cnn_int8, 2026-11-27) in a loop over samples; now the quick executable, which
        computes the same integers, answers meanwhile. The optimized one also replaces the
        quick one in the cache, for the host path of later processes."""
        try:
            slot = self._build(args, optimize=True, lookup=False)
            if self._same_bits(slot):
                self._executables[self._signature(args)] = slot
        except Exception:  # the quick executable stays in use: it computes the same
            pass

    def _platform(self, args: tuple[Any, ...]) -> str:
        """The platform of the devices of ``args``; the model's (or JAX's default) device's
        when they are not placed."""
        devices = {d for a in jax.tree.leaves(args) for d in _devices(a)}
        return (next(iter(devices)).platform if devices
                else (self.device or jax.devices()[0]).platform)

    def xla_options(self, args: tuple[Any, ...] = ()) -> dict[str, Any]:
        """XLA's compile options for this graph on the devices of ``args`` (see
        FLOAT_CONV_OPTIONS and ELEMENTAL_TRANSCENDENTALS); the default device's platform when
        they are not placed."""
        platform = self._platform(args)
        options = xla_options(self.conv_kinds, platform, self.float_macs)
        if platform == "cpu" and self.float_tier:
            options[_YNN] = ",".join(filter(None, (options.get(_YNN), float_tier.REDUCE_FUSION)))
        if (platform == "cpu" and self.floats and self.small_floats()
                and self.transcendentals <= ELEMENTAL_TRANSCENDENTALS and not self.narrow_floats):
            options[_EMITTERS] = False
            options[_SPLIT] = min(XLA_SPLIT, SPLIT_PER_CORE * usable_cores())
        return options

    def small_floats(self, samples: int = 1) -> bool:
        """A graph with floats under SEQUENTIAL_MACS multiply-adds (``samples`` calls' worth)
        and no tensor of SEQUENTIAL_ELEMENTS."""
        return ((self.int_macs + self.float_macs) * samples < SEQUENTIAL_MACS
                and self.largest_value * samples < SEQUENTIAL_ELEMENTS)

    def sequential(self, args: tuple[Any, ...] = (), samples: int = 1) -> bool:
        """Whether this graph's optimized executable for ``args`` (``samples`` calls' worth of
        work in one) is compiled with no loop split into intra-op tasks
        (``tosa_jax.seqcompile``): on the CPU, an integer graph with no tensor of
        SEQUENTIAL_INT_ELEMENTS, a graph with floats under SEQUENTIAL_MACS multiply-adds and
        with no tensor of SEQUENTIAL_ELEMENTS."""
        from tosa_jax import seqcompile

        if not (seqcompile.enabled() and self._platform(args) == "cpu"):
            return False
        if not self.floats:
            return self.largest_value * samples < SEQUENTIAL_INT_ELEMENTS
        return self.small_floats(samples)

    def compile(self, *args: Any, optimize: bool = True, **kwargs: Any) -> Model:
        """Compile (or fetch from the cache) for these inputs without running; returns self.
        ``optimize``: make sure the optimized executable is the one in use (not the quick
        tier), as a benchmark or a serving loop wants from its first call."""
        bound = self._bind(args, kwargs)
        full = (self._state, *bound) if self.variables else tuple(bound)
        sig, slot = self._slot(full)
        if slot.first is not None:  # (no result of this call: the cache writes go now)
            slot.first.out()
            slot.first = None
        if optimize and slot.tier == 0:
            self._executables[sig] = self._build(full, optimize=True, lookup=False,
                                                 lowered=slot.lowered)
        return self

    def _execute_bound(self, bound: list[Any]) -> tuple[Any, ...]:
        if not self.variables:
            return self._call(tuple(bound))
        with self._state_lock:  # read-run-write of the state is one step across threads
            full = (self._state, *bound)
            outs, self._state = self._call(full)
        return outs

    # -- variables (EXT-VARIABLE) -----------------------------------------------------------

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The values the graph's variables hold now, by name (INT48 as int64)."""
        return {k: (wide_to_numpy(v) if isinstance(v, Wide) else np.asarray(v))
                for k, v in self._state.items()}

    def set_state(self, values: Mapping[str, Any]) -> None:
        """Set some or all variables ({name: array}); the others keep their values."""
        specs = {s.name: s for s in self.variables}
        if not isinstance(values, Mapping):
            raise TosaInputError("set_state() takes a mapping {variable name: array}")
        unknown = sorted(set(values) - set(specs))
        if unknown:
            raise TosaInputError(f"unknown variable(s) {unknown}; the graph's variables are "
                                 f"{sorted(specs)}")
        checked = {}
        for name, value in values.items():
            try:
                checked[name] = self._check_input(specs[name], value)
            except TosaInputError as e:
                raise TosaInputError(f"set_state: {e}".replace("input ", "variable ", 1)) from e
        self._state = {**self._state, **checked}

    def reset_state(self) -> None:
        """Put every variable back to its initial value."""
        from tosa_jax.executor import initial_state

        self._state = {}
        self.set_state(initial_state(self.graph))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        results = self._warn_requires(self._outputs(self._bind(args, kwargs)))
        outs = tuple(value_to_host(o, spec.dtype)
                     if isinstance(o, Wide) or spec.dtype in CODE_TYPES or spec.block_size
                     else np.asarray(o) if self.host_outputs else o
                     for spec, o in zip(self.outputs, results, strict=False))
        return outs[0] if len(outs) == 1 else outs

    def _warn_requires(self, results: Sequence[Any]) -> Sequence[Any]:
        """The outputs of a run; for a model that checks the REQUIREs, without the flag, and a
        TosaUnpredictableWarning where one failed (a TosaValidationError where an ERROR_IF on
        values computed in the graph did)."""
        if not self.check_requires:
            return results
        outs, violation, error = self.split_checks(results)
        if error:
            raise TosaValidationError(violation)
        if violation is not None:
            warnings.warn(violation, TosaUnpredictableWarning, stacklevel=3)
        return outs

    def split_requires(self, results: Sequence[Any]) -> tuple[tuple[Any, ...], str | None]:
        """The outputs of a run of a model loaded with ``check_requires=True``, and what its
        REQUIRE flag says: None, or the operator and the rule that failed first."""
        return self.split_checks(results)[:2]

    def split_checks(self, results: Sequence[Any]) -> tuple[tuple[Any, ...], str | None, bool]:
        """``split_requires``, and whether the rule that failed is an ERROR_IF (on values the
        graph computed or took as inputs: the graph is in error) rather than a REQUIRE."""
        *outs, flag = results
        if int(np.asarray(flag).reshape(-1)[0]) == 0:
            return tuple(outs), None, False
        from tosa_jax.violations import describe_violation, violation_is_error

        return tuple(outs), describe_violation(self.graph, flag), violation_is_error(flag)

    def _outputs(self, bound: list[Any]) -> tuple[Any, ...] | list[np.ndarray]:
        """The outputs for bound inputs: from the cached executable without JAX where the host
        path takes it, else through JAX."""
        outs = self._np_run(bound)
        if outs is None:
            outs = self._host_run(bound)
        return self._execute_bound(bound) if outs is None else outs

    # -- intermediates (tosa_jax.inspect) -------------------------------------------------

    def _intermediates_jit(self, names: tuple[str, ...], batched: bool, platform: str) -> Any:
        """One jitted function per choice of tensors (and platform, as _lower):
        (state, *inputs) -> {name: value}."""
        key = (names, batched, platform)
        if key not in self._kept:
            from tosa_jax.inspect import intermediates_function

            fn = intermediates_function(self.graph, names)
            if batched:
                inner = fn

                def fn(state: dict[str, Any], *xs: Any) -> dict[str, Any]:
                    return jax.vmap(lambda *a: inner(state, *a))(*xs)
            self._kept[key] = jax.jit(fn)
        return self._kept[key]

    def _run_kept(self, names: tuple[str, ...], batched: bool, args: tuple[Any, ...]) -> Any:
        """Compile the intermediates function once per signature (not through the persistent
        cache), refuse an executable over ``limits.max_bytes`` (arguments, kept tensors,
        temporaries) before it runs, and run it."""
        sig = (names, batched, self._signature(args))
        exe = self._kept_exes.get(sig)
        if exe is None:
            from tosa_jax.lowering.numerics import lowering_for

            platform = self._platform(args)
            with no_gc(), lowering_for(platform):
                lowered = self._intermediates_jit(names, batched, platform).lower(*args)
            exe = compile_lowered(lowered, self.xla_options(args))
            need, temp = compiled_bytes(exe)
            if need > self.limits.max_bytes:
                raise TosaLimitError(
                    f"compiled with {len(names)} kept tensors, the graph needs {need} bytes "
                    f"({human_bytes(need)}; {temp} bytes of temporaries), over the limit of "
                    f"{self.limits.max_bytes} bytes ({human_bytes(self.limits.max_bytes)}); "
                    "nothing was run: keep fewer tensors or samples, or raise max_bytes")
            self._kept_exes[sig] = exe
        return exe(*args)

    def intermediates(self, *inputs: Any, names: Any = None, constants: bool = False,
                      batched: bool = False) -> dict[str, np.ndarray]:
        """Every tensor of the entry block (or the ``names`` chosen), by name, from one compiled
        call; ``batched=True``: inputs stacked on a leading sample axis, one vmapped call. See
        ``tosa_jax.inspect.intermediates`` (constants, control flow, memory limits)."""
        from tosa_jax.inspect import intermediates

        return intermediates(self, *inputs, names=names, constants=constants, batched=batched)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run on inputs given by name; returns numpy outputs by name. An executable from the
        compile cache runs without JAX where the host path takes it (``tosa_jax.hostexec``)."""
        if not isinstance(inputs, Mapping):
            raise TosaInputError("run() takes a mapping {input name: array}")
        outs = self._warn_requires(self._outputs(self._bind((), inputs)))
        return {spec.name: value_to_host(o, spec.dtype)
                for spec, o in zip(self.outputs, outs, strict=False)}


# Tiered compilation, for integer graphs on the CPU. A signature's first executable is compiled
# with LLVM's optimizer off and by XLA's older elemental IR emitters instead of its MLIR fusion
# emitters: XLA's HLO passes run as always and library kernels are the same, so integer results
# are identical (tests/unit/test_cache.py), at about a quarter of XLA CPU's compile time. (The
# emitters alone, measured 2026-11-26, separate processes, quick tier then quick without fusion
# emitters: cnn_int8 150-200 -> 93-119 ms, resnet_int8 700-760 -> 315-406 ms, bert_tiny_int8
# 1.05-1.24 -> 0.57-0.77 s, unet_int8 1.58-1.73 -> 1.21-1.28 s; the code they make runs slower,
# resnet_int8 24 -> 39 ms, so the optimized tier keeps the fusion emitters.)
# Once its first result is out, the optimized executable is compiled in a background thread and
# replaces it, in the process and in the persistent cache (without a cache: from the second call
# on). A graph run once (a test, a debugging run) gets its result without waiting for the
# optimizer, and the next process loads optimized code. A float graph is tiered only where
# tosa_jax.float_tier proves the quick tier computes the optimized one's bits: elsewhere the
# optimizer contracts multiply-adds and reorders sums, so a float result would change in its
# last bit between the first call and later ones.
_EMITTERS = "xla_cpu_use_fusion_emitters"  # an experimental flag: see compile_lowered
_YNN = "xla_cpu_experimental_ynn_fusion_type"  # likewise
_SPLIT = "xla_cpu_parallel_codegen_split_count"  # likewise
# The quick tier's LLVM module is also compiled whole, not split into parts compiled in
# parallel: without the optimizer the parts' own set-up costs more than a second core gives back
# (2026-11-26, quick-tier compile, interleaved, medians of 3 in two processes: cnn_int8 89-103
# -> 73-77 ms, mlp_attn_int8 166-201 -> 136-153 ms, lstm_int8 446-627 -> 355-528 ms; results
# identical). The optimized tier keeps XLA's split (float graphs either way: cnn_fp32 199 ->
# 219 ms, bert_tiny_fp32 372 -> 344 ms, min of 3).
QUICK_OPTIONS = {"xla_backend_optimization_level": 0, _EMITTERS: False, _SPLIT: 1}
# LLVM's full unrolling of a loop, capped at 4 iterations (its default: any loop whose unrolled
# body stays under its size threshold), on every CPU compile (tosa_jax.seqcompile applies it:
# XLA takes it per module). In a fusion of small dimensions that holds an exp or a tanh (a
# softmax, a GELU), LLVM unrolled the loops whole before XLA expanded the function into its
# polynomial, and that kernel alone could take most of a float graph's compile (encoder_fp32's
# 1,024-element softmax 340-420 ms of a 0.6-0.8 s compile). Fresh processes, empty cache, load
# to the first result, XLA_FLAGS with and without it, two interleaved rounds (2026-11-28):
# encoder_fp32 417/448 -> 348/341 ms, unet_fp32 1,252/1,042 -> 917/872, resnet_fp32 550/567 ->
# 470/545, cnn_fp32 329/354 -> 312/314, mobilenetv2_fp32 969/1,069 -> 917/1,018; gru, lstm and
# bert_tiny FP32 and the integer graphs' optimized compiles within noise; batch 1 of all fifteen
# within run-to-run variation. Integer results unchanged; cnn, encoder, bert_tiny and unet FP32
# change in their last bits (their kernels holding exp become other code), no further from
# PyTorch's outputs than before. ``XLA_FLAGS``' own
# ``--xla_backend_extra_options=-unroll-full-max-count=N`` takes precedence.
LLVM_OPTIONS = (("-unroll-full-max-count", "4"),)
# A small float graph (Model.small_floats: the graphs compiled without intra-op tasks) computing
# at most this many elements of transcendentals a call is compiled with XLA's elemental IR
# emitters in place of its MLIR fusion emitters (at full optimization: float graphs have one
# tier). Its compile is dominated by each kernel's fixed cost, which the elemental emitters
# cut; their code is the same speed for arithmetic, but computes tanh and a sigmoid 3-4x slower
# an element (lstm_fp32's gate kernels of 128-256 elements 0.6-0.9 -> 2.1-4.1 us; 20,480
# transcendental elements a call, batch 1 0.128 -> 0.174 ms), so graphs computing more keep the
# fusion emitters: at 4,096 elements the loss is at most about 9 us a call. Measured with
# LLVM_OPTIONS, optimized compile (`model.compile`), two interleaved rounds (2026-11-28):
# cnn_fp32 186/204 -> 139/125 ms, encoder_fp32 (2,048 elements) 201/231 -> 154/148, gru_fp32
# (384) 234/258 -> 179/174; batch 1 (min of 400 calls) and every output bit unchanged. (Larger
# float graphs with the elemental emitters: resnet_fp32 and mobilenetv2_fp32 compile 15-20%
# faster but run resnet_fp32 up to 8% slower at batch 1; unet_fp32 and bert_tiny_fp32 3-5%
# slower; not taken.) Nor graphs with floats narrower than 16 bits: the elemental emitters round
# some f32 -> f4e2m1fn conversions otherwise than the fusion emitters, ml_dtypes and the
# reference model (22 of 120,028 values of a sweep with every tie; f16, bf16 and the FP8 types
# alike in all three); the TOSA 1.1 block-scaled casts to FP4E2M1 caught it.
ELEMENTAL_TRANSCENDENTALS = 4096
# The elemental emitters make one LLVM module of a graph's kernels, which XLA splits into up to
# XLA_SPLIT parts (its default) compiled in parallel; each part pays 5-7 ms of LLVM before its
# first kernel (gru_fp32: 16 parts, 190 ms of CPU in a 120 ms compile), so on two cores 32 parts
# pay it up to 16 times a core. These graphs' module is split into SPLIT_PER_CORE parts a usable
# core. Load to the first result, fresh processes, empty cache, ten interleaved rounds on the
# 2-core AMD EPYC, medians (2026-11-28): gru_fp32 200 -> 184 ms, encoder_fp32 195 -> 177,
# cnn_fp32 149 -> 142; compile alone, five rounds: gru_fp32 118 -> 107, encoder_fp32 107 -> 96.
# Every output bit and batch 1 unchanged (the parts hold the same code). The fusion emitters'
# graphs compile a module per kernel, which the split leaves alone (within noise).
XLA_SPLIT = 32
SPLIT_PER_CORE = 2
# A float graph with at most this many products of one row (_row_products: a classifier at
# batch 1) computes them as products of two rows on the CPU (lowering.numerics.row_pairs): a
# library call each, where XLA compiles each one-row product into a kernel of its own, 10-20 ms
# of LLVM (cnn_fp32's 16 x 10 classifier 19 ms, the last kernel of its compile to finish).
# Fresh processes, empty cache, load to the first result, interleaved (2026-11-28): cnn_fp32
# 275-294 -> 218-246 ms (four rounds, a slow hour), then with the row broadcast rather than
# concatenated (see cpu_dot) 208-210 -> 191-198 ms and bert_tiny_fp32 571-602 -> 548-574;
# resnet_fp32 and mobilenetv2_fp32 within noise (their classifier's kernel compiles beside
# others); batch 1 within noise; cnn_fp32's last bits change (4.5e-8 from the reference
# model's FP64, the bound 5.2e-6). A graph of many (recurrent steps: gru_fp32 7, lstm_fp32 30)
# keeps XLA's kernels: the call's overhead, about half a microsecond a product, made its batch
# 1 15-20% slower (gru_fp32 min 0.018-0.020 -> 0.022-0.023 ms, lstm_fp32 0.18-0.20 -> 0.20-0.23
# ms) for 30-170 ms less compile, which the compile cache pays once and the calls in every
# process.
ROW_PAIR_PRODUCTS = 4
# A quick executable of fewer floating-point/integer operations than this (XLA's cost analysis)
# is upgraded only from its second call, not at once for the cache: its code runs at most a
# millisecond or two slower, a later process would need hundreds of calls to repay the
# optimized compile, and then it upgrades itself; graphs run once (a test suite's single
# operators: under 1.3 MFLOP, 0.02-0.5 ms) would pay two compiles. Measured quick-tier runs:
# cnn_int8 1.2 MFLOP 0.6 ms (optimized 0.3), ExecuTorch's ds_cnn INT 7.4 MFLOP 1.9-5.1 ms,
# resnet8 INT 27 MFLOP 45-55 ms (optimized 2.6).
EAGER_UPGRADE_FLOPS = 5e6
# The quick tier of a graph with few integer multiply-adds also leaves its matrix products and
# convolutions to XLA's own loops, not YNNPACK: a YNNPACK fusion builds its kernel pipeline on
# its first run, 0.3-1.5 ms each, more than a small graph's whole call, and the quick tier mostly
# runs once. Measured 2026-11-26 (fresh processes, the executable's first call after loading it
# from the cache, with YNNPACK -> without; then batch 1): cnn_int8 (0.3 M multiply-adds)
# 3.2 -> 0.9 ms, batch 1 0.70 ms either way; ExecuTorch's LSTM INT (0.08 M) 5.2 -> 0.6 ms;
# its 16a8w LSTM 4.1 -> 0.7 ms; ds_cnn INT (2.7 M) 4.9 -> 3.7 ms (batch 1 1.0 -> 2.8);
# the zoo's lstm_int8 (3.3 M) 3.6 -> 2.5 ms; but resnet8 INT (12.5 M) 33 -> 59 ms.
QUICK_LIBRARY_MACS = 4_000_000
# A graph with floats of fewer multiply-adds a call than this is compiled with no loop fusion
# split into intra-op tasks (tosa_jax.seqcompile): handing a task to the other thread and
# waiting for it costs more than such a graph's loops compute. Measured 2026-11-26, batch 1,
# XLA's executable -> this one (min of 9 interleaved rounds, one process): cnn_int8 (0.3 M)
# 0.144 -> 0.066 ms, cnn_fp32 (0.3 M) 0.097 -> 0.056 ms, lstm_int8 (3.3 M) and the fixtures
# without split loops alike; above it, the large FP32 graphs lose (resnet_fp32, 483 M,
# 9.0 -> 10.5 ms; mobilenetv2_fp32 6.4 -> 7.4 ms; bert_tiny_fp32, 59 M, 1.40 -> 1.57 ms).
SEQUENTIAL_MACS = 5_000_000
# ... and no tensor of this many elements or more: a loop over it gains from a second thread
# (an int32 chain of 20 operations, XLA's split -> none, min of 7 rounds: 4 K elements 13.9 ->
# 8.8 us, 16 K 16.3 -> 14.3 us, 64 K 34 -> 39 us, 1 M 292 -> 411 us).
SEQUENTIAL_ELEMENTS = 32_768
# Integer graphs, whatever their multiply-adds (integer convolutions and products are library
# kernels, threaded or not at run time, not split loops), up to this largest tensor: their
# loops are cheap vectorized arithmetic (a RESCALE, a TABLE's gather). Medians of 11
# interleaved rounds, XLA's split -> none, two runs: bert_tiny_int8 (64 K elements) 0.91 and
# 1.04, unet_int8 (96 K) 0.87 and 0.96; beyond it resnet_int8 (392 K) 0.96-0.97 and
# mobilenetv2_int8 (1.2 M) 0.91-0.95, but 1.12-1.15 in separate processes: left to XLA. The
# float graphs of those sizes lose (bert_tiny_fp32 1.10-1.14, unet_fp32 1.04-1.08): their
# loops hold transcendentals (GELU's erf: 1.3 ns an element in the erf/erfc form of then; the
# polynomial ERF since takes about 40% of that), which a second thread halves.
SEQUENTIAL_INT_ELEMENTS = 131_072


def tiering_enabled() -> bool:
    """Whether models are tiered by default (``TOSA_JAX_TIERED``, default on)."""
    return os.environ.get("TOSA_JAX_TIERED", "1").strip().lower() not in ("0", "off", "false",
                                                                          "no")


def quick_options(int_macs: int) -> dict[str, Any]:
    """XLA's options for the quick tier of a graph of ``int_macs`` integer multiply-adds a call
    (added to xla_options' own)."""
    return {**QUICK_OPTIONS, **({_YNN: ""} if int_macs < QUICK_LIBRARY_MACS else {})}


@dataclass
class _Slot:
    """The executable in use for one input signature: its tier (0 quick, 1 optimized), the
    quick one's lowering (when compiled here) and how often it was called."""

    exe: Any
    tier: int
    lowered: Any = None
    calls: int = 0
    upgrading: bool = False
    first: _FirstResult | None = None  # its cache writes wait for its first result


class _FirstResult:
    """The first result of an executable just compiled, which its cache writes wait for.

    Serializing and writing an executable (4-25 ms of CPU for an integer graph's, and it was
    serialized twice: for the JAX path's entry and the host path's) took a core from its first
    call on a 2-core machine; the writes now start when that call's outputs are computed.
    Fresh processes, empty cache, load to the first result, five interleaved rounds against the
    commit before, sorted (2026-11-29): resnet_int8 261-312 -> 255-282 ms, unet_int8 746-778 ->
    695-776 (mobilenetv2_int8, three rounds, within noise: 476-516 -> 490-512). A write never
    waits more than WAIT_S (a call that never comes: the interpreter's exit waits for the
    writes)."""

    WAIT_S = 30.0

    def __init__(self) -> None:
        self._done = threading.Event()
        self._outs: Any = None

    def out(self, outs: Any = None) -> None:
        """The first call's outputs (None: no call is coming, or it failed)."""
        self._outs = outs
        self._done.set()

    def wait(self) -> None:
        if self._done.wait(self.WAIT_S):
            try:
                jax.block_until_ready(self._outs)  # (dispatched: maybe not computed yet)
            except Exception:
                pass
        self._outs = None


class _Serialized:
    """An executable's bytes, serialized once for both of its cache entries (the JAX path's
    and the host path's), by whichever write comes first."""

    def __init__(self, exe: Any) -> None:
        self._exe = exe.exe if isinstance(exe, hoist.Weighted) else exe
        self._lock = threading.Lock()
        self._blob: bytes | None = None

    def __call__(self) -> bytes:
        from tosa_jax import seqcompile

        with self._lock:
            if self._blob is None:
                self._blob = seqcompile.serialized_bytes(self._exe)
            return self._blob


# XLA CPU's options for a graph, decided by its convolutions. XLA CPU runs a convolution either
# through YNNPACK (one thread) or through Eigen (every core); measured on this machine, batch 1,
# idle: resnet_fp32 12.1 -> 9.2 ms with Eigen's, cnn/mobilenetv2/unet/bert FP32 within 5%; but
# Eigen's integer convolutions are far slower (resnet_int8 9.2 -> 200 ms). So graphs with float
# convolutions and no integer ones keep YNNPACK for matrix products only; and where they do
# LARGE_FLOAT_MACS multiply-adds or more a call, not even for those: their matrix products then
# also run on Eigen's threads (2026-11-25, batch 1: bert_tiny_fp32 1.54 -> 1.28 ms, min of 30
# calls interleaved in one process, and 1.52 -> 1.38 ms, evaluate +11%, in the benchmark run
# before and after; resnet_fp32, mobilenetv2_fp32 and unet_fp32 1-6% faster). Where there is
# little work to share the second thread does not pay: cnn_fp32 (0.3 M) within noise either way,
# encoder_fp32's small matrix products (0.15 M, no convolution) 0.025 -> 0.030 ms.
CONV_OPS = frozenset({"CONV2D", "CONV3D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D"})
FLOAT_CONV_OPTIONS = {_YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
LARGE_FLOAT_CONV_OPTIONS = {_YNN: ""}
LARGE_FLOAT_MACS = 10_000_000  # bert_tiny_fp32 59 M, unet_fp32 117 M; lstm_fp32 3.3 M


def _conv_kinds(graph: Graph) -> list[str]:
    """The kinds of element type the graph's convolutions take: "float" and/or "int"."""
    kinds = {"float" if b.tensors[op.inputs[0]].dtype in FLOAT_TYPES else "int"
             for r in graph.regions for b in r.blocks for op in b.operators if op.op in CONV_OPS}
    return sorted(kinds)


def _macs(graph: Graph, floats: bool) -> int:
    """The multiply-adds of the graph's float (or integer) convolutions and matrix products in
    one call (by the type of their results: a block-scaled MXINT8 product sums in FP32)."""
    return sum(contraction_macs(b, op) for r in graph.regions for b in r.blocks
               for op in b.operators
               if op.outputs and (b.tensors[op.outputs[0]].dtype in FLOAT_TYPES) == floats)


def _largest_value(graph: Graph) -> int:
    """The elements of the graph's largest tensor that is not a constant (what one loop
    fusion may cover)."""
    return max((int(np.prod(t.shape, dtype=np.int64)) for r in graph.regions for b in r.blocks
                for t in b.tensors.values() if t.data is None), default=0)


# Float ops that XLA computes by a polynomial or a call: EXP, LOG, TANH, SIGMOID, ERF, POW, SIN,
# COS (see ELEMENTAL_TRANSCENDENTALS).
TRANSCENDENTAL_OPS = frozenset({"EXP", "LOG", "TANH", "SIGMOID", "ERF", "POW", "SIN", "COS"})


def _transcendentals(graph: Graph) -> int:
    """The elements the graph's float TRANSCENDENTAL_OPS compute in one call."""
    return sum(int(np.prod(b.tensors[op.outputs[0]].shape, dtype=np.int64))
               for r in graph.regions for b in r.blocks for op in b.operators
               if op.op in TRANSCENDENTAL_OPS and op.outputs
               and b.tensors[op.outputs[0]].dtype in FLOAT_TYPES)


def _row_products(graph: Graph) -> int:
    """The graph's float MATMULs and CONV2Ds of one output row ([1, 1, W], [1, 1, 1, OC]:
    a classifier at batch 1, a recurrent step's products), see ROW_PAIR_PRODUCTS."""
    return sum(1 for r in graph.regions for b in r.blocks for op in b.operators
               if op.op in ("MATMUL", "CONV2D") and op.outputs
               and b.tensors[op.outputs[0]].dtype in FLOAT_TYPES
               and math.prod(b.tensors[op.outputs[0]].shape[:-1]) == 1)


def _narrow_floats(graph: Graph) -> bool:
    """Whether the graph holds floats narrower than FP16 and BF16 (FP8, FP6, FP4, the
    block-scaled types), which keep XLA's fusion emitters (see ELEMENTAL_TRANSCENDENTALS)."""
    plain = ("FP16", "BF16", "FP32")
    return any((t.dtype in FLOAT_TYPES or t.dtype == "MXINT8") and t.dtype not in plain
               for r in graph.regions for b in r.blocks for t in b.tensors.values())


def xla_options(conv_kinds: list[str], platform: str, float_macs: int = 0) -> dict[str, Any]:
    """The compile options of a graph whose convolutions are of ``conv_kinds``, on ``platform``
    (``float_macs``: its float multiply-adds a call, see LARGE_FLOAT_MACS)."""
    if platform != "cpu" or conv_kinds != ["float"]:
        return {}
    return dict(LARGE_FLOAT_CONV_OPTIONS if float_macs >= LARGE_FLOAT_MACS
                else FLOAT_CONV_OPTIONS)


# Python's cyclic garbage collector, held off while a graph is read, validated, traced and
# lowered. These steps allocate hundreds of thousands of objects, and in a process that has just
# imported JAX (most of a first result) a good part of those allocations' collections are full
# ones, each walking every object JAX and numpy hold: measured in fresh processes, tracing and
# lowering cnn_int8 93-96 -> 40-42 ms, resnet_fp32 134 -> 71-72 ms, lstm_int8 644-655 ->
# 542-570 ms; reading and validating mobilenetv2_int8 161-163 -> 104 ms. Cycles made meanwhile
# are collected afterwards. Not around XLA's compile: C++ that allocates few Python objects, and
# it may take seconds in a background thread (the optimized tier) while the caller's code runs.
# Nested and concurrent holders count: the collector is turned back on (if it was on) when the
# last one leaves.
_GC_LOCK = threading.Lock()
_GC_HOLDERS = 0
_GC_WAS_ENABLED = False


@contextmanager
def no_gc() -> Iterator[None]:
    """Hold off the cyclic garbage collector for the ``with`` block (see above)."""
    global _GC_HOLDERS, _GC_WAS_ENABLED
    with _GC_LOCK:
        if _GC_HOLDERS == 0:
            _GC_WAS_ENABLED = gc.isenabled()
            gc.disable()
        _GC_HOLDERS += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_HOLDERS -= 1
            if _GC_HOLDERS == 0 and _GC_WAS_ENABLED:
                gc.enable()


def without_locations(lowered: Any) -> Any:
    """``lowered`` with its module's source locations removed (in place), kept if that fails.

    XLA copies each location into its instruction's metadata (the JAX operation's name and
    Python stack frames), and rebuilding a cached executable parses all of it: without them the
    rebuild takes about a fifth less (mobilenetv2_int8 195 -> 152 ms, bert_tiny_int8 168 ->
    131 ms, ExecuTorch's LSTM INT 116 -> 85 ms). The program is the same; profiles and dumps of
    a model's executable lose the names (``bench/hlo_cost.py --attribute`` traces its own)."""
    try:
        # (jaxlib's module, which jax.extend.mlir re-exports: jax.extend imports Pallas, 20 ms)
        from jaxlib.mlir import passmanager

        module = lowered.compiler_ir("stablehlo")
        with module.context:
            passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(
                module.operation)
    except Exception:  # another JAX: the locations only cost time
        pass
    return lowered


def compile_lowered(lowered: Any, options: dict[str, Any] | None,
                    sequential: bool = False) -> Any:
    """``lowered.compile(options)``; without the options that only make it faster where this
    XLA does not know them (experimental flags: a newer jaxlib may rename them).
    ``sequential``: a one-device CPU executable with no loop split into intra-op tasks
    (``tosa_jax.seqcompile``; see SEQUENTIAL_MACS). CPU compiles take LLVM_OPTIONS, with the
    jaxlib releases whose private compile function seqcompile was tested against."""
    from tosa_jax import hostexec, seqcompile

    llvm = LLVM_OPTIONS if hostexec.tested_jaxlib() else ()
    if sequential or llvm:
        return seqcompile.compile_with(lambda: _compile(lowered, options), sequential, llvm)
    return _compile(lowered, options)


def _compile(lowered: Any, options: dict[str, Any] | None) -> Any:
    if not options:
        return lowered.compile()
    try:
        return lowered.compile(options)
    except Exception as e:  # XLA: "INVALID_ARGUMENT: ... no such option" and the like
        if "option" not in str(e).lower():
            raise
        optional = {*FLOAT_CONV_OPTIONS, _EMITTERS, _SPLIT}
        return lowered.compile({k: v for k, v in options.items() if k not in optional} or None)


def _inline_cpu_dispatch() -> None:
    """Run single-device CPU computations in the calling thread: JAX's
    ``jax_cpu_enable_async_dispatch`` off, unless ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` is set.

    By default XLA hands every call of an executable doing 1,000 operations or more to a worker
    thread and wakes the caller when it is done; on this project's 2-core VM that round trip
    costs about 0.1 ms a call, more than small graphs compute (batch 1, median of 1,000 calls:
    cnn_fp32 0.26 -> 0.11-0.14 ms, mlp_attn_int8 0.07 -> 0.03 ms, lstm_fp32 0.18-0.37 ->
    0.16 ms). A model's results are read right away, so nothing overlaps with it anyway.
    Computations over several devices (``evaluate``) stay asynchronous; JAX reads the flag
    when it starts its CPU backend, so this acts when this module is imported before JAX has
    started one (``import tosa_jax`` alone imports no JAX; a model's first use of it does)."""
    if "JAX_CPU_ENABLE_ASYNC_DISPATCH" in os.environ:
        return
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return
        import jax as module

        module.config.update("jax_cpu_enable_async_dispatch", False)
    except (ImportError, AttributeError):  # another JAX: keep its default
        pass


if "jax" in sys.modules:  # imported by the caller: set it now, before its backend may start
    _inline_cpu_dispatch()


def _flops(exe: Any) -> float:
    """The operations one run of a compiled executable does, by XLA's cost analysis
    (infinite where there is no analysis: then the executable counts as heavy; XLA leaves
    "flops" out where there are none, pure data movement)."""
    try:
        cost = exe.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        return float(cost.get("flops", 0.0))
    except Exception:
        return float("inf")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _has_floats(graph: Graph) -> bool:
    return any(t.dtype in FLOAT_TYPES for r in graph.regions for b in r.blocks
               for t in b.tensors.values())


def _quick_tier_helps(args: tuple[Any, ...]) -> bool:
    leaves = jax.tree.leaves(args)
    devices = {d for a in leaves for d in _devices(a)} or {jax.devices()[0]}
    return all(d.platform == "cpu" for d in devices)


def _placement(a: Any) -> Any:
    """Where an argument lives, as far as it decides the executable (committed device)."""
    sharding = getattr(a, "sharding", None)
    if sharding is None or not getattr(a, "committed", False):
        return None
    return tuple(sorted(d.id for d in sharding.device_set))


def _devices(a: Any) -> list[Any]:
    sharding = getattr(a, "sharding", None)
    if sharding is None or not getattr(a, "committed", False):
        return []
    return list(sharding.device_set)


def _serialize(exe: Any, blob: Callable[[], bytes] | None = None) -> dict[str, Any] | None:
    """A compiled executable as a picklable payload (None where the backend cannot);
    ``blob`` gives its XLA executable's bytes (by default serialized here)."""
    from tosa_jax import seqcompile

    weighted = isinstance(exe, hoist.Weighted)
    try:
        data, in_tree, out_tree = seqcompile.serialize(
            exe.exe if weighted else exe, blob() if blob is not None else None)
    except Exception:
        return None
    return {"exe": data, "in_tree": in_tree, "out_tree": out_tree,
            **({"weights": exe.host_weights()} if weighted else {})}


def _deserialize(entry: dict[str, Any], args: tuple[Any, ...],
                 default_device: Any = None) -> Any | None:
    """The executable of a cache entry, loaded for the devices of ``args``; None when it cannot
    be (the entry is then rebuilt)."""
    from jax.experimental import serialize_executable

    leaves = jax.tree.leaves(args)
    devices = sorted({d for a in leaves for d in _devices(a)}, key=lambda d: d.id)
    try:
        devices = devices or [default_device or jax.devices()[0]]
        # The executable runs on these devices only (by default JAX would take every device
        # of the backend, and expect that many shards of each argument).
        exe = serialize_executable.deserialize_and_load(
            entry["exe"], entry["in_tree"], entry["out_tree"], backend=devices[0].client,
            execution_devices=devices)
        weights = entry.get("weights")
        return exe if weights is None else hoist.Weighted.placed(exe, weights)
    except Exception:
        return None


def load(source: str | os.PathLike | bytes | Graph, *,
         device: jax.Device | str | None = None, max_elements: int | None = None,
         max_bytes: int | None = None, profile: str | list[str] | None = None,
         extensions: list[str] | None = None, level: str | None = None,
         cache: bool | str | os.PathLike | CompileCache | None = None,
         tiered: bool | None = None, check_requires: bool = False,
         numpy_floats: bool = False) -> Model:
    """Load a TOSA 1.0 flatbuffer (path or bytes) or an IR Graph as a callable Model.

    ``device``: a JAX device, or a platform name ("cpu", "gpu"); by default JAX's default device.
    ``max_elements`` (per tensor) and ``max_bytes`` (all tensors of the graph together, as
    declared) override the defaults of ``tosa_jax.limits``; a graph over them is refused with a
    TosaLimitError before anything is allocated or traced.
    ``profile`` ("PRO-INT", ["PRO-INT", "PRO-FP"] or a spec string such as "TOSA-1.0+INT+int16"),
    ``extensions`` and ``level`` ("8K", "none"): what the caller's target offers; a graph that
    breaks a TOSA 1.0.2 ERROR_IF, or needs more than offered, is refused with a
    TosaValidationError. None (the default) accepts whatever the graph needs; the graph's needs
    are ``model.requirements`` (see ``tosa_jax.profiles``).
    ``cache``: the persistent compile cache (``tosa_jax.cache``): None/True the environment's
    (``TOSA_JAX_CACHE_DIR``, ``TOSA_JAX_CACHE=0`` to turn it off), False none, or a directory.
    ``tiered``: compile a quick executable first, then the optimized one in the background (after
    the first call when the cache keeps it, else from the second); default on for integer graphs
    on the CPU and for the float graphs whose quick executable is proven to compute the
    optimized one's bits (``tosa_jax.float_tier``), ``TOSA_JAX_TIERED=0`` to turn it off.
    ``check_requires``: also check, on every call, TOSA's REQUIREs that depend on the values
    (an int32 ADD that overflows, a GATHER index out of range, POW of a negative base...): a
    call that breaks one still returns its outputs, with a ``TosaUnpredictableWarning`` naming
    the operator and the rule (``model.split_requires`` for the raw form); ``model(...)`` and
    ``model.run`` check, ``evaluate`` does not. The checks are part of the compiled program (a
    separate compile-cache entry), and only where the range analysis cannot rule a failure out.
    ``numpy_floats``: a float graph small enough to start on numpy (``tosa_jax.npexec``: no
    XLA compile, nor XLA's rebuild of a cached executable) runs all its calls there: for a
    graph run once, as a test suite runs each graph (``tosa_jax.reference_model`` sets it).
    Its results meet TOSA's compliance modes but are not XLA's bits (transcendentals,
    summation order), so the model does not hand its calls over to XLA as integer graphs do
    (``evaluate``, which batches through XLA, gives XLA's).
    """
    limits = Limits.default(max_elements=max_elements, max_bytes=max_bytes)
    opts = {"device": device, "limits": limits, "profile": profile, "extensions": extensions,
            "level": level, "cache": cache, "tiered": tiered, "check_requires": check_requires,
            "numpy_floats": numpy_floats}
    store = open_cache(cache)

    def key_of(digest: str) -> dict[str, Any]:
        return {"kind": "model", "format": 3, "graph": digest, "code": code_digest(),
                "target": repr((profile, extensions, level)), "limits": repr(limits)}

    st = _file_stat(source) if store is not None else None
    known = store.file_digest(os.fspath(source), st) if st is not None else None
    if known is not None:
        # A file this cache has hashed before, unchanged: not read unless the graph is needed
        digest = known
        meta = store.get(key_of(digest))
        if meta is not None:
            label, path = os.fspath(source), os.path.abspath(source)  # (the cwd may change)
            return Model(None, digest=digest, meta=meta,
                         reader=lambda: _parse(_unchanged(path, digest), label, limits), **opts)
    data, label = source_bytes(source)
    if data is None or store is None:
        with no_gc():
            graph, digest = _read(source, limits)
            return Model(graph, digest=digest, **opts)
    digest = hashlib.sha256(data).hexdigest()
    if st is not None and known is None:
        store.remember_digest(os.fspath(source), st, digest)
    key = key_of(digest)
    meta = store.get(key)
    if meta is not None:
        return Model(None, digest=digest, meta=meta,
                     reader=lambda: _parse(data, label, limits), **opts)
    with no_gc():
        model = Model(_parse(data, label, limits), digest=digest, **opts)
    if not model.variables:
        store.put(key, model._meta())
    return model


def _file_stat(source: object) -> os.stat_result | None:
    """``os.stat`` of a source that is a path (str) to a regular file, else None."""
    if not isinstance(source, (str, os.PathLike)) or not isinstance(os.fspath(source), str):
        return None
    try:
        st = os.stat(source)
    except (OSError, ValueError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _unchanged(path: str, digest: str) -> bytes:
    """The bytes of the graph file a model was loaded from by its remembered digest, read
    when the graph is first needed: refused if they are no longer the bytes of ``digest``."""
    data = file_bytes(path)
    if hashlib.sha256(data).hexdigest() != digest:
        raise TosaFormatError(f"{path}: the file changed after it was loaded; load it again")
    return data


def _input_rules(graph: Graph, requirements: Any) -> list[tuple[int, Any]]:
    """(input position, profiles.checks.RuntimeCheck) for the ERROR_IFs on the values of the
    graph's inputs."""
    positions = {name: i for i, name in enumerate(graph.main.inputs)}
    return [(positions[c.tensor], c) for c in requirements.runtime_checks
            if c.block == graph.main.name and c.tensor in positions]


def _validate(graph: Graph, *target: Any) -> Any:
    """profiles.validate, imported when a graph is first checked: a model loaded from the
    compile cache never is, and the reader and profiles (0.15 s of imports) stay unloaded."""
    from tosa_jax.profiles import validate

    return validate(graph, *target)


def _parse(data: bytes, label: str | None, limits: Limits | None) -> Graph:
    """Any front-door format (TOSA flatbuffer, TOSA MLIR, TFLite); the reader is imported here,
    not when a model comes from the compile cache."""
    from tosa_jax import frontends

    return frontends.read_labelled(data, label, limits)


def _device(device: jax.Device | str | None) -> jax.Device | None:
    """A platform name ("cpu", "gpu") as its first JAX device; a device or None as it is."""
    if not isinstance(device, str):
        return device
    try:
        return jax.devices(device)[0]
    except RuntimeError as e:  # JAX: "Unknown backend" or the backend failed to start
        present = sorted({d.platform for d in jax.devices()})
        raise TosaInputError(f"device {device!r}: JAX has no such platform on this machine "
                             f"(it has: {', '.join(present)})") from e
