"""The classifier's per-trace features: computed once when a trace's spans are written, read at classify time.

**On write** (:func:`trace_features`, run on the thread of a :class:`FeatureWorker` over the batches
``DataDirWriter.write_spans`` writes, gathered up to some 30k spans or the next flush: the collector,
``tailcut ingest`` and the in-process exporter all write through it) the batch's spans run through the
classifier's own SQL, in a private DuckDB connection: ``_rows`` (:data:`._candidates.ROWS_SQL`) over every
trace of the batch, its roles (:data:`._rules.ROLES_SQL`), the rules that need nothing beyond the trace
(:data:`._rules.ERROR_SQL`, :data:`._rules.RETRIES_SQL`, ``schema_violation``: a call is checked against the
tool list of its own request, and, with the default thresholds, ``tool_loop`` by repeated calls and
``silent_degradation`` by the root span's outcome: :data:`._rules.LOOP_SQL` and :data:`._rules.SILENT_SQL`
with no reference and no ``traces`` rows), and the tool-call checks of :mod:`._toolcalls` against the tool
lists and schemas the batch shows. One ``trace_features`` row per trace keeps its span count, the tokens of
its ``llm`` spans and its roles; one ``trace_checks`` row, for the traces that have any, the rest: those
findings, the tool calls that break the schema they are checked against (whether another recorded version of
the tool's schema explains them, ``schema_drift``, is only known over the whole data dir) with jsonschema's
verdicts against every version the batch holds, and (on the batch's first trace) the batch's tool lists and
enforced schemas.

**On classify** (:func:`usable`, :func:`read`, :func:`roles_sql`) the features stand in for the survey
and the suspects' spans of every trace they describe exactly: one row for the trace (not written in two
batches), one root, the same ``rules`` key (version, ``drift_min_attempts``, ``transient_errors``), and
its spans counted by that row (no span written before the features existed). The other traces alone are
classified from their spans, as the whole data dir is when the caller asked for the exhaustive classification
(``trust_recorded_counts`` or ``trust_trace_signals`` false), when some ``trace_checks`` row the features
were written with is missing, or when they describe no trace. Robust z-scores are still computed at
classify time, from the ``traces`` rows and the stored tokens, and only the traces they flag have their
roles read (for ``cost_blowup`` and the depth and size of a ``tool_loop``), unless the written
``tool_loop`` and ``silent_degradation`` findings cannot stand (:func:`written_judgments_hold`).

The check of the recorded violations on write is local to the trace where the read path's is global: an
``llm`` span whose recorded ``tailcut.schema_violations`` is 0 is skipped when no tool span of its batch
enforces a schema other than the one the span showed, so the written features find what the exhaustive
classification finds.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from tailcut import attributes as attr
from tailcut.analysis import _candidates, _rules, _toolcalls
from tailcut.exporters.conventions import observations

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tailcut.analysis._classify import Thresholds
    from tailcut.analysis._dataset import Dataset

_logger = logging.getLogger("tailcut.exporters")
TABLE: Final = "trace_features"
CHECKS_TABLE: Final = "trace_checks"
#: Bumped whenever what the features hold or how they are computed changes (old rows are then not used).
VERSION: Final = 3
#: The relations the classifier reads them through.
VIEW: Final = "_features"
CHECKS_VIEW: Final = "_checks"


def rules_key(
    drift_min_attempts: int,
    transient_errors: str,
    observation_rules: tuple[observations.ObservationRule, ...] = observations.RULES,
) -> str:
    """The ``rules`` column: the version and the thresholds the written features depend on."""
    digest = hashlib.sha256(transient_errors.encode()).hexdigest()[:16]
    observed = observations.rules_key(observation_rules)
    return (
        f"v{VERSION} drift_min_attempts={drift_min_attempts} transient_errors={digest} "
        f"observations={observed}"
    )


# ------------------------------------------------------------------------------------------------ writing

_BATCH: Final = """
CREATE OR REPLACE TEMP VIEW _batch AS
SELECT trace_id, span_id, parent_span_id, is_orphan, name, kind, boundary, occurrence, seq, attempt,
       start_time, end_time, start_time_ns, end_time_ns, span_index, subtree_end, depth, status_code,
       error_type, status_message, tool_name, tool_call_id, request_sha256, input_tokens, output_tokens,
       finish_reason, attributes, events,
       CASE WHEN kind = 'llm' THEN request END AS request,
       CASE WHEN kind IN ('llm', 'retriever', 'tool', 'embedding', 'memory') THEN response END AS response
FROM batch
"""
"""The columns of the batch the rules read (requests only of LLM calls, results only of boundaries), a view
over the Arrow batch: each query converts only the columns it reads, and ``attributes`` is a struct of the
few the SQL reads (:func:`_read_attributes`), cheap to convert, so nothing is copied into DuckDB up front."""

_SPANS_VIEW: Final = f"""
CREATE OR REPLACE TEMP VIEW spans AS SELECT * REPLACE (
    timezone('UTC', make_timestamp_ns(start_time_ns)) AS start_time,
    timezone('UTC', make_timestamp_ns(end_time_ns)) AS end_time,
    CASE WHEN attributes['{attr.REQUEST_PIECED}'] = 'true'
         THEN CAST(tailcut_piece(trace_id, CAST(request AS VARCHAR)) AS JSON) ELSE request END AS request,
    CASE WHEN attributes['{attr.RESPONSE_PIECED}'] = 'true'
         THEN CAST(tailcut_piece(trace_id, CAST(response AS VARCHAR)) AS JSON) ELSE response END AS response)
