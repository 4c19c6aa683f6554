"""Redaction: secrets never leave the agent's process.

Every payload passes through redaction before it is hashed, stored or exported. The defaults:

* the value of any object key that names a credential (``api_key``, ``authorization``, ``x-api-key``,
  ``password``, ``secret``, ``token``, ``access_token``, ``client_secret``, ``cookie``, ...; any case,
  ``-`` or ``_``) is replaced, whatever its type;
* strings that look like provider API keys (``sk-...``, ``sk-ant-...``), bearer tokens
  (``Bearer <token>``), AWS access key ids, GitHub and Slack tokens are replaced wherever they appear.

Both write ``[REDACTED]``. They are split by cost: key names are checked while walking the payload's
objects (cost grows with the number of keys, not the text size), and credential-shaped strings are
found by searching the canonical JSON text for a literal anchor first (``sk-``, ``earer``, ``AKIA``,
``gh``, ``xox``) and running a pattern only where one occurs. Keys in an unusual mixed case that is
none of the usual spellings (``aPi_KeY``) inside plain dicts are not caught; pass a ``redact`` hook
if your payloads carry such keys. A user hook (``tailcut.init(redact=...)``)
runs after the defaults on the decoded value; it receives ``(value, kind=..., field=...)`` and returns
the value to record; if it raises, that payload is not recorded at all (neither text nor hash: the
unredacted text must not leave), the span says so and ``tailcut.stats()["hook_errors"]`` counts it,
and the agent carries on. The request hash is computed after redaction, and a replay redacts the live
request the same way, so matching is unaffected.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Final, Protocol

REDACTED: Final = "[REDACTED]"

#: Object keys whose values are credentials, compared after lower-casing and mapping ``-`` to ``_``.
SECRET_KEYS: Final = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "authorization",
        "proxy_authorization",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "private_key",
        "cookie",
        "set_cookie",
        "session_id",
    }
)

#: (a character every match contains, a literal anchor, the pattern). The single character is found
#: with memchr (nearly free); only when it occurs is the anchor searched, and only then the pattern run.
_VALUE_PATTERNS: Final = (
    ("-", "sk-", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}")),
    ("-", "xox", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("_", "gh", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("K", "AKIA", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("r", "earer", re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{8,}=*")),
)


def _spellings(name: str) -> set[str]:
    """The usual spellings of a key: separators ``_``/``-``/none, lower, UPPER, Title and camelCase."""
    parts = name.split("_")
    out = set()
    for sep in ("_", "-", ""):
        for word_parts in (parts, [p.upper() for p in parts], [p.title() for p in parts]):
            out.add(sep.join(word_parts))
        out.add(parts[0] + "".join(p.title() for p in parts[1:]))
    return out


#: Every usual spelling of every credential key, so a dict is checked with one C-level set operation.
_SECRET_SPELLINGS: Final = frozenset(s for name in SECRET_KEYS for s in _spellings(name))
_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


def _is_secret_key(key: object) -> bool:
    return isinstance(key, str) and (key in _SECRET_SPELLINGS or key.lower().replace("-", "_") in SECRET_KEYS)


def _needs_key_redaction(value: Any) -> bool:
    """Fast scan: does ``value`` hold a credential-named key (or an object that must be expanded)?

    Plain loops, exact type checks, and a list's dicts checked inline: this runs on every payload, on
    the agent's hot path, and a payload is most often a list of flat records.
    """
    kind = type(value)
    if kind is dict:
        return _dict_needs(value)
    if kind is list or kind is tuple:
        for item in value:
            item_kind = type(item)
            if item_kind is dict:
                if _dict_needs(item):
                    return True
            elif item_kind not in _PLAIN and _needs_key_redaction(item):
                return True
        return False
    if kind in _PLAIN:
        return False
    if isinstance(value, dict):
        return any(_is_secret_key(k) for k in value) or _needs_key_redaction(list(value.values()))
    if isinstance(value, list | tuple):
        return _needs_key_redaction(list(value))
    return dataclasses.is_dataclass(value) or callable(getattr(value, "model_dump", None))


def _dict_needs(value: dict[Any, Any]) -> bool:
    if not _SECRET_SPELLINGS.isdisjoint(value):
        return True
    for item in value.values():
        if type(item) not in _PLAIN and _needs_key_redaction(item):
            return True
    return False


def redact_keys(value: Any) -> Any:
    """Replace the values of credential-named keys; returns ``value`` itself when nothing changes.

    Keys are matched in their usual spellings (``api_key``, ``api-key``, ``apiKey``, ``API_KEY``,
    ``X-Api-Key``, ``Authorization``, ...). Dataclasses and pydantic models are expanded to the object
    the canonical rules would encode, and redacted as such (a conversion that raises gives
    :class:`~tailcut.errors.CanonicalEncodingError`).

    Examples
    --------
    >>> redact_keys({"headers": {"Authorization": "Basic abc"}, "q": 1})
    {'headers': {'Authorization': '[REDACTED]'}, 'q': 1}
    """
    if not _needs_key_redaction(value):
        return value
    return _redact_copy(value)


def _redact_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if _is_secret_key(k) else _redact_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_copy(item) for item in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if dataclasses.is_dataclass(value) or callable(getattr(value, "model_dump", None)):
        from tailcut.canonical import encodable  # the object the canonical rules would encode

        return _redact_copy(encodable(value))
    return value


def redact_text(text: str) -> str:
    """Replace credential-shaped strings in JSON text; returns ``text`` itself when none occurs.

    Examples
    --------
    >>> redact_text('{"h":"Bearer abcdefghijkl","q":"hello"}')
    '{"h":"[REDACTED]","q":"hello"}'
    """
    for char, anchor, pattern in _VALUE_PATTERNS:
        if char in text and anchor in text:
            text = pattern.sub(REDACTED, text)
    return text


class RedactHook(Protocol):
    """A user redaction hook: returns the value to record in place of ``value``."""

    def __call__(self, value: Any, *, kind: str, field: str) -> Any: ...


RedactSpec = RedactHook | Callable[..., Any] | None
