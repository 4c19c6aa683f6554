"""Recorded replay of the real ``openai`` and ``anthropic`` SDKs, plain and streaming, with no network.

Agents run against the scripted model server and are recorded into a data dir by the embedded Parquet
exporter; the corpus writer turns that into a corpus; the runner replays it 20 times from the files while
the server is in ``forbid()`` mode, so any request would be a recorded violation.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

import tailcut
from tailcut import replay
from tailcut.testing import ModelServer, ScriptedError, ScriptedReply, ToolCall
from tests.replay_support import record_corpus

NOW = 1_700_000_000.0
GPT = "gpt-4o-mini"
REPEATS = 20
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
CLIENTS: dict[str, object] = {}


def openai_agent(question: str) -> dict:
    """A plain call with a tool call, a raw stream, the Responses stream helper and a rate limit."""
    client = CLIENTS["openai"]
    with tailcut.run("openai-agent", input=question) as run:
        completion = client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": question}],
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
            seed=7,
        )
        arguments = completion.choices[0].message.tool_calls[0].function.arguments
        with client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": f"weather for {arguments}"}],
            stream=True,
        ) as stream:
            chunks = [chunk.model_dump() for chunk in stream]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        with client.responses.stream(model=GPT, input=f"Summarise: {text}") as responses:
            summary = responses.get_final_response().output_text
        try:
            client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": summary}])
            limited = None
        except openai.RateLimitError as exc:
            limited = (exc.status_code, exc.body)
        run.set_outcome("pass")
        return {
            "completion": completion.model_dump(),
            "chunks": chunks,
            "summary": summary,
            "limited": limited,
        }


def anthropic_agent(question: str) -> dict:
    """A plain call with tool use, a raw stream, the stream manager and a rate limit."""
    client = CLIENTS["anthropic"]
    model, tools = "claude-scripted-1", [{"name": "get_weather", "input_schema": WEATHER}]
    with tailcut.run("anthropic-agent", input=question) as run:
        message = client.messages.create(
            model=model, max_tokens=256, messages=[{"role": "user", "content": question}], tools=tools
        )
        city = next(block.input["city"] for block in message.content if block.type == "tool_use")
        events = [
            event.model_dump()
            for event in client.messages.create(
                model=model, max_tokens=256, messages=[{"role": "user", "content": city}], stream=True
            )
        ]
        with client.messages.stream(
            model=model, max_tokens=256, messages=[{"role": "user", "content": f"{city}?"}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message().model_dump()
        try:
            client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": text}])
            limited = None
        except anthropic.RateLimitError as exc:
            limited = (exc.status_code, exc.body)
        run.set_outcome("pass")
        return {"message": message.model_dump(), "events": events, "final": final, "limited": limited}


SCRIPTS = {
    "openai": [
        ScriptedReply(tool_calls=[ToolCall("get_weather", {"city": "Rome"})]),
        ScriptedReply(text="Sunny, 21 degrees in Rome."),
        ScriptedReply(text="Rome is sunny."),
        ScriptedReply(error=ScriptedError(429, should_retry=False)),
    ],
    "anthropic": [
        ScriptedReply(text="Checking.", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]),
        ScriptedReply(text="Cold in Oslo."),
        ScriptedReply(text="Oslo is cold."),
        ScriptedReply(error=ScriptedError(429, should_retry=False)),
    ],
}
AGENTS = {"openai": openai_agent, "anthropic": anthropic_agent}


@pytest.fixture(scope="module")
def server():
    model_server = ModelServer(clock=lambda: NOW)
    with model_server:
        yield model_server


@pytest.fixture(scope="module", autouse=True)
def _clients(server):
    CLIENTS["openai"] = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
    CLIENTS["anthropic"] = anthropic.Anthropic(
        base_url=server.anthropic_base_url, api_key="test", max_retries=0
    )
    yield
    for client in CLIENTS.values():
        client.close()
    CLIENTS.clear()


@pytest.fixture(params=["openai", "anthropic"])
def recorded(request, server, tmp_path):
    """A corpus of one run of the provider's agent, recorded live, and what the agent returned."""
    provider = request.param
    server.reset()
    server.enqueue(*SCRIPTS[provider])
    outputs = []
    instrument = tailcut.instrument_openai if provider == "openai" else tailcut.instrument_anthropic
    uninstrument = tailcut.uninstrument_openai if provider == "openai" else tailcut.uninstrument_anthropic
    assert instrument() is True
    try:
        corpus, (trace_id,) = record_corpus(tmp_path, [lambda: outputs.append(AGENTS[provider]("Weather?"))])
    finally:
        uninstrument()
    assert server.request_count == 4 and outputs[0]["limited"][0] == 429
    return provider, replay.load_corpus(corpus), trace_id, outputs[0]


def test_the_corpus_keeps_streams_as_streams_and_errors_as_status_records(recorded):
    provider, corpus, trace_id, _ = recorded
    envelopes = corpus.envelopes(trace_id)
    assert [e.kind for e in envelopes] == ["llm"] * 4
    assert [e.stream_events is not None for e in envelopes] == [False, True, True, False]
    assert envelopes[3].error_type == f"{provider}.RateLimitError"
    assert '"status_code":429' in envelopes[3].response


def test_recorded_replay_rebuilds_sdk_objects_with_no_network_and_is_bit_stable(recorded, server):
    provider, corpus, trace_id, live_output = recorded
    with server.forbid():
        report = replay.run_replay(corpus, AGENTS[provider], n=REPEATS)

    assert server.violations == []
    assert [s.rate for s in report.traces()] == [f"bit-stable {REPEATS}/{REPEATS} (recorded)"]
    assert all(r.rerun.output == live_output for r in report.results)
    crossing_lists = {tuple(r.rerun.crossings) for r in report.results}
    assert len(crossing_lists) == 1
    (crossings,) = crossing_lists
    assert [(c.status, c.error_type) for c in crossings] == [("served", None)] * 3 + [
        ("served", f"{provider}.RateLimitError")
    ]
    assert [c.request_sha256 for c in crossings] == [e.request_sha256 for e in corpus.envelopes(trace_id)]
    assert report.canary is not None and report.canary.caught is True


def test_a_changed_prompt_diverges_before_any_request_is_sent(recorded, server):
    provider, corpus, _, _ = recorded
    with server.forbid():
        report = replay.run_replay(corpus, AGENTS[provider], n=1, canary=False, check=lambda rerun: True)
    assert report.passed

    def changed(question):
        return AGENTS[provider](question + " Tomorrow?")

    with server.forbid():
        report = replay.run_replay(corpus, changed, n=1, canary=False)
    (result,) = report.results
    assert server.violations == []
    assert not result.passed
    assert result.rerun.stopped_by.kind == "request"
    assert '"Weather?" -> "Weather? Tomorrow?"' in result.rerun.stopped_by.paths[0]
    assert result.rerun.error_text.startswith("tailcut.errors.Divergence: request differs at llm:")
