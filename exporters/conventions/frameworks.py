"""The Chat Completions request behind a framework's OpenInference LLM record, rebuilt from its format.

OpenInference's ``openai`` instrumentor records ``create()``'s keyword arguments as ``input.value``: the
request itself. A framework's OpenInference instrumentor records the *framework's* call instead, one step
before the framework builds the request the ``openai`` SDK receives. Each such format is rebuilt the way
the framework builds its request, so a replay compares what was recorded:

================  ====================================  ================================================
format            ``input.value`` (JSON)                rebuilt into
================  ====================================  ================================================
``langchain``     ``{"messages": [[m, ...]]}``, each    ``messages`` as ``langchain-openai`` converts
                  ``m`` LangChain's serialized message  them (``type`` -> role; ``content``;
                  (``{"lc": 1, "type": "constructor",   ``tool_calls`` from ``kwargs.tool_calls``, their
                  "id": [..., "HumanMessage"],          ``args`` as the JSON ``arguments``; a tool
                  "kwargs": {...}}``)                   message's ``tool_call_id``; ``name``); the
                                                        request parameters of
                                                        ``llm.invocation_parameters``
``smolagents``    ``Model.generate``'s bound            ``messages`` as smolagents' ``OpenAIModel``
                  arguments: ``messages`` (each the     builds them (``get_clean_message_list``:
                  ``ChatMessage(role=<MessageRole...>,  tool-call -> assistant, tool-response -> user,
                  content=[...], ...)`` repr, or a      consecutive messages of one role merged, texts
                  dict), ``stop_sequences``,            joined by a newline); ``stop`` from
                  ``response_format``,                  ``stop_sequences``, ``response_format`` when
                  ``tools_to_call_from`` (object        given, the ``tools`` of ``llm.tools``, and
                  reprs), ``kwargs``                    ``kwargs`` and ``llm.invocation_parameters``
                                                        (the model's own kwargs) as sent
``messages``      a list of Chat Completions messages   ``messages`` as they are (the OpenAI Agents SDK's
                  (``{"role", "content", ...}``)        ``generation`` span), with the request
                                                        parameters of ``llm.invocation_parameters``
================  ====================================  ================================================

Every rebuilt request names its format under :data:`REBUILT_KEY` (so a replay compares it by what the
format holds: :mod:`tailcut.exporters.conventions.matching`) and has the span's ``model``. Request
parameters are the Chat Completions body fields (:data:`REQUEST_FIELDS`) among what the record holds, a
null one left out (the SDKs do not send ``None``); the rest of an invocation-parameters record (LangChain's
``_type`` and ``model_name``, the Agents SDK's ``base_url``) is not part of the request.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any, Final

#: The key a rebuilt request names its format under (never a Chat Completions field).
REBUILT_KEY: Final = "$tailcut.rebuilt_from"
LANGCHAIN: Final = "langchain"
SMOLAGENTS: Final = "smolagents"
MESSAGES: Final = "messages"
#: format -> how a message names it: the framework whose record it is.
FRAMEWORKS: Final = {
    LANGCHAIN: "LangChain",
    SMOLAGENTS: "smolagents",
    MESSAGES: "a message list (the OpenAI Agents SDK's)",
}
#: The Chat Completions request body's fields (``POST /v1/chat/completions``), ``messages`` aside.
REQUEST_FIELDS: Final = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "model",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
#: LangChain message class -> Chat Completions role (``langchain_openai``'s ``_convert_message_to_dict``).
_LANGCHAIN_ROLES: Final = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
}
#: smolagents' ``tool_role_conversions``: the roles its ``OpenAIModel`` sends for tool steps.
_SMOLAGENTS_ROLES: Final = {"tool-call": "assistant", "tool-response": "user"}
_SMOLAGENTS_ARGUMENTS: Final = frozenset({"stop_sequences", "tools_to_call_from", "kwargs"})
#: ``ChatMessage(role=<MessageRole.USER: 'user'>, ...``: the enum's repr is not Python; its value is.
_CHAT_MESSAGE: Final = re.compile(
    r"^ChatMessage\(role=<MessageRole\.\w+: '(?P<role>[^']*)'>(?P<rest>.*)\)$", re.S
)


def chat_request(
    input_value: Any,
    *,
    model: Any,
    parameters: Mapping[str, Any] | None,
    tools: Any,
) -> dict[str, Any] | None:
    """The Chat Completions request a framework's OpenInference LLM record stands for, or None.

    Parameters
    ----------
    input_value
        The span's ``input.value``, decoded.
    model
        The span's model (``llm.model_name``).
    parameters
        ``llm.invocation_parameters``, decoded.
    tools
        The tool definitions of ``llm.tools`` (each the JSON schema the model was sent).

    Returns
    -------
    dict or None
        The request, with :data:`REBUILT_KEY`; None when ``input_value`` is no framework format (it
        is ``create()``'s keyword arguments already, or unknown).

    Examples
    --------
    >>> human = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"],
    ...          "kwargs": {"content": "hi", "type": "human"}}
    >>> request = chat_request({"messages": [[human]]}, model="m", parameters={"_type": "openai-chat",
    ...                        "temperature": 0.0, "stop": None}, tools=None)
    >>> request["messages"], request["temperature"], request["model"], request[REBUILT_KEY]
    ([{'content': 'hi', 'role': 'user'}], 0.0, 'm', 'langchain')
    """
    parameters = parameters if isinstance(parameters, Mapping) else {}
    if _is_langchain(input_value):
        request = {"messages": [_langchain_message(m) for m in input_value["messages"][0]]}
        request.update(_request_fields(parameters))
        return _finish(request, LANGCHAIN, model, tools)
    if _is_smolagents(input_value):
        return _finish(_smolagents_request(input_value, parameters), SMOLAGENTS, model, tools)
    if isinstance(input_value, list) and input_value and all(_is_message(m) for m in input_value):
        return _finish({"messages": list(input_value), **_request_fields(parameters)}, MESSAGES, model, tools)
    return None


def _finish(request: dict[str, Any], name: str, model: Any, tools: Any) -> dict[str, Any]:
    if model is not None:
        request.setdefault("model", model)
    if "tools" not in request and isinstance(tools, list) and tools and all(_is_tool(t) for t in tools):
        request["tools"] = tools
    request[REBUILT_KEY] = name
    return request


def _request_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k in REQUEST_FIELDS and v is not None}


def _is_message(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("role"), str)


def _is_tool(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "function" and "function" in value


# -- LangChain ----------------------------------------------------------------------------------------------


def _is_serialized_message(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and value.get("lc") == 1
        and isinstance(value.get("id"), list)
        and bool(value["id"])
        and isinstance(value.get("kwargs"), Mapping)
    )


def _is_langchain(value: Any) -> bool:
    """``{"messages": [[serialized message, ...]]}``: one prompt (LangChain starts one LLM run per prompt)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("messages"), list):
        return False
    prompts = value["messages"]
    return (
        len(prompts) == 1
        and isinstance(prompts[0], list)
        and bool(prompts[0])
        and all(_is_serialized_message(m) for m in prompts[0])
    )


