"""Encoded ``ExportTraceServiceRequest`` bodies and ``Span.attributes`` fields, assembled as bytes.

The collector's buffered spans keep the bytes they arrived in and the resource and scope they came under
(:class:`~tailcut.collector._processor.Origin`), so a request is a few byte joins in protobuf's wire
format: no message objects are built. Attributes the writer adds (sampling decision, trace signals) are
appended to a span's bytes as more ``Span.attributes`` fields: a repeated field may simply be appended to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from tailcut.exporters.wire.varint import encode_varint

SPAN_TAG: Final = b"\x12"  # ScopeSpans.spans: field 2, length-delimited
ATTRIBUTES_TAG: Final = b"\x4a"  # Span.attributes: field 9, length-delimited


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (``number`` below 16: a one-byte tag)."""
    return bytes(((number << 3) | 2,)) + encode_varint(len(payload)) + payload


def encode_request(groups: Iterable[tuple[Any, list[bytes]]]) -> bytes:
    """A request of ``(origin, encoded ScopeSpans.spans fields)`` groups, one ``ResourceSpans`` each
    (the fields may come as pieces: they are joined as they are)."""
    resource_spans = []
    for origin, spans in groups:
        scope_spans = field(1, origin.scope) + b"".join(spans)
        resource_spans.append(field(1, field(1, origin.resource) + field(2, scope_spans)))
    return b"".join(resource_spans)


def request_of(spans: Sequence[Any]) -> bytes:
    """A request holding ``spans`` (anything with ``data`` and ``origin``) as they are."""
    by_origin: dict[int, tuple[Any, list[bytes]]] = {}
    for span in spans:
        entry = by_origin.get(id(span.origin))
        if entry is None:
            entry = by_origin[id(span.origin)] = (span.origin, [])
        entry[1].append(SPAN_TAG + encode_varint(len(span.data)) + span.data)
    return encode_request(by_origin.values())


def encode_attributes(values: Mapping[str, Any]) -> bytes:
    """``values`` as encoded ``Span.attributes`` fields, ready to append to a span's bytes."""
    out = bytearray()
    for key, value in values.items():
        encoded = KeyValue(key=key, value=any_value_message(value)).SerializeToString()
        out += ATTRIBUTES_TAG + encode_varint(len(encoded)) + encoded
    return bytes(out)


def any_value_message(value: Any) -> AnyValue:
    """A Python value as an ``AnyValue`` message: bool, int, float, lists (arrays), mappings (key-value
    lists), None (empty); anything else as its string."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[any_value_message(v) for v in value]))
    if isinstance(value, Mapping):
        items = [KeyValue(key=str(k), value=any_value_message(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=items))
    if value is None:
        return AnyValue()
    return AnyValue(string_value=str(value))
