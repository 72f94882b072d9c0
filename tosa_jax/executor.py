"""Walk a block of the IR and call each operator's lowering: the graph becomes one JAX function."""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tosa_jax import layout, reroll
from tosa_jax.errors import (
    TosaError,
    TosaInputError,
    TosaUnsupportedError,
    TosaValidationError,
)
from tosa_jax.ir import (
    CONSTANT_OPS,
    HOST_DTYPES,
    STATEFUL_OPS,
    WIDE_TYPES,
    Block,
    BlockScaled,
    Graph,
    Operator,
    Tensor,
    Wide,
    host_to_value,
    num_elements,
)
from tosa_jax.layout import Laid
from tosa_jax.lowering import LOWERINGS, Node, WithState
from tosa_jax.lowering.numerics import (
    DEVICE_DTYPES,
    OWN_KERNEL_ELEMENTS,
    collecting_requires,
    fusion_boundary,
    is_host,
    lowering_target,
)
from tosa_jax.ranges import BlockRanges
from tosa_jax.violations import ROLLED, RULE_NAMES, runtime_checks
from tosa_jax.violations import blocks as _blocks
from tosa_jax.violations import where as _where

# Operators that XLA fuses into their users (elementwise and data layout). An integer result of
# one of them used by two or more operators is computed once (numerics.fusion_boundary): XLA
# would otherwise copy its whole producing chain into each user. Also where the block carries
# transposes as layouts (run_block's ``once``).
FUSIBLE_OPS = frozenset({
    "RESCALE", "CAST", "CLAMP", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SELECT", "ABS",
    "NEGATE", "INTDIV", "ARITHMETIC_RIGHT_SHIFT", "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT",
    "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT", "CLZ", "IDENTITY", "RESHAPE",
    "TRANSPOSE", "SLICE", "CONCAT", "PAD", "TILE", "REVERSE"})
# The attributes by which control-flow operators name the blocks they run.
BLOCK_ATTRIBUTES = ("then_graph", "else_graph", "cond_graph", "body_graph")


@cache
def _arity(op: str) -> tuple[int, bool, frozenset[str]]:
    """(number of tensor inputs, variadic?, attribute names) of a lowering, from its signature."""
    params = list(inspect.signature(LOWERINGS[op]).parameters.values())[1:]  # after ``node``
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    attrs = frozenset(p.name for p in params if p.kind == p.KEYWORD_ONLY)
    return len(positional), variadic, attrs


def check_block(graph: Graph, block: Block, _running: tuple[int, ...] = ()) -> None:
    """Structural checks before tracing: every operator lowered, every tensor defined once.

    Blocks run by control-flow operators are checked too (recursively; recursion is refused),
    and so are their ERROR_IFs on the shapes and types of the lists they exchange. Variable
    tensors (EXT-VARIABLE) hold a value from the start and may be written more than once.
    """
    variables = {n for n, t in block.tensors.items() if t.variable}
    defined = set(block.inputs) | variables
    for name in block.inputs:
        if name not in block.tensors:
            raise TosaValidationError(f"block {block.name!r}: input {name!r} has no tensor")
    for i, op in enumerate(block.operators):
        where = _where(op, i, block)
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
            if op.op in CONSTANT_OPS and block.tensors[name].data is None:
                raise TosaValidationError(f"{where}: constant {name!r} has no data")
            if name in defined and name not in variables:
                raise TosaValidationError(f"{where}: output {name!r} is defined twice")
            defined.add(name)
        if op.op in ("COND_IF", "WHILE_LOOP"):
            _check_control_flow(graph, block, op, where, _running + (id(block),))
    for name in block.outputs:
        if name not in defined:
            raise TosaValidationError(f"block {block.name!r}: output {name!r} is never defined")


