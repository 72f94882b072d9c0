"""tosa_jax: TOSA 1.0 graphs as jit-compiled JAX functions, bit-exact for integers."""

from tosa_jax import inspect  # tosa_jax.inspect.compare(...) after a plain import tosa_jax
from tosa_jax.errors import (
    TosaConverterError,
    TosaConverterMissingError,
    TosaError,
    TosaFormatError,
    TosaInputError,
    TosaLimitError,
    TosaUnsupportedError,
    TosaValidationError,
    TosaVersionError,
)
from tosa_jax.evaluate import EvalResult, evaluate
from tosa_jax.frontends import convert
from tosa_jax.frontends.pytorch import export_torch, from_torch
from tosa_jax.ir import Graph, GraphBuilder
from tosa_jax.lowering.numerics import Wide
from tosa_jax.model import Model, TensorSpec, load
from tosa_jax.serialization import read, write

__version__ = "0.1.0"

__all__ = [
    "EvalResult", "Graph", "GraphBuilder", "Model", "TensorSpec", "TosaConverterError",
    "TosaConverterMissingError", "TosaError", "TosaFormatError", "TosaInputError",
    "TosaLimitError", "TosaUnsupportedError", "TosaValidationError", "TosaVersionError", "Wide",
    "convert", "evaluate", "export_torch", "from_torch", "inspect", "load", "read", "write",
]
