"""What framework recordings by other instrumentors give a replay, and the run input of a bare llm call.

The run's input is taken from the first span of the run that carries one when its parentless span has
none (OpenLLMetry's ``LangGraph.workflow`` under ``invoke_agent LangGraph``); OpenLLMetry's LangChain tool
records are rebuilt into the tool's arguments; the transport options a framework passes ``create()``
(the Agents SDK's ``extra_headers``) are not compared with OpenInference records that lack them; and an
llm call made with no run open gets its whole request (pieces filled in) as the run's input.
"""

from __future__ import annotations

import json

import openai
from hypothesis import given
from hypothesis import strategies as st

import tailcut
from tailcut.canonical import canonical_json
from tailcut.exporters import corpus_format
from tailcut.exporters.conventions import corpus as conventions
from tailcut.exporters.conventions import frameworks
from tailcut.exporters.conventions.matching import Comparison, ToolArguments, tool_parameters
from tailcut.exporters.corpus import Selection, write_corpus
from tests.replay_support import ModelServer, ScriptedReply, recording_into, trace_ids

QUESTION = "[langgraph:clean] What is the weather in Paris?"


def row(kind: str, **columns):
    return {"kind": kind, "attempt": None, "request": None, "response": None, **columns}


def test_the_run_input_comes_from_the_first_span_that_carries_one():
    root = row("agent")
    workflow_input = json.dumps({"args": [{"messages": [["user", QUESTION]]}], "kwargs": {}})
    workflow = (
        row("chain"),
        {"traceloop.span.kind": "workflow", "traceloop.entity.input": workflow_input},
    )
    later = (row("chain"), {"traceloop.span.kind": "task", "traceloop.entity.input": '"later"'})
    fields = conventions.run_fields(root, {"gen_ai.operation.name": "invoke_agent"}, [workflow, later])
    assert fields["input"].source == "traceloop.entity.input"
    assert json.loads(fields["input"].value) == {"messages": [["user", QUESTION]]}
    assert conventions.run_fields(root, {}, [])["input"].value is None


def test_a_tailcut_span_inside_the_run_is_not_taken_for_the_run_input():
    tool = (row("tool", attempt=1, request='{"city":"Paris"}'), {"tailcut.kind": "tool"})
    assert conventions.run_fields(row("agent"), {}, [tool])["input"].value is None


def test_openllmetry_langchain_tool_records_become_the_tool_arguments():
    recorded = json.dumps(
        {"input_str": "{'city': 'Paris'}", "inputs": {"city": "Paris"}, "metadata": {"langgraph_step": 2}}
    )
    assert json.loads(conventions.tool_request("openllmetry", recorded)) == {"city": "Paris"}
    assert conventions.tool_request("openinference", recorded) == recorded


def test_transport_options_no_openinference_record_holds_are_not_compared():
    record = '{"messages":[{"content":"hi","role":"user"}],"model":"m"}'
    live = record.replace('{"messages"', '{"extra_headers":{"User-Agent":"Agents/Python"},"messages"')
    compared, _ = Comparison("openinference", [record]).live(live)
    assert compared == record
    with_headers = Comparison("openinference", [live])
    assert with_headers.live(live) == (live, None)  # recorded there: compared as sent
    other = '{"messages":[{"content":"hello","role":"user"}],"model":"m"}'
    assert Comparison("openinference", [record]).live(other)[0] != record


def test_an_llm_call_with_no_run_open_gets_its_whole_request_as_the_run_input(tmp_path):
    server = ModelServer(clock=lambda: 1_700_000_000.0)
    server.enqueue(ScriptedReply(text="Paris."))
    system = "Answer in one word. " * 100  # long enough to be recorded as a piece
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Capital of France?"}]
    tailcut.instrument_openai()
    try:
        with server, recording_into(tmp_path / "data"):
            client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
            client.chat.completions.create(model="m", messages=messages)
            client.close()
    finally:
        tailcut.uninstrument_openai()
    (trace_id,) = trace_ids(tmp_path / "data")
    write_corpus(tmp_path / "data", [Selection(trace_id, "test")], tmp_path / "corpus")
    (run,) = corpus_format.read_rows(tmp_path / "corpus" / corpus_format.RUNS, corpus_format.RUNS_SCHEMA)
    assert json.loads(run["run_input"]) == messages
    assert "$tailcut.piece" not in run["run_input"]


USER = (
    "ChatMessage(role=<MessageRole.USER: 'user'>, content=[{'type': 'text', 'text': 'hi'}], tool_calls=None)"
)
OBSERVATION = (
    "ChatMessage(role=<MessageRole.TOOL_RESPONSE: 'tool-response'>, content=[{'type': 'text', 'text': "
    "'Observation: sunny'}], tool_calls=None, raw=<object at 0x1>, token_usage=None)"
)


