"""Trace signals (DESIGN.md section 2): their one definition, for the SDK, the collector and the writers.

The signals summarise a run for sampling policies and analysis:

* ``llm_calls``, ``input_tokens``/``output_tokens`` (``total_tokens``) and ``schema_violations``: over
  ``llm`` spans;
* ``tool_calls`` and ``max_tool_repeat``: over first attempts of ``tool`` spans (a retried call counts
  once, so identical retries are not mistaken for a loop); the repeat count is the most calls with the
  same tool and the same arguments;
* ``errors``: spans whose status is ERROR, every failed attempt included;
* ``depth``: the deepest span's distance from its root (a root is 0); ``span_count`` counts every span;
* an ``llm`` span directly inside another ``llm`` span is a second instrumentation's view of the same
  model call (:func:`is_nested_call`) and is left out of every count but ``span_count`` and ``depth``;
* a carrier (kind :data:`~tailcut.attributes.CARRIER_KIND`: a span that only carries another span's
  pieces, ``tailcut._carriers``) is no span of the run and counts in nothing.

Three places compute them, all through :class:`SignalCounter`: the SDK folds in each span of its own
process as it ends (it knows each span's depth when it starts); the collector and the Parquet writers see
a whole trace, whatever produced it, and call :func:`trace_signals`. What each feeds in differs only in
representation (the SDK's tool identity is its boundary and request hash, the collector's the raw
attribute bytes), so the counts agree; ``tests/test_signals_agree.py`` checks it on random traces.

Examples
--------
>>> from tailcut.signals import SpanSignals, trace_signals
>>> spans = [
...     SpanSignals("r", None, "root"),
...     SpanSignals("a", "r", "llm", input_tokens=10, output_tokens=5),
...     SpanSignals("b", "a", "llm", input_tokens=10, output_tokens=5),  # the same call seen twice
...     SpanSignals("c", "r", "tool", tool_key=("tool:search", "h1")),
...     SpanSignals("d", "r", "tool", tool_key=("tool:search", "h1"), failed=True),
... ]
>>> s = trace_signals(spans)
>>> (s.llm_calls, s.total_tokens, s.tool_calls, s.max_tool_repeat, s.errors, s.depth, s.span_count)
(1, 15, 2, 2, 1, 2, 5)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Final, NamedTuple, TypeVar

from tailcut.attributes import CARRIER_KIND, trace_signal_attributes

_Id = TypeVar("_Id", bound=Hashable)

#: The kind whose nesting marks a duplicate view of one model call.
NESTED_CALL_KIND: Final = "llm"


def is_nested_call(kind: str, parent_kind: str | None) -> bool:
    """Whether a span is a second instrumentation's view of its parent's model call.

    Two instrumentors wrapping the same client (a framework's and the provider SDK's) each make an
    ``llm`` span, one inside the other; counting both would double the calls and the tokens.

    >>> is_nested_call("llm", "llm"), is_nested_call("llm", "agent")
    (True, False)
    """
    return kind == NESTED_CALL_KIND and parent_kind == NESTED_CALL_KIND


class SpanSignals(NamedTuple):
    """What the signals need of one span (the first eight fields of the collector's buffered span)."""

    span_id: Hashable
    parent_span_id: Hashable | None  # None (or empty) for a root
    kind: str
    failed: bool = False
    #: The (tool, arguments) identity of a tool span's first attempt; None for retries and other kinds.
    tool_key: Hashable | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    schema_violations: int = 0


class Signals(NamedTuple):
    """The trace signals of one trace (or of one process's part of it)."""

    span_count: int
    llm_calls: int
    tool_calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    max_tool_repeat: int
    schema_violations: int
    depth: int
    #: Spans whose parent is not in the trace (only a whole-trace view can tell).
    orphan_count: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class SignalCounter:
    """Running totals of the signals, one span at a time (not thread-safe: callers hold their own lock)."""

    __slots__ = (
        "depth",
        "errors",
        "input_tokens",
        "llm_calls",
        "max_tool_repeat",
        "output_tokens",
        "repeats",
        "schema_violations",
        "span_count",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.span_count = self.llm_calls = self.tool_calls = self.errors = 0
        self.input_tokens = self.output_tokens = self.max_tool_repeat = self.schema_violations = 0
        self.depth = 0
        self.repeats: dict[Hashable, int] = {}

    def add_span(self, depth: int) -> None:
        """Count a span and its depth (the SDK does this when a span starts)."""
        self.span_count += 1
        if depth > self.depth:
            self.depth = depth

    def add_outcome(
        self,
        kind: str,
        *,
        failed: bool,
        tool_key: Hashable | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        schema_violations: int = 0,
    ) -> None:
        """Fold in what an ended span contributes (call it once per span that is not a nested call)."""
        if failed:
            self.errors += 1
        if kind == "llm":
            self.llm_calls += 1
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            self.schema_violations += schema_violations
        elif kind == "tool" and tool_key is not None:
            self.tool_calls += 1
            count = self.repeats.get(tool_key, 0) + 1
            self.repeats[tool_key] = count
            if count > self.max_tool_repeat:
                self.max_tool_repeat = count

    def as_attributes(self) -> dict[str, int]:
        """The signals under their root-span attribute names (``tailcut.trace.*``)."""
        return trace_signal_attributes(self.result())

    def result(self, orphan_count: int = 0) -> Signals:
        return Signals(
            span_count=self.span_count,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            errors=self.errors,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            max_tool_repeat=self.max_tool_repeat,
            schema_violations=self.schema_violations,
            depth=self.depth,
            orphan_count=orphan_count,
        )


def chain_depth(span_id: _Id, parent_id: _Id, depths: dict[_Id, int], parents: Mapping[_Id, _Id]) -> int:
    """The depth of ``span_id``, whose parent ``parent_id`` is in the trace but has no depth yet.

    Follows ``parents`` (span id to parent id) up to a span with a depth in ``depths``, a root, an orphan
    or, on corrupt input, a cycle (depth 0 where it is entered), and records the depth of every span on
    the way in ``depths``.

    Examples
    --------
    >>> depths = {"a": 0}
    >>> chain_depth("c", "b", depths, {"a": None, "b": "a", "c": "b"}), depths
    (2, {'a': 0, 'b': 1, 'c': 2})
    """
    chain = [span_id]
    seen = {span_id}
    up = parent_id
    while up and up not in depths and up in parents and up not in seen:
        chain.append(up)
        seen.add(up)
        up = parents[up]
    base = depths[up] + 1 if up and up in depths else 0
    for member in reversed(chain):
        depths[member] = base
        base += 1
    return depths[span_id]


def trace_signals(spans: Iterable[SpanSignals]) -> Signals:
    """The signals of a whole trace from its spans, in any order.

    Carriers are left out. Depth follows parent links to a root, an orphan (a parent not in the trace,
    or the span itself: depth 0 there) or, on corrupt input, a cycle (counted from where it is entered).
    Any tuple whose first eight fields are those of :class:`SpanSignals` will do, so the collector
    passes its buffered spans as they are.
    """
    spans = [span for span in spans if span[2] != CARRIER_KIND]
    by_id = {span[0]: span for span in spans}
    parents = {span_id: span[1] for span_id, span in by_id.items()}
    depths: dict[Hashable, int] = {}
    orphans = 0
    counter = SignalCounter()
    add_span, add_outcome = counter.add_span, counter.add_outcome
    for span in spans:
        span_id, parent_id, kind, failed, tool_key, input_tokens, output_tokens, violations = span[:8]
        parent = by_id.get(parent_id) if parent_id and parent_id != span_id else None
        if parent_id and parent is None:
            orphans += 1
        depth = depths.get(span_id)
        if depth is None:
            if parent is None:  # a root, an orphan, or its own parent
                depth = depths[span_id] = 0
            elif parent_id in depths:
                depth = depths[span_id] = depths[parent_id] + 1
            else:
                depth = chain_depth(span_id, parent_id, depths, parents)
        add_span(depth)
        if parent is not None and is_nested_call(kind, parent[2]):
            continue
        add_outcome(
            kind,
            failed=failed,
            tool_key=tool_key,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            schema_violations=violations,
        )
    return counter.result(orphans)
