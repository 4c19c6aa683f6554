"""The error hierarchy: every error tailcut raises on purpose derives from :class:`TailcutError`.

The CLI catches ``TailcutError`` and prints its message as one line, without a traceback, so each
message names the object at fault and, where there is one, the fix.
"""

from __future__ import annotations


class TailcutError(Exception):
    """Base class of every error tailcut raises on purpose."""


class ConfigError(TailcutError, ValueError):
    """A configuration value (argument, environment variable, config file) is invalid."""


class CanonicalEncodingError(TailcutError, TypeError):
    """A payload holds a value the canonical JSON rules cannot encode."""


class RedactHookError(CanonicalEncodingError):
    """The ``redact`` hook raised, so the payload is not recorded (its unredacted text never leaves)."""


class MissingDependencyError(TailcutError, ImportError):
    """A pipeline command ran without the optional dependencies it needs."""


class Divergence(TailcutError):
    """A replayed run left its record: a request differs, or a boundary is extra or missing.

    Raised into the agent under replay (``on_divergence="stop"``). ``details`` holds the structured
    report (boundary, occurrence, seq, kind of divergence and a diff of the two requests).
    """

    def __init__(self, message: str, details: object = None) -> None:
        super().__init__(message)
        self.details = details


class RecordedError(TailcutError):
    """A recorded failure served back by a replay when its original exception class cannot be rebuilt."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}" if message else error_type)
        self.error_type = error_type
        self.message = message


class ReplayError(TailcutError, ValueError):
    """A replay cannot run as asked (bad option, unknown trace or boundary, unimportable entry point)."""


class CorpusError(ReplayError):
    """A replay corpus is refused: bad or missing manifest, unknown schema version, or a hash mismatch."""
