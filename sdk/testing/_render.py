"""What the three API dialects share: the resolved turn, how replies are cut into stream pieces, SSE framing.

A dialect turns one :class:`Turn` into a JSON body or a sequence of server-sent events, and a
:class:`~tailcut.testing._script.ScriptedError` into its provider's error body. Everything a turn needs
that is not in the script (ids, time, token counts) is settled before a dialect sees it, so dialects are
pure formatting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tailcut.testing._ids import IdSource
from tailcut.testing._request import ReceivedRequest
from tailcut.testing._script import FinishReason, ScriptedError, TokenUsage, ToolCall

# Split points of streamed text: each piece is one word with the whitespace before it, as tokens go.
_TEXT_PIECE = re.compile(r"\s*\S+|\s+\Z")
_ARGUMENT_PIECE_CHARS = 12


@dataclass(frozen=True)
class Turn:
    """One scripted reply settled for one request: what every dialect renders from."""

    request: ReceivedRequest
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: TokenUsage
    created: int
    ids: IdSource

    @property
    def model(self) -> str:
        """The model name echoed back: the one the request asked for."""
        return self.request.model


class Dialect(Protocol):
    """How one provider API spells requests, replies, streams and errors."""

    request_id_header: str
    """Response header carrying the request id (``x-request-id`` or ``request-id``)."""

    required_fields: Mapping[str, type]
    """Body fields a request must carry, with their JSON types, or it is answered with a 400."""

    def body(self, turn: Turn) -> dict[str, Any]:
        """The JSON response of a non-streamed request."""
        ...

    def events(self, turn: Turn) -> Iterator[bytes]:
        """The server-sent events of a streamed request, each already framed."""
        ...

    def error_body(self, error: ScriptedError, request_id: str) -> dict[str, Any]:
        """The provider-shaped JSON body of an HTTP error."""
        ...

    def request_id(self, ids: IdSource) -> str:
        """A request id in the provider's format."""
        ...


def text_pieces(text: str) -> list[str]:
    """Cut ``text`` into word pieces whose concatenation is ``text`` (none for empty text)."""
    return _TEXT_PIECE.findall(text)


def argument_pieces(arguments: str) -> list[str]:
    """Cut tool-call arguments into short pieces, so a client must join several deltas to read them."""
    return [arguments[i : i + _ARGUMENT_PIECE_CHARS] for i in range(0, len(arguments), _ARGUMENT_PIECE_CHARS)]


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """Frame one server-sent event: an optional ``event:`` line, one ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json_text(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def json_text(value: Any) -> str:
    """Compact JSON, non-ASCII kept as is, as the providers send it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
