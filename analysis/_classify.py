"""Failure classification: which categories each kept trace shows, where it first shows, and which layer.

Every kept trace (every trace whose spans are in the data dir) is checked for the six categories of
DESIGN.md section 5. A finding names the **first span that shows it**: the earliest span in causal order,
found by walking the tree, not the last visible error (a tool that timed out three times is the first
attempt, not the run that gave up). The rules, with the layer each points to:

======================  ===========================  ============================  ===========================
category                fires when                   first span                    layer
======================  ===========================  ============================  ===========================
``error``               a boundary failed (a tool,   the earliest (by start) of    a report's own
                        retriever, embedding,        those spans with none below   (``tool_schema``...); a
                        memory or llm span with      it: the tool span, not the    tool, retriever,
                        status ERROR or an           step that reported it; a      embedding, memory →
                        ``exception`` event), or a   report on a step with no      ``environment``; a
                        failure observation (a       boundary: the first llm span  sub-kind of the world
                        framework's error report in  after it (its request         (``rate_limited``,
                        a result, event or status    carries it); with a failed    ``auth``, ``not_found``,
                        message: :mod:`tailcut.      root and only other failed    ``timeout``, ``service``,
                        exporters.conventions.       spans, the walk down its      ``resource_exhausted``) →
                        observations`), or another   ERROR children to the         ``environment``; llm →
                        span failed under an OK      earliest failed span with no  ``model``; the run's own
                        root; or the run failed.     failed child                  code → ``workflow``
                        Whether or not the run
                        survived it (``recovered``)

``schema_violation``    a tool call's arguments are  the llm span that emitted     ``prompt``: the model was
                        not JSON, fail the JSON      the bad call (the earliest,   shown the rule and broke
                        Schema of that tool as sent  if several); for a refusal,   it; ``model`` when the
                        in the same request, or      the llm span that produced    arguments are not JSON or
                        name a tool the request did  the output (the last to end   a format broke;
                        not offer; or the harness    before the report)            ``tool_schema`` when the
                        refused the model's output                                 tool was not offered, was
                        (a ``schema_violation``                                    offered twice with
                        observation: a parse error,                                different schemas, or a
                        an unknown tool, an                                        call broke its contract
                        unexpected argument)

``schema_drift``        (a) arguments fail the       (a) the llm span whose call   ``tool_schema``
                        schema the tool enforces     followed the old contract;
                        (its span's                  (b) the llm span that
                        ``tailcut.tool.schema``;     emitted the retried call
                        else the one shown) but are  (the last one to start
                        valid against another        before the first attempt),
                        recorded version of that     else the first attempt; the
                        tool's schema; (b) ≥         earlier of the two
                        ``drift_min_attempts``
                        attempts of one call (same
                        request hash, attempt 1..k)
                        all fail with the same,
                        non-transient error

``tool_loop``           one (tool, canonical         the first call of the most    ``workflow``
                        arguments) is called ≥       repeated (tool, arguments);
                        ``loop_min_repeats`` times   else the first span at the
                        as a first attempt (retries  greatest depth (depth), else
                        are not loops); or depth or  the root
                        span count has robust z ≥
                        ``structure_z``

``cost_blowup``         tokens or LLM calls have     the earliest llm span whose   ``model`` when that span's
                        robust z ≥ ``cost_z``, or    own tokens have z ≥           output tokens exceed the
                        duration z ≥ ``duration_z``  ``cost_z`` against the        reference per-call median
                                                     reference's per-call tokens;  by more than its input
                                                     else the root                 tokens do (the model
                                                                                   generated the excess); else
                                                                                   ``workflow`` (the harness
                                                                                   sent it or made more calls)

``silent_degradation``  no ``error`` (no failed      a retriever that failed or    ``memory`` when a retriever
                        boundary, no observation)
                        and: outcome ``fail``, or    returned nothing, or a        or memory result is
                        ``outcome_score`` <          memory span that failed (the  implicated; else ``model``
                        ``score_threshold``, or the  earliest); else the llm span  when the answer was cut off
                        final answer stopped with a  that produced the final       or is empty; else
                        ``degraded_finish_reasons``  answer (the last to end);     ``prompt``
                        reason, or the answer is     else the root
                        empty
                        (``tailcut.run.output``
                        empty, or 0 output tokens)
======================  ===========================  ============================  ===========================

**The reference** for z-scores is the agent's **baseline slice** (``traces`` rows with ``baseline`` true,
kept or dropped: no spans needed), when it has at least ``min_baseline`` traces; never the kept
failures. A data dir written without a collector (every trace kept, π = 1) is a census of the traffic, and
its whole census of that agent is the reference (median and MAD ignore the few failures in it). Otherwise
the agent gets no cost or structure verdict. Of an agent with more than ``max_reference`` reference
traces, a uniform sub-slice of about that many is the reference: the traces whose trace id's DuckDB
``hash`` is below ``2^64 · max_reference / n`` (the same traces on every run). The robust z of a value
x is ``(x − median) / s`` with
``s = max(1.4826·MAD, (Q90 − median)/1.2816, min_relative_scale·|median|, 1)``: for normal traffic
the first two both estimate σ; the Q90 term keeps a reference whose bulk sits in one tight mode (most
runs answer from the FAQ in one call) from flagging the ordinary runs of its other modes, and the last two
floors keep a constant reference (MAD 0) from turning a one-token difference into an infinite z.
"Same agent" means the same ``agent_name`` (else root
span name, else service).

A trace gets at most one finding per category; its evidence lists every signal that fired. Confidence is
fixed per rule: ``error`` 1.0 (0.9 when the root failed with no failed child), ``schema_violation`` 0.95
(0.9 for an unoffered tool), ``schema_drift`` 0.9 with both signals, 0.8 arguments only, 0.6 retries only,
``tool_loop`` 0.6 + 0.1 per repeat (at most 0.99; 0.6 structure only), ``cost_blowup`` 0.9 when a z is
twice its threshold else 0.7, ``silent_degradation`` 0.9 for a failed outcome, 0.8 cut off or empty,
0.7 low score only.

The rules are evaluated from the per-trace features the writers stored with the spans (``trace_features``
and ``trace_checks``, :mod:`._features`) for every trace they describe exactly: no payload is read then.
The other traces (written before them, or in two batches: a late span), or every trace for the exhaustive
``Thresholds(trust_recorded_counts=False, trust_trace_signals=False)``, are evaluated traces-first: one
survey of their spans and the ``traces`` table name the traces that may show a category, and only those
traces' spans are read for the rules (:mod:`._candidates` explains why that set is complete and what it
costs); the tool lists and schemas both ways find make one schema book.
Both ways compute the same roles (:data:`._rules.ROLES_SQL`) and judge them with the same SQL; robust
z-scores are always computed at classify time, from the ``traces`` rows and the ``llm`` spans' tokens. The
writers judge what needs only the trace with that SQL too (``tool_loop`` by repeated calls,
``silent_degradation`` by the root span's outcome, under the default thresholds), so that classifying the
traces the features describe reads the roles of the traces far from the reference alone.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from tailcut import attributes as attr
from tailcut.analysis import _features, _features_coverage, _features_stored, _rules
from tailcut.analysis._candidates import read_candidates, repeats_trusted, survey
from tailcut.analysis._toolcalls import (
    SchemaBook,
    check_calls,
    enforced_schemas,
    load_schema_book,
    representative_lists,
    third_party_lists,
)
from tailcut.errors import ConfigError
from tailcut.exporters.conventions import observations

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset

_T = TypeVar("_T")

CATEGORIES: Final = attr.FAILURE_CATEGORIES
LAYERS: Final = attr.HARNESS_LAYERS
#: How much each kind of signal is worth when a category has more than one (schema_drift).
_DRIFT_BOTH: Final = 0.9
#: The tables a classification builds on its way (see :mod:`._candidates`), dropped once it is done.
_SCRATCH_TABLES: Final = ("_scores", "_per_call", "_candidates", "_rows", "_roles", "_spans_roles")
#: Where the roles of the traces the features do not describe are put together (then added to ``_roles``).
_SPANS_ROLES: Final = "_spans_roles"


@dataclass(frozen=True)
class Thresholds:
    """The classifier's thresholds (see the rule table in :mod:`tailcut.analysis._classify`).

    Attributes
    ----------
    loop_min_repeats : int, default 3
        First-attempt calls with the same tool and canonical arguments that make a ``tool_loop``.
    structure_z : float, default 6.0
        Robust z of depth or span count against the reference that makes a ``tool_loop``.
    cost_z : float, default 6.0
        Robust z of total tokens or LLM calls (and of one call's tokens, for the first span) that makes a
        ``cost_blowup``.
    duration_z : float, default 20.0
        Robust z of duration that makes a ``cost_blowup``; far higher than ``cost_z`` because wall-clock
        time has heavy tails that come from the machine (load, pauses), not the agent: on the demo fleet
        a run slowed tenfold by its host reaches z ≈ 12 while its tokens and calls are ordinary.
    min_relative_scale : float, default 0.1
        Floor of a z-score's scale, as a share of the reference median.
    min_baseline : int, default 20
        Reference traces an agent needs before its z-scores are computed.
    max_reference : int, default 5000
        Reference traces an agent's z-scores are computed from at most: of more, a uniform sub-slice of
        about this many, chosen by a hash of the trace id. The medians and MADs of 5,000 draws are within
        about 2% of a standard deviation (one standard error) of the whole slice's; their time and memory
        then stay bounded as the data dir grows.
    score_threshold : float, default 0.5
        An ``outcome_score`` below it is a ``silent_degradation``.
    degraded_finish_reasons : tuple of str
        Finish reasons of a final answer that mean it was cut off or withheld (OpenAI's ``length`` and
        ``content_filter``, Anthropic's ``max_tokens`` and ``refusal``).
    drift_min_attempts : int, default 2
        Identical attempts that must fail identically to signal ``schema_drift``.
    transient_errors : str
        Regular expression (matched against the lower-cased error type and message) of errors that are
        transient, so identical retries of them are not drift: timeouts, rate limits, unavailability.
    observation_rules : tuple of ObservationRule
        The failure observations: texts in which frameworks report a failure (see
        :mod:`tailcut.exporters.conventions.observations`; configured ones come first, from the collector
        config's ``processors.tailcut.observation_rules``).
    trust_recorded_counts : bool, default True
        Skip re-validating LLM spans whose SDK-recorded ``tailcut.schema_violations`` is 0 when every
        schema they showed is the enforced one (the same jsonschema check already ran at record time).
    trust_trace_signals : bool, default True
        Take the traces that may repeat a tool call from ``traces.max_tool_repeat`` (the collector counted
        them from the same spans) instead of grouping every tool call of the data dir; ignored when the
        ``traces`` rows do not account for every kept span (see :func:`._candidates.repeats_trusted`).
    """

    loop_min_repeats: int = 3
    structure_z: float = 6.0
    cost_z: float = 6.0
    duration_z: float = 20.0
    min_relative_scale: float = 0.1
    min_baseline: int = 20
    max_reference: int = 5000
    score_threshold: float = 0.5
    degraded_finish_reasons: tuple[str, ...] = ("length", "content_filter", "max_tokens", "refusal")
    drift_min_attempts: int = 2
    transient_errors: str = (
        r"timeout|timed out|rate.?limit|too many requests|\b429\b|\b503\b|unavailable|temporar|"
        r"connection (reset|refused|aborted)|overloaded"
    )
    observation_rules: tuple[observations.ObservationRule, ...] = observations.RULES
    trust_recorded_counts: bool = True
    trust_trace_signals: bool = True

    def __post_init__(self) -> None:
        if self.loop_min_repeats < 2:
            raise ConfigError(f"loop_min_repeats must be at least 2, got {self.loop_min_repeats}")
        if self.drift_min_attempts < 2:
            raise ConfigError(f"drift_min_attempts must be at least 2, got {self.drift_min_attempts}")
        if self.min_baseline < 1:
            raise ConfigError(f"min_baseline must be at least 1, got {self.min_baseline}")
        if self.max_reference < self.min_baseline:
            raise ConfigError(
                f"max_reference must be at least min_baseline ({self.min_baseline}), got {self.max_reference}"
            )
        for name in ("structure_z", "cost_z", "duration_z"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.min_relative_scale < 0:
            raise ConfigError(f"min_relative_scale must be ≥ 0, got {self.min_relative_scale}")
        if not 0 <= self.score_threshold <= 1:
            raise ConfigError(f"score_threshold must lie in [0, 1], got {self.score_threshold}")
        try:
            re.compile(self.transient_errors)
        except re.error as exc:
            raise ConfigError(f"transient_errors is not a regular expression: {exc}") from None

    def parameters(self) -> dict[str, Any]:
        """The thresholds as the named parameters of the classifier's SQL."""
        values = asdict(self)
        values["degraded_finish_reasons"] = list(self.degraded_finish_reasons)
        values["observation_pattern"] = observations.any_pattern(self.observation_rules)
        del values["trust_trace_signals"], values["observation_rules"]
        return values


def findings_schema() -> pa.Schema:
    """The Arrow schema of the ``findings`` table (:data:`tailcut.exporters.schema.FINDINGS`)."""
    from tailcut.exporters import schema

    return schema.FINDINGS


def rule_rows_schema() -> pa.Schema:
    """The Arrow schema of the rows each rule gives (:data:`._rules.FINDING_COLUMNS`): the ``findings``
    table's but ``recovered``, which :func:`_finish` adds once per trace."""
    import pyarrow as pa

    schema = findings_schema()
    return pa.schema([schema.field(name) for name in _rules.FINDING_COLUMNS])


def _run(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict[str, Any]) -> pa.Table:
    """The findings of one category query, in the ``findings`` schema."""
    table = connection.sql(query, params=_rules.named_parameters(query, parameters)).to_arrow_table()
    return table.select(list(_rules.FINDING_COLUMNS)).cast(rule_rows_schema())


def _trace_ids(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict[str, Any]) -> pa.Array:
    """The ``trace_id`` column of one query's rows."""
    return connection.sql(query, params=parameters or None).to_arrow_table()["trace_id"].combine_chunks()


def _execute(connection: duckdb.DuckDBPyConnection, query: str, parameters: dict[str, Any]) -> None:
    """Run one statement that makes a table (no rows back)."""
    connection.execute(query, _rules.named_parameters(query, parameters))


def _on_cursor(
    action: Callable[[duckdb.DuckDBPyConnection, str, dict[str, Any]], _T],
    connection: duckdb.DuckDBPyConnection,
    query: str,
    parameters: dict[str, Any],
) -> _T:
    """``action`` (:func:`_execute` or :func:`_run`) on a cursor of its own, for a worker thread (see
    :func:`compute_findings`): a connection object must not be used by two threads at once."""
    with connection.cursor() as cursor:
        return action(cursor, query, parameters)


def _problem_rows(problems: pa.Table, category: str, signal: str) -> pa.Table:
    """One finding per trace from the tool-call problems of one category (a table of
    :func:`._toolcalls.problems_schema`, in the order of their calls): the earliest call's, the first of
    those with the lowest ``seq``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chosen = problems.filter(pc.equal(problems["category"], category))
    first = _first_per_trace(chosen, pc.fill_null(chosen["seq"], 0))
    n = first.num_rows
    columns = {
        "trace_id": first["trace_id"],
        "category": pa.repeat(pa.scalar(category), n),
        "span_id": first["span_id"],
        "span_name": first["name"],
        "span_kind": first["kind"],
        "boundary": first["boundary"],
        "occurrence": first["occurrence"],
        "seq": first["seq"],
        "layer": first["layer"],
        "evidence": first["evidence"],
        "confidence": first["confidence"],
        "signals": pa.ListArray.from_arrays(_positions(n + 1), pa.repeat(pa.scalar(signal), n)),
    }
    return _findings_table(columns)


def violation_rows(problems: pa.Table) -> pa.Table:
    """The ``schema_violation`` findings of some tool-call problems: per trace, its earliest call's."""
    return _problem_rows(problems, "schema_violation", "arguments break the schema sent")


def _merge_drift(arguments: pa.Table, retries: pa.Table) -> pa.Table:
    """One ``schema_drift`` finding per trace from both signals (``findings`` rows, at most one per trace in
    each): the earlier span (the arguments' when both start together), both evidences, both signals."""
    import pyarrow as pa
    import pyarrow.compute as pc

    paired = pc.is_in(arguments["trace_id"], value_set=retries["trace_id"].combine_chunks())
    matched = pc.is_in(retries["trace_id"], value_set=arguments["trace_id"].combine_chunks())
    row, other = arguments.filter(paired), retries.filter(matched)
    other = other.take(pc.index_in(row["trace_id"], value_set=other["trace_id"].combine_chunks()))
    earlier = pc.less_equal(pc.fill_null(row["seq"], 0), pc.fill_null(other["seq"], 0))
    columns = {
        name: row[name] if name in ("trace_id", "category") else pc.if_else(earlier, row[name], other[name])
        for name in row.column_names
    }
    columns["evidence"] = pc.binary_join_element_wise(row["evidence"], other["evidence"], "; ")
    columns["confidence"] = pa.repeat(_DRIFT_BOTH, row.num_rows)
    columns["signals"] = _joined_lists(row["signals"].combine_chunks(), other["signals"].combine_chunks())
    both = _findings_table(columns)
    return pa.concat_tables([arguments.filter(pc.invert(paired)), retries.filter(pc.invert(matched)), both])


def _first_per_trace(table: pa.Table, order: Any) -> pa.Table:
    """The first row of each trace of ``table`` by ``order`` (an array beside it), then by row order; in no
    particular order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pc.count_distinct(table["trace_id"]).as_py() == table.num_rows:  # one row per trace already
        return table
    keys = pa.table({"trace_id": table["trace_id"], "order": order})
    ordered = table.take(pc.sort_indices(keys, sort_keys=[("trace_id", "ascending"), ("order", "ascending")]))
    if ordered.num_rows < 2:  # sort_indices is stable: the first of equals stays first
        return ordered
    ids = ordered["trace_id"].combine_chunks()
    return ordered.filter(pa.concat_arrays([pa.array([True]), pc.not_equal(ids[1:], ids[:-1])]))


def _joined_lists(first: pa.ListArray, second: pa.ListArray) -> pa.ListArray:
    """Each list of ``first`` followed by the list of ``second`` at the same position (neither null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(first)
    position = _positions(2 * n)
    # 0, n, 1, n + 1, ...: each list of first, then the one of second beside it
    interleaved = pc.add(pc.shift_right(position, 1), pc.multiply(pc.bit_wise_and(position, 1), n))
    pairs = pa.concat_arrays([first, second]).take(interleaved)
    lengths = pc.add(pc.list_value_length(first), pc.list_value_length(second))
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())])
    return pa.ListArray.from_arrays(offsets, pc.list_flatten(pairs))


def _positions(n: int) -> pa.Array:
    """0, 1, ... n - 1 (int32)."""
    import numpy as np
    import pyarrow as pa

    return pa.array(np.arange(n, dtype=np.int32))


def _findings_table(columns: dict[str, Any]) -> pa.Table:
    """The rule rows of ``columns`` (arrays of :func:`rule_rows_schema`'s types, by name)."""
    import pyarrow as pa

    schema = rule_rows_schema()
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)


