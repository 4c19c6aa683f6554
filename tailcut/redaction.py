"""Redaction: secrets never leave the agent's process.

Every payload passes through redaction before it is hashed, stored or exported. The default scrubs the
canonical JSON text in one regular-expression pass (a per-field walk in Python would cost more than the
span itself):

* the value of any object key that names a credential (``api_key``, ``authorization``, ``x-api-key``,
  ``password``, ``secret``, ``token``, ``access_token``, ``client_secret``, ...), whatever its case;
* strings that look like provider API keys (``sk-...``, ``sk-ant-...``), bearer tokens
  (``Bearer <token>``), AWS access key ids and GitHub tokens, wherever they appear.

Each is replaced by ``[REDACTED]``, so the text stays valid JSON. A user hook
(``tailcut.init(redact=...)``) runs after the defaults on the decoded value; it receives
``(value, kind=..., field=...)`` and returns the value to record. The request hash is computed after
redaction, and a replay redacts the live request the same way, so matching is unaffected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Protocol

REDACTED: Final = "[REDACTED]"

_SECRET_KEYS: Final = (
    r"api[-_]?key|apikey|x-api-key|authorization|proxy-authorization|password|passwd|secret|"
    r"client[-_]?secret|token|access[-_]?token|refresh[-_]?token|id[-_]?token|auth[-_]?token|"
    r"private[-_]?key|cookie|set-cookie|session[-_]?id"
)
# A JSON member whose key names a credential and whose value is a string.
_KEY_VALUE: Final = rf'("(?i:{_SECRET_KEYS})":)"(?:[^"\\]|\\.)*"'
# Credential-shaped strings anywhere in the text.
_VALUE_PATTERNS: Final = (
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
    r"\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{8,}=*",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
)
_PATTERN: Final = re.compile(_KEY_VALUE + "|" + "|".join(f"(?:{p})" for p in _VALUE_PATTERNS))


def _replace(match: re.Match[str]) -> str:
    key = match.group(1)
    return f'{key}"{REDACTED}"' if key else REDACTED


def redact_json_text(text: str) -> str:
    """Apply the default redaction to canonical JSON text; the result is still valid JSON.

    Examples
    --------
    >>> redact_json_text('{"api_key":"abc","q":"hello"}')
    '{"api_key":"[REDACTED]","q":"hello"}'
    >>> redact_json_text('{"h":"Bearer abcdefghijkl"}')
    '{"h":"[REDACTED]"}'
    """
    return _PATTERN.sub(_replace, text)


class RedactHook(Protocol):
    """A user redaction hook: returns the value to record in place of ``value``."""

    def __call__(self, value: Any, *, kind: str, field: str) -> Any: ...


RedactSpec = RedactHook | Callable[..., Any] | None