FROM _batch
"""
"""The batch as the ``spans`` view presents it: nanosecond times, payloads put back from their pieces."""

_SHAPE: Final = f"""
SELECT min(trace_id),
       count(*) FILTER (WHERE kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NULL),
       count(*) FILTER (WHERE kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NOT NULL),
       count(*) FILTER (WHERE kind = 'tool' AND attributes['{attr.TOOL_SCHEMA_SHA256}'] IS NOT NULL),
       coalesce(bool_or(status_code = 'ERROR' OR len(events) > 0
                        OR kind IN ('tool', 'retriever', 'embedding', 'memory')), false),
       coalesce(bool_or(kind = 'tool' AND attempt > 1), false)
FROM _batch
"""
"""What the batch holds: its first trace, ``llm`` spans without and with a hash of their tools, tool spans
that enforce a schema, whether some span may show an ``error`` or a refused output (a failed span, an
event, a boundary's result) and whether a tool call was retried (queries that could find nothing are not
run)."""

_FIRST_LISTS: Final = f"""
SELECT key, first, trace_id, span_id FROM (
    SELECT attributes['{attr.TOOLS_SHA256}'] AS key, trace_id, span_id, trace_id || span_id AS first,
           row_number() OVER (PARTITION BY attributes['{attr.TOOLS_SHA256}']
                              ORDER BY trace_id || span_id) AS n
    FROM _batch WHERE kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NOT NULL
) WHERE n = 1
"""
"""The first span (by trace and span id) showing each tool list of the batch."""

_LIST_TOOLS: Final = """
SELECT f.key, f.first, f.trace_id, json_extract(s.request, '$.tools')::VARCHAR AS tools
FROM _first_lists f JOIN spans s USING (trace_id, span_id)
"""

_ENFORCED: Final = f"""
SELECT tool_name AS tool, attributes['{attr.TOOL_SCHEMA_SHA256}'] AS sha,
       any_value(attributes['{attr.TOOL_SCHEMA}']) AS schema, min(trace_id) AS trace_id
FROM _batch
WHERE kind = 'tool' AND tool_name IS NOT NULL AND attributes['{attr.TOOL_SCHEMA_SHA256}'] IS NOT NULL
GROUP BY ALL
"""

_READ_KEYS: Final = tuple(
    sorted(
        set(
            re.findall(
                r"attributes\['([^']+)'\]",
                "".join(
                    (
                        _SPANS_VIEW,
                        _SHAPE,
                        _FIRST_LISTS,
                        _ENFORCED,
                        _candidates.ROWS_SQL,
                        _candidates.REQUEST_TOOLS,
                    )
                ),
            )
        )
    )
)
"""The attributes the SQL run on write reads: the batch's ``attributes`` map is cut down to a struct of
them before DuckDB sees it (``attributes['k']`` reads a struct's field as it reads a map's key)."""


def _read_attributes(spans: pa.Table) -> pa.Table:
    """``spans`` with the ``attributes`` map replaced by a struct of :data:`_READ_KEYS` (null when absent)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    attributes = spans.column("attributes").combine_chunks()
    struct = pa.StructArray.from_arrays(
        [pc.map_lookup(attributes, key, "first") for key in _READ_KEYS], names=list(_READ_KEYS)
    )
    return spans.set_column(spans.schema.get_field_index("attributes"), "attributes", struct)


_CANDIDATES: Final = """
CREATE OR REPLACE TEMP TABLE _candidates AS
SELECT hash(trace_id) AS trace, true AS repeats, [max(depth)] AS deep FROM _batch GROUP BY trace_id
"""

_BASE: Final = """
SELECT trace_id, min(start_time) AS start_time, count(*)::INTEGER AS span_count,
       list(input_tokens ORDER BY span_index) FILTER (WHERE kind = 'llm' AND input_tokens IS NOT NULL)
           AS llm_input_tokens,
       list(output_tokens ORDER BY span_index) FILTER (WHERE kind = 'llm' AND input_tokens IS NOT NULL)
           AS llm_output_tokens
FROM _batch GROUP BY trace_id
"""

_LOCAL_FIELDS: Final = [c for c in _rules.FINDING_COLUMNS if c != "trace_id"]


@cache
def _assemble_sql() -> str:
    """The features of the batch from the scratch tables (one row per trace, roles as flat columns)."""
    roles = ", ".join(f"r.{role}.{field} AS {role}_{field}" for role, field in _role_fields())
    local = ", ".join(f"'{c}': {c}" for c in _LOCAL_FIELDS)
    return f"""
SELECT b.trace_id, b.start_time, b.span_count, $rules AS rules, b.llm_input_tokens, b.llm_output_tokens,
       coalesce(r.roots, 0) AS roots, {roles}, r.heavy, l.local_findings, c.calls, t.tool_lists, e.enforced,
       (l.local_findings IS NOT NULL OR c.calls IS NOT NULL OR t.tool_lists IS NOT NULL
        OR e.enforced IS NOT NULL)::INTEGER AS checks
FROM _base b
LEFT JOIN _roles r USING (trace_id)
LEFT JOIN (SELECT trace_id, list({{{local}}}) AS local_findings FROM _local GROUP BY trace_id) l
    USING (trace_id)
LEFT JOIN (SELECT trace_id, list(call ORDER BY seq, call_index) AS calls FROM _calls GROUP BY trace_id) c
    USING (trace_id)
LEFT JOIN (SELECT trace_id, list({{'key': key, 'first': first, 'tools': tools}} ORDER BY first)
               AS tool_lists
           FROM _lists GROUP BY trace_id) t USING (trace_id)
LEFT JOIN (SELECT trace_id, list({{'tool': tool, 'sha': sha, 'schema': schema}} ORDER BY tool, sha)
               AS enforced
           FROM _enforced GROUP BY trace_id) e USING (trace_id)
ORDER BY b.trace_id
"""


