"""Weights as arguments of the executable, not constants of its program.

A graph's weights reach the traced function as numpy constants, and JAX writes each one into the
StableHLO module as a literal. XLA then parses, copies and checks every literal when it compiles
the module, and again when it rebuilds a cached executable: 12 MB of resnet_fp32's weights were
a third of its compile and most of the rebuild (compile 357 -> 235 ms, rebuild of the
serialized executable 43 -> 10 ms, Xeon, 2026-11-28).

Only kernels are taken out, the operands that XLA's convolutions and matrix products read as
they are, and only large ones (MIN_BYTES): the executable computes the same bits with them as
parameters (tests/unit/test_hoist.py; all 15 benchmark graphs). Constants that other operations
read stay literals, for XLA to fold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The smallest kernel passed as an argument: a smaller one costs more as an argument of every
# call than as a literal of the program.
MIN_BYTES = 64 * 1024


def picked(closed: Any) -> dict[int, bool]:
    """The constants of ``closed`` (a ClosedJaxpr) that are taken out, by index: those of
    MIN_BYTES or more read only as kernels, the operand 1 of convolutions or of matrix products
    (2-D, no batch dimension) of the top level; True for a product's [N, K] operand, which is
    taken out transposed (``lower``)."""
    from jax._src import core

    uses: dict[Any, list[Any]] = {}
    for eqn in closed.jaxpr.eqns:
        for k, v in enumerate(eqn.invars):
            if isinstance(v, core.Var):
                uses.setdefault(v, []).append(_kernel_use(eqn, k))
    for v in closed.jaxpr.outvars:
        if isinstance(v, core.Var):
            uses.setdefault(v, []).append(None)
    taken = {}
    for i, (v, c) in enumerate(zip(closed.jaxpr.constvars, closed.consts, strict=True)):
        kinds = set(uses.get(v, [None]))
        if isinstance(c, np.ndarray) and c.nbytes >= MIN_BYTES and len(kinds) == 1:
            (kind,) = kinds
            if kind is not None:
                taken[i] = kind == "transposed"
    return taken


def _kernel_use(eqn: Any, k: int) -> str | None:
    """How operand ``k`` of ``eqn`` is read: "kernel" (a convolution's kernel, a product's
    [K, N] operand), "transposed" (a product's [N, K] operand), else None."""
    if k != 1:
        return None
    if eqn.primitive.name == "conv_general_dilated":
        return "kernel"
    if eqn.primitive.name == "dot_general" and eqn.invars[1].aval.ndim == 2:
        (_, contracting), (_, batch) = eqn.params["dimension_numbers"]
        if not batch:
            return {(0,): "kernel", (1,): "transposed"}.get(tuple(contracting))
    return None


def lower(traced: Any, args: tuple[Any, ...]) -> Any:
    """``traced`` (``jax.jit(f).trace(*args)``) lowered with its kernels (``picked``) as a
    leading argument (``Lowered``, whose ``compile`` gives a ``Weighted``); as
    ``traced.lower()`` where there is none to take out.

    A matrix product's [N, K] constant is taken out as [K, N] (a copy), the product then
    contracting its first dimension: as a parameter in its own layout, XLA CPU ran the product
    as another kernel, slower and rounding differently (bert_tiny_fp32 batch 1 1.11 -> 1.41 ms);
    transposed, the same bits as with the constant, as fast."""
    import jax
    from jax._src import core

    from tosa_jax.executor import one_traceback

    closed = traced.jaxpr
    taken = picked(closed)
    if not taken:
        return traced.lower()
    jaxpr = closed.jaxpr
    eqns = list(jaxpr.eqns)
    same = _duplicates(closed.consts, taken)
    if same:  # one parameter for equal kernels
        var = {jaxpr.constvars[i]: jaxpr.constvars[j] for i, j in same.items()}
        eqns = [e.replace(invars=[var.get(a, a) if isinstance(a, core.Var) else a
                                  for a in e.invars]) for e in eqns]
    params, weights, flipped = [], [], {}
    for i, transposed in taken.items():
        if i in same:
            continue
        v, w = jaxpr.constvars[i], closed.consts[i]
        if transposed:
            w = np.ascontiguousarray(w.T)
            flipped[v] = t = core.Var(core.ShapedArray(w.shape, w.dtype))
            v = t
        params.append(v)
        weights.append(w)
    if flipped:  # (one pass over the equations for all transposed kernels)
        eqns = [_transposed(e, flipped) for e in eqns]
    kept = [i for i in range(len(jaxpr.constvars)) if i not in taken]  # (duplicates too)
    inner = jaxpr.replace(constvars=[jaxpr.constvars[i] for i in kept], eqns=eqns,
                          invars=params + list(jaxpr.invars))
    inner = core.ClosedJaxpr(inner, [closed.consts[i] for i in kept])
    shapes = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights]

    def lowered(form: Any) -> Lowered:
        def fn(kernels: list[Any], *a: Any) -> Any:  # (the module's name, as the graph's own)
            with one_traceback():
                outs = form(*kernels, *jax.tree.leaves(a))
            return jax.tree.unflatten(traced.out_tree, outs)

        return Lowered(jax.jit(fn).lower(shapes, *args), weights)

    call = _jit_call(traced, inner, len(params))
    if call is not None:
        try:
            return lowered(call)
        except Exception:  # another JAX's jit primitive: the equations one by one
            pass
    return lowered(core.jaxpr_as_fun(inner))


