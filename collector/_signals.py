"""Trace signals of a whole trace, folded in by the collector as each span arrives.

The SDK writes the signals on its run's root for the spans *its* process recorded; the collector
recomputes them over all spans of the trace (third-party spans and other processes included) before
the policies run, and writes them on the root span and the ``traces`` row. The rules are those of
:mod:`tailcut.signals`.

A pending trace's :class:`TraceTally` takes each span's contribution as it arrives (times, status codes,
error and tool counts, the parent links and its llm calls), so deciding a trace costs one pass over its
parent links and its llm calls (:meth:`TraceTally.signals`), not over decoded spans. What depends on the
tree (depth, orphans, the nested-call rule for llm spans; the preparation-span rule is the record's) is
settled then, when every span is known. A
trace with two spans of one id is the exception: its signals are computed from scratch with
:func:`tailcut.signals.trace_signals` over its spans' bytes (:func:`scratch_signals`), the definition the
tally is tested against (``tests/test_collector_tally.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tailcut import attributes as attr
from tailcut.collector._facts import (
    KIND_BY_RAW,
    RootFacts,
    SpanRecord,
    agent_name,
    llm_record,
    raised,
    reported,
    span_kind,
    span_record,
    tool_key,
)
from tailcut.collector._headsampling import threshold
from tailcut.collector._otlp import SpanFacts
from tailcut.exporters.conventions.observations import RULES, ObservationRule
from tailcut.signals import (
    FAILING_KINDS,
    REFUSAL,
    TraceSignals,
    chain_depth,
    shows_error,
    trace_cost,
    trace_signals,
)

_CARRIER = attr.CARRIER_KIND
_KIND = attr.KIND
_ERROR = 2  # OTLP Status.code
#: USD of one model call: ``(encoded model, input tokens, output tokens) -> cost`` (see ``model_pricer``).
Pricer = Callable[[bytes | None, int, int], float | None]


class TraceTally:
    """What a pending trace accumulates as each span arrives (see the module docstring)."""

    __slots__ = (
        "agent",
        "carrier_ids",
        "duplicate",
        "end_ns",
        "error_spans",
        "errors",
        "head_threshold",
        "llm",
        "max_tool_repeat",
        "parents",
        "refused",
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
        self.errors = 0  # failed spans but llm ones (counted with the llm records)
        # spans that show an error, and refusals (tailcut.signals.SignalCounter), but llm ones
        self.error_spans = self.refused = 0
        self.tool_calls = 0
        self.max_tool_repeat = 0
        self.repeats: dict[bytes, int] = {}
        #: The records of the llm spans, in arrival order.
        self.llm: list[SpanRecord] = []
        #: ``(start, span id, name)`` of the earliest agent span that names its agent.
        self.agent: tuple[int, bytes, str] | None = None

    def add(
        self,
        span: Any,
        attributes: Any,
        span_id: bytes,
        parent: bytes,
        rules: Sequence[ObservationRule] = RULES,
    ) -> str:
        """Fold in one span parsed with the lazy ``SpanFacts`` type; return its kind (``rules``: the
        observation rules its failure text is read with)."""
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
        start = span.start_time_unix_nano
        end = span.end_time_unix_nano
        if start < self.start_ns or self.start_ns < 0:
            self.start_ns = start
        if end > self.end_ns:
            self.end_ns = end
        if kind == "llm":
            self.llm.append(llm_record(span, span_id, parent, status == _ERROR, attributes, rules))
            return kind
        thrown = raised(span)
        failed = status == _ERROR or (kind in FAILING_KINDS and thrown)  # tailcut.signals.is_failed
        if failed:
            self.errors += 1
        said = reported(span, attributes, kind, status == _ERROR or thrown, rules)
        if said == REFUSAL:
            self.refused += 1
        elif shows_error(failed=failed, reported=said):
            self.error_spans += 1
        if kind == "tool" and (key := tool_key(span, attributes)) is not None:
            self.tool_calls += 1
            count = self.repeats.get(key, 0) + 1
            self.repeats[key] = count
            if count > self.max_tool_repeat:
                self.max_tool_repeat = count
        elif kind == "agent" and (name := agent_name(attributes)):
            found = self.agent
            if found is None or (start, span_id) < found[:2]:
                self.agent = (start, span_id, name)
        return kind

    def signals(
        self, datas: Sequence[bytes], cost: Pricer, rules: Sequence[ObservationRule] = RULES
    ) -> TraceSignals:
        """The trace's counts, times and ``cost_usd`` (``datas``: its spans' bytes, read after a duplicate
        id); the rest of the record is the caller's to fill in."""
        if self.duplicate:
            return scratch_signals(datas, self, cost, rules)
        parents = self.parents
        max_depth, orphans = tree_shape(parents)
        errors, error_spans, refused = self.errors, self.error_spans, self.refused
        llm_calls = input_tokens = output_tokens = violations = 0
        costs: list[float] | None = []
        llm = self.llm
        llm_ids = {record[0] for record in llm} if len(llm) > 1 else ()
        for span_id, parent, _, failed, _, inputs, outputs, found, prepares, thrown, said, model in llm:
            other = prepares or (parent and parent != span_id and parent in llm_ids)
            # a nested call or a preparation span (tailcut.signals.is_nested_call, is_preparation_span)
            # counts only its failure, as a span of kind other; else tailcut.signals.is_failed of an llm span
            failed = failed if other else failed or thrown
            errors += failed
            if said == REFUSAL:
                refused += 1
            elif shows_error(failed=failed, reported=said):
                error_spans += 1
            if other:
                continue

            llm_calls += 1
            input_tokens += inputs
            output_tokens += outputs
            violations += found
            if costs is not None:
                value = cost(model, inputs, outputs)
                if value is None:
                    costs = None
                else:
                    costs.append(value)
        return TraceSignals(
            span_count=len(parents),
            llm_calls=llm_calls,
            tool_calls=self.tool_calls,
            errors=errors,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            max_tool_repeat=self.max_tool_repeat,
            schema_violations=violations,
            depth=max_depth,
            orphan_count=orphans,
            error_spans=error_spans,
            refused_calls=refused,
            start_ns=max(self.start_ns, 0),
            end_ns=self.end_ns,
            cost_usd=None if costs is None else math.fsum(costs),  # exact, as tailcut.signals.trace_cost
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


def span_records(datas: Iterable[bytes], rules: Sequence[ObservationRule] = RULES) -> list[SpanRecord]:
    """The records of spans given as their encoded bytes."""
    records = []
    for data in datas:
        span = SpanFacts.FromString(data)
        records.append(span_record(span, span.attributes, span.span_id, span.parent_span_id, rules))
    return records


def earliest_span(datas: Sequence[bytes]) -> int:
    """The position of the earliest-starting span (ties: the smallest span id) among spans given as
    their bytes, carriers left out (the first span when every one is a carrier)."""
    best: tuple[int, bytes] | None = None
    found = 0
    for index, data in enumerate(datas):
        span = SpanFacts.FromString(data)
        if span_kind(span.attributes) == _CARRIER:
            continue
        key = (span.start_time_unix_nano, span.span_id)
        if best is None or key < best:
            best, found = key, index
    return found


def tally_of(datas: Iterable[bytes], rules: Sequence[ObservationRule] = RULES) -> TraceTally:
    """The tally of spans given as their encoded bytes, folded afresh in order."""
    tally = TraceTally()
    for data in datas:
        span = SpanFacts.FromString(data)
        tally.add(span, span.attributes, span.span_id, span.parent_span_id, rules)
    return tally


def scratch_signals(
    datas: Iterable[bytes], tally: TraceTally, cost: Pricer, rules: Sequence[ObservationRule] = RULES
) -> TraceSignals:
    """The signals of spans given as their bytes, computed from scratch with
    :func:`tailcut.signals.trace_signals` (times from ``tally``)."""
    records = span_records(datas, rules)
    signals = trace_signals(records)
    signals.start_ns = max(tally.start_ns, 0)
    signals.end_ns = tally.end_ns
    signals.cost_usd = trace_cost(records, lambda r: cost(r.model, r.input_tokens, r.output_tokens))
    return signals


def describe(
    signals: TraceSignals,
    trace_id: bytes,
    root: RootFacts | None,
    tally: TraceTally,
    service_name: str | None,
) -> TraceSignals:
    """Fill in what the ``traces`` row takes from the trace besides the counts (the rules of
    :mod:`tailcut.signals`): its id, service, root and run attributes, and agent."""
    signals.trace_id = trace_id.hex()
    signals.service_name = service_name
    agent = tally.agent[2] if tally.agent is not None else None
    if root is not None:
        signals.has_root = True
        signals.root_name = root.name
        signals.run = root.run
        signals.root_failed = root.failed
        agent = root.agent_name or agent
    signals.agent_name = agent
    return signals


def root_attributes(signals: TraceSignals, anomaly_score: float | None) -> dict[str, Any]:
    """The ``tailcut.trace.*`` attributes, as written on a kept trace's root span and read by policies."""
    values: dict[str, Any] = signals.as_attributes()
    if anomaly_score is not None:
        values[attr.TRACE_ANOMALY_SCORE] = anomaly_score
    return values


#: How each ``tailcut.trace.*`` attribute is read from the signals (and the anomaly score), for policies.
SIGNAL_READERS: dict[str, Callable[[TraceSignals, float | None], Any]] = {
    attr.TRACE_LLM_CALLS: lambda s, _: s.llm_calls,
    attr.TRACE_TOOL_CALLS: lambda s, _: s.tool_calls,
    attr.TRACE_ERRORS: lambda s, _: s.errors,
    attr.TRACE_TOTAL_TOKENS: lambda s, _: s.total_tokens,
    attr.TRACE_MAX_TOOL_REPEAT: lambda s, _: s.max_tool_repeat,
    attr.TRACE_SCHEMA_VIOLATIONS: lambda s, _: s.schema_violations,
    attr.TRACE_DEPTH: lambda s, _: s.depth,
    attr.TRACE_SPAN_COUNT: lambda s, _: s.span_count,
    attr.TRACE_ANOMALY_SCORE: lambda _, anomaly_score: anomaly_score,
}
