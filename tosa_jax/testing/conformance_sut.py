"""tosa_jax as a system under test (SUT) for the official TOSA conformance runner.

``tosa_verif_run_tests --sut-module tosa_jax.testing.conformance_sut`` imports this module from
the environment (``pip install -e .``); ``tosa_jax.testing.conformance`` runs it so. The runner
names each output file after the module: ``<ofm>.tosa_jax.testing.conformance_sut.npy``.

The contract (``runner/tosa_test_runner.py`` in tosa-tools 2026.8.0):

* the runner first runs ``runner.tosa_refmodel_compliance_sut_run`` (the reference model in
  precise mode) and renames its outputs to ``<ofm>.runner.tosa_refmodel_compliance_sut_run.npy``;
* then it calls ``runTestGraph()`` here, which must write every output named in
  ``desc.json`` ``ofm_file`` into the test directory as ``.npy``, and return
  ``(TosaGraphResult, message)``;
* ``testResult()`` (inherited) renames our files to ``<ofm>.<this module>.npy`` and calls the
  ``tosa_verify`` executable on the pair, which compares element types strictly: each output
  must be saved with the numpy dtype the reference model itself writes (see ``OUTPUT_DTYPES``).

Environment knobs (read once, at import):

* ``TOSA_JAX_SUT_X64=1`` turns on ``jax_enable_x64`` before tosa_jax is imported (results must
  be identical either way: the runtime's design says so and this lets the suite prove it).
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from runner.tosa_test_runner import TosaTestRunner

if os.environ.get("TOSA_JAX_SUT_X64", "") not in ("", "0"):
    import jax

    jax.config.update("jax_enable_x64", True)

import tosa_jax  # noqa: E402  (after the x64 switch; its names load JAX on first use)
from tosa_jax import float_tier  # noqa: E402
from tosa_jax.ir import HOST_DTYPES, INT_RANGES  # noqa: E402
from tosa_jax.model import tiering_enabled  # noqa: E402

# A graph run by numpy (tosa_jax.npexec: an integer graph's first call, a float graph loaded
# with numpy_floats, as tosa_jax.reference_model loads it) is also run by its XLA executable:
# an integer graph's outputs must be the same bits, a float graph's are judged by tosa_verify
# too (testResult). TOSA_JAX_SUT_ENGINES=first runs only the first engine.
BOTH_ENGINES = os.environ.get("TOSA_JAX_SUT_ENGINES", "both").strip().lower() != "first"

# The numpy dtype tosa_jax's ``Model.run`` takes for a graph input of each TOSA element type.
# The conformance .npy input files hold: INT4 as int8 (sign-extended), INT48 as int64
# (sign-extended), BOOL as bool, unsigned RESCALE data as the bit pattern in int8/int16, BF16 and
# FP8E4M3 as 2- and 1-byte void ("<V2", "<V1": ml_dtypes' own .npy form), FP8E5M2 as uint8 bits.
INPUT_DTYPES: dict[str, np.dtype] = HOST_DTYPES  # the IR's table: one per TOSA type
_PACKED_BITS = {"FP4E2M1": 4, "FP6E2M3": 6, "FP6E3M2": 6}

# What tosa_verify accepts for each TOSA output element type, checked against tosa-tools
# 2026.8.0: it refuses any other dtype ("Data type/format not suitable", non-compliant).
#   BOOL: bool only. INT8/INT16: int8/int16 (or uint8/uint16: compared bitwise). INT32: int32.
#   INT48: int64, sign-extended. INT4: int8 (or uint8), sign-extended. FP32: float32 (the
#   precise reference writes float64, but the implementation's file must be float32).
#   FP16: float16. BF16: "<V2" (np.save of an ml_dtypes.bfloat16 array; "|V2" is refused).
#   FP8E4M3: "<V1" (np.save of ml_dtypes.float8_e4m3fn). FP8E5M2: uint8 bit pattern (an
#   ml_dtypes.float8_e5m2 array saves as "<f1", which is refused).
#   TOSA 1.1 (draft): as tosa-tools' serializer.numpy_utils.save_npy writes them; MXINT8 as
#   its int8 code in uint8.
OUTPUT_DTYPES: dict[str, np.dtype] = {**HOST_DTYPES, "MXINT8": np.dtype(np.uint8)}


def _target(table: dict[str, np.dtype], tosa_type: str) -> np.dtype | None:
    return table.get(tosa_type)


class SutInputError(Exception):
    """An input file does not hold what the graph declares."""


def _tosa_dtype_name(spec: Any) -> str:
    dtype = getattr(spec, "dtype", None)
    return str(getattr(dtype, "name", dtype)).upper()


def _unpack(array: np.ndarray, tosa_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """FP4/FP6 .npy data packed 4 or 6 bits a value (last dimension shortened) -> one byte each."""
    from tosa_jax.serialization import unpack_bits

    count = int(np.prod(shape))
    return unpack_bits(array.view(np.uint8).reshape(-1), _PACKED_BITS[tosa_type],
                       count).reshape(shape).view(_target(INPUT_DTYPES, tosa_type))


def _pack(array: np.ndarray, tosa_type: str) -> np.ndarray:
    """One FP4/FP6 value a byte -> the packed uint8 form, last dimension shortened."""
    from tosa_jax.serialization import pack_bits

    packed = pack_bits(np.asarray(array).view(np.uint8), _PACKED_BITS[tosa_type])
    shape = array.shape[:-1] + (array.shape[-1] * _PACKED_BITS[tosa_type] // 8,)
    return packed[:int(np.prod(shape))].reshape(shape) if array.ndim else packed


def _convert_input(name: str, array: np.ndarray, tosa_type: str,
                   shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Bring an input array read from .npy to the numpy dtype tosa_jax takes for tosa_type."""
    target = _target(INPUT_DTYPES, tosa_type)
    if target is None:
        return array  # a type this harness does not know: hand it over untouched
    if tosa_type in _PACKED_BITS and shape is not None and array.dtype == np.uint8:
        return _unpack(array, tosa_type, shape)
    if tosa_type == "MXINT8" and array.dtype.itemsize == 1:
        return array.view(np.int8)  # the int8 code, stored as uint8
    if array.dtype == target:
        out = array
    elif array.dtype.kind in "uV" and array.dtype.itemsize == target.itemsize \
            and target.kind not in "biu":
        out = array.view(target)  # bf16 / fp8 stored as raw bits
    elif array.dtype.kind in "biu" and target.kind in "biu":
        out = array.astype(target)
        if not np.array_equal(out.astype(np.int64), array.astype(np.int64)):
            raise SutInputError(f"input {name!r}: values of {array.dtype} do not fit {tosa_type}")
    else:
        out = array.astype(target)
    if tosa_type in ("INT4", "INT48") and out.size:  # narrower than their host dtype
        lo, hi = INT_RANGES[tosa_type]
        if int(out.min()) < lo or int(out.max()) > hi:
            raise SutInputError(f"input {name!r}: values outside the {tosa_type} range")
    return out


