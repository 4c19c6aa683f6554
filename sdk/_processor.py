"""A batch span processor that never loses a span without saying so.

The OpenTelemetry SDK's ``BatchSpanProcessor`` drops spans when its queue (2048 by default) is full, which
an agent producing a burst of tool and model spans reaches easily; the loss is easy to miss. This
processor sizes the queue for agent workloads, counts every span it could not hand to the exporter
(queue full, export failed, ended after shutdown), warns once when that first happens, and reports the
counts through :func:`tailcut.stats`. ``force_flush`` and ``shutdown`` export everything still queued.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tailcut._config import counters

_logger = logging.getLogger("tailcut")


class RecordingSpanProcessor(SpanProcessor):
    """Batches ended spans to ``exporter`` on a worker thread, counting every span it loses.

    Parameters
    ----------
    exporter
        Any OpenTelemetry ``SpanExporter``.
    max_queue_size
        Spans held while the exporter catches up; beyond it a span is dropped and counted.
    max_export_batch_size
        Spans per ``export`` call.
    schedule_delay_millis
        Longest a span waits before its batch is exported.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = 65536,
        max_export_batch_size: int = 1024,
        schedule_delay_millis: float = 500,
    ) -> None:
        if max_queue_size < 1 or max_export_batch_size < 1:
            raise ValueError("max_queue_size and max_export_batch_size must be positive")
        self.exporter = exporter
        self._max_queue = max_queue_size
        self._batch = min(max_export_batch_size, max_queue_size)
        self._delay = schedule_delay_millis / 1000
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._cond = threading.Condition()
        self._export_lock = threading.Lock()
        self._shutdown = False
        self._worker = threading.Thread(target=self._run, name="tailcut-span-export", daemon=True)
        self._worker.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context or not span.context.trace_flags.sampled:
            return
        with self._cond:
            if self._shutdown:
                self._lose(1, "ended after shutdown")
                return
            if len(self._queue) >= self._max_queue:
                self._lose(1, "the export queue is full (raise max_queue_size or export faster)")
                return
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._cond.notify()

    def _lose(self, n: int, why: str) -> None:
        counters.add("spans_dropped", n)
        counters.warn_once(
            "drop:" + why, "tailcut: %d span(s) lost: %s; see tailcut.stats() for the running count", n, why
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._shutdown and len(self._queue) < self._batch:
                    self._cond.wait(self._delay)
                if self._shutdown:
                    return
            self._export_pending()

    def _take_batch(self) -> list[ReadableSpan]:
        with self._cond:
            n = min(self._batch, len(self._queue))
            return [self._queue.popleft() for _ in range(n)]

    def _export_pending(self, deadline: float | None = None) -> bool:
        """Export queued spans until the queue is empty (or the deadline passes)."""
        with self._export_lock:
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    return False
                batch = self._take_batch()
                if not batch:
                    return True
                try:
                    result = self.exporter.export(batch)
                except Exception:  # an exporter bug must not kill the worker
                    _logger.exception("tailcut: span exporter raised")
                    result = SpanExportResult.FAILURE
                if result == SpanExportResult.SUCCESS:
                    counters.add("spans_exported", len(batch))
                else:
                    counters.add("spans_export_failed", len(batch))
                    self._lose(len(batch), "the exporter failed (is the collector reachable?)")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            if self._shutdown:
                return False
        ok = self._export_pending(deadline)
        return ok and self.exporter.force_flush(max(0, int((deadline - time.monotonic()) * 1000)))

    def shutdown(self) -> None:
        with self._cond:
            if self._shutdown:
                return
        self._export_pending(time.monotonic() + 30)
        with self._cond:
            self._shutdown = True
            remaining = len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if remaining:
            self._lose(remaining, "shutdown timed out before they were exported")
        self._worker.join(timeout=5)
        self.exporter.shutdown()
