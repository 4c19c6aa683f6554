"""The classifier's reads of the ``spans`` table: a survey of every span, then the spans of the suspects.

Reading a Parquet column costs about the same whether a query keeps one row of it or all of them (DuckDB
decompresses and decodes a column chunk as a whole; only the copying of long strings is saved), and the
wide columns dominate: the ``attributes`` map costs several scans of ``duration_ms``, ``span_id`` and
``request_sha256`` two or three. So the classifier reads each column once or twice, whatever the number of
rules:

1. **The survey** (:data:`SURVEY_SQL`) reads the narrow columns and the attributes of every ``llm`` and
   ``tool`` span and every span at depth 0, and aggregates them into a handful of rows: every tool list
   shown to a model, every schema a tool enforced, and the traces with a span-level sign of a category (a
   failed root or a failed retry, an answer cut off or empty, a recorded schema violation, a root whose
   outcome or output is bad).
2. **The suspects** (:func:`candidates_sql`) are those traces plus the ones the ``traces`` table names
   without reading spans: cost and structure z-scores, failed outcomes and low scores, repeated tool calls
   (``max_tool_repeat``, see :func:`repeats_trusted`); and, when the schema book finds a tool list stale,
   the traces that showed it.
3. **Their spans** (:data:`ROWS_SQL`) are read once into the ``_rows`` table, every column the rules use;
   the per-category SQL of :mod:`._rules` and the tool-call checks of :mod:`._toolcalls` run over
   ``_rows`` instead of the Parquet files.

Each suspect set is a superset of what its rule can flag (a root that failed is an ERROR span at depth 0,
an answer cut off is an ``llm`` span with a degraded finish reason...), so every rule sees every span it
would have seen over the whole table; only ``tool_loop``'s repeated calls rely on a trace signal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from tailcut import attributes as attr
from tailcut.analysis._rules import (
    CARRIES_INVALID_CALLS,
    FAILURE_TEXT,
    HAS_EXCEPTION,
    MALFORMED_ARGUMENTS,
    RULE_KIND,
    TOOL_SCHEMA_KEY,
    TOOL_SCHEMA_TEXT,
    failed_boundary,
    named_parameters,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset

#: A span that shows a category by itself: a failed span (a failed root or boundary, or a framework's step
#: that failed), a boundary with an ``exception`` event, a span whose failure text reports a failure
#: (``$observation_pattern``: any observation rule), an ``llm`` span cut off or with no output (the final
#: answer may be it).
_SIGN: Final = (
    f"status_code = 'ERROR' OR {failed_boundary(exception=HAS_EXCEPTION)} "
    f"OR coalesce(regexp_matches({FAILURE_TEXT}, $observation_pattern), false) "
    "OR (kind = 'llm' AND (list_contains($degraded_finish_reasons, finish_reason) OR output_tokens = 0))"
)

SURVEY_SQL: Final = f"""
SELECT facet, key, tool_name, min(trace_id) FILTER (WHERE facet = 'list') AS first_trace,
       list(hash(trace_id)) FILTER (WHERE needs_check OR odd_root OR sign) AS suspects,
       list(DISTINCT hash(trace_id)) FILTER (WHERE facet = 'list') AS shown_by,
       any_value(schema) AS schema
