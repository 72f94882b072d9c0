"""The one error hierarchy of tosa_jax: every refusal is a TosaError with an actionable message."""

from __future__ import annotations


class TosaError(Exception):
    """Base of every error tosa_jax raises on purpose."""


class TosaFormatError(TosaError):
    """The bytes are not a readable TOSA flatbuffer (not TOSA, truncated, corrupt)."""


class TosaVersionError(TosaError):
    """The file is TOSA, but of a version this runtime does not read."""


class TosaUnsupportedError(TosaError):
    """A valid graph uses an operator, type or feature that tosa_jax does not implement."""


class TosaValidationError(TosaError):
    """The graph breaks a rule of the TOSA specification (an ERROR_IF or a structural rule)."""


class TosaInputError(TosaError):
    """The caller's inputs do not match the graph: count, names, shapes or dtypes."""


class TosaLimitError(TosaError):
    """A declared size is over the configured limit; refused before anything was allocated."""


class TosaHardwareError(TosaError):
    """A hardware model was asked for something it does not know (an unknown device name)."""


class TosaConverterError(TosaFormatError):
    """A converter to TOSA (tosa-opt for MLIR, the TFLite legalizer, ExecuTorch's Arm backend)
    refused the input; the message carries the converter's own words."""


class TosaConverterMissingError(TosaUnsupportedError):
    """The input needs a converter that is not installed; the message names the extra."""


class TosaUnpredictableWarning(UserWarning):
    """A run broke a REQUIRE that depends on the input values (an int32 ADD that overflows, an
    index out of range): TOSA leaves its result unpredictable. Issued by models loaded with
    ``check_requires=True``; the message names the operator and the rule."""