def _check_control_flow(graph: Graph, block: Block, op: Operator, where: str,
                        running: tuple[int, ...]) -> None:
    """COND_IF / WHILE_LOOP: the blocks they name exist, do not recurse, and are structurally
    valid. The ERROR_IFs on the lists they exchange are checked by profiles/ at load time."""
    for attr in BLOCK_ATTRIBUTES:
        if attr not in op.attrs:
            continue
        name = op.attrs[attr]
        try:
            sub = graph.block(name)
        except KeyError:
            raise TosaValidationError(
                f"{where}: {attr} {name!r} names no region or block of the graph") from None
        if id(sub) in running:
            raise TosaValidationError(
                f"{where}: {attr} {name!r} runs a block that is already running (control flow "
                "may not recurse)")
        check_block(graph, sub, running)


def _describe(value: Any) -> str:
    if isinstance(value, BlockScaled):
        return f"BlockScaled({_describe(value.values)}, {_describe(value.scales)})"
    if isinstance(value, Wide):
        return f"Wide{list(jnp.shape(value.hi))}"
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return f"{np.dtype(value.dtype)}{list(value.shape)}"
    return type(value).__name__


# numpy dtypes of the device types (np.dtype of a JAX scalar type: ~1 us a call, per operator)
_NP_DTYPES = {k: np.dtype(v) for k, v in DEVICE_DTYPES.items()}


def _matches(value: Any, t: Tensor) -> bool:
    """``value`` is a graph-function value of tensor ``t``: its shape, and its JAX dtype (INT48,
    INT64: a Wide pair; a block-scaled tensor: a BlockScaled pair of values and scales)."""
    if t.block_scaled:
        return (isinstance(value, BlockScaled)
                and _matches(value.values, Tensor(t.name, t.shape, t.dtype))
                and _matches(value.scales, Tensor(t.name, t.scale_shape, t.scale_dtype or "")))
    if t.dtype in WIDE_TYPES:
        return isinstance(value, Wide) and tuple(jnp.shape(value.hi)) == t.shape
    dtype = getattr(value, "dtype", None)
    return (dtype is not None and hasattr(value, "shape") and tuple(value.shape) == t.shape
            and dtype == _NP_DTYPES[t.dtype])


def _check_args(block: Block, args: Sequence[Any]) -> None:
    """The arguments of ``model.fn`` must be the entry block's inputs, each of its declared
    shape and JAX dtype (under ``jax.vmap``: the shape of one sample)."""
    if len(args) != len(block.inputs):
        raise TosaInputError(f"the graph takes {len(block.inputs)} input(s) "
                             f"{list(block.inputs)}, got {len(args)}")
    for name, value in zip(block.inputs, args, strict=True):
        t = block.tensors[name]
        if not _matches(value, t):
            want = ("a tosa_jax.Wide pair" if t.dtype in WIDE_TYPES
                    else "a tosa_jax.BlockScaled pair (values, scales)" if t.block_scaled
                    else str(np.dtype(DEVICE_DTYPES[t.dtype])))
            raise TosaInputError(
                f"input {name!r} is declared {t.dtype}{list(t.shape)}: the graph function "
                f"takes {want} of that shape (under jax.vmap, one sample's), got "
                f"{_describe(value)}")


def _check_result(node: Node, value: Any, t: Tensor, where: str) -> None:
    """A lowering's result must have the declared shape and element type."""
    if t.dtype == "SHAPE":
        return
    if not _matches(value, t):
        raise TosaValidationError(
            f"{where}: output {t.name!r} is declared {t.dtype}{list(t.shape)}, but the operator "
            f"gives {_describe(value)} for these inputs and attributes (if the graph is valid, "
            "this is a bug in tosa_jax)")


def _is_constant(value: Any) -> bool:
    if isinstance(value, BlockScaled):
        return _is_constant(value.values) and _is_constant(value.scales)
    return isinstance(value, np.ndarray) or (
        isinstance(value, Wide) and isinstance(value.hi, np.ndarray))


def _to_host(value: Any) -> Any:
    if isinstance(value, BlockScaled):
        return BlockScaled(_to_host(value.values), _to_host(value.scales))
    if isinstance(value, Wide):
        return Wide(np.asarray(value.hi), np.asarray(value.lo))
    return np.asarray(value)


