"""What a graph requires (profiles, extensions, level), operator by operator, and validation.

``requirements(graph)`` reports the smallest profile/extension sets and the lowest level under
which the graph is valid, each operator with its reason. ``validate(graph, ...)`` raises
``TosaValidationError`` where the graph breaks an ERROR_IF of TOSA 1.0.2, or needs more than the
given profile, extensions or level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tosa_jax.errors import TosaValidationError
from tosa_jax.ir import Graph
from tosa_jax.profiles import spec_data
from tosa_jax.profiles.checks import GraphAnalysis, OpInfo, RuntimeCheck, Violation, analyse
from tosa_jax.profiles.names import (
    EXTENSIONS_1_1,
    LEVELS,
    Target,
    extension_profiles,
    level_limits,
    make_target,
)

_ORDER = {name: i for i, name in enumerate(list(spec_data.PROFILES) + list(spec_data.EXTENSIONS)
                                           + list(EXTENSIONS_1_1))}


def _sorted(names: Iterable[str]) -> tuple[str, ...]:
    """Profiles then extensions, in the specification's order."""
    return tuple(sorted(names, key=lambda n: (_ORDER.get(n, len(_ORDER)), n)))


_PROFILE_SETS: tuple[frozenset[str], ...] = (
    frozenset({"PRO-INT"}), frozenset({"PRO-FP"}), frozenset({"PRO-INT", "PRO-FP"}))


@dataclass(frozen=True)
class OperatorNeed:
    """One operator's needs: where it is, its Supported Data Types row, its alternatives."""

    block: str
    index: int
    op: str
    mode: str | None
    types: dict[str, str]
    options: tuple[tuple[str, ...], ...]
    reasons: tuple[str, ...]
    level: str
    location: str | None = None

    def options_text(self) -> str:
        return " or ".join(" + ".join(o) for o in self.options) or "-"

    def types_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.types.items())


@dataclass(frozen=True)
class Requirements:
    """What a graph needs from an implementation of TOSA 1.0.2.

    ``profiles``: with ``all_profiles`` False, any one of them suffices (with ``extensions``);
    with it True, all of them are needed together. ``alternatives``: every minimal
    (profiles, extensions) pair under which the graph is valid, the chosen one first.
    ``level``: the most restrictive level the graph meets ("8K" or "none"; "beyond none" where a
    value is over even the no-level maxima), ``level_reasons`` why a stricter one is not met.
    ``violations``: ERROR_IFs the graph breaks (then it is valid under no profile).
    """

    profiles: tuple[str, ...]
    all_profiles: bool
    extensions: tuple[str, ...]
    level: str
    operators: tuple[OperatorNeed, ...]
    alternatives: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    level_reasons: tuple[str, ...] = ()
    violations: tuple[Violation, ...] = ()
    unsatisfiable: tuple[str, ...] = field(default=())
    # ERROR_IFs on values given when the graph runs (EXT-DYNAMIC zero points): checked then
    runtime_checks: tuple[RuntimeCheck, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.violations and not self.unsatisfiable

    def profiles_text(self) -> str:
        if not self.profiles:
            return "no profile (unsatisfiable)"
        return (" and " if self.all_profiles else " or ").join(self.profiles)

    def summary(self) -> str:
        ext = " + ".join(self.extensions) if self.extensions else "no extension"
        return f"{self.profiles_text()}; {ext}; level {self.level}"

    def table(self) -> str:
        """A table a person can read: one row per operator kind, type row and needs."""
        rows: dict[tuple[str, str, str, str, str], list[str]] = {}
        for n in self.operators:
            key = (n.op, n.mode or "-", n.types_text(), n.options_text(), "; ".join(n.reasons))
            rows.setdefault(key, []).append(f"{n.block}:{n.index}")
        header = ("operator", "count", "type support", "needs", "why")
        lines = [header] + [(op, str(len(where)), f"{mode} ({types})" if types else mode,
                             opts, why) for (op, mode, types, opts, why), where in rows.items()]
        widths = [max(len(r[i]) for r in lines) for i in range(4)]
        out = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + ("  " + r[4] if r[4] else "")
               for r in lines]
        out.insert(1, "  ".join("-" * w for w in widths))
        out.append("")
        out.append(f"requires: {self.summary()}")
        for alt_p, alt_e in self.alternatives:
            if len(alt_p) == 1 and alt_p[0] in self.profiles and alt_e == self.extensions:
                continue  # said on the line above
            if tuple(alt_p) == self.profiles and alt_e == self.extensions:
                continue
            out.append(f"      or: {' and '.join(alt_p)}; {' + '.join(alt_e) or 'no extension'}")
        for r in self.level_reasons:
            out.append(f"  level: {r}")
        for u in self.unsatisfiable:
            out.append(f"  unsatisfiable: {u}")
        for v in self.violations:
            out.append(f"  ERROR_IF: {v}")
        return "\n".join(out)


