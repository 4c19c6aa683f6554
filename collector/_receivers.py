"""The OTLP receivers (HTTP and gRPC) and the metrics endpoint, all on the collector's event loop.

Both receivers hand the encoded request to the same ingest function and translate its outcome into
the transport's vocabulary: 200 / OK with an ``ExportTraceServiceResponse`` (``partial_success`` when
some spans were refused), or an :class:`~tailcut.collector._otlp.OtlpError` as an HTTP status with a
``google.rpc.Status`` body (and ``Retry-After`` for 429 and 503) or a gRPC status code (with
``google.rpc.RetryInfo`` when a retry delay is given).

With an authenticator, a request without the right ``authorization`` is refused before anything is
read or ingested: HTTP 401 (decided on the request head, so its body is never read) or gRPC
``UNAUTHENTICATED``. ``/healthz`` answers without authentication (it tells nothing but liveness).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import grpc
from google.rpc import code_pb2

from tailcut.collector._config import GrpcReceiverConfig, HttpReceiverConfig
from tailcut.collector._http import Guard, HttpServer, Limits, Request, Response, text_response
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
    unauthenticated,
)
from tailcut.collector._security import BearerTokenAuth, EndpointSecurity

TRACES_PATH = "/v1/traces"
GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class IngestResult(NamedTuple):
    """What ingest accepted from one request."""

    accepted: int
    rejected: int = 0
    message: str = ""


#: Ingest one encoded ``ExportTraceServiceRequest``; raises ``OtlpError`` to refuse it whole.
Ingest = Callable[[bytes | bytearray, str], IngestResult]

_OUTCOMES = {
    400: "bad_request",
    401: "unauthenticated",
    413: "too_large",
    415: "unsupported",
    429: "overloaded",
    503: "unavailable",
}
HEALTH_PATH = "/healthz"


def _record(metrics: CollectorMetrics, transport: str, result: IngestResult | OtlpError) -> None:
    if isinstance(result, OtlpError):
        metrics.requests[transport, _OUTCOMES.get(result.http_status, "error")] += 1
        return
    metrics.requests[transport, "partial" if result.rejected else "ok"] += 1


class OtlpHttpReceiver:
    """``POST /v1/traces`` with protobuf or JSON bodies, optionally gzip/deflate-compressed."""

    def __init__(self, ingest: Ingest, metrics: CollectorMetrics, config: HttpReceiverConfig) -> None:
        self._ingest = ingest
        self._metrics = metrics
        self._max_body = config.max_request_body_size
        security = config.security
        self.server = HttpServer(
            {TRACES_PATH: {"POST": self.export}, HEALTH_PATH: {"GET": _healthz}},
            limits=Limits(
                max_body=config.max_request_body_size,
                header_timeout=config.read_header_timeout,
                request_timeout=config.read_timeout,
                idle_timeout=config.idle_timeout,
            ),
            too_large=self._too_large,
            guard=_bearer_guard(security.auth, self._refuse) if security.auth is not None else None,
            ssl_context=security.tls.ssl_context() if security.tls is not None else None,
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
            return self._refuse(request, error)
        _record(self._metrics, "http", result)
        return Response(200, export_response(kind, result.rejected, result.message), content_type=kind)

    def _refuse(self, request: Request, error: OtlpError) -> Response:
        """The error as a ``google.rpc.Status`` in the request's encoding (protobuf when unknown)."""
        _record(self._metrics, "http", error)
        try:
            kind = content_kind(request.headers.get("content-type", ""))
        except OtlpError:
            kind = PROTOBUF
        headers = (
            [("Retry-After", str(math.ceil(error.retry_after)))] if error.retry_after is not None else []
        )
        if error.http_status == 401:
            headers.append(("WWW-Authenticate", "Bearer"))
        return Response(error.http_status, status_body(kind, error), content_type=kind, headers=headers)

    def _too_large(self, request: Request, size: int) -> Response:
        return self._refuse(
            request,
            too_large(f"request body of {size} bytes exceeds max_request_body_size ({self._max_body})"),
        )


def _healthz(request: Request) -> Response:
    return text_response(200, "ok")


def _bearer_guard(auth: BearerTokenAuth, refuse: Callable[[Request, OtlpError], Response]) -> Guard:
    """Refuse every request but ``/healthz`` whose ``authorization`` header ``auth`` does not accept."""

    def guard(request: Request) -> Response | None:
        if request.path == HEALTH_PATH or auth.accepts(request.headers.get("authorization")):
            return None
        return refuse(request, unauthenticated())

    return guard


class OtlpGrpcReceiver:
    """``opentelemetry.proto.collector.trace.v1.TraceService/Export`` over gRPC (``grpc.aio``)."""

    def __init__(self, ingest: Ingest, metrics: CollectorMetrics, config: GrpcReceiverConfig) -> None:
        self._ingest = ingest
        self._metrics = metrics
        self._security = config.security
        self.server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", config.max_recv_msg_size), ("grpc.so_reuseport", 0)]
        )
        handler = grpc.method_handlers_generic_handler(
            GRPC_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self.export)}
        )
        self.server.add_generic_rpc_handlers((handler,))

    async def start(self, host: str, port: int) -> int:
        tls = self._security.tls
        address = f"{host}:{port}"
        if tls is not None:
            bound = self.server.add_secure_port(address, tls.grpc_credentials())
        else:
            bound = self.server.add_insecure_port(address)
        if bound == 0:
            raise OSError(f"cannot listen on {address}")
        await self.server.start()
        return bound

    async def close(self, grace: float = 2.0) -> None:
        await self.server.stop(grace)

    async def export(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            auth = self._security.auth
            if auth is not None and not auth.accepts(_metadata(context, "authorization")):
                raise unauthenticated()
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


def _metadata(context: grpc.aio.ServicerContext, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


_GRPC_CODES = {
    code_pb2.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    code_pb2.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    code_pb2.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    code_pb2.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    code_pb2.INTERNAL: grpc.StatusCode.INTERNAL,
}


class MetricsServer:
    """``GET /metrics`` (Prometheus text) and ``GET /healthz``, with the same TLS and auth as a receiver."""

    def __init__(
        self, metrics: CollectorMetrics, unhealthy: Callable[[], str | None], security: EndpointSecurity
    ) -> None:
        self._metrics = metrics
        self._unhealthy = unhealthy
        guard = None
        if security.auth is not None:
            guard = _bearer_guard(security.auth, _plain_refusal)
        self.server = HttpServer(
            {"/metrics": {"GET": self.scrape}, HEALTH_PATH: {"GET": self.health}},
            limits=Limits(max_body=0),
            guard=guard,
            ssl_context=security.tls.ssl_context() if security.tls is not None else None,
        )

    def scrape(self, request: Request) -> Response:
        return Response(200, self._metrics.exposition(), content_type=self._metrics.content_type)

    def health(self, request: Request) -> Response:
        """200 ``ok``, or 503 with the reason (shutting down; writes failing, with the error)."""
        reason = self._unhealthy()
        return text_response(200, "ok") if reason is None else text_response(503, reason)


def _plain_refusal(request: Request, error: OtlpError) -> Response:
    return text_response(error.http_status, error.message, headers=[("WWW-Authenticate", "Bearer")])
