"""OTLP ``AnyValue`` in its two forms: encoded bytes read as a scalar, protobuf messages as Python values.

The collector keeps attributes as the encoded ``AnyValue`` bytes (a C-level map lookup hands them out, see
:data:`tailcut.collector._otlp.SpanFacts`) and reads only the few scalars policies and signals need
(:func:`any_value`, :func:`any_int`); the column decoder and the signals of parsed spans turn whole
``AnyValue`` messages into Python values (:func:`python_value`, :func:`key_values`).
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from tailcut.exporters.wire.varint import encode_varint, read_varint, short_values

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

STRING_TAG: Final = 0x0A  # AnyValue.string_value, field 1, length-delimited
BOOL_TAG: Final = 0x10  # field 2, varint
INT_TAG: Final = 0x18  # field 3, varint
DOUBLE_TAG: Final = 0x21  # field 4, fixed64
_DOUBLE: Final = struct.Struct("<d")
_TWO_TO_63: Final = 1 << 63
_TWO_TO_64: Final = 1 << 64
#: The encoded ``AnyValue`` of every integer from 0 to 2**14 - 1 (token counts), to its value.
_SMALL_INTS: Final = short_values(bytes((INT_TAG,)))


def any_value(raw: bytes) -> Any:
    """Decode an encoded ``AnyValue`` holding a string, bool, int or double (else None).

    These four kinds cover everything policies and signals read; arrays, maps and bytes return None.
    A one-byte string length is read in place and an integer below 2**14 looked up, without calling
    :func:`read_varint` (most values are such).
    """
    if not raw:
        return None
    tag = raw[0]
    if tag == STRING_TAG:
        if len(raw) > 1 and raw[1] < 0x80:
            return raw[2 : 2 + raw[1]].decode("utf-8", "replace")
        length, start = read_varint(raw, 1)
        return raw[start : start + length].decode("utf-8", "replace")
    if tag == INT_TAG:
        return any_int(raw)
    if tag == DOUBLE_TAG and len(raw) >= 9:
        return _DOUBLE.unpack_from(raw, 1)[0]
    if tag == BOOL_TAG and len(raw) >= 2:
        return raw[1] != 0 if raw[1] < 0x80 else read_varint(raw, 1)[0] != 0
    return None


def any_int(raw: bytes | None) -> int:
    """An integer attribute's value (0 when absent or not an integer); a finite double is truncated."""
    if not raw:
        return 0
    if raw[0] == INT_TAG:
        small = _SMALL_INTS.get(raw)
        if small is not None:
            return small
        value = read_varint(raw, 1)[0]
        return value - _TWO_TO_64 if value >= _TWO_TO_63 else value  # int64: two's complement
    if raw[0] == DOUBLE_TAG and len(raw) >= 9:
        number = _DOUBLE.unpack_from(raw, 1)[0]
        return int(number) if math.isfinite(number) else 0  # a client's NaN or infinity counts nothing
    return 0


def encode_string_value(text: str) -> bytes:
    """The encoded ``AnyValue`` of a string (to compare raw attribute values without decoding them)."""
    data = text.encode()
    return bytes((STRING_TAG,)) + encode_varint(len(data)) + data


def python_value(value: AnyValue) -> Any:
    """An ``AnyValue`` message as a Python value (key-value lists become dicts; bytes
    ``{"$bytes": base64}``)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [python_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return key_values(value.kvlist_value.values)
    if which == "bytes_value":
        return {"$bytes": base64.b64encode(value.bytes_value).decode("ascii")}
    return getattr(value, which)


def key_values(items: Iterable[KeyValue]) -> dict[str, Any]:
    """Repeated ``KeyValue`` as a dict (a repeated key keeps its last value)."""
    return {kv.key: python_value(kv.value) for kv in items}