def classify(dataset: Dataset, *, thresholds: Thresholds | None = None) -> pl.DataFrame:
    """Check every kept trace for the six failure categories; register the ``findings`` table.

    With the default thresholds the findings are also written to ``DATA/findings/findings.parquet``
    with the key of the files they came from (see :mod:`tailcut.analysis._findings`), so later
    sessions and other engines read them without classifying again.

    Parameters
    ----------
    dataset : Dataset
        The data dir.
    thresholds : Thresholds, optional
        Detection thresholds (default: ``Thresholds()``).

    Returns
    -------
    polars.DataFrame
        One row per (trace, category) with ``trace_id, category, span_id, span_name, span_kind, boundary,
        occurrence, seq`` (the first span that shows it), ``layer``, ``evidence`` (one line),
        ``confidence`` and ``signals`` (which rules fired), sorted by trace and category. The same rows
        are the ``findings`` table of ``dataset`` afterwards.

    See Also
    --------
    Dataset.classify : the method form.

    Examples
    --------
    ::

        findings = Dataset("data").classify()
        findings.group_by("category", "layer").len()
    """
    return dataset.classify(thresholds=thresholds)


def compute_findings(dataset: Dataset, limits: Thresholds) -> pa.Table:
    """The findings of every kept trace under ``limits``, in :func:`findings_schema`, sorted.

    From the features written with the spans for the traces they describe
    (:func:`._features_coverage.usable`), from a survey of the spans and the suspects' spans for the
    others. The ``tool_loop`` and ``silent_degradation`` findings the writers judged stand unless
    :func:`._features_coverage.written_judgments_hold` says otherwise; ``tool_loop`` is judged again for
    the traces far from the reference when one is far in depth or span count (that may make one, or add
    to it: :func:`_far_in_structure`).

    The statements that do not wait on each other run at once, on cursors of the dataset's connection in
    two worker threads: the reference and z-scores (``_scores``, from the ``traces`` table alone) while this
    thread finds what the features describe; then the per-call reference (``_per_call``) and the roles
    (``_roles``) while this thread reads the stored checks; then the category queries beside each other
    (and the ``traces`` rows that say ``fail``) while this thread merges the drift findings.
    DuckDB lets go of the GIL while it executes, and one statement this small rarely keeps two cores busy
    (alone, a classification of the benchmark's 1M spans used 1.3 CPU-seconds per second of its time).
    """
    import pyarrow as pa

    parameters = limits.parameters()
    connection = dataset.connection
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tailcut-classify") as pool:
        scored = pool.submit(
            _on_cursor, _execute, connection, _rules.SCORES_SQL, parameters
        )  # the traces alone
        coverage = _features_coverage.usable(dataset, limits)
        partial = coverage is not None and coverage.partial
        written = _features_coverage.written_judgments_hold(coverage, limits)
        spans = _features_coverage.UNCOVERED_SPANS if partial else "spans" if coverage is None else None
        per_call = _rules.per_call_sql(features=coverage is not None, spans=spans)
        referenced = pool.submit(_on_cursor, _execute, connection, per_call, parameters)
        loops = True  # tool_loop judged at classify time (see _far_in_structure)
        if coverage is None:
            scored.result()
            found = _from_spans(dataset, limits, parameters, ([], []))
            local, retries, problems = found.local, found.retries, found.problems
        else:
            stored = _features_stored.stored(dataset, coverage)
            scored.result()
            loops = not written or _far_in_structure(connection, parameters)
            roles = _features_coverage.roles_sql(every=not written, loops=loops)
            roles_filled = pool.submit(_on_cursor, _execute, connection, roles, parameters)
            schemas = (stored.lists, stored.enforced)
            # the traces the features do not describe first: their tool lists and schemas join the book
            if partial:
                found = _from_spans(dataset, limits, parameters, schemas, scoped=True)
                book = found.book
            else:
                found, book = None, load_schema_book(*schemas)
            local, retries, problems = _features_stored.read(book, stored.checks, rule_rows_schema())
            roles_filled.result()
            local = _standing(local, connection, written=written, loops=loops)
            if found is not None:
                connection.execute(f"INSERT INTO _roles BY NAME SELECT * FROM {_SPANS_ROLES}")
                local = pa.concat_tables([local, found.local])
                retries = pa.concat_tables([retries, found.retries])
                problems = pa.concat_tables([problems, found.problems])
        referenced.result()
        judged = (
            *((_rules.LOOP_SQL,) if loops else ()),
            _rules.COST_SQL,
            *(() if written else (_rules.SILENT_SQL,)),
        )
        running = [pool.submit(_on_cursor, _run, connection, q, parameters) for q in judged]
        said_fail = pool.submit(_on_cursor, _trace_ids, connection, _SAID_FAIL_SQL, {})
        drifts = _problem_rows(problems, "schema_drift", "arguments follow another schema version")
        tables = [local, *(r.result() for r in running), _merge_drift(drifts, retries)]
        table = _finish(pa.concat_tables(tables), said_fail.result())
    for name in _SCRATCH_TABLES:
        connection.execute(f"DROP TABLE IF EXISTS {name}")
    _features_coverage.drop(dataset)
    with contextlib.suppress(Exception):  # registered only on the spans' path
        connection.unregister("_survey")
    return table


