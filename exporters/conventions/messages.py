"""Rebuild ``request``/``response`` payloads of third-party spans, so replay and hashing work on them too.

tailcut's own spans carry their payloads whole (``tailcut.request``/``tailcut.response``). Other
instrumentations spread them over many attributes, each convention its own way; this module gathers them
into one shape, the OpenTelemetry GenAI message model (``{"role", "parts": [...]}`` with ``text``,
``tool_call``, ``tool_call_response`` and ``reasoning`` parts), and the caller encodes it as canonical JSON.
Every attribute read into a payload is reported as consumed, so it leaves the ``attributes`` map; an
attribute this module does not understand is never consumed, so nothing is lost. The mapping itself is
tabulated in :mod:`tailcut.exporters.conventions.mapping`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

import orjson

from tailcut import attributes as attr
from tailcut.canonical import canonicalize
from tailcut.exporters.conventions import names as n

#: The GenAI request parameters folded into a rebuilt llm request (they also stay in ``attributes``).
_PARAMETERS: Final = {
    attr.GEN_AI_REQUEST_TEMPERATURE: "temperature",
    attr.GEN_AI_REQUEST_TOP_P: "top_p",
    attr.GEN_AI_REQUEST_TOP_K: "top_k",
    attr.GEN_AI_REQUEST_MAX_TOKENS: "max_tokens",
    attr.GEN_AI_REQUEST_SEED: "seed",
    attr.GEN_AI_REQUEST_STOP_SEQUENCES: "stop_sequences",
    attr.GEN_AI_REQUEST_FREQUENCY_PENALTY: "frequency_penalty",
    attr.GEN_AI_REQUEST_PRESENCE_PENALTY: "presence_penalty",
    attr.GEN_AI_REQUEST_CHOICE_COUNT: "choice_count",
}
#: Exact keys whose presence means a span has content worth rebuilding.
CONTENT_KEYS: Final = frozenset(
    {
        n.GEN_AI_INPUT_MESSAGES,
        n.GEN_AI_OUTPUT_MESSAGES,
        n.GEN_AI_SYSTEM_INSTRUCTIONS,
        n.GEN_AI_TOOL_DEFINITIONS,
        n.GEN_AI_PROMPT,
        n.GEN_AI_COMPLETION,
        attr.GEN_AI_TOOL_CALL_ARGUMENTS,
        attr.GEN_AI_TOOL_CALL_RESULT,
        n.OI_TOOL_CALL_ARGUMENTS,
        n.OI_INPUT_VALUE,
        n.OI_OUTPUT_VALUE,
        n.OI_LLM_INVOCATION_PARAMETERS,
        n.TRACELOOP_ENTITY_INPUT,
        n.TRACELOOP_ENTITY_OUTPUT,
    }
)
#: Key prefixes of flattened content lists.
CONTENT_PREFIXES: Final = (
    n.OI_LLM_INPUT_MESSAGES + ".",
    n.OI_LLM_OUTPUT_MESSAGES + ".",
    n.OI_LLM_PROMPTS + ".",
    n.OI_LLM_CHOICES + ".",
    n.OI_LLM_TOOLS + ".",
    n.OI_RETRIEVAL_DOCUMENTS + ".",
    n.OPENLLMETRY_PROMPT_PREFIX,
    n.OPENLLMETRY_COMPLETION_PREFIX,
    n.LLM_REQUEST_FUNCTIONS + ".",
)
#: Stands for "this span has no such payload" (None is a payload: JSON null).
_MISSING: Final = object()
#: Span events that carry v1.26 GenAI content.
CONTENT_EVENTS: Final = frozenset({n.EVENT_CONTENT_PROMPT, n.EVENT_CONTENT_COMPLETION})


def is_content_key(key: str) -> bool:
    """Whether ``key`` is one of the content attributes :func:`rebuild` reads."""
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES)


class Rebuilt(NamedTuple):
    """Payloads rebuilt from a third-party span: canonical JSON texts with their hashes."""

    request: str | None
    request_sha256: str | None
    response: str | None
    response_sha256: str | None
    #: ``finish_reason`` of the first output message, for the column's last fallback.
    finish_reason: str | None
    consumed: frozenset[str]


def parse_json(value: Any) -> Any:
    """``value`` parsed when it is JSON text, else ``value`` unchanged (never dropped)."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


