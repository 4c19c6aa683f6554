"""Self-metrics in Prometheus text format, named after the OpenTelemetry Collector's where a twin exists.

Twins (same name and labels as the Collector's, so its dashboards work):

* ``otelcol_receiver_accepted_spans_total`` / ``otelcol_receiver_refused_spans_total`` {receiver, transport}
* ``otelcol_processor_tail_sampling_new_trace_id_received_total``: traces seen
* ``otelcol_processor_tail_sampling_count_traces_sampled_total`` {policy, sampled, decision}: per policy
* ``otelcol_processor_tail_sampling_global_count_traces_sampled_total`` {sampled, decision}
* ``otelcol_processor_tail_sampling_early_releases_from_cache_decision_total`` {sampled}: late spans
  answered from the decision cache
* ``otelcol_processor_tail_sampling_sampling_late_span_age`` (histogram, seconds after the decision)
* ``otelcol_processor_tail_sampling_sampling_traces_on_memory`` (gauge)
* ``otelcol_processor_tail_sampling_sampling_trace_removal_age`` (histogram, seconds from first span to
  decision)
* ``otelcol_processor_tail_sampling_sampling_decision_timer_latency`` (histogram, milliseconds per
  decision round)

tailcut's own:

* ``tailcut_decisions_total`` {reason, kept}: decisions by ``decision_reason``
* ``tailcut_late_spans_total`` {kept, via}: spans after the decision (``via`` = ``window`` while the
  trace's row is open, ``cache`` from the decision cache)
* ``tailcut_traces_evicted_total``: traces decided early because memory bounds were reached
* ``tailcut_receiver_requests_total`` {transport, outcome}: requests by outcome (``ok``, ``partial``,
  ``bad_request``, ``too_large``, ``unsupported``, ``overloaded``, ``unavailable``)
* ``tailcut_buffer_bytes``, ``tailcut_write_backlog_bytes`` (gauges)
* ``tailcut_rows_written_total`` {table}, ``tailcut_write_seconds`` {table} (histogram)
* ``tailcut_forwarded_spans_total`` {exporter, outcome}
* ``tailcut_unwritable_spans_total``: kept spans the normaliser refused at write time (logged)

Durability (the write-ahead log and publishing):

* ``tailcut_wal_bytes``, ``tailcut_wal_segments`` (gauges): the log's size on disk
* ``tailcut_wal_replays_total``: times the log was replayed (at start with records in it, and after
  each recovery from an I/O error); ``tailcut_wal_replayed_spans_total``: spans buffered again by them
* ``tailcut_wal_fsync_seconds`` (histogram): each fsync of the log
* ``tailcut_io_faults_total``: I/O errors that made the collector answer 503 until it recovered
* ``tailcut_writing_failed`` (gauge): 1 while writes fail (``/healthz`` then answers 503 with the error)
* ``tailcut_oldest_unpublished_row_age_seconds`` (gauge): how long the oldest row handed to the
  writer has waited to become readable (published)

Counters updated on the hot path are plain integers in dictionaries (a labelled ``prometheus_client``
counter costs about a microsecond per increment, as much as decoding a span); a custom collector turns
them into metric families at scrape time. They are only touched from the collector's event loop, which
also serves the scrapes, so no lock is needed. Metrics the writer thread updates are ordinary
(thread-safe) ``prometheus_client`` objects. Everything lives in the collector's own registry.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

TS = "otelcol_processor_tail_sampling_"
_SECONDS_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))
_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, float("inf"))


class LoopHistogram:
    """A histogram only the event loop updates: a bisect and two additions per observation."""

    __slots__ = ("bounds", "counts", "help", "name", "total")

    def __init__(self, name: str, help_text: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.help = help_text
        self.bounds = [b for b in bounds if b != float("inf")]
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.total += value * count

    def family(self) -> HistogramMetricFamily:
        cumulative = 0
        buckets = []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        return HistogramMetricFamily(self.name, self.help, buckets=buckets, sum_value=self.total)


class CollectorMetrics:
    """The collector's counters, gauges and histograms, and their Prometheus exposition."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.accepted_spans: collections.Counter[str] = collections.Counter()
        self.refused_spans: collections.Counter[str] = collections.Counter()
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.new_traces = 0
        self.policy_votes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.global_decisions: collections.Counter[str] = collections.Counter()
        self.decisions: collections.Counter[tuple[str, bool]] = collections.Counter()
        self.late_spans: collections.Counter[tuple[bool, str]] = collections.Counter()
        self.cache_releases: collections.Counter[bool] = collections.Counter()
        self.evicted = 0
        self.gauges: dict[str, Callable[[], float]] = {}
        self.late_span_age = LoopHistogram(
            TS + "sampling_late_span_age",
            "Time (in seconds) from the sampling decision to the arrival of a late span",
            _SECONDS_BUCKETS,
        )
        self.trace_removal_age = LoopHistogram(
            TS + "sampling_trace_removal_age",
            "Time (in seconds) from arrival of a new trace until its decision",
            _SECONDS_BUCKETS,
        )
        self.decision_timer_latency = LoopHistogram(
            TS + "sampling_decision_timer_latency",
            "Latency (in milliseconds) of each run of the sampling decision timer",
            _MS_BUCKETS,
        )
        self.write_seconds = Histogram(
            "tailcut_write_seconds",
            "Seconds spent writing rows to the data dir, per call",
            ["table"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, float("inf")),
            registry=self.registry,
        )
        self.rows_written = Counter(
            "tailcut_rows_written", "Rows written to the data dir", ["table"], registry=self.registry
        )
        self.forwarded_spans = Counter(
            "tailcut_forwarded_spans",
            "Kept spans handed to OTLP forwarders, by result",
            ["exporter", "outcome"],
            registry=self.registry,
        )
        self.unwritable_spans = Counter(
            "tailcut_unwritable_spans",
            "Kept spans the normaliser refused when writing (their trace's batch is skipped)",
            registry=self.registry,
        )
        # --- durability ---
        self.wal_replays = 0
        self.wal_replayed_spans = 0
        self.io_faults = 0
        self.wal_fsync_seconds = Histogram(
            "tailcut_wal_fsync_seconds",
            "Seconds per fsync of the write-ahead log",
            buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, float("inf")),
            registry=self.registry,
        )
        self.registry.register(_LoopMetrics(self))

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _LoopMetrics:
    """Turns the loop-owned plain counters into metric families at scrape time."""

    def __init__(self, metrics: CollectorMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        for name, help_text, counts in (
            ("otelcol_receiver_accepted_spans", "Spans accepted by the receiver", m.accepted_spans),
            ("otelcol_receiver_refused_spans", "Spans refused by the receiver", m.refused_spans),
        ):
            family = CounterMetricFamily(name, help_text, labels=["receiver", "transport"])
            for transport, value in sorted(counts.items()):
                family.add_metric(["otlp", transport], value)
            yield family
        requests = CounterMetricFamily(
            "tailcut_receiver_requests", "Export requests by outcome", labels=["transport", "outcome"]
        )
        for (transport, outcome), value in sorted(m.requests.items()):
            requests.add_metric([transport, outcome], value)
        yield requests
        yield CounterMetricFamily(
            TS + "new_trace_id_received", "Counts the arrival of new traces", value=m.new_traces
        )
        per_policy = CounterMetricFamily(
            TS + "count_traces_sampled",
            "Count of traces that were sampled or not per sampling policy",
            labels=["policy", "sampled", "decision"],
        )
        for (policy, decision), value in sorted(m.policy_votes.items()):
            per_policy.add_metric([policy, str(decision == "sampled").lower(), decision], value)
        yield per_policy
        global_count = CounterMetricFamily(
            TS + "global_count_traces_sampled",
            "Global count of traces that were sampled or not by at least one policy",
            labels=["sampled", "decision"],
        )
        for decision, value in sorted(m.global_decisions.items()):
            global_count.add_metric([str(decision == "sampled").lower(), decision], value)
        yield global_count
        releases = CounterMetricFamily(
            TS + "early_releases_from_cache_decision",
            "Number of spans that were able to be immediately released due to a decision cache hit",
            labels=["sampled"],
        )
        for sampled, value in sorted(m.cache_releases.items()):
            releases.add_metric([str(sampled).lower()], value)
        yield releases
        decisions = CounterMetricFamily(
            "tailcut_decisions", "Trace decisions by decision_reason", labels=["reason", "kept"]
        )
        for (reason, kept), value in sorted(m.decisions.items()):
            decisions.add_metric([reason, str(kept).lower()], value)
        yield decisions
        late = CounterMetricFamily(
            "tailcut_late_spans", "Spans that arrived after their trace was decided", labels=["kept", "via"]
        )
        for (kept, via), value in sorted(m.late_spans.items()):
            late.add_metric([str(kept).lower(), via], value)
        yield late
        yield CounterMetricFamily(
            "tailcut_traces_evicted",
            "Traces decided early because a memory bound was reached",
            value=m.evicted,
        )
        yield CounterMetricFamily(
            "tailcut_wal_replays", "Replays of the write-ahead log (start, recoveries)", value=m.wal_replays
        )
        yield CounterMetricFamily(
            "tailcut_wal_replayed_spans",
            "Spans buffered again by replays of the write-ahead log",
            value=m.wal_replayed_spans,
        )
        yield CounterMetricFamily(
            "tailcut_io_faults",
            "I/O errors the collector recovered from (or is recovering from)",
            value=m.io_faults,
        )
        for histogram in (m.late_span_age, m.trace_removal_age, m.decision_timer_latency):
            yield histogram.family()
        for name, read in sorted(m.gauges.items()):
            yield GaugeMetricFamily(name, _GAUGE_HELP.get(name, name), value=read())


_GAUGE_HELP = {
    TS + "sampling_traces_on_memory": "Tracks the number of traces current on memory",
    "tailcut_buffer_bytes": "Encoded bytes of the spans waiting for a decision",
    "tailcut_write_backlog_bytes": "Encoded bytes of kept spans waiting to be written",
    "tailcut_writing_failed": "1 while writes to the data dir fail and the collector answers 503, else 0",
    "tailcut_wal_bytes": "Bytes in the write-ahead log's segments",
    "tailcut_wal_segments": "Segment files of the write-ahead log",
    "tailcut_oldest_unpublished_row_age_seconds": (
        "Seconds the oldest row handed to the writer has waited to be published"
    ),
}
