"""tailcut.init() in a real agent process: spans travel through the real OTLP/HTTP exporter intact."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tailcut import attributes as attr
from tests.otlp_sink import OtlpSink


def run_agent(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd=None,
    timeout: float = 120,
    launcher: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """Run an agent script in a fresh interpreter (init() configures a process once).

    The agent sees no ``OTEL_*`` or ``TAILCUT_*`` variable of this process, only those of ``env``;
    ``launcher`` runs it under e.g. ``opentelemetry-instrument``.
    """
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TAILCUT_"))}
    full_env.update(env or {})
    return subprocess.run(
        [*launcher, sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )


#: An agent that records one run of three tool calls, then shuts down and prints ``tailcut.stats()`` as
#: JSON (with ``--leave-to-atexit``: leaves that to the exit hook); ``{init}`` is what ``init`` gets.
STATS_AGENT = """
    import json, sys
    import tailcut
    tailcut.init({init})

    @tailcut.tool
    def work(i):
        return i

    with tailcut.run("agent"):
        for i in range(3):
            work(i)
    if "--leave-to-atexit" not in sys.argv:
        tailcut.shutdown()
        print(json.dumps(tailcut.stats()))
    print("agent finished", flush=True)
"""


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attrs(span):
    return {kv.key: _value(kv.value) for kv in span.attributes}


def test_spans_arrive_intact_over_otlp_http(tmp_path):
    with OtlpSink() as sink:
        done = run_agent(
            f"""
            import tailcut
            tailcut.init(
                service_name="support-agent", endpoint="{sink.endpoint}", payload_dir={str(tmp_path)!r}
            )

            @tailcut.tool(name="search_kb")
            def search_kb(query: str) -> list:
                return [{{"id": 1, "title": "Refunds", "body": "é" * 10}}]

            run_args = dict(input={{"ticket": 42}}, prompt_version="v7", harness_revision="h1")
            with tailcut.run("support-agent", **run_args) as run:
                search_kb("refund policy")
                run.set_outcome("pass", score=0.9)
            tailcut.shutdown()
            print(tailcut.stats()["spans_exported"])
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "2"
    assert len(sink.spans) == 2
    by_kind = {_attrs(span)[attr.KIND]: (resource, span) for resource, span in sink.spans}
    resource, tool = by_kind["tool"]
    _, root = by_kind["root"]
    assert resource["service.name"] == "support-agent"
    tool_attrs = _attrs(tool)
    assert tool_attrs[attr.REQUEST] == '{"query":"refund policy"}'
    assert json.loads(tool_attrs[attr.RESPONSE]) == [{"id": 1, "title": "Refunds", "body": "é" * 10}]
    assert tool.parent_span_id == root.span_id and tool.trace_id == root.trace_id
    root_attrs = _attrs(root)
    assert root_attrs[attr.HARNESS_REVISION] == "h1"
    assert root_attrs[attr.TRACE_TOOL_CALLS] == 1


def test_standard_otel_environment_is_read():
    with OtlpSink() as sink:
        done = run_agent(
            """
            import tailcut
            tailcut.init()
            with tailcut.run("env-agent"):
                pass
            tailcut.shutdown()
            """,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, "OTEL_SERVICE_NAME": "from-env"},
        )
        assert done.returncode == 0, done.stderr
    assert [resource["service.name"] for resource, _ in sink.spans] == ["from-env"]


def test_existing_tracer_provider_is_kept():
    with OtlpSink() as sink:
        done = run_agent(
            f"""
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            provider = TracerProvider(resource=Resource.create({{"service.name": "app-owned"}}))
            trace.set_tracer_provider(provider)
            import tailcut
            returned = tailcut.init(endpoint="{sink.endpoint}")
            assert returned is provider and trace.get_tracer_provider() is provider
            with trace.get_tracer("app").start_as_current_span("app-span"):
                with tailcut.run("agent"):
                    pass
            tailcut.shutdown()
            """
        )
        assert done.returncode == 0, done.stderr
    names = sorted(span.name for _, span in sink.spans)
    assert names == ["agent", "app-span"]
    assert {resource["service.name"] for resource, _ in sink.spans} == {"app-owned"}


def test_stats_count_the_exports_of_the_applications_own_pipeline():
    """init() without an endpoint adds no exporter to an application's provider, yet stats are true."""
    with OtlpSink() as sink:
        done = run_agent(
            f"""
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter("{sink.endpoint}/v1/traces")))
            trace.set_tracer_provider(provider)
            import tailcut
            tailcut.init()
            with tailcut.run("agent"):
                pass
            provider.force_flush()
            print(tailcut.stats()["spans_exported"])
            """
        )
        assert done.returncode == 0, done.stderr
    assert len(sink.spans) == 1
    assert done.stdout.strip() == "1"


def test_second_init_warns_and_changes_nothing():
    done = run_agent(
        """
        import tailcut
        from tailcut.testing import capture_spans
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        first = tailcut.init(exporter=InMemorySpanExporter())
        second = tailcut.init(service_name="other")
        assert first is second
        """
    )
    assert done.returncode == 0, done.stderr
    assert "already called" in done.stderr


def test_burst_loses_nothing_or_says_so():
    """20k spans in a burst: every one arrives, or the loss is counted and reported."""
    with OtlpSink() as sink:
        done = run_agent(
            f"""
            import tailcut
            tailcut.init(endpoint="{sink.endpoint}")

            @tailcut.tool
            def ping(i):
                return i

            with tailcut.run("burst"):
                for i in range(20000):
                    ping(i)
            tailcut.shutdown()
            stats = tailcut.stats()
            print(stats["spans_exported"], stats["spans_dropped"])
            """
        )
        assert done.returncode == 0, done.stderr
        exported, dropped = map(int, done.stdout.split())
    assert exported + dropped == 20001
    assert len(sink.spans) == exported
    assert dropped == 0  # the default queue is sized for a burst like this


def test_small_queue_reports_its_losses():
    with OtlpSink() as sink:
        done = run_agent(
            f"""
            import tailcut
            tailcut.init(endpoint="{sink.endpoint}", max_queue_size=50)

            @tailcut.tool
            def ping(i):
                return i

            with tailcut.run("burst"):
                for i in range(5000):
                    ping(i)
            tailcut.shutdown()
            stats = tailcut.stats()
            print(stats["spans_exported"], stats["spans_dropped"])
            """
        )
        assert done.returncode == 0, done.stderr
        exported, dropped = map(int, done.stdout.split())
    assert dropped > 0
    assert exported + dropped == 5001
    assert len(sink.spans) == exported
    assert "span(s) lost" in done.stderr


def test_collector_down_is_counted_not_raised():
    done = run_agent(
        """
        import tailcut
        tailcut.init(endpoint="http://127.0.0.1:9")  # nothing listens on the discard port
        with tailcut.run("agent"):
            pass
        tailcut.force_flush(timeout_millis=100)
        print("agent finished")
        """,
        env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "agent finished" in done.stdout


@pytest.mark.parametrize("module", ["pyarrow", "duckdb", "polars", "openai", "anthropic"])
def test_import_tailcut_is_light(module):
    done = run_agent(f"import sys, tailcut; tailcut.init; print({module!r} in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
