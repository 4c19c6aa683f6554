"""Trace signals of a whole trace, computed by the collector from every buffered span.

The SDK writes the signals on its run's root for the spans *its* process recorded; the collector
recomputes them over all spans of the trace (third-party spans and other processes included) before
the policies run, and writes them on the root span and the ``traces`` row. The rules are those of
:mod:`tailcut.signals`, applied by its :func:`~tailcut.signals.trace_signals` to the buffered spans as
they are (their first fields are a :class:`~tailcut.signals.SpanSignals`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailcut import attributes as attr
from tailcut.collector._facts import BufferedSpan
from tailcut.signals import trace_signals


class SignalTally:
    """What a pending trace accumulates as each span arrives: its time span and the status codes seen.

    Everything else is counted from the buffered spans at decision time, when the tree is known.
    """

    __slots__ = ("end_ns", "head_threshold", "start_ns", "status_mask")

    def __init__(self) -> None:
        self.start_ns = -1
        self.end_ns = 0
        self.status_mask = 0  # bit ``1 << code`` for each OTLP status code seen
        self.head_threshold = 0  # the largest ``ot=th:`` rejection threshold among the spans (0: none)


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
    """The signals of a trace from its buffered spans and its running time span and status codes."""
    signals = trace_signals(spans)
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
    )