FROM (
    SELECT trace_id, tool_name, facet, key, sign,
           facet = 'list' AND (NOT $trust_recorded_counts OR key IS NULL OR coalesce(violations, 1) > 0)
               AS needs_check,
           coalesce(outcome = 'fail' OR score < $score_threshold
                    OR trim(coalesce(output, 'x')) IN ('""', '', 'null'), false) AS odd_root,
           schema
    FROM (
        SELECT trace_id, CASE WHEN kind = 'tool' THEN tool_name END AS tool_name,
               CASE kind WHEN 'llm' THEN 'list' WHEN 'tool' THEN 'enforced' ELSE 'root' END AS facet,
               CASE kind WHEN 'llm' THEN attributes['{attr.TOOLS_SHA256}']
                         WHEN 'tool' THEN {TOOL_SCHEMA_KEY} END AS key,
               CASE WHEN kind = 'llm'
                    THEN TRY_CAST(attributes['{attr.SCHEMA_VIOLATIONS}'] AS INTEGER) END AS violations,
               {TOOL_SCHEMA_TEXT} AS schema,
               CASE WHEN coalesce(depth, 0) = 0 THEN attributes['{attr.OUTCOME}'] END AS outcome,
               CASE WHEN coalesce(depth, 0) = 0
                    THEN TRY_CAST(attributes['{attr.OUTCOME_SCORE}'] AS DOUBLE) END AS score,
               CASE WHEN coalesce(depth, 0) = 0 THEN attributes['{attr.RUN_OUTPUT}'] ELSE 'x' END AS output,
               {_SIGN} AS sign
        FROM {{spans}}
        WHERE kind IN ('llm', 'tool', 'retriever', 'embedding', 'memory') OR coalesce(depth, 0) = 0
           OR status_code = 'ERROR' OR len(events) > 0 OR {CARRIES_INVALID_CALLS}
    )
)
GROUP BY ALL
"""
"""One read of every ``llm``, ``tool`` and depth-0 span of ``{spans}`` (the ``spans`` table, or the spans of
the traces the written features do not describe: :func:`survey`), a row per facet and key:

* ``list``: one row per tool list shown to models (``key`` is its ``tailcut.tools.sha256``, NULL for spans
  other instrumentations wrote), with the first trace that showed it;
* ``enforced``: one row per (tool, schema sha) its spans enforced or recorded
  (:data:`._rules.TOOL_SCHEMA_KEY`), with one copy of the schema;
* ``root``: the depth-0 spans of other kinds.

