"""Oracles built on the protobuf runtime: what the collector's lazy decoder reads of each span next to
what the runtime reads (the in-suite fuzz tests and ``fuzz/fuzz_collector.py`` hold the two to
agreement), and OTLP/JSON read into Python span records, the reference the column decoder is checked
against."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.collector._otlp import SpanFacts, parse_framed
from tailcut.exporters._batch import ResourceInfo, SpanEvent, SpanLink, SpanRecord
from tailcut.exporters.wire.columns import SPAN_KINDS, STATUS_CODES
from tailcut.exporters.wire.otlp_json import json_request
from tailcut.exporters.wire.values import key_values


def span_facts(body: bytes) -> list[tuple]:
    """What the collector reads of each span, through its lazy decoder (raises OtlpError to refuse)."""
    framed = parse_framed(body)
    facts = []
    for resource_spans in framed.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for data in scope_spans.spans:
                item = SpanFacts.FromString(data)
                facts.append(
                    (item.trace_id, item.span_id, item.name, item.start_time_unix_nano, item.status.code)
                )
    return facts


def oracle_facts(body: bytes) -> list[tuple] | None:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError:
        return None
    return [
        (s.trace_id, s.span_id, s.name.encode(), s.start_time_unix_nano, s.status.code)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for s in scope_spans.spans
    ]


def json_records(document: Any) -> list[SpanRecord]:
    """The spans of an OTLP/JSON document as Python records: read by the one JSON reader, then walked
    message by message through the protobuf runtime (no column decoder involved)."""
    request = ExportTraceServiceRequest.FromString(json_request(document))
    records = []
    for resource_spans in request.resource_spans:
        resource = ResourceInfo.of(key_values(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                records.append(
                    SpanRecord(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex() or None,
                        name=s.name,
                        span_kind=SPAN_KINDS[s.kind] if s.kind < len(SPAN_KINDS) else "INTERNAL",
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        status_code=STATUS_CODES[s.status.code] if s.status.code < 3 else "UNSET",
                        status_message=s.status.message or None,
                        attributes=key_values(s.attributes),
                        events=[
                            SpanEvent(e.name, e.time_unix_nano, key_values(e.attributes)) for e in s.events
                        ],
                        links=[
                            SpanLink(x.trace_id.hex(), x.span_id.hex(), key_values(x.attributes))
                            for x in s.links
                        ],
                        resource=resource,
                        scope_name=scope_spans.scope.name or None,
                    )
                )
    return records
