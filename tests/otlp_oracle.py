"""What the collector's lazy decoder reads of each span, next to what the protobuf runtime (the oracle)
reads: the in-suite fuzz tests and ``fuzz/fuzz_collector.py`` hold the two to agreement."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.collector._otlp import SpanFacts, parse_framed


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
