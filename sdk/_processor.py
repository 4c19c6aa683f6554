"""Exporting spans with every one accounted for: OpenTelemetry's batch processor, counted and bounded.

:class:`RecordingSpanProcessor` is the OpenTelemetry SDK's ``BatchSpanProcessor`` (its worker thread,
its ``OTEL_BSP_*`` settings, and its fork handling: a child process forked after ``tailcut.init()``
starts with an empty queue and a worker of its own) with four additions:

* a span that would overflow the queue is refused and counted, where the SDK's processor would drop
  the oldest queued span with only a log line; the queue is sized for agent bursts (65536 spans);
* the exporter is wrapped in a :class:`CountingExporter`, which counts every span exported or lost
  (read them with :func:`tailcut.stats`) and, in a forked child, builds a fresh exporter so the child
  never writes on a connection it shares with its parent;
* each batch goes out in export requests of at most ``max_export_bytes`` encoded bytes, a span too big
  for one request with its pieces in carrier spans (:mod:`tailcut._carriers`), so no request is over
  the collector's receive limit; carriers are not counted, only the spans they carry for;
* :meth:`~RecordingSpanProcessor.shutdown` and :meth:`~RecordingSpanProcessor.force_flush` keep to a
  deadline: an unreachable collector cannot hold the agent's exit longer than ``shutdown_timeout``
  (plus half a second), and what is still queued then is counted as lost and reported.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from tailcut import environment
from tailcut._carriers import MIN_BOUND, default_bound, export_bounded
from tailcut._config import counters
from tailcut._guard import internal_error

_logger = logging.getLogger("tailcut")

#: What became of a batch: exported, failed in the exporter, or refused after the shutdown deadline.
Outcome = Literal["exported", "failed", "refused"]
#: How long a late shutdown waits, after the deadline, for the exporter to give up its retries.
_GRACE_SECONDS = 0.5


def lose(n: int, why: str) -> None:
    """Count ``n`` lost spans, and warn the first time spans are lost for this reason."""
    counters.add("spans_dropped", n)
    counters.warn_once(
        "drop:" + why, "tailcut: %d span(s) lost: %s; see tailcut.stats() for the running count", n, why
    )


def count_outcome(n: int, outcome: Outcome) -> None:
    """Count one batch's outcome in :func:`tailcut.stats`."""
    if outcome == "exported":
        counters.add("spans_exported", n)
    elif outcome == "failed":
        counters.add("spans_export_failed", n)
        lose(n, "the exporter failed (is the collector reachable?)")
    else:
        lose(n, "the shutdown timeout passed before they were exported")


