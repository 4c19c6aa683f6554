"""Decision timing and the edges of a trace's life: long traces, late spans, eviction, limits, shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tailcut.collector import load_config
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._otlp import OtlpError
from tailcut.collector._processor import Processor
from tailcut.collector._sink import Sink
from tests.polling import wait_until
from tests.test_collector_helpers import (
    KEEP_ERRORS,
    export_request,
    post,
    python_env,
    rows,
    simple_trace,
    span,
    start_collector,
    trace_ids,
    write_config,
)

#: ``tailcut collect`` in a fresh interpreter.
COLLECT = [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect"]


def traces_table(tmp_path, columns: str = "*") -> list[dict]:
    return rows(tmp_path / "data", "traces", f"SELECT {columns} FROM t ORDER BY decided_at")


def test_long_trace_is_decided_idle_and_its_late_root_follows_the_decision(tmp_path):
    collector = start_collector(
        tmp_path, policies=KEEP_ERRORS, decision_wait="300ms", tailcut={"late_span_window": "5s"}
    )
    try:
        (trace_id,) = trace_ids(1)
        *children, root = simple_trace(trace_id)
        children[0] = span(
            trace_id, children[0].span_id, root.span_id, name="llm", error=True, tailcut__kind="llm"
        )
        assert post(collector.ports.http, export_request(children))[0] == 200
        assert collector.wait_idle(5)  # decided after decision_wait, without its root
        assert post(collector.ports.http, export_request([root]))[0] == 200  # the run ends later
        assert collector.wait_idle(5)
    finally:
        collector.stop()
    (row,) = traces_table(tmp_path, "decision_reason, has_root, kept, late_spans, span_count")
    assert row == {
        "decision_reason": "idle",
        "has_root": False,
        "kept": True,
        "late_spans": 1,
        "span_count": 2,
    }
    spans = rows(tmp_path / "data", "spans", "SELECT name, is_orphan, span_index FROM t ORDER BY span_index")
    assert [(s["name"], s["span_index"]) for s in spans] == [("llm", 0), ("llm", 1), ("run", 2)]


def test_root_end_waits_for_the_grace_then_decides(tmp_path):
    collector = start_collector(
        tmp_path, policies=KEEP_ERRORS, decision_wait="1m", decision_wait_after_root_received="300ms"
    )
    try:
        (trace_id,) = trace_ids(1, seed=3)
        *children, root = simple_trace(trace_id)
        post(collector.ports.http, export_request([root]))  # answered once the root is received
        post(collector.ports.http, export_request(children))  # a straggler inside the grace joins the trace
        assert collector.wait_idle(5)
        assert collector.processor.counts["traces"] == 1
    finally:
        collector.stop()
    (row,) = traces_table(tmp_path, "decision_reason, span_count, late_spans")
    assert row == {"decision_reason": "root_end", "span_count": 3, "late_spans": 0}


@pytest.mark.parametrize("cache", [True, False])
def test_late_spans_after_the_window_follow_the_decision_cache(tmp_path, cache):
    size = 100 if cache else 0
    collector = start_collector(
        tmp_path,
        policies=KEEP_ERRORS,
        decision_cache={"sampled_cache_size": size, "non_sampled_cache_size": size},
        tailcut={"late_span_window": "50ms"},
    )
    kept_id, dropped_id = trace_ids(2, seed=5)
    try:
        post(
            collector.ports.http, export_request(simple_trace(kept_id, error=True) + simple_trace(dropped_id))
        )
        assert collector.wait_idle(5)
        # both rows are written once the late-span window closes; only the caches remember the decisions then
        wait_until(lambda: not collector.processor.open_rows, "the late-span windows to close")
        late = [
            span(kept_id, b"\x07" * 8, kept_id[:8], name="late"),
            span(dropped_id, b"\x07" * 8, dropped_id[:8], name="late"),
        ]
        post(collector.ports.http, export_request(late))
        if cache:
            assert collector.wait_idle(5)
        late_counts = dict(collector.metrics.late_spans)
    finally:
        collector.stop()
    traces = traces_table(tmp_path, "trace_id, kept, decision_reason")
    late_rows = rows(
        tmp_path / "data", "spans", "SELECT trace_id, is_orphan, span_index FROM t WHERE name = 'late'"
    )
    if cache:
        assert len(traces) == 2  # one row per trace, still
        assert late_counts == {(True, "cache"): 1, (False, "cache"): 1}
        assert late_rows == [{"trace_id": kept_id.hex(), "is_orphan": True, "span_index": 3}]
    else:
        # Without a cache a span after the window starts the trace anew, as in the Collector: a second row.
        assert (
            sorted((t["trace_id"], t["decision_reason"]) for t in traces).count(
                (dropped_id.hex(), "shutdown")
            )
            == 1
        )
        assert len(traces) == 4
        assert late_counts == {}


def test_full_buffer_evicts_the_oldest_traces_early(tmp_path):
    collector = start_collector(tmp_path, policies=KEEP_ERRORS, num_traces=3, decision_wait="1m")
    ids = trace_ids(5, seed=8)
    try:
        for trace_id in ids:  # no roots: nothing is due, so only the bound decides
            post(collector.ports.http, export_request(simple_trace(trace_id)[:1]))
        evicted = collector.metrics.evicted
    finally:
        collector.stop()
    assert evicted == 2
    reasons = {
        row["trace_id"]: row["decision_reason"] for row in traces_table(tmp_path, "trace_id, decision_reason")
    }
    assert reasons == {
        ids[0].hex(): "evicted",
        ids[1].hex(): "evicted",
        ids[2].hex(): "shutdown",
        ids[3].hex(): "shutdown",
        ids[4].hex(): "shutdown",
    }


def test_byte_budget_also_evicts(tmp_path):
    collector = start_collector(
        tmp_path, policies=KEEP_ERRORS, decision_wait="1m", tailcut={"max_buffer_mib": 0.001}
    )
    try:
        for trace_id in trace_ids(4, seed=2):
            post(
                collector.ports.http,
                export_request([span(trace_id, b"\x01" * 8, b"\x02" * 8, big="x" * 600)]),
            )
        assert collector.processor.buffer.nbytes <= 1048
    finally:
        collector.stop()
    assert [row["decision_reason"] for row in traces_table(tmp_path, "decision_reason")].count("evicted") >= 2


def test_max_spans_decides_early_and_the_rest_are_late(tmp_path):
    collector = start_collector(
        tmp_path, policies=KEEP_ERRORS, tailcut={"max_spans_per_trace": 3, "late_span_window": "5s"}
    )
    (trace_id,) = trace_ids(1, seed=6)
    try:
        spans = [
            span(trace_id, bytes([i + 1]) * 8, trace_id[:8], name=f"s{i}", error=i == 0) for i in range(5)
        ]
        post(collector.ports.http, export_request(spans))
        assert collector.wait_idle(5)
    finally:
        collector.stop()
    (row,) = traces_table(tmp_path, "decision_reason, span_count, late_spans, kept")
    assert row == {"decision_reason": "max_spans", "span_count": 3, "late_spans": 2, "kept": True}
    assert rows(tmp_path / "data", "spans", "SELECT count(*) AS n FROM t") == [{"n": 5}]


def provider(exporter) -> TracerProvider:
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "retrying-agent"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_overload_is_answered_with_a_delay_and_the_exporter_retry_succeeds(tmp_path, transport):
    collector = start_collector(
        tmp_path,
        policies=KEEP_ERRORS,
        num_traces=1,
        block_on_overflow=True,
        decision_wait="400ms",
        decision_wait_after_root_received="0s",
    )
    try:
        if transport == "http":
            exporter = HttpExporter(endpoint=f"http://127.0.0.1:{collector.ports.http}/v1/traces", timeout=20)
        else:
            exporter = GrpcExporter(endpoint=f"127.0.0.1:{collector.ports.grpc}", insecure=True, timeout=20)
        tracer = provider(exporter).get_tracer("test")
        with tracer.start_as_current_span("first") as first:  # one trace fills the buffer
            first.set_status(Status(StatusCode.ERROR))
        started = time.monotonic()
        with tracer.start_as_current_span("second"):  # refused with 429/RESOURCE_EXHAUSTED, retried
            pass
        waited = time.monotonic() - started
        assert collector.wait_idle(10)
        overloaded = collector.metrics.requests[transport, "overloaded"]
    finally:
        collector.stop()
    assert overloaded >= 1
    assert waited >= 0.9  # the exporter honoured the one-second retry delay
    names = rows(tmp_path / "data", "traces", "SELECT root_name FROM t ORDER BY root_name")
    assert [r["root_name"] for r in names] == ["first", "second"]


def test_sigterm_decides_every_pending_trace_and_exits_0(tmp_path):
    config = write_config(
        tmp_path, policies=KEEP_ERRORS, decision_wait="10m", decision_wait_after_root_received="0s"
    )
    process = subprocess.Popen(
        [*COLLECT, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        ready = json.loads(process.stdout.readline())
        port = int(ready["http"].rsplit(":", 1)[1])
        ids = trace_ids(20, seed=12)
        body = export_request([s for i, t in enumerate(ids) for s in simple_trace(t, error=i % 4 == 0)])
        assert post(port, body)[0] == 200
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    stopped = json.loads(out.splitlines()[-1])
    assert stopped == {
        "event": "stopped",
        "traces": 20,
        "kept": 5,
        "spans_kept": 15,
        "spans_dropped": 45,
        "spans_written": 15,
    }
    traces = traces_table(tmp_path, "trace_id, kept, decision_reason")
    assert sorted(t["trace_id"] for t in traces) == sorted(t.hex() for t in ids)
    assert {t["decision_reason"] for t in traces} == {"shutdown"}
    assert rows(tmp_path / "data", "spans", "SELECT count(*) AS n FROM t") == [{"n": 15}]


def test_start_fails_in_one_line_when_the_port_is_taken(tmp_path):
    (tmp_path / "first").mkdir()
    first = start_collector(tmp_path / "first")
    try:
        config = write_config(tmp_path, http={"endpoint": f"127.0.0.1:{first.ports.http}"})
        result = subprocess.run(
            [*COLLECT, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            env=python_env(),
        )
    finally:
        first.stop()
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{first.ports.http} for OTLP/HTTP: Address already in use;"
        " choose another address with --http HOST:PORT"
    ]


def test_unusable_data_dir_fails_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [*COLLECT, "--data", str(blocker / "data"), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=python_env(),
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: cannot use data dir {blocker / 'data'}: Not a directory"
    ]


def test_data_arriving_after_shutdown_is_refused_not_lost(tmp_path):
    config = load_config(write_config(tmp_path, policies=KEEP_ERRORS))
    metrics = CollectorMetrics()
    sink = Sink(config, metrics)
    sink.start()
    processor = Processor(config, metrics, sink)
    processor.ingest(export_request(simple_trace(trace_ids(1)[0])), "http")
    processor.shutdown(time.monotonic())
    with pytest.raises(OtlpError) as refused:
        processor.ingest(export_request(simple_trace(trace_ids(2)[1])), "http")
    sink.close()
    assert (refused.value.http_status, refused.value.message) == (
        503,
        "the collector is shutting down; retry elsewhere or later",
    )
    assert len(rows(tmp_path / "data", "traces", "SELECT trace_id FROM t")) == 1
