"""Canonical JSON (after RFC 8785, the JSON Canonicalization Scheme): one text, and one hash, per payload.

A replay matches a live request to its record by hash, so the encoding must not depend on dict order,
whitespace or how a value was built, and two different payloads must never share a text. The text
follows RFC 8785 in all but numbers: UTF-8, no insignificant whitespace, object keys sorted by their
UTF-16 code units, strings escaped as RFC 8785 section 3.2.2.2 says (``\\b \\t \\n \\f \\r \\" \\\\``
short, other controls as ``\\u00xx``, everything else as itself). Object keys must be strings:
``{1: "x", "1": "y"}`` has no faithful JSON text, so it is refused (:class:`NonStringKeyError` names the
key and where it is) instead of being written with a duplicate key.

Numbers keep Python's two kinds apart, where RFC 8785 (whose numbers are all doubles) writes ``1.0`` as
``1``: an integer is written exactly (``1``, ``2**70``), a float as the shortest digits that read back
as it, always with a point or an exponent (``1.0``, ``1e+16``, ``1e-7``, ``-0.0``). A replay hands
recorded values back to Python code, where ``1250.0`` and ``1250`` print differently: a text that merged
them would make a faithful replay diverge as soon as the agent formats the number into a prompt. Each
float is the same double RFC 8785's text denotes (``tests/test_sdk_canonical.py`` checks Appendix B).

Values that JSON has no type for are encoded by these rules:

=========================================  ==================================================================
Python value                               JSON
=========================================  ==================================================================
``dict`` (any key order)                   object, keys sorted; a non-string key is refused
``list``, ``tuple`` (namedtuples too)      array
``set``, ``frozenset``                     array, elements in the order of their canonical text
dataclass instance                         object of its fields
pydantic model (``model_dump``)            ``model.model_dump(mode="json")``
``bytes``, ``bytearray``, ``memoryview``   ``{"$bytes": "<standard base64>"}``
``datetime``, ``date``, ``time``           ISO 8601 string, e.g. ``2026-01-02T03:04:05+00:00``
``Decimal``                                string of the decimal (no float rounding)
``UUID``, ``pathlib.Path``                 string
``Enum`` member                            its ``value``, encoded by these same rules
float NaN / ±Infinity                      ``null`` (JSON has no such numbers; RFC 8785 refuses them)
integer beyond 64 bits                     exact integer (RFC 8785 would round it to a double)
string with a lone surrogate               the surrogate as ``\\udxxx`` (RFC 8785 refuses it)
anything else                              :class:`CanonicalEncodingError` naming the type
=========================================  ==================================================================

The SDK records a payload whose dicts have non-string keys through :func:`tagged_keys` (each such dict
becomes ``{"$map": [[key, value], ...]}``), so an agent's tool call is never refused a recording.

The text is the payload as recorded; ``sha256_hex`` of it is the payload's identity (and its address in
the payload store). Every payload whose keys are strings without characters beyond U+FFFF has the text
(and hash) it had before keys were sorted by UTF-16 code units; every stored hash is of stored bytes,
so it still verifies, and a request whose key order changed still matches on replay, compared as JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import pathlib
import uuid
from typing import Any, Final

import orjson

from tailcut.errors import CanonicalEncodingError

# Dataclasses pass through to `_encode_extra` because orjson does not sort their fields.
_NATIVE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATACLASS
_OPTIONS = orjson.OPT_SORT_KEYS | _NATIVE


class NonStringKeyError(CanonicalEncodingError):
    """A dict to encode has a key that is not a string (JSON object keys are strings)."""


def _encode_extra(value: Any) -> Any:
    """orjson's ``default`` hook: turn a value orjson cannot encode into one it can."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, set | frozenset):
        return sorted(value, key=canonical_json)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID | pathlib.PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"cannot encode a value of type {type(value).__module__}.{type(value).__qualname__}")


def encodable(value: Any) -> Any:
    """The value the rules above encode in place of ``value`` (e.g. a pydantic model's dump).

    Raises
    ------
    CanonicalEncodingError
        If ``value`` has no encoding, or its own conversion (``model_dump``) raised.
    """
    try:
        return _encode_extra(value)
    except Exception as exc:
        raise CanonicalEncodingError(_describe(exc)) from None


