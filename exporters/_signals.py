"""Trace signals from all the spans of a trace, and the ``traces`` row built from them.

The signals follow :mod:`tailcut.signals`, their one definition; these are the writers' (Parquet
exporter, ``tailcut ingest``) view, over every span of the trace whatever produced it. The SDK's root span
holds the same counts for its own process's spans only, so ``span_count`` and ``depth`` can be larger
here (third-party spans, other processes).

:class:`SpanFacts` is the little that is needed per span; :func:`facts_from_otlp` reads it from a protobuf
span touching only the attributes it needs, :func:`facts_from_row` from a ``spans`` row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut import attributes as attr
from tailcut.exporters._pricing import default_pricing
from tailcut.exporters._wire import any_value
from tailcut.exporters.conventions import names as n
from tailcut.exporters.conventions.mapping import (
    COLUMN_SOURCES,
    KIND_KEYS,
    first_source,
    operation_for,
    resolve_kind,
    synthetic_boundary,
)
from tailcut.exporters.conventions.messages import tool_request_sha256
from tailcut.exporters.schema import CENSUS_VERSION, DECISION_REASONS
from tailcut.signals import SpanSignals, is_nested_call, trace_signals

_STATUS_ERROR: Final = 2  # OTLP Status.code
_ROOT_KEYS: Final = (
    attr.OUTCOME,
    attr.OUTCOME_SCORE,
    attr.HARNESS_REVISION,
    attr.ENV_REVISION,
    attr.PROMPT_VERSION,
)
_TOOL_REQUEST_KEYS: Final = (
    attr.GEN_AI_TOOL_CALL_ARGUMENTS,
    n.OI_TOOL_CALL_ARGUMENTS,
    n.OI_INPUT_VALUE,
    n.OI_INPUT_MIME_TYPE,
    n.TRACELOOP_ENTITY_INPUT,
)
#: The ``session_id``, ``user_id`` and ``conversation_id`` columns and the attribute each copies.
ID_KEYS: Final = {
    "session_id": "session.id",
    "user_id": "user.id",
    "conversation_id": attr.GEN_AI_CONVERSATION_ID,
}
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
    | {attr.SCHEMA_VIOLATIONS, n.LLM_REQUEST_TYPE, *_ROOT_KEYS, *_TOOL_REQUEST_KEYS, *ID_KEYS.values()}
)


@dataclass(frozen=True, slots=True)
class SpanFacts:
    """What the trace signals and the ``traces`` row need of one span."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    #: The resolved kind (before the nested-call rule, which needs the parent and is applied per trace).
    kind: str
    failed: bool
    start_ns: int
    end_ns: int
    input_tokens: int = 0
    output_tokens: int = 0
    boundary: str | None = None
    request_sha256: str | None = None
    attempt: int = 1
    schema_violations: int = 0
    service_name: str | None = None
    agent_name: str | None = None
    # the run, as the root span records it (None on other spans)
    outcome: str | None = None
    outcome_score: float | None = None
    harness_revision: str | None = None
    env_revision: str | None = None
    prompt_version: str | None = None
    #: USD of an llm span of a priced model (None otherwise; see :mod:`._pricing`).
    cost_usd: float | None = None
    session_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class TraceSignals:
    """The trace signals of DESIGN.md section 2 for one whole trace, plus what the ``traces`` row needs."""

    trace_id: str
    span_count: int
    llm_calls: int
    tool_calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    max_tool_repeat: int
    schema_violations: int
    depth: int
    orphan_count: int
    has_root: bool
    start_ns: int | None
    end_ns: int | None
    service_name: str | None = None
    root_name: str | None = None
    agent_name: str | None = None
    outcome: str | None = None
    outcome_score: float | None = None
    harness_revision: str | None = None
    env_revision: str | None = None
    prompt_version: str | None = None
    #: Sum over the llm spans; None when one has no price, 0.0 when there is none.
    cost_usd: float | None = None
    # the root span's ids (None without a root)
    session_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None
    #: Whether the root span failed (None without a root): the census's ``error`` flag (issue 29).
    root_failed: bool | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def duration_ms(self) -> float | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return (self.end_ns - self.start_ns) / 1e6

    def as_attributes(self) -> dict[str, int]:
        """The signals under the root-span attribute names the SDK uses (``tailcut.trace.*``)."""
        return attr.trace_signal_attributes(self)


