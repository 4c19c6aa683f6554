"""The writers' view of the trace signals: each span's :class:`~tailcut.signals.SpanFacts`, read from
protobuf spans or ``spans`` rows, and the ``traces`` rows of a ``spans`` table.

The record, its rules and the row are :mod:`tailcut.signals` (their one definition); this is how the
Parquet exporter and ``tailcut ingest`` feed it, over every span of the trace whatever produced it. The
SDK's root span holds the same counts for its own process's spans only, so ``span_count`` and ``depth``
can be larger here (third-party spans, other processes).

:func:`facts_from_otlp` reads a protobuf span touching only the attributes it needs,
:func:`facts_from_row` a ``spans`` row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pyarrow as pa
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut import attributes as attr
from tailcut.exporters._pricing import default_pricing
from tailcut.exporters.conventions import names as n
from tailcut.exporters.conventions.mapping import (
    COLUMN_SOURCES,
    KIND_KEYS,
    first_source,
    operation_for,
    resolve_kind,
    synthetic_boundary,
)
from tailcut.exporters.conventions.messages import tool_request_sha256, written_payloads
from tailcut.exporters.conventions.observations import (
    EVENT_TEXT_KEYS,
    INVALID_TOOL_CALLS,
    RESULT_KINDS,
    failure_text,
    reported_category,
)
from tailcut.exporters.wire.values import python_value
from tailcut.signals import NO_RUN, RUN_KEYS, SpanFacts, TraceRow, compute_signals, run_facts, traces_row

_STATUS_ERROR: Final = 2  # OTLP Status.code
_EXCEPTION: Final = "exception"  # the event name OpenTelemetry records an exception under
_TOOL_REQUEST_KEYS: Final = (
    attr.GEN_AI_TOOL_CALL_ARGUMENTS,
    n.OI_TOOL_CALL_ARGUMENTS,
    n.OI_INPUT_VALUE,
    n.OI_INPUT_MIME_TYPE,
    n.TRACELOOP_ENTITY_INPUT,
)
#: The ``session_id``, ``user_id`` and ``conversation_id`` columns and the attribute each copies.
ID_KEYS: Final = {column: RUN_KEYS[column] for column in ("session_id", "user_id", "conversation_id")}
#: Every attribute :func:`facts_from_otlp` decodes; all others are skipped without decoding their value.
FACT_KEYS: Final = frozenset(
    KIND_KEYS
    | {
        s.key
        for column in (
            "input_tokens",
            "output_tokens",
            "tool_name",
            "provider",
            "operation",
            "agent_name",
            "boundary",
            "attempt",
            "request_sha256",
            "model",
        )
        for s in COLUMN_SOURCES[column]
    }
    | {attr.SCHEMA_VIOLATIONS, n.LLM_REQUEST_TYPE, *RUN_KEYS.values(), *_TOOL_REQUEST_KEYS}
)


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _facts(
    trace_id: str,
    span_id: str,
    parent_span_id: str | None,
    name: str,
    failed: bool,
    start_ns: int,
    end_ns: int,
    values: Mapping[str, Any],
    service_name: str | None,
    raised: bool,
    reported: str | None,
) -> SpanFacts:
    """Facts from a span's decoded attributes (only :data:`FACT_KEYS` are read); ``raised``: it carries an
    ``exception`` event; ``reported``: what its failure text reports (``SpanFacts.reported``)."""
    kind = resolve_kind(values)
    tool_name = first_source(values, "tool_name", kind)[0]
    provider = first_source(values, "provider", kind)[0]
    operation = operation_for(
        first_source(values, "operation", kind)[0], values.get(n.LLM_REQUEST_TYPE), kind
    )
    boundary = first_source(values, "boundary", kind)[0] or synthetic_boundary(
        kind, name, tool_name=tool_name, provider=provider, operation=operation
    )
    request_sha = first_source(values, "request_sha256", kind)[0]
    if request_sha is None and kind == "tool" and attr.KIND not in values:
        request_sha = tool_request_sha256(values)
    attempt = first_source(values, "attempt", kind)[0]
    root = parent_span_id is None
    input_tokens = first_source(values, "input_tokens", kind)[0] or 0
    output_tokens = first_source(values, "output_tokens", kind)[0] or 0
    cost = None
    if kind == "llm":
        cost = default_pricing().cost(first_source(values, "model", kind)[0], input_tokens, output_tokens)
    return SpanFacts(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        kind=kind,
        failed=failed,
        start_ns=start_ns,
        end_ns=end_ns,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        boundary=boundary,
        request_sha256=request_sha,
        attempt=attempt if attempt is not None else 1,
        schema_violations=_int(values.get(attr.SCHEMA_VIOLATIONS)),
        service_name=service_name,
        agent_name=first_source(values, "agent_name", kind)[0],
        run=run_facts(values) if root else NO_RUN,
        cost_usd=cost,
        raised=raised,
        reported=reported,
    )


def facts_from_otlp(span: Span, resource_service_name: str | None) -> SpanFacts:
    """The facts of a protobuf ``Span``, decoding only the attributes in :data:`FACT_KEYS` (and, for what
    its failure text reports, its payloads: :func:`_otlp_reported`).

    Parameters
    ----------
    span
        An OTLP protobuf span.
    resource_service_name
        ``service.name`` of the resource it came with.
    """
    values = {kv.key: python_value(kv.value) for kv in span.attributes if kv.key in FACT_KEYS}
    raised = any(event.name == _EXCEPTION for event in span.events)
    failed = span.status.code == _STATUS_ERROR
    return _facts(
        span.trace_id.hex(),
        span.span_id.hex(),
        span.parent_span_id.hex() or None,
        span.name,
        failed,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        values,
        resource_service_name,
        raised,
        _otlp_reported(span, resolve_kind(values), failed or raised),
    )


def _otlp_reported(span: Span, kind: str, failed: bool) -> str | None:
    """What a protobuf span's failure text reports (its payloads: :func:`written_payloads`)."""
    events = [
        (
            event.name,
            {kv.key: str(python_value(kv.value)) for kv in event.attributes if kv.key in EVENT_TEXT_KEYS},
        )
        for event in span.events
    ]
    response, request = written_payloads(kind, {kv.key: python_value(kv.value) for kv in span.attributes})
    text = failure_text(kind, span.status.message or None, events, response)
    return reported_category(kind, failed=failed, text=text, request=request)


