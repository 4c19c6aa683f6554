"""One signals record, one ``traces`` row: every path that writes a row gives the same one.

The paths are the collector (spans folded in as they arrive, :mod:`tailcut.collector._signals`),
``tailcut ingest`` (OTLP spans normalised, then :func:`tailcut.exporters._signals.trace_rows`), the
in-process Parquet exporter (SDK spans normalised, the same) and the writers' cheap read of protobuf
spans (:func:`tailcut.exporters.facts_from_otlp`); for a trace its own process recorded, the SDK's
root-span counts are the same signals too. Traces are random span trees with third-party conventions,
nested model calls, retries, orphans, failures, priced and unpriced models, an agent and a run.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from tailcut import signals
from tailcut._run_state import RunState
from tailcut.collector._config import parse_config
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._processor import Processor
from tailcut.collector._sink import KeptSpans, Sink
from tailcut.exporters import compute_signals, facts_from_otlp, normalize_otlp, normalize_sdk, schema
from tailcut.exporters._pieces import drop_carriers
from tailcut.exporters._signals import trace_rows
from tests.test_collector_helpers import attribute, write_config
from tests.test_collector_signals import TAILCUT_SHAPES, llamaindex_request, traces

#: Columns that say how the trace was decided, not what it is (they differ between the paths).
DECISION_COLUMNS = frozenset(
    {
        "kept",
        "policies",
        "baseline",
        "inclusion_probability",
        "head_probability",
        "decision_reason",
        "decided_at",
        "anomaly_score",
        "late_spans",
    }
)
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_CONFIG: list = []


def config():
    """A collector config keeping every trace, deciding nothing before shutdown (made once)."""
    if not _CONFIG:
        import tempfile
        from pathlib import Path

        path = write_config(
            Path(tempfile.mkdtemp(prefix="tailcut-signals-")),
            policies=[{"name": "all", "type": "always_sample"}],
            tailcut={"late_span_window": "0s"},
            decision_wait="1h",
            decision_wait_after_root_received="0s",
        )
        _CONFIG.append(parse_config(path.read_text()))
    return _CONFIG[0]


def request(spans: list[Span]) -> ExportTraceServiceRequest:
    """The spans under two services: the root's (``front``) and everyone else's (``worker``)."""
    out = ExportTraceServiceRequest()
    for service, members in (
        ("front", [s for s in spans if not s.parent_span_id]),
        ("worker", [s for s in spans if s.parent_span_id]),
    ):
        if members:
            resource_spans = out.resource_spans.add()
            resource_spans.resource.attributes.append(attribute("service.name", service))
            resource_spans.scope_spans.add().spans.extend(members)
    return out


def comparable(row: dict) -> dict:
    return {column: value for column, value in row.items() if column not in DECISION_COLUMNS}


def collector_row(body: bytes) -> dict:
    cfg = config()
    metrics = CollectorMetrics()
    sink = Sink(cfg, metrics)
    processor = Processor(cfg, metrics, sink)  # not started: no write-ahead log
    processor.ingest(body, "http")
    processor.shutdown(0.0)
    items = []
    while not sink._queue.empty():
        items.extend(item for _, item in sink._queue.get_nowait())
    (row,) = [item for item in items if not isinstance(item, KeptSpans)]
    return row


def ingest_row(body: bytes) -> dict:
    spans, _ = drop_carriers(normalize_otlp(body))
    (row,) = trace_rows(spans, kept=True, decision_reason="ingested")
    return row


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def readable(span: Span, service: str) -> ReadableSpan:
    def context(span_id: bytes) -> SpanContext:
        return SpanContext(
            int.from_bytes(span.trace_id, "big"),
            int.from_bytes(span_id, "big"),
            is_remote=False,
            trace_flags=TraceFlags(1),
        )

    return ReadableSpan(
        name=span.name,
        context=context(span.span_id),
        parent=context(span.parent_span_id) if span.parent_span_id else None,
        resource=Resource({"service.name": service}),
        attributes={kv.key: _value(kv.value) for kv in span.attributes},
        start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano,
        status=Status(_STATUS[span.status.code], span.status.message or None),
        events=[
            Event(e.name, {kv.key: _value(kv.value) for kv in e.attributes}, span.end_time_unix_nano)
            for e in span.events
        ],
    )


def embedded_row(spans: list[Span]) -> dict:
    batch = [readable(s, "worker" if s.parent_span_id else "front") for s in spans]
    table, _ = drop_carriers(normalize_sdk(batch))
    (row,) = trace_rows(table, kept=True, decision_reason="embedded")
    return row


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_the_collector_ingest_and_the_embedded_exporter_write_the_same_row(spans):
    body = request(spans).SerializeToString()
    mine = comparable(collector_row(body))
    assert comparable(ingest_row(body)) == mine
    assert comparable(embedded_row(spans)) == mine
    facts = [facts_from_otlp(s, "worker" if s.parent_span_id else "front") for s in spans]
    cheap = signals.traces_row(compute_signals(facts), kept=True, decision_reason="embedded")
    assert comparable(cheap) == mine


def test_one_model_request_is_one_llm_call_on_every_path():
    """LlamaIndex's preparation span beside the call it prepares (issue 27): ``llm_calls`` 1, not 2."""
    spans = llamaindex_request()
    body = request(spans).SerializeToString()
    rows = [collector_row(body), ingest_row(body), embedded_row(spans)]
    assert [(r["llm_calls"], r["input_tokens"], r["error_count"]) for r in rows] == [(1, 30, 1)] * 3