``suspects`` lists, on every row, the traces (by the 64-bit hash of their id) of its spans that need a look
whatever the schema book says: a sign of a category, a root whose outcome or output is bad, an ``llm`` span
whose recorded violations are not 0 (or not recorded). ``shown_by`` lists, on ``list`` rows, every trace that
showed the list, so the traces of a list the schema book finds stale need no second read of the spans.
"""

#: Where the suspect traces come from, each a query of (trace hash, whether its tool calls may repeat,
#: the depth whose spans ``tool_loop`` may point at when the trace is far too deep or too large).
_SUSPECTS: Final = {
    "survey": "SELECT unnest(suspects), false, NULL FROM _survey",
    "scores": (
        "SELECT hash(trace_id), false, "
        "CASE WHEN z_depth >= $structure_z OR z_spans >= $structure_z THEN max_depth END FROM _scores"
    ),
    "outcomes": (
        "SELECT hash(trace_id), false, NULL FROM traces "
        "WHERE outcome = 'fail' OR outcome_score < $score_threshold"
    ),
    "stale lists": (
        "SELECT unnest(shown_by), false, NULL FROM _survey "
        "WHERE facet = 'list' AND list_contains($suspect_keys, key)"
    ),
    "repeats (trace signal)": (
        "SELECT hash(trace_id), true, NULL FROM traces WHERE max_tool_repeat >= $loop_min_repeats"
    ),
    "repeats (counted)": (
        "SELECT hash(trace_id), true, NULL FROM {spans} "
        "WHERE kind = 'tool' AND coalesce(attempt, 1) = 1 AND request_sha256 IS NOT NULL "
        "GROUP BY trace_id, coalesce(tool_name, boundary, name), request_sha256 "
        "HAVING count(*) >= $loop_min_repeats"
    ),
}

#: The tools a third-party ``llm`` span's request listed (such spans carry no hash of them).
REQUEST_TOOLS: Final = (
    f"CASE WHEN kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NULL "
    """AND contains(CAST(request AS VARCHAR), '"tools"') THEN json_extract(request, '$.tools')::VARCHAR END"""
)
#: Whether an ``llm`` span's response may hold a tool call: every call item of the four shapes names
#: ``function``, ``tool_call`` or ``tool_use`` (a response without those words is not parsed).
_MAY_CALL_TOOLS: Final = (
    "(contains(CAST(response AS VARCHAR), 'function') OR contains(CAST(response AS VARCHAR), 'tool_call') "
    "OR contains(CAST(response AS VARCHAR), 'tool_use'))"
)
#: Whether a span's ``response`` says a retriever found nothing (NULL for every other span).
_EMPTY_RESULT: Final = (
    "CASE WHEN kind = 'retriever' THEN trim(response::VARCHAR) IN ('[]', '{}', 'null', '\"\"') "
    "OR json_array_length(response, '$.documents') = 0 END"
)

ROWS_SQL: Final = f"""
CREATE OR REPLACE TEMP TABLE _rows AS
SELECT trace_id, span_id, parent_span_id, coalesce(is_orphan, false) AS is_orphan, name, {RULE_KIND} AS kind,
       boundary,
       occurrence, seq, attempt, start_time, end_time, span_index, subtree_end, depth, status_code,
       error_type, status_message, tool_name, tool_call_id, request_sha256, input_tokens, output_tokens,
       finish_reason,
       {FAILURE_TEXT} AS failure_text, {HAS_EXCEPTION} AS has_exception,
       {MALFORMED_ARGUMENTS} AS malformed_arguments,
       attributes['{attr.TOOLS_SHA256}'] AS tools_key,
       TRY_CAST(attributes['{attr.SCHEMA_VIOLATIONS}'] AS INTEGER) AS recorded_violations,
       {TOOL_SCHEMA_KEY} AS schema_sha,
       CASE WHEN parent_span_id IS NULL THEN attributes['{attr.RUN_OUTPUT}'] END AS run_output,
       CASE WHEN parent_span_id IS NULL THEN attributes['{attr.OUTCOME}'] END AS root_outcome,
       CASE WHEN parent_span_id IS NULL THEN TRY_CAST(attributes['{attr.OUTCOME_SCORE}'] AS DOUBLE) END
           AS root_score,
       CASE WHEN kind = 'llm' AND (NOT $trust_recorded_counts OR tools_key IS NULL
                                   OR coalesce(recorded_violations, 1) > 0
                                   OR list_contains($suspect_keys, tools_key))
                 AND {_MAY_CALL_TOOLS}
            THEN response END AS response,
       {{request_tools}} AS request_tools,
       {_EMPTY_RESULT} AS empty_result
FROM {{spans}} JOIN _candidates c ON hash(trace_id) = c.trace
WHERE kind IN ('llm', 'tool', 'retriever', 'embedding', 'memory') OR status_code = 'ERROR'
   OR parent_span_id IS NULL OR len(events) > 0 OR list_contains(c.deep, depth) OR {CARRIES_INVALID_CALLS}
