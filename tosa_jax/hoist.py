"""Convolution weights as arguments of the executable, not constants of its program.

A graph's weights reach the traced function as numpy constants, and JAX writes each one into the
StableHLO module as a literal. XLA then parses, copies and checks every literal when it compiles
the module, and again when it rebuilds a cached executable: 12 MB of resnet_fp32's weights were
a third of its compile and most of the rebuild (bench: compile 357 -> 235 ms, rebuild of the
serialized executable 43 -> 10 ms, xeon, 2026-11-28).

Only the kernels of convolutions are taken out, and only large ones (MIN_BYTES): a kernel is
read by XLA's convolution as it is, so the executable computes the same bits with it as a
parameter. A matrix product's constant operand is not taken: XLA lays a constant out for its
dot kernel at compile time, and as a parameter it ran slower and rounded differently
(bert_tiny_fp32 batch 1 1.11 -> 1.39 ms). Nor are constants that other operations read, which
XLA would otherwise fold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The smallest kernel passed as an argument: a smaller one costs more as an argument of every
# call than as a literal of the program.
MIN_BYTES = 64 * 1024


def picked(closed: Any) -> list[int]:
    """The indices of the constants of ``closed`` (a ClosedJaxpr) that are taken out: at least
    MIN_BYTES, and read only as the kernel (operand 1) of convolutions of the top level."""
    from jax._src import core

    uses: dict[Any, list[tuple[str, int]]] = {}
    for eqn in closed.jaxpr.eqns:
        for k, v in enumerate(eqn.invars):
            if isinstance(v, core.Var):
                uses.setdefault(v, []).append((eqn.primitive.name, k))
    for v in closed.jaxpr.outvars:
        if isinstance(v, core.Var):
            uses.setdefault(v, []).append(("output", 0))
    return [i for i, (v, c) in enumerate(zip(closed.jaxpr.constvars, closed.consts, strict=True))
            if isinstance(c, np.ndarray) and c.nbytes >= MIN_BYTES and uses.get(v)
            and all(use == ("conv_general_dilated", 1) for use in uses[v])]


def lower(traced: Any, args: tuple[Any, ...]) -> Any:
    """``traced`` (``jax.jit(f).trace(*args)``) lowered with its convolution kernels as a
    leading argument (``Lowered``, whose ``compile`` gives a ``Weighted``); as
    ``traced.lower()`` where there is none to take out."""
    import jax
    from jax._src import core

    from tosa_jax.executor import one_traceback

    closed = traced.jaxpr
    taken = picked(closed)
    if not taken:
        return traced.lower()
    jaxpr = closed.jaxpr
    kept = [i for i in range(len(jaxpr.constvars)) if i not in set(taken)]
    weights = [closed.consts[i] for i in taken]
    inner = jaxpr.replace(constvars=[jaxpr.constvars[i] for i in kept],
                          invars=[jaxpr.constvars[i] for i in taken] + list(jaxpr.invars))
    inner = core.ClosedJaxpr(inner, [closed.consts[i] for i in kept])
    shapes = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights]

    def lowered(form: Any) -> Lowered:
        def fn(kernels: list[Any], *a: Any) -> Any:  # (the module's name, as the graph's own)
            with one_traceback():
                outs = form(*kernels, *jax.tree.leaves(a))
            return jax.tree.unflatten(traced.out_tree, outs)

        return Lowered(jax.jit(fn).lower(shapes, *args), weights)

    call = _jit_call(traced, inner, len(taken))
    if call is not None:
        try:
            return lowered(call)
        except Exception:  # another JAX's jit primitive: the equations one by one
            pass
    return lowered(core.jaxpr_as_fun(inner))


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
