"""``OtlpForwarder``: send kept spans on to another OTLP/HTTP endpoint (an existing tracing backend).

Requests are OTLP/HTTP protobuf (``application/x-protobuf``), gzip-compressed by default. Responses the
OTLP specification calls retryable (429, 502, 503, 504), connection failures, timeouts and answers that
are not HTTP at all are retried (:mod:`._retry`: up to ``max_attempts`` attempts, waiting ``backoff``
seconds doubled each time up to ``max_backoff``, or longer when a ``Retry-After`` header in seconds asks
for longer); any other status fails at once. Each attempt waits at most ``timeout`` seconds for the
endpoint, so a batch takes at most about ``max_attempts * timeout`` plus the waits. Every outcome is
counted (:meth:`OtlpForwarder.stats`), so a backend that drops data is visible.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.trace.export import SpanExportResult

from tailcut.exporters._retry import RetryLater, retrying

_logger = logging.getLogger("tailcut")
RETRYABLE_STATUS: Final = frozenset({429, 502, 503, 504})
TRACES_PATH: Final = "/v1/traces"


def traces_url(endpoint: str) -> str:
    """The ``/v1/traces`` URL of an endpoint given as a base URL or a full URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


class OtlpForwarder:
    """Forwards OTLP protobuf ``ResourceSpans`` to an OTLP/HTTP endpoint.

    Parameters
    ----------
    endpoint
        Base URL (``http://127.0.0.1:4318``) or full ``/v1/traces`` URL.
    headers
        Extra request headers (e.g. an API key for the backend).
    timeout
        Seconds per HTTP request.
    max_attempts
        Attempts per batch, the first included.
    backoff
        Seconds before the first retry; doubled each time, capped at ``max_backoff``.
    compression
        ``"gzip"`` or None.

    Examples
    --------
    ::

        forwarder = OtlpForwarder("http://127.0.0.1:4318")
        forwarder.export(kept_request.resource_spans)
    """

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        max_attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        compression: str | None = "gzip",
    ) -> None:
        if max_attempts < 1 or timeout <= 0 or backoff < 0:
            raise ValueError("max_attempts and timeout must be positive, backoff >= 0")
        if compression not in (None, "gzip"):
            raise ValueError(f"compression must be 'gzip' or None; got {compression!r}")
        self.url = traces_url(endpoint)
        self.headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        if compression:
            self.headers["Content-Encoding"] = compression
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.compression = compression
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._counts = {"spans_sent": 0, "spans_failed": 0, "requests_failed": 0, "retries": 0}

    def stats(self) -> dict[str, int]:
        """Counts so far: ``spans_sent``, ``spans_failed``, ``requests_failed``, ``retries``."""
        with self._lock:
            return dict(self._counts)

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, n in increments.items():
                self._counts[name] += n

    def export(self, resource_spans: Sequence[ResourceSpans]) -> SpanExportResult:
        """Send the spans; SUCCESS once the endpoint accepted them."""
        request = ExportTraceServiceRequest(resource_spans=resource_spans)
        spans = sum(len(scope.spans) for rs in resource_spans for scope in rs.scope_spans)
        return self.export_bytes(request.SerializeToString(), spans)

    def export_bytes(self, body: bytes, span_count: int) -> SpanExportResult:
        """Send an already-encoded ``ExportTraceServiceRequest`` holding ``span_count`` spans."""
        if self._stopped.is_set():
            self._count(spans_failed=span_count, requests_failed=1)
            return SpanExportResult.FAILURE
        data = gzip.compress(body) if self.compression == "gzip" else body
        policy = retrying(
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            stopped=self._stopped,
        )
        try:
            for attempt in policy:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self._count(retries=1)
                    if not self._send(data):
                        break
            else:
                self._count(spans_sent=span_count)
                return SpanExportResult.SUCCESS
        except RetryLater as exc:
            _logger.warning("tailcut: giving up on OTLP endpoint %s: %s", self.url, exc)
        self._count(spans_failed=span_count, requests_failed=1)
        return SpanExportResult.FAILURE

    def _send(self, data: bytes) -> bool:
        """True when the endpoint accepted ``data``, False when it refused it for good.

        Raises
        ------
        RetryLater
            For a retryable status (with the ``Retry-After`` delay, if given in seconds), a connection
            failure, a timeout, or an answer that is not HTTP.
        """
        request = urllib.request.Request(self.url, data=data, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
            return True
        except urllib.error.HTTPError as exc:
            exc.read()
            if exc.code not in RETRYABLE_STATUS:
                _logger.warning("tailcut: OTLP endpoint %s refused spans: HTTP %d", self.url, exc.code)
                return False
            hint = (exc.headers.get("Retry-After", "") if exc.headers else "").strip()
            raise RetryLater(f"HTTP {exc.code}", float(hint) if hint.isdigit() else None) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise RetryLater(f"cannot reach it: {exc!r}") from None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every :meth:`export` returns once its batch is sent or failed."""
        return True

    def shutdown(self) -> None:
        """Stop: a pending retry wait ends and later exports fail (counted)."""
        self._stopped.set()
