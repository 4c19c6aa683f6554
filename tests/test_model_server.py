"""The scripted-model server, driven by the real ``openai`` and ``anthropic`` SDKs over loopback.

Every reply is parsed by the SDKs' own models and stream assemblers, so a field the SDK needs but the
server leaves out, an event out of order or a wrong error shape fails here as it would in the demo.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import anthropic
import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut.canonical import canonical_json
from tailcut.errors import ConfigError
from tailcut.testing import (
    ModelServer,
    ModelServerError,
    ReceivedRequest,
    ScriptedError,
    ScriptedReply,
    TokenUsage,
    ToolCall,
    ToolResult,
    echo_responder,
)
from tailcut.testing._render import argument_pieces, text_pieces

NOW = 1_700_000_000.0
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = ToolCall("get_weather", {"city": "Paris", "unit": "celsius", "days": [1, 2, 3]})


@pytest.fixture
def server():
    model_server = ModelServer(clock=lambda: NOW)
    with model_server:
        yield model_server


def chat(client, **kwargs):
    return client.chat.completions.create(model="gpt-4o-mini", messages=USER, **kwargs)


def claude_message(client, **kwargs):
    return client.messages.create(model="claude-scripted-1", max_tokens=256, messages=USER, **kwargs)


# -- OpenAI Chat Completions ---------------------------------------------------------------------


def test_chat_plain_reply_is_a_full_chat_completion(server, oai):
    server.enqueue(ScriptedReply(text="Sunny, 21 °C.", usage=(11, 7)))

    completion = chat(oai, temperature=0.2)

    assert completion.choices[0].message.content == "Sunny, 21 °C."
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "gpt-4o-mini"
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert len(completion.id) == len("chatcmpl-") + 29
    assert completion.created == int(NOW)
    assert completion.system_fingerprint.startswith("fp_")
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (11, 7)
    assert completion.usage.total_tokens == 18
    assert completion._request_id.startswith("req_")
    (request,) = server.requests
    assert (request.api, request.path, request.index, request.time) == (
        "chat",
        "/v1/chat/completions",
        0,
        NOW,
    )
    assert request.body["temperature"] == 0.2
    assert request.body["messages"] == USER
    assert request.headers["authorization"] == "Bearer test"
    assert request.stream is False


def test_chat_tool_calls_carry_dict_and_raw_arguments(server, oai):
    server.enqueue(ScriptedReply(tool_calls=[WEATHER, ("get_time", '{"tz": "Europe/Par')]))

    completion = chat(oai)

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    first, second = choice.message.tool_calls
    assert (first.function.name, json.loads(first.function.arguments)) == (
        "get_weather",
        dict(WEATHER.arguments),
    )
    assert (second.function.name, second.function.arguments) == ("get_time", '{"tz": "Europe/Par')
    assert first.id.startswith("call_")
    assert second.id.startswith("call_")
    assert first.id != second.id
    assert first.type == "function"


def test_chat_stream_reassembles_text_tool_calls_and_usage(server, oai):
    server.enqueue(ScriptedReply(text="Let me check that for you.", tool_calls=[WEATHER], usage=(40, 12)))

    with chat(oai, stream=True, stream_options={"include_usage": True}) as stream:
        chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    argument_deltas = [
        call.function.arguments
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or []
        if call.function.arguments
    ]
    openings = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or [] if call.id]
    assert text == "Let me check that for you."
    assert len(argument_deltas) > 1, "tool-call arguments must be spread over several chunks"
    assert json.loads("".join(argument_deltas)) == dict(WEATHER.arguments)
    assert [(call.index, call.function.name) for call in openings] == [(0, "get_weather")]
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (40, 12)
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1
    assert server.requests[0].stream is True


def test_chat_stream_sends_no_usage_chunk_unless_asked(server, oai):
    with chat(oai, stream=True) as stream:
        chunks = list(stream)

    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: What is the weather in Paris?"


def test_chat_stream_helper_builds_the_final_completion(server, oai):
    server.enqueue(ScriptedReply(text="Checking.", tool_calls=[WEATHER]))

    with oai.chat.completions.stream(model="gpt-4o-mini", messages=USER) as stream:
        final = stream.get_final_completion()

    message = final.choices[0].message
    assert message.content == "Checking."
    assert json.loads(message.tool_calls[0].function.arguments) == dict(WEATHER.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


# -- OpenAI Responses ----------------------------------------------------------------------------


def test_responses_plain_reply_with_function_call(server, oai):
    server.enqueue(ScriptedReply(text="I will look it up.", tool_calls=[WEATHER], usage=(30, 9)))

    response = oai.responses.create(model="gpt-4.1", input="Weather in Paris?", instructions="Be brief.")

    assert response.output_text == "I will look it up."
    assert [item.type for item in response.output] == ["message", "function_call"]
    call = response.output[1]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", dict(WEATHER.arguments))
    assert call.call_id.startswith("call_")
    assert call.id.startswith("fc_")
    assert response.status == "completed"
    assert response.incomplete_details is None
    assert response.id.startswith("resp_")
    assert response.model == "gpt-4.1"
    assert response.instructions == "Be brief."
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        30,
        9,
        39,
    )
    assert server.requests[0].api == "responses"


def test_responses_stream_events_are_ordered_and_reassemble(server, oai):
    server.enqueue(ScriptedReply(text="Looking it up now.", tool_calls=[WEATHER]))

    with oai.responses.create(model="gpt-4.1", input="Weather?", stream=True) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    arguments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert text == "Looking it up now."
    assert len(arguments) > 1
    assert json.loads("".join(arguments)) == dict(WEATHER.arguments)
    assert [e.response.status for e in events[:2]] == ["in_progress", "in_progress"]
    assert events[0].response.output == []
    assert events[0].response.usage is None
    assert events[-1].response.output_text == text
    assert len({e.response.id for e in events if hasattr(e, "response")}) == 1


def test_responses_stream_helper_returns_the_final_response(server, oai):
    server.enqueue(ScriptedReply(text="Done.", tool_calls=[WEATHER]))

    with oai.responses.stream(model="gpt-4.1", input="Weather?") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert "".join(deltas) == final.output_text == "Done."
    assert json.loads(final.output[1].arguments) == dict(WEATHER.arguments)


# -- Anthropic Messages --------------------------------------------------------------------------


def test_messages_plain_reply(server, claude):
    server.enqueue(ScriptedReply(text="It is sunny.", usage=(25, 5)))

    message = claude_message(claude, system="You are terse.")

    assert [(block.type, block.text) for block in message.content] == [("text", "It is sunny.")]
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-scripted-1"
    assert message.id.startswith("msg_01")
    assert len(message.id) == len("msg_01") + 22
    assert (message.usage.input_tokens, message.usage.output_tokens) == (25, 5)
    assert message._request_id.startswith("req_01")
    request = server.requests[0]
    assert (request.api, request.path, request.body["system"]) == (
        "messages",
        "/v1/messages",
        "You are terse.",
    )
    assert request.headers["authorization"] == "Bearer test"
    assert "anthropic-version" in request.headers


def test_messages_tool_use_blocks(server, claude):
    server.enqueue(ScriptedReply(text="Let me check.", tool_calls=[WEATHER, ("get_time", '{"tz": "CET"}')]))

    message = claude_message(claude)

    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    weather, clock = message.content[1:]
    assert (weather.name, weather.input) == ("get_weather", dict(WEATHER.arguments))
    assert clock.input == {"tz": "CET"}, "a raw string holding a JSON object is sent as that object"
    assert weather.id.startswith("toolu_01")
    assert weather.id != clock.id
    assert message.stop_reason == "tool_use"


def test_messages_raw_stream_events(server, claude):
    server.enqueue(ScriptedReply(text="Checking the forecast.", tool_calls=[WEATHER], usage=(50, 20)))

    with claude_message(claude, stream=True) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
    text = "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    partial = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.index == 1]
    assert text == "Checking the forecast."
    assert len(partial) > 1
    assert json.loads("".join(partial)) == dict(WEATHER.arguments)
    assert events[0].message.usage.input_tokens == 50
    assert events[-2].delta.stop_reason == "tool_use"
    assert events[-2].usage.output_tokens == 20


def test_messages_stream_helper_final_message(server, claude):
    server.enqueue(ScriptedReply(text="Twenty-one degrees.", tool_calls=[WEATHER], usage=(50, 20)))

    with claude.messages.stream(model="claude-scripted-1", max_tokens=256, messages=USER) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert streamed_text == final.content[0].text == "Twenty-one degrees."
    assert final.content[1].input == dict(WEATHER.arguments)
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (50, 20)


def test_messages_stream_with_unparsable_arguments_fails_in_the_sdk(server, claude):
    server.enqueue(ScriptedReply(tool_calls=[("get_weather", "not json at all")]))

    with (
        pytest.raises(ValueError, match="Unable to parse tool parameter JSON"),
        claude.messages.stream(model="m", max_tokens=5, messages=USER) as stream,
    ):
        stream.get_final_message()


# -- finish reasons across APIs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "responses_status", "incomplete_reason", "stop_reason"),
    [
        ("stop", "completed", None, "end_turn"),
        ("length", "incomplete", "max_output_tokens", "max_tokens"),
        ("tool_calls", "completed", None, "tool_use"),
        ("content_filter", "incomplete", "content_filter", "refusal"),
    ],
)
def test_finish_reason_maps_to_each_api(
    server, oai, claude, finish, responses_status, incomplete_reason, stop_reason
):
    reply = ScriptedReply(text="Partial answer", finish_reason=finish)
    server.enqueue(reply, reply, reply, reply)

    completion = chat(oai)
    response = oai.responses.create(model="gpt-4.1", input="hi")
    with oai.responses.create(model="gpt-4.1", input="hi", stream=True) as stream:
        last_event = list(stream)[-1]
    message = claude_message(claude)

    assert completion.choices[0].finish_reason == finish
    assert response.status == responses_status
    assert (response.incomplete_details.reason if response.incomplete_details else None) == incomplete_reason
    expected_event = "response.completed" if responses_status == "completed" else "response.incomplete"
    assert (last_event.type, last_event.response.status) == (expected_event, responses_status)
    assert message.stop_reason == stop_reason


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, openai.BadRequestError, "invalid_request_error"),
        (401, openai.AuthenticationError, "invalid_request_error"),
        (429, openai.RateLimitError, "requests"),
        (500, openai.InternalServerError, "server_error"),
        (503, openai.InternalServerError, "server_error"),
    ],
)
def test_openai_errors_raise_the_sdks_typed_exceptions(server, oai, status, exception, error_type):
    server.enqueue(ScriptedReply(error=status), ScriptedReply(error=status))

    with pytest.raises(exception) as chat_error:
        chat(oai)
    with pytest.raises(exception) as responses_error:
        oai.responses.create(model="gpt-4.1", input="hi", stream=True)

    for caught in (chat_error.value, responses_error.value):
        assert caught.status_code == status
        assert caught.type == error_type
        assert caught.request_id.startswith("req_")
    assert server.request_count == 2


def test_rate_limit_error_has_openais_code(server, oai):
    server.enqueue(ScriptedReply(error=ScriptedError(429, message="Slow down.")))

    with pytest.raises(openai.RateLimitError, match="Slow down") as caught:
        chat(oai)

    assert caught.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_anthropic_errors_raise_the_sdks_typed_exceptions(server, claude, status, exception, error_type):
    server.enqueue(ScriptedReply(error=status), ScriptedReply(error=status))

    with pytest.raises(exception) as plain:
        claude_message(claude)
    with pytest.raises(exception) as streamed:
        claude_message(claude, stream=True)

    for caught in (plain.value, streamed.value):
        assert caught.status_code == status
        assert caught.type == error_type
        assert caught.request_id.startswith("req_01")


def test_custom_error_body_is_sent_verbatim(server, oai):
    body = {"error": {"message": "quota gone", "type": "insufficient_quota", "param": None, "code": "quota"}}
    server.enqueue(ScriptedReply(error=ScriptedError(429, body=body)))

    with pytest.raises(openai.RateLimitError) as caught:
        chat(oai)

    assert caught.value.body == body["error"]
    assert caught.value.code == "quota"


def test_retry_after_lets_the_sdk_retry_into_the_next_reply(server):
    server.enqueue(
        ScriptedReply(error=ScriptedError(429, retry_after=0.01)), ScriptedReply(text="second try")
    )

    with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=2) as client:
        completion = chat(client)

    assert completion.choices[0].message.content == "second try"
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]


def test_should_retry_false_stops_sdk_retries(server):
    server.enqueue(ScriptedReply(error=ScriptedError(500, should_retry=False)))

    with (
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=3) as client,
        pytest.raises(anthropic.InternalServerError),
    ):
        claude_message(client)

    assert server.request_count == 1


# -- delays ----------------------------------------------------------------------------------------


def test_delay_holds_the_answer_back(server, oai):
    server.enqueue(ScriptedReply(text="late", delay=0.3))

    started = time.monotonic()
    completion = chat(oai)

    assert time.monotonic() - started >= 0.3
    assert completion.choices[0].message.content == "late"


def test_delay_beyond_the_client_timeout_is_a_timeout(server):
    server.enqueue(ScriptedReply(text="too late", delay=1.0))

    with (
        openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0, timeout=0.2) as client,
        pytest.raises(openai.APITimeoutError),
    ):
        chat(client)


# -- scripting ---------------------------------------------------------------------------------------


def test_queue_answers_in_order_then_the_responder(server, oai):
    server.enqueue(ScriptedReply(text="one"), ScriptedReply(text="two"))
    assert server.pending_replies() == 2

    texts = [chat(oai).choices[0].message.content for _ in range(3)]

    assert texts == ["one", "two", "echo: What is the weather in Paris?"]
    assert server.pending_replies() == 0


def test_replies_queued_for_an_api_go_first_to_that_api(server, oai, claude):
    server.enqueue(ScriptedReply(text="shared"))
    server.enqueue(ScriptedReply(text="for claude"), api="messages")

    assert server.pending_replies("messages") == 1
    assert claude_message(claude).content[0].text == "for claude"
    assert chat(oai).choices[0].message.content == "shared"
    assert claude_message(claude).content[0].text == "echo: What is the weather in Paris?"


def test_responder_decides_from_the_conversation(server, oai, claude):
    def responder(request: ReceivedRequest) -> ScriptedReply:
        if request.tool_results:
            return ScriptedReply(text=f"{request.api}: the tool said {request.tool_results[0].content}")
        return ScriptedReply(tool_calls=[("get_weather", {"city": request.last_user_text.split()[-1]})])

    server.responder = responder

    first = chat(oai, tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])
    call = first.choices[0].message.tool_calls[0]
    second = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            *USER,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "21 °C"},
        ],
    )
    opening = claude_message(claude)
    tool_use = opening.content[0]
    closing = claude.messages.create(
        model="claude-scripted-1",
        max_tokens=256,
        messages=[
            *USER,
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in opening.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18 °C"}],
            },
        ],
    )

    assert json.loads(call.function.arguments) == {"city": "Paris?"}
    assert second.choices[0].message.content == "chat: the tool said 21 °C"
    assert closing.content[0].text == "messages: the tool said 18 °C"
    assert server.requests[-1].tool_results == (ToolResult(tool_use.id, "18 °C"),)


@pytest.mark.parametrize(
    ("api", "body", "last_user_text", "tool_results"),
    [
        (
            "chat",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
                    {"role": "assistant", "content": None, "tool_calls": []},
                    {"role": "tool", "tool_call_id": "c1", "content": "a"},
                    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "b"}]},
                ]
            },
            "hi",
            (ToolResult("c1", "a"), ToolResult("c2", "b")),
        ),
        (
            "chat",
            {
                "messages": [
                    {"role": "tool", "tool_call_id": "c", "content": "x"},
                    {"role": "user", "content": "q"},
                ]
            },
            "q",
            (),
        ),
        ("responses", {"input": "just text"}, "just text", ()),
        (
            "responses",
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "find it"}]},
                    {"type": "function_call", "call_id": "f1", "name": "n", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "f1", "output": "found"},
                ]
            },
            "find it",
            (ToolResult("f1", "found"),),
        ),
        (
            "messages",
            {
                "messages": [
                    {"role": "user", "content": "first"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "n", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                    },
                ]
            },
            "first",
            (ToolResult("t1", "ok"),),
        ),
        ("messages", {"messages": []}, "", ()),
    ],
)
def test_received_request_reads_any_apis_conversation(api, body, last_user_text, tool_results):
    request = ReceivedRequest(0, api, "/", {}, body, 0.0)

    assert request.last_user_text == last_user_text
    assert request.tool_results == tool_results


def test_responder_failure_is_a_500_and_is_kept(server, oai):
    server.responder = lambda request: ScriptedReply(text=1 / 0)

    with pytest.raises(openai.InternalServerError, match="ZeroDivisionError"):
        chat(oai)

    assert [type(error) for error in server.responder_errors] == [ZeroDivisionError]


def test_default_usage_follows_request_and_reply_size(server, oai):
    short = chat(oai).usage
    again = chat(oai).usage
    longer = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 400}]).usage

    assert (short.prompt_tokens, short.completion_tokens) == (again.prompt_tokens, again.completion_tokens)
    assert short.prompt_tokens == math.ceil(len(canonical_json({"messages": USER})) / 4)
    assert short.completion_tokens == math.ceil(len("echo: What is the weather in Paris?") / 4)
    assert longer.prompt_tokens > short.prompt_tokens + 90


def test_ids_depend_on_seed_content_and_repetition_not_on_timing():
    def ids(seed, prompts):
        with (
            ModelServer(seed=seed) as base_url,
            openai.OpenAI(base_url=base_url, api_key="t", max_retries=0) as client,
        ):
            return [
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": p}]).id
                for p in prompts
            ]

    first = ids(7, ["a", "b", "a"])

    assert first == ids(7, ["a", "b", "a"])
    assert first[:2] == ids(7, ["a", "b"])
    assert first[1] == ids(7, ["b"])[0], "an id does not depend on what other conversations did"
    assert len(set(first)) == 3, "a repeated request gets a fresh id"
    assert ids(8, ["a"])[0] != first[0]


def test_a_fixed_clock_makes_responses_byte_identical_between_servers():
    body = {"model": "m", "messages": USER, "max_tokens": 9, "stream": True}

    def wire() -> list[bytes]:
        server = ModelServer(clock=lambda: NOW)
        with server:
            server.enqueue(ScriptedReply(text="Same words.", tool_calls=[WEATHER]))
            streamed = httpx2.post(f"{server.base_url}/v1/messages", json=body).content
            plain = httpx2.post(
                f"{server.openai_base_url}/responses", json={"model": "m", "input": "hi"}
            ).content
            return [streamed, plain]

    assert wire() == wire()


# -- observation -------------------------------------------------------------------------------------


def test_reset_forgets_requests_and_queue_and_restarts_ids(server, oai):
    first_id = chat(oai).id
    server.enqueue(ScriptedReply(text="never used"))

    server.reset()

    assert (server.request_count, server.requests, server.pending_replies()) == (0, [], 0)
    assert chat(oai).id == first_id
    assert server.requests[0].index == 0


def test_forbid_answers_500_once_and_records_the_violation(server):
    with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=3) as client:
        chat(client)
        with server.forbid(), pytest.raises(openai.InternalServerError, match="forbidden"):
            chat(client)
        after = chat(client)

    assert server.request_count == 3, "x-should-retry: false keeps the SDK from retrying a forbidden call"
    assert [v.index for v in server.violations] == [1]
    assert after.choices[0].message.content.startswith("echo:")


def test_fail_on_request_from_the_start():
    server = ModelServer(fail_on_request=True)
    with (
        server as base_url,
        anthropic.Anthropic(base_url=base_url, api_key="t", max_retries=0) as client,
    ):
        server.enqueue(ScriptedReply(text="not served"))
        with pytest.raises(anthropic.InternalServerError):
            claude_message(client)

        assert len(server.violations) == 1
        assert server.pending_replies() == 1


def test_requests_off_the_api_are_refused(server):
    assert httpx2.post(f"{server.base_url}/v1/embeddings", json={}).status_code == 404
    assert httpx2.post(f"{server.openai_base_url}/chat/completions", content=b"{not json").status_code == 400
    assert httpx2.get(f"{server.openai_base_url}/chat/completions").status_code == 405
    assert server.request_count == 0

    server.enqueue(ScriptedReply(text="kept"))
    missing = httpx2.post(f"{server.base_url}/v1/messages", json={"model": "m", "messages": []})

    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "type": "invalid_request_error",
        "message": "Missing required parameter: 'max_tokens'.",
    }
    assert server.request_count == 1, "a well-formed request to an API is recorded even when invalid"
    assert server.pending_replies() == 1, "an invalid request does not use up a scripted reply"


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_streams_are_chunked_server_sent_events(server, api):
    path, body = {
        "chat": ("/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}),
        "responses": ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
        "messages": ("/v1/messages", {"model": "m", "messages": USER, "max_tokens": 9, "stream": True}),
    }[api]

    with httpx2.stream("POST", server.base_url + path, json=body) as response:
        raw = response.read().decode()

    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    frames = [frame.split("\n") for frame in raw.split("\n\n") if frame]
    if api == "chat":
        assert all(len(frame) == 1 and frame[0].startswith("data: ") for frame in frames)
        assert frames[-1] == ["data: [DONE]"]
    else:
        for event_line, data_line in frames:
            assert event_line == f"event: {json.loads(data_line.removeprefix('data: '))['type']}"


# -- concurrency, async clients, lifecycle -----------------------------------------------------------


def test_concurrent_clients_each_get_their_own_reply(server, oai):
    results: dict[str, str] = {}

    def worker(name: str) -> None:
        for i in range(20):
            prompt = f"{name}-{i}"
            messages = [{"role": "user", "content": prompt}]
            results[prompt] = (
                oai.chat.completions.create(model="m", messages=messages).choices[0].message.content
            )

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 120
    assert all(text == f"echo: {prompt}" for prompt, text in results.items())
    assert sorted(r.index for r in server.requests) == list(range(120))


def test_async_clients_stream_from_the_server(server):
    server.enqueue(ScriptedReply(text="async openai"), api="chat")
    server.enqueue(ScriptedReply(text="async anthropic"), api="messages")

    async def run() -> tuple[str, str]:
        async with (
            openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0) as oai,
            anthropic.AsyncAnthropic(
                base_url=server.anthropic_base_url, api_key="t", max_retries=0
            ) as claude,
        ):
            stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
            openai_text = "".join([c.choices[0].delta.content or "" async for c in stream])
            async with claude.messages.stream(model="m", max_tokens=9, messages=USER) as message_stream:
                anthropic_text = (await message_stream.get_final_message()).content[0].text
            return openai_text, anthropic_text

    assert asyncio.run(run()) == ("async openai", "async anthropic")


def test_lifecycle_errors_are_clear():
    server = ModelServer()
    with pytest.raises(ModelServerError, match="not running"):
        _ = server.base_url
    server.start()
    try:
        with pytest.raises(ModelServerError, match="already running"):
            server.start()
        with pytest.raises(ModelServerError, match="cannot bind"):
            ModelServer(port=server.port).start()
        port = server.port
    finally:
        server.stop()
    server.stop()
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(f"http://127.0.0.1:{port}/v1/messages", json={})


def test_stop_closes_idle_keep_alive_connections(server, oai):
    chat(oai)
    handler_threads = [t for t in threading.enumerate() if "process_request_thread" in t.name]
    assert handler_threads, "the client keeps its connection (and so a handler thread) open"

    server.stop()

    for thread in handler_threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in handler_threads)


# -- scripted values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: ScriptedReply(finish_reason="done"),
            "expected one of stop, length, tool_calls, content_filter",
        ),
        (lambda: ScriptedReply(delay=-1), "delay must be >= 0"),
        (lambda: ScriptedReply(tool_calls=["get_weather"]), "a tool call must be a ToolCall"),
        (lambda: ScriptedReply(tool_calls=[("f", 3)]), "arguments must be a dict or a raw string"),
        (lambda: ScriptedReply(error=200), "HTTP error code 400-599"),
        (lambda: ScriptedReply(usage=(-1, 2)), "token counts must be >= 0"),
        (lambda: ScriptedReply(text=5), "reply text must be a string"),
    ],
)
def test_bad_scripts_fail_where_they_are_written(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_enqueue_checks_its_arguments(server):
    with pytest.raises(ConfigError, match="ScriptedReply"):
        server.enqueue("hello")
    with pytest.raises(ConfigError, match="expected one of chat, responses, messages"):
        server.enqueue(ScriptedReply(text="x"), api="completions")


def test_scripted_values_normalise_their_shorthands():
    reply = ScriptedReply(tool_calls=[("f", {"a": 1})], usage=(3, 4), error=429)

    assert reply.tool_calls == (ToolCall("f", {"a": 1}),)
    assert reply.usage == TokenUsage(3, 4)
    assert reply.usage.total_tokens == 7
    assert reply.error == ScriptedError(429)
    assert ScriptedReply().finish_reason == "stop"
    assert ToolCall("f", {"b": [1, "é"]}).arguments_json == '{"b":[1,"é"]}'
    assert ScriptedError(429, retry_after=0.25, should_retry=True).headers() == {
        "retry-after-ms": "250",
        "retry-after": "1",
        "x-should-retry": "true",
    }
    assert (
        echo_responder(ReceivedRequest(0, "responses", "/", {}, {"input": "x" * 100}, 0.0)).text
        == "echo: " + "x" * 80
    )


@given(st.text())
def test_text_pieces_rebuild_the_text(text):
    pieces = text_pieces(text)

    assert "".join(pieces) == text
    assert all(piece.strip() or piece is pieces[-1] for piece in pieces)


@given(st.text())
def test_argument_pieces_rebuild_the_arguments(arguments):
    assert "".join(argument_pieces(arguments)) == arguments


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(max_size=60),
    arguments=st.dictionaries(st.text(max_size=5), st.text(max_size=10), max_size=3),
)
def test_any_reply_survives_the_sdk_streams(oai, server, text, arguments):
    server.enqueue(
        ScriptedReply(text=text, tool_calls=[("f", arguments)]),
        ScriptedReply(text=text, tool_calls=[("f", arguments)]),
    )

    with chat(oai, stream=True) as stream:
        chunks = list(stream)
    with oai.responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    streamed_arguments = "".join(
        call.function.arguments or "" for c in chunks for call in c.choices[0].delta.tool_calls or []
    )
    assert json.loads(streamed_arguments) == arguments
    assert final.output_text == text
    assert json.loads(final.output[1].arguments) == arguments
