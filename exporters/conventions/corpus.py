"""What a replay corpus takes from spans of each instrumentation convention.

**The run.** A trace's run is its parentless span, whatever its kind. Its fields come from the first
source present (the source's name is written beside the field in ``runs.parquet``); a run whose
parentless span has no input takes the input of the first span of the trace (in pre-order) that another
convention recorded with one:

==============  ===========================================================================================
field           sources, in order
==============  ===========================================================================================
input           ``tailcut.run.input``; ``input.value`` (OpenInference: JSON when ``input.mime_type`` is
                ``application/json``, else the text); ``traceloop.entity.input`` (OpenLLMetry: a
                ``{"args": [x], "kwargs": {}}`` call of one argument is unwrapped to ``x``);
                ``gen_ai.input.messages`` (GenAI: one message of text alone is unwrapped to its text)
output          ``tailcut.run.output``; ``output.value``; ``traceloop.entity.output``;
                ``gen_ai.output.messages`` (unwrapped like the input). A LangGraph graph's final state
                (``{"messages": [...]}``, every one a LangChain message) is its last message's content,
                as tailcut records a graph run
outcome         ``tailcut.outcome`` (the other conventions have none)
==============  ===========================================================================================

Ingest may have moved an input or output attribute of a third-party span into its ``request`` or
``response`` column; it is read from there, and its source named by the convention's marker.

**Crossings.** Each boundary crossing's ``convention`` says who recorded it: ``tailcut`` (spans with
``tailcut.attempt``), ``openinference`` (``openinference.span.kind``), ``openllmetry`` (``traceloop.*``,
``llm.*`` or OpenLLMetry's ``gen_ai.openai.api_base``/``gen_ai.is_streaming``) or ``genai`` (the rest).
A third-party tool crossing keeps its recorded arguments as its request, except that OpenLLMetry's
``{"args": [], "kwargs": {...}}`` becomes the keyword arguments, as tailcut records a call, and its
LangChain callback's ``{"input_str": ..., "inputs": {...}, "metadata": ...}`` becomes ``inputs``; and
OpenInference's smolagents record of the bound ``Tool.__call__`` (``{"args": [], "sanitize_inputs_outputs":
true, "kwargs": {...}}``) becomes its keyword arguments (its one positional argument when it has no
keyword arguments). Its response is what the tool returned: a LangChain ``ToolMessage`` (OpenInference's
``{"type": "tool", "data": {...}}``, OpenLLMetry's ``{"output": {"lc": 1, ...}}``) becomes its ``content``.
A third-party ``llm:openai.chat`` crossing is stored as the OpenAI Chat Completions exchange tailcut's
``openai`` instrumentation replays:

=============  ===============================================  ============================================
convention     request                                          response
=============  ===============================================  ============================================
openinference  ``input.value``: the keyword arguments of        ``output.value``: the ``chat.completion``
               ``create()`` (model, messages, tools, params);   body as received (or a stream added up)
               a framework's call (LangChain, smolagents, the
               Agents SDK) rebuilt into that request
               (:mod:`.frameworks`)
openllmetry,   as ingest rebuilt it: ``{"model", "messages",    a ``chat.completion`` rebuilt from
genai          "tools", "parameters"}`` (GenAI message model)   ``gen_ai.output.messages`` (text, tool calls
                                                                with ids), ``gen_ai.response.id``, the
                                                                model, finish reason and token usage
=============  ===============================================  ============================================

What a replay compares of each is in :mod:`tailcut.exporters.conventions.matching`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from tailcut import attributes as attr
from tailcut.canonical import canonicalize, loads
from tailcut.exporters.conventions import frameworks
from tailcut.exporters.conventions import names as n

TAILCUT: Final = "tailcut"
OPENINFERENCE: Final = "openinference"
OPENLLMETRY: Final = "openllmetry"
GENAI: Final = "genai"
#: The boundary whose third-party crossings a replay can serve through the ``openai`` SDK.
OPENAI_CHAT: Final = "llm:openai.chat"
_OPENLLMETRY_KEYS: Final = frozenset({"gen_ai.openai.api_base", "gen_ai.is_streaming"})
#: How to make each convention record content, for messages about what is missing.
CAPTURE_HINTS: Final = {
    TAILCUT: "turn content capture on (tailcut.init(capture_content=True) or TAILCUT_CAPTURE_CONTENT=1)",
    OPENINFERENCE: "leave OPENINFERENCE_HIDE_INPUTS and OPENINFERENCE_HIDE_OUTPUTS unset",
    OPENLLMETRY: "set TRACELOOP_TRACE_CONTENT=true",
    GENAI: "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY and "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
}
#: How to record a run's input, for the message of a run without one.
INPUT_HINT: Final = (
    "pass input= to tailcut.run, or set input.value (OpenInference) or traceloop.entity.input "
    "(OpenLLMetry) on the trace's root span"
)
#: The bound arguments of LlamaIndex's ``Workflow.run`` as OpenInference records them: the workflow's state
#: and its start event's repr, which hold no user message (``user_msg`` went into the context before).
_WORKFLOW_STATE_KEYS: Final = frozenset({"init_state", "start_event"})
#: GenAI finish reasons -> OpenAI's.
_FINISH_REASONS: Final = {"tool_call": "tool_calls", "tool_calls": "tool_calls", "error": "stop"}


class Sourced(NamedTuple):
    """A run field as JSON text, and the attribute it came from (both None when it was not recorded)."""

    value: str | None
    source: str | None


_NONE: Final = Sourced(None, None)


def convention(row: Mapping[str, Any], attributes: Mapping[str, str]) -> str:
    """Who recorded a span of the ``spans`` table (see the module docstring)."""
    if row.get("attempt") is not None:
        return TAILCUT
    if n.OI_SPAN_KIND in attributes:
        return OPENINFERENCE
    if any(k.startswith(("traceloop.", "llm.")) or k in _OPENLLMETRY_KEYS for k in attributes):
        return OPENLLMETRY
    return GENAI


def _json_text(value: str) -> str:
    """An attribute's text as JSON text: itself when it is JSON, else a JSON string."""
    try:
        json.loads(value)
    except ValueError:
        return json.dumps(value)
    return value


