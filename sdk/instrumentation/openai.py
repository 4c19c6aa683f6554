"""Auto-instrumentation of the ``openai`` SDK: Chat Completions and Responses, sync and async.

Patched (at the class level, so every client is covered): ``Completions.create``,
``AsyncCompletions.create``, ``Responses.create`` and ``AsyncResponses.create``. Their stream helpers
(``chat.completions.stream``, ``responses.stream``) and ``with_raw_response`` variants go through
``create`` and are recorded too. Each call is one ``llm`` span, boundary ``llm:openai.chat`` or
``llm:openai.responses``; see :mod:`tailcut.instrumentation._llm` for what it records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from tailcut import attributes as attr
from tailcut.instrumentation._llm import LLMApi, SdkTypes, compact, field, listed, recording_patch
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet
from tailcut.instrumentation._serve import SseFraming

__all__ = ["INSTRUMENTOR", "OpenAIInstrumentor"]


@functools.cache
def _sdk_types() -> SdkTypes:
    import openai

    return SdkTypes(sentinels=(openai.NotGiven, openai.Omit), streams=(openai.Stream, openai.AsyncStream))


class _OpenAIApi(LLMApi):
    provider = "openai"

    def sdk(self) -> SdkTypes:
        return _sdk_types()


class ChatCompletionsApi(_OpenAIApi):
    """``POST /chat/completions``: streams are ``chat.completion.chunk`` events ending in ``[DONE]``."""

    name = "openai.chat"
    framing = SseFraming(event_lines=False, end_marker=b"data: [DONE]\n\n")
    request_fields: ClassVar[Mapping[str, str]] = {
        "model": attr.GEN_AI_REQUEST_MODEL,
        "temperature": attr.GEN_AI_REQUEST_TEMPERATURE,
        "top_p": attr.GEN_AI_REQUEST_TOP_P,
        "max_completion_tokens": attr.GEN_AI_REQUEST_MAX_TOKENS,
        "max_tokens": attr.GEN_AI_REQUEST_MAX_TOKENS,
        "seed": attr.GEN_AI_REQUEST_SEED,
        "stop": attr.GEN_AI_REQUEST_STOP_SEQUENCES,
        "frequency_penalty": attr.GEN_AI_REQUEST_FREQUENCY_PENALTY,
        "presence_penalty": attr.GEN_AI_REQUEST_PRESENCE_PENALTY,
        "n": attr.GEN_AI_REQUEST_CHOICE_COUNT,
        "stream": attr.GEN_AI_REQUEST_STREAM,
    }

    def response_attributes(self, response: Any) -> dict[str, Any]:
        choices = field(response, "choices") or []
        return compact(
            {
                attr.GEN_AI_RESPONSE_MODEL: field(response, "model"),
                attr.GEN_AI_RESPONSE_ID: field(response, "id"),
                attr.GEN_AI_RESPONSE_FINISH_REASONS: [
                    reason for choice in choices if isinstance(reason := field(choice, "finish_reason"), str)
                ],
                attr.GEN_AI_USAGE_INPUT_TOKENS: field(response, "usage", "prompt_tokens"),
                attr.GEN_AI_USAGE_OUTPUT_TOKENS: field(response, "usage", "completion_tokens"),
                attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: field(
                    response, "usage", "prompt_tokens_details", "cached_tokens"
                ),
            }
        )

    def tool_schemas(self, request: Any) -> dict[str, Any]:
        return {
            name: field(tool, "function", "parameters")
            for tool in listed(field(request, "tools"))
            if field(tool, "type") == "function" and isinstance(name := field(tool, "function", "name"), str)
        }

    def tool_calls(self, response: Any) -> list[tuple[str, Any]]:
        return [
            (field(call, "function", "name"), field(call, "function", "arguments"))
            for choice in listed(field(response, "choices"))
            for call in listed(field(choice, "message", "tool_calls"))
            if field(call, "type") in (None, "function")
        ]

    def reassemble(self, events: list[Any]) -> dict[str, Any]:
        """Fold ``chat.completion.chunk`` events into the ``chat.completion`` they stream.

        Text fields of each choice's deltas are concatenated, tool calls are merged by their index
        (name and arguments concatenated), and the last finish reason and usage win.
        """
        completion: dict[str, Any] = {"object": "chat.completion"}
        choices: dict[int, dict[str, Any]] = {}
        calls: dict[tuple[int, int], dict[str, Any]] = {}
        for chunk in events:
            if not isinstance(chunk, dict):
                continue
            for key in ("id", "created", "model", "system_fingerprint", "service_tier", "usage"):
                if chunk.get(key) is not None:
                    completion[key] = chunk[key]
            for delta_choice in listed(chunk.get("choices")):
                index = delta_choice.get("index", 0)
                choice = choices.get(index)
                if choice is None:
                    message = {"role": "assistant", "content": None}
                    choice = {"index": index, "message": message, "finish_reason": None, "logprobs": None}
                    choices[index] = choice
                _apply_chat_delta(choice, delta_choice, calls)
        completion["choices"] = [choices[index] for index in sorted(choices)]
        return completion


def _apply_chat_delta(
    choice: dict[str, Any], delta_choice: dict[str, Any], calls: dict[tuple[int, int], dict[str, Any]]
) -> None:
    message = choice["message"]
    for key, value in (delta_choice.get("delta") or {}).items():
        if value is None:
            continue
        if key == "tool_calls":
            for call_delta in listed(value):
                _apply_tool_call_delta(message, choice["index"], call_delta, calls)
        elif isinstance(value, str) and key != "role":
            message[key] = (message.get(key) or "") + value
        else:
            message[key] = value
    if delta_choice.get("finish_reason") is not None:
        choice["finish_reason"] = delta_choice["finish_reason"]
    logprobs = delta_choice.get("logprobs")
    if isinstance(logprobs, dict):
        merged = choice["logprobs"] or {}
        for key, value in logprobs.items():
            if isinstance(value, list):
                merged[key] = (merged.get(key) or []) + value
        choice["logprobs"] = merged


def _apply_tool_call_delta(
    message: dict[str, Any],
    choice_index: int,
    delta: dict[str, Any],
    calls: dict[tuple[int, int], dict[str, Any]],
) -> None:
    key = (choice_index, delta.get("index", 0))
    call = calls.get(key)
    if call is None:
        call = calls[key] = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        message.setdefault("tool_calls", []).append(call)
    for name in ("id", "type"):
        if delta.get(name) is not None:
            call[name] = delta[name]
    function = delta.get("function") or {}
    for name in ("name", "arguments"):
        if isinstance(function.get(name), str):
            call["function"][name] += function[name]


class ResponsesApi(_OpenAIApi):
    """``POST /responses``: stream events are typed; the last one carries the whole response."""

    name = "openai.responses"
    framing = SseFraming(event_lines=True)
    request_fields: ClassVar[Mapping[str, str]] = {
        "model": attr.GEN_AI_REQUEST_MODEL,
        "temperature": attr.GEN_AI_REQUEST_TEMPERATURE,
        "top_p": attr.GEN_AI_REQUEST_TOP_P,
        "max_output_tokens": attr.GEN_AI_REQUEST_MAX_TOKENS,
        "stream": attr.GEN_AI_REQUEST_STREAM,
    }

    def response_attributes(self, response: Any) -> dict[str, Any]:
        status = field(response, "status")
        reason = field(response, "incomplete_details", "reason")
        return compact(
            {
                attr.GEN_AI_RESPONSE_MODEL: field(response, "model"),
                attr.GEN_AI_RESPONSE_ID: field(response, "id"),
                attr.GEN_AI_RESPONSE_FINISH_REASONS: [
                    reason if status == "incomplete" and isinstance(reason, str) else status
                ]
                if isinstance(status, str)
                else None,
                attr.GEN_AI_USAGE_INPUT_TOKENS: field(response, "usage", "input_tokens"),
                attr.GEN_AI_USAGE_OUTPUT_TOKENS: field(response, "usage", "output_tokens"),
                attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: field(
                    response, "usage", "input_tokens_details", "cached_tokens"
                ),
            }
        )

    def tool_schemas(self, request: Any) -> dict[str, Any]:
        return {
            name: field(tool, "parameters")
            for tool in listed(field(request, "tools"))
            if field(tool, "type") == "function" and isinstance(name := field(tool, "name"), str)
        }

    def tool_calls(self, response: Any) -> list[tuple[str, Any]]:
        return [
            (field(item, "name"), field(item, "arguments"))
            for item in listed(field(response, "output"))
            if field(item, "type") == "function_call"
        ]

    def reassemble(self, events: list[Any]) -> dict[str, Any]:
        """The response of the last event that carries one (``response.completed`` when the stream ran
        to its end); for a stream cut short, the latest snapshot with the output items finished so far."""
        response: dict[str, Any] = {}
        items: dict[int, Any] = {}
        for event in events:
            if not isinstance(event, dict):
                continue
            if isinstance(event.get("response"), dict):
                response = event["response"]
            if event.get("type") == "response.output_item.done" and isinstance(event.get("item"), dict):
                items[event.get("output_index", len(items))] = event["item"]
        if items and not response.get("output"):
            response = {**response, "output": [items[index] for index in sorted(items)]}
        return response


CHAT = ChatCompletionsApi()
RESPONSES = ResponsesApi()


def _patches() -> list[Patch]:
    from openai.resources.chat.completions import AsyncCompletions, Completions
    from openai.resources.responses import AsyncResponses, Responses

    return [
        recording_patch(Completions, "create", CHAT),
        recording_patch(AsyncCompletions, "create", CHAT),
        recording_patch(Responses, "create", RESPONSES),
        recording_patch(AsyncResponses, "create", RESPONSES),
    ]


#: The patches of the ``openai`` SDK (``tailcut.instrument_openai()`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class OpenAIInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for the ``openai`` SDK (``opentelemetry-instrument`` loads it)."""

    patch_set = INSTRUMENTOR
    dependencies = ("openai >= 2.45, < 4",)