def _lower(op: Operator, node: Node, args: list[Any], where: str,
           attrs: dict[str, Any] | None = None) -> Any:
    """Call the operator's lowering; whatever else it raises becomes a TosaValidationError.

    Lowerings trust the declared shapes and attributes; until every ERROR_IF is checked ahead
    of tracing, a graph that breaks them (a damaged file, say) fails inside the lowering, and is
    refused here with the operator named rather than with a bare Python or JAX exception.
    """
    try:
        return LOWERINGS[op.op](node, *args, **(op.attrs if attrs is None else attrs))
    except (TosaError, MemoryError, RecursionError):
        raise
    except Exception as e:
        raise TosaValidationError(
            f"{where}: cannot be evaluated with its declared inputs, outputs and attributes "
            f"({type(e).__name__}: {e})") from e


# Elementwise operators that broadcast an operand over their result.
BROADCASTING_OPS = frozenset({
    "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SELECT", "INTDIV", "ARITHMETIC_RIGHT_SHIFT",
    "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR",
    "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR", "EQUAL", "GREATER", "GREATER_EQUAL"})
# A value such an operator broadcasts over a result of at least this many times its elements
# (and of numerics.OWN_KERNEL_ELEMENTS or more) is computed once too: XLA CPU fuses its whole
# chain into the result's loop, once per element. unet_int8's group norms: each group's
# statistics chain (~50 int32/int64 operations from the group's sums) was recomputed for each
# of 98,304 elements; computed apart, its largest loop fusion goes from 166 to 112
# instructions (90 -> 80 us), the optimized program 6,054 -> 5,852 instructions, from the
# cache 136 -> 130 ms; batch 1 1.40-1.41 -> 1.38-1.39 ms (min of 300 calls, two interleaved
# rounds), the other integer graphs within noise (2026-11-28).
BROADCAST_RATIO = 64


def _shared(block: Block) -> frozenset[str]:
    """The tensors that two or more operators of ``block`` read, and those that an operator
    broadcasts over a result BROADCAST_RATIO times larger."""
    seen: set[str] = set()
    shared: set[str] = set()
    for op in block.operators:
        for name in set(op.inputs):
            (shared if name in seen else seen).add(name)
        if op.op in BROADCASTING_OPS:
            out = num_elements(block.tensors[op.outputs[0]].shape)
            if out >= OWN_KERNEL_ELEMENTS:
                shared.update(n for n in op.inputs
                              if 0 < num_elements(block.tensors[n].shape) * BROADCAST_RATIO
                              <= out)
    return frozenset(shared)


# Run-time REQUIREs (lowering.numerics.require), when checked: the first one that failed travels
# through the graph with the variable state, under a key no variable has, as int32
# [rule number + 1 (0: none), site]; the site names the operator: its block's position in the
# graph << 20 | its index in the block, with ROLLED set for an operator of a rolled loop's step
# (tosa_jax.reroll), whose index is then the loop's first operator. The ERROR_IFs on values
# given when the graph runs (profiles.checks.RuntimeCheck: EXT-DYNAMIC zero points) travel in
# the same flag, numbered after the REQUIREs, and an operator's are checked before it runs, as
# the pseudocode's come first.
REQUIRES_KEY = "\0requires"
NO_VIOLATION = np.zeros(2, np.int32)


def _checks_by_operator(graph: Graph) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """(block name, operator index) -> [(flag rule number, RuntimeCheck)]."""
    out: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    for k, check in enumerate(runtime_checks(graph)):
        out.setdefault((check.block, check.index), []).append((len(RULE_NAMES) + 1 + k, check))
    return out


def _first_violation(flag: Any, found: list[tuple[int, Any]], site: int) -> Any:
    """``flag`` updated with the rules one operator reported (rule number, violated): the
    first violation is kept."""
    for rule, violated in found:
        if violated is False:
            continue
        code = np.array([rule, site], np.int32)
        if violated is True and is_host(flag):
            flag = code if int(flag[0]) == 0 else flag
        else:
            flag = jnp.where((flag[0] == 0) & violated, code, jnp.asarray(flag, jnp.int32))
    return flag