def _unwrap_call(value: str) -> str:
    """OpenLLMetry records a call as ``{"args": [...], "kwargs": {...}}``: one positional argument is
    the input."""
    decoded = loads(value)
    if isinstance(decoded, dict) and set(decoded) == {"args", "kwargs"} and not decoded["kwargs"]:
        args = decoded["args"]
        if isinstance(args, list) and len(args) == 1:
            return canonicalize(args[0])[0]
    return value


_INPUT_KEYS: Final = (
    attr.RUN_INPUT,
    n.OI_INPUT_VALUE,
    n.OI_INPUT_MIME_TYPE,
    n.TRACELOOP_ENTITY_INPUT,
    n.GEN_AI_INPUT_MESSAGES,
    "request",
)
_OUTPUT_KEYS: Final = (
    attr.RUN_OUTPUT,
    n.OI_OUTPUT_VALUE,
    n.OI_OUTPUT_MIME_TYPE,
    n.TRACELOOP_ENTITY_OUTPUT,
    n.GEN_AI_OUTPUT_MESSAGES,
    "response",
)


def _single_text(value: str) -> str:
    """GenAI messages: one message whose parts are all text becomes that text (JSON)."""
    decoded = loads(value)
    if isinstance(decoded, list) and len(decoded) == 1 and isinstance(decoded[0], dict):
        parts = decoded[0].get("parts")
        parts = parts if isinstance(parts, list) else []
        texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        if parts and len(texts) == len(parts) and all(isinstance(t, str) for t in texts):
            return canonicalize("".join(texts))[0]
    return value


#: smolagents' ``Tool.__call__(*args, sanitize_inputs_outputs=False, **kwargs)``, bound by OpenInference.
_SMOLAGENTS_CALL: Final = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})


def _bound_tool_call(request: str) -> str | None:
    """OpenInference's smolagents tool record (the bound ``Tool.__call__``, as JSON text in a string) as
    the call's arguments: its keyword arguments, or its one positional argument."""
    decoded = loads(request)
    if isinstance(decoded, str):
        try:
            decoded = json.loads(decoded)
        except ValueError:
            return None
    if not isinstance(decoded, dict) or not {"args", "kwargs"} <= set(decoded) <= _SMOLAGENTS_CALL:
        return None
    args, kwargs = decoded["args"], decoded["kwargs"]
    if args == [] and isinstance(kwargs, dict):
        return canonicalize(kwargs)[0]
    if isinstance(args, list) and len(args) == 1 and not kwargs:
        return canonicalize(args[0])[0]
    return None


