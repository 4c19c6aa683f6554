"""The viewer's errors, rooted at :class:`tailcut.errors.TailcutError`; each page turns one into a status."""

from __future__ import annotations

from tailcut.errors import TailcutError


class UiError(TailcutError):
    """``tailcut ui`` cannot start as asked (bad option, unreadable results file or corpus)."""


class BadRequest(UiError):
    """A URL parameter is invalid (answered 400 with the message)."""


class NotFound(UiError):
    """The URL names a trace, span or payload the data dir does not have (answered 404)."""
