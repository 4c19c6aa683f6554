"""OpenAI Chat Completions (``POST /v1/chat/completions``): ``chat.completion`` bodies and chunk streams.

The stream follows the live API: a first chunk with the assistant role, one chunk per text piece, per
tool call a chunk with its id and name then chunks of argument text, a last choice chunk with the
finish reason, a usage chunk with no choices when ``stream_options.include_usage`` is set (every earlier
chunk then carries ``"usage": null``), and ``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from tailcut.testing._ids import IdSource, fingerprint
from tailcut.testing._openai_errors import openai_error_body
from tailcut.testing._render import Turn, argument_pieces, sse, text_pieces
from tailcut.testing._script import ScriptedError, TokenUsage


class ChatCompletionsDialect:
    """Renders turns as the OpenAI Chat Completions API."""

    request_id_header: ClassVar[str] = "x-request-id"
    required_fields: ClassVar[dict[str, type]] = {"model": str, "messages": list}

    def body(self, turn: Turn) -> dict[str, Any]:
        """Return the ``chat.completion`` object of ``turn``."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": turn.text,
            "refusal": None,
            "annotations": [],
        }
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for call, call_id in zip(turn.tool_calls, _call_ids(turn), strict=True)
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": turn.finish_reason}
        return {
            **_envelope(turn, "chat.completion", _completion_id(turn)),
            "choices": [choice],
            "usage": _usage(turn.usage),
        }

    def events(self, turn: Turn) -> Iterator[bytes]:
        """Yield the ``chat.completion.chunk`` events of ``turn``, then ``[DONE]``."""
        options = turn.request.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        envelope = _envelope(turn, "chat.completion.chunk", _completion_id(turn))
        call_ids = _call_ids(turn)

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return sse({**envelope, "choices": [choice], **({"usage": None} if include_usage else {})})

        first_content = None if turn.text is None else ""
        yield chunk({"role": "assistant", "content": first_content, "refusal": None})
        for piece in text_pieces(turn.text or ""):
            yield chunk({"content": piece})
        for index, (call, call_id) in enumerate(zip(turn.tool_calls, call_ids, strict=True)):
            opening = {"index": index, "id": call_id, "type": "function"}
            yield chunk({"tool_calls": [{**opening, "function": {"name": call.name, "arguments": ""}}]})
            for piece in argument_pieces(call.arguments_json):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, turn.finish_reason)
        if include_usage:
            yield sse({**envelope, "choices": [], "usage": _usage(turn.usage)})
        yield sse("[DONE]")

    def error_body(self, error: ScriptedError, request_id: str) -> dict[str, Any]:
        """Return OpenAI's ``{"error": {...}}`` body for ``error``."""
        return openai_error_body(error)

    def request_id(self, ids: IdSource) -> str:
        """Return an OpenAI request id (``req_`` and 32 hex digits)."""
        return ids.new("req_", 32, hex_digits=True)


def _completion_id(turn: Turn) -> str:
    return turn.ids.new("chatcmpl-", 29)


def _call_ids(turn: Turn) -> list[str]:
    return [call.id or turn.ids.new("call_", 24) for call in turn.tool_calls]


def _envelope(turn: Turn, kind: str, completion_id: str) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": kind,
        "created": turn.created,
        "model": turn.model,
        "service_tier": "default",
        "system_fingerprint": fingerprint(turn.model),
    }


def _usage(usage: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
