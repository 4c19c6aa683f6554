"""Errors the exporters raise on purpose (the CLI prints each as one line)."""

from __future__ import annotations

from tailcut.errors import TailcutError


class BadOtlpInput(TailcutError, ValueError):
    """Input that should be OTLP (a file, a record, a span) is not valid OTLP."""


class DataDirError(TailcutError, OSError):
    """The data dir cannot be written (permissions, disk full, not a directory)."""
