"""The flag of a checked run (``check_requires``, ``reference_model.run``), decoded without JAX.

A checked program carries the first rule its inputs break as an int32 pair [rule, site]
(tosa_jax.executor): rule 0 none, 1..len(RULE_NAMES) a REQUIRE of the lowerings (the texts
below, the one home of them), past it an ERROR_IF on run-time values (``runtime_checks``);
site: the block's index << 20 | the operator's, ROLLED for a recurrence rolled into a loop.
Reading it needs the graph and these tables only, so a run served from the compile cache
without JAX (tosa_jax.hostexec) names a broken rule without importing JAX.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from tosa_jax.ir import Block, Graph, Operator

# The REQUIREs that depend on tensor values, as the reference model of tosa-tools 2026.8
# checks them while running (lowering.numerics: ``require``; tests/unit/test_requires.py).
REQUIRE_RULES: dict[str, str] = {
    "add": "apply_add_s: the sum overflows its type (int32, or int64 for INT64)",
    "sub": "apply_sub_s: the difference overflows its type (int32, or int64 for INT64)",
    "negate": "apply_sub_s(0, value): the negated value overflows (INT32_MIN, INT64_MIN)",
    "mul": "the rounded, shifted product does not fit int32",
    "div_zero": "value2 != 0 (division by zero)",
    "div_range": "the quotient fits its type (minimum / -1 does not)",
    "shift": "0 <= value2 < the element width",
    "pow_negative": "value1 >= 0",
    "pow_zero": "value1 > 0 || value2 > 0",
    "pow_nan": "!isNaN(value1) && !isNaN(value2)",
    "pow_finite": "is_finite(value1) && is_finite(value2)",
    "sum": "apply_add_s: a partial sum overflows its type (int32, or int64 for INT64)",
    "index": "0 <= k < K (index within the values)",
    "scatter_once": "output_modified[n, k, c] == false (no row written twice)",
    "multiplier": "apply_scale: multiplier >= 0",
    "scale_shift": "apply_scale: 2 <= shift <= 62",
    "scale_value": "apply_scale_32: value within [-(1 << (shift - 1)), 1 << (shift - 1))",
    "scale_result": "apply_scale_16: the result fits int32",
    "table_slope": "apply_lookup_s: the slope between the two entries read fits int16",
}
RULE_NAMES = tuple(REQUIRE_RULES)
ROLLED = 1 << 30


def where(op: Operator, i: int, block: Block) -> str:
    """An operator as messages name it."""
    return f"{op.op} (operator #{i} of block {block.name!r}" + (
        f", at {op.location})" if op.location else ")")


def blocks(graph: Graph) -> list[Block]:
    return [b for r in graph.regions for b in r.blocks]


_RUNTIME_CHECKS: dict[int, list[Any]] = {}


def runtime_checks(graph: Graph, known: Sequence[Any] | None = None) -> list[Any]:
    """The graph's ERROR_IFs on values given when it runs (``profiles.checks.RuntimeCheck``),
    in a fixed order (a flag's rule number past the REQUIREs indexes it); once per graph
    object: ``known``, the graph's analysis's own list where the caller has validated it (a
    Model: no second analysis while tracing), else analysed here."""
    key = id(graph)
    found = _RUNTIME_CHECKS.get(key)
    if found is None:
        if known is None:
            from tosa_jax.profiles.checks import analyse

            known = analyse(graph).runtime_checks
        found = _RUNTIME_CHECKS[key] = list(known)
        weakref.finalize(graph, _RUNTIME_CHECKS.pop, key, None)
    return found


def violation_is_error(flag: Any) -> bool:
    """Whether the flag of a checked run holds a broken ERROR_IF (the graph is in error),
    not a REQUIRE (its result is unpredictable)."""
    return int(np.asarray(flag).reshape(-1)[0]) > len(RULE_NAMES)


def describe_violation(graph: Graph, flag: Any) -> str | None:
    """What the flag of a checked run says: None, or the operator and the rule."""
    rule, site = (int(v) for v in np.asarray(flag).reshape(-1)[:2])
    if rule == 0:
        return None
    if rule > len(RULE_NAMES):
        return f"{runtime_checks(graph)[rule - len(RULE_NAMES) - 1]}: the graph is in error"
    block = blocks(graph)[(site & ~ROLLED) >> 20]
    index = site & 0xFFFFF
    if site & ROLLED:
        at = (f"an operator in a step of the recurrence rolled into a loop from operator "
              f"#{index} of block {block.name!r}")
    else:
        at = where(block.operators[index], index, block)
    return (f"{at}: REQUIRE({REQUIRE_RULES[RULE_NAMES[rule - 1]]}) fails for these inputs: "
            "the result is unpredictable")
