"""``opentelemetry-instrument``: tailcut records without ``tailcut.init`` and ``tailcut.stats()`` counts.

The agent runs under the real launcher with ``opentelemetry-distro`` installed, which builds the tracer
provider and its OTLP exporter from the ``OTEL_*`` variables; tailcut's instrumentor entry points turn
recording on. The spans go to a real OTLP/HTTP receiver on loopback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.otlp_sink import OtlpSink
from tests.test_sdk_export import run_agent

pytest.importorskip("opentelemetry.distro")
LAUNCHER = str(Path(sys.executable).with_name("opentelemetry-instrument"))

AGENT = """
    import json, sys
    from opentelemetry import trace
    import tailcut

    if sys.argv[1:] == ["own-provider"]:  # the application sets its provider after the instrumentors
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)

    @tailcut.tool
    def work(i):
        return i

    with tailcut.run("instrumented"):
        for i in range(3):
            work(i)
    trace.get_tracer_provider().force_flush()
    print(json.dumps(tailcut.stats()))
"""


def _environment(sink: OtlpSink) -> dict[str, str]:
    return {
        "OTEL_SERVICE_NAME": "instrumented-agent",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }


@pytest.mark.parametrize(
    ("setup", "extra_env"),
    [
        pytest.param("distro", {}, id="provider from opentelemetry-distro"),
        # Without a configurator, the application's own provider (set after start-up) exports.
        pytest.param("own-provider", {"OTEL_PYTHON_CONFIGURATOR": "none"}, id="application's own provider"),
    ],
)
def test_stats_count_the_spans_exported_under_opentelemetry_instrument(setup, extra_env):
    with OtlpSink() as sink:
        done = run_agent(
            AGENT, setup, env={**_environment(sink), **extra_env}, launcher=(LAUNCHER,), timeout=60
        )
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout.splitlines()[-1])
        received = len(sink.spans)
    assert received == 4  # the run and three tools
    assert stats["spans_exported"] == received
    assert stats["spans_dropped"] == 0
    assert {resource["service.name"] for resource, _ in sink.spans} == {"instrumented-agent"}


def test_stats_count_a_collector_that_refuses_under_opentelemetry_instrument():
    with OtlpSink(token="expected") as sink:  # no token is sent: every export is refused
        done = run_agent(AGENT, "distro", env=_environment(sink), launcher=(LAUNCHER,), timeout=60)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.splitlines()[-1])
    assert sink.headers and not sink.spans
    assert stats["spans_exported"] == 0
    assert stats["spans_export_failed"] == 4
