"""Forward kept spans to another OTLP endpoint (``exporters.otlphttp`` / ``exporters.otlp``), off the writer.

The writer thread already holds each batch as an encoded ``ExportTraceServiceRequest`` and hands those
bytes to :class:`ForwardQueue`, which sends them on its own thread: the Parquet write never waits for a
downstream, and a downstream that is down, hangs or answers garbage cannot lose a local row. The queue
is bounded (:data:`MAX_QUEUED_BYTES`); a batch that does not fit, or that still fails after its retries,
is counted (``tailcut_forwarded_spans_total{outcome="failed"}``) and logged. Forwarding is best effort:
it is not covered by the write-ahead log.

OTLP/HTTP uses :class:`tailcut.exporters.OtlpForwarder`; OTLP/gRPC (which it does not speak) is a raw
``TraceService/Export`` call here. Both retry with :func:`tailcut.exporters._retry.retrying`: retryable
answers (HTTP 429/502/503/504, gRPC ``UNAVAILABLE``/``RESOURCE_EXHAUSTED``/``DEADLINE_EXCEEDED``),
connection failures and answers that are not HTTP, with exponential backoff (:data:`BACKOFF` doubling
up to :data:`MAX_BACKOFF`, longer if the server asks), at most :data:`MAX_ATTEMPTS` attempts per batch,
each waiting at most the exporter's ``timeout``.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Final, Protocol

import grpc
from opentelemetry.sdk.trace.export import SpanExportResult

from tailcut.collector._config import ForwarderConfig
from tailcut.collector._metrics import CollectorMetrics
from tailcut.exporters import OtlpForwarder
from tailcut.exporters._retry import RetryLater, retrying

_logger = logging.getLogger("tailcut.collector")
_RETRYABLE_GRPC = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
#: Encoded bytes of batches waiting for the forwarders; a batch past it is counted as failed.
MAX_QUEUED_BYTES: Final = 64 * 1024 * 1024
#: Longest wait at shutdown for queued batches to be sent.
DRAIN_SECONDS: Final = 10.0
#: Attempts per batch (within the exporter's timeout), and the backoff before the second.
MAX_ATTEMPTS: Final = 5
BACKOFF: Final = 0.5
MAX_BACKOFF: Final = 8.0


class Forwarder(Protocol):
    """Sends encoded ``ExportTraceServiceRequest`` bodies downstream."""

    name: str

    def export_bytes(self, body: bytes, span_count: int) -> bool:
        """Send one request; True when the endpoint accepted it."""

    def shutdown(self) -> None:
        """Release connections, interrupting a retry wait."""


def make_forwarder(config: ForwarderConfig) -> Forwarder:
    """The forwarder for an ``otlphttp`` or ``otlp`` exporter block."""
    return HttpForwarder(config) if config.protocol == "http" else GrpcForwarder(config)


class ForwardQueue:
    """Batches waiting for the forwarders, sent in order by one thread."""

    def __init__(self, metrics: CollectorMetrics) -> None:
        self._metrics = metrics
        self._forwarders: list[Forwarder] = []
        self._queue: queue.SimpleQueue[tuple[bytes, int] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.queued_bytes = 0
        self._thread: threading.Thread | None = None

    def start(self, forwarders: list[Forwarder]) -> None:
        self._forwarders = forwarders
        if forwarders:
            self._thread = threading.Thread(target=self._run, name="tailcut-forwarder", daemon=True)
            self._thread.start()

    def put(self, body: bytes, span_count: int) -> None:
        """Queue one batch for every forwarder (never blocks)."""
        if not self._forwarders:
            return
        with self._lock:
            fits = self.queued_bytes + len(body) <= MAX_QUEUED_BYTES
            if fits:
                self.queued_bytes += len(body)
        if fits:
            self._queue.put((body, span_count))
            return
        for forwarder in self._forwarders:
            self._metrics.forwarded_spans.labels(forwarder.name, "failed").inc(span_count)
        _logger.error("tailcut collector: forward queue full, %d spans not forwarded", span_count)

    def close(self, timeout: float) -> None:
        """Send what is queued for up to ``timeout`` (at most :data:`DRAIN_SECONDS`), then stop.

        Stopping interrupts a retry; batches still queued then are counted as failed.
        """
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(min(timeout, DRAIN_SECONDS))
        for forwarder in self._forwarders:
            forwarder.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._forwarders = []

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            body, span_count = item
            for forwarder in self._forwarders:
                try:
                    ok = forwarder.export_bytes(body, span_count)
                except Exception:  # a bug in one forwarder must not stop forwarding
                    _logger.exception("tailcut collector: %s failed", forwarder.name)
                    ok = False
                self._metrics.forwarded_spans.labels(forwarder.name, "ok" if ok else "failed").inc(span_count)
            with self._lock:
                self.queued_bytes -= len(body)


class HttpForwarder:
    """OTLP/HTTP protobuf through :class:`tailcut.exporters.OtlpForwarder`."""

    def __init__(self, config: ForwarderConfig) -> None:
        self.name = config.name
        self._forwarder = OtlpForwarder(
            config.endpoint,
            headers=config.headers,
            timeout=config.timeout,
            max_attempts=MAX_ATTEMPTS,
            backoff=BACKOFF,
            max_backoff=MAX_BACKOFF,
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
        self._stopped = threading.Event()
        if config.insecure:
            self._channel = grpc.insecure_channel(config.endpoint)
        else:
            self._channel = grpc.secure_channel(config.endpoint, grpc.ssl_channel_credentials())
        self._call = self._channel.unary_unary(_EXPORT, request_serializer=None, response_deserializer=None)

    def export_bytes(self, body: bytes, span_count: int) -> bool:
        if self._stopped.is_set():
            return False
        config = self._config
        compression = (
            grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
        )
        metadata = tuple((key.lower(), value) for key, value in config.headers.items())
        policy = retrying(
            max_attempts=MAX_ATTEMPTS, backoff=BACKOFF, max_backoff=MAX_BACKOFF, stopped=self._stopped
        )
        try:
            for attempt in policy:
                with attempt:
                    self._send(body, config.timeout, metadata, compression)
        except RetryLater as exc:
            _logger.error("tailcut collector: %s could not forward %d spans: %s", self.name, span_count, exc)
            return False
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            _logger.error("tailcut collector: %s refused %d spans: %s", self.name, span_count, code)
            return False
        return True

    def _send(
        self,
        body: bytes,
        timeout: float,
        metadata: tuple[tuple[str, str], ...],
        compression: grpc.Compression,
    ) -> None:
        try:
            self._call(body, timeout=timeout, metadata=metadata, compression=compression)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code in _RETRYABLE_GRPC:
                raise RetryLater(str(code)) from None
            raise

    def shutdown(self) -> None:
        self._stopped.set()
        self._channel.close()
