"""OpenTelemetry SDK spans (``ReadableSpan``) as decoded span records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from tailcut.exporters._batch import (
    EMPTY_RESOURCE,
    DecodedSpans,
    ResourceInfo,
    SpanEvent,
    SpanLink,
    SpanRecord,
)


def _attributes(attributes: Any) -> dict[str, Any]:
    return dict(attributes) if attributes else {}


def sdk_records(spans: Iterable[ReadableSpan]) -> list[SpanRecord]:
    """Decode SDK spans (each distinct resource once)."""
    resources: dict[int, ResourceInfo] = {}
    records = []
    for span in spans:
        context = span.get_span_context()
        resource = span.resource
        info = resources.get(id(resource))
        if info is None:
            info = resources[id(resource)] = (
                ResourceInfo.of(_attributes(resource.attributes)) if resource is not None else EMPTY_RESOURCE
            )
        start = span.start_time or 0
        records.append(
            SpanRecord(
                trace_id=format(context.trace_id, "032x"),
                span_id=format(context.span_id, "016x"),
                parent_span_id=format(span.parent.span_id, "016x") if span.parent is not None else None,
                name=span.name,
                span_kind=span.kind.name,
                start_ns=start,
                end_ns=span.end_time if span.end_time is not None else start,
                status_code=span.status.status_code.name,
                status_message=span.status.description or None,
                attributes=_attributes(span.attributes),
                events=[SpanEvent(e.name, e.timestamp, _attributes(e.attributes)) for e in span.events],
                links=[
                    SpanLink(
                        format(link.context.trace_id, "032x"),
                        format(link.context.span_id, "016x"),
                        _attributes(link.attributes),
                    )
                    for link in span.links
                ],
                resource=info,
                scope_name=span.instrumentation_scope.name if span.instrumentation_scope else None,
            )
        )
    return records


def decode_sdk_spans(spans: Iterable[ReadableSpan]) -> DecodedSpans:
    """SDK spans as a column batch."""
    return DecodedSpans.from_records(sdk_records(spans))
