"""HTTP/1.1 for OTLP/HTTP and the metrics endpoint: h11's parser under an asyncio protocol.

h11 (a maintained, RFC 9112-conformant HTTP/1.1 state machine) does all the framing: request lines,
headers, ``Content-Length`` and chunked bodies, trailers, keep-alive and pipelining, ``Expect:
100-continue``. This module only moves bytes between h11 and the socket, applies the limits below and
routes ``(method, path)`` to synchronous handlers on the event loop (ingesting a request is CPU work with
nothing to wait for).

Why h11 under this protocol: ``benchmarks/bench_collector.py --compare-http`` posts the same OTLP requests
(512 spans, about 370 KB each) to a parse-only handler under each candidate and counts spans per receiver
CPU-second (two to four runs on the shared 2-core machine, best of 2 each): h11 under this protocol 645-667k,
uvicorn with httptools 570-690k (0.86-1.03x), hypercorn 455k (0.68-0.70x); outside the candidates,
aiohttp 800-833k (1.24x) and the threaded ``http.server`` 690-740k. The hand-written parser this replaced
measured 800-833k earlier the same day. h11 costs about 0.5 µs per span in process (it copies each body
chunk three times), under 5% of the collector's end-to-end cost per span; in exchange it is a
maintained RFC 9112 state machine, and under our own protocol the collector keeps what neither uvicorn nor
aiohttp offers: deadlines on the request head and on the whole request that slow clients cannot extend,
and synchronous handlers without an ASGI hop per request.

Limits (:class:`Limits`): the request head (64 KiB, also the longest chunk-size line), the header count
(431 above either), the body (413 without reading it when ``Content-Length`` says so, else as soon as the
chunks pass it), a deadline for the head and one for the whole request counted from its first byte (408
and close: a byte-a-second client cannot extend them), an idle keep-alive timeout, and a bound on open
connections (503 and close above it). Framing errors h11 detects (RFC 9112: negative or ``0x`` chunk
sizes, chunk data without its CRLF, ``chunked`` that is not the only coding) and ``Transfer-Encoding``
together with ``Content-Length`` (request smuggling behind a proxy) answer 400 and close the connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

_logger = logging.getLogger("tailcut.collector")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one client can make the server hold, and for how long (seconds)."""

    max_body: int
    max_head: int = 64 * 1024
    max_headers: int = 100
    header_timeout: float = 10.0
    request_timeout: float = 60.0
    idle_timeout: float = 60.0
    max_connections: int = 1024


@dataclass(slots=True)
class Request:
    """A received request: method, path (without query), lower-cased headers and the body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | bytearray = b""


@dataclass(slots=True)
class Response:
    """A response to send; ``Content-Length`` and ``Connection`` are added by the server."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False


#: A route handler; it may raise, which answers 500 and is logged.
Handler = Callable[[Request], Response]
#: Looks at a request's head before its body is read; a response refuses it (e.g. 401).
Guard = Callable[[Request], Response | None]


def text_response(status: int, message: str, **kwargs: object) -> Response:
    return Response(status, (message + "\n").encode(), **kwargs)  # type: ignore[arg-type]


_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