def _nanoseconds(value: Any) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1e9) if hasattr(value, "timestamp") else int(value.value)


def facts_from_row(row: Mapping[str, Any]) -> SpanFacts:
    """The facts of a ``spans`` row (a dict of its columns; times from ``start_time_ns`` and ``end_time_ns``
    when it has them, else ``start_time`` and ``end_time`` as ns integers or datetimes).

    The row's ``kind`` is used as is (it already went through the nested-call rule).
    """
    attributes = row.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        attributes = dict(attributes)
    root = row.get("parent_span_id") is None
    events = [(event["name"], _event_attributes(event)) for event in row.get("events") or ()]
    raised = any(name == _EXCEPTION for name, _ in events)
    failed = row.get("status_code") == "ERROR"
    return SpanFacts(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_span_id=row.get("parent_span_id"),
        name=row["name"],
        kind=row["kind"],
        failed=failed,
        start_ns=_nanoseconds(row.get("start_time_ns", row.get("start_time"))),
        end_ns=_nanoseconds(row.get("end_time_ns", row.get("end_time"))),
        input_tokens=row.get("input_tokens") or 0,
        output_tokens=row.get("output_tokens") or 0,
        boundary=row.get("boundary"),
        request_sha256=row.get("request_sha256"),
        attempt=row.get("attempt") or 1,
        schema_violations=_int(attributes.get(attr.SCHEMA_VIOLATIONS)),
        service_name=row.get("service_name"),
        agent_name=row.get("agent_name"),
        run=run_facts({**attributes, **{key: row.get(column) for column, key in ID_KEYS.items()}})
        if root
        else NO_RUN,
        cost_usd=row.get("cost_usd"),
        raised=raised,
        reported=reported_category(
            row["kind"],
            failed=failed or raised,
            text=failure_text(row["kind"], row.get("status_message"), events, row.get("response")),
            request=row.get("request"),
        ),
    )


def _event_attributes(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """An event's attributes of a ``spans`` row (a map read back from Arrow is a list of pairs)."""
    attributes = event.get("attributes") or {}
    return attributes if isinstance(attributes, Mapping) else dict(attributes)


_FACT_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "status_code",
    "start_time_ns",
    "end_time_ns",
    "input_tokens",
    "output_tokens",
    "boundary",
    "request_sha256",
    "attempt",
    "service_name",
    "agent_name",
    "attributes",
    "cost_usd",
    "events",
    "status_message",
    "request",
    "response",
    *ID_KEYS,
)


def facts_from_table(table: pa.Table) -> list[SpanFacts]:
    """:func:`facts_from_row` for every row of a ``spans`` table.

    The payloads are read into Python only where a failure text reads them: a boundary's result, another
    span's result that carries LangChain's tool-call parse errors, and a tool span's arguments.
    """
    import pyarrow.compute as pc

    columns = table.select(list(_FACT_COLUMNS))
    kind = columns["kind"]
    response = _storage(columns["response"])
    boundary = pc.is_in(kind, value_set=pa.array(RESULT_KINDS))
    carries = pc.fill_null(pc.match_substring(response, INVALID_TOOL_CALLS), False)
    for name, values, keep in (
        ("response", response, pc.or_(boundary, carries)),
        ("request", _storage(columns["request"]), pc.equal(kind, "tool")),
    ):
        kept = pc.if_else(pc.fill_null(keep, False), values, pa.nulls(len(values), values.type))
        columns = columns.set_column(columns.schema.get_field_index(name), name, kept)
    return [facts_from_row(row) for row in columns.to_pylist()]


def _storage(column: pa.ChunkedArray) -> pa.Array:
    """A JSON (or string) column as one string array."""
    array = column.combine_chunks()
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def trace_rows(table: pa.Table, **decision: Any) -> list[TraceRow]:
    """A ``traces`` row per trace in a ``spans`` table, every trace with the same decision fields.

    ``decision`` takes the keyword arguments of :func:`tailcut.signals.traces_row`.
    """
    by_trace: dict[str, list[SpanFacts]] = {}
    for facts in facts_from_table(table):
        by_trace.setdefault(facts.trace_id, []).append(facts)
    return [traces_row(compute_signals(facts), **decision) for facts in by_trace.values()]
