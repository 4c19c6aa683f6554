"""Hand-built span trees in the shapes framework instrumentors record (OpenInference, OpenLLMetry), as OTLP
JSON documents that ``tailcut ingest`` reads: each scenario says which finding it must give and where.

The trees follow what the instrumentors write: smolagents under OpenInference (an ``AGENT`` run span,
``CHAIN`` spans named ``Step N`` whose errors are ``exception`` events, or ``agent.step_recovery`` events
for the errors smolagents expects, ``LLM`` and ``TOOL`` spans), the OpenAI Agents SDK (``Agent workflow``
root, ``AGENT`` span, ``TOOL`` function spans), LangGraph (``CHAIN`` graph and node spans, ``LLM``, ``TOOL``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

START = 1_767_225_600_000_000_000
MS = 1_000_000


@dataclass
class Span:
    """One span of a tree: its name, OpenInference kind, parent (by name), times (ms after the trace's
    start)."""

    name: str
    kind: str
    parent: str | None
    start: int
    end: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # status ERROR with this message
    events: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def exception(kind: str, message: str) -> tuple[str, dict[str, str]]:
    return ("exception", {"exception.type": kind, "exception.message": message})


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value if isinstance(value, str) else json.dumps(value)}


def _attributes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in values.items()]


def document(trees: Mapping[str, list[Span]], service: str = "framework-agent") -> dict[str, Any]:
    """An OTLP JSON export request of ``trees`` (trace id hex -> spans)."""
    spans = []
    for trace_id, tree in trees.items():
        ids = {span.name: f"{index + 1:016x}" for index, span in enumerate(tree)}
        for span in tree:
            body: dict[str, Any] = {
                "traceId": trace_id,
                "spanId": ids[span.name],
                "name": span.name.split("#")[0],
                "kind": 1,
                "startTimeUnixNano": str(START + span.start * MS),
                "endTimeUnixNano": str(START + span.end * MS),
                "attributes": _attributes({"openinference.span.kind": span.kind, **span.attributes}),
            }
            if span.parent is not None:
                body["parentSpanId"] = ids[span.parent]
            if span.error is not None:
                body["status"] = {"code": 2, "message": span.error}
            if span.events:
                body["events"] = [
                    {"name": name, "timeUnixNano": str(START + span.end * MS), "attributes": _attributes(a)}
                    for name, a in span.events
                ]
            spans.append(body)
    scope = {"scope": {"name": "openinference.instrumentation"}, "spans": spans}
    resource = {"attributes": _attributes({"service.name": service})}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def write(path: Path, trees: Mapping[str, list[Span]]) -> Path:
    path.write_text(json.dumps(document(trees)))
    return path


def llm(name: str, parent: str, start: int, end: int, **attributes: Any) -> Span:
    return Span(
        name,
        "LLM",
        parent,
        start,
        end,
        {
            "llm.model_name": "gpt-4o-mini",
            "llm.provider": "openai",
            "llm.token_count.prompt": 50,
            "llm.token_count.completion": 10,
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Is A1 in stock?",
            **attributes,
        },
    )


def tool(name: str, parent: str, start: int, end: int, arguments: Any, result: str | None, **kw: Any) -> Span:
    attributes = {"tool.name": name.split("#")[0], "input.value": json.dumps(arguments)}
    attributes["input.mime_type"] = "application/json"
    if result is not None:
        attributes["output.value"] = result
    return Span(name, "TOOL", parent, start, end, attributes, **kw)


# ------------------------------------------------------------------------------------------- the scenarios


@dataclass(frozen=True)
class Scenario:
    """A tree and what classify must find: category -> (span name, layer), and ``recovered``."""

    tree: list[Span]
    expected: dict[str, tuple[str, str]]
    recovered: bool | None = None
    signals: tuple[str, ...] = ()


def _ai_message_with_invalid_call() -> str:
    """A LangChain ``AIMessage`` as OpenInference records a step's output: the model's tool call LangChain
    could not parse, in ``invalid_tool_calls`` with its error."""
    error = (
        'Function get_weather arguments:\n\n{"city": "Paris"\n\nare not valid JSON. Received JSONDecodeError '
        "Expecting ',' delimiter: line 1 column 17 (char 16)"
    )
    call = {"args": '{"city": "Paris"', "error": error, "id": "call_1", "name": "get_weather"}
    message = {"content": "", "invalid_tool_calls": [{**call, "type": "invalid_tool_call"}], "tool_calls": []}
    return json.dumps({"messages": [{"data": message, "type": "ai"}]})


_WEATHER_SCHEMA: Final = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def _agents_run(arguments: dict[str, str]) -> list[Span]:
    """An Agents SDK run as OpenInference records it: the model calls ``get_weather`` with ``arguments``."""
    call = "llm.output_messages.0.message.tool_calls.0.tool_call.function"
    reply = {
        "llm.output_messages.0.message.role": "assistant",
        f"{call}.name": "get_weather",
        f"{call}.arguments": json.dumps(arguments),
    }
    weather = tool("get_weather", "Support", 210, 300, arguments, '{"sky": "sunny"}')
    weather.attributes["tool.parameters"] = json.dumps(_WEATHER_SCHEMA)
    return [
        Span("Agent workflow", "CHAIN", None, 0, 500),
        Span("Support", "AGENT", "Agent workflow", 5, 495),
        llm("generation", "Support", 10, 200, **reply),
        weather,
        llm("generation#2", "Support", 310, 490),
    ]


def _smolagents_run(*steps: Span, outcome: str | None = None) -> list[Span]:
    root = {"smolagents.task": "check stock"} | ({"tailcut.outcome": outcome} if outcome else {})
    return [Span("ToolCallingAgent.run", "AGENT", None, 0, 1000, root), *steps]


SCENARIOS: dict[str, Scenario] = {
    # smolagents ToolCallingAgent: the tool raises, smolagents hands the error back, the run goes on
    "smolagents_tool_raises": Scenario(
        _smolagents_run(
            Span(
                "Step 1",
                "CHAIN",
                "ToolCallingAgent.run",
                10,
                400,
                events=[
                    (
                        "agent.step_recovery",
                        {
                            "type": "AgentToolExecutionError",
                            "message": 'Error executing tool \'check_stock\' with arguments {"sku": "A1"}: '
                            "RuntimeError: warehouse offline\nPlease try again or use another tool",
                            "severity": "expected",
                        },
                    )
                ],
            ),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool(
                "check_stock",
                "Step 1",
                210,
                390,
                {"sku": "A1"},
                None,
                error="RuntimeError: warehouse offline",
                events=[exception("RuntimeError", "warehouse offline")],
            ),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ),
        {"error": ("check_stock", "environment")},
        recovered=True,
        signals=("failed boundary", "tool_exception"),
    ),
    # the OpenAI Agents SDK: a tool failed fatally; the tool and agent spans are ERROR, the root is OK
    "openai_agents_fatal_tool": Scenario(
        [
            Span("Agent workflow", "CHAIN", None, 0, 500),
            Span(
                "Support",
                "AGENT",
                "Agent workflow",
                5,
                495,
                error="UserError: Error running tool lookup_order",
            ),
            llm("response", "Support", 10, 200),
            tool(
                "lookup_order",
                "Support",
                210,
                300,
                {"order_id": "M-1044"},
                None,
                error="Error running tool lookup_order",
                events=[exception("UserError", "Error running tool lookup_order: ConnectionError: refused")],
            ),
        ],
        {"error": ("lookup_order", "environment")},
        recovered=False,  # its agent failed, though the workflow root stays OK
        signals=("failed boundary", "tool_exception", "run failed"),
    ),
    # a tool's result is an HTTP error text; its span stays OK
    "tool_returns_403": Scenario(
        _smolagents_run(
            Span("Step 1", "CHAIN", "ToolCallingAgent.run", 10, 400),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool("fetch_page", "Step 1", 210, 390, {"url": "http://127.0.0.1/a"}, "Error 403: Forbidden"),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ),
        {"error": ("fetch_page", "environment")},
        recovered=True,
        signals=("failure observation", "auth"),
    ),
    # a provider's rate-limit body in a tool result, and the run fails because of it
    "tool_rate_limited_run_fails": Scenario(
        _smolagents_run(
            Span("Step 1", "CHAIN", "ToolCallingAgent.run", 10, 400),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool(
                "search",
                "Step 1",
                210,
                390,
                {"q": "stock"},
                '{"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}',
            ),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
            outcome="fail",
        ),
        {"error": ("search", "environment")},
        recovered=False,
        signals=("failure observation", "rate_limited"),
    ),
    # smolagents CodeAgent: the code failed; the step span records it, the next model call is told
    "smolagents_code_execution_failed": Scenario(
        [
            Span("CodeAgent.run", "AGENT", None, 0, 1000),
            Span(
                "Step 1",
                "CHAIN",
                "CodeAgent.run",
                10,
                400,
                error="AgentExecutionError",
                events=[
                    exception(
                        "AgentExecutionError",
                        "Code execution failed at line 'stock = check_stock(\"A1\")' due to: "
                        "InterpreterError: 429 Client Error: Too Many Requests",
                    )
                ],
            ),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            Span("Step 2", "CHAIN", "CodeAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ],
        {"error": ("OpenAIServerModel.generate#2", "environment")},
        recovered=True,
        signals=("failure observation", "rate_limited"),
    ),
    # LlamaIndex under OpenInference: a preparation span beside each model call is no model call
    "llamaindex_preparation_span": Scenario(
        [
            Span("FunctionAgent.run", "AGENT", None, 0, 1000),
            Span(
                "FunctionAgent.step#1",
                "CHAIN",
                "FunctionAgent.run",
                10,
                400,
                error="ToolError",
                events=[exception("ToolError", "Code execution failed due to: ReadTimeout")],
            ),
            Span("FunctionAgent.step#2", "CHAIN", "FunctionAgent.run", 410, 990),
            llm("OpenAI._prepare_chat_with_tools", "FunctionAgent.step#2", 415, 418),
            llm("OpenAI.astream_chat", "FunctionAgent.step#2", 420, 980),
        ],
        {"error": ("OpenAI.astream_chat", "environment")},
        recovered=True,
        signals=("failure observation", "timeout"),
    ),
    # smolagents CodeAgent: the model's code does not parse; the harness says so
    "smolagents_code_parsing_failed": Scenario(
        [
            Span("CodeAgent.run", "AGENT", None, 0, 1000),
            Span(
                "Step 1",
                "CHAIN",
                "CodeAgent.run",
                10,
                400,
                error="AgentParsingError",
                events=[exception("AgentParsingError", "Code parsing failed on line 3 due to: SyntaxError")],
            ),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            Span("Step 2", "CHAIN", "CodeAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ],
        {"schema_violation": ("OpenAIServerModel.generate", "model")},
        recovered=True,
    ),
    # smolagents: the model called a tool with an argument it does not take
    "smolagents_unexpected_argument": Scenario(
        _smolagents_run(
            Span(
                "Step 1",
                "CHAIN",
                "ToolCallingAgent.run",
                10,
                400,
                events=[
                    (
                        "agent.step_recovery",
                        {
                            "type": "AgentToolCallError",
                            "message": 'Invalid call to tool \'check_stock\' with arguments {"item": "A1"}: '
                            "forward() got an unexpected keyword argument 'item'\n"
                            "You should call this tool with correct input arguments.",
                        },
                    )
                ],
            ),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool(
                "check_stock",
                "Step 1",
                210,
                390,
                {"item": "A1"},
                None,
                error="TypeError: forward() got an unexpected keyword argument 'item'",
                events=[exception("TypeError", "forward() got an unexpected keyword argument 'item'")],
            ),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ),
        {"schema_violation": ("OpenAIServerModel.generate", "tool_schema")},  # the refusal, no error
        recovered=True,
    ),
    # LangGraph under OpenInference: LangChain could not parse the model's tool call (invalid_tool_calls on
    # the message), the prebuilt agent ends the graph: no tool span, the step's result carries the report
    "langgraph_invalid_tool_call": Scenario(
        [
            Span("LangGraph", "CHAIN", None, 0, 500),
            Span(
                "call_model",
                "CHAIN",
                "LangGraph",
                10,
                300,
                {"output.value": _ai_message_with_invalid_call(), "output.mime_type": "application/json"},
            ),
            llm("ChatOpenAI", "call_model", 20, 290),
            Span("should_continue", "CHAIN", "LangGraph", 310, 320, {"output.value": "__end__"}),
        ],
        {"schema_violation": ("ChatOpenAI", "model")},
        recovered=True,
    ),
    # the OpenAI Agents SDK ran a tool with the model's broken JSON: the tool span fails with the SDK's
    # generic error; the failure is the model's output, not the tool's
    "openai_agents_broken_json_arguments": Scenario(
        [
            Span("Agent workflow", "CHAIN", None, 0, 500),
            Span("Support", "AGENT", "Agent workflow", 5, 495),
            llm("generation", "Support", 10, 200),
            tool(
                "lookup_order",
                "Support",
                210,
                300,
                '{"order_id": "M-1044"',
                "An error occurred while running the tool. Please try again.",
                error="Error running tool (non-fatal)",
            ),
            llm("generation#2", "Support", 310, 490),
        ],
        {"schema_violation": ("generation", "model")},
        recovered=True,
    ),
    # the Agents SDK under OpenInference records no tool list on the generation span, only each tool span's
    # tool.parameters: a call with an argument that schema forbids (the SDK drops it and runs the tool)
    "openai_agents_extra_argument": Scenario(
        _agents_run({"city": "Paris", "units": "kelvin"}),
        {"schema_violation": ("generation", "tool_schema")},
        recovered=True,
    ),
    "clean_agents_call_within_the_recorded_schema": Scenario(_agents_run({"city": "Paris"}), {}),
    # a run that fails with no failed boundary and no failure observation: silent_degradation
    "failed_outcome_clean_boundaries": Scenario(
        _smolagents_run(
            Span("Step 1", "CHAIN", "ToolCallingAgent.run", 10, 400),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool("check_stock", "Step 1", 210, 390, {"sku": "A1"}, "in stock: 4"),
            outcome="fail",
        ),
        {"silent_degradation": ("OpenAIServerModel.generate", "prompt")},
        recovered=False,
    ),
    # clean runs: results that mention errors are not failures
    "clean_mentions_404": Scenario(
        _smolagents_run(
            Span("Step 1", "CHAIN", "ToolCallingAgent.run", 10, 400),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool(
                "search", "Step 1", 210, 390, {"q": "404"}, "The page says error 404 pages are customisable."
            ),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ),
        {},
    ),
    "clean_run": Scenario(
        _smolagents_run(
            Span("Step 1", "CHAIN", "ToolCallingAgent.run", 10, 400),
            llm("OpenAIServerModel.generate", "Step 1", 20, 200),
            tool("check_stock", "Step 1", 210, 390, {"sku": "A1"}, "in stock: 4"),
            Span("Step 2", "CHAIN", "ToolCallingAgent.run", 410, 990),
            llm("OpenAIServerModel.generate#2", "Step 2", 420, 980),
        ),
        {},
    ),
}


def trace_ids() -> dict[str, str]:
    """A trace id per scenario (stable)."""
    return {name: f"{index + 1:032x}" for index, name in enumerate(SCENARIOS)}
