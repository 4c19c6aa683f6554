"""What the scripted model answers: replies, tool calls, token counts and provider errors.

These are plain frozen values so a test (or the demo fleet's responder) can build them up front, put
them in a queue and compare them later. Each value is checked when it is made, so a mistake in a script
fails where it is written, not as an odd HTTP response several calls later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from tailcut.errors import ConfigError

Api = Literal["chat", "responses", "messages"]
"""Which provider API a request used: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
"""Why the scripted model stopped, in OpenAI Chat vocabulary; each API maps it to its own words."""

APIS: tuple[Api, ...] = get_args(Api)
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)


def check_api(api: str) -> Api:
    """Return ``api`` if it names a supported API, else raise :class:`ConfigError` listing them."""
    if api not in APIS:
        raise ConfigError(f"unknown model API {api!r}; expected one of {', '.join(APIS)}")
    return api  # type: ignore[return-value]


@dataclass(frozen=True)
class ToolCall:
    """One function call the scripted model makes.

    Parameters
    ----------
    name
        The tool (function) name.
    arguments
        A dict, sent as compact JSON, or a raw string sent verbatim, so a test can send arguments that
        are not JSON or break the tool's schema.
    id
        The call id; derived deterministically from the request when omitted.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"tool call name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.arguments, str | Mapping):
            raise ConfigError(
                f"tool call {self.name!r} arguments must be a dict or a raw string, "
                f"got {type(self.arguments).__name__}"
            )

    @property
    def arguments_json(self) -> str:
        """The arguments as the wire carries them: compact JSON of a dict, or the raw string as given."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class TokenUsage:
    """Token counts reported for one reply."""

    input_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if self.input_tokens < 0 or self.output_tokens < 0:
            raise ConfigError(f"token counts must be >= 0, got {self.input_tokens}/{self.output_tokens}")

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ScriptedError:
    """An HTTP error answered instead of a completion, with a body shaped like the provider's.

    Parameters
    ----------
    status
        HTTP status, 400-599 (429 and 5xx are the ones SDKs retry).
    message
        The error message; a provider-like default per status when omitted.
    type
        The provider's error type (OpenAI ``error.type``, Anthropic ``error.type``); default per status.
    code
        OpenAI ``error.code`` (e.g. ``"rate_limit_exceeded"``); default per status. Anthropic has none.
    retry_after
        Seconds sent as ``retry-after-ms``/``retry-after``; both SDKs wait that long before retrying
        (they honour values in (0, 60]).
    should_retry
        Sent as ``x-should-retry: true/false``, which both SDKs obey over their status-code rules.
    body
        A JSON object sent verbatim instead of the provider-shaped body.
    """

    status: int = 500
    message: str | None = None
    type: str | None = None
    code: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    body: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, int) or not 400 <= self.status <= 599:
            raise ConfigError(
                f"scripted error status must be an HTTP error code 400-599, got {self.status!r}"
            )
        if self.retry_after is not None and self.retry_after < 0:
            raise ConfigError(f"retry_after must be >= 0 seconds, got {self.retry_after!r}")

    def headers(self) -> dict[str, str]:
        """The retry-control headers this error asks for."""
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            headers["retry-after-ms"] = str(round(self.retry_after * 1000))
            headers["retry-after"] = str(max(1, round(self.retry_after)))
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return headers


@dataclass(frozen=True)
class ScriptedReply:
    """One answer of the scripted model.

    Parameters
    ----------
    text
        The assistant text; ``None`` sends no text part (usual with tool calls).
    tool_calls
        :class:`ToolCall` items or ``(name, arguments)`` pairs (arguments: dict or raw string).
    finish_reason
        ``stop``, ``length``, ``tool_calls`` or ``content_filter``; ``tool_calls`` when there are tool
        calls, else ``stop``, when omitted. Anthropic gets ``end_turn``/``max_tokens``/``tool_use``/
        ``refusal``; the Responses API an ``incomplete`` status for ``length`` and ``content_filter``.
    usage
        :class:`TokenUsage` or an ``(input, output)`` pair; estimated from the request and reply sizes
        (about four characters a token) when omitted.
    error
        A :class:`ScriptedError`, or just its HTTP status, answered instead of a completion.
    delay
        Seconds to wait before answering.

    Shorthands are normalised when the reply is made: ``tool_calls`` becomes a tuple of
    :class:`ToolCall`, ``usage`` a :class:`TokenUsage`, ``error`` a :class:`ScriptedError`, and
    ``finish_reason`` is filled in.

    Examples
    --------
    >>> ScriptedReply(tool_calls=[("search_kb", {"query": "refund"})]).finish_reason
    'tool_calls'
    >>> ScriptedReply(error=429).error.status
    429
    """

    text: str | None = None
    tool_calls: Sequence[ToolCall | tuple[str, Mapping[str, Any] | str]] = ()
    finish_reason: FinishReason | None = None
    usage: TokenUsage | tuple[int, int] | None = None
    error: ScriptedError | int | None = None
    delay: float = 0.0

    def __post_init__(self) -> None:
        calls = tuple(_as_tool_call(call) for call in self.tool_calls)
        object.__setattr__(self, "tool_calls", calls)
        if self.finish_reason is None:
            object.__setattr__(self, "finish_reason", "tool_calls" if calls else "stop")
        elif self.finish_reason not in FINISH_REASONS:
            raise ConfigError(
                f"unknown finish_reason {self.finish_reason!r}; expected one of {', '.join(FINISH_REASONS)}"
            )
        if isinstance(self.usage, tuple):
            object.__setattr__(self, "usage", TokenUsage(*self.usage))
        if isinstance(self.error, int):
            object.__setattr__(self, "error", ScriptedError(status=self.error))
        if self.text is not None and not isinstance(self.text, str):
            raise ConfigError(f"reply text must be a string or None, got {type(self.text).__name__}")
        if self.delay < 0:
            raise ConfigError(f"reply delay must be >= 0 seconds, got {self.delay!r}")


def _as_tool_call(call: object) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if isinstance(call, tuple) and len(call) == 2:
        return ToolCall(name=call[0], arguments=call[1])
    raise ConfigError(f"a tool call must be a ToolCall or a (name, arguments) pair, got {call!r}")