@cache
def _role_fields() -> list[tuple[str, str]]:
    """``(role, field)`` of every flat role column of ``trace_features`` (``root_span_id``...)."""
    from tailcut.exporters.schema import ROLE_FIELDS

    return [(role, field.name) for role, fields in ROLE_FIELDS.items() for field in fields]


#: What ``tailcut_piece`` raises for a piece the batch does not hold (written with an earlier batch), so that
#: :func:`trace_features` tells that expected case from a failure: DuckDB's error names the exception and
#: its message, not the function that raised it.
_PIECE_ELSEWHERE: Final = "request piece not in this batch"


class _Pieces:
    """The batch's request pieces by (trace, sha256): what ``tailcut_piece`` expands placeholders from."""

    def __init__(self) -> None:
        self.texts: dict[tuple[str, str], str] = {}

    def load(self, pieces: pa.Table) -> None:
        """Hold the pieces of the batch about to be computed."""
        self.texts = {
            (trace, sha): text
            for trace, sha, text in zip(
                pieces["trace_id"].to_pylist(),
                pieces["sha256"].to_pylist(),
                pieces["text"].to_pylist(),
                strict=True,
            )
        }

    def __call__(self, trace_id: str, text: str | None) -> str | None:
        from tailcut._pieces import expand

        if text is None:
            return None

        def piece(sha: str) -> str:
            try:
                return self.texts[(trace_id, sha)]
            except KeyError:
                raise LookupError(f"{_PIECE_ELSEWHERE}: {sha}") from None

        return expand(text, piece)


class Session:
    """A DuckDB connection :func:`trace_features` computes in, kept from batch to batch (connecting and
    closing cost some 10 ms of CPU each time), with its ``tailcut_piece`` function."""

    def __init__(self) -> None:
        import duckdb

        self.connection = duckdb.connect(
            config={"threads": 1}
        )  # small batches: threads cost more than they save
        self.pieces = _Pieces()
        self.connection.create_function(
            "tailcut_piece", self.pieces, ["VARCHAR", "VARCHAR"], "VARCHAR", null_handling="special"
        )
        for statement in _NO_REFERENCE:
            self.connection.execute(statement)
        self.broken = False

    def clear(self) -> None:
        """Let go of the last batch (its Arrow tables and scratch tables)."""
        self.pieces.texts = {}
        for name in _SCRATCH_TABLES:
            self.connection.execute(f"DROP TABLE IF EXISTS {name}")
        for name in _REGISTERED:
            self.connection.unregister(name)

    def close(self) -> None:
        self.connection.close()


_SCRATCH_TABLES: Final = ("_candidates", "_rows", "_roles")
_NO_REFERENCE: Final = (
    "CREATE TEMP TABLE _scores (trace_id VARCHAR, max_depth INTEGER, span_count INTEGER, source VARCHAR, "
    "ref_n BIGINT, z_depth DOUBLE, z_spans DOUBLE, med_depth DOUBLE, med_spans DOUBLE)",
    "CREATE TEMP TABLE traces (trace_id VARCHAR, outcome VARCHAR, outcome_score DOUBLE)",
)
"""What the write-time judgments (:data:`WRITTEN_JUDGMENTS`) join instead of the data dir's: no reference
(``tool_loop`` by repeated calls alone) and no ``traces`` rows (``silent_degradation`` by the root span's
outcome and score, which the collector and ``ingest`` copy into the trace's row)."""
#: The categories judged from the trace alone that the writers also judge (with the default thresholds),
#: beside ``error``, ``schema_violation`` and ``schema_drift`` of identical retries, with their queries; in
#: the order of the flags of ``_JUDGEABLE`` that say whether the batch has a trace they could find (else the
#: query is not run).
WRITTEN_JUDGMENTS: Final = (("tool_loop", _rules.LOOP_SQL), ("silent_degradation", _rules.SILENT_SQL))
_JUDGEABLE: Final = """
SELECT coalesce(bool_or(repeat.n >= $loop_min_repeats), false),
       coalesce(bool_or(root.status_code IS DISTINCT FROM 'ERROR'
                        AND (root.outcome = 'fail' OR root.score < $score_threshold OR root.output_empty
                             OR list_contains($degraded_finish_reasons, final.finish) OR final.tokens = 0)),
                false)
FROM _roles
"""
_REGISTERED: Final = ("batch", "_first_lists", "_local", "_calls", "_lists", "_enforced", "_base")