# --------------------------------------------------------------------------------------------


def _split(option: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    names = frozenset(option)
    return (frozenset(n for n in names if n.startswith("PRO-")),
            frozenset(n for n in names if n.startswith("EXT-")))


def _feasible(option: tuple[str, ...], profiles: frozenset[str],
              allowed: frozenset[str] | None) -> frozenset[str] | None:
    """The extensions an option needs under ``profiles`` (None: not possible there)."""
    pro, ext = _split(option)
    if not pro <= profiles:
        return None
    for e in ext:
        if not set(extension_profiles(e)) & profiles:
            return None
    if allowed is not None and not ext <= allowed:
        return None
    return ext


def _choose(infos: Sequence[OpInfo], profiles: frozenset[str],
            allowed: frozenset[str] | None) -> tuple[frozenset[str] | None, list[OpInfo]]:
    """The smallest extension set making every operator valid under ``profiles``; else None
    and the operators that cannot be."""
    groups: dict[tuple[tuple[str, ...], ...], list[OpInfo]] = {}
    for info in infos:
        groups.setdefault(info.all_options(), []).append(info)
    choices: list[frozenset[frozenset[str]]] = []
    blocked: list[OpInfo] = []
    for options, members in groups.items():
        feasible = frozenset(e for e in (_feasible(o, profiles, allowed) for o in options)
                             if e is not None)
        if not feasible:
            blocked.extend(members)
        else:
            choices.append(feasible)
    if blocked:
        blocked.sort(key=lambda i: (i.block, i.index))
        return None, blocked
    chosen: set[str] = set()
    for alts in choices:  # operators with one way: that way is needed
        if len(alts) == 1:
            chosen |= next(iter(alts))
    for alts in choices:  # others: the way adding the fewest extensions (deterministic order)
        if any(a <= chosen for a in alts):
            continue
        best = min(alts, key=lambda a: (len(a - chosen), sorted(a)))
        chosen |= best
    return frozenset(chosen), []


def _level(values: Iterable[tuple[str, int, str]]) -> tuple[str, tuple[str, ...]]:
    """The most restrictive level all LEVEL_CHECK values meet, and why stricter ones fail."""
    reasons: list[str] = []
    values = list(values)
    for level in LEVELS:
        limits = spec_data.LEVELS[level]
        if any(limit not in limits for limit, _, _ in values):
            limits = level_limits(level)  # a TOSA 1.1 limit (MAX_SHAPE_LEN)
        over = [(limit, v, what) for limit, v, what in values if v > limits[limit]]
        if not over:
            return level, tuple(reasons)
        for limit, v, what in over[:5]:
            reasons.append(f"{what} = {v} > {limit} = {limits[limit]} of level {level}")
        if len(over) > 5:
            reasons.append(f"... and {len(over) - 5} more over level {level}")
    return "beyond none", tuple(reasons)


def _op_level(info: OpInfo) -> str:
    return _level(info.levels)[0] if info.levels else LEVELS[0]


def _reasons(info: OpInfo) -> tuple[str, ...]:
    return tuple(f"{ext}: {why}" for ext, why in sorted(info.extra.items()))


def requirements_of(analysis: GraphAnalysis) -> Requirements:
    """Requirements from a finished analysis (see ``requirements``)."""
    infos = analysis.infos
    alternatives: list[tuple[frozenset[str], frozenset[str]]] = []
    for profiles in _PROFILE_SETS:
        if any(p <= profiles and len(p) < len(profiles) for p, _ in alternatives):
            continue  # a smaller profile set already works
        exts, _ = _choose(infos, profiles, None)
        if exts is not None:
            alternatives.append((profiles, exts))
    unsatisfiable: tuple[str, ...] = ()
    if alternatives:
        alternatives.sort(key=lambda pe: (len(pe[0]), len(pe[1]), sorted(pe[1]),
                                          sorted(pe[0], reverse=True)))
        best_p, best_e = alternatives[0]
        if len(best_p) == 1:
            profiles = _sorted(p for ps, e in alternatives if len(ps) == 1 and e == best_e
                               for p in ps)
        else:
            profiles = _sorted(best_p)
        all_profiles = len(best_p) > 1
        extensions = _sorted(best_e)
    else:
        profiles, all_profiles, extensions = (), False, ()
        _, blocked = _choose(infos, _PROFILE_SETS[2], None)
        unsatisfiable = tuple(f"{i.op} (operator #{i.index} of block {i.block!r}) is in no "
                              "profile" for i in blocked)
    level, level_reasons = _level([v for i in infos for v in i.levels] + analysis.graph_levels)
    ops = tuple(OperatorNeed(i.block, i.index, i.op, i.mode, i.types, i.all_options(),
                             _reasons(i), _op_level(i), i.location) for i in infos)
    alts = tuple((_sorted(p), _sorted(e)) for p, e in alternatives)
    return Requirements(profiles, all_profiles, extensions, level, ops, alts, level_reasons,
                        tuple(analysis.violations), unsatisfiable,
                        tuple(analysis.runtime_checks))


def requirements(graph: Graph) -> Requirements:
    """The profile(s), extensions and level ``graph`` needs, operator by operator, with reasons.

    ERROR_IFs the graph breaks are listed in ``violations`` (not raised: see ``validate``).
    """
    return requirements_of(analyse(graph))


def _raise(lines: list[str], violations: Sequence[Violation] = ()) -> None:
    err = TosaValidationError("\n  ".join(lines))
    err.violations = tuple(violations)  # type: ignore[attr-defined]
    raise err


def check_target(analysis: GraphAnalysis, target: Target) -> list[str]:
    """Where the analysed graph needs more than ``target`` offers (empty: it fits)."""
    problems: list[str] = []
    profiles = target.profiles if target.profiles is not None else _PROFILE_SETS[2]
    exts, blocked = _choose(analysis.infos, profiles, target.extensions)
    groups: dict[tuple[str, str, str, str], list[OpInfo]] = {}
    for info in blocked:
        need = " or ".join(" + ".join(o) for o in info.all_options()) or "-"
        types = " ".join(f"{k}={v}" for k, v in info.types.items())
        why = f" [{'; '.join(_reasons(info))}]" if info.extra else ""
        groups.setdefault((info.op, f"{info.mode or ''} ({types})", need, why), []).append(info)
    for (op, mode, need, why), members in groups.items():
        first = members[0]
        where = f"operator #{first.index} of block {first.block!r}" + (
            f" and {len(members) - 1} more like it" if len(members) > 1 else "")
        problems.append(f"{op} {mode} ({where}) needs {need}{why}; "
                        f"allowed: {target.describe()}")
    if target.level is not None:
        values = [v for i in analysis.infos for v in i.levels] + analysis.graph_levels
        limits = level_limits(target.level)
        over = [(limit, v, what) for limit, v, what in values if v > limits[limit]]
        for limit, v, what in over[:10]:
            problems.append(f"LEVEL_CHECK({what} <= {limit}) fails at level {target.level}: "
                            f"{v} > {limits[limit]}")
    return problems


def validate(graph: Graph, profile: str | Iterable[str] | None = None,
             extensions: str | Iterable[str] | None = None, level: str | None = None, *,
             target: Target | None = None) -> Requirements:
    """Check ``graph`` against TOSA 1.0.2 and the given profile/extensions/level.

    Defaults accept whatever the graph needs: ``profile=None`` any profile, ``extensions=None``
    any extension, ``level=None`` no level check. ``profile`` may also be a spec string such
    as ``"TOSA-1.0+INT+int16"`` (see ``names``). Returns the graph's Requirements; raises
    ``TosaValidationError`` (with ``.violations``) where an ERROR_IF is broken or the graph
    needs more than allowed.
    """
    if target is None:
        target = make_target(profile, extensions, level)
    analysis = analyse(graph)
    if analysis.violations:
        v = analysis.violations
        lines = [f"the graph is not valid TOSA {'.'.join(map(str, graph.version[:2]))}: "
                 f"{len(v)} ERROR_IF condition(s) hold"]
        lines += [str(x) for x in v[:10]]
        if len(v) > 10:
            lines.append(f"... and {len(v) - 10} more")
        _raise(lines, v)
    problems = check_target(analysis, target)
    if problems:
        _raise([f"the graph needs more than {target.describe()}:"] + problems)
    return requirements_of(analysis)
