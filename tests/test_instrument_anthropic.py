"""The real ``anthropic`` SDK, instrumented, against the scripted model server on loopback.

``messages.create`` (plain and ``stream=True``) and ``messages.stream`` (the SDK's stream manager) must
each become one ``llm`` span with the request as sent and the raw or reassembled message, and a replay
interceptor must be able to serve them back as the SDK's own objects without a request.
"""

from __future__ import annotations

import asyncio
import gc
import json

import anthropic
import httpx2
import pytest
from anthropic.lib.streaming import MessageStream
from anthropic.resources.messages import AsyncMessages, Messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind, StatusCode

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.instrumentation.anthropic import AnthropicInstrumentor
from tailcut.interceptor import exception_type_name, use_interceptor
from tailcut.testing import ModelServer, ScriptedError, ScriptedReply, ToolCall, capture_spans
from tests.conftest import NOW
from tests.instrument_support import ServeRecorded, events_of, request_of, response_of, run_python

MODEL = "claude-scripted-1"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    }
]
PATCHED = [(owner, name) for owner in (Messages, AsyncMessages) for name in ("create", "stream")]
ORIGINALS = {(owner, name): owner.__dict__[name] for owner, name in PATCHED}


@pytest.fixture(scope="module", autouse=True)
def _instrumented():
    assert tailcut.instrument_anthropic() is True
    yield
    tailcut.uninstrument_anthropic()


@pytest.fixture(scope="module")
def claude(model_server):
    with anthropic.Anthropic(
        base_url=model_server.anthropic_base_url, api_key="test", max_retries=0
    ) as client:
        yield client


def create(client, **kwargs):
    return client.messages.create(model=MODEL, max_tokens=256, messages=USER, **kwargs)


def stream(client, **kwargs):
    return client.messages.stream(model=MODEL, max_tokens=256, messages=USER, **kwargs)


def only_llm_span(spans):
    (span,) = spans.by_kind("llm")
    return span


# -- what a call records ----------------------------------------------------------------------------


def test_create_records_the_request_exactly_as_sent(server, claude):
    server.enqueue(ScriptedReply(text="Sunny, 21 °C.", usage=(11, 7)))

    with capture_spans() as spans:
        message = claude.messages.create(
            model=MODEL,
            max_tokens=300,
            messages=(turn for turn in USER),  # a one-shot iterator: recording must not use it up
            system="You are terse.",
            tools=TOOLS,
            stop_sequences=["END"],
            # settings this SDK version has no parameter for go in extra_body, and still count
            extra_body={"temperature": 0.3, "top_k": 5, "metadata": {"user_id": "u-1"}},
            extra_headers={"X-Ticket": "42", "x-api-key": "sk-ant-abcdefghijklmnopqrstuvwx"},
        )

    span = only_llm_span(spans)
    request = request_of(span)
    assert {k: v for k, v in request.items() if k != "extra_headers"} == server.requests[0].body
    assert server.requests[0].body["messages"] == USER
    assert request["extra_headers"] == {"X-Ticket": "42", "x-api-key": "[REDACTED]"}
    assert message.content[0].text == "Sunny, 21 °C."
    assert (span.name, span.kind) == (f"chat {MODEL}", SpanKind.CLIENT)
    assert {k: span.attributes[k] for k in EXPECTED} == EXPECTED
    assert span.attributes[attr.GEN_AI_RESPONSE_ID] == message.id
    assert span.attributes[attr.TOOLS_SHA256] == sha256_hex(canonical_json(TOOLS))


EXPECTED = {
    attr.BOUNDARY: "llm:anthropic.messages",
    attr.GEN_AI_PROVIDER_NAME: "anthropic",
    attr.GEN_AI_OPERATION_NAME: "chat",
    attr.GEN_AI_REQUEST_MODEL: MODEL,
    attr.GEN_AI_REQUEST_MAX_TOKENS: 300,
    attr.GEN_AI_REQUEST_TEMPERATURE: 0.3,
    attr.GEN_AI_REQUEST_TOP_K: 5,
    attr.GEN_AI_REQUEST_STOP_SEQUENCES: ("END",),
    attr.GEN_AI_RESPONSE_MODEL: MODEL,
    attr.GEN_AI_RESPONSE_FINISH_REASONS: ("end_turn",),
    attr.GEN_AI_USAGE_INPUT_TOKENS: 11,
    attr.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
    attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 0,
}


