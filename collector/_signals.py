"""Trace signals of a whole trace, computed by the collector from every buffered span.

The SDK writes the same signals on its run's root for the spans *its* process recorded; the collector
recomputes them over all spans of the trace (third-party spans and other processes included) before
the policies run, and writes them on the root span and the ``traces`` row. Definitions match the SDK's
(``tailcut._run_state``):

* ``llm_calls``, ``total_tokens`` (input + output), ``schema_violations``: over ``llm`` spans;
* ``tool_calls``, ``max_tool_repeat``: over first attempts of ``tool`` spans (a retry is not a loop);
  the repeat count is the most calls with the same tool and the same arguments;
* ``errors``: spans with status ERROR;
* ``depth``: the deepest span's distance from its root (a root is 0);
* an ``llm`` span whose parent is also ``llm`` is a second instrumentation's view of the same call and
  is skipped, so a call counts once.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailcut import attributes as attr
from tailcut.collector._facts import ERROR_STATUS, BufferedSpan


class SignalTally:
    """Running totals of a pending trace, updated as each span arrives (cheaper than a second pass).

    What needs the whole tree (depth, orphans, nested model calls) is settled by
    :func:`compute_signals` at decision time.
    """

    __slots__ = (
        "end_ns",
        "errors",
        "input_tokens",
        "llm_calls",
        "output_tokens",
        "repeats",
        "schema_violations",
        "start_ns",
        "status_mask",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.start_ns = -1
        self.end_ns = 0
        self.status_mask = 0  # bit ``1 << code`` for each OTLP status code seen
        self.errors = 0
        self.llm_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.schema_violations = 0
        self.tool_calls = 0
        self.repeats: dict[bytes, int] | None = None  # (tool, arguments) identity -> first-attempt calls


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


_span_id = operator.itemgetter(0)

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


def compute_signals(spans: Sequence[BufferedSpan], tally: SignalTally) -> TraceSignals:
    """The signals of a trace from its running totals and, for the tree-shaped ones, its spans."""
    by_id = dict(zip(map(_span_id, spans), spans, strict=True))
    depths: dict[bytes, int] = {}
    orphans = 0
    llm_calls, errors = tally.llm_calls, tally.errors
    tokens_in, tokens_out, violations = tally.input_tokens, tally.output_tokens, tally.schema_violations
    limit = len(spans)
    # Roots end last, so SDKs export them last: walking backwards meets parents before their children.
    for span_id, parent_id, kind, status, t_in, t_out, bad, _, _ in reversed(spans):
        if kind == "llm" and parent_id:
            parent = by_id.get(parent_id)
            if (
                parent is not None and parent[2] == "llm"
            ):  # the same model call seen by a second instrumentation
                llm_calls -= 1
                tokens_in -= t_in
                tokens_out -= t_out
                violations -= bad
                errors -= status == ERROR_STATUS
        if span_id in depths:
            continue
        if parent_id:  # the common case first: the parent's depth is already known
            known = depths.get(parent_id)
            if known is not None:
                depths[span_id] = known + 1
                continue
        chain = [span_id]
        up = parent_id
        while True:  # to a root, an ancestor of known depth, an orphan or (corrupt input) a cycle
            if not up:
                base = 0
                break
            known = depths.get(up)
            if known is not None:
                base = known + 1
                break
            parent = by_id.get(up)
            if parent is None:
                orphans += 1
                base = 0
                break
            if len(chain) > limit:
                base = 0
                break
            chain.append(up)
            up = parent[1]
        for member in reversed(chain):
            depths[member] = base
            base += 1
    return TraceSignals(
        span_count=limit,
        error_count=errors,
        llm_calls=llm_calls,
        tool_calls=tally.tool_calls,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        max_depth=max(depths.values(), default=0),
        max_tool_repeat=max(tally.repeats.values()) if tally.repeats else 0,
        schema_violations=violations,
        start_ns=max(tally.start_ns, 0),
        end_ns=tally.end_ns,
        orphan_count=orphans,
        status_mask=tally.status_mask,
    )
