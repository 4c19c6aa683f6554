"""OpenAI Responses (``POST /v1/responses``): ``response`` objects and their typed event streams.

Output items are a ``message`` (one ``output_text`` part) when the reply has text, then one
``function_call`` per tool call. ``length`` and ``content_filter`` finish a response with status
``incomplete`` (reason ``max_output_tokens`` / ``content_filter``) and a ``response.incomplete`` event,
as the live API does; other replies end ``completed``. The stream is the sequence the SDK's
``ResponseStream`` state machine expects: created, in_progress, per item added / part added / deltas /
done, then the final lifecycle event, every event numbered by ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import count
from typing import Any, ClassVar

from tailcut.testing._ids import IdSource
from tailcut.testing._openai_errors import openai_error_body
from tailcut.testing._render import Turn, argument_pieces, sse, text_pieces
from tailcut.testing._script import ScriptedError

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}

# Request parameters the live API echoes in the response object, with the values it reports when unset.
_ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}, "verbosity": "medium"},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}


class ResponsesDialect:
    """Renders turns as the OpenAI Responses API."""

    request_id_header: ClassVar[str] = "x-request-id"
    required_fields: ClassVar[dict[str, type]] = {"model": str}

    def body(self, turn: Turn) -> dict[str, Any]:
        """Return the final ``response`` object of ``turn``."""
        return _Rendering(turn).final()

    def events(self, turn: Turn) -> Iterator[bytes]:
        """Yield the typed stream events of ``turn``."""
        return _Rendering(turn).events()

    def error_body(self, error: ScriptedError, request_id: str) -> dict[str, Any]:
        """Return OpenAI's ``{"error": {...}}`` body for ``error``."""
        return openai_error_body(error)

    def request_id(self, ids: IdSource) -> str:
        """Return an OpenAI request id (``req_`` and 32 hex digits)."""
        return ids.new("req_", 32, hex_digits=True)


class _Rendering:
    """One turn's response id and output items, made once so the stream and the final object agree."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.response_id = turn.ids.new("resp_", 50, hex_digits=True)
        self.incomplete_reason = _INCOMPLETE_REASONS.get(turn.finish_reason)
        item_status = "incomplete" if self.incomplete_reason else "completed"
        self.items: list[dict[str, Any]] = []
        if turn.text is not None:
            part = {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
            self.items.append(
                {
                    "id": turn.ids.new("msg_", 50, hex_digits=True),
                    "type": "message",
                    "status": item_status,
                    "role": "assistant",
                    "content": [part],
                }
            )
        for call in turn.tool_calls:
            self.items.append(
                {
                    "id": turn.ids.new("fc_", 50, hex_digits=True),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": call.arguments_json,
                    "call_id": call.id or turn.ids.new("call_", 24),
                    "name": call.name,
                }
            )

    def response(self, *, final: bool) -> dict[str, Any]:
        """The ``response`` object: in progress with no output, or final with output and usage."""
        request = self.turn.request.body
        status = ("incomplete" if self.incomplete_reason else "completed") if final else "in_progress"
        usage = self.turn.usage
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.turn.created,
            "status": status,
            "background": False,
            "completed_at": self.turn.created if final else None,
            "error": None,
            "incomplete_details": {"reason": self.incomplete_reason}
            if final and self.incomplete_reason
            else None,
            **{name: request.get(name, default) for name, default in _ECHOED.items()},
            "model": self.turn.model,
            "output": self.items if final else [],
            "service_tier": "default",
            "usage": {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            }
            if final
            else None,
        }

    def final(self) -> dict[str, Any]:
        """The finished ``response`` object."""
        return self.response(final=True)

    def events(self) -> Iterator[bytes]:
        """Every stream event, numbered from 0."""
        sequence = count()

        def event(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, "sequence_number": next(sequence), **fields}, event=kind)

        yield event("response.created", response=self.response(final=False))
        yield event("response.in_progress", response=self.response(final=False))
        for index, item in enumerate(self.items):
            yield from self._item_events(event, index, item)
        closing = "response.incomplete" if self.incomplete_reason else "response.completed"
        yield event(closing, response=self.final())

    def _item_events(self, event: Callable[..., bytes], index: int, item: dict[str, Any]) -> Iterator[bytes]:
        """The events that add, fill and finish output item ``index``."""
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            yield event("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
            for piece in text_pieces(part["text"]):
                yield event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
            yield event("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **where, content_index=0, part=part)
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in argument_pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", **where, delta=piece)
            yield event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
