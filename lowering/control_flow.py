"""Control flow operators (spec chapter "Control Flow Operators", EXT-CONTROLFLOW): COND_IF and
WHILE_LOOP, as ``lax.cond`` and ``lax.while_loop`` inside the one traced function.

The blocks they run are evaluated with ``node.run_block(name, values, state)``, which the executor
gives them (see ``tosa_jax.lowering``). The variable state (EXT-VARIABLE; ``{}`` for most graphs)
travels through the branches and the loop with the tensor lists, so blocks may read and write
variables. The ERROR_IFs on the lists' shapes and types are checked when the graph is loaded
(``executor.check_block``); ``tosa_nesting_depth`` is a level limit (``tosa_jax.profiles``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tosa_jax.lowering import Node, WithState, lowering
from tosa_jax.lowering.numerics import Wide, no_fold

# A WHILE_LOOP whose values are all compile-time constants is iterated before tracing, like any
# operator of constants, for at most this many iterations; past them it runs as an XLA loop.
MAX_CONSTANT_ITERATIONS = 1024


def _is_constant(value: Any) -> bool:
    return isinstance(value.hi if isinstance(value, Wide) else value, np.ndarray)


def _truth(condition: Any) -> Any:
    """The single element of a one-element BOOL tensor: a Python bool if it is a constant."""
    if isinstance(condition, np.ndarray):
        return bool(condition.reshape(()))
    return jnp.reshape(condition, ())


def _traced(values: Any) -> Any:
    """Host constants among ``values`` (a pytree) as JAX values XLA will not constant-fold, so
    the same types flow through both branches and around the loop whatever is constant."""
    return jax.tree.map(no_fold, values)


@lowering("COND_IF")
def cond_if(node: Node, condition: Any, *input_list: Any, then_graph: str,
            else_graph: str) -> WithState:
    """``if (condition[0]) then_graph(input_list) else else_graph(input_list)``."""
    run = node.run_block
    taken = _truth(condition)
    if isinstance(taken, bool):
        # A constant condition picks its branch now: the other one is never traced, and the
        # taken block's operators of constants stay constants.
        outputs, state = run(then_graph if taken else else_graph, input_list, node.state)
        return WithState(outputs, state)

    def branch(name: str) -> Any:
        def evaluate(operands: tuple[Sequence[Any], dict[str, Any]]) -> Any:
            return run(name, operands[0], operands[1])
        return evaluate

    outputs, state = lax.cond(taken, branch(then_graph), branch(else_graph),
                              _traced((tuple(input_list), node.state)))
    return WithState(tuple(outputs), state)


@lowering("WHILE_LOOP")
def while_loop(node: Node, *input_list: Any, cond_graph: str, body_graph: str) -> WithState:
    """``while (cond_graph(list)) list = body_graph(list)``: the condition is evaluated before
    the first iteration and after each one, as in the spec's pseudocode."""
    run = node.run_block

    def condition(values: Sequence[Any], state: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        (result,), state = run(cond_graph, values, state)
        return _truth(result), state

    def traced_condition(values: Sequence[Any],
                         state: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        go, state = condition(values, state)
        return jnp.asarray(go, jnp.bool_), state

    values, state = tuple(input_list), node.state
    go, state = condition(values, state)
    # While everything is a constant, iterate now (each block's operators are evaluated as
    # constants): such a loop never reaches XLA, as no constant subgraph does.
    for _ in range(MAX_CONSTANT_ITERATIONS):
        if not isinstance(go, bool) or not all(_is_constant(v) for v in values):
            break
        if not go:
            return WithState(values, state)
        values, state = run(body_graph, values, state)
        go, state = condition(values, state)
    if isinstance(go, bool) and not go:
        return WithState(values, state)

    def cond_fun(carry: tuple[Any, ...]) -> Any:
        return carry[0]

    def body_fun(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        _, values, state = carry
        values, state = run(body_graph, values, state)
        go, state = traced_condition(values, state)
        return go, tuple(values), state

    carry = (jnp.asarray(go, jnp.bool_), values, state)
    _, values, state = lax.while_loop(cond_fun, body_fun, _traced(carry))
    return WithState(tuple(values), state)