"""
"""The spans (of ``{spans}``, as in :data:`SURVEY_SQL`) of the suspect traces that some rule reads
(boundary spans, failed spans, roots, the deepest spans of traces far too deep or large), with the
attributes and payload parts the rules use, as ``_rows``: the responses of the ``llm`` spans whose tool
calls are checked, and (only when the survey found spans other instrumentations wrote) the tools their
requests listed (``{request_tools}``, see :func:`read_candidates`).
"""


def repeats_trusted(dataset: Dataset, *, trust_trace_signals: bool) -> bool:
    """Whether ``traces.max_tool_repeat`` can stand in for counting every trace's repeated tool calls.

    The writers count first-attempt calls per (boundary, request hash), the calls ``tool_loop`` groups per
    (tool, request hash), so a trace with a repeated call has a large enough ``max_tool_repeat``, provided
    its row was computed from the spans that are there. The row of a trace whose spans arrived late, or a
    trace with no row, breaks that; they are caught by comparing span counts: every kept span must be
    counted by exactly one row. When they disagree (or when the caller asked not to trust the signals,
    ``Thresholds.trust_trace_signals``), every tool call is grouped instead (one more read of the spans).
    The collector keys a tool span that another instrumentation wrote by the hash of its arguments as the
    writers rebuild them (``request_sha256``), so identical calls serialised differently, or wrapped in a
    framework's per-call envelope, count as one there too.
    """
    if not trust_trace_signals:
        return False
    spans = dataset.connection.execute("SELECT count(*) FROM spans").fetchone()
    counted = dataset.connection.execute(
        "SELECT coalesce(sum(span_count), 0) FROM traces WHERE kept"
    ).fetchone()
    return spans is not None and counted is not None and spans[0] == counted[0]


def survey(dataset: Dataset, parameters: dict[str, Any], *, spans: str = "spans") -> pa.Table:
    """Run :data:`SURVEY_SQL` over the relation ``spans`` (the ``spans`` table, or the spans of the traces
    the written features do not describe) and register its rows as ``_survey``; returns them without the
    trace lists."""
    sql = SURVEY_SQL.replace("{spans}", spans)
    query = dataset.connection.sql(sql, params=named_parameters(sql, parameters))
    table = query.to_arrow_table()
    dataset.connection.register("_survey", table)
    return table.drop_columns(["suspects", "shown_by"])


def candidates_sql(
    *, stale_lists: bool, repeats_trusted: bool, spans: str = "spans", within: str = ""
) -> str:
    """The query that fills ``_candidates`` from the sources that apply: one row per suspect trace (``trace``,
    the hash of its id), whether its tool calls may repeat (``repeats``), and the depths whose spans
    ``tool_loop`` may point at (``deep``). Repeated calls are counted over the relation ``spans``; with
    ``within`` (a query of trace hashes), only those traces are suspects.

    The traces that showed a stale tool list come from the survey (its ``shown_by`` lists); repeated tool
    calls come from the trace signal or are counted. A hash collision
    only adds a trace to the read, and a trace read needlessly changes no finding (each rule flags a
    trace or not on its own spans).
    """
    skipped = {"repeats (counted)" if repeats_trusted else "repeats (trace signal)"}
    if not stale_lists:
        skipped.add("stale lists")
    sources = "\n    UNION ALL ".join(q for name, q in _SUSPECTS.items() if name not in skipped)
    return (
        "CREATE OR REPLACE TEMP TABLE _candidates AS\n"
        "SELECT trace, bool_or(repeats) AS repeats,\n"
        "       list(DISTINCT deep) FILTER (WHERE deep IS NOT NULL) AS deep\n"
        f"FROM (\n    {sources.replace('{spans}', spans)}\n) AS suspect(trace, repeats, deep)\n"
        + (f"WHERE trace IN ({within})\n" if within else "")
        + "GROUP BY trace"
    )


def read_candidates(
    dataset: Dataset,
    facts: pa.Table,
    parameters: dict[str, Any],
    *,
    repeats_trusted: bool,
    spans: str = "spans",
    within: str = "",
) -> None:
    """Collect the suspect traces into ``_candidates`` and read their spans into ``_rows``.

    ``facts`` is the survey (:func:`survey`); ``parameters`` holds the thresholds and ``suspect_keys``
    (the tool lists the schema book found stale). The ``request`` column is read only when some ``llm``
    span carries no hash of its tools (the survey's ``list`` row with a NULL key), to hash the tools it
    listed. ``spans`` and ``within`` scope the read to some traces (see :func:`candidates_sql`).
    """
    query = candidates_sql(
        stale_lists=bool(parameters["suspect_keys"]),
        repeats_trusted=repeats_trusted,
        spans=spans,
        within=within,
    )
    dataset.connection.execute(query, named_parameters(query, parameters))
    third_party = any(
        facet == "list" and key is None
        for facet, key in zip(facts["facet"].to_pylist(), facts["key"].to_pylist(), strict=True)
    )
    rows = ROWS_SQL.replace("{request_tools}", REQUEST_TOOLS if third_party else "NULL::VARCHAR")
    rows = rows.replace("{spans}", spans)
    dataset.connection.execute(rows, named_parameters(rows, parameters))
