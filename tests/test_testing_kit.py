"""``tailcut.testing`` as a user's tests meet it: public names only, the real SDKs, whole agent turns.

``tests/test_model_server.py`` checks the wire format field by field; here an agent loop (call the model,
run the tool it asks for, send the result back) runs through the real ``openai`` and ``anthropic`` SDKs,
plain and streamed, the errors a harness must survive reach the agent as the SDKs' typed exceptions, and
the responder sees every request the agent made.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import anthropic
import openai
import pytest

import tailcut.testing
from tailcut.testing import (
    ModelServer,
    ModelServerError,
    ReceivedRequest,
    ScriptedError,
    ScriptedReply,
    ToolCall,
    ToolResult,
)

QUESTION = "What is the weather in Paris?"
WEATHER_CALL = ToolCall("get_weather", {"city": "Paris"})
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def answer_from_tool_result(request: ReceivedRequest) -> ScriptedReply:
    """A responder: once a tool result came back, answer with it; before that, call the tool."""
    if request.tool_results:
        return ScriptedReply(text=f"It is {request.tool_results[0].content}.", usage=(30, 6))
    return ScriptedReply(tool_calls=[WEATHER_CALL])


@pytest.fixture
def server():
    model_server = ModelServer(responder=answer_from_tool_result)
    with model_server:
        yield model_server


def openai_chat_agent(client: openai.OpenAI, *, stream: bool) -> str:
    """A Chat Completions tool loop; streamed turns are reassembled by the SDK's stream helper."""
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    while True:
        if stream:
            with client.chat.completions.stream(
                model="gpt-4o-mini", messages=messages, tools=OPENAI_TOOLS
            ) as events:
                message = events.get_final_completion().choices[0].message
        else:
            completion = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=OPENAI_TOOLS
            )
            message = completion.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    call.model_dump(include={"id", "type", "function"}) for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            result = get_weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def anthropic_agent(client: anthropic.Anthropic, *, stream: bool) -> str:
    """A Messages tool loop; streamed turns are read through the SDK's stream manager."""
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    while True:
        request = {"model": "claude-test", "max_tokens": 256, "messages": messages, "tools": ANTHROPIC_TOOLS}
        if stream:
            with client.messages.stream(**request) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**request)
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in message.content if block.type == "text")
        messages.append({"role": "assistant", "content": [block.model_dump() for block in message.content]})
        results = [
            {"type": "tool_result", "tool_use_id": use.id, "content": get_weather(**use.input)}
            for use in uses
        ]
        messages.append({"role": "user", "content": results})


#: provider -> (its client fixture, its agent)
AGENTS = {"openai": ("oai", openai_chat_agent), "anthropic": ("claude", anthropic_agent)}


# -- the public surface ---------------------------------------------------------------------------


def test_the_kit_exports_a_short_documented_surface():
    public = sorted(name for name in dir(tailcut.testing) if not name.startswith("_"))
    assert sorted(tailcut.testing.__all__) == public, "every public name is in __all__, and only those"
    assert {"ModelServer", "ScriptedReply", "Responder", "capture_spans", "CapturedSpans"} <= set(public)
    assert len(public) <= 12
    for name in set(public) - {"Responder"}:  # a type alias: documented in the source
        assert getattr(tailcut.testing, name).__doc__, f"tailcut.testing.{name} has no docstring"


def test_importing_the_kit_stays_light_and_import_tailcut_does_not_load_it():
    code = (
        "import sys, tailcut\n"
        "before = 'tailcut.testing' in sys.modules\n"
        "import tailcut.testing\n"
        "heavy = ('pyarrow', 'duckdb', 'polars', 'aiohttp', 'openai', 'anthropic', 'tailcut.demo')\n"
        "print(before, sorted(m for m in sys.modules if m.split('.')[0] in heavy or m == 'tailcut.demo'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "[]"]


def test_the_context_manager_serves_on_loopback_and_stops_on_exit():
    server = ModelServer()
    with server:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.base_url)
        assert server.openai_base_url == server.base_url + "/v1"
        # Any HTTP client will do: here the standard library's, with no SDK at all.
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        post = urllib.request.Request(
            server.openai_base_url + "/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(post) as response:
            reply = json.load(response)
        assert reply["choices"][0]["message"]["content"] == "echo: hi"
    with pytest.raises(ModelServerError, match="not running"):
        _ = server.base_url


# -- whole agent turns through the real SDKs ------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_openai_agent_runs_its_tool_loop_against_the_server(server, oai, stream):
    assert openai_chat_agent(oai, stream=stream) == "It is sunny in Paris."

    first, second = server.requests
    assert (first.api, first.stream, first.tool_results) == ("chat", stream, ())
    call_id = second.body["messages"][1]["tool_calls"][0]["id"]
    assert second.tool_results == (ToolResult(call_id, "sunny in Paris"),)
    assert second.last_user_text == QUESTION


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_anthropic_agent_runs_its_tool_loop_against_the_server(server, claude, stream):
    assert anthropic_agent(claude, stream=stream) == "It is sunny in Paris."

    first, second = server.requests
    assert (first.api, first.stream) == ("messages", stream)
    assert [result.content for result in second.tool_results] == ["sunny in Paris"]
    assert second.tool_results[0].call_id.startswith("toolu_")


def test_the_responses_api_streams_a_scripted_tool_call(server, oai):
    server.enqueue(ScriptedReply(text="Checking.", tool_calls=[WEATHER_CALL], usage=(12, 4)))

    with oai.responses.stream(model="gpt-4.1", input=QUESTION) as events:
        deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
        final = events.get_final_response()

    assert "".join(deltas) == final.output_text == "Checking."
    call = next(item for item in final.output if item.type == "function_call")
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert (final.usage.input_tokens, final.usage.output_tokens) == (12, 4)
    assert server.requests[0].api == "responses"


def test_queued_replies_script_finish_reason_and_usage_exactly(server, oai):
    server.enqueue(ScriptedReply(text="It was cut", finish_reason="length", usage=(100, 3)))

    completion = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])

    assert completion.choices[0].finish_reason == "length"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (100, 3)
    assert server.pending_replies() == 0


