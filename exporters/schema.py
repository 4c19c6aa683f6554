"""The Arrow schemas of every table tailcut writes: the one place they are defined.

``spans`` and ``traces`` are the data dir's tables (DESIGN.md section 4); ``corpus_runs`` and
``corpus_envelopes`` are a replay corpus's ``runs.parquet`` and ``envelopes.parquet`` (section 6);
``replay_results`` is what ``tailcut replay --out`` writes. Writers build their tables with these schemas
and stamp :data:`SCHEMA_VERSION` into each file's key-value metadata; readers use ``union_by_name`` so a
file written before a column existed still reads (the column is null there).

Conventions
-----------
* ``trace_id`` is 32 lowercase hex characters, ``span_id`` 16.
* Times are ``timestamp[us, tz=UTC]`` (Parquet ``TIMESTAMP(MICROS, UTC)``), the type every engine opens with
  its default settings (Spark rejects nanosecond timestamps). Where tailcut needs nanoseconds, an integer
  column of Unix nanoseconds stands beside the timestamp: ``start_time_ns`` and ``end_time_ns`` in ``spans``
  and ``traces`` (span order within a tree, durations). ``duration_ms`` and ``self_time_ms`` are computed
  from nanoseconds. Writers build rows with every time as Unix nanoseconds (:func:`from_nanoseconds`);
  :func:`upgrade` reads a file of an older schema into today's (schema 1 stored ``timestamp[ns]``).
  tailcut's own DuckDB views and polars frames present ``start_time``/``end_time`` in nanoseconds again,
  rebuilt from the twins (``tailcut.analysis._source.presented_schema``).
* Durations are float milliseconds.
* Payload columns (``request``, ``response``, ...) use Arrow's JSON extension type, so DuckDB reads them
  as ``JSON`` and ``request->>'$.model'`` works directly.
* ``attributes`` and ``resource`` are ``map<string, string>``: string values verbatim, every other value
  (numbers, booleans, arrays) as its JSON text. ``attributes['gen_ai.request.model']`` reads a key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import pyarrow as pa

#: Bumped when a column is added or changes meaning; written into every file's metadata.
SCHEMA_VERSION: Final = "2"
#: Key of the schema version in Parquet key-value metadata.
SCHEMA_VERSION_KEY: Final = b"tailcut.schema_version"
#: Key naming which table a file belongs to.
TABLE_KEY: Final = b"tailcut.table"

TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
#: Each timestamp column that keeps an integer nanosecond twin, and the twin's name.
NANOSECOND_TWINS: Final = {"start_time": "start_time_ns", "end_time": "end_time_ns"}
JSON: Final = pa.json_(pa.string())
STRING_MAP: Final = pa.map_(pa.string(), pa.string())

EVENT: Final = pa.struct(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("time", TIMESTAMP),
        pa.field("attributes", STRING_MAP),
    ]
)
LINK: Final = pa.struct(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("attributes", STRING_MAP),
    ]
)


def _f(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


SPANS: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("span_id", pa.string(), False),
        _f("parent_span_id", pa.string()),
        _f("name", pa.string(), False),
        _f("kind", pa.string(), False),  # tailcut kind: root, agent, llm, tool, ...
        _f("span_kind", pa.string(), False),  # OpenTelemetry SpanKind: INTERNAL, CLIENT, SERVER, ...
        _f("service_name", pa.string()),
        _f("start_time", TIMESTAMP, False),
        _f("end_time", TIMESTAMP, False),
        _f("start_time_ns", pa.int64(), False),  # Unix nanoseconds (schema 2)
        _f("end_time_ns", pa.int64(), False),
        _f("duration_ms", pa.float64(), False),
        _f("status_code", pa.string(), False),  # UNSET, OK, ERROR
        _f("status_message", pa.string()),
        _f("error_type", pa.string()),
        _f("model", pa.string()),
        _f("provider", pa.string()),
        _f("operation", pa.string()),
        _f("input_tokens", pa.int64()),
        _f("output_tokens", pa.int64()),
        _f("finish_reason", pa.string()),
        _f("tool_name", pa.string()),
        _f("tool_call_id", pa.string()),
        _f("agent_name", pa.string()),
        _f("boundary", pa.string()),
        _f("occurrence", pa.int32()),
        _f("seq", pa.int32()),
        _f("attempt", pa.int32()),
        _f("request", JSON),
        _f("request_sha256", pa.string()),
        _f("response", JSON),
        _f("response_sha256", pa.string()),
        _f("attributes", STRING_MAP),  # every span attribute not promoted to a column above
        _f("resource", STRING_MAP),
        _f("events", pa.list_(EVENT)),
        _f("links", pa.list_(LINK)),
        # tree columns, computed once the whole trace is known
        _f("depth", pa.int32(), False),  # 0 for a root (or an orphan)
        _f("child_count", pa.int32(), False),
        _f("span_index", pa.int32(), False),  # pre-order position in the trace, children by start time
        _f("subtree_end", pa.int32(), False),  # descendants are exactly span_index < i <= subtree_end
        _f("self_time_ms", pa.float64(), False),  # duration minus the union of the children's intervals
        # additions beyond DESIGN.md section 4
        _f("scope_name", pa.string()),  # instrumentation scope that produced the span
        _f("is_orphan", pa.bool_(), False),  # its parent never arrived; treated as a subtree root
        # cost, session and user (issue 15): the ids are copies of the span's attributes of the same name
        _f("cost_usd", pa.float64()),  # llm spans of a priced model (tailcut.exporters._pricing), else null
        _f("session_id", pa.string()),  # session.id
        _f("user_id", pa.string()),  # user.id
        _f("conversation_id", pa.string()),  # gen_ai.conversation.id
    ],
    metadata={TABLE_KEY: b"spans", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

TRACES: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("service_name", pa.string()),
        _f("root_name", pa.string()),
        _f("agent_name", pa.string()),
        _f("start_time", TIMESTAMP),
        _f("end_time", TIMESTAMP),
        _f("start_time_ns", pa.int64()),  # Unix nanoseconds (schema 2)
        _f("end_time_ns", pa.int64()),
        _f("duration_ms", pa.float64()),
        _f("span_count", pa.int32(), False),
        _f("error_count", pa.int32(), False),
        _f("llm_calls", pa.int32(), False),
        _f("tool_calls", pa.int32(), False),
        _f("input_tokens", pa.int64(), False),
        _f("output_tokens", pa.int64(), False),
        _f("max_depth", pa.int32(), False),
        _f("max_tool_repeat", pa.int32(), False),
        _f("schema_violations", pa.int32(), False),
        _f("anomaly_score", pa.float64()),
        _f("outcome", pa.string()),  # pass, fail, unknown (null when the run never said)
        _f("outcome_score", pa.float64()),
        _f("harness_revision", pa.string()),
        _f("kept", pa.bool_(), False),
        _f("policies", pa.list_(pa.string()), False),  # every policy that matched, kept or not
        _f("baseline", pa.bool_(), False),  # member of the uniform (probabilistic) slice
        _f("inclusion_probability", pa.float64(), False),  # pi: P(the design kept this trace)
        # P(the head sampler upstream passed the trace on), from the spans' tracestate ``ot=th:``; 1 when
        # none said; inclusion_probability includes it (pi = head x tail). Null in files before schema 2.
        _f("head_probability", pa.float64(), False),
        _f("decision_reason", pa.string(), False),  # one of tailcut.signals.DECISION_REASONS
        _f("decided_at", TIMESTAMP, False),
        # additions beyond DESIGN.md section 4
        _f("env_revision", pa.string()),
        _f("prompt_version", pa.string()),
        _f("has_root", pa.bool_(), False),  # a root span arrived before the decision
        _f("orphan_count", pa.int32(), False),
        _f("late_spans", pa.int32(), False),  # spans that arrived after the decision (kept: written)
        # cost, session and user (issue 15), on dropped traces' rows too
        _f("cost_usd", pa.float64()),  # sum over llm spans; null if one has no price (0 with no llm span)
        _f("session_id", pa.string()),  # the root span's session.id
        _f("user_id", pa.string()),  # the root span's user.id
        _f("conversation_id", pa.string()),  # the root span's gen_ai.conversation.id
        # whether the run's root span failed (null without a root, and in files written before it): with
        # error_count > 0 and a root that did not fail, the run survived its failed spans
        _f("root_failed", pa.bool_()),
        # what the spans' failure texts report (tailcut.signals: error_spans, refused_calls), so a row says
        # whether the trace shows an error, or a refusal of the model's output, when the failure is only in
        # a payload; null in files written before them
        _f("error_spans", pa.int32()),
        _f("refused_calls", pa.int32()),
    ],
    metadata={TABLE_KEY: b"traces", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)


CORPUS_RUNS: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("service_name", pa.string()),
        _f("root_name", pa.string()),
        _f("agent_name", pa.string()),
        _f("run_input", JSON),
        _f("harness_revision", pa.string()),
        _f("env_revision", pa.string()),
        _f("prompt_version", pa.string()),
        _f("initial_state", JSON),
        _f("outcome", pa.string()),
        _f("outcome_score", pa.float64()),
        _f("error_type", pa.string()),  # what the run raised (the root span's error.type), null if nothing
        _f("categories", pa.list_(pa.string()), False),  # failure categories found (empty: none)
        _f("category", pa.string()),  # the primary category, or null for a baseline run
        _f("inclusion_probability", pa.float64(), False),
        _f("baseline", pa.bool_(), False),
        _f("selection_reason", pa.string(), False),  # why this run is in the corpus
        _f("replayable", pa.bool_(), False),
        _f("not_replayable_reason", pa.string()),
        _f("boundary_count", pa.int32(), False),
        _f("start_time", TIMESTAMP),
        # where each field came from: the attribute of the run's parentless span that held it (null: none)
        _f("root_kind", pa.string()),  # the tailcut kind of that span (root, agent, chain, llm, ...)
        _f("run_input_source", pa.string()),  # tailcut.run.input, input.value, traceloop.entity.input, ...
        _f("run_output", JSON),  # what the run returned, where its convention records it
        _f("run_output_source", pa.string()),  # output.value, traceloop.entity.output, ...
        _f("outcome_source", pa.string()),  # tailcut.outcome
    ],
    metadata={TABLE_KEY: b"corpus_runs", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

CORPUS_ENVELOPES: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("seq", pa.int32(), False),
        _f("boundary", pa.string(), False),
        _f("occurrence", pa.int32(), False),
        _f("kind", pa.string(), False),
        _f("name", pa.string()),
        _f("span_id", pa.string(), False),
        # the seq of the boundary crossing this one ran inside (a tool that calls a retriever), null at
        # the top level: serving the outer crossing means the inner ones are not reached
        _f("parent_seq", pa.int32()),
        _f("request", JSON),
        _f("request_sha256", pa.string()),
        _f("response", JSON),
        _f("response_sha256", pa.string()),
        _f("stream_events", JSON),  # the stream's events as recorded (JSON array), null if not a stream
        _f("error_type", pa.string()),
        _f("error_message", pa.string()),
        _f("latency_ms", pa.float64(), False),
        _f("attempt", pa.int32()),
        _f("retries", pa.int32()),
        _f("model", pa.string()),
        _f("provider", pa.string()),
        _f("tool_name", pa.string()),
        # who recorded the crossing: tailcut, openinference, openllmetry or genai (see tailcut.replay)
        _f("convention", pa.string()),
    ],
    metadata={TABLE_KEY: b"corpus_envelopes", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

REPLAY_RESULTS: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("mode", pa.string(), False),  # recorded, live, cut
        _f("rerun", pa.int32(), False),  # 1-based index of the rerun of this trace
        _f("passed", pa.bool_(), False),
        _f("divergence", JSON),  # the first divergence (boundary, occurrence, seq, diff), null if none
        _f("divergence_count", pa.int32(), False),
        _f("live_crossings", pa.int32(), False),
        _f("served_crossings", pa.int32(), False),
        _f("duration_ms", pa.float64(), False),
        _f("error", pa.string()),  # what the agent raised, if it raised
        _f("check_message", pa.string()),  # what the check function said
        _f("harness_revision", pa.string()),
        _f("category", pa.string()),
        _f("baseline", pa.bool_(), False),
        _f("inclusion_probability", pa.float64(), False),
        _f("started_at", TIMESTAMP, False),
    ],
    metadata={TABLE_KEY: b"replay_results", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

#: What ``tailcut validate --out`` writes: one row per rerun, the :data:`REPLAY_RESULTS` columns (``passed``
#: is the validation's judgement of the rerun) plus which agent ran it, on which sample, cut where.
VALIDATE_RESULTS: Final = pa.schema(
    [
        *REPLAY_RESULTS,
        _f("role", pa.string(), False),  # new (the candidate agent) or baseline (the old one)
        _f("sample", pa.string(), False),  # incident or golden
        _f("agent", pa.string(), False),  # the entry point, module:function
        _f("live", pa.list_(pa.string()), False),  # the boundaries that ran live (the cut)
        _f("check_passed", pa.bool_()),  # what the check said, whatever diverged
        _f("finding_category", pa.string()),  # the incident's finding the cut came from
        _f("finding_boundary", pa.string()),
        _f("finding_layer", pa.string()),
        _f("verdict", pa.string(), False),  # the trace's: resolved, not resolved, broken, fixed, ...
    ],
    metadata={TABLE_KEY: b"validate_results", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

#: ``DATA/pieces``: the LLM request pieces of each trace, one row per distinct piece (``tailcut._pieces``).
PIECES: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("sha256", pa.string(), False),  # of the text's UTF-8 bytes
        _f("text", pa.large_string(), False),
    ],
    metadata={TABLE_KEY: b"pieces", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

#: The span columns a finding reports, in the role structs of ``trace_features``.
_SPOT: Final = [
    _f("span_id", pa.string()),
    _f("name", pa.string()),
    _f("kind", pa.string()),
    _f("boundary", pa.string()),
    _f("occurrence", pa.int32()),
    _f("seq", pa.int32()),
]

#: The roles of ``trace_features`` and their fields beyond the span's (``tailcut.analysis._rules.ROLES_SQL``).
ROLE_FIELDS: Final = {
    "root": [
        *_SPOT,
        _f("status_code", pa.string()),
        _f("is_orphan", pa.bool_()),
        _f("outcome", pa.string()),
        _f("score", pa.float64()),
        _f("output_empty", pa.bool_()),
    ],
    "final": [*_SPOT, _f("finish", pa.string()), _f("tokens", pa.int64())],
    "implicated": [*_SPOT, _f("problem", pa.string())],
    "deepest": [*_SPOT, _f("depth", pa.int32())],
    "repeat": [*_SPOT, _f("tool", pa.string()), _f("n", pa.int64())],
}

#: ``DATA/trace_features``: what the classifier needs of each trace, computed from its spans when they are
#: written (``tailcut.analysis._features``), so classifying never reads the spans' payloads. One row per
#: trace per write: a trace whose spans were written in several batches has several rows (the classifier
#: then reads the spans instead).
TRACE_FEATURES: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("start_time", TIMESTAMP, False),  # the earliest start among the spans written (the partition day)
        _f("span_count", pa.int32(), False),  # spans written in this batch
        _f("rules", pa.string(), False),  # version and thresholds the features were computed with
        # tokens of each llm span with input tokens (the reference's per-call statistics)
        _f("llm_input_tokens", pa.list_(pa.int64())),
        _f("llm_output_tokens", pa.list_(pa.int64())),
        # the roles (tailcut.analysis._rules.ROLES_SQL): spans the rules may point at, one column per field
        # (``root_span_id``...: flat columns read faster than structs), null when the trace has no such span
        _f("roots", pa.int32(), False),
        *(_f(f"{role}_{field.name}", field.type) for role, fields in ROLE_FIELDS.items() for field in fields),
        _f(
            "heavy",
            pa.list_(pa.struct([*_SPOT, _f("input_tokens", pa.int64()), _f("output_tokens", pa.int64())])),
        ),
        _f("checks", pa.int32(), False),  # rows of trace_checks written with this one (0 or 1)
    ],
    metadata={TABLE_KEY: b"trace_features", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

#: A finding's columns but its trace: the span it points at, its layer, evidence, confidence and
#: ``signals`` (which rules fired, and an error's sub-kind).
_FINDING_FIELDS: Final = (
    ("category", pa.string()),
    ("span_id", pa.string()),
    ("span_name", pa.string()),
    ("span_kind", pa.string()),
    ("boundary", pa.string()),
    ("occurrence", pa.int32()),
    ("seq", pa.int32()),
    ("layer", pa.string()),
    ("evidence", pa.string()),
    ("confidence", pa.float64()),
    ("signals", pa.list_(pa.string())),
)

#: ``DATA/trace_checks``: the lists of ``trace_features``, kept apart so that reading the features never
#: decodes them (they are rare: a trace's findings and open tool calls, and on one row per batch the tool
#: lists shown and schemas enforced). One row per trace that has any, written with its features row.
TRACE_CHECKS: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        _f("start_time", TIMESTAMP, False),  # as in trace_features (the partition day)
        # findings that need only the trace (error, schema_violation, schema_drift of identical retries,
        # tool_loop of repeated calls, silent_degradation by the root's outcome)
        _f(
            "local_findings",
            pa.list_(pa.struct([_f(name, kind) for name, kind in _FINDING_FIELDS])),
        ),
        # tool calls whose drift check needs every recorded schema version (they break the schema checked)
        _f(
            "calls",
            pa.list_(
                pa.struct(
                    [
                        *_SPOT,
                        _f("tools_key", pa.string()),
                        _f("tool", pa.string()),
                        _f("arguments", pa.string()),
                        _f("call_index", pa.int64()),
                        _f("enforced_sha", pa.string()),
                        # jsonschema's message (null: valid) against each version of the tool's schema here
                        _f(
                            "verdicts",
                            pa.list_(pa.struct([_f("sha", pa.string()), _f("problem", pa.string())])),
                        ),
                    ]
                )
            ),
        ),
        # the tool lists shown and the tool schemas enforced in the batch (on its first trace's row)
        _f(
            "tool_lists",
            pa.list_(pa.struct([_f("key", pa.string()), _f("first", pa.string()), _f("tools", pa.string())])),
        ),
        _f(
            "enforced",
            pa.list_(pa.struct([_f("tool", pa.string()), _f("sha", pa.string()), _f("schema", pa.string())])),
        ),
    ],
    metadata={TABLE_KEY: b"trace_checks", SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode()},
)

#: ``DATA/findings/findings.parquet``: one row per (trace, category) that ``tailcut classify`` finds, pointing
#: at the first span that shows it (``tailcut.analysis._classify`` tabulates the rules).
#: The span columns of a finding may be null (a finding of the whole trace); the others never are.
_FINDING_NULLABLE: Final = ("span_id", "span_name", "span_kind", "boundary", "occurrence", "seq")
FINDINGS: Final = pa.schema(
    [
        _f("trace_id", pa.string(), False),
        *(_f(name, kind, name in _FINDING_NULLABLE) for name, kind in _FINDING_FIELDS),
        # the run survived it: its root did not fail and its outcome is not fail (issue 27)
        _f("recovered", pa.bool_(), False),
    ]
)

TABLES: Final = {
    "spans": SPANS,
    "traces": TRACES,
    "pieces": PIECES,
    "trace_features": TRACE_FEATURES,
    "trace_checks": TRACE_CHECKS,
    "corpus_runs": CORPUS_RUNS,
    "corpus_envelopes": CORPUS_ENVELOPES,
    "replay_results": REPLAY_RESULTS,
    "validate_results": VALIDATE_RESULTS,
}


def timestamps(nanoseconds: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Unix nanoseconds (int64) as :data:`TIMESTAMP` values, truncated to the microsecond."""
    return nanoseconds.cast(pa.int64()).cast(pa.timestamp("ns", tz="UTC")).cast(TIMESTAMP, safe=False)