def _attributes(span: Span) -> dict[str, object]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


def as_recorded_by_the_sdk(span: Span) -> Span:
    """``span`` as tailcut's recorder would write it: it records an exception only with status ERROR."""
    copy = Span()
    copy.CopyFrom(span)
    if copy.status.code != 2:
        del copy.events[:]
    return copy


def sdk_signals(spans: list[Span]) -> signals.TraceSignals:
    """Replay a tailcut-only trace through the SDK's run state, parents first, as a process would."""
    by_id = {s.span_id: s for s in spans}
    depth: dict[bytes, int] = {}

    def depth_of(span: Span) -> int:
        if span.span_id not in depth:
            parent = by_id.get(span.parent_span_id)
            depth[span.span_id] = 0 if parent is None else depth_of(parent) + 1
        return depth[span.span_id]

    state = RunState()
    for span in sorted(spans, key=depth_of):
        if depth_of(span):
            state.span_started(depth_of(span))
    for span in spans:
        a = _attributes(span)
        state.span_ended(
            str(a["tailcut.kind"]),
            failed=span.status.code == 2,
            attempt=int(a.get("tailcut.attempt", 1)),  # type: ignore[arg-type]
            boundary=a.get("tailcut.boundary"),  # type: ignore[arg-type]
            request_sha256=a.get("tailcut.request.sha256"),  # type: ignore[arg-type]
            tokens=int(a.get("gen_ai.usage.input_tokens", 0)) + int(a.get("gen_ai.usage.output_tokens", 0)),  # type: ignore[arg-type]
            schema_violations=int(a.get("tailcut.schema_violations", 0)),  # type: ignore[arg-type]
        )
    return state.signals.result()


@settings(max_examples=150, deadline=None)
@given(traces(TAILCUT_SHAPES, whole=True))
def test_the_sdk_s_root_counts_are_the_row_s_for_a_trace_of_its_own_process(spans):
    # The SDK sees a trace of its own process: a root, tailcut spans only, no missing parent, and no
    # model call inside another (that takes a second instrumentation).
    kinds = {s.span_id: _attributes(s).get("tailcut.kind") for s in spans}
    assume(not any(kinds[s.span_id] == "llm" == kinds.get(s.parent_span_id) for s in spans))
    spans = [as_recorded_by_the_sdk(s) for s in spans]
    row = collector_row(request(spans).SerializeToString())
    assert sdk_signals(spans).as_attributes() == {
        "tailcut.trace.llm_calls": row["llm_calls"],
        "tailcut.trace.tool_calls": row["tool_calls"],
        "tailcut.trace.errors": row["error_count"],
        "tailcut.trace.total_tokens": row["input_tokens"] + row["output_tokens"],
        "tailcut.trace.max_tool_repeat": row["max_tool_repeat"],
        "tailcut.trace.schema_violations": row["schema_violations"],
        "tailcut.trace.depth": row["max_depth"],
        "tailcut.trace.span_count": row["span_count"],
    }


def test_the_row_has_the_traces_columns_in_the_schema_s_order():
    # In order: write-ahead logs of older versions recorded rows as lists in this order.
    assert tuple(schema.nanosecond_fields("traces").names) == signals.TRACES_COLUMNS


def test_an_older_row_takes_the_defaults_of_the_columns_it_lacks():
    row = signals.traces_row(signals.TraceSignals(trace_id="ab"), kept=True, decision_reason="idle")
    old = {column: value for column, value in row.items() if column not in ("late_spans", "cost_usd")}
    completed = signals.complete_row({**old, "gone": 1})
    assert completed == {**row, "late_spans": 0, "cost_usd": None}
    assert list(completed) == list(signals.TRACES_COLUMNS)


def test_a_dropped_trace_may_have_had_no_chance_but_a_kept_one_had():
    s = signals.TraceSignals(trace_id="ab")
    row = signals.traces_row(s, kept=False, decision_reason="idle", inclusion_probability=0.0)
    assert (row["kept"], row["inclusion_probability"]) == (False, 0.0)
    with pytest.raises(ValueError, match=r"\(0, 1\] for a kept trace"):
        signals.traces_row(s, kept=True, decision_reason="idle", inclusion_probability=0.0)


def test_the_run_is_read_from_the_keys_it_names_in_their_order():
    assert tuple(signals.RUN_KEYS) == signals.RunFacts.__match_args__
    root = {"tailcut.outcome": "fail", "tailcut.outcome.score": "0.5", "user.id": 7, "session.id": "s"}
    assert signals.run_facts(root) == signals.RunFacts(outcome="fail", outcome_score=0.5, session_id="s")


def test_a_logged_row_reads_back_whole_and_an_older_log_s_shorter_row_takes_defaults():
    import orjson

    from tailcut.collector._journal import decided_record, read_decided

    row = signals.traces_row(
        signals.TraceSignals(trace_id="ab", span_count=3), kept=True, decision_reason="idle"
    )
    _, payload = decided_record(bytes(16), 3, row)
    assert read_decided(payload) == (bytes(16), 3, row)
    older = bytes(16) + orjson.dumps([3, list(row.values())[:-6]])  # before the ids and reports existed
    assert read_decided(older)[2] == {
        **row,
        "cost_usd": None,
        "session_id": None,
        "user_id": None,
        "conversation_id": None,
        "root_failed": None,
        "error_spans": None,
        "refused_calls": None,
    }