def trace_features(
    spans: pa.Table, pieces: pa.Table, session: Session | None = None
) -> tuple[pa.Table, pa.Table] | None:
    """The ``trace_features`` and ``trace_checks`` rows of a batch of ``spans`` rows (and the ``pieces``
    they carried), under the default thresholds, computed in ``session`` (closed if the computation
    fails: ``broken``) or a connection of its own.

    Returns None when the batch cannot be described on its own (a request put together from a piece
    that is not in the batch) or the computation fails (logged): its traces are then classified from
    their spans, so a failure here never costs a span.
    """
    import duckdb
    import pyarrow.compute as pc

    from tailcut.analysis._classify import Thresholds
    from tailcut.exporters import schema

    own = session is None
    session = Session() if session is None else session
    try:
        session.pieces.load(pieces)
        session.connection.register("batch", _read_attributes(spans))
        session.connection.execute(_BATCH)
        session.connection.execute(_SPANS_VIEW)
        table = _features(session.connection, Thresholds())
        checks = table.filter(pc.equal(table["checks"], 1))
        session.clear()
        return (
            table.select(schema.TRACE_FEATURES.names).cast(schema.TRACE_FEATURES),
            checks.select(schema.TRACE_CHECKS.names).cast(schema.TRACE_CHECKS),
        )
    except duckdb.Error as exc:
        session.broken = True
        if _PIECE_ELSEWHERE not in str(exc):
            _logger.warning("trace features not computed for a batch of %d spans: %s", spans.num_rows, exc)
        return None
    except Exception as exc:  # a bug here must not lose the spans being written
        session.broken = True
        _logger.warning("trace features not computed for a batch of %d spans: %r", spans.num_rows, exc)
        return None
    finally:
        if own or session.broken:
            session.close()


def _features(connection: duckdb.DuckDBPyConnection, limits: Thresholds) -> pa.Table:
    """The features of the batch registered as ``batch`` and viewed as ``spans`` (see the module doc)."""
    import pyarrow as pa

    from tailcut.analysis._classify import rule_rows_schema

    [(owner, third_party, listed, enforcing, may_fail, retried)] = connection.execute(_SHAPE).fetchall()
    lists: list[tuple[str, str, str | None]] = []
    if listed:
        connection.register("_first_lists", connection.sql(_FIRST_LISTS).to_arrow_table())
        lists = [(first, key, tools) for key, first, _, tools in connection.execute(_LIST_TOOLS).fetchall()]
    enforced: list[tuple[str, str, str | None]] = []
    if enforcing:
        enforced = [(tool, sha, schema) for tool, sha, schema, _ in connection.execute(_ENFORCED).fetchall()]
    book = _toolcalls.load_schema_book(lists, enforced)
    parameters = {
        **limits.parameters(),
        "trust_recorded_counts": True,
        "suspect_keys": _locally_suspect(book, enforced),
    }
    connection.execute(_CANDIDATES)
    rows = _candidates.ROWS_SQL.replace(
        "{request_tools}", _candidates.REQUEST_TOOLS if third_party else "NULL::VARCHAR"
    ).replace("{spans}", "spans")
    connection.execute(rows, _rules.named_parameters(rows, parameters))
    connection.execute(f"CREATE OR REPLACE TEMP TABLE _roles AS {_rules.ROLES_SQL}")
    if third_party and (others := _toolcalls.third_party_lists(connection)):
        lists = [*lists, *others]
        book = _toolcalls.load_schema_book(lists, enforced)
    calls, violations = _open_calls(connection, book, parameters)
    [judgeable] = connection.execute(_JUDGEABLE, _rules.named_parameters(_JUDGEABLE, parameters)).fetchall()
    queries = (
        (_rules.error_sql(limits.observation_rules), may_fail),
        (_rules.refused_sql(limits.observation_rules), may_fail),
        (_rules.RETRIES_SQL, retried),
        *((q, needed) for (_, q), needed in zip(WRITTEN_JUDGMENTS, judgeable, strict=True)),
    )
    local = [
        connection.sql(q, params=_rules.named_parameters(q, parameters)).to_arrow_table()
        for q, needed in queries
        if needed
    ]
    local = [t.select(list(_rules.FINDING_COLUMNS)).cast(rule_rows_schema()) for t in local]
    connection.register("_local", pa.concat_tables([*local, violations]))
    connection.register("_calls", calls)
    connection.register(
        "_lists",
        pa.table(
            {
                "trace_id": pa.array([owner] * len(lists), pa.string()),
                "first": pa.array([first for first, _, _ in lists], pa.string()),
                "key": pa.array([key for _, key, _ in lists], pa.string()),
                "tools": pa.array([tools for _, _, tools in lists], pa.string()),
            }
        ),
    )
    connection.register(
        "_enforced",
        pa.table(
            {
                "trace_id": pa.array([owner] * len(enforced), pa.string()),
                "tool": pa.array([tool for tool, _, _ in enforced], pa.string()),
                "sha": pa.array([sha for _, sha, _ in enforced], pa.string()),
                "schema": pa.array([schema for _, _, schema in enforced], pa.string()),
            }
        ),
    )
    connection.register("_base", connection.sql(_BASE).to_arrow_table())
    rules = rules_key(limits.drift_min_attempts, limits.transient_errors, limits.observation_rules)
    return connection.sql(_assemble_sql(), params={"rules": rules}).to_arrow_table()


def _locally_suspect(book: _toolcalls.SchemaBook, enforced: list[tuple[str, str, str | None]]) -> list[str]:
    """Tool lists that show some tool a schema other than one a tool span of the batch enforces."""
    shas: dict[str, set[str]] = defaultdict(set)
    for tool, sha, _ in enforced:
        shas[tool].add(sha)
    return sorted(
        key
        for key, shown in book.shown.items()
        if any(shas.get(tool, set()) - {sha} for tool, sha in shown.items())
    )


