"""Record ``tests.thirdparty_agent`` under one third-party OpenAI instrumentor, exporting OTLP/HTTP.

Run as ``python -m tests.thirdparty_record CONVENTION ENDPOINT QUESTION...`` with the model server's URL in
``THIRDPARTY_MODEL_URL``. Each instrumentor records in a process of its own (they patch the same SDK
methods, and read their content-capture settings from the environment), as an agent process would.
"""

from __future__ import annotations

import os
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

#: convention -> (the instrumentor's module, the environment it needs to record content)
INSTRUMENTORS = {
    "openinference": ("openinference.instrumentation.openai", {}),
    "openllmetry": ("opentelemetry.instrumentation.openai", {"TRACELOOP_TRACE_CONTENT": "true"}),
    "genai": (
        "opentelemetry.instrumentation.openai_v2",
        {
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        },
    ),
}


def main(convention: str, endpoint: str, questions: list[str]) -> None:
    module, environment = INSTRUMENTORS[convention]
    os.environ.update(environment)
    os.environ["THIRDPARTY_CONVENTION"] = convention
    provider = TracerProvider(resource=Resource.create({"service.name": f"weather-{convention}"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    trace.set_tracer_provider(provider)
    __import__(module, fromlist=["OpenAIInstrumentor"]).OpenAIInstrumentor().instrument(
        tracer_provider=provider
    )

    from tests.thirdparty_agent import agent

    for question in questions:
        agent(question)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