# -- errors the agent must survive ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "stream", "status", "exception"),
    [
        ("openai", False, 429, openai.RateLimitError),
        ("openai", True, 500, openai.InternalServerError),
        ("anthropic", False, 500, anthropic.InternalServerError),
        ("anthropic", True, 429, anthropic.RateLimitError),
    ],
)
def test_an_error_status_reaches_the_agent_as_the_sdks_exception(
    request, server, provider, stream, status, exception
):
    client_fixture, agent = AGENTS[provider]
    client = request.getfixturevalue(client_fixture)
    server.enqueue(ScriptedReply(error=status))

    with pytest.raises(exception) as caught:
        agent(client, stream=stream)

    assert caught.value.status_code == status
    assert server.request_count == 1


def test_a_retrying_sdk_gets_the_next_reply_after_a_rate_limit(server):
    server.enqueue(ScriptedReply(error=ScriptedError(429, retry_after=0.01)))

    with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=2) as client:
        answer = openai_chat_agent(client, stream=False)

    assert answer == "It is sunny in Paris."
    assert server.request_count == 3  # the 429, then the tool call, then the answer


# -- the responder hook ---------------------------------------------------------------------------


def test_the_responder_sees_each_request_of_every_api(server, oai, claude):
    seen: list[ReceivedRequest] = []

    def responder(request: ReceivedRequest) -> ScriptedReply:
        seen.append(request)
        return ScriptedReply(text=f"#{request.index} {request.api} {request.model}: {request.last_user_text}")

    server.responder = responder
    user = [{"role": "user", "content": "hello"}]

    chat = oai.chat.completions.create(model="gpt-4o-mini", messages=user, temperature=0.5)
    with oai.chat.completions.create(model="gpt-4o-mini", messages=user, stream=True) as events:
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in events if chunk.choices)
    response = oai.responses.create(model="gpt-4.1", input="hello")
    message = claude.messages.create(model="claude-test", max_tokens=64, messages=user)

    assert chat.choices[0].message.content == "#0 chat gpt-4o-mini: hello"
    assert streamed == "#1 chat gpt-4o-mini: hello"
    assert response.output_text == "#2 responses gpt-4.1: hello"
    assert message.content[0].text == "#3 messages claude-test: hello"
    assert seen == server.requests
    assert [(r.api, r.path, r.stream) for r in seen] == [
        ("chat", "/v1/chat/completions", False),
        ("chat", "/v1/chat/completions", True),
        ("responses", "/v1/responses", False),
        ("messages", "/v1/messages", False),
    ]
    assert seen[0].body["temperature"] == 0.5
    assert seen[0].headers["authorization"] == "Bearer test"
    assert seen[3].headers["authorization"] == "Bearer test"
    assert "anthropic-version" in seen[3].headers


def test_queued_replies_answer_first_and_the_responder_sees_the_rest(server, oai):
    server.enqueue(ScriptedReply(text="queued"))
    seen: list[int] = []
    server.responder = lambda request: seen.append(request.index) or ScriptedReply(text="responder")
    user = [{"role": "user", "content": "hi"}]

    texts = [
        oai.chat.completions.create(model="m", messages=user).choices[0].message.content for _ in range(3)
    ]

    assert texts == ["queued", "responder", "responder"]
    assert seen == [1, 2]
    assert server.request_count == 3


def test_a_responder_that_fails_is_a_500_the_agent_sees_and_the_test_can_read(server, oai):
    def broken(request: ReceivedRequest) -> ScriptedReply:
        raise KeyError("no script for this conversation")

    server.responder = broken

    with pytest.raises(openai.InternalServerError, match="KeyError"):
        openai_chat_agent(oai, stream=False)

    (error,) = server.responder_errors
    assert isinstance(error, KeyError)


def test_the_context_manager_yields_one_base_url_both_sdks_take():
    with ModelServer() as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        with openai.OpenAI(base_url=base_url, api_key="t", max_retries=0) as client:
            chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with anthropic.Anthropic(base_url=base_url, api_key="t", max_retries=0) as claude:
            message = claude.messages.create(
                model="claude-x", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
    assert chat.choices[0].message.content and message.content[0].text
