"""The writer thread: kept spans become ``spans`` rows, every decision a ``traces`` row, kept spans forwarded.

The event loop hands over decided traces and goes back to receiving; this thread does the expensive
part, only for what was kept: it appends the sampling attributes (``tailcut.sampling.policies``,
``.probability``, ``.baseline`` on every kept span, the trace signals on the root) to each span's
encoded bytes (a repeated protobuf field may simply be appended to), reassembles the spans under their
resources and scopes into one OTLP request, normalises it with :mod:`tailcut.exporters` and writes
Parquet; the same request bytes are queued for any OTLP forwarder (:class:`~._forward.ForwardQueue`,
its own thread: a slow or dead downstream never holds up the Parquet write).

Late spans of a kept trace are written in their own batch: their tree columns describe the late spans
alone (a span whose parent was written earlier is an orphan) and their ``span_index`` continues after
the trace's earlier spans, so positions stay unique within the trace.
"""

from __future__ import annotations

import collections
import functools
import importlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import tenacity

from tailcut import attributes as attr
from tailcut.collector._config import CollectorConfig
from tailcut.collector._decide import TraceDecision
from tailcut.collector._errors import CollectorError
from tailcut.collector._forward import ForwardQueue, make_forwarder
from tailcut.collector._headsampling import forwarded_tracestate
from tailcut.collector._journal import published_record
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._otlp import SpanTraceState
from tailcut.collector._rows import traces_table
from tailcut.collector._wal import WriteAheadLog
from tailcut.collector._whole import self_contained
from tailcut.errors import TailcutError
from tailcut.exporters import BadOtlpInput, DataDirError, DataDirWriter, normalize_otlp
from tailcut.exporters._hooks import WriterHook
from tailcut.exporters._location import is_remote, location
from tailcut.exporters.wire.encode import SPAN_TAG, encode_attributes, encode_request, field
from tailcut.exporters.wire.varint import encode_varint
from tailcut.signals import TraceRow

_logger = logging.getLogger("tailcut.collector")
#: Seconds kept spans and rows accumulate before being normalised and written (batches cost less per row).
FLUSH_INTERVAL = 0.25
#: Spans that trigger a write before the interval passes.
FLUSH_SPANS = 4096
#: Seconds before the first retry to open the data dir after an I/O error, and the longest wait.
RECOVERY_BACKOFF: Final = 0.5
RECOVERY_MAX_BACKOFF: Final = 5.0
#: Submissions this close in time share their entry in the unpublished list (its age is the first's).
_AGE_RESOLUTION: Final = 0.1
#: The analysis work wired into every writer the sink opens (the per-trace features, the findings refresh
#: after each publish), as ``module:function`` taking the data dir and ``roll_seconds``. Named, not
#: imported: the collector sits beside analysis, not above it (DESIGN.md section 1), and storage only calls
#: back, through the hooks this returns.
ANALYSIS_HOOKS: Final = "tailcut.analysis._writer_hooks:pipeline_hooks"

#: Makes the post-write hooks of one writer of the data dir (called for every writer the sink opens).
HookFactory = Callable[[str, float], Sequence[WriterHook]]


class RawSpan(NamedTuple):
    """A late span: its bytes and where it came from (late spans are not decoded at all)."""

    data: bytes
    origin: Any


class KeptSpans(NamedTuple):
    """Spans of one kept trace handed to the writer: all of them, or a late batch."""

    trace_id: bytes
    #: Anything with ``data`` and ``origin`` (``RawSpan``), in arrival order.
    spans: Sequence[Any]
    decision: TraceDecision
    #: The trace signals, written on the root span (empty for a late batch).
    signal_attributes: Mapping[str, Any]
    #: For a late batch: spans of the trace handed over before it (its span_index continues from there).
    index_base: int = 0
    late: bool = False
    #: Position of the root span among ``spans`` (None for a late batch or a trace without its root).
    root: int | None = None

    @classmethod
    def late_batch(
        cls, trace_id: bytes, spans: Sequence[tuple[bytes, Any]], decision: TraceDecision, index_base: int
    ) -> KeptSpans:
        return cls(trace_id, [RawSpan(*span) for span in spans], decision, {}, index_base, late=True)

    @property
    def nbytes(self) -> int:
        return sum(len(span.data) for span in self.spans)


_STOP = object()
_RESET = object()


class _Fault(NamedTuple):
    """Marker: the write-ahead log failed, so nothing may be published until the collector resets."""

    error: BaseException


#: Errors that mean the disk (not the data) is the problem: retried, never a permanent failure.
IO_ERRORS = (OSError, DataDirError)


