"""A loopback HTTP server that plays a scripted model behind the OpenAI and Anthropic APIs.

The real ``openai`` and ``anthropic`` SDKs talk to it unchanged (only ``base_url`` differs), so tests of
an agent's tests, tailcut's own instrumentation and replay tests, and the ``tailcut demo`` fleet exercise the
SDKs' own request building, response parsing, stream assembly, retries and typed errors. It serves:

=================================  =========================  =========================
endpoint                           API                        ``ReceivedRequest.api``
=================================  =========================  =========================
``POST /v1/chat/completions``      OpenAI Chat Completions    ``"chat"``
``POST /v1/responses``             OpenAI Responses           ``"responses"``
``POST /v1/messages``              Anthropic Messages         ``"messages"``
=================================  =========================  =========================

each as JSON or, with ``"stream": true``, as server-sent events. What the model says comes from queued
:class:`ScriptedReply` values, then from a responder callable. Every request is recorded, and
:meth:`ModelServer.forbid` turns any request into a recorded violation, so a replay test can prove it made
no network call.

Examples
--------
>>> import openai
>>> server = ModelServer()
>>> server.enqueue(ScriptedReply(text="Paris."))
>>> with server as base_url:  # one base_url for openai and anthropic alike
...     client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
...     reply = client.chat.completions.create(
...         model="gpt-4o-mini", messages=[{"role": "user", "content": "Capital of France?"}]
...     )
...     client.close()
...     print(reply.choices[0].message.content, server.request_count, server.requests[0].last_user_text)
Paris. 1 Capital of France?
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, cast

from tailcut.errors import TailcutError
from tailcut.testing._chat import ChatCompletionsDialect
from tailcut.testing._http import LOOPBACK, Answer, ModelHTTPServer
from tailcut.testing._ids import IdFactory, IdSource
from tailcut.testing._messages import MessagesDialect
from tailcut.testing._render import Dialect, Turn, json_text
from tailcut.testing._request import ReceivedRequest
from tailcut.testing._responses import ResponsesDialect
from tailcut.testing._script import (
    Api,
    FinishReason,
    ScriptedError,
    ScriptedReply,
    TokenUsage,
    ToolCall,
)
from tailcut.testing._scripting import ReplyScript, Responder, echo_responder
from tailcut.testing._tokens import default_usage

#: Each API with and without the ``/v1`` prefix, so the one ``base_url`` serves both SDKs: ``openai``
#: posts to ``{base_url}/chat/completions``, ``anthropic`` to ``{base_url}/v1/messages``.
_ROUTES: dict[str, Api] = {
    prefix + path: api
    for path, api in (("/chat/completions", "chat"), ("/responses", "responses"), ("/messages", "messages"))
    for prefix in ("", "/v1")
}
_DIALECTS: dict[Api, Dialect] = {
    "chat": ChatCompletionsDialect(),
    "responses": ResponsesDialect(),
    "messages": MessagesDialect(),
}
_JSON = {"content-type": "application/json"}
_EVENT_STREAM = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
_FORBIDDEN = "scripted-model server: network calls are forbidden here (ModelServer.forbid / fail_on_request)"


class ModelServerError(TailcutError):
    """The scripted-model server cannot do what was asked (not running, already running, port taken)."""


class ModelServer:
    """A scripted model behind the OpenAI and Anthropic HTTP APIs, on ``127.0.0.1``.

    Parameters
    ----------
    port
        TCP port; 0 (the default) picks a free one.
    responder
        Called with each :class:`ReceivedRequest` when no queued reply is left; returns the
        :class:`ScriptedReply` to send. Default :func:`echo_responder`.
    seed
        Mixed into every generated id; ids are otherwise a function of the request content and of how
        many identical requests came before, so they repeat between runs.
    fail_on_request
        Answer every request with a 500 and record it in :attr:`violations` (see :meth:`forbid`).
    clock
        Source of ``created`` timestamps and :attr:`ReceivedRequest.time`; pass a constant for
        byte-identical responses.

    Examples
    --------
    >>> server = ModelServer(clock=lambda: 1_700_000_000.0).start()
    >>> server.base_url.startswith("http://127.0.0.1:"), server.openai_base_url.endswith("/v1")
    (True, True)
    >>> server.stop()
    """

    def __init__(
        self,
        *,
        port: int = 0,
        responder: Responder = echo_responder,
        seed: int | str = 0,
        fail_on_request: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fail_on_request = fail_on_request
        self._port = port
        self._script = ReplyScript(responder)
        self._ids = IdFactory(seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._requests: list[ReceivedRequest] = []
        self._violations: list[ReceivedRequest] = []
        self._responder_errors: list[Exception] = []
        self._http: ModelHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind ``127.0.0.1`` and serve in a background thread; returns the server itself."""
        if self._http is not None:
            raise ModelServerError(f"model server already running at {self.base_url}")
        try:
            self._http = ModelHTTPServer(self._port, self._respond)
        except OSError as exc:
            raise ModelServerError(
                f"model server cannot bind {LOOPBACK}:{self._port}: {exc.strerror}"
            ) from None
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"model-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection; does nothing when not running."""
        http, thread = self._http, self._thread
        if http is None or thread is None:
            return
        http.shutdown()
        http.close_connections()
        http.server_close()
        thread.join()
        self._http = self._thread = None

    def __enter__(self) -> str:
        """Start serving and return :attr:`base_url`, which both ``openai`` and ``anthropic`` take as is.

        Keep the server object to script it: ``server = ModelServer(); with server as base_url: ...``.
        """
        return self.start().base_url

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._http is None:
            raise ModelServerError("model server is not running; call start() or use it in a `with` block")
        return cast(int, self._http.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the ``base_url`` for ``openai.OpenAI`` and ``anthropic.Anthropic``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for ``openai.OpenAI``: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` for ``anthropic.Anthropic`` (which adds ``/v1/messages`` itself)."""
        return self.base_url

    # -- scripting -------------------------------------------------------------------------------

    def enqueue(self, *replies: ScriptedReply, api: Api | None = None) -> None:
        """Queue ``replies`` to answer the next requests, in order.

        Parameters
        ----------
        *replies
            The replies, each answering one request.
        api
            Only requests of this API (``chat``, ``responses``, ``messages``) take these replies, before
            any reply queued without an API. ``None`` (default): requests of any API take them.
        """
        self._script.enqueue(replies, api)

    def pending_replies(self, api: Api | None = None) -> int:
        """How many queued replies are unused: in ``api``'s own queue, or in all queues for ``None``."""
        return self._script.pending(api)

    @property
    def responder(self) -> Responder:
        """The callable that answers when the queues are empty; assign to replace it."""
        return self._script.responder

    @responder.setter
    def responder(self, responder: Responder) -> None:
        self._script.responder = responder

    @contextlib.contextmanager
    def forbid(self) -> Iterator[Self]:
        """Within the block, answer every request with a 500 and record it in :attr:`violations`.

        The error carries ``x-should-retry: false``, so one SDK call makes one violation.
        """
        previous = self.fail_on_request
        self.fail_on_request = True
        try:
            yield self
        finally:
            self.fail_on_request = previous

    # -- observation -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received on a model endpoint since the last :meth:`reset`, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """``len(requests)``, without copying."""
        with self._lock:
            return len(self._requests)

    @property
    def violations(self) -> list[ReceivedRequest]:
        """Requests that arrived while :attr:`fail_on_request` was set (a copy)."""
        with self._lock:
            return list(self._violations)

    @property
    def responder_errors(self) -> list[Exception]:
        """Exceptions the responder raised (each answered with a 500), oldest first (a copy)."""
        with self._lock:
            return list(self._responder_errors)

    def reset(self) -> None:
        """Forget requests, violations, responder errors and queued replies; restart id sequences.

        The responder and :attr:`fail_on_request` stay as they are.
        """
        with self._lock:
            self._requests.clear()
            self._violations.clear()
            self._responder_errors.clear()
        self._script.clear()
        self._ids.reset()

    # -- answering -------------------------------------------------------------------------------

    def _respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        """Answer one POST (runs on the connection's handler thread)."""
        api = _ROUTES.get(path)
        if api is None:
            return _plain_error(404, f"Unknown request URL: POST {path}.", "unknown_url")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _plain_error(400, "The request body is not a JSON object.", "invalid_json")
        dialect = _DIALECTS[api]
        forbidden = self.fail_on_request
        with self._lock:
            request = ReceivedRequest(len(self._requests), api, path, headers, body, self._clock())
            self._requests.append(request)
            if forbidden:
                self._violations.append(request)
        ids = self._ids.for_request(api, body)
        request_id = dialect.request_id(ids)
        if forbidden:
            return _error(dialect, ScriptedError(500, _FORBIDDEN, should_retry=False), request_id)
        problem = _invalid_field(dialect.required_fields, body)
        if problem:
            return _error(dialect, ScriptedError(400, problem, should_retry=False), request_id)
        try:
            reply = self._script.next_reply(request)
        except Exception as exc:
            with self._lock:
                self._responder_errors.append(exc)
            message = f"scripted-model responder failed: {type(exc).__name__}: {exc}"
            return _error(dialect, ScriptedError(500, message, should_retry=False), request_id)
        if isinstance(reply.error, ScriptedError):
            return _error(dialect, reply.error, request_id, delay=reply.delay)
        turn = _settle(request, reply, int(self._clock()), ids)
        header = {dialect.request_id_header: request_id}
        if request.stream:
            return Answer(200, {**_EVENT_STREAM, **header}, events=dialect.events(turn), delay=reply.delay)
        return Answer(
            200, {**_JSON, **header}, body=json_text(dialect.body(turn)).encode(), delay=reply.delay
        )


def _settle(request: ReceivedRequest, reply: ScriptedReply, created: int, ids: IdSource) -> Turn:
    """Fix everything a reply leaves open (tool-call types, usage) for the dialects."""
    calls = cast("tuple[ToolCall, ...]", reply.tool_calls)
    usage = reply.usage if isinstance(reply.usage, TokenUsage) else default_usage(request, reply.text, calls)
    finish = cast(FinishReason, reply.finish_reason)
    return Turn(request, reply.text, calls, finish, usage, created, ids)


def _invalid_field(required: Mapping[str, type], body: Mapping[str, Any]) -> str | None:
    """The message of a 400 for a missing or mistyped required field, or ``None`` when all are fine."""
    for name, kind in required.items():
        if name not in body:
            return f"Missing required parameter: '{name}'."
        if not isinstance(body[name], kind) or isinstance(body[name], bool):
            return f"Invalid type for '{name}': expected {kind.__name__}."
    return None


def _error(dialect: Dialect, error: ScriptedError, request_id: str, *, delay: float = 0.0) -> Answer:
    headers = {**_JSON, dialect.request_id_header: request_id, **error.headers()}
    body = json_text(dialect.error_body(error, request_id)).encode()
    return Answer(error.status, headers, body=body, delay=delay)


def _plain_error(status: int, message: str, code: str) -> Answer:
    """An error for a request that reached no API (unknown path, unparsable body); not recorded."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return Answer(status, {**_JSON, "x-should-retry": "false"}, body=json_text(body).encode())
