"""Encoded ``ExportTraceServiceRequest`` bodies assembled from spans that are already bytes.

Buffered spans keep the bytes they arrived in and the resource and scope they came under
(:class:`~tailcut.collector._processor.Origin`), so a request is a few byte joins in protobuf's wire
format: no message objects are built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from tailcut.exporters._varint import encode_varint

SPAN_TAG: Final = b"\x12"  # ScopeSpans.spans: field 2, length-delimited


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
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
