"""OtlpForwarder against a real OTLP/HTTP endpoint on loopback: retries, backoff hints, counted failures."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span
from opentelemetry.sdk.trace.export import SpanExportResult

from tailcut.exporters import OtlpForwarder


class Endpoint(http.server.ThreadingHTTPServer):
    """Answers each POST with the next scripted status (then 200), recording what arrived."""

    def __init__(self, statuses: list[tuple[int, dict[str, str]]]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.statuses = statuses
        self.requests: list[tuple[str, dict[str, str], bytes, float]] = []


class Handler(http.server.BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.server.requests.append((self.path, headers, body, time.monotonic()))
        status, headers = self.server.statuses.pop(0) if self.server.statuses else (200, {})
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint([])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def batch(spans: int = 3) -> list[ResourceSpans]:
    message = ResourceSpans()
    scope = message.scope_spans.add()
    for i in range(spans):
        scope.spans.append(Span(trace_id=b"\x01" * 16, span_id=bytes([0] * 7 + [i + 1]), name=f"s{i}"))
    return [message]


def test_retries_429_and_503_then_delivers_the_same_request(endpoint: Endpoint) -> None:
    endpoint.statuses[:] = [(429, {"Retry-After": "0"}), (503, {})]
    forwarder = OtlpForwarder(
        f"http://127.0.0.1:{endpoint.server_port}", backoff=0.01, headers={"x-key": "k"}
    )
    assert forwarder.export(batch()) == SpanExportResult.SUCCESS
    assert len(endpoint.requests) == 3
    path, headers, body, _ = endpoint.requests[-1]
    assert path == "/v1/traces"
    assert (headers["content-type"], headers["content-encoding"], headers["x-key"]) == (
        "application/x-protobuf",
        "gzip",
        "k",
    )
    request = ExportTraceServiceRequest.FromString(gzip.decompress(body))
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == ["s0", "s1", "s2"]
    assert forwarder.stats() == {"spans_sent": 3, "spans_failed": 0, "requests_failed": 0, "retries": 2}


def test_retry_after_is_honoured(endpoint: Endpoint) -> None:
    endpoint.statuses[:] = [(503, {"Retry-After": "1"})]
    forwarder = OtlpForwarder(
        f"http://127.0.0.1:{endpoint.server_port}/v1/traces", backoff=0.01, max_backoff=2
    )
    assert forwarder.export(batch()) == SpanExportResult.SUCCESS
    assert endpoint.requests[1][3] - endpoint.requests[0][3] >= 0.9


def test_refusals_and_exhausted_retries_are_counted(endpoint: Endpoint) -> None:
    endpoint.statuses[:] = [(400, {})]
    forwarder = OtlpForwarder(f"http://127.0.0.1:{endpoint.server_port}", backoff=0.01, max_attempts=2)
    assert forwarder.export(batch(2)) == SpanExportResult.FAILURE
    assert len(endpoint.requests) == 1  # 400 is not retryable
    endpoint.statuses[:] = [(503, {}), (503, {})]
    assert forwarder.export(batch(4)) == SpanExportResult.FAILURE
    assert forwarder.stats() == {"spans_sent": 0, "spans_failed": 6, "requests_failed": 2, "retries": 1}
    unreachable = OtlpForwarder("http://127.0.0.1:9", backoff=0.01, max_attempts=2, timeout=1)
    assert unreachable.export(batch(1)) == SpanExportResult.FAILURE
    assert unreachable.stats()["spans_failed"] == 1
    forwarder.shutdown()
    assert forwarder.export(batch(1)) == SpanExportResult.FAILURE  # after shutdown: refused, counted
    assert forwarder.stats()["spans_failed"] == 7


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="compression"):
        OtlpForwarder("http://127.0.0.1:4318", compression="brotli")
    with pytest.raises(ValueError, match="max_attempts"):
        OtlpForwarder("http://127.0.0.1:4318", max_attempts=0)
