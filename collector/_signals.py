"""Trace signals of a whole trace, folded in by the collector as each span arrives.

The SDK writes the signals on its run's root for the spans *its* process recorded; the collector
recomputes them over all spans of the trace (third-party spans and other processes included) before
the policies run, and writes them on the root span and the ``traces`` row. The rules are those of
:mod:`tailcut.signals`.

A pending trace's :class:`TraceTally` takes each span's contribution as it arrives (times, status codes,
error and tool counts, the parent links and its llm calls), so deciding a trace costs one pass over its
parent links and its llm calls (:meth:`TraceTally.signals`), not over decoded spans. What depends on the
tree (depth, orphans, the nested-call rule for llm spans) is settled then, when every span is known. A
trace with two spans of one id is the exception: its signals are computed from scratch with
:func:`tailcut.signals.trace_signals` over its spans' bytes (:func:`scratch_signals`), the definition the
tally is tested against (``tests/test_collector_tally.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tailcut import attributes as attr
from tailcut.collector._facts import KIND_BY_RAW, SpanRecord, llm_record, span_kind, span_record, tool_key
from tailcut.collector._headsampling import threshold
from tailcut.collector._otlp import SpanFacts
from tailcut.exporters._signals import trace_cost
from tailcut.signals import chain_depth, trace_signals

_CARRIER = attr.CARRIER_KIND
_KIND = attr.KIND
_ERROR = 2  # OTLP Status.code
#: USD of one model call: ``(encoded model, input tokens, output tokens) -> cost`` (see ``model_pricer``).
Pricer = Callable[[bytes | None, int, int], float | None]


class TraceTally:
    """What a pending trace accumulates as each span arrives (see the module docstring)."""

    __slots__ = (
        "carrier_ids",
        "duplicate",
        "end_ns",
        "errors",
        "head_threshold",
        "llm",
        "max_tool_repeat",
        "parents",
        "repeats",
        "start_ns",
        "status_mask",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.start_ns = -1
        self.end_ns = 0
        self.status_mask = 0  # bit ``1 << code`` for each OTLP status code seen
        self.head_threshold = 0  # the largest ``ot=th:`` rejection threshold among the spans (0: none)
        #: span id -> parent span id of every span but carriers, in arrival order
        self.parents: dict[bytes, bytes] = {}
        self.carrier_ids: set[bytes] | None = None
        #: Whether two spans share an id (then the signals are computed from scratch).
        self.duplicate = False
        self.errors = 0  # failed spans other than llm ones (those depend on the nested-call rule)
        self.tool_calls = 0
        self.max_tool_repeat = 0
        self.repeats: dict[bytes, int] = {}
        #: The records of the llm spans, in arrival order.
        self.llm: list[SpanRecord] = []

    def add(self, span: Any, attributes: Any, span_id: bytes, parent: bytes) -> str:
        """Fold in one span parsed with the lazy ``SpanFacts`` type; return its kind."""
        start = span.start_time_unix_nano
        end = span.end_time_unix_nano
        if start < self.start_ns or self.start_ns < 0:
            self.start_ns = start
        if end > self.end_ns:
            self.end_ns = end
        status = span.status.code
        self.status_mask |= 1 << status
        tracestate = span.trace_state
        if tracestate:
            found = threshold(tracestate)
            if found is not None and found > self.head_threshold:
                self.head_threshold = found
        kind = KIND_BY_RAW.get(attributes.get(_KIND))
        if kind is None:
            kind = span_kind(attributes)
        parents = self.parents
        carriers = self.carrier_ids
        if span_id in parents or (carriers is not None and span_id in carriers):
            self.duplicate = True
        if kind == _CARRIER:
            if carriers is None:
                carriers = self.carrier_ids = set()
            carriers.add(span_id)
            return kind
        parents[span_id] = parent
        if kind == "llm":
            self.llm.append(llm_record(span_id, parent, status == _ERROR, attributes))
            return kind
        if status == _ERROR:
            self.errors += 1
        if kind == "tool" and (key := tool_key(span, attributes)) is not None:
            self.tool_calls += 1
            count = self.repeats.get(key, 0) + 1
            self.repeats[key] = count
            if count > self.max_tool_repeat:
                self.max_tool_repeat = count
        return kind

    def signals(self, datas: Sequence[bytes], cost: Pricer) -> TraceSignals:
        """The trace's signals and ``cost_usd`` (``datas``: its spans' bytes, read after a duplicate id)."""
        if self.duplicate:
            return scratch_signals(datas, self, cost)
        parents = self.parents
        max_depth, orphans = tree_shape(parents)
        errors = self.errors
        llm_calls = input_tokens = output_tokens = violations = 0
        total: float | None = 0.0
        llm = self.llm
        llm_ids = {record[0] for record in llm} if len(llm) > 1 else ()
        for span_id, parent, _, failed, _, inputs, outputs, found, model in llm:
            if parent and parent != span_id and parent in llm_ids:
                continue  # a nested call (tailcut.signals.is_nested_call)
            llm_calls += 1
            input_tokens += inputs
            output_tokens += outputs
            violations += found
            if failed:
                errors += 1
            if total is not None:
                value = cost(model, inputs, outputs)
                total = None if value is None else total + value
        return TraceSignals(  # positional (keywords cost a microsecond per trace), in field order
            len(parents),  # span_count
            errors,  # error_count
            llm_calls,
            self.tool_calls,
            input_tokens,
            output_tokens,
            max_depth,
            self.max_tool_repeat,
            violations,  # schema_violations
            max(self.start_ns, 0),  # start_ns
            self.end_ns,
            orphans,  # orphan_count
            self.status_mask,
            total,  # cost_usd
        )


def tree_shape(parents: dict[bytes, bytes]) -> tuple[int, int]:
    """The deepest span's depth and the orphan count of spans given as ``span id -> parent id`` in arrival
    order, by the rules of :func:`tailcut.signals.trace_signals` (a root, an orphan or a span that is its
    own parent is at depth 0; a cycle is counted from where it is entered).

    Most traces are a root and its children: one pass finds that (every parent at depth 0) and stops
    there; a deeper tree is walked by :func:`_walked_tree_shape`.
    """
    deepest = orphans = 0
    for span_id, parent_id in parents.items():
        if not parent_id:
            continue
        above = parents.get(parent_id)
        if above is None or parent_id == span_id:
            orphans += 1
        elif above and above != parent_id and above in parents:
            return _walked_tree_shape(parents)  # the parent is not at depth 0
        else:
            deepest = 1
    return deepest, orphans


def _walked_tree_shape(parents: dict[bytes, bytes]) -> tuple[int, int]:
    """:func:`tree_shape` of any tree, each span's depth found by walking up its chain of parents."""
    depths: dict[bytes, int] = {}
    deepest = orphans = 0
    for span_id, parent_id in parents.items():
        if not parent_id or parent_id == span_id or parent_id not in parents:
            # a root, its own parent or an orphan: depth 0 (a chain walk may have set it already, to 0)
            if parent_id:
                orphans += 1
            depths.setdefault(span_id, 0)
            continue
        depth = depths.get(span_id)
        if depth is None:
            above = depths.get(parent_id)
            if above is not None:
                depth = depths[span_id] = above + 1
            else:
                depth = chain_depth(span_id, parent_id, depths, parents)
        if depth > deepest:
            deepest = depth
    return deepest, orphans


