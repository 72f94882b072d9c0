"""Names of TOSA profiles, extensions and levels, and the spec strings other tools use for them.

Canonical names are the specification's: ``PRO-INT``, ``PRO-FP``, ``EXT-INT16``, ..., levels
``none`` and ``8K``. Accepted spellings:

* canonical names in any case, without the prefix (``int``, ``int16``) or with the conformance
  suite's ``tosa-`` prefix (``tosa-pro-int``, ``tosa-ext-int16``);
* ExecuTorch Arm backend spec strings: ``TOSA-1.0+INT``, ``TOSA-1.0+FP+bf16``, ``TOSA-1.0+INT+8k``,
  ``TOSA-1.0+INT+int16+int4+var+cf`` and the older ``TOSA-0.80+BI`` / ``TOSA-0.80+MI``
  (0.80 BI maps to PRO-INT, MI to PRO-FP).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tosa_jax.profiles import spec_data

PROFILES: tuple[str, ...] = tuple(sorted(spec_data.PROFILES))
# TOSA 1.1 (draft) adds extensions (EXT-INT64, EXT-SHAPE, EXT-MX-*, EXT-MXFP-CONV) and a level
# limit (MAX_SHAPE_LEN); its profiles are 1.0's. Names of both are accepted.
EXTENSIONS_1_1: tuple[str, ...] = (
    "EXT-INT64", "EXT-MX-COMMON", "EXT-MX-FP4E2M1", "EXT-MX-FP6E2M3", "EXT-MX-FP6E3M2",
    "EXT-MX-FP8E4M3", "EXT-MX-FP8E5M2", "EXT-MX-INT8", "EXT-MXFP-CONV", "EXT-SHAPE")
EXTENSIONS: tuple[str, ...] = tuple(sorted(set(spec_data.EXTENSIONS) | set(EXTENSIONS_1_1)))
LEVELS: tuple[str, ...] = ("8K", "none")  # from the most to the least restrictive


@cache
def extension_table() -> dict[str, Any]:
    """The extensions of TOSA 1.0.2 and of the TOSA 1.1 draft (description, base profiles)."""
    from tosa_jax.profiles import spec_data_1_1

    return {**spec_data.EXTENSIONS, **spec_data_1_1.EXTENSIONS}


def extension_profiles(ext: str) -> tuple[str, ...]:
    """The profiles an extension (of TOSA 1.0.2 or 1.1) extends."""
    if ext in spec_data.EXTENSIONS:
        return spec_data.EXTENSIONS[ext]["profiles"]
    return extension_table()[ext]["profiles"]


@cache
def level_limits(level: str) -> dict[str, int]:
    """The limits of a level, TOSA 1.1's (a superset of 1.0.2's: MAX_SHAPE_LEN added)."""
    from tosa_jax.profiles import spec_data_1_1

    return {**spec_data.LEVELS[level], **spec_data_1_1.LEVELS[level]}

# ExecuTorch's short names (TosaSpecification, TOSA 1.0) for extensions and profiles.
_ET_EXTENSIONS = {
    "int16": "EXT-INT16", "int4": "EXT-INT4", "bf16": "EXT-BF16", "fp8e4m3": "EXT-FP8E4M3",
    "fp8e5m2": "EXT-FP8E5M2", "fft": "EXT-FFT", "var": "EXT-VARIABLE", "cf": "EXT-CONTROLFLOW",
    "dynamic": "EXT-DYNAMIC", "doubleround": "EXT-DOUBLEROUND", "inexactround": "EXT-INEXACTROUND",
}
# TOSA 1.1 (draft) short names, valid in TOSA-1.1 spec strings only.
_ET_EXTENSIONS_1_1 = {"int64": "EXT-INT64", "shape": "EXT-SHAPE", "mxint8": "EXT-MX-INT8"}
# ExecuTorch's "mxfp" (TOSA-1.1+FP+mxfp): the MX floating-point formats and MX convolution.
_ET_GROUPS = {"mxfp": ("EXT-MX-COMMON", "EXT-MX-FP4E2M1", "EXT-MX-FP6E2M3", "EXT-MX-FP6E3M2",
                       "EXT-MX-FP8E4M3", "EXT-MX-FP8E5M2", "EXT-MXFP-CONV")}
_ET_PROFILES = {"INT": "PRO-INT", "FP": "PRO-FP"}
_ET_080_PROFILES = {"BI": "PRO-INT", "MI": "PRO-FP"}


class TosaNameError(ValueError):
    """A profile, extension, level or spec string that has no TOSA 1.0 meaning."""


@dataclass(frozen=True)
class Target:
    """What an implementation offers: profiles, extensions, a level (None: not checked).

    ``extensions`` None means "any extension" (whatever the graph needs).
    """

    profiles: frozenset[str] | None = None
    extensions: frozenset[str] | None = None
    level: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        p = " + ".join(sorted(self.profiles)) if self.profiles is not None else "any profile"
        e = ("any extension" if self.extensions is None
             else " + ".join(sorted(self.extensions)) or "no extension")
        lv = f"level {self.level}" if self.level else "any level"
        return f"{p}, {e}, {lv}"


def _strip(name: str) -> str:
    n = name.strip().upper().replace("_", "-")
    return n[len("TOSA-"):] if n.startswith("TOSA-") else n


def profile_name(name: str) -> str:
    """The canonical profile name for ``name`` (``INT``, ``pro-int``, ``tosa-pro-int`` ...)."""
    n = _strip(name)
    if not n.startswith("PRO-"):
        n = "PRO-" + n
    if n not in spec_data.PROFILES:
        raise TosaNameError(f"unknown TOSA profile {name!r}: TOSA 1.0 has {', '.join(PROFILES)}")
    return n


def extension_name(name: str) -> str:
    """The canonical extension name for ``name`` (``int16``, ``EXT-INT16``, ``var`` ...)."""
    short = name.strip()
    if short.lower() in _ET_EXTENSIONS:
        return _ET_EXTENSIONS[short.lower()]
    if short.lower() in _ET_EXTENSIONS_1_1:
        return _ET_EXTENSIONS_1_1[short.lower()]
    n = _strip(short)
    if not n.startswith("EXT-"):
        n = "EXT-" + n
    if n not in EXTENSIONS:
        raise TosaNameError(
            f"unknown TOSA extension {name!r}: TOSA 1.0 has {', '.join(EXTENSIONS)}")
    return n


def level_name(name: str) -> str:
    """The canonical level name: ``8K`` or ``none``."""
    n = name.strip()
    for level in LEVELS:
        if n.lower() == level.lower():
            return level
    raise TosaNameError(f"unknown TOSA level {name!r}: TOSA 1.0 has levels "
                        f"{', '.join(sorted(spec_data.LEVELS))}")


def parse_spec_string(text: str) -> Target:
    """An ExecuTorch-style spec string (``TOSA-1.0+INT+int16``, ``TOSA-0.80+BI``) as a Target."""
    head, _, rest = text.strip().partition("+")
    if not head.upper().startswith("TOSA-") or not rest:
        raise TosaNameError(f"not a TOSA spec string: {text!r} (expected e.g. 'TOSA-1.0+INT')")
    version = head[5:]
    try:
        parts = tuple(int(p) for p in version.split("."))
    except ValueError:
        raise TosaNameError(f"{text!r}: bad TOSA version {version!r}") from None
    tokens = [t for t in rest.split("+") if t]
    profiles: set[str] = set()
    extensions: set[str] = set()
    level: str | None = None
    notes: list[str] = []
    if parts[:2] == (0, 80):
        table = _ET_080_PROFILES
        notes.append(f"{text}: TOSA 0.80 profiles mapped to TOSA 1.0 "
                     "(BI -> PRO-INT, MI -> PRO-FP)")
    elif parts[:2] in ((1, 0), (1, 1)):
        table = _ET_PROFILES
    else:
        raise TosaNameError(f"{text!r}: TOSA version {version} has no mapping to TOSA 1.0 "
                            "(known: 1.0, 1.1 and the legacy 0.80)")
    for token in tokens:
        if token in table:
            profiles.add(table[token])
        elif token.upper() in ("MT",) and parts[:2] == (0, 80):
            raise TosaNameError(f"{text!r}: the 0.80 main-training profile (MT) has no "
                                "TOSA 1.0 equivalent")
        elif token.lower() == "8k":
            level = "8K"
        elif token.lower() == "u55":
            notes.append(f"{text}: 'u55' (ExecuTorch's Ethos-U55 subset) is a hardware "
                         "restriction, not a TOSA profile or extension; ignored here")
        elif token.lower() in _ET_EXTENSIONS:
            extensions.add(_ET_EXTENSIONS[token.lower()])
        elif token.lower() in _ET_EXTENSIONS_1_1 and parts[:2] == (1, 1):
            extensions.add(_ET_EXTENSIONS_1_1[token.lower()])
        elif token.lower() in _ET_GROUPS and parts[:2] == (1, 1):
            extensions.update(_ET_GROUPS[token.lower()])
        else:
            known = sorted(table) + sorted(_ET_EXTENSIONS) + ["8k", "u55"]
            raise TosaNameError(f"{text!r}: unknown token {token!r} (known: {', '.join(known)})")
    if not profiles:
        raise TosaNameError(f"{text!r}: names no profile (one of {', '.join(sorted(table))})")
    for ext in sorted(extensions):
        bases = extension_profiles(ext)
        if not profiles & set(bases):
            profiles.add(bases[0])
            notes.append(f"{text}: {ext} extends {' or '.join(bases)} only; "
                         f"{bases[0]} added to the profiles")
    return Target(frozenset(profiles), frozenset(extensions), level, tuple(notes))


def make_target(profile: str | Iterable[str] | None = None,
                extensions: str | Iterable[str] | None = None,
                level: str | None = None) -> Target:
    """A Target from ``load()``-style arguments.

    ``profile``: None (any), a profile name, a list of them, or a spec string
    (``"TOSA-1.0+INT+int16"``, whose extensions and level apply unless given here).
    ``extensions``: None (any), or names; ``level``: None (not checked), ``"none"`` or ``"8K"``.
    """
    profiles: frozenset[str] | None = None
    exts: frozenset[str] | None = None
    notes: tuple[str, ...] = ()
    lv = level_name(level) if level is not None else None
    if isinstance(profile, str) and profile.strip().upper().startswith("TOSA-") \
            and "+" in profile:
        spec = parse_spec_string(profile)
        profiles, exts, notes = spec.profiles, spec.extensions, spec.notes
        if lv is None:
            lv = spec.level
    elif profile is not None:
        names = [profile] if isinstance(profile, str) else list(profile)
        profiles = frozenset(profile_name(p) for p in names)
    if extensions is not None:
        names = [extensions] if isinstance(extensions, str) else list(extensions)
        exts = frozenset(extension_name(e) for e in names)
    if profiles is not None and exts:
        for ext in sorted(exts):
            bases = extension_profiles(ext)
            if not profiles & set(bases):
                raise TosaNameError(f"extension {ext} extends {' or '.join(bases)}, which is "
                                    f"not among the profiles {sorted(profiles)}")
    return Target(profiles, exts, lv, notes)