def tool_request(convention_name: str, request: str | None) -> str | None:
    """A third-party tool crossing's request as tailcut records one (its arguments by name)."""
    if convention_name == OPENINFERENCE and request is not None:
        return _bound_tool_call(request) or request
    if convention_name != OPENLLMETRY or request is None:
        return request
    decoded = loads(request)
    if isinstance(decoded, dict) and set(decoded) == {"args", "kwargs"} and decoded["args"] == []:
        return canonicalize(decoded["kwargs"])[0]
    if isinstance(decoded, dict) and "input_str" in decoded and isinstance(decoded.get("inputs"), dict):
        # OpenLLMetry's LangChain callback: the arguments are ``inputs`` (``input_str`` is their repr)
        return canonicalize(decoded["inputs"])[0]
    return request


def _message_content(value: Any, kind: str | None = None) -> tuple[bool, Any]:
    """``(True, content)`` when ``value`` is a LangChain message (of class ``kind``, when given):
    serialized (``{"lc": 1, "id": [..., "ToolMessage"], "kwargs": {...}}``) or as ``message_to_dict``
    writes it (``{"type": "tool", "data": {...}}``)."""
    if not isinstance(value, dict):
        return False, None
    data = value.get("data")
    if isinstance(data, dict) and "content" in data and isinstance(value.get("type"), str):
        names = {"tool": "ToolMessage", "ai": "AIMessage", "human": "HumanMessage", "system": "SystemMessage"}
        return kind in (None, names.get(value["type"])), data["content"]
    ids, fields = value.get("id"), value.get("kwargs")
    if value.get("lc") == 1 and isinstance(ids, list) and ids and isinstance(fields, dict):
        return "content" in fields and kind in (None, ids[-1]), fields.get("content")
    return False, None


def input_problem(run_input: str) -> str | None:
    """Why a recorded run input cannot call the agent again (None when it can).

    >>> input_problem('{"init_state": {}, "start_event": "AgentWorkflowStartEvent()", "tags": {}}')[:40]
    "LlamaIndex's workflow run (OpenInference"
    >>> input_problem('"What is the weather in Paris?"') is None
    True
    """
    try:
        decoded = loads(run_input)
    except ValueError:
        return None
    if isinstance(decoded, dict) and set(decoded) >= _WORKFLOW_STATE_KEYS:
        return (
            "LlamaIndex's workflow run (OpenInference's FunctionAgent.run / AgentWorkflow.run span) records "
            "the workflow's state, not the user's message, so the agent cannot be called with it again: "
            "record the agent with tailcut.init(auto_instrument=True) (tailcut's LlamaIndex "
            "instrumentation, alongside OpenInference if you like) to replay it"
        )
    return None


def _graph_answer(value: str | None) -> str | None:
    """A LangGraph graph's output (its final state, ``{"messages": [...], ...}``) as the run's answer:
    the last message's content, as tailcut records a graph run."""
    decoded = loads(value) if value is not None else None
    messages = decoded.get("messages") if isinstance(decoded, dict) else None
    if isinstance(messages, list) and messages:
        found, content = _message_content(messages[-1])
        if found and all(_message_content(m)[0] for m in messages):
            return canonicalize(content)[0]
    return value


def _event_attributes(event: Mapping[str, Any]) -> dict[str, Any]:
    attributes = event.get("attributes")
    if isinstance(attributes, Mapping):
        return dict(attributes)
    return dict(attributes or ())  # a Parquet map read by pyarrow: (key, value) pairs


def recorded_error(span: Mapping[str, Any], message: str | None) -> tuple[str | None, str | None]:
    """A third-party crossing's error as a replay rebuilds it: ``(type, message)``.

    OpenTelemetry's ``exception`` event holds the exception's qualified class (``exception.type``) and
    ``str(exc)`` (``exception.message``), which is what the exception was made of; the status message
    another instrumentor writes is often a rendering of it (LangChain's ``repr`` and traceback under
    OpenInference, smolagents' ``Type: message``) and the ``error_type`` column may be unqualified
    (OpenLLMetry's ``error.type``). Without an event: the column and ``message``.
    """
    if span.get("error_type") is None:
        return None, message
    for event in span.get("events") or ():
        if isinstance(event, Mapping) and event.get("name") == n.EXCEPTION_EVENT:
            found = _event_attributes(event)
            if found.get(n.EXCEPTION_TYPE):
                return str(found[n.EXCEPTION_TYPE]), found.get("exception.message", message)
    return span["error_type"], message


