"""The writer thread: kept spans become ``spans`` rows, every decision a ``traces`` row, kept spans forwarded.

The event loop hands over decided traces and goes back to receiving; this thread does the expensive
part, only for what was kept: it appends the sampling attributes (``tailcut.sampling.policies``,
``.probability``, ``.baseline`` on every kept span, the trace signals on the root) to each span's
encoded bytes (a repeated protobuf field may simply be appended to), reassembles the spans under their
resources and scopes into one OTLP request, normalises it with :mod:`tailcut.exporters` and writes
Parquet; the same request bytes go to any OTLP forwarder.

Late spans of a kept trace are written in their own batch: their tree columns describe the late spans
alone (a span whose parent was written earlier is an orphan) and their ``span_index`` continues after
the trace's earlier spans, so positions stay unique within the trace.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from tailcut import attributes as attr
from tailcut.collector._config import CollectorConfig
from tailcut.collector._decide import TraceDecision
from tailcut.collector._errors import CollectorError
from tailcut.collector._forward import Forwarder, make_forwarder
from tailcut.collector._headsampling import forwarded_tracestate
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._otlp import SpanFacts
from tailcut.collector._rows import TraceRow, traces_table
from tailcut.errors import TailcutError
from tailcut.exporters import DataDirWriter, normalize_otlp

_logger = logging.getLogger("tailcut.collector")
_ATTRIBUTES_TAG = b"\x4a"  # Span.attributes: field 9, length-delimited
#: Seconds kept spans and rows accumulate before being normalised and written (batches cost less per row).
FLUSH_INTERVAL = 0.25
#: Spans that trigger a write before the interval passes.
FLUSH_SPANS = 4096


class RawSpan(NamedTuple):
    """A late span: its bytes and where it came from (late spans are not decoded at all)."""

    data: bytes
    origin: Any


class KeptSpans(NamedTuple):
    """Spans of one kept trace handed to the writer: all of them, or a late batch."""

    trace_id: bytes
    #: ``BufferedSpan`` records (or ``RawSpan`` for a late batch): anything with ``data`` and ``origin``.
    spans: Sequence[Any]
    decision: TraceDecision
    #: The trace signals, written on the root span (empty for a late batch).
    signal_attributes: Mapping[str, Any]
    #: For a late batch: spans of the trace handed over before it (its span_index continues from there).
    index_base: int = 0
    late: bool = False

    @classmethod
    def late_batch(
        cls, trace_id: bytes, spans: Sequence[tuple[bytes, Any]], decision: TraceDecision, index_base: int
    ) -> KeptSpans:
        return cls(trace_id, [RawSpan(*span) for span in spans], decision, {}, index_base, late=True)

    @property
    def nbytes(self) -> int:
        return sum(len(span.data) for span in self.spans)

    def root_index(self) -> int | None:
        """Position of the root span (None for a late batch or a trace without its root)."""
        if self.late:
            return None
        return next((i for i, span in enumerate(self.spans) if not span.parent_span_id), None)


_STOP = object()


class Sink:
    """Receives decided traces from the event loop and writes them on its own thread.

    Parameters
    ----------
    config
        The collector config (data dir, roll settings, forwarders).
    metrics
        Where write latency and row counts go.
    """

    def __init__(self, config: CollectorConfig, metrics: CollectorMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._writer: DataDirWriter | None = None
        self._forwarders: list[Forwarder] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self.backlog_bytes = 0
        self.spans_written = 0
        self.rows_written = 0
        self.failure: BaseException | None = None

    # --- lifecycle (called from the owner's thread) ---------------------------------------------------------
    def start(self) -> None:
        parquet = self.config.parquet
        if parquet is not None:
            try:
                self._writer = DataDirWriter(
                    parquet.path, roll_bytes=parquet.roll_bytes, roll_seconds=parquet.roll_seconds
                )
            except TailcutError as exc:
                raise CollectorError(str(exc)) from None
            except OSError as exc:
                raise CollectorError(f"cannot use data dir {parquet.path}: {exc.strerror or exc}") from None
        self._forwarders = [make_forwarder(forwarder) for forwarder in self.config.forwarders]
        self._thread = threading.Thread(target=self._run, name="tailcut-writer", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 120.0) -> None:
        """Write everything submitted, close files and forwarders; :class:`CollectorError` on failure."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout)
        unfinished = self._thread.is_alive()
        self._thread = None
        if self.failure is not None:
            raise CollectorError(f"writing failed: {self.failure}")
        if unfinished:
            raise CollectorError(f"the writer did not finish within {timeout:g}s; some rows may be missing")

    def abort(self) -> None:
        """Stop without waiting for anything (start failed)."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(5)
            self._thread = None

    # --- from the event loop --------------------------------------------------------------------------------
    def submit_kept(self, item: KeptSpans) -> None:
        with self._lock:
            self._in_flight += 1
            self.backlog_bytes += item.nbytes
        self._queue.put(item)

    def submit_row(self, row: TraceRow) -> None:
        with self._lock:
            self._in_flight += 1
        self._queue.put(row)

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

    # --- the writer thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        kept: list[KeptSpans] = []
        rows: list[TraceRow] = []
        last_write = time.monotonic()
        stopping = False
        while not stopping:
            timeout = max(FLUSH_INTERVAL - (time.monotonic() - last_write), 0.0) if (kept or rows) else None
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            while item is not None:
                if item is _STOP:
                    stopping = True
                elif isinstance(item, KeptSpans):
                    kept.append(item)
                else:
                    rows.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            due = stopping or time.monotonic() - last_write >= FLUSH_INTERVAL
            if (kept or rows) and (due or sum(len(k.spans) for k in kept) >= FLUSH_SPANS):
                self._write(kept, rows)
                kept, rows = [], []
                last_write = time.monotonic()
            if self._writer is not None and not stopping:
                self._guard(self._writer.flush_if_due)
        if self._writer is not None:
            self._guard(self._writer.close)
        for forwarder in self._forwarders:
            self._guard(forwarder.shutdown)

    def _write(self, kept: list[KeptSpans], rows: list[TraceRow]) -> None:
        main = [item for item in kept if not item.late]
        late = [item for item in kept if item.late]
        for group in (main, late):
            if group:
                self._guard(self._write_spans, group)
        if rows:
            self._guard(self._write_rows, rows)
        with self._idle:
            self._in_flight -= len(kept) + len(rows)
            self.backlog_bytes -= sum(item.nbytes for item in kept)
            self._idle.notify_all()

    def _guard(self, function: Any, *args: Any) -> None:
        try:
            function(*args)
        except Exception as exc:  # keep the thread alive; the failure surfaces on close and in ingest
            if self.failure is None:
                self.failure = exc
            _logger.exception("tailcut collector: writing failed")

    def _write_spans(self, group: list[KeptSpans]) -> None:
        request = assemble_request(group)
        for forwarder in self._forwarders:
            ok = forwarder.export_bytes(request, sum(len(item.spans) for item in group))
            self.metrics.forwarded_spans.labels(forwarder.name, "ok" if ok else "failed").inc(
                sum(len(item.spans) for item in group)
            )
        if self._writer is None:
            return
        started = time.perf_counter()
        table = normalize_otlp(request)  # the wire decoder reads the bytes: nothing is parsed twice
        if group[0].late:
            bases: dict[str, int] = {}
            for item in group:  # several late batches of one trace are normalised together
                trace_id = item.trace_id.hex()
                bases[trace_id] = min(bases.get(trace_id, item.index_base), item.index_base)
            table = _shift_positions(table, bases)
        self._writer.write_spans(table)
        self.metrics.write_seconds.labels("spans").observe(time.perf_counter() - started)
        self.metrics.rows_written.labels("spans").inc(table.num_rows)
        self.spans_written += table.num_rows

    def _write_rows(self, rows: list[TraceRow]) -> None:
        if self._writer is None:
            return
        started = time.perf_counter()
        table = traces_table(rows)
        self._writer.write_traces(table)
        self.metrics.write_seconds.labels("traces").observe(time.perf_counter() - started)
        self.metrics.rows_written.labels("traces").inc(table.num_rows)
        self.rows_written += table.num_rows


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
        root_index = item.root_index()
        for index, span in enumerate(item.spans):
            origin = span.origin
            entry = by_origin.get(id(origin))
            if entry is None:
                entry = by_origin[id(origin)] = (origin, [])
            data = span.data
            if decision.slice_only:
                data += _restated_threshold(data, decision.inclusion_probability)
            if index == root_index:
                added = extra + encode_attributes(item.signal_attributes)
                entry[1].append(_SPAN_TAG + _varint(len(data) + len(added)) + data + added)
            else:
                entry[1].append(_SPAN_TAG + _varint(len(data) + len(extra)) + data + extra)
    resource_spans = []
    for origin, spans in by_origin.values():
        scope_spans = _field(1, origin.scope) + b"".join(spans)
        resource_spans.append(_field(1, _field(1, origin.resource) + _field(2, scope_spans)))
    return b"".join(resource_spans)


_SPAN_TAG = b"\x12"  # ScopeSpans.spans: field 2, length-delimited
_TRACE_STATE = 3  # Span.trace_state


def _restated_threshold(data: bytes, pi: float) -> bytes:
    """A ``Span.trace_state`` field to append to an encoded span (the last one wins) stating ``pi`` as
    its ``ot=th:`` threshold: the span's trace was kept by the uniform slice alone."""
    tracestate = SpanFacts.FromString(data).trace_state.decode("utf-8", "replace")
    return _field(_TRACE_STATE, forwarded_tracestate(tracestate, pi).encode("utf-8"))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return bytes(((number << 3) | 2,)) + _varint(len(payload)) + payload


