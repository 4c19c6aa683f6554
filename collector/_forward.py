"""Forward kept spans to another OTLP endpoint (``exporters.otlphttp`` / ``exporters.otlp``).

The writer thread already holds each batch as an encoded ``ExportTraceServiceRequest``, so forwarding
sends those bytes as they are. OTLP/HTTP uses :class:`tailcut.exporters.OtlpForwarder`; OTLP/gRPC (which
it does not speak) is a raw ``TraceService/Export`` call here. Retryable answers are retried with
doubling backoff until the exporter's ``timeout``; a batch that still fails is counted
(``tailcut_forwarded_spans_total{outcome="failed"}``) and logged, never retried forever, so a dead
downstream delays the Parquet writer by at most the retries of each batch.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import grpc
from opentelemetry.sdk.trace.export import SpanExportResult

from tailcut.collector._config import ForwarderConfig
from tailcut.exporters import OtlpForwarder

_logger = logging.getLogger("tailcut.collector")
_RETRYABLE_GRPC = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Forwarder(Protocol):
    """Sends encoded ``ExportTraceServiceRequest`` bodies downstream."""

    name: str

    def export_bytes(self, body: bytes, span_count: int) -> bool:
        """Send one request; True when the endpoint accepted it."""

    def shutdown(self) -> None:
        """Release connections."""


def make_forwarder(config: ForwarderConfig) -> Forwarder:
    """The forwarder for an ``otlphttp`` or ``otlp`` exporter block."""
    return HttpForwarder(config) if config.protocol == "http" else GrpcForwarder(config)


class HttpForwarder:
    """OTLP/HTTP protobuf through :class:`tailcut.exporters.OtlpForwarder`."""

    def __init__(self, config: ForwarderConfig) -> None:
        self.name = config.name
        self._forwarder = OtlpForwarder(
            config.endpoint,
            headers=config.headers,
            timeout=config.timeout,
            compression="gzip" if config.compression == "gzip" else None,
        )

    def export_bytes(self, body: bytes, span_count: int) -> bool:
        return self._forwarder.export_bytes(body, span_count) == SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._forwarder.shutdown()


class GrpcForwarder:
    """OTLP/gRPC with the request bytes passed through unchanged."""

    def __init__(self, config: ForwarderConfig) -> None:
        self.name = config.name
        self._config = config
        if config.insecure:
            self._channel = grpc.insecure_channel(config.endpoint)
        else:
            self._channel = grpc.secure_channel(config.endpoint, grpc.ssl_channel_credentials())
        self._call = self._channel.unary_unary(_EXPORT, request_serializer=None, response_deserializer=None)

    def export_bytes(self, body: bytes, span_count: int) -> bool:
        config = self._config
        compression = (
            grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
        )
        metadata = tuple((key.lower(), value) for key, value in config.headers.items())
        deadline = time.monotonic() + config.timeout
        delay = 0.5
        while True:
            try:
                remaining = max(deadline - time.monotonic(), 0.1)
                self._call(body, timeout=remaining, metadata=metadata, compression=compression)
                return True
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                if code not in _RETRYABLE_GRPC or time.monotonic() + delay > deadline:
                    _logger.error(
                        "tailcut collector: %s could not forward %d spans: %s", self.name, span_count, code
                    )
                    return False
            time.sleep(delay)
            delay = min(delay * 2, 8.0)

    def shutdown(self) -> None:
        self._channel.close()
