"""A small HTTP/1.1 server on an asyncio protocol, for OTLP/HTTP and the metrics endpoint.

Why not aiohttp or ``http.server``: the benchmark (``benchmarks/bench_collector.py --compare-http``)
posts the same OTLP requests to a parse-only handler under each. With 64-span requests (agents that
export small batches) this protocol handled about 1.15-1.4x the spans per CPU-second of aiohttp and
1.6-2x those of the threaded ``http.server``; with 512-span requests parsing dominates and aiohttp is
within the run-to-run noise (about 20% on the shared test machine). OTLP needs little of HTTP: one
POST route, bodies with ``Content-Length`` or chunked encoding, keep-alive, ``Expect: 100-continue``
and correct status codes, all implemented here. Handlers are synchronous and run on the event loop:
ingesting a request is CPU work with nothing to wait for.

Limits: request heads over 64 KiB get 431; bodies over ``max_body`` get 413 without being read (the
connection is then closed); idle connections close after ``idle_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

_logger = logging.getLogger("tailcut.collector")

MAX_HEAD = 64 * 1024


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


def text_response(status: int, message: str, **kwargs: object) -> Response:
    return Response(status, (message + "\n").encode(), **kwargs)  # type: ignore[arg-type]


class _Connection(asyncio.Protocol):
    __slots__ = (
        "_body",
        "_body_filled",
        "_buffer",
        "_chunked",
        "_close_after",
        "_closing",
        "_idle_handle",
        "_request",
        "_server",
        "_transport",
    )

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._request: Request | None = None
        self._body: bytearray | None = None
        self._body_filled = 0
        self._chunked = False
        self._close_after = False
        self._closing = False
        self._idle_handle: asyncio.TimerHandle | None = None

    # --- asyncio callbacks --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._arm_idle_timer()
        if self._body is not None and not self._chunked and not self._buffer:
            data = self._fill_body(data)  # the common case: copy straight into the body being read
            if self._body is not None:
                return
            self._dispatch()
        if data:
            self._buffer += data
        self._process()

    # --- request handling ---------------------------------------------------------------------------
    def _process(self) -> None:
        while not self._closing and self._transport is not None:
            if self._request is None:
                if not self._buffer or not self._read_head():
                    return
                continue
            if self._chunked:
                if not self._read_chunks():
                    return
            elif self._body is not None:
                if not self._buffer:
                    return
                rest = self._fill_body(bytes(self._buffer))
                self._buffer = bytearray(rest)
                if self._body is not None:
                    return
            self._dispatch()

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._reply(text_response(431, "request head too large", close=True))
            return False
        head = bytes(self._buffer[:end]).decode("latin-1")
        del self._buffer[: end + 4]
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._reply(text_response(400, "malformed request line", close=True))
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                self._reply(text_response(400, "malformed header line", close=True))
                return False
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        method, target, version = parts
        request = Request(method, target.split("?", 1)[0], headers)
        connection = headers.get("connection", "").lower()
        self._close_after = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        return self._begin_body(request)

    def _begin_body(self, request: Request) -> bool:
        headers = request.headers
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
            self._body = bytearray()
        elif "content-length" in headers:
            length_text = headers["content-length"]
            if not length_text.isdigit():
                self._reply(text_response(400, "malformed Content-Length", close=True))
                return False
            length = int(length_text)
            if length > self._server.max_body:
                self._reply(self._server.too_large(request, length))
                return False
            self._body = bytearray(length) if length else None
            self._body_filled = 0
        elif request.method in ("POST", "PUT"):
            self._reply(
                text_response(411, "Content-Length or chunked Transfer-Encoding required", close=True)
            )
            return False
        self._request = request
        if headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _fill_body(self, data: bytes) -> bytes:
        """Copy ``data`` into the body being read; return what belongs to the next request."""
        body = self._body
        assert body is not None and self._request is not None
        take = min(len(body) - self._body_filled, len(data))
        body[self._body_filled : self._body_filled + take] = data if take == len(data) else data[:take]
        self._body_filled += take
        if self._body_filled == len(body):
            self._request.body = body
            self._body = None
        return data[take:]

    def _read_chunks(self) -> bool:
        """Decode complete chunks from the buffer; True once the last chunk (and trailers) arrived."""
        body = self._body
        assert body is not None and self._request is not None
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                return False
            try:
                size = int(bytes(buffer[:line_end]).split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._reply(text_response(400, "malformed chunk size", close=True))
                return False
            if size == 0:
                if buffer[line_end + 2 : line_end + 4] == b"\r\n":
                    consumed = line_end + 4
                else:
                    trailers_end = buffer.find(b"\r\n\r\n", line_end + 2)
                    if trailers_end < 0:
                        return False
                    consumed = trailers_end + 4
                del buffer[:consumed]
                self._request.body = body
                self._body = None
                self._chunked = False
                return True
            if len(body) + size > self._server.max_body:
                self._reply(self._server.too_large(self._request, len(body) + size))
                return False
            if len(buffer) < line_end + 2 + size + 2:
                return False
            body += buffer[line_end + 2 : line_end + 2 + size]
            del buffer[: line_end + 2 + size + 2]

    def _dispatch(self) -> None:
        request = self._request
        assert request is not None
        self._request = None
        self._body = None
        self._chunked = False
        self._reply(self._server.handle(request))

    def _reply(self, response: Response) -> None:
        transport = self._transport
        if transport is None:
            return
        close = response.close or self._close_after
        reason = _REASONS.get(response.status, "")
        head = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Length: {len(response.body)}",
            f"Content-Type: {response.content_type}",
        ]
        head.extend(f"{name}: {value}" for name, value in response.headers)
        if close:
            head.append("Connection: close")
        transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        if close:
            self._closing = True
            transport.close()

    def _arm_idle_timer(self) -> None:
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        loop = self._server.loop
        if loop is not None:
            self._idle_handle = loop.call_later(self._server.idle_timeout, self._on_idle)

    def _on_idle(self) -> None:
        # Idle keep-alive connections close; so does a request that stalled mid-way (never acknowledged).
        if self._transport is not None:
            self._transport.close()

    def close_if_idle(self) -> None:
        if self._transport is not None and self._request is None and not self._buffer:
            self._transport.close()


_REASONS = {status.value: status.phrase for status in HTTPStatus}


class HttpServer:
    """Routes ``(method, path)`` to synchronous handlers.

    Parameters
    ----------
    routes
        ``{path: {method: handler}}``.
    max_body
        Largest request body accepted (413 above it).
    too_large
        Builds the 413 response for a request and its declared or received size (lets OTLP answer
        with a ``google.rpc.Status`` body).
    idle_timeout
        Seconds an idle keep-alive connection is kept open.
    """

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        *,
        max_body: int,
        too_large: Callable[[Request, int], Response] | None = None,
        idle_timeout: float = 75.0,
    ) -> None:
        self.routes = routes
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self._too_large = too_large
        self.connections: set[_Connection] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; return the bound port."""
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(
            lambda: _Connection(self), host, port, reuse_address=True
        )
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop accepting; close idle connections now and the others after their current request."""
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.close_if_idle()
        await self._server.wait_closed()

    def too_large(self, request: Request, size: int) -> Response:
        if self._too_large is not None:
            response = self._too_large(request, size)
        else:
            response = text_response(
                413, f"request body of {size} bytes exceeds the limit of {self.max_body}"
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
