"""Record framework agent runs in a process of their own, exporting OTLP/HTTP to ``tailcut collect``.

``python -m tests.frameworks.record FRAMEWORK RECORDER ENDPOINT SCENARIO...`` runs one run per scenario
name given (repeat a name for several runs), with the scripted model server's OpenAI URL in
``FRAMEWORKS_MODEL_URL``, and prints one JSON line: how many runs raised. ``RECORDER`` is ``tailcut``
(``tailcut.init(auto_instrument=True)`` alone), ``tailcut+openinference`` (both in one process), or a
third-party instrumentor of :data:`INSTRUMENTORS` (alone: tailcut does not record). Each recorder gets
its own process, as an agent's would: instrumentors patch the same framework and read their settings
from the environment.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

#: recorder -> framework -> (the instrumentor's module, its class, the environment it needs for content)
INSTRUMENTORS: dict[str, dict[str, tuple[str, str, dict[str, str]]]] = {
    "openinference": {
        "langgraph": ("openinference.instrumentation.langchain", "LangChainInstrumentor", {}),
        "openai_agents": ("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor", {}),
        "smolagents": ("openinference.instrumentation.smolagents", "SmolagentsInstrumentor", {}),
        "smolagents_code": ("openinference.instrumentation.smolagents", "SmolagentsInstrumentor", {}),
        "llamaindex": ("openinference.instrumentation.llama_index", "LlamaIndexInstrumentor", {}),
    },
    "openllmetry": {
        "langgraph": (
            "opentelemetry.instrumentation.langchain",
            "LangchainInstrumentor",
            {"TRACELOOP_TRACE_CONTENT": "true"},
        ),
    },
}

#: framework -> the module of its agent
AGENTS = {
    "langgraph": "tests.frameworks.langgraph_agent",
    "openai_agents": "tests.frameworks.openai_agents_agent",
    "smolagents": "tests.frameworks.smolagents_agent",
    "smolagents_code": "tests.frameworks.smolagents_code_agent",
    "llamaindex": "tests.frameworks.llama_index_agent",
}


def quiet_agents_sdk_tracing() -> None:
    """The Agents SDK uploads its traces to the provider by default: keep every trace on this machine."""
    try:
        from agents import set_trace_processors
    except ImportError:
        return
    set_trace_processors([])


def _start(framework: str, recorder: str, endpoint: str) -> Any:
    """Turn the recorder on; returns what to shut down at the end."""
    if recorder in ("tailcut", "tailcut+openinference"):
        import tailcut

        provider = tailcut.init(
            service_name=f"{framework}-{recorder}", endpoint=endpoint, auto_instrument=True
        )
        if recorder != "tailcut":  # the framework's own instrumentor too, in the same process
            module, name, environment = INSTRUMENTORS["openinference"][framework]
            os.environ.update(environment)
            getattr(importlib.import_module(module), name)().instrument(tracer_provider=provider)
        return tailcut
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    module, name, environment = INSTRUMENTORS[recorder][framework]
    os.environ.update(environment)
    provider = TracerProvider(resource=Resource.create({"service.name": f"{framework}-{recorder}"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    trace.set_tracer_provider(provider)
    getattr(importlib.import_module(module), name)().instrument(tracer_provider=provider)
    return provider


def main(framework: str, recorder: str, endpoint: str, scenarios: list[str]) -> None:
    quiet_agents_sdk_tracing()
    stop = _start(framework, recorder, endpoint)
    entry = importlib.import_module(AGENTS[framework])
    from tests.frameworks.scenarios import SCENARIOS

    failed = 0
    for name in scenarios:
        try:
            entry.agent(SCENARIOS[name].question(framework))
        except Exception:  # a fatal scenario: the run failed, and is recorded like any other
            failed += 1
    stop.shutdown()
    print(json.dumps({"runs": len(scenarios), "failed": failed}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
