"""``ParquetSpanExporter``: write the agent's own spans straight to a data dir, with no collector.

Embedded mode keeps every trace. Spans are grouped by trace as they are exported; a trace is written once
its root span has ended plus a short grace (children end before their root, but may reach the exporter in
a later batch), or when it has waited ``trace_timeout`` without a root, or when too many spans are pending
(oldest trace first). Each trace gets its ``spans`` rows and a ``traces`` row with ``kept`` true,
``inclusion_probability`` 1, no policies, ``baseline`` false and ``decision_reason`` ``embedded``. Spans
of a trace that was already written are written as a late batch (tree columns over the late spans alone).
Payloads the spans offloaded are copied into ``DATA/payloads``.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tailcut import _config
from tailcut.errors import TailcutError
from tailcut.exporters._hooks import WriterHook
from tailcut.exporters._payloads import copy_payloads, data_dir_store
from tailcut.exporters._pieces import drop_carriers
from tailcut.exporters._signals import trace_rows
from tailcut.exporters._spans import normalize_sdk
from tailcut.exporters._writer import DEFAULT_ROLL_BYTES, DEFAULT_ROLL_SECONDS, DataDirWriter
from tailcut.payloads import PayloadStore

_logger = logging.getLogger("tailcut")
#: Written trace ids remembered to recognise late spans.
_REMEMBERED_TRACES: Final = 65536


@dataclass
class _Pending:
    first_seen: float
    spans: list[ReadableSpan] = field(default_factory=list)
    root_seen: float | None = None


class ParquetSpanExporter(SpanExporter):
    """An OpenTelemetry ``SpanExporter`` that writes ``spans`` and ``traces`` rows to a data dir.

    Parameters
    ----------
    data_dir
        The data dir (created if missing).
    root_grace
        Seconds to wait after a trace's root span for stragglers before writing it.
    trace_timeout
        Seconds after which a trace without a root span is written anyway.
    max_pending_spans
        Spans held at most; beyond it the oldest traces are written early.
    payload_stores
        Where offloaded payloads are read to copy them into the data dir (default: the store the SDK
        writes to, ``tailcut.init(payload_dir=...)``).
    roll_bytes, roll_seconds
        File rolling of the underlying :class:`DataDirWriter`.
    hooks
        Post-write hooks of that writer (:class:`~tailcut.exporters._hooks.WriterHook`). None by default:
        the agent's process computes nothing from the spans it writes (no DuckDB); per-trace features
        are then left to the classifier, which reads the spans.

    Examples
    --------
    ::

        import tailcut
        from tailcut.exporters import ParquetSpanExporter

        tailcut.init(service_name="support-agent", exporter=ParquetSpanExporter("data"))
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        root_grace: float = 1.0,
        trace_timeout: float = 300.0,
        max_pending_spans: int = 100_000,
        payload_stores: Sequence[PayloadStore] | None = None,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        roll_seconds: float = DEFAULT_ROLL_SECONDS,
        hooks: Sequence[WriterHook] = (),
    ) -> None:
        if root_grace < 0 or trace_timeout <= 0 or max_pending_spans < 1:
            raise ValueError("root_grace must be >= 0, trace_timeout and max_pending_spans positive")
        self.root_grace = root_grace
        self.trace_timeout = trace_timeout
        self.max_pending_spans = max_pending_spans
        self._payload_stores = payload_stores
        self._writer = DataDirWriter(data_dir, roll_bytes=roll_bytes, roll_seconds=roll_seconds, hooks=hooks)
        self._target_store = data_dir_store(data_dir)
        self._pending: collections.OrderedDict[int, _Pending] = collections.OrderedDict()
        self._pending_spans = 0
        self._written: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stopped = threading.Event()
        self._shutdown = False
        #: Spans that could not be written (counted, never silent).
        self.spans_failed = 0
        self.payloads_missing = 0
        self._ticker = threading.Thread(target=self._tick, name="tailcut-parquet-exporter", daemon=True)
        self._ticker.start()

    # --- SpanExporter --------------------------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        now = time.monotonic()
        late: list[ReadableSpan] = []
        with self._lock:
            for span in spans:
                trace_id = span.get_span_context().trace_id
                if trace_id in self._written:
                    late.append(span)
                    continue
                pending = self._pending.get(trace_id)
                if pending is None:
                    pending = self._pending[trace_id] = _Pending(now)
                pending.spans.append(span)
                self._pending_spans += 1
                if span.parent is None:
                    pending.root_seen = now
        ok = self._write(self._take(due_only=True), late=late)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write every trace whose root has ended (without waiting for the grace) and publish all files."""
        if self._shutdown:
            return False
        ok = self._write(self._take(due_only=True, ended=True))
        try:
            self._writer.flush()
        except TailcutError:
            _logger.exception("tailcut: could not publish Parquet files")
            return False
        return ok

    def shutdown(self) -> None:
        """Write every pending trace, publish and close (idempotent)."""
        if self._shutdown:
            return
        self._shutdown = True
        self._stopped.set()
        self._ticker.join(timeout=5)
        self._write(self._take(due_only=False))
        try:
            self._writer.close()
        except TailcutError:
            _logger.exception("tailcut: could not publish Parquet files")

    # --- internals -----------------------------------------------------------------------------------------
    def _tick(self) -> None:
        interval = max(min(self.root_grace, 1.0), 0.05)
        while not self._stopped.wait(interval):
            self._write(self._take(due_only=True))
            try:
                self._writer.flush_if_due()
            except TailcutError:
                _logger.exception("tailcut: could not publish Parquet files")

    def _take(self, *, due_only: bool, ended: bool = False) -> list[list[ReadableSpan]]:
        """Remove and return the traces to write now."""
        now = time.monotonic()
        taken = []
        with self._lock:
            for trace_id, pending in list(self._pending.items()):
                root_due = pending.root_seen is not None and (
                    ended or now - pending.root_seen >= self.root_grace
                )
                timed_out = now - pending.first_seen >= self.trace_timeout
                crowded = self._pending_spans > self.max_pending_spans
                if due_only and not (root_due or timed_out or crowded):
                    continue
                del self._pending[trace_id]
                self._pending_spans -= len(pending.spans)
                self._written[trace_id] = None
                if len(self._written) > _REMEMBERED_TRACES:
                    self._written.popitem(last=False)
                taken.append(pending.spans)
        return taken

    def _write(self, traces: list[list[ReadableSpan]], late: Sequence[ReadableSpan] = ()) -> bool:
        if not traces and not late:
            return True
        with self._write_lock:
            ok = True
            for batch, with_traces_rows in (([s for t in traces for s in t], True), (list(late), False)):
                if not batch:
                    continue
                try:
                    table = normalize_sdk(batch)
                    self._copy_payloads(table)
                    self._writer.write_spans(table)
                    if with_traces_rows:
                        self._writer.write_traces(
                            trace_rows(
                                drop_carriers(table)[0],  # carriers count in nothing
                                kept=True,
                                decision_reason="embedded",
                                inclusion_probability=1.0,
                            )
                        )
                except TailcutError:
                    _logger.exception("tailcut: could not write %d span(s) to Parquet", len(batch))
                    self.spans_failed += len(batch)
                    ok = False
            return ok

    def _copy_payloads(self, table: pa.Table) -> None:
        stores = self._payload_stores
        if stores is None:
            configured = _config.current().payload_store
            stores = [configured] if configured is not None else []
        missing = copy_payloads(table, stores, self._target_store)
        if missing:
            self.payloads_missing += missing
            _logger.warning("tailcut: %d offloaded payload(s) could not be copied into the data dir", missing)
