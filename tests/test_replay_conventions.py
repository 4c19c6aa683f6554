"""What a match compares of a third-party llm record: the live body and the convention's rendering agree."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tailcut.canonical import canonicalize
from tailcut.exporters.conventions.matching import Comparison
from tailcut.exporters.conventions.messages import _from_openai_message

texts = st.text(min_size=1, max_size=12)
# integers JSON parsers agree on (past 64 bits, one parser gives a float)
numbers = st.integers(-(2**53), 2**53)
arguments = st.dictionaries(st.sampled_from(["city", "day", "n"]), numbers | texts, max_size=3)
call_ids = st.text(alphabet="abcdef0123456789", min_size=4, max_size=8).map(lambda s: f"call_{s}")


@st.composite
def conversations(draw) -> list[dict]:
    """A Chat Completions conversation: user turns, assistant tool calls, the tool results answering them."""
    messages: list[dict] = [{"role": "system", "content": draw(texts)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(texts)})
        if draw(st.booleans()):
            call_id = draw(call_ids)
            function = {
                "name": draw(st.sampled_from(["get_weather", "lookup"])),
                "arguments": json.dumps(draw(arguments)),
            }
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(draw(arguments))})
        else:
            messages.append({"role": "assistant", "content": draw(texts)})
    return messages


def genai_record(body: dict, *, tools: bool, parameters: dict) -> str:
    """The request as ingest rebuilds it from GenAI attributes (the convention's rendering of ``body``)."""
    record: dict = {"model": body["model"], "messages": [_from_openai_message(m) for m in body["messages"]]}
    if tools:
        record["tools"] = [{"type": "function", "name": t["function"]["name"]} for t in body.get("tools", [])]
    if parameters:
        record["parameters"] = parameters
    return canonicalize(record)[0]


@given(conversations(), st.booleans(), st.none() | st.floats(0, 2))
def test_a_live_body_matches_its_genai_rendering(messages, with_tools, temperature):
    body: dict = {"model": "gpt-4o-mini", "messages": messages}
    if with_tools:
        body["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    if temperature is not None:
        body["temperature"] = temperature
    record = genai_record(
        body, tools=with_tools, parameters={"temperature": temperature} if temperature is not None else {}
    )
    for convention in ("genai", "openllmetry"):
        compare = Comparison(convention, [record])
        assert compare.recorded(record) == compare.live(canonicalize(body)[0])


@given(conversations(), texts)
def test_a_changed_message_text_or_tool_result_does_not_match(messages, extra):
    body = {"model": "gpt-4o-mini", "messages": messages}
    record = genai_record(body, tools=False, parameters={})
    changed = json.loads(json.dumps(body))
    last = changed["messages"][-1]
    last["content"] = (last.get("content") or "") + "!" + extra
    compare = Comparison("genai", [record])
    assert compare.recorded(record) != compare.live(canonicalize(changed)[0])


def test_parameters_the_records_do_not_hold_are_not_compared_and_those_they_hold_are():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "seed": 7}
    record = genai_record(body, tools=False, parameters={"temperature": 0})
    compare = Comparison("genai", [record])
    assert compare.recorded(record) == compare.live(canonicalize(body)[0])
    warmer = {**body, "temperature": 1}
    assert compare.recorded(record) != compare.live(canonicalize(warmer)[0])


def test_openinference_records_are_compared_whole():
    body = canonicalize({"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 7})[0]
    compare = Comparison("openinference", [body])
    assert compare.recorded(body) == (body, None) == compare.live(body)
