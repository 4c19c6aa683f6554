"""End to end through real sockets: four agents (separate TracerProviders, real OTLP/HTTP and OTLP/gRPC
exporters) send 2,000 traces with planted errors, tool loops and cost blow-ups; the data dir must hold a
correct row for every trace and every span of every kept trace, and nothing else."""

from __future__ import annotations

import math
import random
import threading
from collections import Counter

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tailcut.collector._hash import TraceIdSampler
from tests.test_collector_helpers import rows, start_collector

AGENTS = 4
TRACES_PER_AGENT = 500
POLICY_ORDER = ["errors", "schema-violations", "tool-loops", "anomalies", "slow", "bad-outcome", "baseline"]


def plan(agent: int, index: int) -> dict[str, bool]:
    """What is planted in run ``index`` of ``agent`` (anomalies only once the baseline window has filled)."""
    number = agent * TRACES_PER_AGENT + index
    return {
        "error": number % 20 == 3,
        "loop": number % 25 == 7,
        "anomaly": index >= 300 and number % 50 == 11,
    }


def run_agent(
    agent: int, indices: range, transport: str, port: int, sent: Counter, lock: threading.Lock
) -> None:
    exporter = (
        HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        if transport == "http"
        else GrpcExporter(endpoint=f"127.0.0.1:{port}", insecure=True)
    )
    resource = Resource.create({"service.name": "support-agent", "service.instance.id": f"agent-{agent}"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter, max_queue_size=10_000, schedule_delay_millis=50, max_export_batch_size=256
        )
    )
    tracer = provider.get_tracer("tailcut-e2e")
    rng = random.Random(agent * 1000 + indices.start)
    planted: dict[str, dict[str, bool]] = {}
    spans_sent = 0
    for index in indices:
        marks = plan(agent, index)
        t = 1_700_000_000_000_000_000 + (agent * TRACES_PER_AGENT + index) * 10_000_000_000
        duration = rng.randint(800, 1200) * 1_000_000
        root = tracer.start_span(
            "support-run",
            start_time=t,
            attributes={"tailcut.kind": "root", "tailcut.outcome": "pass", "tailcut.harness.revision": "h1"},
        )
        children = rng.randint(4, 7)
        step = duration // (children + 1)
        tool_calls = ["loop"] * 3 if marks["loop"] else []
        tokens = 50_000 if marks["anomaly"] else rng.randint(1000, 1400) // 2
        from opentelemetry import trace as trace_api

        context = trace_api.set_span_in_context(root)
        for child in range(children):
            start = t + child * step
            if child < len(tool_calls) or child % 2:
                name, attributes = (
                    "execute_tool search",
                    {
                        "tailcut.kind": "tool",
                        "tailcut.boundary": "tool:search",
                        "tailcut.request.sha256": "same"
                        if child < len(tool_calls)
                        else f"args-{index}-{child}",
                    },
                )
            else:
                name, attributes = (
                    "chat",
                    {
                        "tailcut.kind": "llm",
                        "gen_ai.usage.input_tokens": tokens,
                        "gen_ai.usage.output_tokens": tokens,
                    },
                )
                tokens = 0
            child_span = tracer.start_span(name, context=context, start_time=start, attributes=attributes)
            child_span.end(end_time=start + step)
        if marks["error"]:
            root.set_status(Status(StatusCode.ERROR))
        root.end(end_time=t + duration)
        planted[format(root.get_span_context().trace_id, "032x")] = marks
        spans_sent += children + 1
    provider.force_flush()
    provider.shutdown()
    with lock:
        sent["spans"] += spans_sent
        sent.update({f"trace:{trace_id}": 1 for trace_id in planted})
        PLANTED.update(planted)


PLANTED: dict[str, dict[str, bool]] = {}


@pytest.mark.slow
def test_two_thousand_traces_over_http_and_grpc(tmp_path):
    collector = start_collector(
        tmp_path,
        decision_wait="30s",
        decision_wait_after_root_received="300ms",
        tailcut={"anomaly_min_window": 30, "late_span_window": "100ms"},
    )
    sent: Counter = Counter()
    lock = threading.Lock()
    PLANTED.clear()
    try:
        # Two phases, so the baseline window has filled (from every agent) before any cost blow-up arrives.
        for indices in (range(0, 300), range(300, TRACES_PER_AGENT)):
            agents = [
                threading.Thread(
                    target=run_agent,
                    args=(
                        agent,
                        indices,
                        "http" if agent % 2 == 0 else "grpc",
                        collector.ports.http if agent % 2 == 0 else collector.ports.grpc,
                        sent,
                        lock,
                    ),
                )
                for agent in range(AGENTS)
            ]
            for agent in agents:
                agent.start()
            for agent in agents:
                agent.join()
            assert collector.wait_idle(60)
        accepted = sum(collector.metrics.accepted_spans.values())
    finally:
        collector.stop()

    data = tmp_path / "data"
    traces = {row["trace_id"]: row for row in rows(data, "traces")}
    assert len(PLANTED) == AGENTS * TRACES_PER_AGENT
    assert (
        len(traces) == len(PLANTED) == len(rows(data, "traces", "SELECT trace_id FROM t"))
    )  # exactly one row each
    assert set(traces) == set(PLANTED)

    baseline = TraceIdSampler(5)
    for trace_id, marks in PLANTED.items():
        row = traces[trace_id]
        member = baseline.sampled(bytes.fromhex(trace_id))
        expected = [
            name
            for name, hit in (
                ("errors", marks["error"]),
                ("tool-loops", marks["loop"]),
                ("anomalies", marks["anomaly"]),
                ("baseline", member),
            )
            if hit
        ]
        deterministic = marks["error"] or marks["loop"] or marks["anomaly"]
        assert row["policies"] == sorted(expected, key=POLICY_ORDER.index), trace_id
        assert row["kept"] == bool(expected)
        assert row["baseline"] == member
        assert row["inclusion_probability"] == (1.0 if deterministic else 0.05)
        assert row["decision_reason"] == "root_end"
        assert row["has_root"] and row["root_name"] == "support-run"
        assert row["max_tool_repeat"] == (3 if marks["loop"] else 1)

    # Every span of every kept trace is stored (failures included), none of a dropped one.
    stored = Counter(r["trace_id"] for r in rows(data, "spans", "SELECT trace_id FROM t"))
    for trace_id, row in traces.items():
        assert stored.get(trace_id, 0) == (row["span_count"] if row["kept"] else 0)
    failing = [t for t, marks in PLANTED.items() if marks["error"]]
    assert failing and all(stored[t] > 0 for t in failing)

    # Spans in = spans written + spans of dropped traces, exactly.
    dropped = sum(row["span_count"] for row in traces.values() if not row["kept"])
    assert sent["spans"] == accepted == sum(stored.values()) + dropped

    # The baseline slice is the hash's, and about 5% of all traces.
    members = sum(row["baseline"] for row in traces.values())
    n = len(traces)
    assert abs(members / n - 0.05) <= 4 * math.sqrt(0.05 * 0.95 / n)

    # Kept spans carry their sampling attributes; roots carry the trace signals.
    (root,) = rows(
        data,
        "spans",
        "SELECT attributes FROM t WHERE kind = 'root' AND trace_id = "
        f"'{next(t for t, m in PLANTED.items() if m['loop'])}'",
    )
    attributes = dict(root["attributes"])
    assert attributes["tailcut.trace.max_tool_repeat"] == "3"
    assert "tool-loops" in attributes["tailcut.sampling.policies"]
    assert attributes["tailcut.sampling.probability"] == "1.0"
