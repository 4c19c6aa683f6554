"""Trace signals (DESIGN.md section 2) and the ``traces`` row: their one definition, for every writer.

The signals summarise a run for sampling policies and analysis:

* ``llm_calls``, ``input_tokens``/``output_tokens`` (``total_tokens``) and ``schema_violations``: over
  ``llm`` spans;
* ``tool_calls`` and ``max_tool_repeat``: over first attempts of ``tool`` spans (a retried call counts
  once, so identical retries are not mistaken for a loop); the repeat count is the most calls with the
  same tool and the same arguments;
* ``errors``: failed spans (:func:`is_failed`: status ERROR, or a boundary that can fail carrying an
  ``exception`` event), every failed attempt included;
* ``error_spans`` and ``refused_calls``: what the spans' failure texts report (``reported``, as the
  classifier's observation rules read them: ``tailcut.exporters.conventions.observations``): the spans
  that show an ``error`` (a report of one, or a failed span whose failure is no refusal) and those
  whose text says the harness refused the model's output, so a ``traces`` row tells a failure an agent
  reported only in a payload, kept or dropped;
* ``depth``: the deepest span's distance from its root (a root is 0); ``span_count`` counts every span;
* ``cost_usd``: the sum of the llm spans' prices (None when one is unpriced, 0.0 with no llm span);
* an ``llm`` span directly inside another ``llm`` span is a second instrumentation's view of the same
  model call (:func:`is_nested_call`): it counts as a span of kind ``other`` (in ``span_count``,
  ``depth`` and ``errors``), which is also how the ``spans`` table stores it;
* an ``llm`` span that only prepares the request its sibling sends (:func:`is_preparation_span`) counts
  as kind ``other`` too, so one model request is one ``llm`` call (the ``spans`` table keeps its kind;
  the classifier reads it as ``other`` by the same rule);
* a carrier (kind :data:`~tailcut.attributes.CARRIER_KIND`: a span that only carries another span's
  pieces, ``tailcut._carriers``) is no span of the run and counts in nothing.

A whole-trace view also describes the trace: its first start and last end, whether a root arrived, the
root's name and run attributes (outcome, revisions, ids), the service (the root's, else the
earliest span's) and the agent (the root's, else that of the earliest agent span naming one).

One record carries all of it, :class:`TraceSignals`, and one function maps it to a ``traces`` row,
:func:`traces_row`. Three places fill the record: the SDK folds in each span of its own process as it
ends (:class:`SignalCounter`; it knows each span's depth when it starts, and only counts); the writers
(the in-process Parquet exporter, ``tailcut ingest``) see a whole trace and call :func:`compute_signals`
on its :class:`SpanFacts`; the collector folds each span's facts in as it arrives
(``tailcut.collector._signals``). What each feeds in differs only in representation, so the rows agree;
``tests/test_signals.py`` checks it on random span trees.

Examples
--------
>>> from tailcut.signals import SpanSignals, trace_signals, traces_row
>>> spans = [
...     SpanSignals("r", None, "root"),
...     SpanSignals("a", "r", "llm", input_tokens=10, output_tokens=5),
...     SpanSignals("b", "a", "llm", input_tokens=10, output_tokens=5),  # the same call seen twice
...     SpanSignals("c", "r", "tool", tool_key=("tool:search", "h1")),
...     SpanSignals("d", "r", "tool", tool_key=("tool:search", "h1"), failed=True),
...     SpanSignals("e", "r", "llm", preparation=True),  # prepares the request "a" sends
... ]
>>> s = trace_signals(spans)
>>> (s.llm_calls, s.total_tokens, s.tool_calls, s.max_tool_repeat, s.errors, s.depth, s.span_count)
(1, 15, 2, 2, 1, 2, 6)
>>> row = traces_row(s, kept=True, decision_reason="embedded", decided_at_ns=0)
>>> (row["llm_calls"], row["error_count"], row["max_depth"], row["decision_reason"])
(1, 1, 2, 'embedded')
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeVar

from tailcut import attributes as attr
from tailcut.attributes import CARRIER_KIND, trace_signal_attributes

_Id = TypeVar("_Id", bound=Hashable)

#: The kind whose nesting marks a duplicate view of one model call.
NESTED_CALL_KIND: Final = "llm"
#: The kind a nested call counts (and is stored) as.
NESTED_AS: Final = "other"


#: Span-name endings of the spans an instrumentor marks as model calls though they only prepare one
#: (LlamaIndex under OpenInference: ``OpenAI._prepare_chat_with_tools`` beside ``OpenAI.astream_chat``, both
#: ``LLM`` spans, the first with no response).
PREPARATION_SPAN_SUFFIXES: Final = ("._prepare_chat_with_tools", "._prepare_chat_with_tools_async")
_PREPARATION_SUFFIX_BYTES: Final = tuple(end.encode() for end in PREPARATION_SPAN_SUFFIXES)


def is_preparation_span(kind: str, name: str | bytes | None) -> bool:
    """Whether an ``llm`` span only prepares the model request its sibling sends, so that one request is
    one ``llm`` span. The one rule for it: every writer's and the collector's ``llm_calls`` ask here, and
    the classifier reads such a span as kind ``other`` by the same suffixes
    (``tailcut.analysis._rules.RULE_KIND``). ``name`` may be the encoded name (the collector's).

    >>> prepare, call = "OpenAI._prepare_chat_with_tools", "OpenAI.astream_chat"
    >>> is_preparation_span("llm", prepare), is_preparation_span("llm", prepare.encode())
    (True, True)
    >>> is_preparation_span("llm", call), is_preparation_span("tool", prepare)
    (False, False)
    """
    if kind != "llm" or not name:
        return False
    if isinstance(name, bytes):
        return name.endswith(_PREPARATION_SUFFIX_BYTES)
    return str(name).endswith(PREPARATION_SPAN_SUFFIXES)


#: The kinds whose spans are boundaries that can fail (DESIGN.md section 5: ``error``).
FAILING_KINDS: Final = ("tool", "retriever", "embedding", "memory", "llm")


def is_failed(kind: str, *, error_status: bool, raised: bool) -> bool:
    """Whether a span failed: its status is ERROR, or it is a boundary of :data:`FAILING_KINDS` that carries
    an ``exception`` event (an instrumentor that records the exception a framework caught, status left OK).

    The one definition: the ``errors`` signal counts these spans, and the classifier's ``error`` rule
    (``tailcut.analysis._rules.failed_boundary``) finds each of them, so a trace an ``errors`` policy keeps
    has its finding. ``kind`` is the kind the signals count the span as (a nested call or a preparation
    span is ``other``).

    >>> [is_failed(kind, error_status=False, raised=True) for kind in ("tool", "chain")]
    [True, False]
    """
    return error_status or (raised and kind in FAILING_KINDS)


#: What a span's failure text reports when it says the harness refused the model's output.
REFUSAL: Final = "schema_violation"


def shows_error(*, failed: bool, reported: str | None) -> bool:
    """Whether a span shows an ``error`` (the ``error_spans`` signal): its failure text reports one, or it
    failed (:func:`is_failed`) and the failure is no refusal of the model's output (:data:`REFUSAL`: the
    classifier's ``schema_violation`` then, not an ``error``).

    >>> shows_error(failed=True, reported=None), shows_error(failed=True, reported="schema_violation")
    (True, False)
    >>> shows_error(failed=False, reported="error")
    True
    """
    return reported == "error" or (failed and reported != REFUSAL)


def is_nested_call(kind: str, parent_kind: str | None) -> bool:
    """Whether a span is a second instrumentation's view of its parent's model call.

    Two instrumentors wrapping the same client (a framework's and the provider SDK's) each make an
    ``llm`` span, one inside the other; counting both would double the calls and the tokens.

    >>> is_nested_call("llm", "llm"), is_nested_call("llm", "agent")
    (True, False)
    """
    return kind == NESTED_CALL_KIND and parent_kind == NESTED_CALL_KIND


class SpanSignals(NamedTuple):
    """What the signals need of one span (the first eleven fields of the collector's buffered span)."""

    span_id: Hashable
    parent_span_id: Hashable | None  # None (or empty) for a root
    kind: str
    failed: bool = False
    #: The (tool, arguments) identity of a tool span's first attempt; None for retries and other kinds.
    tool_key: Hashable | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    schema_violations: int = 0
    #: Whether it is an ``llm`` span that only prepares a request (:func:`is_preparation_span`).
    preparation: bool = False
    #: Whether it carries an ``exception`` event (``failed`` is its status; :func:`is_failed` joins them).
    raised: bool = False
    #: What its failure text reports: ``error``, ``schema_violation`` (a refusal) or None.
    reported: str | None = None


def as_text(value: Any) -> str | None:
    """A run attribute read as text (the ``traces`` row's string columns): a string, else None."""
    return value if type(value) is str else None


def as_score(value: Any) -> float | None:
    """``tailcut.outcome.score`` read as a number: an int, a float or a numeric string, else None."""
    if value is None or type(value) is bool:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


#: The attribute each field of :class:`RunFacts` is read from, on the root span.
RUN_KEYS: Final = {
    "outcome": attr.OUTCOME,
    "outcome_score": attr.OUTCOME_SCORE,
    "harness_revision": attr.HARNESS_REVISION,
    "env_revision": attr.ENV_REVISION,
    "prompt_version": attr.PROMPT_VERSION,
    "session_id": "session.id",
    "user_id": "user.id",
    "conversation_id": attr.GEN_AI_CONVERSATION_ID,
}


_RUN_READERS: Final = tuple(
    (key, as_score if field == "outcome_score" else as_text) for field, key in RUN_KEYS.items()
)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The run, as its root span records it (DESIGN.md section 2): what the ``traces`` row copies.

    Its fields are those of :data:`RUN_KEYS`, in the same order.
    """

    outcome: str | None = None
    outcome_score: float | None = None
    harness_revision: str | None = None
    env_revision: str | None = None
    prompt_version: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None


#: A trace without a root, or a span that is none.
NO_RUN: Final = RunFacts()


def run_facts(values: Mapping[str, Any]) -> RunFacts:
    """The run from a root span's decoded attribute values (keyed by attribute name, :data:`RUN_KEYS`)."""
    get = values.get
    return RunFacts(*[read(get(key)) for key, read in _RUN_READERS])


@dataclass(slots=True)
class TraceSignals:
    """The trace signals of one trace (or, from the SDK, of one process's part of it) and what the
    ``traces`` row takes from the trace (see the module docstring; a whole-trace view fills it all).

    Adding a signal is a field here and its column in :func:`traces_row` (and the ``traces`` schema).
    """

    span_count: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    max_tool_repeat: int = 0
    schema_violations: int = 0
    depth: int = 0
    #: Spans whose parent is not in the trace (only a whole-trace view can tell).
    orphan_count: int = 0
    #: Spans that show an ``error``: one their failure text reports, or a failed span that is no refusal.
    error_spans: int = 0
    #: Spans whose failure text says the harness refused the model's output (a ``schema_violation``).
    refused_calls: int = 0
    # --- the trace, as a whole-trace view sees it ---------------------------------------------------
    trace_id: str = ""
    #: The first span start and the last span end, Unix nanoseconds.
    start_ns: int | None = None
    end_ns: int | None = None
    has_root: bool = False
    service_name: str | None = None
    root_name: str | None = None
    agent_name: str | None = None
    run: RunFacts = NO_RUN
    #: USD over the llm spans (:func:`trace_cost`); None when one has no price, 0.0 when there is none.
    cost_usd: float | None = None
    #: Whether the root span failed (None without a root): a run that survived its failed spans has
    #: errors but a root that did not fail.
    root_failed: bool | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def duration_ms(self) -> float | None:
        """From the first start to the last end (0 when the spans' clocks disagree), None without times."""
        start, end = self.start_ns, self.end_ns
        if start is None or end is None:
            return None
        return max(end - start, 0) / 1e6

    def as_attributes(self) -> dict[str, int]:
        """The signals under their root-span attribute names (``tailcut.trace.*``)."""
        return trace_signal_attributes(self)


class SignalCounter:
    """Running totals of the signals, one span at a time (not thread-safe: callers hold their own lock)."""

    __slots__ = (
        "depth",
        "error_spans",
        "errors",
        "input_tokens",
        "llm_calls",
        "max_tool_repeat",
        "output_tokens",
        "refused_calls",
        "repeats",
        "schema_violations",
        "span_count",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.span_count = self.llm_calls = self.tool_calls = self.errors = 0
        self.input_tokens = self.output_tokens = self.max_tool_repeat = self.schema_violations = 0
        self.depth = self.error_spans = self.refused_calls = 0
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
        reported: str | None = None,
    ) -> None:
        """Fold in what an ended span contributes (a nested call as kind :data:`NESTED_AS`); ``reported``:
        what its failure text reports (:class:`SpanSignals`)."""
        if failed:
            self.errors += 1
        if reported == REFUSAL:
            self.refused_calls += 1
        elif shows_error(failed=failed, reported=reported):
            self.error_spans += 1
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

    def result(self, orphan_count: int = 0) -> TraceSignals:
        """The counts so far (the rest of the record is left at its defaults)."""
        return TraceSignals(
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
            error_spans=self.error_spans,
            refused_calls=self.refused_calls,
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


def trace_signals(spans: Iterable[SpanSignals]) -> TraceSignals:
    """The signals of a whole trace from its spans, in any order.

    Carriers are left out. Depth follows parent links to a root, an orphan (a parent not in the trace,
    or the span itself: depth 0 there) or, on corrupt input, a cycle (counted from where it is entered).
    Any tuple whose first eleven fields are those of :class:`SpanSignals` will do, so the collector
    passes its buffered spans as they are. A nested call is judged by its parent's own kind (a span
    inside a preparation span is nested, as the ``spans`` table stores it); a preparation span then
    counts as kind :data:`NESTED_AS`.
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
        prepares, raised, reported = span[8], span[9], span[10]
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
        if (parent is not None and is_nested_call(kind, parent[2])) or (prepares and kind == "llm"):
            kind = NESTED_AS  # a nested call is stored as such too (tailcut.exporters normalises it so)
        add_outcome(
            kind,
            failed=is_failed(kind, error_status=failed, raised=raised),
            tool_key=tool_key,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            schema_violations=violations,
            reported=reported,
        )
    return counter.result(orphans)


def trace_cost(spans: Sequence[Any], cost: Callable[[Any], float | None] | None = None) -> float | None:
    """The cost of a trace: the sum of its llm spans' costs, None if one is unpriced, 0.0 if it has none.

    ``spans`` are records with ``span_id``, ``parent_span_id``, ``kind`` and ``preparation``
    (:class:`SpanFacts`, the collector's span records); ``cost`` gives one span's USD (default: its
    ``cost_usd``). A nested model call is no model call (:func:`is_nested_call`): its tokens are its
    parent's; nor is a preparation span (:func:`is_preparation_span`). The sum is exact
    (:func:`math.fsum`), so every path gives the same figure whatever order it holds the spans in.
    """
    kinds = {span.span_id: span.kind for span in spans}
    costs: list[float] = []
    for span in spans:
        parent = span.parent_span_id
        parent_kind = kinds.get(parent) if parent and parent != span.span_id else None
        if span.kind != "llm" or is_nested_call(span.kind, parent_kind) or span.preparation:
            continue
        value = span.cost_usd if cost is None else cost(span)
        if value is None:
            return None
        costs.append(value)
    return math.fsum(costs)


@dataclass(frozen=True, slots=True)
class SpanFacts:
    """What the trace signals and the ``traces`` row need of one span, for a whole-trace view.

    ``tailcut.exporters`` reads them from protobuf spans and from ``spans`` rows.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    #: The resolved kind (before the nested-call rule, which needs the parent and is applied per trace).
    kind: str
    #: Its status is ERROR (:func:`is_failed` also counts ``raised`` on a boundary).
    failed: bool
    start_ns: int
    end_ns: int
    input_tokens: int = 0
    output_tokens: int = 0
    boundary: str | None = None
    request_sha256: str | None = None
    attempt: int = 1
    schema_violations: int = 0
    service_name: str | None = None
    agent_name: str | None = None
    #: The run, as a root span records it (:data:`NO_RUN` on other spans).
    run: RunFacts = NO_RUN
    #: USD of an llm span of a priced model (None otherwise).
    cost_usd: float | None = None
    #: Whether it carries an ``exception`` event.
    raised: bool = False
    #: What its failure text reports (:class:`SpanSignals`).
    reported: str | None = None

    @property
    def preparation(self) -> bool:
        """Whether it only prepares a model request (:func:`is_preparation_span`)."""
        return is_preparation_span(self.kind, self.name)


def _first_start(span: SpanFacts) -> tuple[int, str]:
    return span.start_ns, span.span_id


def compute_signals(facts: Iterable[SpanFacts]) -> TraceSignals:
    """The signals of one whole trace from the facts of all its spans (see the module docstring).

    The root is the earliest-starting span without a parent; the service is the root's, else the
    earliest span's; the agent is the root's, else that of the earliest-starting agent span naming one.

    Parameters
    ----------
    facts
        One :class:`SpanFacts` per span of the trace (any order); must not be empty.

    Returns
    -------
    TraceSignals
    """
    spans = list(facts)
    if not spans:
        raise ValueError("compute_signals needs at least one span")
    signals = trace_signals(
        SpanSignals(
            f.span_id,
            f.parent_span_id,
            f.kind,
            f.failed,
            (f.boundary or "", f.request_sha256) if f.kind == "tool" and f.attempt == 1 else None,
            f.input_tokens,
            f.output_tokens,
            f.schema_violations,
            f.preparation,
            f.raised,
            f.reported,
        )
        for f in spans
    )
    roots = [f for f in spans if f.parent_span_id is None]
    root = min(roots, key=_first_start) if roots else None
    first = min(spans, key=_first_start)
    named = [f for f in spans if f.agent_name and f.kind == "agent"]
    agent = root.agent_name if root is not None and root.agent_name else None
    if agent is None and named:
        agent = min(named, key=_first_start).agent_name
    signals.trace_id = spans[0].trace_id
    signals.start_ns = min(f.start_ns for f in spans)
    signals.end_ns = max(f.end_ns for f in spans)
    signals.service_name = (root or first).service_name
    signals.agent_name = agent
    signals.cost_usd = trace_cost(spans)
    if root is not None:
        signals.has_root = True
        signals.root_name = root.name
        signals.run = root.run
        signals.root_failed = root.failed
    return signals


# --- the traces row --------------------------------------------------------------------------------------
#: Why a trace was decided when it was: the collector's reasons, ``embedded`` for the in-process
#: ParquetSpanExporter, and ``ingested`` for files written by ``tailcut ingest`` (both keep every trace).
DECISION_REASONS: Final = ("root_end", "idle", "evicted", "max_spans", "shutdown", "embedded", "ingested")
_REASONS: Final = frozenset(DECISION_REASONS)

#: One ``traces`` row: column name -> value, times as Unix nanoseconds (the ``traces`` schema's
#: ``nanosecond_fields``); built by :func:`traces_row` only.
TraceRow = dict[str, Any]


def traces_row(
    signals: TraceSignals,
    *,
    kept: bool,
    decision_reason: str,
    policies: Sequence[str] = (),
    baseline: bool = False,
    inclusion_probability: float = 1.0,
    head_probability: float = 1.0,
    decided_at_ns: int | None = None,
    anomaly_score: float | None = None,
    late_spans: int = 0,
) -> TraceRow:
    """One row of the ``traces`` table, from a trace's signals and its decision.

    The one place that maps the record to the table's columns: adding a column is an entry here (and,
    for a column a write-ahead log written before it must still replay with, in
    :data:`COLUMN_DEFAULTS`) plus its field in the ``traces`` schema.

    Parameters
    ----------
    signals
        A whole trace's (:func:`compute_signals`, or the collector's tally).
    kept
        Whether the trace's spans were kept.
    decision_reason
        One of :data:`DECISION_REASONS`.
    policies
        Every policy that matched.
    baseline
        Whether the trace is in the uniform (probabilistic) slice.
    inclusion_probability
        π, the probability the design kept it, head sampling included: in (0, 1] for a kept trace,
        [0, 1] for a dropped one (0: a drop policy matched).
    head_probability
        The probability a head sampler upstream passed the trace on (1: none did).
    decided_at_ns
        When the decision was made (default: now).
    anomaly_score
        The collector's robust z-score, if it computed one.
    late_spans
        Spans that arrived after the decision.

    Raises
    ------
    ValueError
        If ``decision_reason`` or ``inclusion_probability`` is out of range.
    """
    if decision_reason not in _REASONS:
        raise ValueError(
            f"decision_reason must be one of {', '.join(DECISION_REASONS)}; got {decision_reason!r}"
        )
    if not (0 < inclusion_probability <= 1 if kept else 0 <= inclusion_probability <= 1):
        bounds = "(0, 1] for a kept trace" if kept else "[0, 1]"
        raise ValueError(f"inclusion_probability must be in {bounds}; got {inclusion_probability}")
    s = signals
    run = s.run
    return {
        "trace_id": s.trace_id,
        "service_name": s.service_name,
        "root_name": s.root_name,
        "agent_name": s.agent_name,
        "start_time": s.start_ns,
        "end_time": s.end_ns,
        "duration_ms": s.duration_ms,
        "span_count": s.span_count,
        "error_count": s.errors,
        "llm_calls": s.llm_calls,
        "tool_calls": s.tool_calls,
        "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens,
        "max_depth": s.depth,
        "max_tool_repeat": s.max_tool_repeat,
        "schema_violations": s.schema_violations,
        "anomaly_score": anomaly_score,
        "outcome": run.outcome,
        "outcome_score": run.outcome_score,
        "harness_revision": run.harness_revision,
        "kept": kept,
        "policies": list(policies),
        "baseline": baseline,
        "inclusion_probability": float(inclusion_probability),
        "head_probability": float(head_probability),
        "decision_reason": decision_reason,
        "decided_at": time.time_ns() if decided_at_ns is None else decided_at_ns,
        "env_revision": run.env_revision,
        "prompt_version": run.prompt_version,
        "has_root": s.has_root,
        "orphan_count": s.orphan_count,
        "late_spans": late_spans,
        "cost_usd": s.cost_usd,
        "session_id": run.session_id,
        "user_id": run.user_id,
        "conversation_id": run.conversation_id,
        "root_failed": s.root_failed,
        "error_spans": s.error_spans,
        "refused_calls": s.refused_calls,
    }


#: The columns of a ``traces`` row, in the order :func:`traces_row` builds them.
TRACES_COLUMNS: Final = tuple(
    traces_row(TraceSignals(), kept=True, decision_reason="embedded", decided_at_ns=0)
)
#: What a column holds in a row recorded before the column existed (a write-ahead log of an older
#: version); a column not named here is null there.
COLUMN_DEFAULTS: Final[Mapping[str, Any]] = {"late_spans": 0, "head_probability": 1.0}


def complete_row(values: Mapping[str, Any]) -> TraceRow:
    """A row recorded by an older version (a write-ahead log), with every column of today's rows.

    Columns it lacks take :data:`COLUMN_DEFAULTS` (else null); columns today's rows lack are dropped.
    """
    return {
        column: values[column] if column in values else COLUMN_DEFAULTS.get(column)
        for column in TRACES_COLUMNS
    }