def span_records(datas: Iterable[bytes]) -> list[SpanRecord]:
    """The records of spans given as their encoded bytes."""
    records = []
    for data in datas:
        span = SpanFacts.FromString(data)
        records.append(span_record(span, span.attributes, span.span_id, span.parent_span_id))
    return records


def tally_of(datas: Iterable[bytes]) -> TraceTally:
    """The tally of spans given as their encoded bytes, folded afresh in order."""
    tally = TraceTally()
    for data in datas:
        span = SpanFacts.FromString(data)
        tally.add(span, span.attributes, span.span_id, span.parent_span_id)
    return tally


def scratch_signals(datas: Iterable[bytes], tally: TraceTally, cost: Pricer) -> TraceSignals:
    """The signals of spans given as their bytes, computed from scratch with
    :func:`tailcut.signals.trace_signals` (times and status codes from ``tally``)."""
    records = span_records(datas)
    signals = trace_signals(records)
    return TraceSignals(
        span_count=signals.span_count,
        error_count=signals.errors,
        llm_calls=signals.llm_calls,
        tool_calls=signals.tool_calls,
        input_tokens=signals.input_tokens,
        output_tokens=signals.output_tokens,
        max_depth=signals.depth,
        max_tool_repeat=signals.max_tool_repeat,
        schema_violations=signals.schema_violations,
        start_ns=max(tally.start_ns, 0),
        end_ns=tally.end_ns,
        orphan_count=signals.orphan_count,
        status_mask=tally.status_mask,
        cost_usd=trace_cost(records, lambda r: cost(r.model, r.input_tokens, r.output_tokens)),
    )


@dataclass(slots=True)
class TraceSignals:
    """The signals of one trace (see the module docstring)."""

    span_count: int
    error_count: int
    llm_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    max_depth: int
    max_tool_repeat: int
    schema_violations: int
    start_ns: int
    end_ns: int
    orphan_count: int
    status_mask: int  # bit ``1 << code`` for each OTLP status code present
    cost_usd: float | None = None  # see :func:`tailcut.exporters._signals.trace_cost`

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def duration_ms(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e6

    def attributes(self, anomaly_score: float | None) -> dict[str, Any]:
        """The ``tailcut.trace.*`` attributes, as written on the root span and read by policies."""
        values: dict[str, Any] = {
            attr.TRACE_LLM_CALLS: self.llm_calls,
            attr.TRACE_TOOL_CALLS: self.tool_calls,
            attr.TRACE_ERRORS: self.error_count,
            attr.TRACE_TOTAL_TOKENS: self.total_tokens,
            attr.TRACE_MAX_TOOL_REPEAT: self.max_tool_repeat,
            attr.TRACE_SCHEMA_VIOLATIONS: self.schema_violations,
            attr.TRACE_DEPTH: self.max_depth,
            attr.TRACE_SPAN_COUNT: self.span_count,
        }
        if anomaly_score is not None:
            values[attr.TRACE_ANOMALY_SCORE] = anomaly_score
        return values


#: How each ``tailcut.trace.*`` attribute is read from the signals (and the anomaly score), for policies.
SIGNAL_READERS: dict[str, Callable[[TraceSignals, float | None], Any]] = {
    attr.TRACE_LLM_CALLS: lambda s, _: s.llm_calls,
    attr.TRACE_TOOL_CALLS: lambda s, _: s.tool_calls,
    attr.TRACE_ERRORS: lambda s, _: s.error_count,
    attr.TRACE_TOTAL_TOKENS: lambda s, _: s.total_tokens,
    attr.TRACE_MAX_TOOL_REPEAT: lambda s, _: s.max_tool_repeat,
    attr.TRACE_SCHEMA_VIOLATIONS: lambda s, _: s.schema_violations,
    attr.TRACE_DEPTH: lambda s, _: s.max_depth,
    attr.TRACE_SPAN_COUNT: lambda s, _: s.span_count,
    attr.TRACE_ANOMALY_SCORE: lambda _, anomaly_score: anomaly_score,
}
