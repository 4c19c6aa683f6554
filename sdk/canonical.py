"""Canonical JSON: one text, and so one hash, per logical payload.

A replay matches a live request to its record by hash, so the encoding must not depend on dict order,
whitespace or how a value was built. ``canonical_json`` writes UTF-8 JSON with object keys sorted and no
insignificant whitespace. Values that JSON has no type for are encoded by these rules:

=========================================  ==================================================================
Python value                               JSON
=========================================  ==================================================================
``dict`` (any key order)                   object, keys sorted; non-string keys become their ``str()``
``list``, ``tuple`` (namedtuples too)      array
``set``, ``frozenset``                     array, elements in the order of their canonical text
dataclass instance                         object of its fields
pydantic model (``model_dump``)            ``model.model_dump(mode="json")``
``bytes``, ``bytearray``, ``memoryview``   ``{"$bytes": "<standard base64>"}``
``datetime``, ``date``, ``time``           ISO 8601 string, e.g. ``2026-01-02T03:04:05+00:00``
``Decimal``                                string of the decimal (no float rounding)
``UUID``, ``pathlib.Path``                 string
``Enum`` member                            its ``value``, encoded by these same rules
float NaN / ±Infinity                      ``null`` (JSON has no such numbers; the text stays valid JSON)
integer beyond 64 bits                     exact integer
anything else                              :class:`CanonicalEncodingError` naming the type
=========================================  ==================================================================

The text is the payload as recorded; ``sha256_hex`` of it is the payload's identity (and its address in
the payload store).
"""

from __future__ import annotations

import base64
import dataclasses
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
_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_NON_STR_KEYS
    | orjson.OPT_SERIALIZE_NUMPY
    | orjson.OPT_PASSTHROUGH_DATACLASS
)


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
    CanonicalEncodingError
        If ``value`` holds something the rules above cannot encode.
    """
    try:
        return orjson.dumps(value, default=_encode_extra, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        if "64-bit" in str(exc) or "surrogates" in str(exc):
            return _canonical_bytes_slow(value)
        raise CanonicalEncodingError(str(exc)) from None
    except Exception as exc:  # raised from inside a model_dump, for example
        raise CanonicalEncodingError(_describe(exc)) from None


def _canonical_bytes_slow(value: Any) -> bytes:
    """The same encoding for values orjson refuses: integers beyond 64 bits and lone surrogates.

    Each such value is swapped for a marker string, the rest is encoded by orjson (so floats and
    strings are written exactly as on the fast path), and the markers are replaced by the value's JSON.
    """
    rendered: list[str] = []

    def marker(json_text: str) -> str:
        rendered.append(json_text)
        return f"\x00tailcut-raw:{len(rendered) - 1}\x00"

    def prepare(v: Any) -> Any:
        if isinstance(v, dict):
            return {prepare(k) if isinstance(k, str) else k: prepare(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [prepare(x) for x in v]
        if isinstance(v, bool) or not isinstance(v, int | str):
            return v
        if isinstance(v, int):
            return marker(str(v)) if not -(2**63) <= v < 2**64 else v
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return marker(json.dumps(v, ensure_ascii=True))
        return v

    try:
        raw = orjson.dumps(prepare(value), default=_encode_extra, option=_OPTIONS)
    except Exception as exc:
        raise CanonicalEncodingError(_describe(exc)) from None
    text = raw.decode("utf-8")
    for index, json_text in enumerate(rendered):
        text = text.replace(f'"\\u0000tailcut-raw:{index}\\u0000"', json_text, 1)
    return text.encode("utf-8")


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