def compute_signals(facts: Iterable[SpanFacts]) -> TraceSignals:
    """The signals of one trace from the facts of all its spans (see the module docstring).

    Parameters
    ----------
    facts
        One :class:`SpanFacts` per span of the trace (any order); must not be empty.

    Returns
    -------
    TraceSignals
    """
    spans = list(facts)
    if not spans:
        raise ValueError("compute_signals needs at least one span")
    counts = trace_signals(
        SpanSignals(
            f.span_id,
            f.parent_span_id,
            f.kind,
            f.failed,
            (f.boundary or "", f.request_sha256) if f.kind == "tool" and f.attempt == 1 else None,
            f.input_tokens,
            f.output_tokens,
            f.schema_violations,
        )
        for f in spans
    )
    roots = [f for f in spans if f.parent_span_id is None]
    root = min(roots, key=lambda f: (f.start_ns, f.span_id)) if roots else None
    first = min(spans, key=lambda f: (f.start_ns, f.span_id))
    named = sorted((f for f in spans if f.agent_name), key=lambda f: (f is not root, f.start_ns))
    return TraceSignals(
        trace_id=spans[0].trace_id,
        span_count=counts.span_count,
        llm_calls=counts.llm_calls,
        tool_calls=counts.tool_calls,
        errors=counts.errors,
        input_tokens=counts.input_tokens,
        output_tokens=counts.output_tokens,
        max_tool_repeat=counts.max_tool_repeat,
        schema_violations=counts.schema_violations,
        depth=counts.depth,
        orphan_count=counts.orphan_count,
        has_root=root is not None,
        start_ns=min(f.start_ns for f in spans),
        end_ns=max(f.end_ns for f in spans),
        service_name=(root or first).service_name,
        root_name=root.name if root else None,
        agent_name=named[0].agent_name if named else None,
        outcome=root.outcome if root else None,
        outcome_score=root.outcome_score if root else None,
        harness_revision=root.harness_revision if root else None,
        env_revision=root.env_revision if root else None,
        prompt_version=root.prompt_version if root else None,
        cost_usd=trace_cost(spans),
        session_id=root.session_id if root else None,
        user_id=root.user_id if root else None,
        conversation_id=root.conversation_id if root else None,
        root_failed=root.failed if root else None,
    )


def trace_cost(spans: Sequence[Any], cost: Callable[[Any], float | None] | None = None) -> float | None:
    """The cost of a trace: the sum of its llm spans' costs, None if one is unpriced, 0.0 if it has none.

    ``spans`` are records with ``span_id``, ``parent_span_id`` and ``kind`` (the writers'
    :class:`SpanFacts`, the collector's buffered spans); ``cost`` gives one span's USD (default: its
    ``cost_usd``). A nested model call is left out, as in every other count
    (:func:`tailcut.signals.is_nested_call`).
    """
    kinds = {span.span_id: span.kind for span in spans}
    total = 0.0
    for span in spans:
        parent = span.parent_span_id
        parent_kind = kinds.get(parent) if parent and parent != span.span_id else None
        if span.kind != "llm" or is_nested_call(span.kind, parent_kind):
            continue
        value = span.cost_usd if cost is None else cost(span)
        if value is None:
            return None
        total += value
    return total


