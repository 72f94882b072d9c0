"""TOSA 1.0 and 1.1 (draft) profiles, extensions and levels; requirements and ERROR_IF validation.

* ``requirements(graph)``: the profile(s), extensions and level a graph needs, per operator.
* ``validate(graph, profile=..., extensions=..., level=...)``: raise ``TosaValidationError``
  where the graph breaks an ERROR_IF of TOSA 1.0.2 or needs more than allowed.
* ``make_target`` / ``parse_spec_string``: profile names, including ExecuTorch spec strings
  (``TOSA-1.0+INT+int16``, ``TOSA-1.1+FP+mxfp``, ``TOSA-0.80+BI``).

The specification's tables live in ``spec_data`` (TOSA 1.0.2) and ``spec_data_1_1`` (the TOSA 1.1
draft tosa-tools 2026.8 implements), both generated from tosa.xml by ``generate_spec_data.py``.
A graph stamped 1.0.x is judged by 1.0.2's tables (a 1.1 operator or type is refused there), a
graph stamped 1.1 by 1.1's. This package reads the IR only; it never imports the lowering.
"""

from tosa_jax.profiles.checks import GraphAnalysis, OpInfo, Violation, analyse
from tosa_jax.profiles.names import (
    EXTENSIONS,
    LEVELS,
    PROFILES,
    Target,
    TosaNameError,
    extension_name,
    level_name,
    make_target,
    parse_spec_string,
    profile_name,
)
from tosa_jax.profiles.requirements import (
    OperatorNeed,
    Requirements,
    check_target,
    requirements,
    requirements_of,
    validate,
)

__all__ = [
    "EXTENSIONS", "LEVELS", "PROFILES", "GraphAnalysis", "OpInfo", "OperatorNeed",
    "Requirements", "Target", "TosaNameError", "Violation", "analyse", "check_target",
    "extension_name", "level_name", "make_target", "parse_spec_string", "profile_name",
    "requirements", "requirements_of", "validate",
]