def tool_response(convention_name: str, response: str | None) -> str | None:
    """A third-party tool crossing's response as the tool returned it (what a replay serves the agent).

    A LangChain tool's record is the ``ToolMessage`` LangChain made of what the tool returned
    (OpenInference's ``output.value``; OpenLLMetry's ``{"output": message, "kwargs": ...}``): its
    ``content`` is the return value as LangChain hands it to the model, so the tool returns that.

    >>> tool_response("openinference", '{"data": {"content": "sunny", "type": "tool"}, "type": "tool"}')
    '"sunny"'
    """
    if convention_name == TAILCUT or response is None:
        return response
    decoded = loads(response)
    if convention_name == OPENLLMETRY and isinstance(decoded, dict) and "output" in decoded:
        decoded = decoded["output"]
    found, content = _message_content(decoded, "ToolMessage")
    return canonicalize(content)[0] if found else response


def _field(
    root: Mapping[str, Any], attributes: Mapping[str, str], *, output: bool
) -> tuple[str | None, str | None]:
    tailcut_key, oi_key, oi_mime, traceloop_key, genai_key, column = _OUTPUT_KEYS if output else _INPUT_KEYS
    if tailcut_key in attributes:
        return _json_text(attributes[tailcut_key]), tailcut_key
    if oi_key in attributes:
        text = attributes[oi_key]
        is_json = attributes.get(oi_mime) == n.OI_JSON_MIME_TYPE
        return (_json_text(text) if is_json else json.dumps(text)), oi_key
    if traceloop_key in attributes:
        return _unwrap_call(_json_text(attributes[traceloop_key])), traceloop_key
    if genai_key in attributes:
        return _single_text(_json_text(attributes[genai_key])), genai_key
    stored = root.get(column)
    if stored is None or root.get("kind") == "root":
        return None, None
    if n.OI_SPAN_KIND in attributes:
        return stored, oi_key
    if n.TRACELOOP_SPAN_KIND in attributes:
        return _unwrap_call(stored), traceloop_key
    if root.get("kind") == "llm":  # ingest rebuilt {"messages", ...} from the GenAI attributes
        messages = loads(stored).get("messages")
        return (_single_text(canonicalize(messages)[0]), genai_key) if messages is not None else (None, None)
    return None, None


def run_fields(
    root: Mapping[str, Any],
    attributes: Mapping[str, str],
    descendants: Iterable[tuple[Mapping[str, Any], Mapping[str, str]]] = (),
) -> dict[str, Sourced]:
    """The run's ``input``, ``output`` and ``outcome`` from its parentless span, with their sources.

    A run whose parentless span carries no input takes it from the first of ``descendants`` (the
    trace's other spans with their attributes, in pre-order) recorded by another convention that
    carries one: OpenLLMetry's ``LangGraph.workflow`` under ``invoke_agent LangGraph``, the OpenAI
    Agents SDK's first LLM span under OpenInference's ``Agent workflow``.
    """
    outcome = attributes.get(attr.OUTCOME)
    run_input = Sourced(*_field(root, attributes, output=False))
    if run_input.value is None:
        for row, row_attributes in descendants:
            if convention(row, row_attributes) == TAILCUT:
                continue
            found = Sourced(*_field(row, row_attributes, output=False))
            if found.value is not None:
                run_input = found
                break
    output = Sourced(*_field(root, attributes, output=True))
    if output.source in (n.OI_OUTPUT_VALUE, n.TRACELOOP_ENTITY_OUTPUT):
        output = Sourced(_graph_answer(output.value), output.source)
    return {
        "input": run_input,
        "output": output,
        "outcome": Sourced(outcome, attr.OUTCOME) if outcome is not None else _NONE,
    }


class Exchange(NamedTuple):
    """A crossing's request and response as a replay serves and compares them, or why it cannot be."""

    request: str | None
    response: str | None
    problem: str | None = None


