"""The tail-sampling core: ingest spans into the buffer, decide traces when due, follow late spans.

Everything here runs on the collector's event loop (single-threaded, so no locks). Per request: frame
it, parse each span lazily for its facts (:mod:`tailcut.collector._facts`), fold them into its trace's
tally (:class:`~tailcut.collector._signals.TraceTally`) and append the span's encoded bytes to the
trace. Per decision: settle the trace signals from the tally, score the anomaly, evaluate every policy,
hand kept spans to the writer and open the trace's ``traces`` row for ``late_span_window`` seconds (late
spans are counted in it), after which the row is written and the decision moves to the decision cache.

Memory bounds: ``num_traces`` pending traces and ``max_buffer_bytes`` of buffered span bytes. Past
either, the oldest traces are decided early (``evicted``), or with ``block_on_overflow`` new requests
are refused with 429 / ``RESOURCE_EXHAUSTED`` until there is room. Kept spans waiting for the writer
are bounded by the same byte budget; past it requests are refused whatever ``block_on_overflow`` says,
since deciding early would not free anything.

Accept whole or refuse whole: a request is decoded completely with the protobuf runtime (events, links,
attributes, everything the writer later reads) before anything is buffered; a malformed one is refused
with 400 and changes nothing.

Durability: once :meth:`Processor.start` opened the write-ahead log (:mod:`._wal`, records in
:mod:`._journal`), a request's spans are in the log before :meth:`Processor.ingest` returns, and every
decision before its rows reach the writer: everything goes through the :class:`~._commit.Committer`,
which logs first and hands over after (and holds, releases and compacts log segments).
:meth:`Processor.recover` rebuilds the state from the log (:mod:`._recovery` reads it; the
``replay_*`` methods apply each record). An I/O error (the log or the data dir) makes ingest answer 503
with a retry delay until the writer can open the data dir again; then the state is rebuilt from the
log, as after a crash, and the collector carries on by itself.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Final, NamedTuple

from google.rpc import code_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from tailcut import attributes as attr
from tailcut.collector._anomaly import AnomalyScorer
from tailcut.collector._buffer import Hold, PendingTrace, TraceBuffer
from tailcut.collector._cache import DecisionCache
from tailcut.collector._commit import Committer, raw_spans
from tailcut.collector._config import CollectorConfig
from tailcut.collector._decide import PolicySet, TraceDecision
from tailcut.collector._facts import model_pricer, root_facts
from tailcut.collector._headsampling import probability as head_probability
from tailcut.collector._journal import LateEntry, closed_record, decided_record, decision_of, spans_record
from tailcut.collector._metrics import TS, CollectorMetrics
from tailcut.collector._otlp import OtlpError, overloaded, request_spans
from tailcut.collector._receivers import IngestResult
from tailcut.collector._recovery import open_log, replay_log
from tailcut.collector._signals import SIGNAL_READERS, describe, earliest_span, root_attributes, tally_of
from tailcut.collector._sink import KeptSpans, Sink
from tailcut.collector._votes import TraceView
from tailcut.collector._wal import WalFailure, WriteAheadLog
from tailcut.exporters._pricing import default_pricing
from tailcut.exporters.conventions.observations import with_extra
from tailcut.exporters.wire.values import any_value
from tailcut.signals import TraceRow, traces_row

_logger = logging.getLogger("tailcut.collector")
_NO_VALUES: dict[str, Any] = {}
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_SIGNAL_PREFIX = "tailcut.trace."
#: Seconds a client is asked to wait (503 ``Retry-After`` / ``RetryInfo``) while an I/O error lasts.
UNAVAILABLE_RETRY_AFTER: Final = 5.0
#: Seconds between attempts to resume after an I/O error, at first and at most.
RESET_BACKOFF: Final = 0.5
RESET_MAX_BACKOFF: Final = 10.0
_BAD_IDS = (
    "spans need a 16-byte non-zero trace_id, an 8-byte non-zero span_id and an empty or 8-byte parent_span_id"
)


class Origin(NamedTuple):
    """The resource and scope a span arrived under (shared by all spans of a ``ScopeSpans``)."""

    resource: bytes  # encoded Resource
    scope: bytes  # encoded InstrumentationScope
    service_name: str | None
    #: Values of policy attribute keys found on the resource.
    values: dict[str, list[Any]]


class OpenRow:
    """A decided trace whose ``traces`` row still counts late spans."""

    __slots__ = ("closes_at", "decided_at", "decision", "hold", "late_spans", "next_index", "row")

    def __init__(
        self, row: TraceRow, decision: TraceDecision, decided_at: float, closes_at: float, hold: Hold
    ) -> None:
        self.row = row
        self.hold = hold
        self.decision = decision
        self.decided_at = decided_at
        self.closes_at = closes_at
        self.late_spans = 0
        #: span_index the next late span of the trace starts at.
        self.next_index = row["span_count"]


class Processor:
    """Buffer, decide and route traces; log them ahead when started with a write-ahead log.

    Parameters
    ----------
    config
        The collector config.
    metrics
        Where counts go.
    sink
        The writer that receives kept spans and ``traces`` rows.
    """

    def __init__(self, config: CollectorConfig, metrics: CollectorMetrics, sink: Sink) -> None:
        ts = config.tail_sampling
        limits = config.tailcut
        self.config = config
        self.metrics = metrics
        self.sink = sink
        self.num_traces = ts.num_traces
        self.block_on_overflow = ts.block_on_overflow
        self.max_bytes = limits.max_buffer_bytes
        self.max_spans = limits.max_spans_per_trace
        self.late_window = limits.late_span_window
        #: The prices ``cost_usd`` is computed with, read once at start (``$TAILCUT_PRICING`` included).
        self.pricing = default_pricing()
        self._cost = model_pricer(self.pricing)
        #: The observation rules a span's failure text is read with: the configured ones, then the built-in.
        self._observation_rules = with_extra(limits.observation_rules)
        #: What is logged ahead and handed to the writer (the write-ahead log, once opened, is its).
        self.commits = Committer(sink, self._enter_fault)
        self._init_state()
        keys = self.policies.attribute_keys()
        self.span_keys = tuple(sorted(key for key in keys if not key.startswith(_SIGNAL_PREFIX)))
        #: (key, read) for each trace signal some policy reads, so only those are computed per trace.
        self._signal_keys = [(key, SIGNAL_READERS[key]) for key in sorted(keys) if key in SIGNAL_READERS]
        self.last_span_at = 0.0
        #: Set by :meth:`shutdown`: later requests are refused (503) rather than accepted and never decided.
        self.closed = False
        self.counts: collections.Counter[str] = collections.Counter()
        waits = [
            w for w in (ts.decision_wait, ts.decision_wait_after_root_received, self.late_window) if w > 0
        ]
        #: Seconds between decision rounds: fine enough for the shortest wait, never busy.
        self.tick_interval = min(0.05, max(0.005, min(waits, default=1.0) / 10))
        self._fault: BaseException | None = None
        self._in_fault = False
        self._reset_at = 0.0
        self._reset_delay = RESET_BACKOFF
        metrics.gauges[TS + "sampling_traces_on_memory"] = lambda: len(self.buffer)
        metrics.gauges["tailcut_buffer_bytes"] = lambda: self.buffer.nbytes
        metrics.gauges["tailcut_write_backlog_bytes"] = lambda: self.sink.backlog_bytes
        metrics.gauges["tailcut_oldest_unpublished_row_age_seconds"] = self.sink.oldest_unpublished_age

    def _init_state(self) -> None:
        """Empty buffers, caches and open rows (at construction, and before a replay after an I/O error)."""
        ts = self.config.tail_sampling
        limits = self.config.tailcut
        self.policies = PolicySet(ts.build_policies())
        self.buffer = TraceBuffer(ts.decision_wait, ts.decision_wait_after_root_received)
        #: trace id -> (decision, decided at, next span_index) of kept traces no longer in memory
        self.sampled_cache: DecisionCache[tuple[TraceDecision, float, int]] = DecisionCache(
            ts.sampled_cache_size
        )
        #: trace id -> decided at, of dropped traces no longer in memory
        self.dropped_cache: DecisionCache[float] = DecisionCache(ts.non_sampled_cache_size)
        self.open_rows: collections.OrderedDict[bytes, OpenRow] = collections.OrderedDict()
        self.anomaly = AnomalyScorer(limits.anomaly_window, limits.anomaly_min_window)
        #: Whether some resource carried a policy key (then resource values join each trace's values).
        self._resource_keys = False
        self._origins: dict[tuple[bytes, bytes], Origin] = {}
        #: Decisions the request in progress's late spans followed (logged with the request).
        self._late_entries: list[LateEntry] = []
        self.commits.reset()

    # --- the write-ahead log ------------------------------------------------------------------------
    @property
    def wal(self) -> WriteAheadLog | None:
        """The write-ahead log, once :meth:`start` opened it."""
        return self.commits.wal

    @wal.setter
    def wal(self, wal: WriteAheadLog | None) -> None:
        self.commits.wal = wal

    def start(self) -> None:
        """Open the write-ahead log (unless disabled) and replay what it holds (:meth:`recover`)."""
        wal = open_log(self.config, self.metrics)
        if wal is None:
            return
        self.wal = self.sink.wal = wal
        self.metrics.gauges["tailcut_wal_bytes"] = lambda: wal.nbytes
        self.metrics.gauges["tailcut_wal_segments"] = lambda: len(wal.sizes)
        self.recover()

    def close(self) -> None:
        """Close the log after the writer stopped; empty it when everything was published."""
        if self.wal is not None:
            clean = self.closed and self.sink.closed_cleanly and not self.buffer and not self.open_rows
            self.wal.close(remove=clean)
            self.wal = self.sink.wal = None

    def recover(self, *, counted: bool = False) -> None:
        """Rebuild the state the log describes: undecided traces buffered again, their clocks resumed
        (:func:`~._recovery.replay_log`, through the ``replay_*`` methods below).

        ``counted``: this process already counted the decisions the log holds (a replay after an I/O
        fault), so the summary's counts are restored afterwards rather than counting those traces twice.
        """
        before = self.counts.copy() if counted else None
        parquet = self.config.parquet
        try:
            records, spans = replay_log(self.commits, self, parquet.path if parquet is not None else None)
        finally:
            if before is not None:
                self.counts = collections.Counter(before)
        if records:
            self.metrics.wal_replays += 1
            self.metrics.wal_replayed_spans += spans
            _logger.warning(
                "tailcut collector: replayed the write-ahead log: %d spans, %d traces waiting",
                spans,
                len(self.buffer),
            )

    def restore_decision(self, entry: LateEntry, decided_at: float) -> None:
        """A logged request's late spans followed a decision the log no longer holds: remember it."""
        trace_id = entry.trace_id
        if trace_id in self.buffer.pending or trace_id in self.open_rows or self._cached(trace_id):
            return
        if entry.decision is not None:
            self.sampled_cache.put(trace_id, (entry.decision, decided_at, entry.index_base))
        else:
            self.dropped_cache.put(trace_id, decided_at)

    def replay_request(self, body: bytes, arrived: float) -> int:
        """Buffer a logged request's spans again (no early decisions); the spans accepted."""
        return self._ingest(body, "replay", arrived).accepted

    def replay_decision(self, trace_id: bytes, span_count: int, row: TraceRow, decided_at: float) -> None:
        """Re-apply a logged decision to the trace, if it is still waiting."""
        trace = self.buffer.get(trace_id)
        if trace is not None:
            self.buffer.remove(trace)
            self._redecide(trace, span_count, row, decided_at)

    def replay_compacted(self, trace_id: bytes, first_seen: float, body: bytes) -> None:
        """A waiting trace's spans are replaced by the record's copy of them."""
        trace = self.buffer.get(trace_id)
        if trace is not None:
            self.buffer.remove(trace)
            self.wal.release(trace.hold.segments)  # type: ignore[union-attr]
        self._ingest(body, "replay", first_seen)

    def replay_closed(self, trace_id: bytes) -> None:
        """Hand over the row of a decided trace whose late-span window had closed."""
        open_row = self.open_rows.pop(trace_id, None)
        if open_row is not None:
            self._finish_row(trace_id, open_row)

    # --- I/O faults -----------------------------------------------------------------------------------------
    def _enter_fault(self, error: BaseException) -> None:
        if self._fault is None:
            self._fault = error
            self.sink.fail(error)

    def _faulted(self) -> bool:
        return self._fault is not None or self.sink.fault is not None

    def _try_reset(self, now: float) -> None:
        """Once the writer can open the data dir again, rebuild everything from the log and resume."""
        if not self._in_fault:
            self._in_fault = True
            self.metrics.io_faults += 1
        if not self.sink.ready or now < self._reset_at:
            return
        try:
            if self.wal is not None:
                self.wal.open()
        except OSError as exc:
            self._reset_delay = min(self._reset_delay * 2, RESET_MAX_BACKOFF)
            self._reset_at = now + self._reset_delay
            _logger.warning("tailcut collector: the write-ahead log is still unusable: %s", exc)
            return
        self._fault = None
        self._in_fault = False
        self._reset_delay = RESET_BACKOFF
        self.sink.reset()
        if self.wal is None:
            _logger.error("tailcut collector: writing resumed; rows being written at the error were lost")
            return
        self._init_state()
        self.recover(counted=True)

    # --- ingest ---------------------------------------------------------------------------------------
    def ingest(self, body: bytes | bytearray, transport: str) -> IngestResult:
        """Add one encoded ``ExportTraceServiceRequest``, logged ahead; refuse it whole when that fails.

        Raises
        ------
        OtlpError
            400 for a malformed body, 429 when full, 503 while an I/O error lasts (retry delay given).
        """
        self._check_room(len(body))
        now = time.monotonic()
        result = self._ingest(body, transport, now)
        try:
            self.commits.commit(
                spans_record(time.time(), self._late_entries, body) if self.wal is not None else None
            )
        except WalFailure as exc:
            raise _unavailable(exc) from None
        finally:
            self._late_entries = []
        return result

    def _ingest(self, body: bytes | bytearray, transport: str, now: float) -> IngestResult:
        """Buffer the spans of a request (also a replayed one: then no early decisions).

        :func:`~tailcut.collector._otlp.request_spans` validates the whole request first, so a malformed
        one is refused (400) before anything is buffered.
        """
        scopes = request_spans(body)
        replaying = self.commits.replaying
        buffer = self.buffer
        pending_get = buffer.pending.get
        observation_rules = self._observation_rules
        open_rows = self.open_rows
        span_keys = self.span_keys
        max_spans = self.max_spans
        touched = self.commits.touched
        accepted = rejected = new_traces = 0
        late: dict[bytes, list[tuple[bytes, Origin]]] = {}
        # Spans of a trace mostly come one after another: the pending trace of the previous span, if any.
        last_id: bytes | None = None
        trace: PendingTrace | None = None
        for resource, scope, pairs in scopes:
            origin = self._origin(resource, scope)
            for data, span in pairs:
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or trace_id == _ZERO_TRACE
                    or span_id == _ZERO_SPAN
                    or (parent and len(parent) != 8)
                ):
                    rejected += 1
                    continue
                accepted += 1
                if trace_id != last_id:
                    trace = pending_get(trace_id)
                    if trace is None:
                        if trace_id in open_rows or self._cached(trace_id):
                            late.setdefault(trace_id, []).append((data, origin))
                            last_id = None
                            continue
                        trace = buffer.create(trace_id, now)
                        new_traces += 1
                    touched[trace_id] = trace.hold
                    last_id = trace_id
                assert trace is not None
                attributes = span.attributes
                trace.tally.add(span, attributes, span_id, parent, observation_rules)
                if not parent and trace.root is None:
                    trace.root = root_facts(span, attributes)
                if span_keys:
                    values = trace.values
                    for key in span_keys:
                        raw = attributes.get(key)
                        if raw is not None:
                            values.setdefault(key, []).append(any_value(raw))
                buffer.add(trace, data, origin, not parent, now)
                if len(trace.datas) >= max_spans and not replaying:
                    buffer.remove(trace)
                    self._decide(trace, "max_spans", now)
                    last_id = None
        if accepted:
            self.last_span_at = now
        for trace_id, spans in late.items():
            self._late(trace_id, spans, now)
        if not replaying:
            metrics = self.metrics
            metrics.new_traces += new_traces
            metrics.accepted_spans[transport] += accepted
            if rejected:
                metrics.refused_spans[transport] += rejected
            while not self.block_on_overflow and (
                len(buffer) > self.num_traces or (buffer.nbytes > self.max_bytes and len(buffer) > 1)
            ):
                metrics.evicted += 1
                self._decide(buffer.pop_oldest(), "evicted", now)
        return IngestResult(accepted, rejected, f"{rejected} span(s) refused: {_BAD_IDS}" if rejected else "")

    def _check_room(self, size: int) -> None:
        """Refuse a request of ``size`` bytes before it is acknowledged when it would not fit.

        With ``block_on_overflow`` a request that would take the buffer past its byte budget is refused
        here (429), never accepted and evicted afterwards; only into an empty buffer does an oversized
        request go (``max_request_body_size`` bounds it), or nothing would ever be accepted again. The
        trace count may pass ``num_traces`` by the new traces of the last accepted request.
        """
        if self.closed:
            raise OtlpError(
                503, code_pb2.UNAVAILABLE, "the collector is shutting down; retry elsewhere or later"
            )
        if self._faulted():
            raise _unavailable(self._fault or self.sink.fault)
        if self.wal is not None and self.wal.full:
            raise overloaded("the write-ahead log is full (processors.tailcut.wal.max_size_mib); retry later")
        if self.sink.backlog_bytes >= self.max_bytes:
            raise overloaded("kept spans are waiting to be written (writer backlog full); retry later")
        buffered = self.buffer.nbytes
        if self.block_on_overflow and (
            len(self.buffer) >= self.num_traces or (buffered and buffered + size > self.max_bytes)
        ):
            raise overloaded("trace buffer full (block_on_overflow); retry later")

    def _origin(self, resource: bytes, scope: bytes) -> Origin:
        origin = self._origins.get((resource, scope))
        if origin is None:
            if len(self._origins) >= 1024:
                self._origins.clear()
            values: dict[str, list[Any]] = {}
            service_name = None
            for kv in Resource.FromString(resource).attributes:
                if kv.key == attr.SERVICE_NAME:
                    service_name = kv.value.string_value or None
                if kv.key in self.span_keys:
                    values.setdefault(kv.key, []).append(any_value(kv.value.SerializeToString()))
                    self._resource_keys = True
            origin = self._origins[resource, scope] = Origin(resource, scope, service_name, values)
        return origin

    def _cached(self, trace_id: bytes) -> bool:
        return self.sampled_cache.get(trace_id) is not None or self.dropped_cache.get(trace_id) is not None

    # --- late spans -----------------------------------------------------------------------------------
    def _late(self, trace_id: bytes, spans: list[tuple[bytes, Origin]], now: float) -> None:
        count = len(spans)
        open_row = self.open_rows.get(trace_id)
        decision: TraceDecision | None
        hold: Hold | None = None
        if open_row is not None:
            open_row.late_spans += count
            decision, decided_at, via = open_row.decision, open_row.decided_at, "window"
            index_base = open_row.next_index
            open_row.next_index += count
            self.commits.touched[trace_id] = open_row.hold
        else:
            via = "cache"
            cached = self.sampled_cache.get(trace_id)
            if cached is not None:
                decision, decided_at, index_base = cached
                self.sampled_cache.put(trace_id, (decision, decided_at, index_base + count))
                hold = self.commits.touched[trace_id, index_base] = Hold()
            else:
                decision, decided_at, index_base = None, self.dropped_cache.get(trace_id) or now, 0
            if not self.commits.replaying:
                self.metrics.cache_releases[decision is not None] += count
        kept = decision is not None and decision.kept
        if self.wal is not None and not self.commits.replaying:
            wall = time.time() - (time.monotonic() - decided_at)
            self._late_entries.append(LateEntry(trace_id, wall, index_base, decision if kept else None))
        if not self.commits.replaying:
            self.metrics.late_spans[kept, via] += count
            self.metrics.late_span_age.observe(max(now - decided_at, 0.0), count)
        if kept:
            assert decision is not None
            self.commits.emit(KeptSpans.late_batch(trace_id, spans, decision, index_base), hold)
            self.counts["spans_kept"] += count
        else:
            self.counts["spans_dropped"] += count

    # --- decisions ------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Decide every trace that is due, close rows whose late-span window has passed, truncate the log.

        While an I/O error lasts nothing is decided (the state is rebuilt from the log once it is over).
        """
        if self._faulted():
            self._try_reset(now)
            return
        started = time.perf_counter()
        decided = 0
        for trace, reason in self.buffer.due(now):
            self._decide(trace, reason, now)
            decided += 1
        self._close_rows(now)
        try:
            self.commits.commit()
        except WalFailure:
            return
        try:
            self.commits.release_published(self.buffer)
        except WalFailure as exc:
            self._enter_fault(exc)
            return
        if decided:
            self.metrics.decision_timer_latency.observe((time.perf_counter() - started) * 1000)

    def shutdown(self, now: float) -> None:
        """Decide every pending trace (``shutdown``) and write every open row; refuse data from now on."""
        self.closed = True
        if self._faulted():
            return  # the log keeps everything for the next start
        for trace in self.buffer.pop_all():
            self._decide(trace, "shutdown", now)
        self._close_rows(float("inf"))
        try:
            self.commits.commit()
        except WalFailure:
            _logger.error(
                "tailcut collector: the write-ahead log failed at shutdown; it is replayed at start"
            )

    def _close_rows(self, now: float) -> None:
        open_rows = self.open_rows
        closing = []
        for trace_id, open_row in open_rows.items():  # oldest first: they close in the order they opened
            if open_row.closes_at > now:
                break
            closing.append(trace_id)
        for trace_id in closing:
            self._finish_row(trace_id, open_rows.pop(trace_id))

    def _finish_row(self, trace_id: bytes, open_row: OpenRow) -> None:
        row = open_row.row
        self.commits.record(closed_record(trace_id))
        if open_row.late_spans:
            row["late_spans"] = open_row.late_spans  # logged already (DECIDED), so changed in place
        self.commits.emit(row, open_row.hold)
        if open_row.decision.kept:
            self.sampled_cache.put(trace_id, (open_row.decision, open_row.decided_at, open_row.next_index))
        else:
            self.dropped_cache.put(trace_id, open_row.decided_at)

    def _decide(self, trace: PendingTrace, reason: str, now: float) -> None:
        tally = trace.tally
        signals = tally.signals(trace.datas, self._cost, self._observation_rules)
        root = trace.root
        resource_values: list[dict[str, list[Any]]] = []
        origins: Any = ()
        if self._resource_keys:
            origins = {id(origin): origin for origin in trace.origins}.values()
            resource_values = [origin.values for origin in origins if origin.values]
        service_name = _service_name(trace, origins)
        describe(signals, trace.trace_id, root, tally, service_name)
        duration_ms = signals.duration_ms
        measures = (signals.total_tokens, duration_ms, signals.span_count)
        anomaly_key = (service_name, signals.root_name)
        anomaly_score = self.anomaly.score(anomaly_key, measures)
        values: dict[str, Any] = trace.values
        if self._signal_keys or resource_values:
            values = dict(values)
            for key, read in self._signal_keys:
                value = read(signals, anomaly_score)
                if value is not None:
                    values[key] = (value,)
            for found in resource_values:
                for key, items in found.items():
                    values[key] = [*values.get(key, ()), *items]
        view = TraceView(
            trace.trace_id,
            signals.span_count,
            signals.start_ns,
            signals.end_ns,
            tally.status_mask,
            values,
            head_probability(tally.head_threshold),
        )
        decision, _, vote_keys = self.policies.decide(view, now)
        if decision.baseline or not self.policies.baseline_policies:
            self.anomaly.observe(anomaly_key, measures)
        metrics = self.metrics
        metrics.policy_votes.update(vote_keys)  # counted in C (a loop of += costs several times more)
        metrics.global_decisions[
            "sampled" if decision.kept else "dropped" if decision.dropped else "not_sampled"
        ] += 1
        metrics.decisions[reason, decision.kept] += 1
        metrics.trace_removal_age.observe(now - trace.first_seen)
        row = traces_row(
            signals,
            kept=decision.kept,
            decision_reason=reason,
            policies=decision.policies,
            baseline=decision.baseline,
            inclusion_probability=decision.inclusion_probability,
            head_probability=decision.head_probability,
            decided_at_ns=time.time_ns(),
            anomaly_score=anomaly_score,
        )
        self.commits.record(decided_record(trace.trace_id, len(trace.datas), row))
        written = root_attributes(signals, anomaly_score) if decision.kept else _NO_VALUES  # on the root
        self._settle(trace, decision, row, written, now)

    def _redecide(self, trace: PendingTrace, span_count: int, row: TraceRow, decided_at: float) -> None:
        """Replay a logged decision: the trace's first ``span_count`` spans; any after them are late."""
        datas = trace.datas
        extra = list(zip(datas[span_count:], trace.origins[span_count:], strict=True))
        if extra:  # a max_spans decision in the middle of a request: recount what it covered
            del datas[span_count:], trace.origins[span_count:]
            trace.tally = tally_of(datas, self._observation_rules)
        signals = trace.tally.signals(datas, self._cost, self._observation_rules)
        if row["baseline"] or not self.policies.baseline_policies:
            self.anomaly.observe(
                (row["service_name"], row["root_name"]),
                (signals.total_tokens, signals.duration_ms, signals.span_count),
            )
        self._settle(trace, decision_of(row), row, root_attributes(signals, row["anomaly_score"]), decided_at)
        if extra:
            self._late(trace.trace_id, extra, decided_at)

    def _settle(
        self, trace: PendingTrace, decision: TraceDecision, row: TraceRow, signal_attributes: Any, now: float
    ) -> None:
        """Hand a decided trace's kept spans over and open its row for late spans."""
        counts = self.counts
        counts["traces"] += 1
        count = len(trace.datas)
        if decision.kept:
            counts["kept"] += 1
            counts["spans_kept"] += count
            spans = raw_spans(trace)
            kept = KeptSpans(trace.trace_id, spans, decision, signal_attributes, root=trace.root_index)
            self.commits.emit(kept, None)
        else:
            counts["spans_dropped"] += count
        open_row = OpenRow(row, decision, now, now + self.late_window, trace.hold)
        if self.late_window > 0:
            open_rows = self.open_rows
            open_rows[trace.trace_id] = open_row
            if len(open_rows) > self.num_traces:  # a flood: the oldest row closes early, memory stays bounded
                self._finish_row(*open_rows.popitem(last=False))
        else:
            self._finish_row(trace.trace_id, open_row)

    def summary(self) -> dict[str, int]:
        """Counts for the end-of-run report: traces decided and kept, spans written and dropped."""
        return {
            "traces": self.counts["traces"],
            "kept": self.counts["kept"],
            "spans_kept": self.counts["spans_kept"],
            "spans_dropped": self.counts["spans_dropped"],
            "spans_written": self.sink.spans_written,
        }


def _unavailable(error: BaseException | None) -> OtlpError:
    return OtlpError(
        503,
        code_pb2.UNAVAILABLE,
        f"the collector cannot write its data ({error}); it retries by itself, retry later",
        UNAVAILABLE_RETRY_AFTER,
    )


def _service_name(trace: PendingTrace, origins: Any) -> str | None:
    """The trace's service (:mod:`tailcut.signals`): its root's, else its earliest span's; when that one
    names none, the first that does among ``origins`` (the trace's distinct origins, or empty: found here).
    """
    # without a root (rare), the earliest span is found by reading the spans again
    origin = trace.root_origin if trace.root is not None else trace.origins[earliest_span(trace.datas)]
    if origin.service_name is not None:
        return origin.service_name
    origins = origins or {id(origin): origin for origin in trace.origins}.values()
    return next((origin.service_name for origin in origins if origin.service_name), None)
