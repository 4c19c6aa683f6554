"""Auto-instrumentation of the ``anthropic`` SDK: the Messages API, sync and async.

Patched (at the class level, so every client is covered): ``Messages.create`` and ``Messages.stream``,
``AsyncMessages.create`` and ``AsyncMessages.stream``. ``stream()`` returns the SDK's own
``MessageStreamManager``; its request is recorded when the manager opens it, and the span ends with
the stream. Each call is one ``llm`` span, boundary ``llm:anthropic.messages``; see
:mod:`tailcut.instrumentation._llm` for what it records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from tailcut import attributes as attr
from tailcut.canonical import loads
from tailcut.instrumentation._llm import LLMApi, SdkTypes, compact, field, listed, recording_patch
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet
from tailcut.instrumentation._serve import SseFraming

__all__ = ["INSTRUMENTOR", "AnthropicInstrumentor"]


@functools.cache
def _sdk_types() -> SdkTypes:
    import anthropic

    return SdkTypes(
        sentinels=(anthropic.NotGiven, anthropic.Omit), streams=(anthropic.Stream, anthropic.AsyncStream)
    )


class MessagesApi(LLMApi):
    """``POST /v1/messages``: a stream is ``message_start``, content-block events, ``message_delta``."""

    provider = "anthropic"
    name = "anthropic.messages"
    framing = SseFraming(event_lines=True)
    request_fields: ClassVar[Mapping[str, str]] = {
        "model": attr.GEN_AI_REQUEST_MODEL,
        "temperature": attr.GEN_AI_REQUEST_TEMPERATURE,
        "top_p": attr.GEN_AI_REQUEST_TOP_P,
        "top_k": attr.GEN_AI_REQUEST_TOP_K,
        "max_tokens": attr.GEN_AI_REQUEST_MAX_TOKENS,
        "stop_sequences": attr.GEN_AI_REQUEST_STOP_SEQUENCES,
        "stream": attr.GEN_AI_REQUEST_STREAM,
    }

    def sdk(self) -> SdkTypes:
        return _sdk_types()

    def response_attributes(self, response: Any) -> dict[str, Any]:
        stop_reason = field(response, "stop_reason")
        return compact(
            {
                attr.GEN_AI_RESPONSE_MODEL: field(response, "model"),
                attr.GEN_AI_RESPONSE_ID: field(response, "id"),
                attr.GEN_AI_RESPONSE_FINISH_REASONS: [stop_reason] if isinstance(stop_reason, str) else None,
                attr.GEN_AI_USAGE_INPUT_TOKENS: field(response, "usage", "input_tokens"),
                attr.GEN_AI_USAGE_OUTPUT_TOKENS: field(response, "usage", "output_tokens"),
                attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: field(
                    response, "usage", "cache_read_input_tokens"
                ),
                attr.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: field(
                    response, "usage", "cache_creation_input_tokens"
                ),
            }
        )

    def tool_schemas(self, request: Any) -> dict[str, Any]:
        return {
            name: field(tool, "input_schema")
            for tool in listed(field(request, "tools"))
            if isinstance(name := field(tool, "name"), str) and field(tool, "input_schema") is not None
        }

    def tool_calls(self, response: Any) -> list[tuple[str, Any]]:
        return [
            (field(block, "name"), field(block, "input"))
            for block in listed(field(response, "content"))
            if field(block, "type") == "tool_use"
        ]

    def reassemble(self, events: list[Any]) -> dict[str, Any]:
        """Fold the events into the ``message`` they stream.

        Text-valued deltas (``text_delta``, ``thinking_delta``, ...) are concatenated onto their block;
        a ``tool_use`` block's ``input_json_delta`` pieces are joined and decoded when the block stops
        (kept as the raw text when they are not JSON, as a live body carries such input).
        """
        message: dict[str, Any] | None = None
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, str] = {}
        for event in events:
            kind = field(event, "type")
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = dict(event["message"])
                blocks = dict(enumerate(dict(block) for block in listed(message.get("content"))))
            elif message is None:
                continue
            elif kind == "content_block_start" and isinstance(event.get("index"), int):
                blocks[event["index"]] = dict(field(event, "content_block") or {})
            elif kind == "content_block_delta" and event.get("index") in blocks:
                _apply_block_delta(blocks[event["index"]], event["index"], event.get("delta"), partial_json)
            elif kind == "content_block_stop" and event.get("index") in partial_json:
                _finish_input(blocks[event["index"]], partial_json.pop(event["index"]))
            elif kind == "message_delta":
                message.update(field(event, "delta") or {})
                usage = {k: v for k, v in (field(event, "usage") or {}).items() if v is not None}
                message["usage"] = {**(message.get("usage") or {}), **usage}
        if message is None:
            return {}
        for index, text in partial_json.items():  # a stream cut short inside a tool_use block
            _finish_input(blocks[index], text)
        message["content"] = [blocks[index] for index in sorted(blocks)]
        return message


def _apply_block_delta(block: dict[str, Any], index: int, delta: Any, partial_json: dict[int, str]) -> None:
    if not isinstance(delta, dict):
        return
    kind = delta.get("type")
    if kind == "input_json_delta":
        partial_json[index] = partial_json.get(index, "") + (delta.get("partial_json") or "")
    elif kind == "citations_delta":
        block["citations"] = [*(block.get("citations") or []), delta.get("citation")]
    else:
        for key, value in delta.items():
            if key != "type" and isinstance(value, str):
                block[key] = (block.get(key) or "") + value


def _finish_input(block: dict[str, Any], text: str) -> None:
    if not text.strip():
        return
    try:
        block["input"] = loads(text)
    except ValueError:
        block["input"] = text


MESSAGES = MessagesApi()


def _patches() -> list[Patch]:
    from anthropic.resources.messages import AsyncMessages, Messages

    return [
        recording_patch(owner, method, MESSAGES)
        for owner in (Messages, AsyncMessages)
        for method in ("create", "stream")
    ]


#: The patches of the ``anthropic`` SDK (``tailcut.instrument_anthropic()`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class AnthropicInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for the ``anthropic`` SDK (``opentelemetry-instrument`` loads it)."""

    patch_set = INSTRUMENTOR
    dependencies = ("anthropic >= 2.0",)