def test_recorded_response_is_the_providers_raw_body(server, claude):
    reply = ScriptedReply(text="Checking.", tool_calls=[ToolCall("get_weather", {"city": "Paris"})])
    server.enqueue(reply)
    with capture_spans() as spans:
        create(claude, tools=TOOLS)

    twin = ModelServer(clock=lambda: NOW)
    with twin:  # same seed and clock: byte-identical replies
        twin.enqueue(reply)
        raw = httpx2.post(f"{twin.base_url}/v1/messages", json=server.requests[0].body).json()

    assert response_of(only_llm_span(spans)) == raw


@pytest.mark.parametrize(
    ("arguments", "violations"),
    [({"city": "Paris", "days": 2}, 0), ({"city": 7}, 1), ('{"city": "Par', 1)],
    ids=["valid", "breaks-schema", "not-json"],
)
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "stream"])
def test_tool_use_is_recorded_and_checked_against_the_schema_sent(
    server, claude, arguments, violations, streamed
):
    server.enqueue(ScriptedReply(tool_calls=[ToolCall("get_weather", arguments)]))

    with capture_spans() as spans, tailcut.run("agent"):
        if streamed:
            for _ in create(claude, tools=TOOLS, stream=True):
                pass
        else:
            create(claude, tools=TOOLS)

    span = only_llm_span(spans)
    (block,) = response_of(span)["content"]
    assert (block["type"], block["name"]) == ("tool_use", "get_weather")
    assert block["input"] == arguments
    assert span.attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert span.attributes[attr.SCHEMA_VIOLATIONS] == violations
    assert spans.root().attributes[attr.TRACE_SCHEMA_VIOLATIONS] == violations


# -- streams ----------------------------------------------------------------------------------------


def test_create_stream_records_raw_events_and_the_reassembled_message(server, claude):
    server.enqueue(
        ScriptedReply(
            text="Let me check.", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})], usage=(30, 9)
        )
    )

    with capture_spans() as spans:
        events = create(claude, tools=TOOLS, stream=True)
        assert isinstance(events, anthropic.Stream)
        with events:
            seen = [event.model_dump(mode="json", exclude_unset=True) for event in events]

    span = only_llm_span(spans)
    recorded = events_of(span)
    assert [e for e in recorded if e["type"] != "ping"] == seen
    assert {"type": "ping"} in recorded, "events are recorded as received, pings included"
    message = response_of(span)
    assert [block["type"] for block in message["content"]] == ["text", "tool_use"]
    assert message["content"][0]["text"] == "Let me check."
    assert message["content"][1]["input"] == {"city": "Oslo"}
    assert (message["stop_reason"], message["usage"]["output_tokens"]) == ("tool_use", 9)
    assert (span.attributes[attr.STREAM], span.attributes[attr.STREAM_END]) == (True, "exhausted")
    assert (
        span.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS],
        span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS],
    ) == (
        30,
        9,
    )


def test_the_stream_manager_keeps_its_helpers_and_records_the_final_message(server, claude):
    server.enqueue(ScriptedReply(text="A calm, sunny day in Paris."))

    with capture_spans() as spans, stream(claude, stop_sequences=["\n\n"]) as message_stream:
        assert isinstance(message_stream, MessageStream)
        pieces = list(message_stream.text_stream)
        final = message_stream.get_final_message()

    span = only_llm_span(spans)
    assert "".join(pieces) == "A calm, sunny day in Paris."
    assert len(pieces) > 1
    recorded, assembled_by_sdk = response_of(span), final.model_dump(mode="json", exclude_unset=True)
    assert recorded == {key: assembled_by_sdk[key] for key in recorded}
    assert request_of(span) == server.requests[0].body
    assert span.attributes[attr.STREAM_END] == "exhausted"