def _convert_output(name: str, value: Any, tosa_type: str | None) -> np.ndarray:
    """Bring a tosa_jax output to the numpy dtype tosa_verify wants for tosa_type."""
    array = np.asarray(value)
    target = _target(OUTPUT_DTYPES, tosa_type or "")
    if target is None:
        return array
    if tosa_type == "MXINT8" and array.dtype.itemsize == 1:
        return array.view(np.uint8)  # the int8 code as the reference model stores it
    if array.dtype != target:
        if array.dtype.kind in "biu" and target.kind in "biu":
            out = array.astype(target)
            if not np.array_equal(out.astype(np.int64), array.astype(np.int64)):
                raise SutInputError(f"output {name!r}: {array.dtype} values do not fit "
                                    f"{tosa_type}")
            array = out
        elif array.dtype.itemsize == target.itemsize and (
                array.dtype.kind == "V" or tosa_type == "MXINT8"):
            array = array.view(target)
        else:
            array = array.astype(target)
    if tosa_type == "FP8E5M2":
        array = array.view(np.uint8)
    if tosa_type in _PACKED_BITS:
        array = _pack(array, tosa_type)
    return array


def _scale_file(path: Path) -> Path:
    """Where the scales of a block-scaled tensor's .npy file live (runner/tosa_test_runner.py)."""
    return path.with_stem(f"{path.stem}_scale")