class Sink:
    """Receives decided traces from the event loop and writes them on its own thread.

    Every submission gets a sequence number; :attr:`published_seq` is the highest one whose rows are
    published (all files flushed), which is what lets the processor truncate its write-ahead log. The
    writer publishes everything at most ``roll_age`` after the oldest unpublished row was handed over,
    whatever the traffic (the thread wakes for that deadline even when no data arrives).

    An I/O error (disk full, the data dir gone or unwritable, the write-ahead log failing) puts the sink in
    :attr:`fault`: files being written are dropped unpublished, submissions are discarded, and the thread
    retries opening the data dir with exponential backoff (:mod:`tenacity`). Once that works,
    :attr:`ready` is set; the processor then rebuilds its state from the write-ahead log and calls
    :meth:`reset`, so everything discarded is submitted again. A malformed span is not an I/O error: its
    trace's batch is skipped (counted, logged) and the rest is written.

    Parameters
    ----------
    config
        The collector config (data dir, roll settings, forwarders).
    metrics
        Where write latency and row counts go.
    hooks
        Makes the post-write hooks of each writer from the data dir and its ``roll_seconds`` (default: the
        analysis work :data:`ANALYSIS_HOOKS` names; ``lambda path, roll: ()`` for none).
    """

    def __init__(
        self, config: CollectorConfig, metrics: CollectorMetrics, hooks: HookFactory | None = None
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._hooks = hooks
        parquet = config.parquet
        self.roll_seconds = parquet.roll_seconds if parquet is not None else FLUSH_INTERVAL
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._writer: DataDirWriter | None = None
        self._fresh: DataDirWriter | None = None
        self.forwarding = ForwardQueue(metrics)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._seq = 0
        #: (highest seq, monotonic time of the first) of the submissions not yet published, oldest first,
        #: grouped by tenths of a second.
        self._unpublished: collections.deque[tuple[int, float]] = collections.deque()
        self.published_seq = 0
        self._written_seq = 0
        self._flush_requested = threading.Event()
        self._stopping = threading.Event()
        self.backlog_bytes = 0
        #: Rows published (readable in the data dir), each once: rows handed to the writer count only when
        #: their file is published, so rows a fault discarded and the log regenerates are not counted twice.
        self.spans_written = 0
        self.rows_written = 0
        self._unpublished_rows = {"spans": 0, "traces": 0}
        #: The I/O error being recovered from (None when healthy).
        self.fault: BaseException | None = None
        metrics.gauges["tailcut_writing_failed"] = lambda: 0 if self.fault is None else 1
        #: Set once the data dir works again after a fault (the processor then calls :meth:`reset`).
        self.ready = False
        #: Set when the thread stopped after publishing everything it was handed.
        self.closed_cleanly = False
        #: Where published file names are logged before the files appear (set by the processor).
        self.wal: WriteAheadLog | None = None

    # --- lifecycle (called from the owner's thread) ---------------------------------------------------------
    def start(self) -> None:
        if self.config.parquet is not None:
            try:
                if is_remote(self.config.parquet.path):  # a missing bucket fails here, not at the first write
                    location(self.config.parquet.path).check_writable()
                self._writer = self._open_writer()
            except TailcutError as exc:
                raise CollectorError(str(exc)) from None
        self.forwarding.start([make_forwarder(forwarder) for forwarder in self.config.forwarders])
        self._thread = threading.Thread(target=self._run, name="tailcut-writer", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 120.0) -> None:
        """Write everything submitted, close files and forwarders; :class:`CollectorError` on failure."""
        if self._thread is None:
            return
        self._stopping.set()  # ends a recovery's backoff wait (a healthy writer still writes everything)
        self._queue.put(_STOP)
        self._thread.join(timeout)
        unfinished = self._thread.is_alive()
        self._thread = None
        self.forwarding.close(timeout)
        if self.fault is not None:
            kept = "; the write-ahead log keeps what was not written" if self.wal is not None else ""
            raise CollectorError(f"writing failed: {self.fault}{kept}")
        if unfinished:
            raise CollectorError(f"the writer did not finish within {timeout:g}s; some rows may be missing")

    def abort(self) -> None:
        """Stop without waiting for anything (start failed)."""
        running = False
        if self._thread is not None:
            self._stopping.set()
            self._queue.put(_STOP)
            self._thread.join(5)
            running, self._thread = self._thread.is_alive(), None
        self.forwarding.close(5)
        if self._writer is not None and not running:
            self._writer.abort()  # closes its hooks (a pending findings refresh is dropped)

    # --- from the event loop --------------------------------------------------------------------------------
    def submit(self, items: Sequence[KeptSpans | TraceRow]) -> int:
        """Hand over kept spans and ``traces`` rows, in order; returns the first one's sequence number
        (each next one's is one more). They travel as one queue entry, so the writer wakes once."""
        with self._lock:
            first = self._seq + 1
            self._seq += len(items)
            self._in_flight += len(items)
            self.backlog_bytes += sum(item.nbytes for item in items if isinstance(item, KeptSpans))
            now = time.monotonic()
            unpublished = self._unpublished
            if unpublished and now - unpublished[-1][1] < _AGE_RESOLUTION:
                unpublished[-1] = (self._seq, unpublished[-1][1])  # one entry per tenth of a second
            else:
                unpublished.append((self._seq, now))
        self._queue.put([(first + index, item) for index, item in enumerate(items)])
        return first

    def request_flush(self) -> None:
        """Publish everything soon (the write-ahead log is filling up)."""
        self._flush_requested.set()

    def fail(self, error: BaseException) -> None:
        """The write-ahead log failed: publish nothing more, recover like after a write error."""
        self._queue.put(_Fault(error))

    def reset(self) -> None:
        """Resume after a fault: discard what was submitted so far, write what comes next."""
        self.ready = False
        with self._lock:
            self._unpublished.clear()  # all discarded: the processor submits them again
        self._queue.put(_RESET)

    def oldest_unpublished_age(self) -> float:
        """Seconds since the oldest row not yet published was handed over (0 when none)."""
        with self._lock:
            return time.monotonic() - self._unpublished[0][1] if self._unpublished else 0.0

    def wait_written(self, timeout: float) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    @property
    def hooks(self) -> tuple[WriterHook, ...]:
        """The post-write hooks of the writer in use (none without a data dir)."""
        return () if self._writer is None else self._writer.hooks

    # --- the writer thread ----------------------------------------------------------------------------------
    def _open_writer(self) -> DataDirWriter:
        parquet = self.config.parquet
        assert parquet is not None
        hooks = self._hooks or _analysis_hooks
        return DataDirWriter(
            parquet.path,
            roll_bytes=parquet.roll_bytes,
            roll_seconds=parquet.roll_seconds,
            before_publish=self._log_publish,
            hooks=hooks(parquet.path, parquet.roll_seconds),
        )

    def _log_publish(self, table: str, relative: str) -> None:
        if self.wal is not None:
            self.wal.append([published_record(relative)], sync=True)

    def _run(self) -> None:
        kept: list[tuple[int, KeptSpans]] = []
        rows: list[tuple[int, TraceRow]] = []
        last_write = time.monotonic()
        stopping = False
        while not stopping:
            if self.fault is not None:
                stopping = self._recover()
                kept, rows = [], []
                continue
            timeout = self._publish_deadline() - time.monotonic()
            if kept or rows:
                timeout = min(timeout, FLUSH_INTERVAL - (time.monotonic() - last_write))
            try:
                item = self._queue.get(timeout=max(timeout, 0.0) if timeout != float("inf") else None)
            except queue.Empty:
                item = None
            while item is not None:
                if item is _STOP:
                    stopping = True
                elif isinstance(item, _Fault):
                    self._enter_fault(item.error)
                elif item is not _RESET:
                    for entry in item:
                        (kept if isinstance(entry[1], KeptSpans) else rows).append(entry)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            if self.fault is not None:
                self._discard(kept, rows)
                continue
            now = time.monotonic()
            due = stopping or now - last_write >= FLUSH_INTERVAL or now >= self._publish_deadline()
            try:
                if (kept or rows) and (due or sum(len(k.spans) for _, k in kept) >= FLUSH_SPANS):
                    self._write(kept, rows)
                    kept, rows = [], []
                    last_write = time.monotonic()
                if not stopping and time.monotonic() >= self._publish_deadline():
                    self._publish()
            except IO_ERRORS as exc:
                self._enter_fault(exc)
                self._discard(kept, rows)
                kept, rows = [], []
        if self.fault is None:
            try:
                self._publish(close=True)
                self.closed_cleanly = True
            except IO_ERRORS as exc:
                self._enter_fault(exc)

    def _publish_deadline(self) -> float:
        if self._flush_requested.is_set():
            return 0.0
        with self._lock:
            oldest = self._unpublished[0][1] if self._unpublished else None
        return float("inf") if oldest is None else oldest + self.roll_seconds

    def _publish(self, *, close: bool = False) -> None:
        """Publish every file (everything written so far becomes readable), then advance the watermark."""
        self._flush_requested.clear()
        with self._lock:
            written = self._written_seq
        if self._writer is not None:
            if close:
                self._writer.close()
            else:
                self._writer.flush()
        self._count_published()
        with self._lock:
            self.published_seq = max(self.published_seq, written)
            while self._unpublished and self._unpublished[0][0] <= written:
                self._unpublished.popleft()

    def _count_published(self) -> None:
        counts = self._unpublished_rows
        for table, count in counts.items():
            if count:
                self.metrics.rows_written.labels(table).inc(count)
        self.spans_written += counts["spans"]
        self.rows_written += counts["traces"]
        self._unpublished_rows = {"spans": 0, "traces": 0}

    def _write(self, kept: list[tuple[int, KeptSpans]], rows: list[tuple[int, TraceRow]]) -> None:
        main = [item for _, item in kept if not item.late]
        late = [item for _, item in kept if item.late]
        for group in (main, late):
            if group:
                self._write_spans(group)
        if rows:
            self._write_rows([row for _, row in rows])
        with self._idle:
            self._written_seq = max(seq for seq, _ in (*kept, *rows))
            self._done(kept, rows)

    def _drop(self, item: Any) -> None:
        """Discard one queue entry (a fault is being recovered from)."""
        if item is _STOP or item is _RESET or isinstance(item, _Fault):
            return
        self._discard(
            [entry for entry in item if isinstance(entry[1], KeptSpans)],
            [entry for entry in item if not isinstance(entry[1], KeptSpans)],
        )

    def _discard(self, kept: list[tuple[int, KeptSpans]], rows: list[tuple[int, TraceRow]]) -> None:
        with self._idle:
            self._done(kept, rows)

    def _done(self, kept: list[tuple[int, KeptSpans]], rows: list[tuple[int, TraceRow]]) -> None:
        self._in_flight -= len(kept) + len(rows)
        self.backlog_bytes -= sum(item.nbytes for _, item in kept)
        self._idle.notify_all()

    def _enter_fault(self, error: BaseException) -> None:
        if self.fault is None:
            _logger.error("tailcut collector: writing failed, retrying: %s", error)
        self.fault = error
        self._unpublished_rows = {"spans": 0, "traces": 0}  # discarded: the log regenerates them
        if self._writer is not None:
            self._writer.abort()
            self._writer = None

    def _recover(self) -> bool:
        """Retry opening the data dir until it works, then drop everything until :meth:`reset`.

        Returns True when asked to stop meanwhile.
        """
        stop = False

        def give_up(_: tenacity.RetryCallState) -> bool:
            return stop or self._stopping.is_set()

        def attempt() -> None:
            nonlocal stop
            while True:  # what arrives meanwhile is regenerated from the write-ahead log after the reset
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    return
                self._drop(item)
            self._probe()

        try:
            for retry in tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(IO_ERRORS),
                wait=tenacity.wait_exponential_jitter(multiplier=RECOVERY_BACKOFF, max=RECOVERY_MAX_BACKOFF),
                stop=give_up,
                sleep=self._stopping.wait,
                reraise=True,
            ):
                with retry:
                    attempt()
        except IO_ERRORS:
            return True
        if stop:
            return True
        self.ready = True
        while True:
            item = self._queue.get()
            if item is _STOP:
                return True
            if item is _RESET:
                break
            self._drop(item)
        self._writer, self._fresh = self._fresh, None
        self.fault = None
        _logger.warning("tailcut collector: writing works again")
        return False

    def _probe(self) -> None:
        """Open the data dir afresh and check that files can be created where the log and tables live."""
        if self.wal is not None:
            _touch(self.wal.directory)
        parquet = self.config.parquet
        if parquet is not None:
            if is_remote(parquet.path):  # a write must succeed before "writing works again" is said
                location(parquet.path).check_writable()
            else:
                for table in ("spans", "traces"):
                    _touch(Path(parquet.path) / table)
            if self._fresh is None:
                self._fresh = self._open_writer()

    def _write_spans(self, group: list[KeptSpans]) -> None:
        request = assemble_request(group)
        if self.config.forwarders:  # other backends get whole payloads, not skeletons and pieces
            self.forwarding.put(self_contained(request), sum(len(item.spans) for item in group))
        if self._writer is None:
            return
        started = time.perf_counter()
        try:
            table = normalize_otlp(request)  # the wire decoder reads the bytes: nothing is parsed twice
        except BadOtlpInput:
            table = self._normalize_each(group)
        if group[0].late:
            bases: dict[str, int] = {}
            for item in group:  # several late batches of one trace are normalised together
                trace_id = item.trace_id.hex()
                bases[trace_id] = min(bases.get(trace_id, item.index_base), item.index_base)
            table = _shift_positions(table, bases)
        self._writer.write_spans(table)
        self.metrics.write_seconds.labels("spans").observe(time.perf_counter() - started)
        self._unpublished_rows["spans"] += table.num_rows

    def _normalize_each(self, group: list[KeptSpans]) -> pa.Table:
        """Normalise trace by trace, skipping (and counting) the traces the normaliser refuses."""
        tables = []
        for item in group:
            try:
                tables.append(normalize_otlp(assemble_request([item])))
            except BadOtlpInput as exc:
                self.metrics.unwritable_spans.inc(len(item.spans))
                _logger.error("tailcut collector: trace %s not written: %s", item.trace_id.hex(), exc)
        return pa.concat_tables(tables) if tables else normalize_otlp(b"")

    def _write_rows(self, rows: list[TraceRow]) -> None:
        if self._writer is None:
            return
        started = time.perf_counter()
        table = traces_table(rows)
        self._writer.write_traces(table)
        self.metrics.write_seconds.labels("traces").observe(time.perf_counter() - started)
        self._unpublished_rows["traces"] += table.num_rows