def evaluate_block(graph: Graph, block: Block, args: Sequence[Any]) -> tuple[Any, ...]:
    """Trace ``block`` on ``args`` (one value per block input); returns the block outputs.

    Variables (EXT-VARIABLE), if the graph has any, start from their initial values and their
    updates are dropped: see ``run_block`` for the form that threads the state.
    """
    return run_block(graph, block, args, initial_values(graph))[0]


def run_block(graph: Graph, block: Block, args: Sequence[Any],
              state: dict[str, Any], keep: dict[str, Any] | None = None,
              origin: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Trace ``block`` on ``args`` with the variable ``state`` ({variable name: value}, every
    variable of the graph); returns the block outputs and the state after the block.

    ``keep``: when given, every value of this block (its inputs and each operator's outputs,
    variable writes included) is also stored there by tensor name, for ``tosa_jax.inspect``.
    Blocks that control-flow operators run are not walked into: their values live inside
    ``lax.cond`` / ``lax.while_loop``.

    Pure: nothing outside is changed, so control-flow lowerings can run it inside ``lax.cond``
    and ``lax.while_loop`` (it is their ``node.run_block``). Variable tensors are read from and
    written to the state, in operator order.

    A state holding REQUIRES_KEY asks for the run-time REQUIREs: each operator's are folded into
    it. ``origin``: the site its operators report (a rolled loop's step); else their own.
    """
    state = dict(state)
    keys = {n: t.variable_key for n, t in block.tensors.items() if t.variable}
    # env may hold Laid values (tosa_jax.layout): transposes carried as layouts
    env: dict[str, Any] = dict(zip(block.inputs, args, strict=False))
    if keep is not None:
        keep.update(env)
    lazy = layout.plan(block) if layout.ENABLED else frozenset()

    def value(name: str) -> Any:
        return state[keys[name]] if name in keys else layout.logical(env[name])

    def run(name: str, sub_args: Sequence[Any],
            sub_state: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return run_block(graph, graph.block(name), sub_args, sub_state)

    shared = _shared(block)
    ranges = BlockRanges(block)

    checking = REQUIRES_KEY in state
    if checking and origin is None:
        base = next(k for k, b in enumerate(_blocks(graph)) if b is block) << 20
    errors = _checks_by_operator(graph) if checking else {}

    def execute(i: int, op: Operator) -> None:
        nonlocal state
        if not checking:
            return execute_op(i, op)
        found = [(rule, _any(check.violated(value(check.tensor))))
                 for rule, check in errors.get((block.name, i), ())]
        reported: list[tuple[str, Any]] = []
        with collecting_requires(reported):
            execute_op(i, op)
        found += [(RULE_NAMES.index(rule) + 1, violated) for rule, violated in reported]
        if found:
            site = origin if origin is not None else base | i
            state[REQUIRES_KEY] = _first_violation(state[REQUIRES_KEY], found, site)

    def once(op: Operator, name: str, result: Any) -> Any:
        """``result`` computed once where ``name`` is shared or broadcast (see FUSIBLE_OPS,
        BROADCAST_RATIO); a value held in another layout (tosa_jax.layout) is its held array
        so."""
        if name not in shared or op.op not in FUSIBLE_OPS:
            return result
        if isinstance(result, Laid):
            return Laid(fusion_boundary(result.phys), result.perm)
        return fusion_boundary(result)

    def execute_op(i: int, op: Operator) -> None:
        nonlocal state
        where = _where(op, i, block)
        stateful = op.op in STATEFUL_OPS
        node = Node(op.op, tuple(block.tensors[n] for n in op.inputs),
                    tuple(block.tensors[n] for n in op.outputs), op.location,
                    ranges,
                    **({"run_block": run, "state": dict(state)} if stateful else {}))
        if lazy and op.op in layout.OPS:
            laid = layout.step(op, node, [state[keys[n]] if n in keys else env[n]
                                          for n in op.inputs],
                               lambda nd, a, at, op=op, where=where: _lower(op, nd, a, where, at),
                               i in lazy)
            if laid is not None:
                t = node.outputs[0]
                _check_result(node, laid.phys if isinstance(laid, Laid) else laid,
                              layout.phys_tensor(laid, t) if isinstance(laid, Laid) else t,
                              where)
                laid = once(op, t.name, laid)
                if t.name in keys:
                    state[keys[t.name]] = layout.logical(laid)
                else:
                    env[t.name] = laid
                if keep is not None:
                    keep[t.name] = layout.logical(laid)
                return
        args = [value(n) for n in op.inputs]
        if not stateful and args and all(_is_constant(a) for a in args):
            # Constant propagation: an operator of constants is evaluated now, op by op, with
            # its own exact lowering, and its result stays a host constant. XLA then never sees
            # (or folds) constant subgraphs: its constant folder miscomputes some of them.
            with jax.ensure_compile_time_eval():
                result = _lower(op, node, args, where)
            single = not isinstance(result, tuple) or isinstance(result, (Wide, BlockScaled))
            result = _to_host(result) if single else tuple(_to_host(r) for r in result)
        else:
            result = _lower(op, node, args, where)
        if isinstance(result, WithState):
            state = dict(result.state)
            result = result.outputs
        single = not isinstance(result, tuple) or isinstance(result, (Wide, BlockScaled))
        results = (result,) if single else result
        if len(results) != len(node.outputs):
            raise TosaValidationError(f"{where}: gives {len(results)} output(s), the graph "
                                      f"declares {len(node.outputs)}")
        for t, value_ in zip(node.outputs, results, strict=False):
            _check_result(node, value_, t, where)
            value_ = once(op, t.name, value_)
            if t.name in keys:
                state[keys[t.name]] = value_  # a write to a variable
            else:
                env[t.name] = value_
            if keep is not None:
                keep[t.name] = value_

    # rolled loops: not where tosa_jax.inspect keeps every value, and for the CPU only (see
    # tosa_jax.reroll)
    roll = keep is None and lowering_target() in (None, "cpu")
    loops = {lp.start: lp for lp in reroll.plan(block)
             if not any((block.name, j) in errors for j in range(lp.start, lp.stop))
             } if roll else {}  # (a rolled step is a block of its own: not where errors are)
    i = 0
    while i < len(block.operators):
        loop = loops.get(i)
        if loop is None:
            execute(i, block.operators[i])
            i += 1
            continue
        for j in loop.outside:
            execute(j, block.operators[j])
        try:
            if checking:
                site = ROLLED | (origin if origin is not None else base | loop.start)
                found, state[REQUIRES_KEY] = _run_loop(graph, loop, value, state[REQUIRES_KEY],
                                                       site)
            else:
                found, _ = _run_loop(graph, loop, value)
            env.update(found)
        except Exception as e:  # a form rolling did not foresee: the steps as they are
            warnings.warn(f"tosa_jax: operators {loop.start}..{loop.stop - 1} of block "
                          f"{block.name!r} run unrolled ({type(e).__name__}: {e})", stacklevel=2)
            inside = set(range(loop.start, loop.stop)) - set(loop.outside)
            for j in sorted(inside):
                execute(j, block.operators[j])
        i = loop.stop
    return tuple(value(n) for n in block.outputs), state


def _any(violated: Any) -> Any:
    return bool(np.any(violated)) if is_host(violated) else jnp.any(violated)


def _run_loop(graph: Graph, loop: reroll.Loop, value: Callable[[str], Any],
              flag: Any = None, site: int = 0) -> tuple[dict[str, Any], Any]:
    """A rolled run of steps (``tosa_jax.reroll``) as one ``lax.scan``: the step is traced
    once. Returns the values used after the loop, by tensor name, and the REQUIRE ``flag``
    (when given: carried through the steps, their operators reporting ``site``)."""
    init = [jnp.asarray(value(n)) for n in loop.init]
    xs = [_stack([value(n) for n in names]) for names in loop.xs]
    invariants = [value(n) for n in loop.invariants]  # constants stay numpy values
    carried = len(init)
    # Inside shard_map (evaluate across devices) values vary along its axes, and a carried
    # value must vary alike in and out: the state, whatever it starts from, varies along every
    # axis its step's inputs vary along.
    axes = frozenset().union(*(_varying(v) for v in (*init, *xs, *invariants)))

    def step(carry: tuple[list[Any], Any], x: list[Any]) -> tuple[Any, list[Any]]:
        values, f = carry
        state = {} if f is None else {REQUIRES_KEY: f}
        outs, state = run_block(graph, loop.body, [*values, *x, *invariants], state,
                                origin=site)
        f = None if f is None else _vary(jnp.asarray(state[REQUIRES_KEY], jnp.int32), axes)
        return ([_vary(v, axes) for v in outs[:carried]], f), list(outs[carried:])

    init = [_vary(v, axes) for v in init]
    start = None if flag is None else _vary(jnp.asarray(flag, jnp.int32), axes)

    (final, flag), ys = jax.lax.scan(step, (init, start), xs, length=loop.steps)
    out: dict[str, Any] = {}
    for stacked, names in zip(ys, loop.ys, strict=True):
        out.update((n, stacked[k]) for k, n in enumerate(names) if n is not None)
    out.update((n, v) for v, n in zip(final, loop.finals, strict=True) if n is not None)
    return out, flag


def _stack(values: list[Any]) -> Any:
    """Per-step values stacked for the loop: one numpy constant where all are constants
    (per-step scales, tables), not a staged concatenation of them."""
    if all(isinstance(v, np.ndarray) for v in values):
        return np.stack(values)
    return jnp.stack(values)


def _varying(value: Any) -> frozenset[str]:
    """The shard_map axes along which ``value`` varies (none outside shard_map)."""
    axes: set[str] = set()
    for leaf in jax.tree.leaves(value):
        aval = jax.typeof(leaf)
        manual = getattr(aval, "manual_axis_type", None)  # jax 0.10; else aval.vma
        axes.update(manual.varying if manual is not None else getattr(aval, "vma", ()))
    return frozenset(axes)


def _vary(value: Any, axes: frozenset[str]) -> Any:
    missing = tuple(sorted(axes - _varying(value)))
    return jax.lax.pcast(value, missing, to="varying") if missing else value


def graph_variables(graph: Graph) -> dict[str, Tensor]:
    """The graph's variables (EXT-VARIABLE) by name, each with the tensor that declares it
    (the first of its name, preferring one that holds an initial value).

    Variable tensors of the same name in different blocks must agree on shape and type.
    """
    found: dict[str, Tensor] = {}
    for region in graph.regions:
        for block in region.blocks:
            for t in block.tensors.values():
                if not t.variable:
                    continue
                key = t.variable_key
                first = found.get(key)
                if first is None or (first.data is None and t.data is not None
                                     and (first.shape, first.dtype) == (t.shape, t.dtype)):
                    found[key] = t
                elif (first.shape, first.dtype) != (t.shape, t.dtype):
                    raise TosaValidationError(
                        f"variable {key!r} is declared {first.dtype}{list(first.shape)} and "
                        f"{t.dtype}{list(t.shape)} (tensor {t.name!r} of block {block.name!r})")
                if t.data is not None and tuple(t.data.shape) != t.shape:
                    raise TosaValidationError(
                        f"variable {key!r}: initial value of shape {list(t.data.shape)} for a "
                        f"variable of shape {list(t.shape)}")
    return found


def initial_state(graph: Graph) -> dict[str, np.ndarray]:
    """Each variable's initial value as a host array (zeros where the file gives none: reading
    a variable never written is a REQUIRE violation, so any value is allowed there)."""
    return {key: (t.data if t.data is not None else np.zeros(t.shape, HOST_DTYPES[t.dtype]))
            for key, t in graph_variables(graph).items()}


def initial_values(graph: Graph) -> dict[str, Any]:
    """``initial_state`` as graph-function values (INT48 as Wide pairs)."""
    variables = graph_variables(graph)
    return {key: host_to_value(v, variables[key].dtype)
            for key, v in initial_state(graph).items()}


def _checked(graph: Graph) -> None:
    if not graph.regions or not graph.regions[0].blocks:
        raise TosaValidationError("the graph has no region or no block: nothing to run")
    check_block(graph, graph.main)
    graph_variables(graph)


@contextlib.contextmanager
def one_traceback() -> Iterator[None]:
    """Every JAX equation traced inside takes one Python traceback, captured here, as its
    source: JAX otherwise captures the stack at each equation and, lowering it, walks it for
    the first frame outside JAX (an MLIR location that ``model.without_locations`` strips
    again). A graph's equations are attributed to TOSA operators by the executor, not by line.
    Where this JAX has no such context (a private API), tracing is left as it is."""
    holder = before = None
    try:
        from jax._src import source_info_util
        from jax._src.lib import xla_client

        holder = source_info_util._source_info_context
        before = holder.context
        holder.context = before.replace(traceback=xla_client.Traceback.get_traceback())
    except Exception:  # another JAX: its own way
        holder = None
    try:
        yield
    finally:
        if holder is not None:
            holder.context = before


def graph_function(graph: Graph, requires: bool = False, checks: Sequence[Any] | None = None,
                   ) -> Callable[..., tuple[Any, ...]]:
    """The pure function of the graph's entry block: inputs in order -> tuple of outputs;
    ``requires``: followed by the REQUIRE flag of the run (see ``describe_violation``);
    ``checks``: the graph's run-time ERROR_IFs where its validation found them already.

    A graph with variables (EXT-VARIABLE) has no such function: its outputs depend on its
    state. Calling this one raises; use ``graph_state_function``.
    """
    _checked(graph)
    if requires:
        runtime_checks(graph, checks)
    if graph_variables(graph):
        names = sorted(graph_variables(graph))

        def stateful(*args: Any) -> tuple[Any, ...]:
            raise TosaUnsupportedError(
                f"this graph has variables {names} (EXT-VARIABLE): its outputs depend on its "
                "state; use fn_with_state(state, *inputs) -> (outputs, new_state)")

        return stateful

    def fn(*args: Any) -> tuple[Any, ...]:
        _check_args(graph.main, args)
        with one_traceback():
            if not requires:
                return evaluate_block(graph, graph.main, args)
            outs, state = run_block(graph, graph.main, args,
                                    {**initial_values(graph), REQUIRES_KEY: NO_VIOLATION})
        return (*outs, jnp.asarray(state[REQUIRES_KEY], jnp.int32))

    return fn


def graph_state_function(graph: Graph, requires: bool = False,
                         checks: Sequence[Any] | None = None,
                         ) -> Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]:
    """The pure function of a graph with variables: ``fn(state, *inputs) -> (outputs, state)``
    (``requires``, ``checks``: the outputs followed by the REQUIRE flag, as ``graph_function``).

    ``state`` maps variable names to values (INT48 as Wide pairs); variables it leaves out
    start from their initial values. The returned state holds every variable. For a graph
    without variables the state is ``{}``.
    """
    _checked(graph)
    if requires:
        runtime_checks(graph, checks)
    names = set(graph_variables(graph))

    def fn(state: dict[str, Any], *args: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        unknown = sorted(set(state) - names)
        if unknown:
            raise TosaInputError(f"unknown variable(s) {unknown}; the graph's variables are "
                                 f"{sorted(names)}")
        _check_args(graph.main, args)
        full = initial_values(graph) if set(state) != names else {}
        full.update(state)
        with one_traceback():
            if not requires:
                return run_block(graph, graph.main, args, full)
            outs, full = run_block(graph, graph.main, args,
                                   {**full, REQUIRES_KEY: NO_VIOLATION})
        flag = jnp.asarray(full.pop(REQUIRES_KEY), jnp.int32)
        return (*outs, flag), full

    return fn