def _open_calls(
    connection: duckdb.DuckDBPyConnection, book: _toolcalls.SchemaBook, parameters: Mapping[str, Any]
) -> tuple[pa.Table, pa.Table]:
    """The batch's tool calls whose drift is not settled by the batch (those that break the schema they are
    checked against, or are checked against a version the batch does not hold), with the verdicts found
    here; and the ``schema_violation`` findings, settled by the tool list each call was made from."""
    import pyarrow as pa

    from tailcut.analysis._classify import violation_rows
    from tailcut.exporters import schema

    call_type = schema.TRACE_CHECKS.field("calls").type.value_type
    kept, problems = [], []
    [(responses,)] = connection.execute("SELECT count(response) FROM _rows WHERE kind = 'llm'").fetchall()
    for call in _toolcalls.calls(connection, parameters) if responses else ():
        found = list(_toolcalls.check(book, call))
        problems.extend(found)
        shown = book.shown.get(call["tools_key"] or "", {}).get(call["tool"])
        reference = call["enforced_sha"] or shown
        unsettled = reference is not None and not book.checkable(reference)
        if unsettled or any(p.category == "schema_drift" for p in found):
            verdicts = book.verdicts(call["tool"], call["arguments"])
            kept.append({**call, "verdicts": [{"sha": sha, "problem": p} for sha, p in verdicts]})
    calls = pa.table(
        {
            "trace_id": pa.array([c["trace_id"] for c in kept], pa.string()),
            "seq": pa.array([c["seq"] for c in kept], pa.int32()),
            "call_index": pa.array([c["call_index"] for c in kept], pa.int64()),
            "call": pa.array([{f.name: c[f.name] for f in call_type} for c in kept], call_type),
        }
    )
    return calls, violation_rows(_toolcalls.problems_table(problems))


# ------------------------------------------------------------------------------------------------ reading

#: The relations :func:`usable` makes are of the main schema, not temporary ones (those of ``_checks`` aside,
#: read by the connection alone): the classifier runs statements that read them on cursors of its own.
_ROWS_VIEW: Final = "_feature_rows"
#: The traces the features do not describe, and their spans, read once (see :func:`usable`).
UNCOVERED: Final = "_uncovered"
UNCOVERED_SPANS: Final = "_uncovered_spans"

#: The ``spans`` columns the classifier reads of the traces the features do not describe (the survey, the
#: suspects' rows, the tool lists they showed, their calls' tokens and repeated calls; :mod:`._candidates`).
_SPAN_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "is_orphan",
    "name",
    "kind",
    "boundary",
    "occurrence",
    "seq",
    "attempt",
    "start_time",
    "end_time",
    "span_index",
    "subtree_end",
    "depth",
    "status_code",
    "error_type",
    "status_message",
    "tool_name",
    "tool_call_id",
    "request_sha256",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "attributes",
    "request",
    "response",
    "events",
)

_COVERAGE: Final = f"""
SELECT count(*), count(DISTINCT hash(trace_id)), coalesce(max(roots), 0),
       coalesce(bool_and(rules = $rules), false), coalesce(bool_or(rules = $rules), false),
       coalesce(sum(checks), 0) = (SELECT count(*) FROM {CHECKS_VIEW}), coalesce(sum(span_count), 0),
       (SELECT count(*) FROM spans),
       sum(hash(trace_id, root_outcome, root_score)) IS DISTINCT FROM
           (SELECT sum(hash(trace_id, outcome, outcome_score)) FROM traces WHERE kept)
FROM {_ROWS_VIEW}
"""
"""Rows, traces (a hash collision only sends two traces to their spans), the most roots of a row, whether
every row and whether any row has the wanted rules, whether every ``trace_checks`` row they were written
with is present, the spans they count and the spans present, and whether the kept traces' ``traces`` rows
may state other outcomes or scores than the roots the rows describe (or be other traces)."""

_UNCOVERED_SQL: Final = f"""
CREATE OR REPLACE TABLE {UNCOVERED} AS
SELECT trace_id FROM {_ROWS_VIEW}
GROUP BY trace_id HAVING count(*) > 1 OR max(roots) > 1 OR bool_or(rules <> $rules)
"""
"""The traces written in several batches, with several roots, or under other rules."""

_MISCOUNTED_SQL: Final = f"""
INSERT INTO {UNCOVERED}
SELECT coalesce(s.trace_id, f.trace_id)
FROM (SELECT trace_id, count(*) AS n FROM spans GROUP BY trace_id) s
FULL OUTER JOIN (SELECT trace_id, sum(span_count) AS n FROM {_ROWS_VIEW} GROUP BY trace_id) f USING (trace_id)
WHERE s.n IS DISTINCT FROM f.n
EXCEPT SELECT trace_id FROM {UNCOVERED}
"""
"""The traces whose spans the features do not count exactly (spans written before the features, or files
removed since)."""


@dataclass(frozen=True)
class Coverage:
    """Which traces the stored features describe (see :func:`usable`).

    Attributes
    ----------
    uncovered : int
        Traces classified from their spans instead (the ``_uncovered`` table); 0 when the features
        describe every trace.
    restated : bool
        Whether the ``traces`` rows of the traces described may state another outcome or score than their
        root spans do (judged by a 64-bit checksum over both: equal sums are taken to mean equal rows), so
        that the ``silent_degradation`` findings written with the features, which read the root span's,
        cannot be used.
    """

    uncovered: int
    restated: bool = False

    @property
    def partial(self) -> bool:
        return self.uncovered > 0


_DEFAULT_JUDGMENT: Final = ("loop_min_repeats", "score_threshold", "degraded_finish_reasons")
"""The thresholds the ``tool_loop`` and ``silent_degradation`` findings written with the features used."""