class _Connection(asyncio.Protocol):
    __slots__ = ("_body", "_closing", "_h11", "_request", "_server", "_started", "_timer", "_transport")

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.limits.max_head)
        self._transport: asyncio.Transport | None = None
        self._request: Request | None = None
        self._body = bytearray()
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False

    # --- asyncio callbacks --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        server = self._server
        full = len(server.connections) >= server.limits.max_connections
        server.connections.add(self)
        if full or server.closing:
            self._reply(text_response(503, "too many connections or shutting down; retry later", close=True))
            return
        self._arm(server.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._cancel_timer()
        self._transport = None

    def pause_writing(self) -> None:  # a pipelining client that does not read its responses
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._h11.their_state is h11.IDLE and not self._h11.trailing_data[0]:
            self._begin_request()
        self._h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        self._h11.receive_data(b"")
        self._process()
        return None

    # --- request handling ---------------------------------------------------------------------------
    def _process(self) -> None:
        connection = self._h11
        while not self._closing and self._transport is not None:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(self._malformed(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            kind = type(event)
            if kind is h11.Data:
                self._body += event.data  # type: ignore[union-attr]
                if len(self._body) > self._server.limits.max_body:
                    assert self._request is not None
                    self._fail(self._server.too_large(self._request, len(self._body)))
                    return
            elif kind is h11.Request:
                self._on_head(event)  # type: ignore[arg-type]
            elif kind is h11.EndOfMessage:
                request = self._request
                assert request is not None
                request.body = self._body
                self._request = None
                self._body = bytearray()
                self._cancel_timer()
                self._reply(self._server.handle(request))
            else:  # ConnectionClosed
                self._close()
                return

    def _malformed(self, error: h11.RemoteProtocolError) -> Response:
        if error.error_status_hint != 431:  # h11's 501 for other codings is a 400 here (RFC 9112 6.1)
            return text_response(400, f"malformed request: {error}")
        if self._request is None:
            return text_response(431, f"request head over {self._server.limits.max_head} bytes")
        return text_response(400, "malformed chunked body: chunk-size line too long")

    def _on_head(self, event: h11.Request) -> None:
        server = self._server
        limits = server.limits
        if len(event.headers) > limits.max_headers:
            self._fail(text_response(431, f"more than {limits.max_headers} header fields"))
            return
        # h11 bounds a head that arrives in pieces; one that arrives whole is measured as parsed.
        size = len(event.method) + len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
        if size > limits.max_head:
            self._fail(text_response(431, f"request head over {limits.max_head} bytes"))
            return
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        target = event.target.decode("latin-1")
        request = Request(event.method.decode("latin-1"), target.split("?", 1)[0], headers)
        self._request = request
        if "transfer-encoding" in headers and "content-length" in headers:
            self._fail(text_response(400, "Transfer-Encoding together with Content-Length"))
            return
        if (
            request.method in ("POST", "PUT")
            and "transfer-encoding" not in headers
            and "content-length" not in headers
        ):
            self._fail(text_response(411, "Content-Length or chunked Transfer-Encoding required"))
            return
        if "content-length" in headers and int(headers["content-length"]) > limits.max_body:
            self._fail(server.too_large(request, int(headers["content-length"])))
            return
        refusal = server.guard(request) if server.guard is not None else None
        if refusal is not None:
            self._fail(refusal)
            return
        self._cancel_timer()
        self._arm(self._started + limits.request_timeout - server.now())
        if self._h11.they_are_waiting_for_100_continue and self._transport is not None:
            self._transport.write(
                self._h11.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
            )

    def _begin_request(self) -> None:
        """The first byte of a request arrived: its head and whole-request deadlines start now."""
        self._cancel_timer()
        self._started = self._server.now()
        self._arm(self._server.limits.header_timeout)

    def _fail(self, response: Response) -> None:
        """Answer a request that will not be handled, then close (its body may be unread)."""
        response.close = True
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self._reply(response)
        else:
            self._close()

    def _reply(self, response: Response) -> None:
        transport = self._transport
        if transport is None:
            return
        close = response.close or self._server.closing
        headers = [
            (b"content-type", response.content_type.encode("latin-1")),
            (b"content-length", b"%d" % len(response.body)),
            *((name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers),
        ]
        if close:
            headers.append((b"connection", b"close"))
        connection = self._h11
        try:
            data = connection.send(
                h11.Response(
                    status_code=response.status, headers=headers, reason=_REASONS.get(response.status, b"")
                )
            )
            data += connection.send(h11.Data(data=response.body)) or b""
            data += connection.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # the connection is in no state for a response
            self._close()
            return
        transport.write(data)
        if close or connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
            self._close()
            return
        connection.start_next_cycle()
        if connection.trailing_data[0]:  # a pipelined request has begun
            self._begin_request()
        else:
            self._arm(self._server.limits.idle_timeout)

    def _close(self) -> None:
        self._closing = True
        self._cancel_timer()
        if self._transport is not None:
            self._transport.close()

    # --- deadlines ------------------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        self._cancel_timer()
        self._timer = self._server.loop_call_later(max(delay, 0.0), self._on_deadline)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_deadline(self) -> None:
        self._timer = None
        if self._h11.their_state is h11.IDLE and not self._h11.trailing_data[0]:
            self._close()  # an idle keep-alive connection
            return
        self._server.timeouts += 1
        self._fail(text_response(408, "request not received in time"))

    # --- shutdown -------------------------------------------------------------------------------------
    def idle(self) -> bool:
        return self._h11.their_state is h11.IDLE and not self._h11.trailing_data[0]

    def close_now(self, *, abort: bool) -> None:
        self._closing = True
        self._cancel_timer()
        if self._transport is not None:
            if abort:
                self._transport.abort()
            else:
                self._transport.close()


class HttpServer:
    """Routes ``(method, path)`` to synchronous handlers.

    Parameters
    ----------
    routes
        ``{path: {method: handler}}``.
    limits
        Sizes, deadlines and the connection bound (see :class:`Limits`).
    too_large
        Builds the 413 response for a request and its declared or received size (lets OTLP answer
        with a ``google.rpc.Status`` body).
    guard
        Sees every request's head before its body is read; a response it returns refuses the
        request (authentication).
    ssl_context
        Serve HTTPS with this context (the handshake must finish within ``header_timeout``).
    """

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        *,
        limits: Limits,
        too_large: Callable[[Request, int], Response] | None = None,
        guard: Guard | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.guard = guard
        self.ssl_context = ssl_context
        self._too_large = too_large
        self.connections: set[_Connection] = set()
        self.closing = False
        #: Requests closed with 408 because a deadline passed.
        self.timeouts = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; return the bound port."""
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: _Connection(self),
            host,
            port,
            reuse_address=True,
            ssl=self.ssl_context,
            ssl_handshake_timeout=self.limits.header_timeout if self.ssl_context is not None else None,
        )
        return self._server.sockets[0].getsockname()[1]

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def loop_call_later(self, delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        assert self._loop is not None
        return self._loop.call_later(delay, callback)

    async def close(self, grace: float = 2.0) -> None:
        """Stop accepting and close every connection within about ``grace`` seconds.

        Idle connections close now. A request under way may finish within ``grace`` (its response
        then closes the connection); after that every remaining connection is aborted, so a client
        that stalls mid-request cannot hold up shutdown (such a request was never acknowledged).
        """
        if self._server is None:
            return
        self.closing = True
        # Connections accepted in this turn get their transport in the next ones (and are refused as
        # closing); Python 3.11 leaks a connection accepted but not yet made when the server closes.
        for _ in range(3):
            await asyncio.sleep(0)
        self._server.close()
        now = self.now()
        deadline = now + grace
        while now < deadline and self.connections:
            for connection in list(self.connections):
                if connection.idle():
                    connection.close_now(abort=False)
            await asyncio.sleep(0.01)
            now = self.now()
        for connection in list(self.connections):
            connection.close_now(abort=True)
        while self.connections and self.now() < deadline + 1.0:  # connection_lost comes a turn later
            await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=max(grace, 0.1))
        except TimeoutError:
            _logger.warning("tailcut collector: HTTP connections still open after shutdown")
        self._server = None

    def too_large(self, request: Request, size: int) -> Response:
        if self._too_large is not None:
            response = self._too_large(request, size)
        else:
            response = text_response(
                413, f"request body of {size} bytes exceeds the limit of {self.limits.max_body}"
            )
        response.close = True
        return response

    def handle(self, request: Request) -> Response:
        methods = self.routes.get(request.path)
        if methods is None:
            return text_response(404, f"no such path: {request.path}")
        handler = methods.get(request.method)
        if handler is None:
            allowed = ", ".join(sorted(methods))
            return text_response(
                405, f"{request.method} not allowed; use {allowed}", headers=[("Allow", allowed)]
            )
        try:
            return handler(request)
        except Exception:
            _logger.exception("tailcut collector: handler for %s %s failed", request.method, request.path)
            return text_response(500, "internal error (see the collector log)")
