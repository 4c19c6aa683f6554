"""The real ``openai`` SDK, instrumented, against the scripted model server on loopback.

Each call must become one ``llm`` span holding the request exactly as the server received it, the
provider's raw reply (reassembled for streams, with the raw events), usage and schema violations; and
a replay interceptor must be able to serve a recorded call as real SDK objects without any request.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.resources.responses import AsyncResponses, Responses
from opentelemetry.trace import SpanKind, StatusCode

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.instrumentation.openai import OpenAIInstrumentor
from tailcut.interceptor import Served, exception_type_name, use_interceptor
from tailcut.testing import ModelServer, ScriptedError, ScriptedReply, ToolCall, capture_spans
from tests.conftest import NOW
from tests.instrument_support import ServeRecorded, events_of, request_of, response_of, run_python

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}]
PATCHED = [
    (Completions, "create"),
    (AsyncCompletions, "create"),
    (Responses, "create"),
    (AsyncResponses, "create"),
]
ORIGINALS = {(owner, name): owner.__dict__[name] for owner, name in PATCHED}


@pytest.fixture(scope="module", autouse=True)
def _instrumented():
    assert tailcut.instrument_openai() is True
    yield
    tailcut.uninstrument_openai()


@pytest.fixture(scope="module")
def oai(model_server):
    with openai.OpenAI(base_url=model_server.openai_base_url, api_key="test", max_retries=0) as client:
        yield client


def chat(client, **kwargs):
    return client.chat.completions.create(model="gpt-4o-mini", messages=USER, **kwargs)


def only_llm_span(spans):
    (span,) = spans.by_kind("llm")
    return span


# -- what a call records ----------------------------------------------------------------------------


def test_chat_call_records_the_request_exactly_as_sent(server, oai):
    server.enqueue(ScriptedReply(text="Sunny, 21 °C.", usage=(11, 7)))

    with capture_spans() as spans:
        completion = oai.chat.completions.create(
            model="gpt-4o-mini",
            messages=iter(USER),  # a one-shot iterator: recording must not use it up
            tools=CHAT_TOOLS,
            seed=42,
            temperature=0.2,
            top_p=0.9,
            max_completion_tokens=64,
            stop=["END"],
            extra_body={"metadata": {"ticket": "42"}},
            extra_headers={"X-Ticket": "42", "Authorization": "Bearer sk-live-abcdefghijklmnopqrstuvwx"},
            timeout=30,
        )

    span = only_llm_span(spans)
    request = request_of(span)
    assert {k: v for k, v in request.items() if k != "extra_headers"} == server.requests[0].body
    assert server.requests[0].body["messages"] == USER
    assert server.requests[0].body["metadata"] == {"ticket": "42"}
    assert request["extra_headers"] == {"X-Ticket": "42", "Authorization": "[REDACTED]"}
    assert completion.choices[0].message.content == "Sunny, 21 °C."
    assert (span.name, span.kind) == ("chat gpt-4o-mini", SpanKind.CLIENT)
    assert {k: span.attributes[k] for k in EXPECTED_CHAT_ATTRIBUTES} == EXPECTED_CHAT_ATTRIBUTES
    assert span.attributes[attr.TOOLS_SHA256] == sha256_hex(canonical_json(CHAT_TOOLS))
    assert span.attributes[attr.GEN_AI_RESPONSE_ID] == completion.id
    assert span.attributes[attr.SCHEMA_VIOLATIONS] == 0
    assert attr.STREAM not in span.attributes


EXPECTED_CHAT_ATTRIBUTES = {
    attr.KIND: "llm",
    attr.BOUNDARY: "llm:openai.chat",
    attr.GEN_AI_PROVIDER_NAME: "openai",
    attr.GEN_AI_OPERATION_NAME: "chat",
    attr.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
    attr.GEN_AI_REQUEST_SEED: 42,
    attr.GEN_AI_REQUEST_TEMPERATURE: 0.2,
    attr.GEN_AI_REQUEST_TOP_P: 0.9,
    attr.GEN_AI_REQUEST_MAX_TOKENS: 64,
    attr.GEN_AI_REQUEST_STOP_SEQUENCES: ("END",),
    attr.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini",
    attr.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
    attr.GEN_AI_USAGE_INPUT_TOKENS: 11,
    attr.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_recorded_response_is_the_providers_raw_body(server, oai, api):
    reply = ScriptedReply(text="Let me look.", tool_calls=[ToolCall("get_weather", {"city": "Paris"})])
    server.enqueue(reply)
    with capture_spans() as spans:
        if api == "chat":
            chat(oai, tools=CHAT_TOOLS)
        else:
            oai.responses.create(model="gpt-4o-mini", input="Weather?", tools=RESPONSES_TOOLS)
    sent = server.requests[0]

    twin = ModelServer(clock=lambda: NOW)
    with twin:  # same seed and clock: byte-identical replies
        twin.enqueue(reply)
        raw = httpx2.post(f"{twin.base_url}{sent.path}", json=sent.body).json()

    assert response_of(only_llm_span(spans)) == raw


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    ("arguments", "violations"),
    [({"city": "Paris", "days": 2}, 0), ({"city": "Paris", "days": 0}, 1), ('{"city": "Par', 1)],
    ids=["valid", "breaks-schema", "not-json"],
)
def test_tool_calls_are_recorded_and_checked_against_the_schema_sent(server, oai, api, arguments, violations):
    server.enqueue(ScriptedReply(tool_calls=[ToolCall("get_weather", arguments), ToolCall("unknown", {})]))

    with capture_spans() as spans, tailcut.run("agent"):
        if api == "chat":
            chat(oai, tools=CHAT_TOOLS)
        else:
            oai.responses.create(model="gpt-4o-mini", input="Weather?", tools=RESPONSES_TOOLS)

    span = only_llm_span(spans)
    response = response_of(span)
    if api == "chat":
        calls = [c["function"] for c in response["choices"][0]["message"]["tool_calls"]]
    else:
        calls = [item for item in response["output"] if item["type"] == "function_call"]
    raw_arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", raw_arguments), ("unknown", "{}")]
    assert span.attributes[attr.SCHEMA_VIOLATIONS] == violations
    assert spans.root().attributes[attr.TRACE_SCHEMA_VIOLATIONS] == violations
    assert spans.root().attributes[attr.TRACE_LLM_CALLS] == 1


# -- streams ----------------------------------------------------------------------------------------


def test_chat_stream_is_one_span_with_raw_events_and_the_reassembled_completion(server, oai):
    server.enqueue(
        ScriptedReply(
            text="Let me check that for you.",
            tool_calls=[ToolCall("get_weather", {"city": "Paris", "days": 3})],
            usage=(40, 12),
        )
    )

    with capture_spans() as spans:
        stream = chat(oai, tools=CHAT_TOOLS, stream=True, stream_options={"include_usage": True})
        assert isinstance(stream, openai.Stream)
        with stream:
            chunks = [chunk.model_dump(mode="json", exclude_unset=True) for chunk in stream]

    span = only_llm_span(spans)
    assert (span.attributes[attr.STREAM], span.attributes[attr.STREAM_END]) == (True, "exhausted")
    assert events_of(span) == chunks
    message = response_of(span)["choices"][0]["message"]
    assert message["content"] == "Let me check that for you."
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert call["id"].startswith("call_")
    assert span.attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert (
        span.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS],
        span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS],
    ) == (
        40,
        12,
    )
    assert span.attributes[attr.SCHEMA_VIOLATIONS] == 0
    assert request_of(span)["stream"] is True


def test_responses_stream_helper_records_every_event_and_the_completed_response(server, oai):
    server.enqueue(ScriptedReply(text="Checking.", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]))

    with (
        capture_spans() as spans,
        oai.responses.stream(model="gpt-4o-mini", input="Weather?", tools=RESPONSES_TOOLS) as stream,
    ):
        final = stream.get_final_response()

    span = only_llm_span(spans)
    events = events_of(span)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    recorded = response_of(span)
    assert recorded == events[-1]["response"]
    assert recorded["id"] == final.id
    assert final.output_text == "Checking."
    assert [item["type"] for item in recorded["output"]] == ["message", "function_call"]
    assert json.loads(recorded["output"][1]["arguments"]) == {"city": "Oslo"}
    assert span.attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
    assert span.attributes[attr.STREAM_END] == "exhausted"


def _close_after_first_chunk(client):
    stream = chat(client, stream=True)
    next(iter(stream))
    stream.close()


def _leave_with_block_after_first_chunk(client):
    with chat(client, stream=True) as stream:
        for _ in stream:
            break


def _leave_helper_after_first_event(client):
    with client.chat.completions.stream(model="gpt-4o-mini", messages=USER) as stream:
        next(iter(stream))


def _drop_unread(client):
    stream = chat(client, stream=True)
    del stream
    gc.collect()


@pytest.mark.parametrize(
    "stop_reading",
    [
        _close_after_first_chunk,
        _leave_with_block_after_first_chunk,
        _leave_helper_after_first_event,
        _drop_unread,
    ],
)
def test_a_stream_left_early_ends_its_span(server, oai, stop_reading):
    server.enqueue(ScriptedReply(text="one two three four five six seven eight nine ten"))

    with capture_spans() as spans:
        stop_reading(oai)

    span = only_llm_span(spans)  # only ended spans are exported
    assert span.attributes[attr.STREAM_END] == "closed"
    assert len(events_of(span)) < 12
    choices = response_of(span)["choices"]
    assert choices == [] or "one two ten" not in choices[0]["message"]["content"]


# -- errors -----------------------------------------------------------------------------------------


def test_an_error_response_is_recorded_and_the_sdk_exception_passes_through(server, oai):
    server.enqueue(ScriptedReply(error=ScriptedError(429, retry_after=0.5, should_retry=False)))

    with capture_spans() as spans, pytest.raises(openai.RateLimitError) as raised:
        chat(oai)

    span = only_llm_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[attr.ERROR_TYPE] == exception_type_name(raised.value) == "openai.RateLimitError"
    assert [event.name for event in span.events] == ["exception"]
    record = response_of(span)
    assert record["status_code"] == 429
    assert record["body"] == raised.value.response.json()
    assert record["headers"]["retry-after-ms"] == "500"
    assert record["headers"]["x-should-retry"] == "false"
    assert record["headers"]["x-request-id"] == raised.value.request_id


def test_a_timeout_is_recorded_as_the_sdks_timeout_error(server, oai):
    server.enqueue(ScriptedReply(text="too late", delay=0.5))

    with capture_spans() as spans, pytest.raises(openai.APITimeoutError):
        chat(oai.with_options(timeout=0.05))

    span = only_llm_span(spans)
    assert span.attributes[attr.ERROR_TYPE] == "openai.APITimeoutError"
    assert attr.RESPONSE not in span.attributes


# -- what tailcut cannot record never reaches the agent --------------------------------------------------


def test_raw_responses_are_recorded_from_the_body_and_unreadable_ones_pass_through(server, oai):
    failures_before = tailcut.stats().get("llm_recording_failed", 0)

    with capture_spans() as spans:
        raw = oai.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=USER)
        with oai.chat.completions.with_streaming_response.create(model="gpt-4o-mini", messages=USER) as lazy:
            lazy_completion = lazy.parse()

    recorded_raw, recorded_lazy = spans.by_kind("llm")
    assert response_of(recorded_raw) == json.loads(raw.http_response.content)
    assert raw.parse().choices[0].message.content.startswith("echo:")
    assert lazy_completion.choices[0].message.content.startswith("echo:")
    assert attr.RESPONSE not in recorded_lazy.attributes
    assert recorded_lazy.end_time is not None
    assert tailcut.stats()["llm_recording_failed"] == failures_before + 1


# -- async ------------------------------------------------------------------------------------------


def test_async_calls_and_streams_are_recorded(server):
    server.enqueue(ScriptedReply(text="plain"), ScriptedReply(text="streamed"), ScriptedReply(text="left"))

    async def agent():
        async with openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0) as client:
            plain = await client.chat.completions.create(model="gpt-4o-mini", messages=USER)
            stream = await client.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
            assert isinstance(stream, openai.AsyncStream)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream])
            left = await client.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
            await left.__anext__()
            await left.close()
            async with client.responses.stream(model="gpt-4o-mini", input="hi") as responses_stream:
                final = await responses_stream.get_final_response()
            return plain.choices[0].message.content, streamed, final.output_text

    with capture_spans() as spans:
        assert asyncio.run(agent()) == ("plain", "streamed", "echo: hi")

    plain, streamed, left, responses = spans.by_kind("llm")
    assert response_of(plain)["choices"][0]["message"]["content"] == "plain"
    assert response_of(streamed)["choices"][0]["message"]["content"] == "streamed"
    assert [s.attributes.get(attr.STREAM_END) for s in (plain, streamed, left, responses)] == [
        None,
        "exhausted",
        "closed",
        "exhausted",
    ]
    assert responses.attributes[attr.BOUNDARY] == "llm:openai.responses"


# -- replay ---------------------------------------------------------------------------------------------


def _calls(client):
    """One non-streaming call, one raw stream and one stream helper; returns what the agent saw."""
    completion = chat(client, tools=CHAT_TOOLS, seed=7)
    with chat(client, stream=True) as stream:
        chunks = [chunk.model_dump() for chunk in stream]
    with client.responses.stream(model="gpt-4o-mini", input="Weather?") as responses_stream:
        final = responses_stream.get_final_response()
    return completion, chunks, final


def test_replay_serves_recorded_calls_as_real_sdk_objects_without_the_network(server, oai):
    server.enqueue(ScriptedReply(tool_calls=[ToolCall("get_weather", {"city": "Rome"})]))
    with capture_spans() as recorded, tailcut.run("record"):
        live = _calls(oai)
    interceptor = ServeRecorded(recorded.by_kind("llm"))

    with capture_spans() as replayed, tailcut.run("replay"), use_interceptor(interceptor), server.forbid():
        served = _calls(oai)

    assert server.violations == []
    assert served[0].model_dump() == live[0].model_dump()
    assert isinstance(served[0], openai.types.chat.ChatCompletion)
    assert served[1] == live[1]
    assert served[2].model_dump() == live[2].model_dump()
    assert served[2].output_text == live[2].output_text
    recorded_spans, replayed_spans = recorded.by_kind("llm"), replayed.by_kind("llm")
    assert [c.request_sha256 for c in interceptor.crossings] == [
        s.attributes[attr.REQUEST_SHA256] for s in recorded_spans
    ]
    for before, after in zip(recorded_spans, replayed_spans, strict=True):
        assert after.attributes[attr.REPLAYED] is True
        assert after.attributes[attr.RESPONSE_SHA256] == before.attributes[attr.RESPONSE_SHA256]
        assert after.attributes.get(attr.STREAM_EVENTS) == before.attributes.get(attr.STREAM_EVENTS)
    assert [served for _, served, _, _ in interceptor.results] == [True, True, True]


def test_replay_serves_a_recorded_error_as_the_same_sdk_exception(server, oai):
    server.enqueue(ScriptedReply(error=ScriptedError(429, should_retry=False)))
    with capture_spans() as recorded, pytest.raises(openai.RateLimitError) as live:
        chat(oai)
    interceptor = ServeRecorded(recorded.by_kind("llm"))

    with capture_spans() as replayed, use_interceptor(interceptor), server.forbid():
        with pytest.raises(openai.RateLimitError) as served:
            chat(oai)
        timeout = ServeRecorded({("llm:openai.chat", 1): Served(error_type="openai.APITimeoutError")})
        with use_interceptor(timeout), pytest.raises(openai.APITimeoutError):  # rebuilt by the transport
            chat(oai)

    assert server.violations == []
    assert (served.value.status_code, served.value.body) == (live.value.status_code, live.value.body)
    span = replayed.by_kind("llm")[0]
    assert span.attributes[attr.ERROR_TYPE] == "openai.RateLimitError"
    assert span.attributes[attr.REPLAYED] is True
    assert interceptor.results[0][3] == "RateLimitError"


def test_a_divergence_stops_the_call_before_it_is_sent(server, oai):
    class Diverge:
        def on_boundary(self, crossing):
            raise tailcut.Divergence(f"{crossing.boundary}: request differs")

        def on_result(self, crossing, *, served, response_json, response_sha256, error):
            self.outcome = (served, response_json, type(error).__name__)

    interceptor = Diverge()
    with capture_spans() as spans, use_interceptor(interceptor), pytest.raises(tailcut.Divergence):
        chat(oai)

    assert server.request_count == 0
    assert interceptor.outcome == (False, None, "Divergence")
    assert only_llm_span(spans).status.status_code is StatusCode.ERROR


# -- patching ---------------------------------------------------------------------------------------------


def test_instrument_twice_is_a_no_op_and_uninstrument_restores_the_originals(server, oai):
    patched = {key: owner.__dict__[name] for key in ORIGINALS for owner, name in [key]}
    assert all(not hasattr(fn, "__tailcut_original__") for fn in ORIGINALS.values())
    assert all(fn.__tailcut_original__ is ORIGINALS[key] for key, fn in patched.items())

    assert tailcut.instrument_openai() is False
    assert {key: owner.__dict__[name] for key in ORIGINALS for owner, name in [key]} == patched
    try:
        assert tailcut.uninstrument_openai() is True
        assert all(owner.__dict__[name] is ORIGINALS[(owner, name)] for owner, name in ORIGINALS)
        assert tailcut.uninstrument_openai() is False
        with capture_spans() as spans:
            chat(oai)
        assert spans.by_kind("llm") == []
    finally:
        tailcut.instrument_openai()


def test_importing_tailcut_imports_no_instrumentation_package():
    done = run_python(
        "import sys, tailcut; print(sorted(m for m in sys.modules if m.startswith('opentelemetry.instr')))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_opentelemetry_instrument_records_without_tailcut_init(server):
    pytest.importorskip("opentelemetry.instrumentation")
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    server.enqueue(ScriptedReply(text="instrumented"))
    agent = """
        import json, sys
        import openai
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # after the instrumentors loaded: the usual order
        client = openai.OpenAI(base_url=sys.argv[1], api_key="t", max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=hi)
        print(json.dumps({"text": reply.choices[0].message.content,
                          "spans": [dict(span.attributes) for span in exporter.get_finished_spans()]}))
    """

    # No configurator (opentelemetry-distro's would set a provider first): the application sets its own.
    done = run_python(
        agent, server.openai_base_url, launcher=(str(launcher),), env={"OTEL_PYTHON_CONFIGURATOR": "none"}
    )

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == "instrumented"
    (span,) = [s for s in out["spans"] if s.get(attr.KIND) == "llm"]
    assert span[attr.BOUNDARY] == "llm:openai.chat"
    assert json.loads(span[attr.RESPONSE])["choices"][0]["message"]["content"] == "instrumented"


def test_the_instrumentor_is_an_opentelemetry_instrumentor():
    base = pytest.importorskip("opentelemetry.instrumentation.instrumentor").BaseInstrumentor
    instrumentor = OpenAIInstrumentor()

    assert isinstance(instrumentor, base)
    assert list(instrumentor.instrumentation_dependencies()) == ["openai >= 2.45, < 4"]


# -- stream reassembly, for any reply ------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(st.none(), st.text(max_size=40)),
    arguments=st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=2),
)
def test_a_reassembled_chat_stream_says_what_the_plain_reply_says(server, oai, text, arguments):
    reply = ScriptedReply(
        text=text, tool_calls=[ToolCall(f"tool{i}", args) for i, args in enumerate(arguments)]
    )
    server.enqueue(reply, reply)

    with capture_spans() as spans:
        plain = chat(oai)
        for _ in chat(oai, stream=True):
            pass

    plain_span, stream_span = spans.by_kind("llm")
    expected = response_of(plain_span)["choices"][0]
    reassembled = response_of(stream_span)["choices"][0]
    assert reassembled["finish_reason"] == expected["finish_reason"] == plain.choices[0].finish_reason
    assert reassembled["message"]["content"] == expected["message"]["content"]
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in reassembled["message"].get("tool_calls", [])
    ] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in expected["message"].get("tool_calls") or []
    ]