def _duplicates(consts: list[Any], taken: dict[int, bool]) -> dict[int, int]:
    """{index: index of an earlier kernel of the same shape, type, bytes and use} among the
    ``taken`` constants. ExecuTorch writes an unrolled LSTM's weights once per step: as
    literals XLA keeps one copy of equal ones, as parameters each would be read (lstm_fp32's
    30 copies of its 256 KiB recurrent weight, batch 1 0.11 -> 0.45 ms). Kernels are compared
    whole only where their first and last bytes agree (a network's different kernels of one
    shape rarely do: hashing them all took 7 ms of mobilenetv2_fp32's 13 MB)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    same = {}
    for i, t in taken.items():
        w = consts[i]  # (often a transposed view: w.flat reads its ends without a copy)
        key = (w.shape, w.dtype.str, t, w.flat[:16].tobytes(), w.flat[-16:].tobytes())
        earlier = groups.setdefault(key, [])
        j = next((j for j in earlier if np.array_equal(consts[j], w)), None)
        if j is None:
            earlier.append(i)
        else:
            same[i] = j
    return same


def _transposed(eqn: Any, flipped: dict[Any, Any]) -> Any:
    """``eqn`` reading ``t`` (``v`` transposed, ``flipped[v]``) where it read ``v`` as its
    kernel: a product contracting the kernel's first dimension instead of its second (a kernel
    taken out transposed has no other use: ``picked``)."""
    from jax._src import core

    if len(eqn.invars) < 2 or not isinstance(eqn.invars[1], core.Var) or (
            eqn.invars[1] not in flipped):
        return eqn
    t = flipped[eqn.invars[1]]
    (lhs, _), batch = eqn.params["dimension_numbers"]
    return eqn.replace(invars=[eqn.invars[0], t, *eqn.invars[2:]],
                       params={**eqn.params, "dimension_numbers": ((lhs, (0,)), batch)})


def _jit_call(traced: Any, closed: Any, n: int) -> Any:
    """``closed`` (the traced jaxpr with ``n`` leading kernel parameters) as one call of JAX's
    jit primitive (private: None where this JAX has not the one expected), lowered as a
    function of the module that XLA inlines. The alternative, evaluating the jaxpr equation
    by equation into the new trace (``jaxpr_as_fun``), took 100 ms more than the graph's
    whole lowering on unet_int8 (3,533 equations); inlined into the trace (the primitive's
    ``inline``), 23 ms more."""
    try:
        from jax._src import pjit

        params = dict(traced._params)
        params.update(
            jaxpr=closed, inline=False,
            in_shardings=(pjit.UNSPECIFIED,) * n + tuple(params["in_shardings"]),
            in_layouts=(None,) * n + tuple(params["in_layouts"]),
            donated_invars=(False,) * n + tuple(params["donated_invars"]))
        bind = pjit.jit_p.bind
    except Exception:
        return None

    def call(*args: Any) -> Any:
        return bind(*args, **params)

    return call


class Lowered:
    """A lowering whose first argument is the list of ``weights`` (numpy arrays)."""

    def __init__(self, lowered: Any, weights: list[np.ndarray]) -> None:
        self.lowered, self.weights = lowered, weights

    def compile(self, options: dict[str, Any] | None = None) -> Weighted:
        exe = self.lowered.compile(options) if options else self.lowered.compile()
        return Weighted.placed(exe, self.weights)

    def __getattr__(self, name: str) -> Any:  # as_text, compiler_ir, cost_analysis...
        return getattr(self.lowered, name)


class Weighted:
    """A compiled executable whose first argument is the list of its weights, held here on its
    devices: called with the graph function's own arguments."""

    def __init__(self, exe: Any, weights: list[Any]) -> None:
        self.exe, self.weights = exe, weights

    @classmethod
    def placed(cls, exe: Any, weights: list[np.ndarray]) -> Weighted:
        """``weights`` put where ``exe`` takes its first argument."""
        import jax

        return cls(exe, jax.device_put(list(weights), exe.input_shardings[0][0]))

    def __call__(self, *args: Any) -> Any:
        return self.exe(self.weights, *args)

    def host_weights(self) -> list[np.ndarray]:
        return [np.asarray(w) for w in self.weights]

    def __getattr__(self, name: str) -> Any:  # as_text, cost_analysis, memory_analysis...
        return getattr(self.exe, name)
