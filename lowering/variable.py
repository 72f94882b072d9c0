"""Variable operators (spec chapter "Variable Operators", EXT-VARIABLE): VARIABLE,
VARIABLE_WRITE, VARIABLE_READ.

A variable is a tensor the graph keeps across invocations. In a TOSA flatbuffer it is a tensor
flagged ``variable``: its ``variable_name`` is the variable's name (its globally unique
identifier; the tensor's own name when unset), its shape and type are ``var_shape`` and ``type``,
its data (if any) is ``initial_value``. The operators refer to it through that tensor: VARIABLE
declares it as its output, VARIABLE_WRITE writes its input to it (its output), VARIABLE_READ reads
it (its input). tosa-tools' serializer, and the reference model, write and read such tensors with
IDENTITY operators instead: both forms work, because the executor, not these lowerings, keeps the
state: it reads every variable tensor from the state, in operator order, and stores every value
written to one. What is left here is the data each operator passes on.
"""

from __future__ import annotations

from typing import Any

from tosa_jax.lowering import Node, lowering


@lowering("VARIABLE")
def variable(node: Node) -> Any:
    """Declare the variable ``node.out``. Its memory is allocated, and set to ``initial_value``,
    once, when the model is created (``Model.reset_state`` does it again), not at each
    invocation: here it keeps the value it holds."""
    return node.state[node.out.variable_key]


@lowering("VARIABLE_WRITE")
def variable_write(node: Node, input1: Any) -> Any:
    """Write ``input1`` to the variable (the operator's output tensor); the executor checks its
    shape and type against the variable's (the REQUIREs) and stores it in the state."""
    return input1


@lowering("VARIABLE_READ")
def variable_read(node: Node, variable: Any) -> Any:
    """The value the variable (the operator's input tensor) holds now."""
    return variable