def _langchain_message(serialized: Mapping[str, Any]) -> dict[str, Any]:
    """One serialized LangChain message as ``langchain-openai`` sends it."""
    kind = str(serialized["id"][-1]).removesuffix("Chunk")
    fields = serialized["kwargs"]
    extra = fields.get("additional_kwargs") if isinstance(fields.get("additional_kwargs"), Mapping) else {}
    message: dict[str, Any] = {"content": fields.get("content")}
    if kind == "ChatMessage":
        message["role"] = fields.get("role")
    elif kind == "SystemMessage":
        message["role"] = extra.get("__openai_role__", "system")
    else:
        message["role"] = _LANGCHAIN_ROLES.get(kind, kind)
    if kind == "ToolMessage":
        message["tool_call_id"] = fields.get("tool_call_id")
        return message
    name = fields.get("name") or extra.get("name")
    if name is not None:
        message["name"] = name
    if kind == "AIMessage":
        calls = [_langchain_call(c, valid=True) for c in fields.get("tool_calls") or ()]
        calls += [_langchain_call(c, valid=False) for c in fields.get("invalid_tool_calls") or ()]
        if not calls and isinstance(extra.get("tool_calls"), list):
            calls = [
                {k: v for k, v in c.items() if k in ("id", "type", "function")}
                for c in extra["tool_calls"]
                if isinstance(c, Mapping)
            ]
        if calls:
            message["tool_calls"] = calls
        elif "function_call" in extra:
            message["function_call"] = extra["function_call"]
        if "tool_calls" in message or "function_call" in message:
            message["content"] = message["content"] or None
    return message