def written_judgments_hold(coverage: Coverage | None, limits: Thresholds) -> bool:
    """Whether the ``tool_loop`` and ``silent_degradation`` findings the writers judged (the default
    thresholds; no reference, so repeated calls alone; each root span's outcome) stand for the traces the
    features describe under ``limits``: then only the traces far from the reference (``_scores``) need
    their roles read, and ``tool_loop`` is judged again for them alone. Not when some trace is classified
    from its spans (their roles are judged with the others'), a ``traces`` row may restate an outcome,
    or ``limits`` sets other thresholds for those two categories."""
    from tailcut.analysis._classify import Thresholds

    if coverage is None or coverage.partial or coverage.restated:
        return False
    defaults = Thresholds()
    return all(getattr(limits, name) == getattr(defaults, name) for name in _DEFAULT_JUDGMENT)


#: The roles of the traces far from the reference that ``cost_blowup`` points at (beside ``heavy``), and those
#: ``tool_loop`` points at when it is judged again (:func:`roles_sql`).
_COST_ROLES: Final = ("root",)
_LOOP_ROLES: Final = ("root", "deepest", "repeat")


@cache
def roles_sql(*, every: bool, loops: bool = True) -> str:
    """``_roles`` from the flat role columns. ``every``: of the traces some judgement may flag, far from
    the reference (``_scores``), a repeated call, or a bad outcome, score, output or final answer (the
    ``traces`` row's outcome included); else of the traces far from the reference alone, with only the
    roles their judgements read (:func:`written_judgments_hold`): those of ``cost_blowup``, and those of
    ``tool_loop`` when it is judged again (``loops``). Each column read costs its decoding for every row,
    though few rows are kept."""
    wanted = {*_COST_ROLES, *(_LOOP_ROLES if loops else ())}
    fields: dict[str, list[str]] = defaultdict(list)
    for role, field in _role_fields():
        if every or role in wanted:
            fields[role].append(field)
    structs = {role: ", ".join(f"'{f}': {role}_{f}" for f in names) for role, names in fields.items()}
    roles = ", ".join(
        f"CASE WHEN {role}_span_id IS NOT NULL THEN {{{struct}}} END AS {role}"
        for role, struct in structs.items()
    )
    selected = f"""
CREATE OR REPLACE TABLE _roles AS
SELECT trace_id, roots, {roles}, heavy FROM {VIEW}
WHERE trace_id IN (SELECT trace_id FROM _scores)"""
    if not every:
        return selected
    return f"""{selected}
   OR repeat_n >= $loop_min_repeats
   OR (root_status_code <> 'ERROR'
       AND (root_outcome = 'fail' OR root_score < $score_threshold OR root_output_empty
            OR list_contains($degraded_finish_reasons, final_finish) OR final_tokens = 0
            OR trace_id IN (SELECT trace_id FROM traces
                            WHERE outcome = 'fail' OR outcome_score < $score_threshold)))
"""