def test_smolagents_chat_message_reprs_are_rebuilt_into_the_request_openai_model_sends():
    bound = {
        "messages": [USER, OBSERVATION, OBSERVATION.replace("sunny", "21 C")],
        "stop_sequences": ["Observation:"],
        "response_format": None,
        "tools_to_call_from": ["<get_weather tool>"],
        "kwargs": {},
    }
    request = frameworks.chat_request(bound, model="m", parameters={"temperature": 0.2}, tools=None)
    # tool-response is sent as user, and consecutive messages of one role are merged (texts joined)
    text = "hi\nObservation: sunny\nObservation: 21 C"
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": text}]}]
    assert (request["stop"], request["temperature"], request["model"]) == (["Observation:"], 0.2, "m")
    assert "response_format" not in request and "kwargs" not in request
    assert request[frameworks.REBUILT_KEY] == "smolagents"


def test_langchain_serialized_messages_are_rebuilt_with_tool_calls_and_answers():
    def message(kind: str, **fields):
        return {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain", "schema", "messages", kind],
            "kwargs": fields,
        }

    call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    recorded = {
        "messages": [
            [
                message("SystemMessage", content="be brief", type="system"),
                message("AIMessage", content="", type="ai", tool_calls=[call]),
                message("ToolMessage", content='{"sky": "sunny"}', type="tool", tool_call_id="call_1"),
            ]
        ]
    }
    request = frameworks.chat_request(recorded, model="m", parameters={"stop": None}, tools=None)
    system, assistant, tool = request["messages"]
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["role"] == "assistant"
    (sent,) = assistant["tool_calls"]
    assert (sent["id"], sent["function"]["name"], json.loads(sent["function"]["arguments"])) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert (tool["role"], tool["tool_call_id"], tool["content"]) == ("tool", "call_1", '{"sky": "sunny"}')
    assert "stop" not in request  # a null parameter is not sent


def test_a_tool_result_compares_as_the_value_it_renders():
    """The Agents SDK sends ``str()`` of what a tool returned; OpenInference records it as JSON."""
    record = {
        frameworks.REBUILT_KEY: "messages",
        "model": "m",
        "messages": [{"role": "tool", "tool_call_id": "c", "content": '{"city": "Paris", "celsius": 21}'}],
    }
    compare = Comparison("openinference", [json.dumps(record)])
    live = {
        "model": "m",
        "messages": [{"role": "tool", "tool_call_id": "c", "content": "{'celsius': 21, 'city': 'Paris'}"}],
    }
    assert compare.recorded(json.dumps(record)) == compare.live(json.dumps(live))
    other = json.dumps(live).replace("21", "22")
    assert compare.recorded(json.dumps(record)) != compare.live(other)


def test_a_one_argument_openinference_tool_record_is_keyed_by_the_tool_schema():
    schema = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"properties": {"city": {}}}},
    }
    parameters = tool_parameters([json.dumps({"tools": [schema]})])
    assert parameters == {"get_weather": ("city",)}
    compare = ToolArguments(['"Paris"'], parameters["get_weather"])
    assert compare.recorded('"Paris"')[0] == canonical_json({"city": "Paris"})
    assert compare.recorded('{"city": "Paris"}') == ('{"city": "Paris"}', None)  # already keyed


def test_a_langchain_tool_message_record_is_served_as_its_content():
    openinference = json.dumps(
        {"type": "tool", "data": {"content": "sunny", "type": "tool", "tool_call_id": "c"}}
    )
    assert conventions.tool_response("openinference", openinference) == '"sunny"'
    lc = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"]}
    openllmetry = json.dumps(
        {"output": {**lc, "kwargs": {"content": "21 C", "tool_call_id": "c"}}, "kwargs": {}}
    )
    assert conventions.tool_response("openllmetry", openllmetry) == '"21 C"'
    assert conventions.tool_response("openinference", '{"sky": "sunny"}') == '{"sky": "sunny"}'


def test_a_third_party_error_is_rebuilt_from_its_exception_event():
    event = {
        "name": "exception",
        "attributes": [("exception.type", "tools.OrderServiceError"), ("exception.message", "reset")],
    }
    span = {"error_type": "OrderServiceError", "events": [event]}
    assert conventions.recorded_error(span, "OrderServiceError('reset')\nTraceback ...") == (
        "tools.OrderServiceError",
        "reset",
    )
    assert conventions.recorded_error({"error_type": "E", "events": []}, "m") == ("E", "m")
    assert conventions.recorded_error({"error_type": None, "events": [event]}, None) == (None, None)


def _json_children(children):
    return st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(
            [
                "messages",
                "kwargs",
                "lc",
                "id",
                "type",
                "content",
                "role",
                "stop_sequences",
                "response_format",
                "tools_to_call_from",
                "tool_calls",
                "data",
            ]
        )
        | st.text(max_size=5),
        children,
        max_size=5,
    )


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), _json_children, max_leaves=30))
def test_any_recorded_input_value_is_rebuilt_or_left_alone_never_raises(value):
    request = frameworks.chat_request(value, model=None, parameters=value, tools=value)
    assert request is None or isinstance(request.get("messages"), list)


@given(st.text(max_size=300))
def test_any_chat_message_text_is_read_or_left_as_text(rest):
    bound = {
        "messages": [f"ChatMessage(role=<MessageRole.USER: 'user'>{rest})"],
        "stop_sequences": None,
        "response_format": None,
        "tools_to_call_from": None,
        "kwargs": {},
    }
    request = frameworks.chat_request(bound, model=None, parameters=None, tools=None)
    assert request is not None and len(request["messages"]) == 1
