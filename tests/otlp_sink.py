"""A tiny OTLP/HTTP receiver for SDK tests: parses every export request and keeps the spans.

Optionally it serves TLS (``ssl_context``), requires ``authorization: Bearer <token>`` (answering 401
otherwise, keeping nothing), and holds its first answer back (``delay_first`` seconds) so a test can act
while an export is in flight.
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpSink:
    """Receives OTLP/HTTP protobuf on ``/v1/traces``; ``spans`` holds (resource attrs, span) pairs.

    ``headers`` holds the headers of every request received (refused ones included).
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
        delay_first: float = 0.0,
    ) -> None:
        self.spans: list = []
        self.headers: list[dict[str, str]] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._scheme = "https" if ssl_context is not None else "http"
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with sink._lock:
                    sink.headers.append({k.lower(): v for k, v in self.headers.items()})
                    first = len(sink.headers) == 1
                if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                    self._answer(401, b"missing or wrong bearer token")
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                if first and delay_first:
                    time.sleep(delay_first)
                with sink._lock:
                    sink.requests += 1
                    for rs in request.resource_spans:
                        resource = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            sink.spans.extend((resource, span) for span in ss.spans)
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
