"""An agent instrumented only by a third-party convention: the real ``openai`` SDK plus hand-made spans.

Its root span and its tool span carry the attributes of ``THIRDPARTY_CONVENTION`` (``openinference``,
``openllmetry`` or ``genai``), as an agent written for that ecosystem would set them; its model calls are
recorded by that convention's OpenAI instrumentor (see ``tests/thirdparty_record.py``). It never calls
``tailcut.init()``. Its tool is wrapped with ``@tailcut.tool``, which does nothing while tailcut does not
record, and lets ``tailcut replay`` serve the tool or run it live at a cut.

The entry point takes the run's recorded input: the question, or (GenAI) the text of its one message. A
question that mentions "stream" gets its answer streamed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
from opentelemetry import trace

import tailcut

CONVENTION_ENV = "THIRDPARTY_CONVENTION"
MODEL_URL_ENV = "THIRDPARTY_MODEL_URL"
MODEL = "gpt-4o-mini"
WEATHER = {"Paris": {"sky": "sunny", "celsius": 21}, "Oslo": {"sky": "snow", "celsius": -4}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@tailcut.tool(name="get_weather")
def get_weather(city: str) -> dict[str, Any]:
    return WEATHER.get(city, {"sky": "unknown"})


@tailcut.tool(name="get_weather")
def get_weather_fahrenheit(city: str) -> dict[str, Any]:
    """The changed tool of the cut-point test: another unit, so the model is told something else."""
    found = dict(WEATHER.get(city, {"sky": "unknown"}))
    if "celsius" in found:
        found["fahrenheit"] = found.pop("celsius") * 9 / 5 + 32
    return found


def _root_attributes(convention: str, question: str) -> dict[str, Any]:
    if convention == "openinference":
        return {"openinference.span.kind": "AGENT", "input.value": question, "input.mime_type": "text/plain"}
    if convention == "openllmetry":
        call = json.dumps({"args": [question], "kwargs": {}})
        return {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "weather",
            "traceloop.entity.input": call,
        }
    message = [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "weather",
        "gen_ai.input.messages": json.dumps(message),
    }


def _root_output(convention: str, answer: str) -> dict[str, Any]:
    if convention == "openinference":
        return {"output.value": answer, "output.mime_type": "text/plain"}
    if convention == "openllmetry":
        return {"traceloop.entity.output": json.dumps(answer)}
    return {
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
        )
    }


def _tool_attributes(convention: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if convention == "openinference":
        return {
            "openinference.span.kind": "TOOL",
            "tool.name": "get_weather",
            "input.value": json.dumps(arguments),
            "input.mime_type": "application/json",
        }
    if convention == "openllmetry":
        call = json.dumps({"args": [], "kwargs": arguments})
        return {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_weather",
            "traceloop.entity.input": call,
        }
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }


def _tool_output(convention: str, result: Any) -> dict[str, Any]:
    text = json.dumps(result)
    if convention == "openinference":
        return {"output.value": text, "output.mime_type": "application/json"}
    if convention == "openllmetry":
        return {"traceloop.entity.output": text}
    return {"gen_ai.tool.call.result": text}


def _ask(question: str, tool: Any) -> str:
    convention = os.environ.get(CONVENTION_ENV, "openinference")
    tracer = trace.get_tracer("thirdparty-agent")
    client = openai.OpenAI(
        base_url=os.environ.get(MODEL_URL_ENV, "http://127.0.0.1:9/v1"), api_key="test", max_retries=0
    )
    with tracer.start_as_current_span(
        "weather agent", attributes=_root_attributes(convention, question)
    ) as root:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=0)
        call = first.choices[0].message.tool_calls[0]
        arguments = json.loads(call.function.arguments)
        with tracer.start_as_current_span(
            "get_weather", attributes=_tool_attributes(convention, arguments)
        ) as span:
            result = tool(**arguments)
            span.set_attributes(_tool_output(convention, result))
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        if "stream" in question:  # the answer as a stream: served from a record that has no events
            with client.chat.completions.create(
                model=MODEL, messages=messages, temperature=0, stream=True
            ) as stream:
                answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        else:
            second = client.chat.completions.create(model=MODEL, messages=messages, temperature=0)
            answer = second.choices[0].message.content or ""
        root.set_attributes(_root_output(convention, answer))
        client.close()
        return answer


def agent(question: str) -> str:
    """The entry point ``tailcut replay --agent tests.thirdparty_agent:agent`` calls."""
    return _ask(question, get_weather)


def agent_fahrenheit(question: str) -> str:
    """The same agent with the changed tool."""
    return _ask(question, get_weather_fahrenheit)


def agent_reworded(question: str) -> str:
    """The same agent with a reworded prompt: every model request differs from the record."""
    return _ask(f"Please tell me: {question}", get_weather)
