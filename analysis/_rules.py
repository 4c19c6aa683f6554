"""The per-category SQL of the classifier (the rules themselves are tabulated in :mod:`._classify`).

Each query returns finding rows with the columns of :data:`FINDING_COLUMNS` (the span columns come from
the span the finding points at) and takes its thresholds as named parameters (``$loop_min_repeats``...).
They run over small tables the classifier builds first, never over the Parquet files again:

* ``_scores`` (:data:`SCORES_SQL`): the kept traces whose cost or structure z-scores pass a threshold,
  measured against the robust statistics (median, MAD) of their agent's reference sample, and
  ``_per_call`` (:func:`per_call_sql`): those of one ``llm`` call's tokens, per agent;
* ``_rows``: the spans the rules read (boundary spans, failed spans, roots, the deepest spans) of the
  traces that may show a category, with the attributes and payload parts the rules use (see
  :mod:`._candidates`, which also explains why that set is enough);
* ``_roles`` (:data:`ROLES_SQL`): per trace, the spans ``tool_loop``, ``cost_blowup`` and
  ``silent_degradation`` may point at, from ``_rows`` or from the features the writers stored.

``ERROR_SQL`` and ``RETRIES_SQL`` read ``_rows``; the writers run them on each batch they write
(:mod:`._features`), the classifier only on the spans' path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tailcut import attributes as attr
from tailcut.exporters.conventions import names, observations
from tailcut.signals import FAILING_KINDS, PREPARATION_SPAN_SUFFIXES

FINDING_COLUMNS: Final = (
    "trace_id",
    "category",
    "span_id",
    "span_name",
    "span_kind",
    "boundary",
    "occurrence",
    "seq",
    "layer",
    "evidence",
    "confidence",
    "signals",
)


def named_parameters(query: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The named parameters ``query`` uses (DuckDB refuses a parameter the query does not name)."""
    return {k: v for k, v in parameters.items() if f"${k}" in query}


def agent_key(alias: str = "") -> str:
    """The agent of a ``traces`` row, for per-agent baselines: agent name, else root name, else service."""
    p = f"{alias}." if alias else ""
    return f"coalesce({p}agent_name, {p}root_name, {p}service_name, '')"


def _layer_of_kind(kind: str) -> str:
    """The layer a failing span points to by its kind: a boundary's world, the model, or the harness."""
    return (
        f"CASE WHEN {kind} = 'llm' THEN 'model' "
        f"WHEN {kind} IN ('tool', 'retriever', 'embedding', 'memory') THEN 'environment' ELSE 'workflow' END"
    )


#: A span's columns as a finding reports them (``s`` is the span, or a struct of its columns).
_SPAN: Final = "s.span_id, s.name AS span_name, s.kind AS span_kind, s.boundary, s.occurrence, s.seq"


def _z(value: str, stat: str) -> str:
    """The robust z-score of ``value`` against the reference's median and scale (:func:`_spread_columns`)."""
    return f"(({value}) - r.med_{stat}) / r.scale_{stat}"


# ---------------------------------------------------------------------------------------- the reference


def _spread(value: str, stat: str) -> str:
    """Median, MAD and 90th percentile of ``value`` (median and Q90 from one aggregate: ``q_{stat}``).

    They stay DuckDB's own aggregates. A quantile interpolated anywhere else can differ from DuckDB's in the
    last bit: its build may fuse the interpolation's multiply and add into one rounding, and a z-score
    one bit away from a threshold would then flip a finding."""
    return f"quantile_cont({value}, [0.5, 0.9]) AS q_{stat}, mad({value}) AS mad_{stat}"


def _spread_columns(stat: str) -> str:
    """``med_{stat}, mad_{stat}, q90_{stat}`` from the columns of :func:`_spread`, and ``scale_{stat}``: the
    z-scores' scale ``max(1.4826·MAD, (Q90 − median)/1.2816, min_relative_scale·|median|, 1)``, once per
    agent rather than once per trace."""
    med, q90 = f"q_{stat}[1]", f"q_{stat}[2]"
    scale = f"greatest(1.4826 * mad_{stat}, ({q90} - {med}) / 1.2816, $min_relative_scale * abs({med}), 1.0)"
    return f"{med} AS med_{stat}, mad_{stat}, {q90} AS q90_{stat}, {scale} AS scale_{stat}"


#: The value of DuckDB's 64-bit ``hash`` of a trace id below which the trace is in its agent's sub-slice:
#: ``2^64 · $max_reference / n`` for an agent of ``n`` reference traces (a hash, not the trace id's own
#: digits: those are a counter in some generators).
_CUT: Final = "(18446744073709551615 * ($max_reference / n_reference))::UBIGINT"

_REFERENCE_SAMPLE: Final = f"""
traces_by_agent AS (
    SELECT trace_id, kept, baseline, inclusion_probability, max_depth, span_count, llm_calls, duration_ms,
           {agent_key()} AS agent, input_tokens + output_tokens AS tokens
    FROM traces
),
agent_counts AS (
    SELECT agent, count(*) FILTER (WHERE baseline) AS n_baseline, count(*) AS n_all,
           bool_and(kept AND inclusion_probability >= 1.0) AS census
    FROM traces_by_agent GROUP BY agent
),
agents AS (
    SELECT *, CASE WHEN n_reference > $max_reference THEN {_CUT} END AS cut
    FROM (SELECT *, row_number() OVER (ORDER BY agent) AS agent_no,
                 CASE WHEN n_baseline >= $min_baseline THEN n_baseline ELSE n_all END AS n_reference
          FROM agent_counts)
),
chosen AS NOT MATERIALIZED (
    SELECT t.trace_id, t.max_depth, t.span_count, t.llm_calls, t.duration_ms, t.tokens, a.agent_no,
           CASE WHEN a.n_baseline >= $min_baseline THEN 'baseline slice' ELSE 'census' END AS source
    FROM traces_by_agent t JOIN agents a USING (agent)
    WHERE ((a.n_baseline >= $min_baseline AND t.baseline)
           OR (a.n_baseline < $min_baseline AND a.census AND a.n_all >= $min_baseline))
      AND (a.cut IS NULL OR hash(t.trace_id) < a.cut)
)"""
"""Each agent's reference sample, the ``chosen`` traces: its uniform baseline slice when that has at least
``$min_baseline`` traces, else every trace when all were kept with certainty (a census) and there are
enough; else none (no z-scores for that agent). Of an agent with more than ``$max_reference`` such traces,
a uniform sub-slice of about that many (:data:`_CUT`): the quantiles' time and memory stay bounded however
long the data dir's history, and the same traces are chosen on every run (and stay chosen as it grows).
``agent_no`` numbers the agents, cheaper to group by than their names. Only the ``traces`` table is
read."""

