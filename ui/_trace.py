"""One trace: its ``traces`` row, its spans as a tree on a timeline, its findings; one span in detail.

The span list carries no payloads (a trace of 2,000 LLM calls would otherwise ship every transcript);
a span's detail reads its request and response, inline up to :data:`INLINE_CHARS` each, and a bigger
payload, or one offloaded to the data dir's payload store, is fetched when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

SPAN_COLUMNS: Final = (
    "span_id, parent_span_id, name, kind, status_code, status_message, error_type, "
    "epoch_ns(start_time) AS start_ns, epoch_ns(end_time) AS end_ns, duration_ms, model, "
    "input_tokens, output_tokens, tool_name, boundary, occurrence, seq, attempt, depth, span_index, "
    "is_orphan"
)
#: Characters of a payload shown inline in a span's detail; beyond it the payload loads on demand.
INLINE_CHARS: Final = 64_000
PARTS: Final = ("request", "response")
#: The narrowest bar of the waterfall, in % of the trace: a sub-millisecond span stays visible.
MIN_BAR_PERCENT: Final = 0.4

SPANS_SQL: Final = f"SELECT {SPAN_COLUMNS} FROM spans WHERE trace_id = $trace ORDER BY span_index, start_ns"
TRACE_SQL: Final = "SELECT * FROM traces WHERE trace_id = $trace"
FINDINGS_SQL: Final = (
    "SELECT category, span_id, span_name, boundary, occurrence, layer, evidence, confidence "
    "FROM findings WHERE trace_id = $trace ORDER BY seq NULLS FIRST, category"
)
SPAN_SQL: Final = f"""
    SELECT {SPAN_COLUMNS}, span_kind, service_name, operation, provider, finish_reason, tool_call_id,
           agent_name, request_sha256, response_sha256, attributes, resource, events, links,
           self_time_ms, child_count,
           length(request::VARCHAR) AS request_chars, length(response::VARCHAR) AS response_chars,
           CASE WHEN length(request::VARCHAR) <= {INLINE_CHARS} THEN request::VARCHAR END AS request,
           CASE WHEN length(response::VARCHAR) <= {INLINE_CHARS} THEN response::VARCHAR END AS response
    FROM spans WHERE trace_id = $trace AND span_id = $span
"""
PAYLOAD_SQL: Final = "SELECT {part}::VARCHAR AS text FROM spans WHERE trace_id = $trace AND span_id = $span"


@dataclass(frozen=True)
class TimelineSpan:
    """A span as one row of the tree and its bar on the waterfall (offset and width in % of the trace)."""

    span: dict[str, Any]
    left: float
    width: float
    findings: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TraceView:
    """What the trace page shows."""

    trace_id: str
    row: dict[str, Any] | None
    spans: list[TimelineSpan]
    findings: list[dict[str, Any]]
    duration_ms: float


def timeline(spans: list[dict[str, Any]], findings: list[dict[str, Any]]) -> tuple[list[TimelineSpan], float]:
    """Waterfall positions of ``spans`` (pre-order) and each finding attached to its first span."""
    if not spans:
        return [], 0.0
    start = min(s["start_ns"] for s in spans)
    end = max(s["end_ns"] for s in spans)
    total = max(end - start, 1)
    by_span: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        by_span.setdefault(finding["span_id"] or spans[0]["span_id"], []).append(finding)
    rows = []
    for span in spans:
        width = max((span["end_ns"] - span["start_ns"]) / total * 100, MIN_BAR_PERCENT)
        # a short span at the very end is moved left rather than cut to nothing by the track's edge
        left = min((span["start_ns"] - start) / total * 100, 100 - width)
        rows.append(TimelineSpan(span, round(left, 3), round(width, 3), by_span.get(span["span_id"], [])))
    return rows, (end - start) / 1e6
