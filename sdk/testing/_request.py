"""A request as the scripted model received it, and what a responder can read from its conversation.

The three APIs spell a conversation differently (Chat ``messages``, Responses ``input`` items, Anthropic
``messages`` with content blocks). A responder that picks replies from the conversation should not care,
so :class:`ReceivedRequest` offers the two questions an agent loop asks of any of them: what did the user
last say, and which tool results came back since the model last spoke.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tailcut.testing._script import Api


@dataclass(frozen=True)
class ToolResult:
    """A tool's output sent back to the model: the call it answers and its text."""

    call_id: str
    content: str


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request the server received on a model endpoint.

    Attributes
    ----------
    index
        0-based arrival order across all APIs since the last ``reset()``.
    api
        ``chat``, ``responses`` or ``messages``.
    path
        The request path without the query string, e.g. ``/v1/chat/completions``.
    headers
        Request headers, names lower-cased.
    body
        The parsed JSON body.
    time
        When it arrived, by the server's clock (seconds since the epoch by default).
    """

    index: int
    api: Api
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    time: float

    @property
    def model(self) -> str:
        """The requested model name ('' when missing)."""
        model = self.body.get("model")
        return model if isinstance(model, str) else ""

    @property
    def stream(self) -> bool:
        """Whether the client asked for a server-sent-event stream."""
        return self.body.get("stream") is True

    @property
    def last_user_text(self) -> str:
        """The text of the latest user message that has text ('' when none); tool results are skipped."""
        for message in reversed(_messages(self.api, self.body)):
            if message.get("role") == "user":
                text = _text_of(message.get("content"))
                if text:
                    return text
        return ""

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        """Tool results sent after the model's last turn, in order (empty when the model has not called)."""
        if self.api == "chat":
            trailing = _trailing(_messages(self.api, self.body), lambda m: m.get("role") == "tool")
            return tuple(
                ToolResult(str(m.get("tool_call_id", "")), _text_of(m.get("content"))) for m in trailing
            )
        if self.api == "responses":
            outputs = _trailing(
                _messages(self.api, self.body), lambda m: m.get("type") == "function_call_output"
            )
            return tuple(ToolResult(str(m.get("call_id", "")), _text_of(m.get("output"))) for m in outputs)
        messages = _messages(self.api, self.body)
        if (
            not messages
            or messages[-1].get("role") != "user"
            or not isinstance(messages[-1].get("content"), list)
        ):
            return ()
        return tuple(
            ToolResult(str(block.get("tool_use_id", "")), _text_of(block.get("content")))
            for block in messages[-1]["content"]
            if isinstance(block, Mapping) and block.get("type") == "tool_result"
        )


def _messages(api: Api, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conversation items of a request body (a bare Responses ``input`` string is one user message)."""
    items = body.get("input") if api == "responses" else body.get("messages")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]


def _trailing(items: list[Mapping[str, Any]], wanted: Any) -> list[Mapping[str, Any]]:
    """The run of ``wanted`` items at the end of ``items``."""
    start = len(items)
    while start > 0 and wanted(items[start - 1]):
        start -= 1
    return items[start:]


def _text_of(content: object) -> str:
    """Join the text of a content value: a string, or a list of text parts in any of the three APIs."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        part["text"]
        for part in content
        if isinstance(part, Mapping)
        and part.get("type") in ("text", "input_text", "output_text")
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)
