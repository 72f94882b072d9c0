"""tosa_jax: TOSA 1.0 graphs as jit-compiled JAX functions, bit-exact for integers.

The public names load on first use (PEP 562): ``import tosa_jax.ir``, ``tosa_jax.profiles`` or
``tosa-jax info`` read graphs without importing JAX or the lowerings.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from tosa_jax.errors import (
    TosaConverterError,
    TosaConverterMissingError,
    TosaError,
    TosaFormatError,
    TosaInputError,
    TosaLimitError,
    TosaUnpredictableWarning,
    TosaUnsupportedError,
    TosaValidationError,
    TosaVersionError,
)

__version__ = "0.1.0"

# Public name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "EvalResult": "tosa_jax.evaluate", "evaluate": "tosa_jax.evaluate",
    "convert": "tosa_jax.frontends",
    "export_torch": "tosa_jax.frontends.pytorch", "from_torch": "tosa_jax.frontends.pytorch",
    "Graph": "tosa_jax.ir", "GraphBuilder": "tosa_jax.ir", "Wide": "tosa_jax.ir",
    "BlockScaled": "tosa_jax.ir",
    "Model": "tosa_jax.model", "TensorSpec": "tosa_jax.model", "load": "tosa_jax.model",
    "read": "tosa_jax.serialization", "write": "tosa_jax.serialization",
}

# Submodules usable after a plain ``import tosa_jax`` (tosa_jax.inspect.compare(...)), also
# imported on first use.
_SUBMODULES = ("inspect",)

if TYPE_CHECKING:
    from tosa_jax import inspect
    from tosa_jax.evaluate import EvalResult, evaluate
    from tosa_jax.frontends import convert
    from tosa_jax.frontends.pytorch import export_torch, from_torch
    from tosa_jax.ir import BlockScaled, Graph, GraphBuilder, Wide
    from tosa_jax.model import Model, TensorSpec, load
    from tosa_jax.serialization import read, write


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tosa_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


class _Package(types.ModuleType):
    """``tosa_jax.evaluate`` is the function: the import system binds a submodule on its package
    when it is first imported, and the submodule of that name must not hide the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "BlockScaled", "EvalResult", "Graph", "GraphBuilder", "Model", "TensorSpec",
    "TosaConverterError", "TosaConverterMissingError", "TosaError", "TosaFormatError",
    "TosaInputError", "TosaLimitError", "TosaUnpredictableWarning", "TosaUnsupportedError",
    "TosaValidationError",
    "TosaVersionError", "Wide",
    "convert", "evaluate", "export_torch", "from_torch", "inspect", "load", "read", "write",
]
