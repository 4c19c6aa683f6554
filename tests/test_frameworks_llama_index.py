"""LlamaIndex recorded by tailcut itself: function tools are tool boundaries, agent workflow runs are runs.

In process (llama-index-core only, so in the dev environment): a real ``FunctionAgent`` driven by
LlamaIndex's own scripted ``MockFunctionCallingLLM`` calls two real ``FunctionTool``s, one raising, under
:func:`tailcut.testing.capture_spans`: the run is the root of one trace with its input and output, every
tool call its child with its arguments and result (or error), and the caller's context is left as it
was. End to end (``llama-index-llms-openai``, which needs ``openai<3``: ``.ci/run`` runs it in
``.venv-openai2``): runs of :mod:`tests.frameworks.llama_index_agent` against the scripted model server,
recorded by ``tailcut.init(auto_instrument=True)`` alone through a real ``tailcut collect``, are stored as
one trace per run whose root is the run, and the failed tool leaves its finding. The replay checks (strict
5/5, cut mode, a changed prompt) are :mod:`tests.test_frameworks_replay`'s, run for ``llamaindex`` there.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from opentelemetry import trace

import tailcut
from tailcut.instrumentation import instrument_framework, uninstrument_framework
from tailcut.testing import capture_spans

#: pydantic's deprecation notices, raised each time a LlamaIndex workflow lists its own steps.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")

pytest.importorskip(
    "llama_index.core", reason="llama-index-core is in the dev extra: pip install -e '.[dev]'"
)

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent  # noqa: E402
from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.workflow import Context  # noqa: E402

from tests.frameworks import tools  # noqa: E402

QUESTION = "What is the weather in Paris, and where is order A-boom?"
ANSWER = "It is sunny in Paris; the order service is down."
PATCHED = [
    (FunctionTool, "call"),
    (FunctionTool, "acall"),
    (BaseWorkflowAgent, "run"),
    (AgentWorkflow, "run"),
]


@pytest.fixture
def instrumented():
    instrument_framework("llama_index")
    tools.EXECUTIONS.clear()
    yield
    uninstrument_framework("llama_index")


def weather_and_order_model() -> MockFunctionCallingLLM:
    """The model's script: call both tools at once, then answer once their outputs are in."""

    def reply(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        if any(message.role == MessageRole.TOOL for message in messages):
            return ChatMessage(role="assistant", content=ANSWER)
        calls = [
            ToolCallBlock(tool_call_id="call_1", tool_name="get_weather", tool_kwargs={"city": "Paris"}),
            ToolCallBlock(
                tool_call_id="call_2", tool_name="lookup_order", tool_kwargs={"order_id": "A-boom"}
            ),
        ]
        return ChatMessage(role="assistant", blocks=calls)

    return MockFunctionCallingLLM(response_generator=reply)


def agent() -> FunctionAgent:
    return FunctionAgent(
        name="weather-and-orders",
        tools=[FunctionTool.from_defaults(tools.get_weather), FunctionTool.from_defaults(tools.lookup_order)],
        llm=weather_and_order_model(),
        system_prompt="Use the tools.",
    )


def payload(span: Any, key: str) -> Any:
    return json.loads(span.attributes[key])


def test_instrumenting_patches_tools_and_runs_once_and_uninstrumenting_restores_each_exactly():
    originals = [owner.__dict__[name] for owner, name in PATCHED]
    assert instrument_framework("llama_index") is True
    try:
        patched = [owner.__dict__[name] for owner, name in PATCHED]
        assert not {id(method) for method in patched} & {id(method) for method in originals}
        assert instrument_framework("llama_index") is False
    finally:
        assert uninstrument_framework("llama_index") is True
    assert [owner.__dict__[name] for owner, name in PATCHED] == originals
    assert uninstrument_framework("llama_index") is False


@pytest.mark.usefixtures("instrumented")
def test_a_function_tool_call_is_a_tool_boundary_and_returns_what_llama_index_would():
    tool = FunctionTool.from_defaults(tools.get_weather)
    with capture_spans() as spans:
        recorded = tool.call(city="Paris")
        recorded_async = asyncio.run(tool.acall(city="Oslo"))
    uninstrument_framework("llama_index")
    assert recorded == tool.call(city="Paris")  # the same ToolOutput, content and raw input/output
    assert recorded_async == asyncio.run(tool.acall(city="Oslo"))
    crossings = spans.by_kind("tool")
    assert [span.attributes["gen_ai.tool.name"] for span in crossings] == ["get_weather", "get_weather"]
    assert [payload(span, "tailcut.request") for span in crossings] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert payload(crossings[0], "tailcut.response") == recorded.raw_output


@pytest.mark.usefixtures("instrumented")
def test_a_tool_that_raises_is_a_failed_boundary_and_raises_the_same_exception():
    tool = FunctionTool.from_defaults(tools.lookup_order)
    with capture_spans() as spans, pytest.raises(tools.OrderServiceError, match="A-boom"):
        asyncio.run(tool.acall(order_id="A-boom"))
    (crossing,) = spans.by_kind("tool")
    assert crossing.attributes["error.type"] == "tests.frameworks.tools.OrderServiceError"
    assert crossing.status.status_code is trace.StatusCode.ERROR


@pytest.mark.usefixtures("instrumented")
def test_a_tailcut_tool_wrapped_as_a_function_tool_is_recorded_once():
    tool = FunctionTool.from_defaults(tailcut.tool(tools.get_weather))
    with capture_spans() as spans:
        asyncio.run(tool.acall(city="Paris"))
    assert len(spans.by_kind("tool")) == 1


@pytest.mark.usefixtures("instrumented")
def test_a_tool_taking_the_workflow_context_records_its_arguments_without_it():
    async def remember(ctx: Context, city: str) -> str:
        await ctx.store.set("city", city)
        return tools.get_weather(city)

    weather = FunctionTool.from_defaults(remember, name="get_weather")
    workflow = FunctionAgent(tools=[weather], llm=weather_and_order_model(), system_prompt="Use the tools.")
    with capture_spans() as spans:
        asyncio.run(_run(workflow))
    (crossing,) = spans.by_kind("tool")  # lookup_order is not a tool of this agent
    assert payload(crossing, "tailcut.request") == {"city": "Paris"}


async def _run(workflow: Any, question: str = QUESTION) -> Any:
    return await workflow.run(user_msg=question)


@pytest.mark.usefixtures("instrumented")
def test_an_agent_run_is_one_trace_rooted_at_the_run_with_its_input_and_output():
    async def main() -> tuple[Any, int]:
        before = trace.get_current_span()
        handler = agent().run(user_msg=QUESTION)
        assert trace.get_current_span() is before  # the run is open in the workflow, not in the caller
        result = await handler
        return result, time.time_ns()

    with capture_spans() as spans:
        result, resumed = asyncio.run(main())
    assert str(result) == ANSWER
    root = spans.root()
    assert root.end_time <= resumed  # the run ended before the awaiter of the handler resumed
    assert root.attributes["tailcut.framework"] == "llama_index"
    assert payload(root, "tailcut.run.input") == QUESTION
    assert payload(root, "tailcut.run.output") == ANSWER
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    crossings = spans.by_kind("tool")
    names = sorted(span.attributes["gen_ai.tool.name"] for span in crossings)
    assert names == ["get_weather", "lookup_order"]
    assert {span.parent.span_id for span in crossings} == {root.context.span_id}
    assert root.attributes["tailcut.trace.tool_calls"] == 2
    assert root.attributes["tailcut.trace.errors"] == 1  # the failed tool, handed back to the model
    assert tools.EXECUTIONS == {"get_weather": 1, "lookup_order": 1}


@pytest.mark.usefixtures("instrumented")
def test_a_multi_agent_workflow_run_is_one_run_whose_agents_are_not_runs_again():
    workflow = AgentWorkflow(agents=[agent()], root_agent="weather-and-orders")
    with capture_spans() as spans:
        result = asyncio.run(_run(workflow))
    assert str(result) == ANSWER
    root = spans.root()
    assert (root.name, payload(root, "tailcut.run.output")) == ("AgentWorkflow", ANSWER)
    assert spans.by_kind("agent") == []
    assert {span.parent.span_id for span in spans.by_kind("tool")} == {root.context.span_id}


@pytest.mark.usefixtures("instrumented")
def test_two_runs_are_two_traces_and_a_run_inside_a_tailcut_run_is_its_nested_agent():
    async def main() -> None:
        await _run(agent())
        async with tailcut.run("outer", input="both"):
            await _run(agent())

    with capture_spans() as spans:
        asyncio.run(main())
    roots = spans.by_kind("root")
    assert [span.name for span in roots] == ["weather-and-orders", "outer"]
    assert len({span.context.trace_id for span in spans}) == 2
    (nested,) = spans.by_kind("agent")
    assert nested.parent.span_id == roots[1].context.span_id
    assert nested.attributes["gen_ai.agent.name"] == "weather-and-orders"


@pytest.mark.usefixtures("instrumented")
def test_without_tailcut_recording_the_agent_runs_unrecorded():
    result = asyncio.run(_run(agent()))
    assert str(result) == ANSWER
    assert tools.EXECUTIONS == {"get_weather": 1, "lookup_order": 1}


@pytest.fixture(scope="module")
def recorded_by_tailcut(tmp_path_factory):
    """The data dir of LlamaIndex runs recorded by ``tailcut.init(auto_instrument=True)`` alone through a
    real ``tailcut collect``, and trace id -> scenario."""
    pytest.importorskip(
        "llama_index.llms.openai",
        reason="llama-index-llms-openai needs openai<3; .ci/run tests LlamaIndex in .venv-openai2",
    )
    from tests.frameworks import harness

    server = harness.scenario_server()
    with server:
        directory = tmp_path_factory.mktemp("llamaindex")
        scenarios = ["clean", "tool_raises_caught", "repeated_call"]
        data = harness.record("llamaindex", "tailcut", scenarios, directory, server)
    return data, {trace: scenario for trace, (_, scenario) in harness.scenarios_by_trace(data).items()}


@pytest.mark.slow
def test_recorded_by_tailcut_alone_each_run_is_one_trace_whose_root_is_the_run(recorded_by_tailcut):
    import duckdb

    data, scenarios = recorded_by_tailcut
    assert sorted(scenarios.values()) == ["clean", "repeated_call", "tool_raises_caught"]
    rows = duckdb.connect().sql(
        f"""select trace_id, span_id, parent_span_id, kind, tool_name, status_code
            from read_parquet('{data / "spans"}/**/*.parquet', union_by_name = true)"""
    )
    spans: dict[str, list[tuple]] = {}
    for row in rows.fetchall():
        spans.setdefault(row[0], []).append(row[1:])
    assert set(spans) == set(scenarios)
    shapes = {}
    for trace_id, rows_of_trace in spans.items():
        (root,) = [row for row in rows_of_trace if row[1] is None]
        assert root[2] == "root"
        children = [row for row in rows_of_trace if row[1] is not None]
        assert {row[1] for row in children} == {root[0]}  # model calls and tools: children of the run
        shapes[scenarios[trace_id]] = sorted(
            (kind, tool or "", status) for _, _, kind, tool, status in children
        )
    assert shapes["clean"] == [("llm", "", "UNSET")] * 2 + [("tool", "get_weather", "UNSET")]
    assert shapes["tool_raises_caught"] == [("llm", "", "UNSET")] * 2 + [("tool", "lookup_order", "ERROR")]
    assert shapes["repeated_call"] == [("llm", "", "UNSET")] * 4 + [("tool", "get_weather", "UNSET")] * 3


@pytest.mark.slow
def test_the_tool_that_raised_leaves_its_finding(recorded_by_tailcut):
    from tailcut.analysis import Dataset

    data, scenarios = recorded_by_tailcut
    findings = Dataset(data).findings()
    failed = [trace for trace, scenario in scenarios.items() if scenario == "tool_raises_caught"]
    errors = findings.filter(findings["category"] == "error").select("trace_id", "span_name", "recovered")
    assert errors.rows() == [(failed[0], "execute_tool lookup_order", True)]


@pytest.mark.slow
def test_recorded_by_openinference_alone_a_run_says_why_it_cannot_be_replayed(tmp_path):
    """OpenInference's LlamaIndex spans: one model call per request (its ``_prepare_chat_with_tools``
    span is no crossing), and a replay that cannot call the agent again (the workflow run records its
    state, not the user's message) exits 3 naming why and how to record instead."""
    pytest.importorskip("llama_index.llms.openai", reason="llama-index-llms-openai needs openai<3")
    pytest.importorskip("openinference.instrumentation.llama_index")
    import pyarrow.parquet as pq

    from tests.frameworks import harness, thirdparty_table

    server = harness.scenario_server()
    with server:
        data = harness.record("llamaindex", "openinference", ["clean"], tmp_path, server)
        harness.export_corpus(data, tmp_path / "corpus")
        envelopes = pq.read_table(tmp_path / "corpus" / "envelopes.parquet").to_pylist()
        with server.forbid():
            status, report, _ = thirdparty_table.replay_json(tmp_path / "corpus", "llamaindex")
    assert sorted(f"{e['boundary']}#{e['occurrence']}" for e in envelopes) == [
        "llm:openai.chat#1",
        "llm:openai.chat#2",
        "tool:get_weather#1",
    ]
    assert all(e["response"] is not None for e in envelopes if e["kind"] == "llm")
    assert status == 3
    (skipped,) = report["skipped"]
    assert "records the workflow's state, not the user's message" in skipped["reason"]
    assert "tailcut.init(auto_instrument=True)" in skipped["reason"]
