"""ParquetSpanExporter end to end with the real SDK, and the trace signals it writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import tailcut
from tailcut import _config
from tailcut.exporters import ParquetSpanExporter, PayloadStore, resolve_payload
from tailcut.payloads import PayloadCorrupt, PayloadMissing


def query(data: Path, sql: str, table: str = "spans") -> list[tuple]:
    source = f"read_parquet('{data}/{table}/**/*.parquet', union_by_name=true, hive_partitioning=true)"
    return duckdb.sql(sql.replace("$t", source)).fetchall()


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[tuple[ParquetSpanExporter, TracerProvider, Path]]:
    """The SDK recording through a real provider into a ParquetSpanExporter (as tailcut.testing does)."""
    data = tmp_path / "data"
    store = PayloadStore(tmp_path / "sdk-payloads")
    exporter = ParquetSpanExporter(data, root_grace=0.0, payload_stores=[store])
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = _config.install(
        _config.Config(
            enabled=True,
            tracer=provider.get_tracer("tailcut"),
            payload_store=store,
            inline_limit=200,
            self_contained=True,  # over the limit: the payload store (whose copying this file tests)
        )
    )
    try:
        yield exporter, provider, data
    finally:
        _config.install(previous)
        provider.shutdown()


def run_agent() -> None:
    @tailcut.tool(name="search_kb")
    def search_kb(query: str) -> list[str]:
        return [f"doc about {query}"] * 3

    calls = {"n": 0}

    @tailcut.tool(name="flaky")
    def flaky(order: int) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TimeoutError("slow backend")
        return "ok"

    @tailcut.tool(name="big")
    def big() -> str:
        return "x" * 1000  # over the 200-byte inline limit: offloaded to the payload store

    with tailcut.run("support-agent", input={"ticket": 42}, harness_revision="rev-1") as run:
        search_kb("refunds")
        search_kb("refunds")  # the same call twice: a repeat
        for attempt in tailcut.retry(2, on=TimeoutError):
            with attempt:
                flaky(7)
        big()
        run.set_outcome("fail", score=0.3)


def test_spans_and_traces_rows_match_what_the_sdk_computed(recording: tuple) -> None:
    exporter, _, data = recording
    run_agent()
    assert exporter.force_flush()
    [(count,)] = query(data, "SELECT count(*) FROM $t")
    assert count == 6  # root + 2 search_kb + 2 flaky attempts + big
    trace = query(
        data,
        "SELECT trace_id, span_count, tool_calls, error_count, max_tool_repeat, max_depth, llm_calls, kept,"
        " policies, baseline, inclusion_probability, decision_reason, outcome, outcome_score,"
        " harness_revision, root_name,"
        " service_name, has_root, orphan_count FROM $t",
        "traces",
    )
    assert trace[0][1:] == (
        6,
        4,
        1,
        2,
        1,
        0,
        True,
        [],
        False,
        1.0,
        "embedded",
        "fail",
        0.3,
        "rev-1",
        "support-agent",
        "support-agent",
        True,
        0,
    )
    # the SDK's own signals, recorded on the root span, agree with the ones computed from all the spans
    [(attributes,)] = query(data, "SELECT attributes FROM $t WHERE kind = 'root'")
    sdk = {
        k.removeprefix("tailcut.trace."): int(v)
        for k, v in attributes.items()
        if k.startswith("tailcut.trace.")
    }
    assert sdk == {
        "llm_calls": 0,
        "tool_calls": 4,
        "errors": 1,
        "total_tokens": 0,
        "max_tool_repeat": 2,
        "schema_violations": 0,
        "depth": 1,
        "span_count": 6,
    }
    rows = query(
        data, "SELECT name, kind, attempt, status_code, span_index, depth FROM $t ORDER BY span_index"
    )
    assert [r[1] for r in rows] == ["root", "tool", "tool", "tool", "tool", "tool"]
    assert [(r[2], r[3]) for r in rows if r[0].endswith("flaky")] == [(1, "ERROR"), (2, "UNSET")]


def test_offloaded_payloads_are_copied_into_the_data_dir_and_resolve(recording: tuple) -> None:
    exporter, _, data = recording
    run_agent()
    exporter.shutdown()
    [(stub, sha)] = query(data, "SELECT response::VARCHAR, response_sha256 FROM $t WHERE name LIKE '%big'")
    assert "$tailcut.payload" in stub
    store = PayloadStore(data / "payloads")
    full = resolve_payload(stub, [store])
    assert json.loads(full) == "x" * 1000
    assert resolve_payload('{"a":1}', [store]) == '{"a":1}'
    with pytest.raises(PayloadMissing):
        resolve_payload(stub, [PayloadStore(data / "empty")])
    path = store.path_for("sha256:" + sha)
    path.write_bytes(b'"tampered"')
    with pytest.raises(PayloadCorrupt):
        resolve_payload(stub, [store])


def test_a_trace_waits_for_its_root_then_late_spans_still_land(recording: tuple) -> None:
    exporter, provider, data = recording
    tracer = provider.get_tracer("other-lib")
    with tracer.start_as_current_span("root") as root:
        with tracer.start_as_current_span("child"):
            pass
        assert exporter.force_flush()
        assert not list(data.glob("spans/dt=*/*.parquet"))  # no root yet: the trace waits for it
    assert exporter.force_flush()
    assert query(data, "SELECT name, is_orphan FROM $t ORDER BY span_index") == [
        ("root", False),
        ("child", False),
    ]
    late = tracer.start_span("late", context=trace.set_span_in_context(root))
    late.end()
    exporter.shutdown()
    assert ("late", True) in query(data, "SELECT name, is_orphan FROM $t")  # its parent was written before
    assert query(data, "SELECT count(*) FROM $t", "traces") == [(1,)]


def test_works_through_tailcut_init(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import tailcut
        from tailcut.exporters import ParquetSpanExporter
        tailcut.init(service_name="init-agent", exporter=ParquetSpanExporter({str(tmp_path)!r}),
                     payload_dir={str(tmp_path / "p")!r}, harness_revision="h")

        @tailcut.tool
        def lookup(x: int) -> int:
            return x * 2

        with tailcut.run("init-agent"):
            lookup(1)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # atexit shutdown flushes
    assert query(tmp_path, "SELECT service_name, count(*) FROM $t GROUP BY ALL") == [("init-agent", 2)]
    assert query(tmp_path, "SELECT tool_calls, decision_reason FROM $t", "traces") == [(1, "embedded")]