def _convert(field: pa.Field, column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_timestamp(field.type) and pa.types.is_integer(column.type):
        return timestamps(column)
    return column.cast(field.type, safe=False)


def nanosecond_fields(name: str) -> pa.Schema:
    """The schema writers build rows in: table ``name`` with every timestamp as int64 Unix nanoseconds
    and no nanosecond twins (:func:`from_nanoseconds` derives them)."""
    twins = set(NANOSECOND_TWINS.values())
    return pa.schema(
        [
            field.with_type(pa.int64()) if pa.types.is_timestamp(field.type) else field
            for field in TABLES[name]
            if field.name not in twins
        ]
    )


def from_nanoseconds(name: str, columns: Mapping[str, pa.Array | pa.ChunkedArray]) -> pa.Table:
    """Table ``name`` from its columns with every time as Unix nanoseconds (int64) or already typed.

    The nanosecond twins (:data:`NANOSECOND_TWINS`) are taken from the integer times when not given.
    """
    table_schema = TABLES[name]
    given = dict(columns)
    for time_name, twin in NANOSECOND_TWINS.items():
        if twin in table_schema.names and twin not in given and time_name in given:
            given[twin] = given[time_name].cast(pa.int64())
    arrays = [_convert(field, given[field.name]) for field in table_schema]
    return pa.Table.from_arrays(arrays, schema=table_schema)


#: Values a row dict may leave out (:func:`from_rows`): no head sampler upstream said anything.
ROW_DEFAULTS: Final = {"head_probability": 1.0}


def from_rows(name: str, rows: Sequence[Mapping[str, object]]) -> pa.Table:
    """Table ``name`` from row dicts with every time as Unix nanoseconds (see :func:`nanosecond_fields`);
    a key of :data:`ROW_DEFAULTS` the table has may be left out."""
    defaults = {key: value for key, value in ROW_DEFAULTS.items() if key in TABLES[name].names}
    given = pa.Table.from_pylist([{**defaults, **row} for row in rows], schema=nanosecond_fields(name))
    return from_nanoseconds(name, dict(zip(given.column_names, given.columns, strict=True)))


def upgrade(name: str, table: pa.Table) -> pa.Table:
    """Rows read from a file of any schema version, in today's schema ``name`` (columns in its order).

    A column the file lacks is null (a nanosecond twin comes from its timestamp); older timestamps are
    cast (schema 1 stored nanoseconds); columns today's schema lacks are dropped, except the hive
    partition column ``dt`` which follows.
    """
    table_schema = TABLES[name]
    arrays = []
    for field in table_schema:
        if field.name in table.column_names:
            arrays.append(_convert(field, table.column(field.name)))
            continue
        source = next((t for t, twin in NANOSECOND_TWINS.items() if twin == field.name), None)
        if source is not None and source in table.column_names:
            arrays.append(table.column(source).cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64()))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    fields = [field.with_nullable(True) for field in table_schema]
    if "dt" in table.column_names:
        arrays.append(table.column("dt"))
        fields.append(table.schema.field("dt"))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table_schema.metadata))