class _Flat:
    """Flattened attributes under one prefix (``<prefix>.<sub>``), read by sub-key; reads are consumed."""

    __slots__ = ("_consumed", "_items")

    def __init__(self, items: dict[str, tuple[Any, str]], consumed: set[str]) -> None:
        self._items = items
        self._consumed = consumed

    @classmethod
    def under(cls, attributes: Mapping[str, Any], prefix: str, consumed: set[str]) -> _Flat:
        dotted = prefix + "."
        items = {k[len(dotted) :]: (v, k) for k, v in attributes.items() if k.startswith(dotted)}
        return cls(items, consumed)

    def take(self, sub: str) -> Any:
        item = self._items.pop(sub, None)
        if item is None:
            return None
        self._consumed.add(item[1])
        return item[0]

    def groups(self, prefix: str = "") -> list[_Flat]:
        """The indexed children ``[<prefix>.]<N>.<rest>``, in index order."""
        head = prefix + "." if prefix else ""
        children: dict[int, dict[str, tuple[Any, str]]] = {}
        for sub, item in self._items.items():
            if not sub.startswith(head):
                continue
            index, dot, rest = sub[len(head) :].partition(".")
            if dot and index.isdigit():
                children.setdefault(int(index), {})[rest] = item
        return [_Flat(children[i], self._consumed) for i in sorted(children)]


def _text(content: Any) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call", "name": name, "arguments": parse_json(arguments)}
    if call_id is not None:
        part["id"] = call_id
    return part


def _message(role: Any, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "parts": parts}
    message.update({k: v for k, v in extra.items() if v is not None})
    return message


