"""Spans forwarded to another OTLP backend carry full content, not skeletons and pieces.

tailcut's SDK records payloads as a skeleton plus the pieces its trace had not carried yet
(``tailcut._pieces``); only tailcut reads that form. Before a batch of kept spans goes to a forwarder,
:func:`self_contained` puts every marked payload attribute (``tailcut.request``, ``tailcut.response``,
``tailcut.stream.events``, and the ``gen_ai.tool.call.*`` copies of a tool's payloads) back together
from the pieces of the same batch (a kept trace is forwarded whole) and drops the piece attributes. A
payload whose pieces are not in the batch (a late span) is forwarded as recorded. Carrier spans
(``tailcut._carriers``) give their pieces, chunked ones included, and are not forwarded.
"""

from __future__ import annotations

import hashlib
from typing import Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut import attributes as attr
from tailcut._pieces import PAYLOAD_ATTRIBUTES, PIECED_SUFFIX, PIECES_SUFFIX, TOKEN_START, expand

#: Payload attribute -> the GenAI attribute a tool span copies it into.
_COPIES: Final = {attr.REQUEST: attr.GEN_AI_TOOL_CALL_ARGUMENTS, attr.RESPONSE: attr.GEN_AI_TOOL_CALL_RESULT}
_MARKER: Final = TOKEN_START.encode()
_CARRIER: Final = attr.CARRIER.encode()


def self_contained(request: bytes) -> bytes:
    """The encoded ``ExportTraceServiceRequest`` with its pieced payloads whole and no carriers
    (unchanged if it has neither)."""
    if _MARKER not in request and _CARRIER not in request:
        return request
    message = ExportTraceServiceRequest.FromString(request)
    pieces: dict[bytes, dict[str, str]] = {}
    spans = []
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            carriers = []
            for position, span in enumerate(ss.spans):
                found = pieces.setdefault(span.trace_id, {})
                for kv in span.attributes:
                    if kv.key == attr.CARRIER:
                        carriers.append(position)
                    elif kv.key == attr.CARRIER_CHUNKED:
                        for value in kv.value.array_value.values:
                            found[value.string_value[:64]] = value.string_value[64:]
                    elif kv.key.endswith(PIECES_SUFFIX):
                        for value in kv.value.array_value.values:
                            text = value.string_value
                            found[hashlib.sha256(text.encode("utf-8")).hexdigest()] = text
            for position in reversed(carriers):
                del ss.spans[position]
            spans.extend(ss.spans)
    for span in spans:
        _make_whole(span, pieces.get(span.trace_id, {}))
    return message.SerializeToString()


def _make_whole(span: Span, pieces: dict[str, str]) -> None:
    values = {kv.key: kv for kv in span.attributes}
    whole: dict[str, str] = {}
    for name in PAYLOAD_ATTRIBUTES.values():
        marker = values.get(name + PIECED_SUFFIX)
        if marker is None or not marker.value.bool_value or name not in values:
            continue
        try:
            whole[name] = expand(values[name].value.string_value, pieces.__getitem__)
        except KeyError:  # a piece an earlier batch carried: forwarded as recorded
            continue
    if not whole:
        return
    copies = {_COPIES[name]: name for name in whole if name in _COPIES}
    dropped = {name + suffix for name in whole for suffix in (PIECES_SUFFIX, PIECED_SUFFIX)}
    kept = []
    for kv in span.attributes:
        if kv.key in dropped:
            continue
        source = kv.key if kv.key in whole else copies.get(kv.key)
        if source is not None:
            kv.value.string_value = whole[source]
        kept.append(kv)
    del span.attributes[:]
    span.attributes.extend(kept)