def _langchain_call(call: Any, *, valid: bool) -> dict[str, Any]:
    call = call if isinstance(call, Mapping) else {}
    arguments = call.get("args")
    if valid:
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "type": "function",
        "id": call.get("id"),
        "function": {"name": call.get("name"), "arguments": arguments},
    }


# -- smolagents ----------------------------------------------------------------------------------------------


def _is_smolagents(value: Any) -> bool:
    """``Model.generate(messages, stop_sequences, response_format, tools_to_call_from, **kwargs)``, bound."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("messages"), list)
        and _SMOLAGENTS_ARGUMENTS.issubset(value)
    )


def _smolagents_request(value: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """What ``OpenAIModel._prepare_completion_kwargs`` sends for these bound arguments."""
    request: dict[str, Any] = {"messages": _clean_messages(_smolagents_message(m) for m in value["messages"])}
    if value.get("stop_sequences") is not None:
        request["stop"] = value["stop_sequences"]
    if value.get("response_format") is not None:
        request["response_format"] = value["response_format"]
    kwargs = value.get("kwargs")
    request.update(kwargs if isinstance(kwargs, Mapping) else {})
    request.update(parameters)  # the model's own kwargs (llm.invocation_parameters holds them with these)
    return request


def _smolagents_message(message: Any) -> dict[str, Any]:
    """A ``ChatMessage``'s role and content, from its repr or its dict."""
    if isinstance(message, Mapping):
        return {"role": message.get("role"), "content": message.get("content")}
    match = _CHAT_MESSAGE.match(message) if isinstance(message, str) else None
    if match is None:
        return {"role": None, "content": message}
    return {"role": match["role"], "content": _repr_field(match["rest"], "content")}


def _repr_field(rest: str, name: str) -> Any:
    """The literal value of keyword ``name`` in the rest of a dataclass repr (``, content=[...], ...``)."""
    for text in (rest, rest.split(", raw=", 1)[0]):  # ``raw`` may hold an object repr that is not Python
        try:  # a recorded text, not code: parsed, never run; too deep a nesting is no message either
            call = ast.parse(f"f(_{text})", mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for keyword in getattr(call, "keywords", ()):
            if keyword.arg == name:
                try:
                    return ast.literal_eval(keyword.value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    return None
    return None


def _clean_messages(messages: Any) -> list[dict[str, Any]]:
    """smolagents' ``get_clean_message_list``: tool roles converted, consecutive same-role messages merged."""
    cleaned: list[dict[str, Any]] = []
    for message in messages:
        role = _SMOLAGENTS_ROLES.get(message["role"], message["role"])
        content = message["content"]
        if cleaned and cleaned[-1]["role"] == role and isinstance(content, list):
            last = cleaned[-1]["content"]
            if isinstance(last, str):  # flattened to text
                texts = [b.get("text") for b in content if isinstance(b, Mapping)]
                cleaned[-1]["content"] = last + "\n" + (texts[0] if texts else "")
                continue
            for block in content:
                if (
                    isinstance(block, Mapping)
                    and block.get("type") == "text"
                    and last
                    and isinstance(last[-1], Mapping)
                    and last[-1].get("type") == "text"
                ):
                    last[-1] = {**last[-1], "text": f"{last[-1].get('text')}\n{block.get('text')}"}
                else:
                    last.append(block)
            continue
        cleaned.append({"role": role, "content": list(content) if isinstance(content, list) else content})
    return cleaned