def _describe(exc: Exception) -> str:
    """The message of a failed encoding: orjson's own errors as they are, others with their type."""
    if isinstance(exc, TypeError | ValueError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def canonical_bytes(value: Any) -> bytes:
    """Return the canonical UTF-8 JSON encoding of ``value``.

    Raises
    ------
    NonStringKeyError
        If a dict in ``value`` has a key that is not a string (the message names it and its path).
    CanonicalEncodingError
        If ``value`` holds something else the rules above cannot encode.
    """
    try:
        raw = orjson.dumps(value, default=_encode_extra, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        message = str(exc)
        if "64-bit" in message or "surrogates" in message or "Dict key" in message:
            return _canonical_bytes_slow(value)
        raise CanonicalEncodingError(message) from None
    except Exception as exc:  # raised from inside a model_dump, for example
        raise CanonicalEncodingError(_describe(exc)) from None
    if not raw.isascii() and _may_sort_otherwise(raw) and _has_astral_key(raw):
        return _canonical_bytes_slow(json.loads(raw))
    return raw


# --- key order ---------------------------------------------------------------------------------------------
#: orjson sorts keys by code point; RFC 8785 by UTF-16 code unit. Two keys sort otherwise only when, where
#: they first differ, one has a character beyond U+FFFF (four UTF-8 bytes, the first F0-F4) and the other
#: one in U+E000-U+FFFF (the first byte EE or EF): both must occur in the text. (``bytes.__contains__``
#: finds a byte in a few hundred nanoseconds per 4 KB; a regular expression's byte class is tens of
#: microseconds.)
_ASTRAL_LEADS: Final = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")


def _may_sort_otherwise(raw: bytes) -> bool:
    return (b"\xee" in raw or b"\xef" in raw) and any(lead in raw for lead in _ASTRAL_LEADS)


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _next_astral(raw: bytes, start: int, leads: list[bytes]) -> int:
    if len(leads) == 1:
        return raw.find(leads[0], start)
    found = [at for lead in leads if (at := raw.find(lead, start)) >= 0]
    return min(found) if found else -1


def _closing_quote(raw: bytes, inside: int) -> int:
    """The index of the quote that ends the JSON string holding byte ``inside`` (not an escape)."""
    end = raw.find(b'"', inside)
    while raw[end - 1] == 0x5C:  # a backslash before it: an escaped quote if the backslashes are odd
        run = end - 1
        while raw[run - 1] == 0x5C:
            run -= 1
        if (end - run) % 2 == 0:
            break
        end = raw.find(b'"', end + 1)
    return end


def _has_astral_key(raw: bytes) -> bool:
    """Whether a key of orjson's text ``raw`` holds a character beyond U+FFFF.

    Such a character is inside a string; the string is a key when its closing quote is followed by a
    colon. Each string is looked at once, with C-level searches.
    """
    leads = [lead for lead in _ASTRAL_LEADS if lead in raw]  # F0 alone, most often (emoji, CJK ext.)
    at = _next_astral(raw, 0, leads) if leads else -1
    while at >= 0:
        end = _closing_quote(raw, at)
        if raw[end + 1 : end + 2] == b":":
            return True
        at = _next_astral(raw, end + 1, leads)
    return False


# --- the exact path ----------------------------------------------------------------------------------------
#: Types orjson writes itself (the exact path leaves them to it).
_ORJSON_SCALARS: Final = (dt.datetime, dt.date, dt.time, uuid.UUID, enum.Enum)


def _path_text(path: tuple[str | int, ...]) -> str:
    return "$" + "".join(f"[{step!r}]" for step in path)


def _canonical_bytes_slow(value: Any) -> bytes:
    """The same encoding, built with Python's help, for what the fast path cannot write itself.

    Integers beyond 64 bits and strings with lone surrogates (which orjson refuses) are swapped for
    marker strings; dicts are sorted here by UTF-16 code units (orjson sorts by code points) and their
    keys checked to be strings; orjson encodes the rest in that order, and the markers are replaced by
    their JSON.
    """
    rendered: list[str] = []

    def marker(json_text: str) -> str:
        rendered.append(json_text)
        return f"\x00tailcut-raw:{len(rendered) - 1}\x00"

    def text(v: str) -> str:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return marker(json.dumps(v, ensure_ascii=True))
        return v

    def prepare(v: Any, path: tuple[str | int, ...]) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, bool) or v is None or isinstance(v, float):
            return v
        if isinstance(v, int):
            return marker(str(v)) if not -(2**63) <= v < 2**64 else v
        if isinstance(v, dict):
            for key in v:
                if not isinstance(key, str):
                    raise NonStringKeyError(
                        f"dict key {key!r} ({type(key).__name__}) at {_path_text(path)} is not a string: "
                        "JSON object keys must be strings; convert the keys with str() or record a "
                        "list of [key, value] pairs"
                    )
            return {text(k): prepare(v[k], (*path, k)) for k in sorted(v, key=_utf16)}
        if isinstance(v, list | tuple):
            return [prepare(x, (*path, i)) for i, x in enumerate(v)]
        if isinstance(v, _ORJSON_SCALARS) or type(v).__module__ == "numpy":
            return v
        return prepare(_encode_extra(v), path)

    try:
        raw = orjson.dumps(prepare(value, ()), default=_encode_extra, option=_NATIVE)
    except NonStringKeyError:
        raise
    except Exception as exc:
        raise CanonicalEncodingError(_describe(exc)) from None
    result = raw.decode("utf-8")
    for index, json_text in enumerate(rendered):
        result = result.replace(f'"\\u0000tailcut-raw:{index}\\u0000"', json_text, 1)
    return result.encode("utf-8")


def tagged_keys(value: Any) -> Any:
    """``value`` with each dict that has a non-string key as ``{"$map": [[key, value], ...]}``.

    The pairs are in the order of their keys' canonical text, so the result has one canonical text, and
    the original dict can be rebuilt from it (keys that JSON writes as strings, numbers, booleans or null
    come back as themselves). Dicts with string keys only, and everything else, are left as they are.

    Examples
    --------
    >>> canonical_json(tagged_keys({"counts": {2: "b", 1: "a"}, "name": "x"}))
    '{"counts":{"$map":[[1,"a"],[2,"b"]]},"name":"x"}'
    """
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: tagged_keys(item) for key, item in value.items()}
        pairs = [(canonical_json(tagged_keys(key)), key, item) for key, item in value.items()]
        return {"$map": [[key, tagged_keys(item)] for _, key, item in sorted(pairs, key=lambda p: p[0])]}
    if isinstance(value, list | tuple):
        return [tagged_keys(item) for item in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, _ORJSON_SCALARS) or type(value).__module__ == "numpy":
        return value
    try:
        return tagged_keys(_encode_extra(value))
    except TypeError:
        return value  # canonical_bytes will name it


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value`` (see the module docstring for the rules).

    Examples
    --------
    >>> canonical_json({"b": 1, "a": [1.5, None, "x"]})
    '{"a":[1.5,null,"x"],"b":1}'
    >>> canonical_json({"a": 1, "b": 2}) == canonical_json({"b": 2, "a": 1})
    True
    """
    return canonical_bytes(value).decode("utf-8")


#: hashlib releases the GIL to hash 2048 bytes or more at once. For a payload of a few kilobytes on an
#: agent's thread, handing the GIL to another thread (the span exporter's, typically) and waiting to get
#: it back costs several times the hash itself (measured: 15-20 us instead of 3-7 us per crossing of a
#: 4 KB payload with a batch span processor running), so such payloads are fed in slices hashed with the
#: GIL held. Beyond :data:`_HOLD_GIL_UP_TO` the hash is long enough that letting other threads run wins.
_GIL_FREE_SLICE: Final = 2047
_HOLD_GIL_UP_TO: Final = 256 * 1024


def sha256_hex(data: str | bytes) -> str:
    """Hex sha256 of ``data`` (text is hashed as UTF-8): the identity of a canonical payload."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    size = len(data)
    if size <= _GIL_FREE_SLICE or size > _HOLD_GIL_UP_TO:
        return hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256()
    view = memoryview(data)
    for start in range(0, size, _GIL_FREE_SLICE):
        digest.update(view[start : start + _GIL_FREE_SLICE])
    return digest.hexdigest()


def canonicalize(value: Any) -> tuple[str, str]:
    """Return ``(canonical_json(value), its sha256)`` in one pass."""
    raw = canonical_bytes(value)
    return raw.decode("utf-8"), sha256_hex(raw)


def loads(text: str | bytes) -> Any:
    """Parse JSON text (the inverse of :func:`canonical_json` for JSON-native values).

    The standard library parser is used because it keeps integers beyond 64 bits exact.
    """
    return json.loads(text)
