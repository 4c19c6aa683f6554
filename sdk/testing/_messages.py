"""Anthropic Messages (``POST /v1/messages``): ``message`` bodies and their event streams.

Content is a ``text`` block when the reply has text, then one ``tool_use`` block per tool call. The
stream is ``message_start`` (usage so far), a ``ping``, per block ``content_block_start`` /
``content_block_delta`` (``text_delta`` or ``input_json_delta``) / ``content_block_stop``, then
``message_delta`` (stop reason, cumulative usage) and ``message_stop``.

Anthropic's ``tool_use.input`` is always an object. A raw-string argument that parses to one is sent as
that object; any other raw string is streamed verbatim as ``partial_json`` (which the SDK then fails to
parse, as it would on a malformed live stream) and sent as a bare string in JSON bodies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from tailcut.testing._ids import IdSource
from tailcut.testing._render import Turn, argument_pieces, sse, text_pieces
from tailcut.testing._script import ScriptedError, ToolCall

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}

# status -> (error type, message), as the live API sends them.
_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out."),
    529: ("overloaded_error", "Overloaded"),
}


class MessagesDialect:
    """Renders turns as the Anthropic Messages API."""

    request_id_header: ClassVar[str] = "request-id"
    required_fields: ClassVar[dict[str, type]] = {"model": str, "messages": list, "max_tokens": int}

    def body(self, turn: Turn) -> dict[str, Any]:
        """Return the ``message`` object of ``turn``."""
        message_id, tool_ids = _ids(turn)
        content: list[dict[str, Any]] = [] if turn.text is None else [{"type": "text", "text": turn.text}]
        content += [
            _tool_block(call, tool_id, _input(call))
            for call, tool_id in zip(turn.tool_calls, tool_ids, strict=True)
        ]
        return {
            **_message(turn, message_id, content),
            "stop_reason": _STOP_REASONS[turn.finish_reason],
            "usage": _usage(turn, turn.usage.output_tokens),
        }

    def events(self, turn: Turn) -> Iterator[bytes]:
        """Yield the ``message_start`` … ``message_stop`` events of ``turn``."""
        message_id, tool_ids = _ids(turn)
        start = {**_message(turn, message_id, []), "stop_reason": None, "usage": _usage(turn, 1)}
        yield _event("message_start", message=start)
        yield _event("ping")
        index = 0
        if turn.text is not None:
            yield _event("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in text_pieces(turn.text):
                yield _event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
            yield _event("content_block_stop", index=index)
            index += 1
        for call, tool_id in zip(turn.tool_calls, tool_ids, strict=True):
            yield _event("content_block_start", index=index, content_block=_tool_block(call, tool_id, {}))
            for piece in argument_pieces(call.arguments_json):
                yield _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
            yield _event("content_block_stop", index=index)
            index += 1
        delta = {"stop_reason": _STOP_REASONS[turn.finish_reason], "stop_sequence": None}
        yield _event("message_delta", delta=delta, usage=_usage(turn, turn.usage.output_tokens))
        yield _event("message_stop")

    def error_body(self, error: ScriptedError, request_id: str) -> dict[str, Any]:
        """Return Anthropic's ``{"type": "error", "error": {...}, "request_id": ...}`` body for ``error``."""
        if error.body is not None:
            return dict(error.body)
        fallback = ("api_error", "Internal server error") if error.status >= 500 else _ERRORS[400]
        kind, message = _ERRORS.get(error.status, fallback)
        return {
            "type": "error",
            "error": {
                "type": error.type if error.type is not None else kind,
                "message": error.message if error.message is not None else message,
            },
            "request_id": request_id,
        }

    def request_id(self, ids: IdSource) -> str:
        """Return an Anthropic request id (``req_01`` and 22 base62 characters)."""
        return ids.new("req_01", 22)


def _ids(turn: Turn) -> tuple[str, list[str]]:
    message_id = turn.ids.new("msg_01", 22)
    return message_id, [call.id or turn.ids.new("toolu_01", 22) for call in turn.tool_calls]


def _message(turn: Turn, message_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_sequence": None,
    }


def _tool_block(call: ToolCall, tool_id: str, tool_input: object) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": call.name, "input": tool_input}


def _input(call: ToolCall) -> object:
    """The ``input`` of a tool call's block: an object, or the raw string when it is not one."""
    if not isinstance(call.arguments, str):
        return dict(call.arguments)
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return call.arguments
    return parsed if isinstance(parsed, dict) else call.arguments


def _usage(turn: Turn, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": turn.usage.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, event=kind)