def _finish(found: pa.Table, said_fail: pa.Array) -> pa.Table:
    """The ``findings`` table (:func:`findings_schema`) of the rules' rows ``found``, sorted by trace and
    category; ``said_fail`` are the traces whose ``traces`` rows say outcome ``fail``
    (:data:`_SAID_FAIL_SQL`).

    One row per (trace, category): the earliest span's (by ``seq``, then span id, then the rules' order)
    when two rules found one (a tool call that broke its schema and a refusal the harness reported are
    both a ``schema_violation``); no ``silent_degradation`` of a trace with an ``error`` (it is for runs
    that failed with no failed boundary and no failure observation); and ``recovered``: the run did not
    fail and no ``traces`` row of it says outcome ``fail`` (only the rows that do are read). A run that
    failed always has an ``error`` finding that says so (``run failed``: its root or an agent span failed,
    the OpenAI Agents SDK's workflow root staying OK when its agent raised; ``root status ERROR``: the root
    failed with no failed boundary), so no span is read. In Arrow: a few thousand rows, which a window in
    SQL took twice as long to deduplicate.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    found = found.combine_chunks()
    keys = pa.table(
        {
            "trace_id": found["trace_id"],
            "category": found["category"],
            "seq": pc.fill_null(found["seq"], 0),
            "span_id": found["span_id"],
        }
    )
    ordered = found.take(pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names]))
    ids, categories = _trace_and_category(ordered)
    if ordered.num_rows > 1:  # sort_indices is stable: the first of equals stays first
        new = pc.or_(pc.not_equal(ids[1:], ids[:-1]), pc.not_equal(categories[1:], categories[:-1]))
        ordered = ordered.filter(pa.concat_arrays([pa.array([True]), new]))
        ids, categories = _trace_and_category(ordered)
    errored = ids.filter(pc.equal(categories, "error"))
    silent_beside_error = pc.and_(
        pc.equal(categories, "silent_degradation"), pc.is_in(ids, value_set=errored)
    )
    ordered = ordered.filter(pc.invert(silent_beside_error))
    ids, categories = _trace_and_category(ordered)
    signals = ordered["signals"].combine_chunks()
    says_failed = pc.is_in(pc.list_flatten(signals), value_set=pa.array(_RUN_FAILED_SIGNALS))
    rows = pc.unique(pc.list_parent_indices(signals).filter(says_failed))
    failed = pc.take(ids, rows).filter(pc.take(pc.equal(categories, "error"), rows))
    recovered = pc.invert(pc.or_(pc.is_in(ids, value_set=failed), pc.is_in(ids, value_set=said_fail)))
    table = ordered.append_column("recovered", recovered)
    return table.select(findings_schema().names).cast(findings_schema())


def _trace_and_category(table: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The ``trace_id`` and ``category`` columns of ``table``, each one array."""
    return table["trace_id"].combine_chunks(), table["category"].combine_chunks()


