"""A recorded ``chat.completion`` as the ``chat.completion.chunk`` events a stream of it carries.

Other instrumentations record a streamed Chat Completions call as the reply it added up to, never its
events. To serve such a record to an agent that streams, the reply is cut back into events: one chunk
per choice holding its whole message as the delta (role, text, tool calls with their index, id and
arguments) and its finish reason, then, when the reply has usage, a last chunk with no choices and the
usage (what OpenAI sends with ``stream_options.include_usage``). The SDK's stream helpers add them up
to the same message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def chat_chunks(completion: Any) -> list[dict[str, Any]]:
    """The chunk events of a stream that adds up to ``completion`` (a decoded ``chat.completion``).

    Examples
    --------
    >>> reply = {"id": "c1", "created": 1, "model": "m", "choices": [
    ...     {"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}]}
    >>> [c["choices"][0]["delta"] for c in chat_chunks(reply)]
    [{'role': 'assistant', 'content': 'Hi.'}]
    """
    if not isinstance(completion, Mapping):
        return []
    head = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created") or 0,
        "model": completion.get("model") or "",
    }
    chunks = []
    for index, choice in enumerate(c for c in completion.get("choices") or () if isinstance(c, Mapping)):
        message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
        delta: dict[str, Any] = {"role": message.get("role") or "assistant"}
        if message.get("content") is not None:
            delta["content"] = message["content"]
        calls = [call for call in message.get("tool_calls") or () if isinstance(call, Mapping)]
        if calls:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
        chunk_choice = {
            "index": choice.get("index", index),
            "delta": delta,
            "finish_reason": choice.get("finish_reason"),
            "logprobs": None,
        }
        chunks.append({**head, "choices": [chunk_choice]})
    if completion.get("usage") is not None:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks
