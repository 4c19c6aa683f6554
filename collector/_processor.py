"""The tail-sampling core: ingest spans into the buffer, decide traces when due, follow late spans.

Everything here runs on the collector's event loop (single-threaded, so no locks). Per request: frame
it, parse each span lazily for its facts (:mod:`tailcut.collector._facts`) and append the span's
encoded bytes to its trace. Per decision: compute the trace signals and the anomaly score, evaluate
every policy, hand kept spans to the writer and open the trace's ``traces`` row for
``late_span_window`` seconds (late spans are counted in it), after which the row is written and the
decision moves to the decision cache.

Memory bounds: ``num_traces`` pending traces and ``max_buffer_bytes`` of buffered span bytes. Past
either, the oldest traces are decided early (``evicted``), or with ``block_on_overflow`` new requests
are refused with 429 / ``RESOURCE_EXHAUSTED`` until there is room. Kept spans waiting for the writer
are bounded by the same byte budget; past it requests are refused whatever ``block_on_overflow`` says,
since deciding early would not free anything. Nothing accepted is dropped unless writing itself fails.
"""

from __future__ import annotations

import collections
import time
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError
from google.rpc import code_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from tailcut import attributes as attr
from tailcut.collector._anomaly import AnomalyScorer
from tailcut.collector._buffer import PendingTrace, TraceBuffer
from tailcut.collector._cache import DecisionCache
from tailcut.collector._config import CollectorConfig
from tailcut.collector._decide import PolicySet, TraceDecision
from tailcut.collector._facts import agent_name, buffered_span, root_facts
from tailcut.collector._headsampling import probability as head_probability
from tailcut.collector._metrics import TS, CollectorMetrics
from tailcut.collector._otlp import OtlpError, SpanFacts, any_value, bad_request, overloaded, parse_framed
from tailcut.collector._receivers import IngestResult
from tailcut.collector._rows import TraceRow
from tailcut.collector._signals import SIGNAL_READERS, compute_signals
from tailcut.collector._sink import KeptSpans, Sink
from tailcut.collector._votes import Decision, TraceView

_new = tuple.__new__
_NO_VALUES: dict[str, Any] = {}
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_SIGNAL_PREFIX = "tailcut.trace."
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

    __slots__ = ("closes_at", "decided_at", "decision", "late_spans", "next_index", "row")

    def __init__(self, row: TraceRow, decision: TraceDecision, decided_at: float, closes_at: float) -> None:
        self.row = row
        self.decision = decision
        self.decided_at = decided_at
        self.closes_at = closes_at
        self.late_spans = 0
        #: span_index the next late span of the trace starts at.
        self.next_index = row.span_count


class Processor:
    """Buffer, decide and route traces.

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
        self.metrics = metrics
        self.sink = sink
        self.policies = PolicySet(ts.build_policies())
        self.buffer = TraceBuffer(ts.decision_wait, ts.decision_wait_after_root_received)
        self.num_traces = ts.num_traces
        self.block_on_overflow = ts.block_on_overflow
        self.max_bytes = limits.max_buffer_bytes
        self.max_spans = limits.max_spans_per_trace
        self.late_window = limits.late_span_window
        #: trace id -> (decision, decided at, next span_index) of kept traces no longer in memory
        self.sampled_cache: DecisionCache[tuple[TraceDecision, float, int]] = DecisionCache(
            ts.sampled_cache_size
        )
        #: trace id -> decided at, of dropped traces no longer in memory
        self.dropped_cache: DecisionCache[float] = DecisionCache(ts.non_sampled_cache_size)
        self.open_rows: collections.OrderedDict[bytes, OpenRow] = collections.OrderedDict()
        self.anomaly = AnomalyScorer(limits.anomaly_window, limits.anomaly_min_window)
        keys = self.policies.attribute_keys()
        self.span_keys = tuple(sorted(key for key in keys if not key.startswith(_SIGNAL_PREFIX)))
        #: (key, read) for each trace signal some policy reads, so only those are computed per trace.
        self._signal_keys = [(key, SIGNAL_READERS[key]) for key in sorted(keys) if key in SIGNAL_READERS]
        #: Whether some resource carried a policy key (then resource values join each trace's values).
        self._resource_keys = False
        self._vote_keys = [
            {decision: (policy.name, decision.value) for decision in Decision.ALL}
            for policy in self.policies.policies
        ]
        self._origins: dict[tuple[bytes, bytes], Origin] = {}
        self.last_span_at = 0.0
        #: Set by :meth:`shutdown`: later requests are refused (503) rather than accepted and never decided.
        self.closed = False
        self.counts: collections.Counter[str] = collections.Counter()
        waits = [
            w for w in (ts.decision_wait, ts.decision_wait_after_root_received, self.late_window) if w > 0
        ]
        #: Seconds between decision rounds: fine enough for the shortest wait, never busy.
        self.tick_interval = min(0.05, max(0.005, min(waits, default=1.0) / 10))
        metrics.gauges[TS + "sampling_traces_on_memory"] = lambda: len(self.buffer)
        metrics.gauges["tailcut_buffer_bytes"] = lambda: self.buffer.nbytes
        metrics.gauges["tailcut_write_backlog_bytes"] = lambda: self.sink.backlog_bytes

    # --- ingest ---------------------------------------------------------------------------------------
    def ingest(self, body: bytes | bytearray, transport: str) -> IngestResult:
        """Add one encoded ``ExportTraceServiceRequest``; refuse it whole when there is no room.

        Raises
        ------
        OtlpError
            400 for a malformed body, 429 when full, 503 when writing has failed.
        """
        self._check_room()
        request = parse_framed(body)
        now = time.monotonic()
        buffer = self.buffer
        pending_get = buffer.pending.get
        open_rows = self.open_rows
        span_keys = self.span_keys
        max_spans = self.max_spans
        from_string = SpanFacts.FromString
        accepted = rejected = new_traces = 0
        late: dict[bytes, list[tuple[bytes, Origin]]] = {}
        for resource_spans in request.resource_spans:
            resource = resource_spans.resource
            for scope_spans in resource_spans.scope_spans:
                origin = self._origin(resource, scope_spans.scope)
                for data in scope_spans.spans:
                    try:
                        span = from_string(data)
                    except DecodeError as exc:
                        raise bad_request(f"malformed span in protobuf body: {exc}") from None
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
                    trace = pending_get(trace_id)
                    if trace is None:
                        if trace_id in open_rows or self._cached(trace_id):
                            late.setdefault(trace_id, []).append((data, origin))
                            continue
                        trace = buffer.create(trace_id, now)
                        new_traces += 1
                    attributes = span.attributes
                    record = buffered_span(span, attributes, span_id, parent, data, origin, trace.tally)
                    if not parent:
                        if trace.root is None:
                            trace.root = root_facts(span)
                    elif record.kind == "agent" and trace.agent_name is None:
                        trace.agent_name = agent_name(span)
                    if span_keys:
                        values = trace.values
                        for key in span_keys:
                            raw = attributes.get(key)
                            if raw is not None:
                                values.setdefault(key, []).append(any_value(raw))
                    buffer.add(trace, record, not parent, now)
                    if len(trace.spans) >= max_spans:
                        buffer.remove(trace)
                        self._decide(trace, "max_spans", now)
        metrics = self.metrics
        metrics.new_traces += new_traces
        metrics.accepted_spans[transport] += accepted
        if rejected:
            metrics.refused_spans[transport] += rejected
        if accepted:
            self.last_span_at = now
        for trace_id, spans in late.items():
            self._late(trace_id, spans, now)
        while len(buffer) > self.num_traces or (buffer.nbytes > self.max_bytes and len(buffer) > 1):
            metrics.evicted += 1
            self._decide(buffer.pop_oldest(), "evicted", now)
        return IngestResult(accepted, rejected, f"{rejected} span(s) refused: {_BAD_IDS}" if rejected else "")

    def _check_room(self) -> None:
        if self.closed:
            raise OtlpError(
                503, code_pb2.UNAVAILABLE, "the collector is shutting down; retry elsewhere or later"
            )
        if self.sink.failure is not None:
            raise OtlpError(
                503, code_pb2.UNAVAILABLE, f"the collector cannot write its data: {self.sink.failure}"
            )
        if self.sink.backlog_bytes >= self.max_bytes:
            raise overloaded("kept spans are waiting to be written (writer backlog full); retry later")
        if self.block_on_overflow and (
            len(self.buffer) >= self.num_traces or self.buffer.nbytes >= self.max_bytes
        ):
            raise overloaded("trace buffer full (block_on_overflow); retry later")

    def _origin(self, resource: bytes, scope: bytes) -> Origin:
        origin = self._origins.get((resource, scope))
        if origin is None:
            if len(self._origins) >= 1024:
                self._origins.clear()
            try:
                decoded = Resource.FromString(resource)
            except DecodeError as exc:
                raise bad_request(f"malformed resource in protobuf body: {exc}") from None
            values: dict[str, list[Any]] = {}
            service_name = None
            for kv in decoded.attributes:
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
        if open_row is not None:
            open_row.late_spans += count
            decision, decided_at, via = open_row.decision, open_row.decided_at, "window"
            index_base = open_row.next_index
            open_row.next_index += count
        else:
            via = "cache"
            cached = self.sampled_cache.get(trace_id)
            if cached is not None:
                decision, decided_at, index_base = cached
                self.sampled_cache.put(trace_id, (decision, decided_at, index_base + count))
            else:
                decision, decided_at, index_base = None, self.dropped_cache.get(trace_id) or now, 0
            self.metrics.cache_releases[decision is not None] += count
        kept = decision is not None and decision.kept
        self.metrics.late_spans[kept, via] += count
        self.metrics.late_span_age.observe(max(now - decided_at, 0.0), count)
        if kept:
            assert decision is not None
            self.sink.submit_kept(KeptSpans.late_batch(trace_id, spans, decision, index_base))
            self.counts["spans_kept"] += count
        else:
            self.counts["spans_dropped"] += count

    # --- decisions ------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Decide every trace that is due, and close rows whose late-span window has passed."""
        started = time.perf_counter()
        decided = 0
        for trace, reason in self.buffer.due(now):
            self._decide(trace, reason, now)
            decided += 1
        self._close_rows(now)
        if decided:
            self.metrics.decision_timer_latency.observe((time.perf_counter() - started) * 1000)

    def shutdown(self, now: float) -> None:
        """Decide every pending trace (``shutdown``) and write every open row; refuse data from now on."""
        self.closed = True
        for trace in self.buffer.pop_all():
            self._decide(trace, "shutdown", now)
        self._close_rows(float("inf"))

    def _close_rows(self, now: float) -> None:
        open_rows = self.open_rows
        while open_rows:
            trace_id, open_row = next(iter(open_rows.items()))
            if open_row.closes_at > now:
                return
            del open_rows[trace_id]
            self._finish_row(trace_id, open_row)

    def _finish_row(self, trace_id: bytes, open_row: OpenRow) -> None:
        row = open_row.row
        self.sink.submit_row(row._replace(late_spans=open_row.late_spans) if open_row.late_spans else row)
        if open_row.decision.kept:
            self.sampled_cache.put(trace_id, (open_row.decision, open_row.decided_at, open_row.next_index))
        else:
            self.dropped_cache.put(trace_id, open_row.decided_at)

    def _decide(self, trace: PendingTrace, reason: str, now: float) -> None:
        spans = trace.spans
        signals = compute_signals(spans, trace.tally)
        root = trace.root
        # The service is the root's (as in the exporters' signals), else the first span's.
        service_name = spans[0].origin.service_name
        if root is not None:
            root_span = next(span for span in reversed(spans) if not span.parent_span_id)
            service_name = root_span.origin.service_name
        resource_values: list[dict[str, list[Any]]] = []
        if service_name is None or self._resource_keys:
            origins = {id(span.origin): span.origin for span in spans}.values()
            service_name = next((origin.service_name for origin in origins if origin.service_name), None)
            resource_values = [origin.values for origin in origins if origin.values]
        measures = (signals.total_tokens, signals.duration_ms, signals.span_count)
        anomaly_key = (service_name, root.name if root is not None else None)
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
            signals.status_mask,
            values,
            head_probability(trace.tally.head_threshold),
        )
        decision, votes = self.policies.decide(view, now)
        if decision.baseline or not self.policies.baseline_policies:
            self.anomaly.observe(anomaly_key, measures)
        metrics = self.metrics
        policy_votes = metrics.policy_votes
        dropped = False
        for keys, vote in zip(self._vote_keys, votes, strict=True):
            policy_votes[keys[vote.decision]] += 1
            dropped = dropped or vote.decision is Decision.DROPPED
        metrics.global_decisions["sampled" if decision.kept else "dropped" if dropped else "not_sampled"] += 1
        metrics.decisions[reason, decision.kept] += 1
        metrics.trace_removal_age.observe(now - trace.first_seen)
        counts = self.counts
        counts["traces"] += 1
        root_values = root.values if root is not None else _NO_VALUES
        agent = root_values.get("agent_name") or trace.agent_name
        score = root_values.get("outcome_score")
        row = _new(
            TraceRow,
            (
                trace.trace_id.hex(),
                service_name,
                root.name if root is not None else None,
                agent if type(agent) is str else None,
                signals.start_ns,
                signals.end_ns,
                signals.duration_ms,
                signals.span_count,
                signals.error_count,
                signals.llm_calls,
                signals.tool_calls,
                signals.input_tokens,
                signals.output_tokens,
                signals.max_depth,
                signals.max_tool_repeat,
                signals.schema_violations,
                anomaly_score,
                _text(root_values.get("outcome")),
                float(score) if type(score) in (int, float) else None,
                _text(root_values.get("harness_revision")),
                decision.kept,
                list(decision.policies),
                decision.baseline,
                decision.inclusion_probability,
                decision.head_probability,
                reason,
                time.time_ns(),
                _text(root_values.get("env_revision")),
                _text(root_values.get("prompt_version")),
                root is not None,
                signals.orphan_count,
                0,
            ),
        )
        if decision.kept:
            counts["kept"] += 1
            counts["spans_kept"] += len(spans)
            self.sink.submit_kept(
                KeptSpans(trace.trace_id, spans, decision, signals.attributes(anomaly_score))
            )
        else:
            counts["spans_dropped"] += len(spans)
        open_row = OpenRow(row, decision, now, now + self.late_window)
        if self.late_window > 0:
            self.open_rows[trace.trace_id] = open_row
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


def _text(value: Any) -> str | None:
    return value if type(value) is str else None