#: The ``error`` signals that say the run itself failed (see :func:`_finish`).
_RUN_FAILED_SIGNALS: Final = ("run failed", "root status ERROR")
_SAID_FAIL_SQL: Final = "SELECT trace_id FROM traces WHERE outcome = 'fail' AND trace_id IS NOT NULL"


def _far_in_structure(connection: duckdb.DuckDBPyConnection, parameters: dict[str, Any]) -> bool:
    """Whether some trace is far from the reference in depth or span count (``_scores``): only then can
    ``tool_loop`` judged at classify time differ from the writers' judgment by repeated calls alone."""
    query = "SELECT coalesce(bool_or(z_depth >= $structure_z OR z_spans >= $structure_z), false) FROM _scores"
    [(far,)] = connection.execute(query, _rules.named_parameters(query, parameters)).fetchall()
    return bool(far)


def _standing(
    local: pa.Table, connection: duckdb.DuckDBPyConnection, *, written: bool, loops: bool
) -> pa.Table:
    """The written findings that stand. When the written judgments hold: all, but the ``tool_loop`` ones of
    the traces in ``_roles`` if ``tool_loop`` is judged again (``loops``); else all but every ``tool_loop``
    and ``silent_degradation``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not written:
        judged = pa.array([category for category, _ in _features.WRITTEN_JUDGMENTS])
        return local.filter(pc.invert(pc.is_in(local["category"], value_set=judged)))
    if not loops:
        return local
    again = connection.sql("SELECT trace_id FROM _roles").to_arrow_table()["trace_id"].combine_chunks()
    return local.filter(
        pc.invert(
            pc.and_(pc.equal(local["category"], "tool_loop"), pc.is_in(local["trace_id"], value_set=again))
        )
    )


class _FromSpans(NamedTuple):
    """What :func:`_from_spans` found: the ``error`` and ``schema_violation`` findings, the
    ``schema_drift`` findings of identical retries, the tool-call problems (a table of
    :func:`._toolcalls.problems_schema`) and the schema book they were judged by."""

    local: pa.Table
    retries: pa.Table
    problems: pa.Table
    book: SchemaBook


def _from_spans(
    dataset: Dataset,
    limits: Thresholds,
    parameters: dict[str, Any],
    stored: tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str | None]]],
    *,
    scoped: bool = False,
) -> _FromSpans:
    """Fill ``_roles`` from the suspects' spans (the survey, then ``_rows``) and judge their tool calls
    against a book of the tool lists and schemas the survey found plus those ``stored`` (lists, enforced).

    ``scoped``: only of the traces the features do not describe (``_uncovered``), roles into
    ``_spans_roles``."""
    import pyarrow as pa

    connection = dataset.connection
    spans = _features_coverage.UNCOVERED_SPANS if scoped else "spans"
    within = f"SELECT hash(trace_id) FROM {_features_coverage.UNCOVERED}" if scoped else ""
    facts = survey(dataset, parameters, spans=spans)
    lists = [*stored[0], *representative_lists(dataset, facts, spans=spans)]
    enforced = sorted({*stored[1], *enforced_schemas(facts)})
    book = load_schema_book(lists, enforced)
    parameters["suspect_keys"] = book.suspect_keys()
    trusted = repeats_trusted(dataset, trust_trace_signals=limits.trust_trace_signals)
    read_candidates(dataset, facts, parameters, repeats_trusted=trusted, spans=spans, within=within)
    roles = _SPANS_ROLES if scoped else "_roles"
    connection.execute(f"CREATE OR REPLACE TABLE {roles} AS {_rules.ROLES_SQL}")
    if others := third_party_lists(connection):
        book = load_schema_book([*lists, *others], enforced)
    problems = check_calls(dataset, book, trust_recorded_counts=limits.trust_recorded_counts)
    retries = _run(connection, _rules.RETRIES_SQL, parameters)
    local = pa.concat_tables(
        [
            _run(connection, _rules.error_sql(limits.observation_rules), parameters),
            _run(connection, _rules.refused_sql(limits.observation_rules), parameters),
            violation_rows(problems),
        ]
    )
    return _FromSpans(local, retries, problems, book)
