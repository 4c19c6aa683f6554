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

import tailcut
from tailcut.exporters import corpus_format
from tailcut.exporters.conventions import corpus as conventions
from tailcut.exporters.conventions.matching import Comparison
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