def traces_row(
    signals: TraceSignals,
    *,
    kept: bool,
    decision_reason: str,
    policies: Sequence[str] = (),
    baseline: bool = False,
    inclusion_probability: float = 1.0,
    head_probability: float = 1.0,
    decided_at_ns: int | None = None,
    anomaly_score: float | None = None,
    late_spans: int = 0,
) -> dict[str, Any]:
    """One row of the ``traces`` table (times as Unix nanoseconds), from signals and the decision.

    Parameters
    ----------
    signals
        From :func:`compute_signals`.
    kept
        Whether the trace's spans were kept.
    decision_reason
        One of ``root_end``, ``idle``, ``evicted``, ``max_spans``, ``shutdown``, ``embedded``.
    policies
        Every policy that matched.
    baseline
        Whether the trace is in the uniform (probabilistic) slice.
    inclusion_probability
        π, the probability the design kept it (in (0, 1]), head sampling included.
    head_probability
        The probability a head sampler upstream passed the trace on (1: none did).
    decided_at_ns
        When the decision was made (default: now).
    anomaly_score
        The collector's robust z-score, if it computed one.
    late_spans
        Spans that arrived after the decision.

    Raises
    ------
    ValueError
        If ``decision_reason`` or ``inclusion_probability`` is out of range.
    """
    if decision_reason not in DECISION_REASONS:
        raise ValueError(
            f"decision_reason must be one of {', '.join(DECISION_REASONS)}; got {decision_reason!r}"
        )
    if not 0 < inclusion_probability <= 1:
        raise ValueError(f"inclusion_probability must be in (0, 1]; got {inclusion_probability}")
    return {
        "trace_id": signals.trace_id,
        "service_name": signals.service_name,
        "root_name": signals.root_name,
        "agent_name": signals.agent_name,
        "start_time": signals.start_ns,
        "end_time": signals.end_ns,
        "duration_ms": signals.duration_ms,
        "span_count": signals.span_count,
        "error_count": signals.errors,
        "llm_calls": signals.llm_calls,
        "tool_calls": signals.tool_calls,
        "input_tokens": signals.input_tokens,
        "output_tokens": signals.output_tokens,
        "max_depth": signals.depth,
        "max_tool_repeat": signals.max_tool_repeat,
        "schema_violations": signals.schema_violations,
        "anomaly_score": anomaly_score,
        "outcome": signals.outcome,
        "outcome_score": signals.outcome_score,
        "harness_revision": signals.harness_revision,
        "kept": kept,
        "policies": list(policies),
        "baseline": baseline,
        "inclusion_probability": float(inclusion_probability),
        "head_probability": float(head_probability),
        "decision_reason": decision_reason,
        "decided_at": time.time_ns() if decided_at_ns is None else decided_at_ns,
        "env_revision": signals.env_revision,
        "prompt_version": signals.prompt_version,
        "has_root": signals.has_root,
        "orphan_count": signals.orphan_count,
        "late_spans": late_spans,
        "cost_usd": signals.cost_usd,
        "session_id": signals.session_id,
        "user_id": signals.user_id,
        "conversation_id": signals.conversation_id,
        "census_version": CENSUS_VERSION,
        "root_failed": signals.root_failed,
    }


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
) -> SpanFacts:
    """Facts from a span's decoded attributes (only :data:`FACT_KEYS` are read)."""
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
        outcome=_text(values.get(attr.OUTCOME)) if root else None,
        outcome_score=_float(values.get(attr.OUTCOME_SCORE)) if root else None,
        harness_revision=_text(values.get(attr.HARNESS_REVISION)) if root else None,
        env_revision=_text(values.get(attr.ENV_REVISION)) if root else None,
        prompt_version=_text(values.get(attr.PROMPT_VERSION)) if root else None,
        cost_usd=cost,
        **{column: _text(values.get(key)) for column, key in ID_KEYS.items()},
    )


def facts_from_otlp(span: Span, resource_service_name: str | None) -> SpanFacts:
    """The facts of a protobuf ``Span``, decoding only the attributes in :data:`FACT_KEYS`.

    Parameters
    ----------
    span
        An OTLP protobuf span.
    resource_service_name
        ``service.name`` of the resource it came with.
    """
    values = {kv.key: any_value(kv.value) for kv in span.attributes if kv.key in FACT_KEYS}
    return _facts(
        span.trace_id.hex(),
        span.span_id.hex(),
        span.parent_span_id.hex() or None,
        span.name,
        span.status.code == _STATUS_ERROR,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        values,
        resource_service_name,
    )


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
    return SpanFacts(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_span_id=row.get("parent_span_id"),
        name=row["name"],
        kind=row["kind"],
        failed=row.get("status_code") == "ERROR",
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
        outcome=attributes.get(attr.OUTCOME) if root else None,
        outcome_score=_float(attributes.get(attr.OUTCOME_SCORE)) if root else None,
        harness_revision=attributes.get(attr.HARNESS_REVISION) if root else None,
        env_revision=attributes.get(attr.ENV_REVISION) if root else None,
        prompt_version=attributes.get(attr.PROMPT_VERSION) if root else None,
        cost_usd=row.get("cost_usd"),
        **{column: row.get(column) for column in ID_KEYS},
    )


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
    *ID_KEYS,
)


def facts_from_table(table: pa.Table) -> list[SpanFacts]:
    """:func:`facts_from_row` for every row of a ``spans`` table."""
    columns = table.select(list(_FACT_COLUMNS))
    return [facts_from_row(row) for row in columns.to_pylist()]


def trace_rows(table: pa.Table, **decision: Any) -> list[dict[str, Any]]:
    """A ``traces`` row per trace in a ``spans`` table, every trace with the same decision fields.

    ``decision`` takes the keyword arguments of :func:`traces_row`.
    """
    by_trace: dict[str, list[SpanFacts]] = {}
    for facts in facts_from_table(table):
        by_trace.setdefault(facts.trace_id, []).append(facts)
    return [traces_row(compute_signals(facts), **decision) for facts in by_trace.values()]
