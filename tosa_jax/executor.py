"""Walk a block of the IR and call each operator's lowering: the graph becomes one JAX function."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tosa_jax.errors import TosaError, TosaUnsupportedError, TosaValidationError
from tosa_jax.ir import Block, Graph, Tensor
from tosa_jax.lowering import LOWERINGS, Node
from tosa_jax.lowering.numerics import DEVICE_DTYPES, Wide, wide_from_numpy


@cache
def _arity(op: str) -> tuple[int, bool, frozenset[str]]:
    """(number of tensor inputs, variadic?, attribute names) of a lowering, from its signature."""
    params = list(inspect.signature(LOWERINGS[op]).parameters.values())[1:]  # after ``node``
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    attrs = frozenset(p.name for p in params if p.kind == p.KEYWORD_ONLY)
    return len(positional), variadic, attrs


def check_block(graph: Graph, block: Block) -> None:
    """Structural checks before tracing: every operator lowered, every tensor defined once."""
    defined = set(block.inputs)
    for name in block.inputs:
        if name not in block.tensors:
            raise TosaValidationError(f"block {block.name!r}: input {name!r} has no tensor")
    for i, op in enumerate(block.operators):
        where = f"{op.op} (operator #{i} of block {block.name!r}" + (
            f", at {op.location})" if op.location else ")")
        if op.op not in LOWERINGS:
            raise TosaUnsupportedError(f"operator {where} is not supported by tosa_jax")
        n_inputs, variadic, attrs = _arity(op.op)
        if len(op.inputs) < n_inputs or (len(op.inputs) > n_inputs and not variadic):
            raise TosaValidationError(
                f"{where}: takes {n_inputs}{' or more' if variadic else ''} inputs, "
                f"the graph gives {len(op.inputs)}")
        if set(op.attrs) != attrs:
            raise TosaValidationError(
                f"{where}: attributes {sorted(op.attrs)} do not match the operator's "
                f"{sorted(attrs)}")
        for name in op.inputs:
            if name not in defined:
                raise TosaValidationError(
                    f"{where}: input {name!r} is used before it is defined (or never defined)")
        for name in op.outputs:
            if name not in block.tensors:
                raise TosaValidationError(f"{where}: output {name!r} has no tensor")
            if name in defined:
                raise TosaValidationError(f"{where}: output {name!r} is defined twice")
            defined.add(name)
    for name in block.outputs:
        if name not in defined:
            raise TosaValidationError(f"block {block.name!r}: output {name!r} is never defined")


def _check_result(node: Node, value: Any, t: Tensor) -> None:
    """A lowering's result must have the declared shape and element type (catches our bugs)."""
    if t.dtype == "SHAPE":
        return
    if t.dtype == "INT48":
        ok = isinstance(value, Wide) and tuple(jnp.shape(value.hi)) == t.shape
    else:
        ok = (tuple(jnp.shape(value)) == t.shape
              and jnp.asarray(value).dtype == jnp.dtype(DEVICE_DTYPES[t.dtype]))
    if not ok:
        got = (f"Wide{value.shape}" if isinstance(value, Wide)
               else f"{jnp.asarray(value).dtype}{list(jnp.shape(value))}")
        raise TosaError(f"internal error: lowering of {node.op} produced {got} for {t.name!r}, "
                        f"declared {t.dtype}{list(t.shape)}")


def _is_constant(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        isinstance(value, Wide) and isinstance(value.hi, np.ndarray))


def _to_host(value: Any) -> Any:
    if isinstance(value, Wide):
        return Wide(np.asarray(value.hi), np.asarray(value.lo))
    return np.asarray(value)


def evaluate_block(graph: Graph, block: Block, args: Sequence[Any]) -> tuple[Any, ...]:
    """Trace ``block`` on ``args`` (one value per block input); returns the block outputs."""
    env: dict[str, Any] = dict(zip(block.inputs, args, strict=False))
    for op in block.operators:
        node = Node(op.op, tuple(block.tensors[n] for n in op.inputs),
                    tuple(block.tensors[n] for n in op.outputs), op.location)
        args = [env[n] for n in op.inputs]
        if args and all(_is_constant(a) for a in args):
            # Constant propagation: an operator of constants is evaluated now, op by op, with
            # its own exact lowering, and its result stays a host constant. XLA then never sees
            # (or folds) constant subgraphs: its constant folder miscomputes some of them.
            with jax.ensure_compile_time_eval():
                result = LOWERINGS[op.op](node, *args, **op.attrs)
            single = not isinstance(result, tuple) or isinstance(result, Wide)
            result = _to_host(result) if single else tuple(_to_host(r) for r in result)
        else:
            result = LOWERINGS[op.op](node, *args, **op.attrs)
        single = not isinstance(result, tuple) or isinstance(result, Wide)
        results = (result,) if single else result
        for t, value in zip(node.outputs, results, strict=False):
            _check_result(node, value, t)
            env[t.name] = value
    return tuple(env[n] for n in block.outputs)


def graph_function(graph: Graph) -> Callable[..., tuple[Any, ...]]:
    """The pure function of the graph's entry block: inputs in order -> tuple of outputs."""
    check_block(graph, graph.main)

    def fn(*args: Any) -> tuple[Any, ...]:
        return evaluate_block(graph, graph.main, args)

    return fn


def host_to_value(array: np.ndarray, dtype: str) -> Any:
    """Convert a caller's host array to the value the graph function takes."""
    return wide_from_numpy(array) if dtype == "INT48" else array