class CountingExporter(SpanExporter):
    """Wraps a span exporter and reports each batch's :data:`Outcome` to ``settle(n, outcome)``.

    Parameters
    ----------
    exporter
        The exporter that sends the spans.
    settle
        Called once per batch, on the exporting thread.
    rebuild
        Makes a new exporter like ``exporter``; when given, a child process forked after this one
        was made exports through a fresh one (its own connections) instead of the parent's.
    max_export_bytes
        Largest export request in encoded bytes (see :mod:`tailcut._carriers`); None sends each batch
        in one call.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        settle: Callable[[int, Outcome], None] = count_outcome,
        *,
        rebuild: Callable[[], SpanExporter] | None = None,
        max_export_bytes: int | None = None,
    ) -> None:
        self._settle = settle
        self._rebuild = rebuild
        self.max_export_bytes = max_export_bytes
        self._use(exporter)
        self._expired = threading.Event()
        self._pid = os.getpid()

    def _use(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._export = exporter.export  # bound now: a foreign exporter's own method may be replaced
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        if self._expired.is_set():
            self._settle(n, "refused")
            return SpanExportResult.FAILURE
        if self._pid != os.getpid():
            self._pid = os.getpid()
            if self._rebuild is not None:
                self._use(self._rebuild())
        if self.max_export_bytes is None:
            result = self._send(spans)
            self._settle(n, "exported" if result == SpanExportResult.SUCCESS else "failed")
            return result
        exported, failed = export_bounded(spans, self.max_export_bytes, self._send, oversize=_oversize)
        if exported:
            self._settle(exported, "exported")
        if failed:
            self._settle(failed, "failed")
        return SpanExportResult.FAILURE if failed else SpanExportResult.SUCCESS

    def _send(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            return self._export(spans)
        except Exception as exc:  # an exporter bug must not kill the processor's worker
            counters.warn_once("exporter-raised", "tailcut: the span exporter raised %s", exc, exc_info=exc)
            return SpanExportResult.FAILURE

    def expire(self) -> None:
        """The deadline passed: refuse further batches and cut the exporter's retries short."""
        self._expired.set()
        # The exporter's shutdown interrupts its retry backoff; it may block, so not on this thread.
        threading.Thread(target=self.shutdown, name="tailcut-exporter-shutdown", daemon=True).start()

    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        try:
            self.exporter.shutdown()
        except Exception as exc:
            internal_error("shutting the span exporter down", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def _oversize(size: int) -> None:
    counters.warn_once(
        "export-oversize",
        "tailcut: a span of about %d encoded bytes is over the export bound even without its pieces "
        "(a self-contained payload?); it is sent alone and a collector may refuse it",
        size,
    )


def run_bounded(fn: Callable[[], Any], seconds: float, *, name: str) -> threading.Thread:
    """Run ``fn`` on a daemon thread and wait for it at most ``seconds``; returns the thread.

    The caller tells from ``thread.is_alive()`` whether ``fn`` finished in time. An exception in
    ``fn`` is an internal error (counted, logged once).
    """

    def guarded() -> None:
        try:
            fn()
        except Exception as exc:
            internal_error(name, exc)

    thread = threading.Thread(target=guarded, name=f"tailcut-{name}", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new threads this late in interpreter shutdown: run it here
        guarded()
        return thread
    thread.join(seconds)
    return thread


class RecordingSpanProcessor(BatchSpanProcessor):
    """Batches ended spans to ``exporter`` on OpenTelemetry's worker thread, counting every span lost.

    Each setting is the argument, else its environment variable, else tailcut's default.

    Parameters
    ----------
    exporter
        Any OpenTelemetry ``SpanExporter``.
    max_queue_size
        Spans held while the exporter catches up; beyond it a span is refused and counted
        (``TAILCUT_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_QUEUE_SIZE``, 65536).
    max_export_batch_size
        Spans per ``export`` call (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, 512; at most the queue size).
    schedule_delay_millis
        Longest a span waits before its batch is exported (``OTEL_BSP_SCHEDULE_DELAY``, 500).
    shutdown_timeout
        Seconds :meth:`shutdown` waits for queued spans (``TAILCUT_SHUTDOWN_TIMEOUT``, 3).
    rebuild_exporter
        Makes a fresh exporter for a forked child (see :class:`CountingExporter`).
    max_export_bytes
        Largest export request in encoded bytes. For an OTLP exporter, ``TAILCUT_MAX_EXPORT_BYTES``, else
        3 MiB over gRPC and 16 MiB over HTTP; any other exporter (no receive limit) gets each batch
        whole unless this is given.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int | None = None,
        max_export_batch_size: int | None = None,
        schedule_delay_millis: float | None = None,
        shutdown_timeout: float | None = None,
        rebuild_exporter: Callable[[], SpanExporter] | None = None,
        max_export_bytes: int | None = None,
    ) -> None:
        env = environment
        if max_export_bytes is None and (default := default_bound(exporter)) is not None:
            max_export_bytes = env.get_int(env.TAILCUT_MAX_EXPORT_BYTES, default, minimum=MIN_BOUND)
        queue = max_queue_size or env.get_int(
            env.TAILCUT_MAX_QUEUE_SIZE, env.get_int(env.OTEL_BSP_MAX_QUEUE_SIZE, env.DEFAULT_MAX_QUEUE_SIZE)
        )
        batch = max_export_batch_size or env.get_int(
            env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, env.DEFAULT_MAX_EXPORT_BATCH_SIZE
        )
        delay = schedule_delay_millis or env.get_int(
            env.OTEL_BSP_SCHEDULE_DELAY, env.DEFAULT_SCHEDULE_DELAY_MILLIS
        )
        if shutdown_timeout is None:
            shutdown_timeout = env.get_float(env.TAILCUT_SHUTDOWN_TIMEOUT, env.DEFAULT_SHUTDOWN_TIMEOUT)
        if queue < 1 or batch < 1 or shutdown_timeout < 0:
            raise ValueError("max_queue_size and max_export_batch_size must be > 0, shutdown_timeout >= 0")
        if max_export_bytes is not None and max_export_bytes < MIN_BOUND:
            raise ValueError(f"max_export_bytes must be at least {MIN_BOUND}")
        self.shutdown_timeout = shutdown_timeout
        self._max_queue = queue
        self._reset_accounting()
        self._counting = CountingExporter(
            exporter, self._settle, rebuild=rebuild_exporter, max_export_bytes=max_export_bytes
        )
        super().__init__(
            self._counting,
            max_queue_size=queue,
            max_export_batch_size=min(batch, queue),
            schedule_delay_millis=delay,
        )
        if hasattr(os, "register_at_fork"):
            reset = weakref.WeakMethod(self._reset_accounting)

            def after_fork_in_child() -> None:
                method = reset()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_fork_in_child)

    def _reset_accounting(self) -> None:
        """Start counting afresh (at creation, and in a forked child: the queued spans are the parent's)."""
        self._lock = threading.Lock()
        self._pending = 0  # accepted and not yet settled: queued, or in an export call
        self._closed = False  # shutdown began: refuse new spans
        self._final = False  # shutdown took its final count: ignore late outcomes

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        with self._lock:
            if self._closed:
                refused = "they ended after tailcut.shutdown()"
            elif self._pending >= self._max_queue:
                refused = "the export queue is full (raise max_queue_size or export faster)"
            else:
                self._pending += 1
                refused = None
        if refused is not None:
            lose(1, refused)
            return
        super().on_end(span)

    def _settle(self, n: int, outcome: Outcome) -> None:
        with self._lock:
            if self._final:
                return
            self._pending -= n
        count_outcome(n, outcome)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every queued span; False when that did not finish within ``timeout_millis``."""
        if self._closed:
            return False
        flush = functools.partial(BatchSpanProcessor.force_flush, self)
        return not run_bounded(flush, timeout_millis / 1000, name="flush").is_alive()

    def shutdown(self, timeout: float | None = None) -> None:
        """Export what is queued within ``timeout`` seconds (default ``shutdown_timeout``), then stop.

        Spans still queued or in an export call by then are counted as lost (``spans_dropped``).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        seconds = self.shutdown_timeout if timeout is None else timeout
        stop = functools.partial(BatchSpanProcessor.shutdown, self)
        worker = run_bounded(stop, seconds, name="shutdown")
        if worker.is_alive():
            self._counting.expire()
            worker.join(_GRACE_SECONDS)
        with self._lock:
            self._final = True
            lost, self._pending = self._pending, 0
        if lost:
            lose(lost, "tailcut.shutdown() timed out before they were exported")