@functools.lru_cache(maxsize=1024)
def _sampling_attributes(policies: tuple[str, ...], probability: float, baseline: bool) -> bytes:
    return encode_attributes(
        {
            attr.SAMPLING_POLICIES: list(policies),
            attr.SAMPLING_PROBABILITY: probability,
            attr.SAMPLING_BASELINE: baseline,
        }
    )


def encode_attributes(values: Mapping[str, Any]) -> bytes:
    """``values`` as encoded ``Span.attributes`` fields, ready to append to a span's bytes."""
    out = bytearray()
    for key, value in values.items():
        encoded = KeyValue(key=key, value=_any_value(value)).SerializeToString()
        out += _ATTRIBUTES_TAG + _varint(len(encoded)) + encoded
    return bytes(out)


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[_any_value(v) for v in value]))
    return AnyValue(string_value=str(value))


def _varint(value: int) -> bytes:
    if value < len(_SHORT_VARINTS):
        return _SHORT_VARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SHORT_VARINTS = [bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(1 << 14)]


def _shift_positions(table: pa.Table, bases: Mapping[str, int]) -> pa.Table:
    """Offset ``span_index`` and ``subtree_end`` per trace, so late rows follow the trace's earlier rows."""
    offsets = pa.array(
        [bases.get(trace_id, 0) for trace_id in table.column("trace_id").to_pylist()], pa.int32()
    )
    for column in ("span_index", "subtree_end"):
        position = table.schema.get_field_index(column)
        table = table.set_column(position, table.schema.field(column), pc.add(table.column(column), offsets))
    return table
