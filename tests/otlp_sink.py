"""Tiny OTLP receivers for SDK tests, over HTTP and gRPC: they parse every export and keep the spans.

Optionally they serve TLS, require ``authorization: Bearer <token>`` (answering HTTP 401 or gRPC
``UNAUTHENTICATED`` otherwise, keeping nothing), and the HTTP one holds its first answer back
(``delay_first`` seconds) so a test can act while an export is in flight.
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpSink:
    """Receives OTLP/HTTP protobuf on ``/v1/traces``; ``spans`` holds (resource attrs, span) pairs.

    ``headers`` holds the headers of every request received (refused ones included), ``connections``
    the client port each accepted request came from, with its spans' names. Connections are kept
    alive between requests (HTTP/1.1), as a collector does.
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
        self.connections: list[tuple[int, list[str]]] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._scheme = "https" if ssl_context is not None else "http"
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
                    names = [
                        s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
                    ]
                    sink.connections.append((self.client_address[1], names))
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


class OtlpGrpcSink(trace_service_pb2_grpc.TraceServiceServicer):
    """Receives OTLP/gRPC; ``spans`` holds the spans, ``credentials`` makes it serve TLS."""

    def __init__(
        self, *, credentials: grpc.ServerCredentials | None = None, token: str | None = None
    ) -> None:
        self.spans: list = []
        self._token = token
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        if credentials is None:
            self._port = self._server.add_insecure_port("127.0.0.1:0")
            self._scheme = "http"
        else:
            self._port = self._server.add_secure_port("127.0.0.1:0", credentials)
            self._scheme = "https"

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext):
        sent = dict(context.invocation_metadata()).get("authorization")
        if self._token is not None and sent != f"Bearer {self._token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        with self._lock:
            self.spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return ExportTraceServiceResponse()

    @property
    def endpoint(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._port}"

    def __enter__(self) -> OtlpGrpcSink:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