def usable(dataset: Dataset, limits: Thresholds) -> Coverage | None:
    """Whether the stored features can be used for ``limits`` and for which traces (None: for none).

    They describe a trace when it has exactly one row, with at most one root and the wanted rules, and
    that row counts the trace's spans present; the other traces go to ``_uncovered`` (their spans are the
    ``_uncovered_spans`` view), and the rest are the ``_features`` view of ``dataset``'s connection. They
    are not used at all when the caller asked for the exhaustive classification, when some ``trace_checks``
    row they were written with is missing (the tool lists of a whole batch are then unknown), or when they
    describe no trace. The spans of each trace are counted only when the features' count of all spans
    differs from the spans present.
    """
    import duckdb

    from tailcut.analysis import _source
    from tailcut.exporters import schema

    if not (limits.trust_recorded_counts and limits.trust_trace_signals):
        return None
    connection = dataset.connection
    pattern = _source.table_glob(dataset.location, TABLE)
    rules = {"rules": rules_key(limits.drift_min_attempts, limits.transient_errors, limits.observation_rules)}
    try:
        [(files,)] = connection.execute("SELECT count(*) FROM glob(?)", [pattern]).fetchall()
        if not files:
            return None
        connection.execute(
            f"CREATE OR REPLACE VIEW {_ROWS_VIEW} AS SELECT * FROM read_parquet('{_source.quote(pattern)}')"
        )
        checks = _source.table_glob(dataset.location, CHECKS_TABLE)
        [(check_files,)] = connection.execute("SELECT count(*) FROM glob(?)", [checks]).fetchall()
        if check_files:
            connection.execute(
                f"CREATE OR REPLACE TEMP VIEW {CHECKS_VIEW} AS "
                f"SELECT * FROM read_parquet('{_source.quote(checks)}')"
            )
        else:
            connection.register("_no_checks", schema.TRACE_CHECKS.empty_table())
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {CHECKS_VIEW} AS SELECT * FROM _no_checks")
        [(rows, traces, roots, every, some, checked, counted, present, restated)] = connection.execute(
            _COVERAGE, rules
        ).fetchall()
        if not (checked and some):
            coverage = None
        elif rows == traces and roots <= 1 and every and counted == present:
            connection.execute(f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM {_ROWS_VIEW}")
            coverage = Coverage(0, restated=restated)
        else:
            coverage = _partial(connection, rules, count_spans=counted != present, traces=traces)
    except duckdb.Error:
        coverage = None
    if coverage is None:
        drop(dataset)
    return coverage


def _partial(
    connection: duckdb.DuckDBPyConnection, rules: dict[str, str], *, count_spans: bool, traces: int
) -> Coverage | None:
    """Fill ``_uncovered`` and make the views of :func:`usable` when only some traces are described."""
    connection.execute(_UNCOVERED_SQL, rules)
    if count_spans:
        connection.execute(_MISCOUNTED_SQL)
    [(uncovered,)] = connection.execute(
        f"SELECT count(*) FROM {UNCOVERED} WHERE trace_id IN (SELECT trace_id FROM {_ROWS_VIEW})"
    ).fetchall()
    if uncovered >= traces:
        return None
    [(uncovered,)] = connection.execute(f"SELECT count(*) FROM {UNCOVERED}").fetchall()
    connection.execute(
        f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM {_ROWS_VIEW} "
        f"WHERE trace_id NOT IN (SELECT trace_id FROM {UNCOVERED})"
    )
    connection.execute(
        f"CREATE OR REPLACE TABLE {UNCOVERED_SPANS} AS SELECT {', '.join(_SPAN_COLUMNS)} FROM spans "
        f"WHERE trace_id IN (SELECT trace_id FROM {UNCOVERED})"
    )
    return Coverage(uncovered)


def drop(dataset: Dataset) -> None:
    """Remove the views and tables :func:`usable` made."""
    for view in (VIEW, _ROWS_VIEW, CHECKS_VIEW):
        dataset.connection.execute(f"DROP VIEW IF EXISTS {view}")
    for table in (UNCOVERED_SPANS, UNCOVERED):
        dataset.connection.execute(f"DROP TABLE IF EXISTS {table}")


class Stored(NamedTuple):
    """The ``trace_checks`` rows (after :func:`usable`): every tool list (``(first span, list key, tools
    JSON)``) and enforced schema (``(tool, sha, schema JSON)``) the written batches held, as the schema book
    takes them, and the rows with findings or tool calls of the traces the features describe."""

    lists: list[tuple[str, str, str | None]]
    enforced: list[tuple[str, str, str | None]]
    checks: pa.Table


def stored(dataset: Dataset, coverage: Coverage) -> Stored:
    """The ``trace_checks`` rows, in one read (see :class:`Stored`)."""
    covered = f", trace_id NOT IN (SELECT trace_id FROM {UNCOVERED}) AS covered" if coverage.partial else ""
    table = dataset.connection.sql(
        f"SELECT local_findings, calls, tool_lists, enforced, trace_id{covered} FROM {CHECKS_VIEW}"
    ).to_arrow_table()
    lists = [(e["first"], e["key"], e["tools"]) for e in _flatten(table, "tool_lists").to_pylist()]
    enforced: dict[tuple[str, str], str | None] = {}
    for e in _flatten(table, "enforced").to_pylist():
        enforced[(e["tool"], e["sha"])] = enforced.get((e["tool"], e["sha"])) or e["schema"]
    checks = table.select(["local_findings", "calls", "trace_id"])
    if coverage.partial:  # (filtering copies every row)
        checks = checks.filter(table["covered"])
    return Stored(lists, sorted((t, s, schema) for (t, s), schema in enforced.items()), checks)


def read(book: _toolcalls.SchemaBook, checks: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """From the ``checks`` rows of :func:`stored`: the findings written with the features but
    ``schema_drift`` (``error``, ``schema_violation``, and ``tool_loop`` and ``silent_degradation`` as the
    writers judged them: see :func:`written_judgments_hold`), the ``schema_drift`` findings of identical
    retries and the drift problems of the stored tool calls (judged against ``book``; a table of
    :func:`._toolcalls.problems_schema`). No SQL: the classifier runs this while its first statements run."""
    import pyarrow.compute as pc

    from tailcut.analysis._classify import rule_rows_schema

    local = _flatten(checks, "local_findings").select(list(_rules.FINDING_COLUMNS)).cast(rule_rows_schema())
    drift = pc.equal(local["category"], "schema_drift")
    calls = _flatten(checks, "calls").sort_by(
        [("trace_id", "ascending"), ("seq", "ascending"), ("call_index", "ascending")]
    )
    return local.filter(pc.invert(drift)), local.filter(drift), _drift_problems(book, calls)


def _drift_problems(book: _toolcalls.SchemaBook, calls: pa.Table) -> pa.Table:
    """The ``schema_drift`` problems of the stored tool calls (rows of the ``calls`` structs), in their order,
    as a table of :func:`._toolcalls.problems_schema`.

    A call whose stored verdicts cover every checkable version of its tool is judged by its tool, tool list,
    enforced schema and verdicts alone (its arguments are only ever validated through them), so the first
    call of each such group is checked and the others take its problem; any other call is checked on its
    own. The groups are found in Arrow (:func:`_judging_keys`): only those calls become Python dicts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def drift(call: dict[str, Any]) -> _toolcalls.CallProblem | None:  # check yields at most one drift
        book.remember(call["arguments"], ((v["sha"], v["problem"]) for v in call["verdicts"] or ()))
        return next((p for p in _toolcalls.check(book, call) if p.category == "schema_drift"), None)

    keys = _judging_keys(calls)
    encoded = pc.dictionary_encode(keys)
    groups = encoded.indices
    settled, judged = [], []
    for call in calls.take(pc.index_in(encoded.dictionary, value_set=keys)).to_pylist():  # each group's first
        shas = {v["sha"] for v in call["verdicts"] or ()}
        versions = book.versions.get(call["tool"], {})
        settled.append(bool(shas) and all(sha in shas or not book.checkable(sha) for sha in versions))
        judged.append(drift(call) if settled[-1] else None)
    alone = pc.invert(pc.take(pa.array(settled, pa.bool_()), groups))
    own = [drift(call) for call in calls.filter(alone).to_pylist()]
    found = calls.select(["trace_id", "span_id", "name", "kind", "boundary", "occurrence", "seq"])
    for name in ("category", "layer", "evidence", "confidence"):
        kind = _toolcalls.problems_schema().field(name).type
        column = pc.take(pa.array([None if p is None else getattr(p, name) for p in judged], kind), groups)
        mine = pa.array([None if p is None else getattr(p, name) for p in own], kind)
        found = found.append_column(name, pc.replace_with_mask(column, alone, mine))
    return found.filter(pc.is_valid(found["category"])).cast(_toolcalls.problems_schema())


def _judging_keys(calls: pa.Table) -> pa.Array:
    """Per call, bytes equal for two calls exactly when their tool, tool list, enforced schema and stored
    verdicts are (no verdicts as an empty list): the texts joined by bytes that never occur in UTF-8
    (``0xff`` between the parts, ``0xfc`` between verdicts, ``0xfd`` between a verdict's sha and problem,
    ``0xfe`` for null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def join(*parts: Any) -> Any:
        *texts, separator = parts
        binary = [pc.cast(text, pa.binary()) for text in texts]
        return pc.binary_join_element_wise(
            *binary, separator, null_handling="replace", null_replacement=b"\xfe"
        )

    verdicts = calls.column("verdicts").combine_chunks()
    each = verdicts.values
    items = join(pc.struct_field(each, "sha"), pc.struct_field(each, "problem"), b"\xfd")
    listed = pa.ListArray.from_arrays(verdicts.offsets, items, mask=verdicts.is_null())
    joined = pc.fill_null(pc.binary_join(listed, b"\xfc"), b"")  # no verdicts as none: the empty bytes
    return join(calls["tool"], calls["tools_key"], calls["enforced_sha"], joined, b"\xff").combine_chunks()


def _flatten(table: pa.Table, column: str) -> pa.Table:
    """The structs of list column ``column``, one row each, with the ``trace_id`` of their row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = table.column(column).combine_chunks()
    structs = pc.list_flatten(values)
    owners = pc.take(table.column("trace_id"), pc.list_parent_indices(values))
    return pa.Table.from_struct_array(structs).append_column("trace_id", owners)


class FeatureWorker:
    """Computes :func:`trace_features` of the batches a writer hands over, on a thread of its own.

    DuckDB releases the GIL while it runs, so the features of some batches are computed while the writer's
    caller goes on normalising the next. Batches are gathered until they hold ``chunk_rows`` spans, no
    batch came for ``linger`` seconds, or :meth:`wait` asks for them, and their features computed at once
    (each computation costs tens of milliseconds whatever its size; a trace whose spans came in several
    gathered batches gets one row). At most ``pending`` batches wait to be gathered (:meth:`submit` blocks
    beyond that); the finished tables are taken back with :meth:`finished`, after :meth:`wait` when every
    one is needed (before a flush). The worker never touches the writer, so it cannot deadlock with it.
    """

    def __init__(self, *, pending: int = 2, chunk_rows: int = 30_000, linger: float = 1.0) -> None:
        import queue
        import threading

        self._jobs: queue.Queue[tuple[pa.Table, pa.Table] | str] = queue.Queue(maxsize=pending)
        self._chunk_rows = chunk_rows
        self._linger = linger
        self._lock = threading.Lock()
        self._done: list[tuple[pa.Table, pa.Table]] = []
        self._session: Session | None = None
        self._thread = threading.Thread(target=self._run, name="tailcut-trace-features", daemon=True)
        self._thread.start()

    def submit(self, spans: pa.Table, pieces: pa.Table) -> None:
        """Queue a batch's ``spans`` rows and their ``pieces``."""
        self._jobs.put((spans, pieces))

    def wait(self) -> None:
        """Return once every batch submitted so far is computed."""
        self._jobs.put(_NOW)
        self._jobs.join()

    def finished(self) -> list[tuple[pa.Table, pa.Table]]:
        """The ``(trace_features, trace_checks)`` tables computed since the last call."""
        with self._lock:
            done, self._done = self._done, []
        return done

    def stop(self) -> None:
        """Finish the queued batches and end the thread."""
        self._jobs.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        import queue

        gathered: list[tuple[pa.Table, pa.Table]] = []
        while True:
            try:
                job = self._jobs.get(timeout=self._linger if gathered else None)
            except queue.Empty:
                self._compute(gathered)  # nothing came for a while: no reason to hold them
                gathered = []
                continue
            if isinstance(job, tuple):
                gathered.append(job)
                if sum(spans.num_rows for spans, _ in gathered) < self._chunk_rows:
                    self._jobs.task_done()  # a later _NOW (see wait) is done only once they are
                    continue
            try:
                self._compute(gathered)
                gathered = []
            finally:
                self._jobs.task_done()
            if job == _STOP:
                if self._session is not None and not self._session.broken:
                    self._session.close()
                return

    def _compute(self, gathered: list[tuple[pa.Table, pa.Table]]) -> None:
        if not gathered:
            return
        import pyarrow as pa

        try:
            spans = pa.concat_tables([s for s, _ in gathered])
            pieces = pa.concat_tables([p for _, p in gathered])
            if self._session is None or self._session.broken:
                self._session = Session()
        except Exception as exc:  # the spans are written: only their features are lost
            _logger.warning("trace features not computed for %d batches: %r", len(gathered), exc)
            return
        tables = trace_features(spans, pieces, self._session)  # never raises: a failure is logged
        if tables is not None:
            with self._lock:
                self._done.append(tables)


_NOW: Final = "now"
"""Asks the worker to compute the batches gathered so far."""
_STOP: Final = "stop"
"""Asks the worker to compute the batches gathered so far and end."""