def _respond_to(tool_call_id: Any, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool-role message's text parts become one ``tool_call_response`` part."""
    if tool_call_id is None:
        return parts
    texts = [p["content"] for p in parts if p.get("type") == "text"]
    others = [p for p in parts if p.get("type") != "text"]
    response = parse_json(texts[0]) if len(texts) == 1 else texts
    return [{"type": "tool_call_response", "id": tool_call_id, "response": response}, *others]


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """Message content as parts: a string, or a list of OpenAI/Anthropic-style content blocks."""
    if content is None:
        return []
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and "text" in block:
                parts.append(_text(block["text"]))
            else:
                parts.append(block if isinstance(block, dict) else _text(block))
        return parts
    return [_text(content)]


def _from_openai_message(message: Any) -> Any:
    """An OpenAI-style ``{"role", "content", "tool_calls", "tool_call_id"}`` message in the GenAI shape."""
    if not isinstance(message, dict) or "parts" in message:
        return message
    parts = _content_parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(_tool_call(call.get("id"), function.get("name"), function.get("arguments")))
    return _message(
        message.get("role"),
        _respond_to(message.get("tool_call_id"), parts),
        name=message.get("name"),
        finish_reason=message.get("finish_reason"),
    )


def _openinference_message(m: _Flat) -> dict[str, Any]:
    role = m.take("message.role")
    parts = [] if (content := m.take("message.content")) is None else [_text(content)]
    for c in m.groups("message.contents"):
        kind = c.take("message_content.type")
        text = c.take("message_content.text")
        if kind in (None, "text", "reasoning") and text is not None:
            parts.append({"type": kind or "text", "content": text})
        else:
            image = c.take("message_content.image.image.url")
            parts.append({"type": kind or "unknown", "content": text if image is None else image})
    for call in m.groups("message.tool_calls"):
        parts.append(
            _tool_call(
                call.take("tool_call.id"),
                call.take("tool_call.function.name"),
                call.take("tool_call.function.arguments"),
            )
        )
    if (function := m.take("message.function_call_name")) is not None:
        parts.append(_tool_call(None, function, m.take("message.function_call_arguments_json")))
    return _message(role, _respond_to(m.take("message.tool_call_id"), parts), name=m.take("message.name"))


def _openllmetry_message(m: _Flat) -> dict[str, Any]:
    content = m.take("content")
    parsed = parse_json(content) if isinstance(content, str) and content.startswith("[") else content
    if not (isinstance(parsed, list) and all(isinstance(b, dict) and "type" in b for b in parsed)):
        parsed = content
    parts = _content_parts(parsed)
    for call in m.groups("tool_calls"):
        parts.append(_tool_call(call.take("id"), call.take("name"), call.take("arguments")))
    if (function := m.take("function_call.name")) is not None:
        parts.append(_tool_call(None, function, m.take("function_call.arguments")))
    return _message(
        m.take("role"),
        _respond_to(m.take("tool_call_id"), parts),
        name=m.take("name"),
        finish_reason=m.take("finish_reason"),
    )


def _event_content(events: Iterable[Any], event_name: str, key: str) -> Any:
    for event in events:
        if event.name == event_name and key in event.attributes:
            return event.attributes[key]
    return None


def _messages(a: Mapping[str, Any], consumed: set[str], events: Iterable[Any], *, output: bool) -> Any:
    """The input (or output) messages, from whichever convention the span uses; None when it has none."""
    genai_key, v126_key, event_name = (
        (n.GEN_AI_OUTPUT_MESSAGES, n.GEN_AI_COMPLETION, n.EVENT_CONTENT_COMPLETION)
        if output
        else (n.GEN_AI_INPUT_MESSAGES, n.GEN_AI_PROMPT, n.EVENT_CONTENT_PROMPT)
    )
    for key in (genai_key, v126_key):
        if key in a:
            consumed.add(key)
            value = parse_json(a[key])
            return [_from_openai_message(m) for m in value] if isinstance(value, list) else value
    if (value := _event_content(events, event_name, v126_key)) is not None:
        value = parse_json(value)
        return [_from_openai_message(m) for m in value] if isinstance(value, list) else value
    oi = _Flat.under(a, n.OI_LLM_OUTPUT_MESSAGES if output else n.OI_LLM_INPUT_MESSAGES, consumed)
    if messages := [_openinference_message(m) for m in oi.groups()]:
        return messages
    texts = _Flat.under(a, n.OI_LLM_CHOICES if output else n.OI_LLM_PROMPTS, consumed)
    sub, role = ("completion.text", "assistant") if output else ("prompt.text", "user")
    if messages := [_message(role, [_text(t.take(sub))]) for t in texts.groups()]:
        return messages
    prefix = n.OPENLLMETRY_COMPLETION_PREFIX if output else n.OPENLLMETRY_PROMPT_PREFIX
    traceloop = _Flat.under(a, prefix.rstrip("."), consumed)
    return [_openllmetry_message(m) for m in traceloop.groups()] or None


def _tools(a: Mapping[str, Any], consumed: set[str]) -> Any:
    if n.GEN_AI_TOOL_DEFINITIONS in a:
        consumed.add(n.GEN_AI_TOOL_DEFINITIONS)
        return parse_json(a[n.GEN_AI_TOOL_DEFINITIONS])
    tools = []
    for t in _Flat.under(a, n.OI_LLM_TOOLS, consumed).groups():
        schema = t.take("tool.json_schema")
        if schema is not None:
            tools.append(parse_json(schema))
        else:
            tools.append({"name": t.take("tool.name"), "description": t.take("tool.description")})
    for f in _Flat.under(a, n.LLM_REQUEST_FUNCTIONS, consumed).groups():
        tools.append(
            {
                "name": f.take("name"),
                "description": f.take("description"),
                "parameters": parse_json(f.take("parameters")),
            }
        )
    return tools or None


def _parameters(a: Mapping[str, Any], consumed: set[str]) -> Any:
    if n.OI_LLM_INVOCATION_PARAMETERS in a:
        consumed.add(n.OI_LLM_INVOCATION_PARAMETERS)
        return parse_json(a[n.OI_LLM_INVOCATION_PARAMETERS])
    parameters = {name: a[key] for key, name in _PARAMETERS.items() if key in a}
    return parameters or None


def _llm_request(a: Mapping[str, Any], consumed: set[str], events: Iterable[Any], model: Any) -> Any:
    request = {
        "model": model,
        "system_instructions": None,
        "messages": _messages(a, consumed, events, output=False),
        "tools": _tools(a, consumed),
        "parameters": _parameters(a, consumed),
    }
    if n.GEN_AI_SYSTEM_INSTRUCTIONS in a:
        consumed.add(n.GEN_AI_SYSTEM_INSTRUCTIONS)
        request["system_instructions"] = parse_json(a[n.GEN_AI_SYSTEM_INSTRUCTIONS])
    if request["messages"] is None and request["system_instructions"] is None:
        return _MISSING
    return {k: v for k, v in request.items() if v is not None}


def _mime_value(a: Mapping[str, Any], consumed: set[str], value_key: str, mime_key: str) -> Any:
    """OpenInference ``input.value``/``output.value``: JSON only when its mime type says so."""
    if value_key not in a:
        return _MISSING
    consumed.add(value_key)
    mime = a.get(mime_key)
    if mime is not None:
        consumed.add(mime_key)
    return parse_json(a[value_key]) if mime == n.OI_JSON_MIME_TYPE else a[value_key]


def _first(a: Mapping[str, Any], consumed: set[str], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in a:
            consumed.add(key)
            return parse_json(a[key])
    return _MISSING


def _tool_request(a: Mapping[str, Any], consumed: set[str]) -> Any:
    before = set(consumed)
    value = _first(a, consumed, (attr.GEN_AI_TOOL_CALL_ARGUMENTS, n.OI_TOOL_CALL_ARGUMENTS))
    if value is _MISSING:
        value = _mime_value(a, consumed, n.OI_INPUT_VALUE, n.OI_INPUT_MIME_TYPE)
    if value is _MISSING:
        value = _first(a, consumed, (n.TRACELOOP_ENTITY_INPUT,))
    arguments = callback_arguments(value)
    if arguments is not _MISSING:  # the envelope stays an attribute: only the arguments are the request
        consumed.intersection_update(before)
        value = arguments
    return value


def callback_arguments(value: Any) -> Any:
    """The arguments of OpenLLMetry's LangChain tool callback input ``{"input_str": ..., "inputs": {...},
    "kwargs": {"tool_call_id": ...}, "metadata": {...}}`` (its ``inputs``; ``input_str`` is their repr),
    else a marker that it is none. The envelope carries the call's id and the graph step, so two identical
    calls would otherwise be two different requests (and never a repeated call, ``tool_loop``)."""
    if isinstance(value, dict) and "input_str" in value and isinstance(value.get("inputs"), dict):
        return value["inputs"]
    return _MISSING


def _generic_request(a: Mapping[str, Any], consumed: set[str]) -> Any:
    value = _mime_value(a, consumed, n.OI_INPUT_VALUE, n.OI_INPUT_MIME_TYPE)
    return _first(a, consumed, (n.TRACELOOP_ENTITY_INPUT,)) if value is _MISSING else value


def _generic_response(a: Mapping[str, Any], consumed: set[str], kind: str) -> Any:
    keys = (attr.GEN_AI_TOOL_CALL_RESULT,) if kind == "tool" else ()
    value = _first(a, consumed, keys)
    if value is _MISSING:
        value = _mime_value(a, consumed, n.OI_OUTPUT_VALUE, n.OI_OUTPUT_MIME_TYPE)
    if value is _MISSING:
        value = _first(a, consumed, (n.TRACELOOP_ENTITY_OUTPUT,))
    if value is _MISSING and kind == "retriever":
        documents = []
        for d in _Flat.under(a, n.OI_RETRIEVAL_DOCUMENTS, consumed).groups():
            document = {
                "id": d.take("document.id"),
                "content": d.take("document.content"),
                "score": d.take("document.score"),
                "metadata": parse_json(d.take("document.metadata")),
            }
            documents.append({k: v for k, v in document.items() if v is not None})
        value = {"documents": documents} if documents else _MISSING
    return value


def tool_request_sha256(attributes: Mapping[str, Any]) -> str | None:
    """The ``request_sha256`` a third-party tool span gets (the hash of its rebuilt arguments)."""
    value = _tool_request(attributes, set())
    return None if value is _MISSING else canonicalize(value)[1]


def _encode(value: Any) -> tuple[str | None, str | None]:
    return (None, None) if value is _MISSING else canonicalize(value)


def rebuild(kind: str, attributes: Mapping[str, Any], events: Iterable[Any], model: Any) -> Rebuilt:
    """Rebuild a third-party span's request and response (see the module docstring).

    Parameters
    ----------
    kind
        The span's resolved tailcut kind.
    attributes
        The span's attributes, decoded.
    events
        The span's events (objects with ``name`` and ``attributes``), for v1.26 content events.
    model
        The ``model`` column's value, recorded in a rebuilt llm request.
    """
    consumed: set[str] = set()
    events = tuple(events)
    finish_reason = None
    if kind == "llm":
        request = _llm_request(attributes, consumed, events, model)
        messages = _messages(attributes, consumed, events, output=True)
        response = _MISSING if messages is None else {"messages": messages}
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            finish_reason = messages[0].get("finish_reason")
    else:
        if kind == "tool":
            request = _tool_request(attributes, consumed)
        else:
            request = _generic_request(attributes, consumed)
        response = _generic_response(attributes, consumed, kind)
    request_text, request_sha = _encode(request)
    response_text, response_sha = _encode(response)
    return Rebuilt(
        request_text,
        request_sha,
        response_text,
        response_sha,
        finish_reason if isinstance(finish_reason, str) else None,
        frozenset(consumed),
    )


def written_payloads(kind: str, attributes: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A span's ``response`` and ``request`` columns as the writers fill them, from its decoded
    ``attributes``: tailcut's own payload attributes, else, for another instrumentation's span that
    records content, the payloads :func:`rebuild` makes (what the trace signals read a failure from)."""
    response, request = attributes.get(attr.RESPONSE), attributes.get(attr.REQUEST)
    response = response if isinstance(response, str) else None
    request = request if isinstance(request, str) else None
    if attr.KIND in attributes or kind == "other" or (response is not None and request is not None):
        return response, request
    if not any(is_content_key(key) for key in attributes):
        return response, request
    rebuilt = rebuild(kind, attributes, (), None)
    return response or rebuilt.response, request or rebuilt.request
