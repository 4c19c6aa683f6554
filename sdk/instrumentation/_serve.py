"""Serving a recorded call: the SDK itself rebuilds its reply from the record, with no network.

A served call runs the SDK's own request code against a copy of the client whose HTTP transport is a
``MockTransport`` of the HTTP library the SDK is built on (``httpx2`` for ``openai`` 3.x and
``anthropic`` 2.x, ``httpx`` for ``openai`` 2.x), answering with the recorded body: JSON for a plain
call, the recorded events as server-sent events (in the provider's framing) for a stream, or the recorded
error status and body.
So the agent gets exactly the objects a live call returns (models, ``Stream``/``MessageStream`` with
their helpers, typed exceptions) and no SDK internals are imitated. Timeouts and connection failures,
which have no HTTP response, are rebuilt by failing the transport the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from tailcut.canonical import canonical_json
from tailcut.errors import TailcutError
from tailcut.instrumentation._wire import is_status_record
from tailcut.interceptor import Served

_JSON = {"content-type": "application/json"}
_EVENT_STREAM = {"content-type": "text/event-stream; charset=utf-8"}


class ReplayServeError(TailcutError):
    """A replay cannot rebuild the SDK's reply from the record (a stream recorded without its events)."""


class SseFraming:
    """How a provider frames stream events: ``event: <type>`` lines or not, and a closing marker.

    Parameters
    ----------
    event_lines
        Each frame names its event (``event: <the event's "type">``): OpenAI Responses, Anthropic.
    end_marker
        Bytes after the last event: ``data: [DONE]`` for OpenAI Chat Completions.
    """

    __slots__ = ("end_marker", "event_lines")

    def __init__(self, *, event_lines: bool, end_marker: bytes = b"") -> None:
        self.event_lines = event_lines
        self.end_marker = end_marker

    def body(self, events: Sequence[Any]) -> bytes:
        """The server-sent-events body that carries ``events`` (each a decoded JSON value)."""
        frames = []
        for event in events:
            data = event if isinstance(event, str) else canonical_json(event)
            lines = "\n".join(f"data: {line}" for line in data.split("\n"))
            kind = event.get("type") if self.event_lines and isinstance(event, dict) else None
            frames.append(f"event: {kind}\n{lines}\n\n" if isinstance(kind, str) else f"{lines}\n\n")
        return "".join(frames).encode("utf-8") + self.end_marker


_HTTP_LIBRARIES = ("httpx2", "httpx")


def http_library(client: Any) -> ModuleType:
    """The HTTP library (``httpx2`` or ``httpx``) the SDK of ``client`` sends its requests with.

    Read from the class of the client's own HTTP client, so each SDK version gets the transport it can
    use; when that cannot be told, whichever of the two is installed.
    """
    for cls in type(getattr(client, "_client", None)).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in _HTTP_LIBRARIES:
            return importlib.import_module(root)
    for name in _HTTP_LIBRARIES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ReplayServeError("neither httpx2 nor httpx is installed: the SDK's reply cannot be rebuilt")


def serve(client: Any, served: Served, framing: SseFraming, path: str, call: dict[str, Any]) -> Any:
    """Answer a synchronous ``post`` from the record: returns (or raises) what the SDK makes of it."""
    httpx = http_library(client)
    transport = httpx.MockTransport(_handler(httpx, served, framing, stream=bool(call.get("stream"))))
    offline = client.with_options(http_client=httpx.Client(transport=transport), max_retries=0)
    return offline.post(path, **call)


async def serve_async(
    client: Any, served: Served, framing: SseFraming, path: str, call: dict[str, Any]
) -> Any:
    """The asynchronous twin of :func:`serve`."""
    httpx = http_library(client)
    transport = httpx.MockTransport(_handler(httpx, served, framing, stream=bool(call.get("stream"))))
    offline = client.with_options(http_client=httpx.AsyncClient(transport=transport), max_retries=0)
    return await offline.post(path, **call)


def _handler(httpx: ModuleType, served: Served, framing: SseFraming, *, stream: bool) -> Callable[[Any], Any]:
    """The mock transport's answer to the one request the served call makes."""
    if served.is_error:
        record = served.response
        if is_status_record(record):
            body = record.get("body")
            content = body.encode("utf-8") if isinstance(body, str) else canonical_json(body).encode("utf-8")
            headers = {**_JSON, **{str(k): str(v) for k, v in (record.get("headers") or {}).items()}}
            return _answer(httpx, record["status_code"], headers, content)
        failure = _TRANSPORT_FAILURES.get((served.error_type or "").rpartition(".")[2])
        if failure is None:
            raise served.rebuild_error()
        message = served.error_message or "recorded failure"

        def fail(request: Any) -> Any:
            raise getattr(httpx, failure)(message, request=request)

        return fail
    if stream:
        if served.stream_events is None:
            raise ReplayServeError("the recorded reply has no stream events: it cannot be served as a stream")
        return _answer(httpx, 200, _EVENT_STREAM, framing.body(served.stream_events))
    text = served.response_json if served.response_json is not None else canonical_json(served.response)
    return _answer(httpx, 200, _JSON, text.encode("utf-8"))


def _answer(httpx: ModuleType, status: int, headers: dict[str, str], content: bytes) -> Callable[[Any], Any]:
    def answer(request: Any) -> Any:
        return httpx.Response(status, headers=headers, content=content, request=request)

    return answer


#: SDK exception class name -> the ``httpx``/``httpx2`` transport failure the SDK turns into it.
_TRANSPORT_FAILURES = {"APITimeoutError": "ReadTimeout", "APIConnectionError": "ConnectError"}
