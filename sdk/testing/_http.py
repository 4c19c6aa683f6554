"""The HTTP side of the scripted-model server: a threaded HTTP/1.1 server that writes :class:`Answer` values.

The SDKs keep connections alive, so the server speaks HTTP/1.1 with a thread per connection, sends
JSON with a ``Content-Length`` and streams with chunked transfer encoding (one chunk per event, flushed
as written). Nagle's algorithm is off: headers and body are separate writes, and with Nagle plus
delayed ACKs every response would stall about 40 ms. The server keeps the sockets it has open so
``close()`` can end idle keep-alive connections instead of leaving their threads blocked in ``recv``.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"


@dataclass
class Answer:
    """What to send back for one request: a JSON body, or a stream of framed server-sent events."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: Iterator[bytes] | None = None
    delay: float = 0.0


Respond = Callable[[str, dict[str, str], bytes], Answer]
"""``(path, lower-cased headers, raw body) -> Answer``: the application behind the HTTP server."""


class ModelHTTPServer(ThreadingHTTPServer):
    """A loopback ``ThreadingHTTPServer`` that hands every POST to a ``respond`` callable."""

    daemon_threads = True
    # socketserver's default backlog of 5 refuses connections when a fleet of agents starts at once.
    request_queue_size = 256

    def __init__(self, port: int, respond: Respond) -> None:
        self.respond = respond
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__((LOOPBACK, port), _Handler)

    def track(self, connection: socket.socket, *, is_open: bool) -> None:
        """Note that ``connection`` was opened or closed."""
        with self._open_lock:
            if is_open:
                self._open.add(connection)
            else:
                self._open.discard(connection)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that hang up; report anything else as ``socketserver`` does.

        The SDKs close a streamed response as soon as they read its last event, before the end of the
        chunked body, so resets are routine here, not faults.
        """
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Shut every open client connection, so their handler threads end."""
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: ModelHTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, is_open=True)

    def finish(self) -> None:
        self.server.track(self.connection, is_open=False)
        try:
            super().finish()
        except OSError:
            pass

    def do_POST(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            # The SDKs always send a Content-Length; an unread chunked body would desynchronise the
            # connection, so refuse it and hang up.
            self.close_connection = True
            self._write(Answer(status=411, headers={"connection": "close"}))
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        answer = self.server.respond(self.path.split("?", 1)[0], headers, raw)
        if answer.delay:
            time.sleep(answer.delay)
        self._write(answer)

    def do_GET(self) -> None:
        self._write(Answer(status=405, headers={"allow": "POST"}))

    def _write(self, answer: Answer) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.events is None:
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in answer.events:
            self.wfile.write(b"%X\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: a fleet makes thousands of requests, and tests read ``ModelServer.requests``."""
