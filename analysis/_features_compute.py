"""The per-trace features of a batch of spans, computed when the batch is written (see :mod:`._features`).

**On write** (:func:`trace_features`, run on the thread of a :class:`._features_worker.FeatureWorker` over the
batches ``DataDirWriter.write_spans`` writes, gathered up to some 30k spans or the next flush, when the
collector or ``tailcut ingest`` wires in the :class:`._features_worker.FeatureHook`) the batch's spans run
through the classifier's own SQL, in a private DuckDB connection: ``_rows`` (:data:`._candidates.ROWS_SQL`)
over every trace of the batch, its roles (:data:`._rules.ROLES_SQL`), the rules that need nothing beyond the
trace (:data:`._rules.ERROR_SQL`, :data:`._rules.RETRIES_SQL`, ``schema_violation``: a call is checked against
the tool list of its own request, and, with the default thresholds, ``tool_loop`` by repeated calls and
``silent_degradation`` by the root span's outcome: :data:`._rules.LOOP_SQL` and :data:`._rules.SILENT_SQL`
with no reference and no ``traces`` rows), and the tool-call checks of :mod:`._toolcalls` against the tool
lists and schemas the batch shows. One ``trace_features`` row per trace keeps its span count, the tokens of
its ``llm`` spans and its roles; one ``trace_checks`` row, for the traces that have any, the rest: those
findings, the tool calls that break the schema they are checked against (whether another recorded version of
the tool's schema explains them, ``schema_drift``, is only known over the whole data dir) with jsonschema's
verdicts against every version the batch holds, and (on the batch's first trace) the batch's tool lists and
enforced schemas.

The check of the recorded violations on write is local to the trace where the read path's is global: an
``llm`` span whose recorded ``tailcut.schema_violations`` is 0 is skipped when no tool span of its batch
enforces a schema other than the one the span showed, so the written features find what the exhaustive
classification finds.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from tailcut import attributes as attr
from tailcut.analysis import _candidates, _rules, _toolcalls
from tailcut.analysis._features import WRITTEN_JUDGMENTS, role_fields, rules_key

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tailcut.analysis._classify import Thresholds

_logger = logging.getLogger("tailcut.analysis")

_BATCH: Final = f"""
CREATE OR REPLACE TEMP VIEW _batch AS
SELECT trace_id, span_id, parent_span_id, is_orphan, name, kind, boundary, occurrence, seq, attempt,
       start_time, end_time, start_time_ns, end_time_ns, span_index, subtree_end, depth, status_code,
       error_type, status_message, tool_name, tool_call_id, request_sha256, input_tokens, output_tokens,
       finish_reason, attributes, events,
       CASE WHEN kind IN ('llm', 'tool') THEN request END AS request,
       CASE WHEN kind IN ('llm', 'retriever', 'tool', 'embedding', 'memory') OR {_rules.CARRIES_INVALID_CALLS}
            THEN response END AS response
FROM batch
"""
"""The columns of the batch the rules read (requests only of LLM and tool calls, results only of boundaries
and of the spans that carry a framework's parse errors of tool calls: :data:`._rules.CARRIES_INVALID_CALLS`),
a view over the Arrow batch: each query converts only the columns it reads, and ``attributes`` is a struct
of the few the SQL reads (:func:`_read_attributes`), cheap to convert, so nothing is copied into DuckDB up
front."""

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
       count(*) FILTER (WHERE kind = 'tool' AND {_rules.TOOL_SCHEMA_KEY} IS NOT NULL),
       coalesce(bool_or(status_code = 'ERROR' OR len(events) > 0
                        OR kind IN ('tool', 'retriever', 'embedding', 'memory')
                        OR {_rules.CARRIES_INVALID_CALLS}), false),
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
SELECT tool_name AS tool, {_rules.TOOL_SCHEMA_KEY} AS sha,
       any_value({_rules.TOOL_SCHEMA_TEXT}) AS schema, min(trace_id) AS trace_id
FROM _batch
WHERE kind = 'tool' AND tool_name IS NOT NULL AND {_rules.TOOL_SCHEMA_KEY} IS NOT NULL
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
    roles = ", ".join(f"r.{role}.{field} AS {role}_{field}" for role, field in role_fields())
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