REFERENCE: Final = f"""{_REFERENCE_SAMPLE},
spreads AS (
    SELECT agent_no, any_value(source) AS source, count(*) AS n,
           {_spread("tokens", "tokens")}, {_spread("llm_calls", "calls")},
           {_spread("duration_ms", "duration")}, {_spread("max_depth", "depth")},
           {_spread("span_count", "spans")}
    FROM chosen GROUP BY agent_no
),
reference AS (
    SELECT a.agent, s.source, s.n, {_spread_columns("tokens")}, {_spread_columns("calls")},
           {_spread_columns("duration")}, {_spread_columns("depth")}, {_spread_columns("spans")}
    FROM spreads s JOIN agents a USING (agent_no)
)"""
"""The CTEs of :data:`_REFERENCE_SAMPLE` and ``reference``: per agent, where its sample comes from
(``source``), its size ``n`` and the robust statistics of each per-trace quantity
(:func:`_spread_columns`), which the z-scores of the classifier (:data:`SCORES_SQL`) and of the census
(:mod:`._census`) are computed against."""

SCORES_SQL: Final = f"""
CREATE OR REPLACE TABLE _scores AS
WITH {REFERENCE}
SELECT * FROM (
    SELECT t.trace_id, t.max_depth, t.span_count, t.tokens, t.llm_calls,
           t.duration_ms, r.agent, r.source, r.n AS ref_n, r.med_depth, r.med_spans, r.med_tokens,
           r.med_calls, r.med_duration,
           {_z("t.max_depth", "depth")} AS z_depth, {_z("t.span_count", "spans")} AS z_spans,
           {_z("t.tokens", "tokens")} AS z_tokens,
           {_z("t.llm_calls", "calls")} AS z_calls,
           {_z("t.duration_ms", "duration")} AS z_duration
    FROM traces_by_agent t JOIN reference r USING (agent)
    WHERE t.kept
)
WHERE z_depth >= $structure_z OR z_spans >= $structure_z
   OR z_tokens >= $cost_z OR z_calls >= $cost_z OR z_duration >= $duration_z
"""
"""The kept traces far from their agent's reference in structure or cost: what ``tool_loop`` and
``cost_blowup`` start from. The reference is, per agent, the robust statistics (median, MAD, 90th
percentile) of its reference sample (:data:`REFERENCE`). The ``traces`` table answers it all; no
span is read. A table of the main schema, not a temporary one: the classifier runs the statements that read
it on cursors of its own (see :mod:`._classify`), and a temporary table is seen by its connection alone."""

_PER_CALL_SQL: Final = f"""
CREATE OR REPLACE TABLE _per_call AS
WITH {_REFERENCE_SAMPLE},
per_call AS (
    SELECT s.agent_no, median(s.input_tokens) AS med_call_in, median(s.output_tokens) AS med_call_out,
           {_spread("s.input_tokens + s.output_tokens", "call")}
    FROM {{llm_calls}} s
    GROUP BY s.agent_no
)
SELECT a.agent, p.med_call_in, p.med_call_out, {_spread_columns("call")}
FROM per_call p JOIN agents a USING (agent_no)
"""
"""Per agent, the robust statistics of the tokens of one ``llm`` call of its reference sample, by which
``cost_blowup`` finds a trace's first over-budget call. ``{llm_calls}`` is a relation of ``(agent_no,
input_tokens, output_tokens)``, one row per ``llm`` span with input tokens of the ``chosen`` traces
(:func:`per_call_sql`). Apart from :data:`SCORES_SQL`, as both take about as long and can run at once."""

#: The chosen traces' ``llm`` spans' tokens, from the spans (of the relation ``{spans}``) or from the features
#: written with them (joined per trace, then unnested: the lists of a trace's calls are much fewer rows than
#: its calls).
LLM_CALLS_FROM_SPANS: Final = (
    "SELECT c.agent_no, s.input_tokens, s.output_tokens FROM {spans} s JOIN chosen c USING (trace_id) "
    "WHERE s.kind = 'llm' AND s.input_tokens IS NOT NULL"
)
LLM_CALLS_FROM_FEATURES: Final = (
    "SELECT c.agent_no, unnest(f.llm_input_tokens) AS input_tokens, "
    "unnest(f.llm_output_tokens) AS output_tokens FROM _features f JOIN chosen c USING (trace_id)"
)


def per_call_sql(*, features: bool, spans: str | None) -> str:
    """:data:`_PER_CALL_SQL` over the per-call tokens of the traces the features describe (``features``)
    and of the spans of the relation ``spans`` (None: of no spans)."""
    sources = [LLM_CALLS_FROM_FEATURES] if features else []
    if spans is not None:
        sources.append(LLM_CALLS_FROM_SPANS.replace("{spans}", spans))
    return _PER_CALL_SQL.replace("{llm_calls}", f"({' UNION ALL '.join(sources)})")