def read_inputs(test_dir: Path, desc: dict[str, Any], model: Any) -> dict[str, Any]:
    """A conformance test's inputs (``desc``: its desc.json) read from their .npy files, by
    name, as ``model.run`` takes them: a block-scaled input as its (values, scales) pair, the
    scales from <file stem>_scale.npy, as the reference model reads them."""
    specs = {spec.name: spec for spec in model.inputs}
    feeds: dict[str, Any] = {}
    for name, file in zip(desc["ifm_name"], desc["ifm_file"], strict=True):
        spec = specs.get(name)
        feeds[name] = _convert_input(name, np.load(test_dir / file),
                                     _tosa_dtype_name(spec) if spec else "",
                                     tuple(spec.shape) if spec else None)
        if spec is not None and spec.block_size:
            scales = np.load(_scale_file(test_dir / file))
            feeds[name] = (feeds[name], _convert_input(f"{name} scales", scales,
                                                       spec.scale_dtype or "", spec.scale_shape))
    return feeds


class TosaSUTRunner(TosaTestRunner):
    """Runs ``test.tosa`` of one conformance test directory on tosa_jax."""

    def __init__(self, args: Any, runnerArgs: list[str], testDirPath: Path) -> None:  # noqa: N803
        super().__init__(args, runnerArgs, testDirPath)
        # A float graph's second engine: its outputs, judged after the first's (testResult)
        self._second: tuple[Any, dict[str, Any]] | None = None

    def _output_types(self) -> dict[str, str]:
        """TOSA element type of each output, from the test description."""
        desc = self.testDesc
        types: dict[str, str] = {}
        tensors = desc.get("meta", {}).get("compliance", {}).get("tensors", {})
        for name in desc["ofm_name"]:
            if name in tensors and "data_type" in tensors[name]:
                types[name] = str(tensors[name]["data_type"]).upper()
        out_types = desc.get("test_details", {}).get("output_types", [])
        for name, typ in zip(desc["ofm_name"], out_types, strict=False):
            types.setdefault(name, str(typ).upper())
        return types

    def runTestGraph(self) -> tuple[TosaTestRunner.TosaGraphResult, str | None]:  # noqa: N802
        """Run the graph on tosa_jax and write its outputs where the runner expects them."""
        result = TosaTestRunner.TosaGraphResult
        desc = self.testDesc
        test_dir = self.testDirPath
        try:
            # Judge at the level the runner gives the reference model (EIGHTK by default).
            level = str(getattr(self.args, "tosa_level", "EIGHTK")).upper()
            model = tosa_jax.load(str(test_dir / desc["tosa_file"]),
                                  level={"EIGHTK": "8K", "NONE": "none"}.get(level, "8K"),
                                  numpy_floats=BOTH_ENGINES)
            if BOTH_ENGINES and model.floats and not model.float_tier and tiering_enabled():
                # An FP32 convolution graph of any size starts on its quick tier where
                # tosa_jax.float_tier proves it computes the optimized tier's bits (the suite's
                # graphs are small; MIN_MACS only spares compile time: the rule is the same),
                # and the optimized executable must give those bits too (below)
                model.float_tier = model.tiered = float_tier.candidate(
                    model.graph, float_tier.MIN_MACS, model.conv_kinds)
            feeds = read_inputs(test_dir, desc, model)
            outputs = model.run(feeds)
            xla = outputs
            if isinstance(model._np, dict) and BOTH_ENGINES:
                # Computed by the graph's numpy program (tosa_jax.npexec), which the verifier
                # judges; the XLA executable of the same graph must give the same bits (an
                # integer graph), or is judged by the verifier as well (a float graph), so
                # that the slice judges both engines against the reference model.
                floats = model._np["floats"]
                model._np = False
                second = xla = model.run(feeds)
                if floats:
                    self._second = (model, second)
                else:
                    differ = [name for name, value in second.items()
                              if not np.array_equal(value, outputs[name])]
                    if differ:
                        return result.OTHER_ERROR, (
                            f"tosa_jax's numpy program and XLA executable differ on output(s) "
                            f"{differ}")
            if model.floats and BOTH_ENGINES and (
                    any(slot.tier == 0 for slot in model._executables.values())
                    or getattr(model._host, "tier", 1) == 0):  # (its host executable's, cached)
                # A float graph answered by the quick tier (tosa_jax.float_tier): the optimized
                # executable must give the same bits
                model.compile(**feeds)
                differ = [name for name, value in model.run(feeds).items()
                          if np.asarray(value).tobytes() != np.asarray(xla[name]).tobytes()]
                if differ:
                    return result.OTHER_ERROR, (
                        f"tosa_jax's quick-tier and optimized executables differ on output(s) "
                        f"{differ}")
        except tosa_jax.TosaError as exc:
            return result.TOSA_ERROR, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a crash of the runtime: fail the test, keep the run going
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            return result.OTHER_ERROR, f"tosa_jax crashed: {type(exc).__name__}: {exc}\n{detail}"

        return self._write_outputs(model, outputs)

    def _write_outputs(self, model: Any, outputs: dict[str, Any],
                       ) -> tuple[TosaTestRunner.TosaGraphResult, str | None]:
        """Write the outputs into the test directory, as the runner reads them."""
        result = TosaTestRunner.TosaGraphResult
        desc = self.testDesc
        test_dir = self.testDirPath
        output_types = self._output_types()
        try:
            for name, file in zip(desc["ofm_name"], desc["ofm_file"], strict=True):
                if name not in outputs:
                    return result.OTHER_ERROR, f"tosa_jax returned no output named {name!r}"
                value = outputs[name]
                if isinstance(value, tosa_jax.BlockScaled):
                    # a block-scaled output: its scales go to <file stem>_scale.npy, as the
                    # reference model writes them
                    spec = next(s for s in model.outputs if s.name == name)
                    np.save(_scale_file(test_dir / file),
                            _convert_output(name, value.scales, spec.scale_dtype),
                            allow_pickle=False)
                    value = value.values
                array = _convert_output(name, value, output_types.get(name))
                np.save(test_dir / file, array, allow_pickle=False)
        except Exception as exc:
            return result.OTHER_ERROR, f"writing outputs failed: {type(exc).__name__}: {exc}"
        return result.TOSA_VALID, None

    def testResult(self, tosaGraphResult: Any, graphMessage: str | None = None,  # noqa: N802,N803
                   ) -> tuple[Any, str | None]:
        """The runner's verdict on the outputs; for a float graph run by both engines, on the
        numpy program's outputs and then on the XLA executable's (both must pass)."""
        verdict, message = super().testResult(tosaGraphResult, graphMessage)
        if self._second is None or verdict != TosaTestRunner.Result.EXPECTED_PASS:
            return verdict, message
        model, outputs = self._second
        self._second = None
        written, why = self._write_outputs(model, outputs)
        second, message = super().testResult(written, why)
        if second != TosaTestRunner.Result.EXPECTED_PASS:
            return second, f"tosa_jax's XLA executable (its numpy program passed): {message}"
        return verdict, message