def _analysis_hooks(path: str, roll_seconds: float) -> Sequence[WriterHook]:
    """The hooks :data:`ANALYSIS_HOOKS` names, for one writer of ``path``."""
    module, _, name = ANALYSIS_HOOKS.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory(path, roll_seconds=roll_seconds)


def _touch(directory: Path) -> None:
    """Create ``directory`` if needed and a file in it, removed again (OSError when impossible)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".probe-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def assemble_request(group: Sequence[KeptSpans]) -> bytes:
    """One encoded ``ExportTraceServiceRequest`` holding the spans of ``group`` with their attributes added.

    Spans keep the resource and scope they arrived under; every span gets the sampling attributes of its
    trace and the root span the trace signals, appended to its bytes; a span of a trace kept by the uniform
    slice alone also gets a ``tracestate`` whose ``ot=th:`` states the trace's π (:mod:`._headsampling`).
    The request is written directly
    in protobuf's wire format (a few byte joins), since the spans already are.
    """
    by_origin: dict[int, tuple[Any, list[bytes]]] = {}
    for item in group:
        decision = item.decision
        extra = _sampling_attributes(decision.policies, decision.inclusion_probability, decision.baseline)
        root_index = item.root
        for index, span in enumerate(item.spans):
            origin = span.origin
            entry = by_origin.get(id(origin))
            if entry is None:
                entry = by_origin[id(origin)] = (origin, [])
            data = span.data
            added = extra
            if decision.slice_only:
                added = _restated_threshold(data, decision.inclusion_probability) + added
            if index == root_index:
                added += encode_attributes(item.signal_attributes)
            # pieces, joined once by encode_request (no copy of each span's bytes per span)
            entry[1].extend((SPAN_TAG, encode_varint(len(data) + len(added)), data, added))
    return encode_request(by_origin.values())


_TRACE_STATE = 3  # Span.trace_state


def _restated_threshold(data: bytes, pi: float) -> bytes:
    """A ``Span.trace_state`` field to append to an encoded span (the last one wins) stating ``pi`` as
    its ``ot=th:`` threshold: the span's trace was kept by the uniform slice alone."""
    return _trace_state_field(SpanTraceState.FromString(data).trace_state, pi)


@functools.lru_cache(maxsize=1024)
def _trace_state_field(tracestate: bytes, pi: float) -> bytes:
    """The encoded field of :func:`_restated_threshold` (a few distinct upstream states and π recur)."""
    text = tracestate.decode("utf-8", "replace")
    return field(_TRACE_STATE, forwarded_tracestate(text, pi).encode("utf-8"))


@functools.lru_cache(maxsize=1024)
def _sampling_attributes(policies: tuple[str, ...], probability: float, baseline: bool) -> bytes:
    return encode_attributes(
        {
            attr.SAMPLING_POLICIES: list(policies),
            attr.SAMPLING_PROBABILITY: probability,
            attr.SAMPLING_BASELINE: baseline,
        }
    )


def _shift_positions(table: pa.Table, bases: Mapping[str, int]) -> pa.Table:
    """Offset ``span_index`` and ``subtree_end`` per trace, so late rows follow the trace's earlier rows."""
    offsets = pa.array(
        [bases.get(trace_id, 0) for trace_id in table.column("trace_id").to_pylist()], pa.int32()
    )
    for column in ("span_index", "subtree_end"):
        position = table.schema.get_field_index(column)
        table = table.set_column(position, table.schema.field(column), pc.add(table.column(column), offsets))
    return table