def _close_after_first_event(client):
    events = create(client, stream=True)
    next(iter(events))
    events.close()


def _leave_manager_after_first_event(client):
    with stream(client) as message_stream:
        next(iter(message_stream))


def _drop_unread(client):
    events = create(client, stream=True)
    del events
    gc.collect()


@pytest.mark.parametrize(
    "stop_reading", [_close_after_first_event, _leave_manager_after_first_event, _drop_unread]
)
def test_a_stream_left_early_ends_its_span(server, claude, stop_reading):
    server.enqueue(ScriptedReply(text="one two three four five six seven eight nine ten"))

    with capture_spans() as spans:
        stop_reading(claude)

    span = only_llm_span(spans)  # only ended spans are exported
    assert span.attributes[attr.STREAM_END] == "closed"
    assert len(events_of(span)) < 10


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call", [create, lambda client: stream(client).__enter__()], ids=["create", "stream"]
)
def test_an_error_response_is_recorded_and_the_sdk_exception_passes_through(server, claude, call):
    server.enqueue(ScriptedReply(error=ScriptedError(529, should_retry=False)))

    with capture_spans() as spans, pytest.raises(anthropic.APIStatusError) as raised:
        call(claude)

    span = only_llm_span(spans)
    assert raised.value.status_code == 529
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[attr.ERROR_TYPE] == exception_type_name(raised.value)
    assert [event.name for event in span.events] == ["exception"]
    record = response_of(span)
    assert (record["status_code"], record["body"]) == (529, raised.value.response.json())
    assert record["headers"] == {"x-should-retry": "false", "request-id": raised.value.request_id}


# -- async ------------------------------------------------------------------------------------------


def test_async_create_stream_and_manager_are_recorded(server):
    server.enqueue(ScriptedReply(text="plain"), ScriptedReply(text="streamed"), ScriptedReply(text="managed"))

    async def agent():
        async with anthropic.AsyncAnthropic(
            base_url=server.anthropic_base_url, api_key="t", max_retries=0
        ) as client:
            plain = await client.messages.create(model=MODEL, max_tokens=64, messages=USER)
            events = await client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True)
            assert isinstance(events, anthropic.AsyncStream)
            streamed = [event async for event in events]
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as message_stream:
                managed = await message_stream.get_final_text()
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as left:
                await left.__anext__()
            return plain.content[0].text, len(streamed), managed

    with capture_spans() as spans:
        plain_text, streamed_count, managed = asyncio.run(agent())

    assert (plain_text, managed) == ("plain", "managed")
    plain, streamed, manager, left = spans.by_kind("llm")
    assert response_of(streamed)["content"][0]["text"] == "streamed"
    assert len([e for e in events_of(streamed) if e["type"] != "ping"]) == streamed_count
    assert [s.attributes.get(attr.STREAM_END) for s in (plain, streamed, manager, left)] == [
        None,
        "exhausted",
        "exhausted",
        "closed",
    ]


# -- replay ---------------------------------------------------------------------------------------------


def _calls(client):
    message = create(client, tools=TOOLS)
    with stream(client) as message_stream:
        text = "".join(message_stream.text_stream)
        final = message_stream.get_final_message()
    return message, text, final


def test_replay_serves_recorded_calls_as_real_sdk_objects_without_the_network(server, claude):
    server.enqueue(ScriptedReply(text="Looking.", tool_calls=[ToolCall("get_weather", {"city": "Rome"})]))
    with capture_spans() as recorded, tailcut.run("record"):
        live = _calls(claude)
    interceptor = ServeRecorded(recorded.by_kind("llm"))

    with capture_spans() as replayed, tailcut.run("replay"), use_interceptor(interceptor), server.forbid():
        served = _calls(claude)

    assert server.violations == []
    assert isinstance(served[0], anthropic.types.Message)
    assert served[0].model_dump() == live[0].model_dump()
    assert served[1] == live[1]
    assert served[2].model_dump() == live[2].model_dump()
    for before, after in zip(recorded.by_kind("llm"), replayed.by_kind("llm"), strict=True):
        assert after.attributes[attr.REPLAYED] is True
        assert after.attributes[attr.REQUEST_SHA256] == before.attributes[attr.REQUEST_SHA256]
        assert after.attributes[attr.RESPONSE_SHA256] == before.attributes[attr.RESPONSE_SHA256]


