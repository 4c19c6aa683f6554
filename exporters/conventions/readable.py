"""Payloads rendered for reading: chat messages by role, tool calls with their arguments, JSON formatted.

A boundary payload is canonical JSON in one of a few shapes; :func:`readable` turns it into
:class:`Message` items a template lays out, whichever provider wrote it:

- OpenAI chat: a request's ``messages`` (``content`` text or parts, ``tool_calls``, ``tool_call_id``) and
  a response's ``choices[].message``;
- Anthropic messages: ``system`` plus ``messages`` whose ``content`` blocks are ``text``, ``tool_use`` and
  ``tool_result``, and a response's own ``content`` blocks;
- the OpenTelemetry GenAI shape that ingest normalises third-party spans to (``{"role", "parts"}``).

A request's tool definitions come last, as one ``tools`` item (the schemas the model was shown).

Anything else (a tool's arguments or result, a retriever's documents) is one ``json`` item, formatted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """A tool call a model asked for: its name, id and arguments (decoded when they are JSON)."""

    name: str
    id: str | None
    arguments: Any
    raw_arguments: str
    arguments_are_json: bool

    def argument_items(self) -> list[tuple[str, str]]:
        """``(name, value as JSON)`` of each top-level argument (a string keeps its quotes, so its type
        shows); empty when the arguments are not an object."""
        if not isinstance(self.arguments, dict):
            return []
        return [(str(k), json.dumps(v, indent=2, ensure_ascii=False)) for k, v in self.arguments.items()]


@dataclass
class Message:
    """One item of a rendered payload: a chat message (role, texts, tool calls, tool result) or JSON."""

    role: str
    texts: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_result: str | None = None
    tool_result_id: str | None = None
    json: str | None = None


def pretty(value: Any) -> str:
    """``value`` as indented JSON (strings that hold JSON are decoded first)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _tool_call(name: Any, call_id: Any, arguments: Any) -> ToolCall:
    if isinstance(arguments, str):
        try:
            decoded, is_json = json.loads(arguments), True
        except ValueError:
            decoded, is_json = arguments, False
        raw = arguments
    else:
        decoded, is_json, raw = arguments, True, json.dumps(arguments, ensure_ascii=False)
    return ToolCall(str(name or "?"), None if call_id is None else str(call_id), decoded, raw, is_json)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return pretty(content)


def _blocks(message: Message, content: Any) -> None:
    """Add OpenAI content parts, Anthropic content blocks or GenAI parts to ``message``."""
    if content is None:
        return
    if isinstance(content, str):
        message.texts.append(content)
        return
    if not isinstance(content, list):
        message.texts.append(pretty(content))
        return
    for block in content:
        if not isinstance(block, dict):
            message.texts.append(_text_of(block))
            continue
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text", "reasoning", "thinking"):
            message.texts.append(_text_of(block.get("text", block.get("content", block.get("thinking")))))
        elif kind == "tool_use":
            message.tool_calls.append(_tool_call(block.get("name"), block.get("id"), block.get("input")))
        elif kind == "tool_call":
            message.tool_calls.append(_tool_call(block.get("name"), block.get("id"), block.get("arguments")))
        elif kind in ("tool_result", "tool_call_response"):
            message.tool_result_id = block.get("tool_use_id", block.get("id"))
            message.tool_result = pretty(block.get("content", block.get("response")))
        else:
            message.texts.append(pretty(block))


def _message(raw: Any) -> Message:
    if not isinstance(raw, dict):
        return Message(role="json", json=pretty(raw))
    message = Message(role=str(raw.get("role") or "message"))
    if message.role == "tool" or "tool_call_id" in raw:
        message.tool_result_id = raw.get("tool_call_id")
        message.tool_result = pretty(raw.get("content"))
    else:
        _blocks(message, raw.get("parts", raw.get("content")))
    for call in raw.get("tool_calls") or []:
        if isinstance(call, dict):
            function = call.get("function") or {}
            message.tool_calls.append(
                _tool_call(function.get("name"), call.get("id"), function.get("arguments"))
            )
    return message


def _tools(tools: Any) -> list[Message]:
    """The tool definitions a request offered, as one ``tools`` item: their names, and the JSON."""
    if not isinstance(tools, list) or not tools:
        return []
    names = []
    for tool in tools:
        if isinstance(tool, dict):
            function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            names.append(str(function.get("name", "?")))
    return [Message(role="tools", texts=[", ".join(names)], json=pretty(tools))]


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def readable(text: str | None) -> list[Message]:
    """The payload ``text`` as chat messages when it is a chat request or response, else one JSON item."""
    if text is None:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return [Message(role="text", texts=[text])]
    messages: list[Message] = []
    if isinstance(value, dict):
        system = value.get("system")
        if system:
            message = Message(role="system")
            _blocks(message, system)
            messages.append(message)
        if _is_messages(value.get("messages")):
            return messages + [_message(m) for m in value["messages"]] + _tools(value.get("tools"))
        choices = value.get("choices")
        if isinstance(choices, list) and choices and all(isinstance(c, dict) for c in choices):
            return [_message(c.get("message") or c.get("delta") or c) for c in choices]
        if value.get("type") == "message" and isinstance(value.get("content"), list):
            return [_message(value)]
    if _is_messages(value):
        return [_message(m) for m in value]
    return [Message(role="json", json=pretty(value))]


def offending_arguments(evidence: str, tool_name: str) -> set[str]:
    """The top-level argument names a schema finding's evidence blames for ``tool_name``.

    Evidence reads ``lookup_order: $.order_id: 'ORD-1002' is not of type 'integer' ...``; each
    ``; ``-separated clause naming this tool contributes the first key of its path.
    """
    names: set[str] = set()
    for clause in evidence.split("; "):
        head, _, rest = clause.partition(": ")
        if head.strip() != tool_name or not rest.startswith("$."):
            continue
        path = rest[2:]
        key = path.split(":", 1)[0].split(".", 1)[0].split("[", 1)[0]
        if key:
            names.add(key)
    return names