def openai_chat_exchange(
    convention_name: str, span: Mapping[str, Any], attributes: Mapping[str, str]
) -> Exchange:
    """The Chat Completions request and ``chat.completion`` response of a third-party llm crossing.

    ``span`` is the crossing's row of the ``spans`` table with its payload columns resolved.
    """
    request, response = span["request"], span["response"]
    if convention_name == OPENINFERENCE:
        if attributes.get(n.OI_INPUT_MIME_TYPE) == n.OI_JSON_MIME_TYPE:
            request = _openinference_request(span, attributes.get(n.OI_INPUT_VALUE)) or request
        body = _json_object(attributes.get(n.OI_OUTPUT_VALUE))
        if body is not None and isinstance(body.get("choices"), list):  # (a stream's lacks "object")
            return Exchange(request, canonicalize({"object": "chat.completion", **body})[0])
    if response is None:
        return Exchange(request, None)
    decoded = loads(response)
    messages = decoded.get("messages") if isinstance(decoded, dict) else None
    if not isinstance(messages, list):
        return Exchange(request, None, "its recorded reply holds no output messages")
    return Exchange(request, canonicalize(_chat_completion(span, attributes, messages))[0])


def _openinference_request(span: Mapping[str, Any], text: str | None) -> str | None:
    """``input.value`` as the Chat Completions request: ``create()``'s keyword arguments as recorded, or a
    framework's call rebuilt (:mod:`.frameworks`), with what ingest read from ``llm.invocation_parameters``
    and ``llm.tools``; None when it is neither."""
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        return None
    stored = loads(span["request"]) if span.get("request") else {}
    stored = stored if isinstance(stored, dict) else {}
    rebuilt = frameworks.chat_request(
        value, model=span.get("model"), parameters=stored.get("parameters"), tools=stored.get("tools")
    )
    if rebuilt is not None:
        return canonicalize(rebuilt)[0]
    return canonicalize(value)[0] if isinstance(value, dict) else None


def _json_object(text: str | None) -> dict[str, Any] | None:
    """An attribute's text decoded when it is a JSON object, else None (absent, not JSON, not an object)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _chat_completion(
    span: Mapping[str, Any], attributes: Mapping[str, str], messages: list[Any]
) -> dict[str, Any]:
    """A ``chat.completion`` body rebuilt from GenAI output messages and the span's response attributes."""
    choices = []
    for index, message in enumerate(m for m in messages if isinstance(m, dict)):
        parts = [p for p in message.get("parts") or () if isinstance(p, dict)]
        texts = [p.get("content") for p in parts if p.get("type") == "text"]
        calls = [
            {
                "id": p.get("id") or f"call_{span['span_id']}_{index}_{i}",
                "type": "function",
                "function": {"name": p.get("name"), "arguments": _arguments_text(p.get("arguments"))},
            }
            for i, p in enumerate(p for p in parts if p.get("type") == "tool_call")
        ]
        reply: dict[str, Any] = {
            "role": message.get("role") or "assistant",
            "content": "".join(t for t in texts if isinstance(t, str)) if texts else None,
        }
        if calls:
            reply["tool_calls"] = calls
        reason = message.get("finish_reason") or (span.get("finish_reason") if index == 0 else None)
        reason = _FINISH_REASONS.get(reason, reason) if isinstance(reason, str) else None
        choices.append(
            {"index": index, "message": reply, "finish_reason": reason or ("tool_calls" if calls else "stop")}
        )
    body: dict[str, Any] = {
        "id": attributes.get(attr.GEN_AI_RESPONSE_ID) or f"chatcmpl-{span['span_id']}",
        "object": "chat.completion",
        "created": int(span["start_time"].timestamp()) if span.get("start_time") else 0,
        "model": attributes.get(attr.GEN_AI_RESPONSE_MODEL) or span.get("model") or "",
        "choices": choices,
    }
    prompt, completion = span.get("input_tokens"), span.get("output_tokens")
    if prompt is not None or completion is not None:
        body["usage"] = {
            "prompt_tokens": prompt or 0,
            "completion_tokens": completion or 0,
            "total_tokens": (prompt or 0) + (completion or 0),
        }
    return body


def _arguments_text(arguments: Any) -> str:
    """Tool-call arguments as the JSON text the wire carries (GenAI records them parsed)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, separators=(",", ":"), ensure_ascii=False)