def test_replay_serves_a_recorded_error_as_the_same_sdk_exception(server, claude):
    server.enqueue(ScriptedReply(error=ScriptedError(429, should_retry=False)))
    with capture_spans() as recorded, pytest.raises(anthropic.RateLimitError) as live:
        create(claude)

    interceptor = ServeRecorded(recorded.by_kind("llm"))
    with use_interceptor(interceptor), server.forbid(), pytest.raises(anthropic.RateLimitError) as served:
        create(claude)

    assert server.violations == []
    assert served.value.body == live.value.body


# -- patching ---------------------------------------------------------------------------------------------


def test_instrument_twice_is_a_no_op_and_uninstrument_restores_the_originals(claude):
    patched = {(owner, name): owner.__dict__[name] for owner, name in PATCHED}
    assert all(not hasattr(fn, "__tailcut_original__") for fn in ORIGINALS.values())
    assert all(fn.__tailcut_original__ is ORIGINALS[key] for key, fn in patched.items())

    assert tailcut.instrument_anthropic() is False
    assert {(owner, name): owner.__dict__[name] for owner, name in PATCHED} == patched
    try:
        assert tailcut.uninstrument_anthropic() is True
        assert all(owner.__dict__[name] is ORIGINALS[(owner, name)] for owner, name in PATCHED)
        assert tailcut.uninstrument_anthropic() is False
        with capture_spans() as spans:
            create(claude)
        assert spans.by_kind("llm") == []
    finally:
        tailcut.instrument_anthropic()


def test_the_instrumentor_records_through_the_global_provider_without_tailcut_init(server):
    pytest.importorskip("opentelemetry.instrumentation")
    server.enqueue(ScriptedReply(text="instrumented"))
    agent = """
        import json, sys
        import anthropic
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from tailcut.instrumentation.anthropic import AnthropicInstrumentor

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        AnthropicInstrumentor().instrument()
        client = anthropic.Anthropic(base_url=sys.argv[1], api_key="t", max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        with client.messages.stream(model="m", max_tokens=9, messages=hi) as message_stream:
            text = message_stream.get_final_text()
        AnthropicInstrumentor().uninstrument()
        client.messages.create(model="m", max_tokens=9, messages=hi)
        spans = exporter.get_finished_spans()
        llm = [dict(s.attributes) for s in spans if s.attributes.get("tailcut.kind") == "llm"]
        print(json.dumps({"text": text, "llm": llm}))
    """

    done = run_python(agent, server.anthropic_base_url)

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == "instrumented"
    (span,) = out["llm"]  # the call after uninstrument() is not recorded
    assert span[attr.BOUNDARY] == "llm:anthropic.messages"
    assert span[attr.STREAM_END] == "exhausted"
    assert AnthropicInstrumentor().instrumentation_dependencies() == ("anthropic >= 2.0",)


# -- stream reassembly, for any reply ------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(st.none(), st.text(max_size=40)),
    arguments=st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=2),
)
def test_a_reassembled_stream_is_the_plain_message(server, claude, text, arguments):
    reply = ScriptedReply(
        text=text, tool_calls=[ToolCall(f"tool{i}", args) for i, args in enumerate(arguments)]
    )
    server.enqueue(reply, reply)

    with capture_spans() as spans:
        create(claude)
        for _ in create(claude, stream=True):
            pass

    plain, streamed = (response_of(span) for span in spans.by_kind("llm"))
    strip_ids = [{k: v for k, v in block.items() if k != "id"} for block in plain["content"]]
    assert [{k: v for k, v in block.items() if k != "id"} for block in streamed["content"]] == strip_ids
    assert (streamed["stop_reason"], streamed["usage"]) == (plain["stop_reason"], plain["usage"])