# -------------------------------------------------------------------------------------------- error

RESULT_KINDS: Final = observations.RESULT_KINDS
RESULT_CHARS: Final = observations.RESULT_CHARS


def _in(kinds: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{k}'" for k in kinds) + ")"


_INVALID_CALLS: Final = "'" + observations.INVALID_TOOL_CALLS.replace("'", "''") + "'"
#: Whether a span's result carries a LangChain message's parse errors of tool calls (over span columns): a
#: span of any kind the rules then read (the survey, ``_rows`` and the writers' batches keep it).
CARRIES_INVALID_CALLS: Final = f"coalesce(contains(CAST(response AS VARCHAR), {_INVALID_CALLS}), false)"

#: The text of a result that is a message object (:data:`observations.RESULT_TEXT_PATHS`), else NULL.
_MESSAGE_TEXT: Final = (
    "coalesce("
    + ", ".join(
        f"CASE WHEN json_type(response, '{path}') = 'VARCHAR' THEN response ->> '{path}' END"
        for path in observations.RESULT_TEXT_PATHS
    )
    + ")"
)

#: A span's **failure text** (over span columns): its status message, the type and message of each of its
#: ``exception`` events and the message of any other event that carries one (smolagents' step
#: ``agent.step_recovery``), the start of a boundary's result (a JSON string result unquoted; a message
#: object's ``content``, such as LangChain's ``ToolMessage``, first), and of any other span's result only
#: the LangChain parse errors of tool calls it carries (:data:`observations.INVALID_TOOL_CALLS` on). NULL
#: when all are empty. The observation rules (:mod:`tailcut.exporters.conventions.observations`) read it;
#: its Python form, for the trace signals, is :func:`observations.failure_text`.
FAILURE_TEXT: Final = f"""nullif(concat_ws(chr(10),
    status_message,
    nullif(array_to_string(list_transform(
        list_filter(coalesce(events, []),
                    lambda e: e.name = 'exception' OR e.attributes['message'] IS NOT NULL),
        lambda e: concat_ws(': ', e.attributes['exception.type'],
                            coalesce(e.attributes['exception.message'], e.attributes['message']))),
        chr(10)), ''),
    CASE WHEN kind IN {_in(RESULT_KINDS)} AND response IS NOT NULL
         THEN left(CASE WHEN json_type(response) = 'VARCHAR' THEN response ->> '$'
                        ELSE concat_ws(chr(10), {_MESSAGE_TEXT}, CAST(response AS VARCHAR)) END,
                   {RESULT_CHARS})
         WHEN {CARRIES_INVALID_CALLS}
         THEN substr(CAST(response AS VARCHAR), strpos(CAST(response AS VARCHAR), {_INVALID_CALLS}),
                     {RESULT_CHARS}) END), '')"""

#: A span's kind as the rules see it: an ``llm`` span that only prepares the request its sibling sends is
#: not a model call (:func:`tailcut.signals.is_preparation_span`, whose suffixes these are).
RULE_KIND: Final = (
    "CASE WHEN kind = 'llm' AND ("
    + " OR ".join(f"suffix(name, '{end}')" for end in PREPARATION_SPAN_SUFFIXES)
    + ") THEN 'other' ELSE kind END"
)

#: The arguments of a tool call the model wrote as broken JSON (over span columns): a tool span's request
#: that is a JSON string opening an object or array that does not parse (a framework passed the model's text
#: on as it came), quoted; NULL otherwise. When such a tool span fails, its failure is the harness refusing
#: the model's output (``arguments.not_json``, :data:`NOT_JSON_RULE`), not an ``error`` of the tool.
MALFORMED_ARGUMENTS: Final = (
    "CASE WHEN kind = 'tool' AND json_type(request) = 'VARCHAR' "
    "AND regexp_matches(request ->> '$', '^\\s*[\\[{]') AND NOT json_valid(request ->> '$') "
    f"THEN left(request ->> '$', {observations.QUOTE_CHARS}) END"
)
#: The report a failed call with :data:`MALFORMED_ARGUMENTS` makes (a structural rule, not a text pattern).
NOT_JSON_RULE: Final = "arguments.not_json"

#: The JSON Schema a tool span records for its arguments (over span columns): the one tailcut's SDK enforces
#: (``tailcut.tool.schema``), else OpenInference's ``tool.parameters`` (the tool's definition, which the
#: Agents SDK's recording does not put on the model request); and its key in the schema book (tailcut's
#: sha256, else ``sql:`` and the sha256 of the recorded text). NULL for other spans.
TOOL_SCHEMA_TEXT: Final = (
    f"CASE WHEN kind = 'tool' THEN coalesce(attributes['{attr.TOOL_SCHEMA}'], "
    f"attributes['{names.OI_TOOL_PARAMETERS}']) END"
)
TOOL_SCHEMA_KEY: Final = (
    f"CASE WHEN kind = 'tool' THEN coalesce(attributes['{attr.TOOL_SCHEMA_SHA256}'], "
    f"'sql:' || sha256(attributes['{names.OI_TOOL_PARAMETERS}'])) END"
)

#: Whether a span carries an ``exception`` event (over span columns).
HAS_EXCEPTION: Final = "coalesce(len(list_filter(events, lambda e: e.name = 'exception')) > 0, false)"


def failed_boundary(kind: str = "kind", status: str = "status_code", exception: str = "has_exception") -> str:
    """Whether a span is a **failed boundary**: a tool, retriever, embedding, memory or llm span whose status
    is ERROR or that carries an ``exception`` event: :func:`tailcut.signals.is_failed` in SQL (its kinds), so
    the ``error`` rule and the per-trace ``error_count`` signal count the same spans."""
    return f"({kind} IN {_in(FAILING_KINDS)} AND ({status} = 'ERROR' OR {exception}))"


def _observed_facts(rules: tuple[observations.ObservationRule, ...]) -> str:
    """The spans of ``_rows`` that failed or may report a failure, with their observation (a failed call whose
    arguments are broken JSON, :data:`MALFORMED_ARGUMENTS`; else the first rule of ``rules`` their failure
    text matches) and whether they are a failed boundary."""
    return f"""
facts AS (
    SELECT trace_id, span_id, parent_span_id, name, kind, boundary, occurrence, seq, start_time, end_time,
           span_index, coalesce(subtree_end, span_index) AS subtree_end, error_type, status_message, attempt,
           is_orphan, status_code, failure_text, {failed_boundary()} AS failed_boundary,
           CASE WHEN malformed_arguments IS NOT NULL AND (status_code = 'ERROR' OR has_exception)
                THEN {{'rule': '{NOT_JSON_RULE}', 'category': 'schema_violation', 'layer': 'model'::VARCHAR,
                      'kind': 'tool_exception', 'quote': malformed_arguments}}
                WHEN regexp_matches(failure_text, {_literal(observations.any_pattern(rules))})
                THEN {observations.sql_observation("failure_text", rules)} END AS observed
    FROM _rows
    WHERE status_code = 'ERROR' OR has_exception OR failure_text IS NOT NULL
)"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: The sub-kind of a failure whose text names none: the report's own, else a tool's exception, else the
#: environment's.
_DEFAULT_KIND: Final = (
    "coalesce(observed.kind, CASE WHEN kind = 'tool' THEN 'tool_exception' ELSE 'environment' END)"
)


def _error_layer(s: str, kind: str) -> str:
    """The layer of an ``error`` at span ``s`` whose failure has sub-kind ``kind`` (see the classifier's
    table): the report's own layer (an argument error: ``tool_schema``), else a boundary's world, else the
    model for an llm span, the environment for a failure the world caused, the run's code otherwise."""
    environment = _in(observations.ENVIRONMENT_KINDS)
    return (
        f"CASE WHEN {s}.observed.category = 'error' AND {s}.observed.layer IS NOT NULL "
        f"THEN {s}.observed.layer "
        f"WHEN {s}.kind IN {_in(RESULT_KINDS)} THEN 'environment' "
        f"WHEN {kind} IN {environment} THEN 'environment' "
        f"WHEN {s}.kind = 'llm' THEN 'model' "
        f"WHEN {s}.observed IS NOT NULL THEN 'environment' ELSE 'workflow' END"
    )


def error_sql(rules: tuple[observations.ObservationRule, ...] = observations.RULES) -> str:
    """The ``error`` rule over ``_rows`` with the observation rules ``rules`` (see the classifier's table).

    A trace shows an ``error`` when a boundary failed or a span's failure text reports a failure
    (``error``-category observations), whether or not the run survived it; else when its root failed. The
    finding points at the earliest (by start) of those spans that has none below it (the tool, not the
    agent step that reported it); a report on a span that is no boundary (a framework's step) points at
    the first llm span that starts after it, whose request carries it, else at the span. A failed boundary
    whose failure is the harness refusing the call (a ``schema_violation`` observation: an unexpected
    argument) is that finding's, not an ``error``. Any other failed span counts too when the run's root did
    not fail (a framework's step or agent span: every span the ``errors`` trace signal counts has a finding).
    With only failed spans that are no boundary under a failed root, the walk down its ERROR children finds
    the earliest failed span with no failed child. ``signals`` holds ``failed boundary`` or
    ``failure observation``, the sub-kind, and ``run failed`` when the root or an agent span failed."""
    return f"""
WITH RECURSIVE
{_observed_facts(rules)},
failed_runs AS (SELECT trace_id FROM _rows WHERE parent_span_id IS NULL AND status_code = 'ERROR'),
shown AS (
    SELECT *, {observations.sql_kind("failure_text", _DEFAULT_KIND)} AS sub_kind,
           count(*) OVER (PARTITION BY trace_id) AS n_shown
    FROM facts
    WHERE observed.category = 'error'
       OR (observed.category IS DISTINCT FROM 'schema_violation'
           AND (failed_boundary
                OR (status_code = 'ERROR' AND trace_id NOT IN (SELECT trace_id FROM failed_runs))))
),
first_shown AS (
    SELECT * FROM shown s
    WHERE NOT EXISTS (SELECT 1 FROM shown d WHERE d.trace_id = s.trace_id AND d.span_index > s.span_index
                                                 AND d.span_index <= s.subtree_end)
    QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY start_time, span_index, span_id) = 1
),
pointed AS (
    SELECT f.*,
           CASE WHEN f.observed IS NOT NULL AND NOT f.failed_boundary
                     AND f.kind NOT IN {_in(FAILING_KINDS)} THEN
               (SELECT arg_min(l.span_id, (l.start_time, l.span_index)) FROM _rows l
                WHERE l.trace_id = f.trace_id AND l.kind = 'llm' AND l.start_time >= f.end_time)
           END AS next_llm
    FROM first_shown f
),
failing AS (
    SELECT trace_id, span_id, parent_span_id, name, kind, boundary, occurrence, seq, start_time, span_index,
           error_type, status_message, attempt, is_orphan
    FROM _rows WHERE status_code = 'ERROR' AND trace_id NOT IN (SELECT trace_id FROM first_shown)
),
chain(trace_id, span_id, level) AS (
    SELECT trace_id, span_id, 0 FROM failing WHERE parent_span_id IS NULL AND NOT is_orphan
    UNION ALL
    SELECT f.trace_id, f.span_id, c.level + 1
    FROM failing f JOIN chain c ON f.trace_id = c.trace_id AND f.parent_span_id = c.span_id
    WHERE c.level < 256 AND NOT f.is_orphan
),
linked AS (
    SELECT f.*, c.level FROM failing f JOIN (SELECT DISTINCT trace_id, span_id, level FROM chain) c
        USING (trace_id, span_id)
),
counted AS (
    SELECT trace_id, count(*) AS failed,
           any_value(error_type) FILTER (WHERE level = 0) AS root_error
    FROM linked GROUP BY trace_id
),
causes AS (
    SELECT * FROM linked l
    WHERE NOT EXISTS (
        SELECT 1 FROM linked k WHERE k.trace_id = l.trace_id AND k.parent_span_id = l.span_id)
    QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY start_time, span_index, span_id) = 1
),
runs AS (
    SELECT trace_id, true AS failed, arg_min(error_type, span_index) AS run_error
    FROM _rows
    WHERE status_code = 'ERROR' AND NOT is_orphan AND (parent_span_id IS NULL OR kind = 'agent')
      AND trace_id IN (SELECT trace_id FROM first_shown)
    GROUP BY trace_id
),
status_text AS (
    SELECT trace_id, span_id,
           coalesce(regexp_extract(error_type, '[^.]+$'), 'error')
             || coalesce(': ' || left(split_part(regexp_replace(status_message, '^[A-Za-z_.]+: ', ''),
                                                 chr(10), 1), 100), '') AS said
    FROM _rows WHERE status_code = 'ERROR' OR has_exception
)
SELECT s.trace_id, 'error' AS category, {_SPAN}, {_error_layer("p", "p.sub_kind")} AS layer,
       CASE WHEN p.observed.category = 'error'
            THEN p.observed.rule || ': "' || p.observed.quote || '"'
            ELSE coalesce(t.said, coalesce(regexp_extract(p.error_type, '[^.]+$'), 'error')) END
         || ' at ' || coalesce(p.boundary, p.name)
         || CASE WHEN p.attempt > 1 THEN ' (attempt ' || p.attempt || ')' ELSE '' END
         || CASE WHEN p.next_llm IS NOT NULL
                 THEN '; reported to the model in ' || coalesce(s.boundary, s.name) ELSE '' END
         || CASE WHEN p.n_shown > 1 THEN '; first of ' || p.n_shown || ' failed spans' ELSE '' END
         || CASE WHEN r.failed
                 THEN '; the run failed' || coalesce(' with ' || regexp_extract(r.run_error, '[^.]+$'), '')
                 ELSE '' END AS evidence,
       CASE WHEN p.failed_boundary THEN 1.0 ELSE 0.9 END AS confidence,
       list_filter([CASE WHEN p.failed_boundary THEN 'failed boundary'
                         WHEN p.observed IS NOT NULL THEN 'failure observation' ELSE 'failed span' END,
                    p.sub_kind, CASE WHEN r.failed THEN 'run failed' END], lambda x: x IS NOT NULL)
           AS signals
FROM pointed p
LEFT JOIN status_text t ON t.trace_id = p.trace_id AND t.span_id = p.span_id
LEFT JOIN runs r ON r.trace_id = p.trace_id
JOIN _rows s ON s.trace_id = p.trace_id AND s.span_id = coalesce(p.next_llm, p.span_id)
UNION ALL BY NAME
SELECT s.trace_id, 'error' AS category, {_SPAN},
       {_layer_of_kind("s.kind")} AS layer,
       coalesce(regexp_extract(s.error_type, '[^.]+$'), 'error')
         || coalesce(': ' || left(split_part(regexp_replace(s.status_message, '^[A-Za-z_.]+: ', ''),
                                             chr(10), 1), 100), '')
         || ' at ' || coalesce(s.boundary, s.name)
         || CASE WHEN s.attempt > 1 THEN ' (attempt ' || s.attempt || ')' ELSE '' END
         || CASE WHEN s.level = 0 THEN '; the run itself failed, no failed child'
                 ELSE '; first of ' || (n.failed - 1) || ' failed span(s) under the failed root'
                      || coalesce(' (run failed with ' || regexp_extract(n.root_error, '[^.]+$') || ')', '')
            END AS evidence,
       CASE WHEN s.level = 0 THEN 0.9 ELSE 1.0 END AS confidence,
       ['root status ERROR'] AS signals
FROM causes s JOIN counted n USING (trace_id)
"""


ERROR_SQL: Final = error_sql()
"""The ``error`` rule with the built-in observation rules."""


def refused_sql(rules: tuple[observations.ObservationRule, ...] = observations.RULES) -> str:
    """The ``schema_violation`` findings of the harness refusing the model's output, over ``_rows``: a
    span whose failure text matches a ``schema_violation`` observation (a parse error fed back, an unknown
    tool, a call that broke a tool's contract) points at the llm span that produced that output: the span
    itself when the report is an llm span's, else the last to end before the report's span ended (else
    that span). Per trace, the earliest report with none below it (a step's report, not the run's output
    that repeats it)."""
    return f"""
WITH {_observed_facts(rules)},
reports AS (SELECT * FROM facts WHERE observed.category = 'schema_violation'),
refused AS (
    SELECT * FROM reports r
    WHERE NOT EXISTS (SELECT 1 FROM reports d WHERE d.trace_id = r.trace_id AND d.span_index > r.span_index
                                                   AND d.span_index <= r.subtree_end)
    QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY start_time, span_index, span_id) = 1
),
producers AS (
    SELECT r.*,
           CASE WHEN r.kind = 'llm' THEN r.span_id ELSE
               (SELECT arg_max(l.span_id, (l.end_time, l.span_index)) FROM _rows l
                WHERE l.trace_id = r.trace_id AND l.kind = 'llm' AND l.span_id <> r.span_id
                  AND l.end_time <= r.end_time) END AS producer
    FROM refused r
)
SELECT s.trace_id, 'schema_violation' AS category, {_SPAN},
       coalesce(p.observed.layer, 'tool_schema') AS layer,
       'the harness refused the model''s output: ' || p.observed.rule || ': "' || p.observed.quote || '"'
         || ' (reported at ' || coalesce(p.boundary, p.name) || ')' AS evidence,
       0.9 AS confidence, ['harness refused output', p.observed.rule] AS signals
FROM producers p JOIN _rows s ON s.trace_id = p.trace_id AND s.span_id = coalesce(p.producer, p.span_id)
"""


REFUSED_SQL: Final = refused_sql()
"""The harness-refusal ``schema_violation`` rule with the built-in observation rules."""

# ----------------------------------------------------------------------------------- schema drift (retries)

RETRIES_SQL: Final = f"""
WITH attempts AS (
    SELECT trace_id, coalesce(boundary, 'tool:' || tool_name, name) AS tool, request_sha256,
           count(*) AS n, min(coalesce(attempt, 1)) AS first_attempt,
           bool_and(status_code = 'ERROR') AS all_failed,
           count(DISTINCT coalesce(error_type, '') || '|' || coalesce(status_message, '')) AS distinct_errors,
           any_value(coalesce(regexp_extract(error_type, '[^.]+$'), 'error')) AS error_name,
           any_value(split_part(regexp_replace(coalesce(status_message, ''), '^[A-Za-z_.]+: ', ''),
                                chr(10), 1)) AS message,
           min(seq) AS first_seq, min(start_time) AS first_start
    FROM _rows
    WHERE kind = 'tool' AND request_sha256 IS NOT NULL
      AND trace_id IN (SELECT trace_id FROM _rows WHERE kind = 'tool' AND attempt > 1)
    GROUP BY ALL
    HAVING count(*) >= $drift_min_attempts AND min(coalesce(attempt, 1)) = 1 AND max(attempt) > 1
),
identical AS (
    SELECT * FROM attempts
    WHERE all_failed AND distinct_errors = 1
      AND NOT regexp_matches(lower(error_name || ' ' || message), $transient_errors)
    QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY first_start, tool) = 1
),
emitters AS (
    SELECT i.trace_id, i.tool, i.n, i.error_name, i.message, i.first_seq,
           (SELECT arg_max(l.span_id, l.start_time) FROM _rows l
            WHERE l.trace_id = i.trace_id AND l.kind = 'llm' AND l.start_time <= i.first_start) AS llm_span,
           (SELECT arg_min(t.span_id, t.start_time) FROM _rows t
            WHERE t.trace_id = i.trace_id AND t.kind = 'tool' AND t.seq = i.first_seq) AS tool_span
    FROM identical i
)
SELECT e.trace_id, 'schema_drift' AS category, {_SPAN}, 'tool_schema' AS layer,
       e.tool || ': ' || e.n || ' identical attempts failed identically (' || e.error_name
         || coalesce(': ' || left(e.message, 100), '') || ')' AS evidence,
       0.6 AS confidence, ['identical retries, identical errors'] AS signals
FROM emitters e JOIN _rows s ON s.trace_id = e.trace_id AND s.span_id = coalesce(e.llm_span, e.tool_span)
"""

# ---------------------------------------------------------------------------------------------- the roles

#: The columns a finding reports of the span it points at, as a struct.
AT_FIELDS: Final = ("span_id", "name", "kind", "boundary", "occurrence", "seq")


def at(struct: str) -> str:
    """The span columns (:data:`AT_FIELDS`) of a role's struct, as a struct; NULL when the role is."""
    fields = ", ".join(f"'{name}': {struct}.{name}" for name in AT_FIELDS)
    return f"CASE WHEN {struct} IS NOT NULL THEN {{{fields}}} END"


ROLES_SQL: Final = """
WITH r AS NOT MATERIALIZED (
    SELECT r.*, c.repeats, c.deep,
           {'span_id': span_id, 'name': name, 'kind': kind, 'boundary': boundary, 'occurrence': occurrence,
            'seq': seq} AS spot
    FROM _rows r JOIN _candidates c ON hash(r.trace_id) = c.trace
),
groups AS (
    SELECT trace_id, coalesce(tool_name, boundary, name) AS tool, request_sha256, count(*) AS n,
           arg_min(spot, (start_time, span_index)) AS first_at, min(start_time) AS first_start
    FROM r
    WHERE kind = 'tool' AND coalesce(attempt, 1) = 1 AND request_sha256 IS NOT NULL AND repeats
    GROUP BY ALL HAVING count(*) >= 2
),
repeats AS (
    SELECT trace_id,
           arg_max(struct_insert(first_at, tool := tool, n := n), (n, -epoch_ns(first_start))) AS repeat
    FROM groups GROUP BY trace_id
),
records AS (
    SELECT trace_id,
           list(struct_insert(spot, input_tokens := input_tokens, output_tokens := output_tokens)
                ORDER BY start_time, seq) AS heavy
    FROM (
        SELECT *, max(input_tokens + output_tokens) OVER (
                      PARTITION BY trace_id ORDER BY start_time, seq
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
        FROM r WHERE kind = 'llm' AND input_tokens + output_tokens IS NOT NULL
    )
    WHERE before IS NULL OR input_tokens + output_tokens > before
    GROUP BY trace_id
),
per_trace AS (
    SELECT trace_id,
           count(*) FILTER (WHERE parent_span_id IS NULL)::INTEGER AS roots,
           arg_min(struct_insert(spot, status_code := status_code, is_orphan := is_orphan,
                                 outcome := root_outcome, score := root_score,
                                 output_empty := trim(coalesce(run_output, 'x')) IN ('""', '', 'null')),
                   span_index) FILTER (WHERE parent_span_id IS NULL) AS root,
           arg_max(struct_insert(spot, finish := finish_reason, tokens := output_tokens),
                   (end_time, coalesce(seq, 0))) FILTER (WHERE kind = 'llm') AS final,
           arg_min(struct_insert(spot, problem := CASE WHEN status_code = 'ERROR' THEN 'failed'
                                                     ELSE 'returned nothing' END),
                   (start_time, coalesce(seq, 0)))
               FILTER (WHERE (kind = 'memory' AND status_code = 'ERROR')
                          OR (kind = 'retriever' AND (status_code = 'ERROR' OR empty_result))) AS implicated,
           arg_min(struct_insert(spot, depth := depth), (span_index, start_time))
               FILTER (WHERE list_contains(deep, depth)) AS deepest
    FROM r GROUP BY trace_id
)
SELECT p.trace_id, p.roots, p.root, p.final, p.implicated, p.deepest, rp.repeat, rc.heavy
FROM per_trace p LEFT JOIN repeats rp USING (trace_id) LEFT JOIN records rc USING (trace_id)
"""
"""Per trace of ``_rows``, the spans ``tool_loop``, ``cost_blowup`` and ``silent_degradation`` may point at
(its **roles**), each a struct of the span's finding columns plus what the rule judges it by:

* ``root``: its parentless span (the first by ``span_index``; ``roots`` counts them), with its status,
  outcome, score and whether its output is empty;
* ``final``: the ``llm`` span that produced the final answer (the last to end), its finish reason and
  output tokens;
* ``implicated``: the earliest memory span that failed or retriever that failed or found nothing;
* ``deepest``: the first span at the depth ``_candidates.deep`` names;
* ``repeat``: the first call of the most repeated first-attempt (tool, request hash), with its count, when
  it was made at least twice (by the traces whose ``_candidates.repeats`` is set);
* ``heavy``: the ``llm`` spans, in start order, whose tokens exceed those of every earlier one (the
  earliest span over any token threshold is one of them).

The classifier computes them from the suspects' ``_rows``, or reads them from ``trace_features``, where the
writers stored them when the trace's spans were written (:mod:`._features`); the judgements below read
only ``_roles``. ``r`` is not materialized: each of its three readers keeps only the rows and columns it
needs, cheaper than copying every span's columns once (about a third of the query's time on write).
"""

# --------------------------------------------------------------------------------------------- tool loop

LOOP_SQL: Final = f"""
WITH repeated AS (
    SELECT trace_id, repeat AS top FROM _roles WHERE repeat.n >= $loop_min_repeats
),
deep AS (
    SELECT st.trace_id, st.max_depth, st.span_count, st.source, st.ref_n, st.z_depth, st.z_spans,
           st.med_depth, st.med_spans,
           CASE WHEN ro.deepest.depth = st.max_depth THEN {at("ro.deepest")} END AS deepest
    FROM _scores st LEFT JOIN _roles ro USING (trace_id)
    WHERE st.z_depth >= $structure_z OR st.z_spans >= $structure_z
),
flagged AS (
    SELECT coalesce(rp.trace_id, d.trace_id) AS trace_id,
           {at("rp.top")} AS repeat_span, rp.top.tool AS tool, rp.top.n AS n,
           d.deepest, d.z_depth, d.z_spans, d.max_depth, d.span_count, d.med_depth, d.med_spans,
           d.source, d.ref_n
    FROM repeated rp FULL OUTER JOIN deep d USING (trace_id)
),
located AS (
    SELECT f.*, coalesce(f.repeat_span, CASE WHEN f.z_depth >= $structure_z THEN f.deepest END,
                         {at("ro.root")}) AS s
    FROM flagged f LEFT JOIN _roles ro USING (trace_id)
)
SELECT l.trace_id, 'tool_loop' AS category, {_SPAN}, 'workflow' AS layer,
       concat_ws('; ',
           CASE WHEN l.n IS NOT NULL THEN l.tool || ' called ' || l.n || ' times with the same arguments' END,
           CASE WHEN l.z_depth >= $structure_z THEN 'depth ' || l.max_depth || ' vs ' || l.source
                || ' median ' || l.med_depth || ' (z=' || round(l.z_depth, 1) || ')' END,
           CASE WHEN l.z_spans >= $structure_z THEN l.span_count || ' spans vs ' || l.source
                || ' median ' || l.med_spans || ' (z=' || round(l.z_spans, 1) || ')' END) AS evidence,
       CASE WHEN l.n IS NOT NULL THEN least(0.99, 0.6 + 0.1 * l.n) ELSE 0.6 END AS confidence,
       list_filter([CASE WHEN l.n IS NOT NULL THEN 'repeated call' END,
                    CASE WHEN l.z_depth >= $structure_z THEN 'depth' END,
                    CASE WHEN l.z_spans >= $structure_z THEN 'span count' END],
                   lambda x: x IS NOT NULL) AS signals
FROM located l WHERE l.s IS NOT NULL
"""

# ------------------------------------------------------------------------------------------- cost blowup


def _z_call(span: str) -> str:
    """The robust z-score of one ``llm`` call's tokens against its agent's per-call reference."""
    return f"({span}.input_tokens + {span}.output_tokens - med_call) / scale_call"


#: ``located`` is materialized: the span a finding points at (``s``, a coalesce of two struct CASEs over the
#: first over-budget call, itself a ``list_filter``) is read by seven expressions below, and inlined it was
#: planned and computed for each (on the benchmark's 1.8k flagged traces the statement took 16 ms, not 12.5).
COST_SQL: Final = f"""
WITH flagged AS (
    SELECT trace_id, tokens, llm_calls, duration_ms, source, ref_n, med_tokens, med_calls, med_duration,
           med_call, scale_call, med_call_in, med_call_out, agent, z_tokens, z_calls, z_duration
    FROM _scores LEFT JOIN _per_call USING (agent)
    WHERE z_tokens >= $cost_z OR z_calls >= $cost_z OR z_duration >= $duration_z
),
heavy AS (
    SELECT f.*, ro.root, list_filter(ro.heavy, lambda h: {_z_call("h")} >= $cost_z)[1] AS heavy_span
    FROM flagged f LEFT JOIN _roles ro USING (trace_id)
),
located AS MATERIALIZED (
    SELECT *, {_z_call("heavy_span")} AS z_call,
           coalesce(heavy_span.output_tokens - med_call_out > heavy_span.input_tokens - med_call_in, false)
               AS output_heavy,
           coalesce({at("heavy_span")}, {at("root")}) AS s
    FROM heavy
)
SELECT l.trace_id, 'cost_blowup' AS category, {_SPAN},
       CASE WHEN l.output_heavy THEN 'model' ELSE 'workflow' END AS layer,
       concat_ws('; ',
           CASE WHEN l.z_tokens >= $cost_z THEN format('{{:,}} tokens (z={{}})', l.tokens::BIGINT,
                                                       round(l.z_tokens, 1)) END,
           CASE WHEN l.z_calls >= $cost_z
                THEN l.llm_calls || ' LLM calls (z=' || round(l.z_calls, 1) || ')' END,
           CASE WHEN l.z_duration >= $duration_z THEN round(l.duration_ms)::BIGINT || ' ms (z='
                || round(l.z_duration, 1) || ')' END)
         || format(' vs {{}} median of {{}} traces: {{:,}} tokens, {{}} calls, {{}} ms',
                   l.source, l.ref_n, l.med_tokens::BIGINT, l.med_calls, round(l.med_duration)::BIGINT)
         || CASE WHEN l.heavy_span IS NOT NULL
                 THEN '; first over-budget call z=' || round(l.z_call, 1) ELSE '' END AS evidence,
       CASE WHEN greatest(l.z_tokens, l.z_calls, l.z_duration * $cost_z / $duration_z) >= 2 * $cost_z
            THEN 0.9 ELSE 0.7 END AS confidence,
       list_filter([CASE WHEN l.z_tokens >= $cost_z THEN 'tokens' END,
                    CASE WHEN l.z_calls >= $cost_z THEN 'llm calls' END,
                    CASE WHEN l.z_duration >= $duration_z THEN 'duration' END],
                   lambda x: x IS NOT NULL) AS signals
FROM located l WHERE l.s IS NOT NULL
"""

# ------------------------------------------------------------------------------------ silent degradation

SILENT_SQL: Final = f"""
WITH judged AS (
    SELECT ro.trace_id, ro.root, ro.final, ro.implicated,
           coalesce(t.outcome, ro.root.outcome) AS outcome,
           coalesce(t.outcome_score, ro.root.score) AS score,
           ro.final.finish AS finish_reason,
           list_contains($degraded_finish_reasons, ro.final.finish) AS cut_off,
           ro.root.output_empty OR ro.final.tokens = 0 AS empty_answer
    FROM _roles ro
    LEFT JOIN traces t USING (trace_id)
    WHERE ro.root IS NOT NULL AND NOT coalesce(ro.root.is_orphan, false) AND ro.root.status_code <> 'ERROR'
),
flagged AS (
    SELECT *, outcome = 'fail' AS failed_outcome, score < $score_threshold AS low_score
    FROM judged
    WHERE outcome = 'fail' OR score < $score_threshold OR cut_off OR empty_answer
),
located AS (
    SELECT f.*, f.implicated.kind AS memory_kind, f.implicated.problem AS memory_problem,
           coalesce({at("f.implicated")}, {at("f.final")}, {at("f.root")}) AS s
    FROM flagged f
)
SELECT f.trace_id, 'silent_degradation' AS category, {_SPAN},
       CASE WHEN f.implicated IS NOT NULL THEN 'memory'
            WHEN coalesce(f.cut_off, false) OR coalesce(f.empty_answer, false) THEN 'model'
            ELSE 'prompt' END AS layer,
       'the run completed but ' || concat_ws(', ',
           CASE WHEN f.failed_outcome THEN 'its outcome is fail' END,
           CASE WHEN coalesce(f.low_score, false) THEN 'its score ' || round(f.score, 2) || ' < '
                || $score_threshold END,
           CASE WHEN coalesce(f.cut_off, false) THEN 'the final answer stopped with ' || f.finish_reason END,
           CASE WHEN coalesce(f.empty_answer, false) THEN 'the answer is empty' END)
         || CASE WHEN f.implicated IS NOT NULL
                 THEN '; a ' || f.memory_kind || ' ' || f.memory_problem ELSE '' END AS evidence,
       CASE WHEN coalesce(f.failed_outcome, false) THEN 0.9
            WHEN coalesce(f.cut_off, false) OR coalesce(f.empty_answer, false) THEN 0.8
            ELSE 0.7 END AS confidence,
       list_filter([CASE WHEN f.failed_outcome THEN 'outcome fail' END,
                    CASE WHEN f.low_score THEN 'low score' END,
                    CASE WHEN f.cut_off THEN 'finish reason' END,
                    CASE WHEN f.empty_answer THEN 'empty answer' END],
                   lambda x: x IS NOT NULL) AS signals
FROM located f WHERE f.s IS NOT NULL
"""
