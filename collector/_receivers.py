"""The OTLP receivers (HTTP and gRPC) and the metrics endpoint, all on the collector's event loop.

Both receivers hand the encoded request to the same ingest function and translate its outcome into
the transport's vocabulary: 200 / OK with an ``ExportTraceServiceResponse`` (``partial_success`` when
some spans were refused), or an :class:`~tailcut.collector._otlp.OtlpError` as an HTTP status with a
``google.rpc.Status`` body (and ``Retry-After`` for 429) or a gRPC status code (with
``google.rpc.RetryInfo`` for ``RESOURCE_EXHAUSTED``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import grpc
from google.rpc import code_pb2

from tailcut.collector._http import HttpServer, Request, Response, text_response
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._otlp import (
    PROTOBUF,
    OtlpError,
    content_kind,
    decompress,
    export_response,
    json_to_protobuf,
    retry_info,
    status_body,
    status_message,
    too_large,
)

TRACES_PATH = "/v1/traces"
GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class IngestResult(NamedTuple):
    """What ingest accepted from one request."""

    accepted: int
    rejected: int = 0
    message: str = ""


#: Ingest one encoded ``ExportTraceServiceRequest``; raises ``OtlpError`` to refuse it whole.
Ingest = Callable[[bytes | bytearray, str], IngestResult]

_OUTCOMES = {400: "bad_request", 413: "too_large", 415: "unsupported", 429: "overloaded", 503: "unavailable"}


def _record(metrics: CollectorMetrics, transport: str, result: IngestResult | OtlpError) -> None:
    if isinstance(result, OtlpError):
        metrics.requests[transport, _OUTCOMES.get(result.http_status, "error")] += 1
        return
    metrics.requests[transport, "partial" if result.rejected else "ok"] += 1


class OtlpHttpReceiver:
    """``POST /v1/traces`` with protobuf or JSON bodies, optionally gzip/deflate-compressed."""

    def __init__(self, ingest: Ingest, metrics: CollectorMetrics, max_body: int) -> None:
        self._ingest = ingest
        self._metrics = metrics
        self._max_body = max_body
        self.server = HttpServer(
            {TRACES_PATH: {"POST": self.export}, "/healthz": {"GET": _healthz}},
            max_body=max_body,
            too_large=self._too_large,
        )

    def export(self, request: Request) -> Response:
        kind = PROTOBUF
        try:
            kind = content_kind(request.headers.get("content-type", ""))
            body = decompress(request.body, request.headers.get("content-encoding", ""), self._max_body)
            if kind != PROTOBUF:
                body = json_to_protobuf(body)
            result = self._ingest(body, "http")
        except OtlpError as error:
            _record(self._metrics, "http", error)
            headers = (
                [("Retry-After", str(math.ceil(error.retry_after)))] if error.retry_after is not None else []
            )
            return Response(error.http_status, status_body(kind, error), content_type=kind, headers=headers)
        _record(self._metrics, "http", result)
        return Response(200, export_response(kind, result.rejected, result.message), content_type=kind)

    def _too_large(self, request: Request, size: int) -> Response:
        error = too_large(f"request body of {size} bytes exceeds max_request_body_size ({self._max_body})")
        _record(self._metrics, "http", error)
        try:
            kind = content_kind(request.headers.get("content-type", ""))
        except OtlpError:
            kind = PROTOBUF
        return Response(413, status_body(kind, error), content_type=kind)


def _healthz(request: Request) -> Response:
    return text_response(200, "ok")


class OtlpGrpcReceiver:
    """``opentelemetry.proto.collector.trace.v1.TraceService/Export`` over gRPC (``grpc.aio``)."""

    def __init__(self, ingest: Ingest, metrics: CollectorMetrics, max_message: int) -> None:
        self._ingest = ingest
        self._metrics = metrics
        self.server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", max_message), ("grpc.so_reuseport", 0)]
        )
        handler = grpc.method_handlers_generic_handler(
            GRPC_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self.export)}
        )
        self.server.add_generic_rpc_handlers((handler,))

    async def start(self, host: str, port: int) -> int:
        bound = self.server.add_insecure_port(f"{host}:{port}")
        if bound == 0:
            raise OSError(f"cannot listen on {host}:{port}")
        await self.server.start()
        return bound

    async def close(self, grace: float = 2.0) -> None:
        await self.server.stop(grace)

    async def export(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            result = self._ingest(request, "grpc")
        except OtlpError as error:
            _record(self._metrics, "grpc", error)
            metadata: list[tuple[str, bytes]] = [
                (
                    "grpc-status-details-bin",
                    status_message(error.grpc_code, error.message, error.retry_after).SerializeToString(),
                )
            ]
            if error.retry_after is not None:
                # What the OpenTelemetry Python exporter reads for the delay (others read the status details).
                metadata.append(
                    ("google.rpc.retryinfo-bin", retry_info(error.retry_after).SerializeToString())
                )
            await context.abort(
                _GRPC_CODES[error.grpc_code], error.message, trailing_metadata=tuple(metadata)
            )
            raise AssertionError("unreachable: abort raises") from None
        _record(self._metrics, "grpc", result)
        return export_response(PROTOBUF, result.rejected, result.message)


_GRPC_CODES = {
    code_pb2.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    code_pb2.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    code_pb2.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    code_pb2.INTERNAL: grpc.StatusCode.INTERNAL,
}


class MetricsServer:
    """``GET /metrics`` (Prometheus text) and ``GET /healthz``."""

    def __init__(self, metrics: CollectorMetrics, healthy: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._healthy = healthy
        self.server = HttpServer(
            {"/metrics": {"GET": self.scrape}, "/healthz": {"GET": self.health}}, max_body=0
        )

    def scrape(self, request: Request) -> Response:
        return Response(200, self._metrics.exposition(), content_type=self._metrics.content_type)

    def health(self, request: Request) -> Response:
        return text_response(200, "ok") if self._healthy() else text_response(503, "shutting down")
