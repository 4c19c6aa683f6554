"""Tool calls checked against tool schemas: the jsonschema half of ``schema_violation`` and ``schema_drift``.

DuckDB does the reading: which tool definitions each LLM request sent (grouped by their hash, so each
distinct tool list is parsed once: the survey of :mod:`._candidates` finds the lists, and the request of
one span per list is read here), every recorded version of each tool's schema (the schemas shown to the
model in requests, and the schema the tool enforces, which the tailcut SDK records on tool spans as
``tailcut.tool.schema``), and, from the suspect spans in ``_rows``, the tool calls of the LLM responses
that need checking, in each provider's shape:

==========================  ===========================================================================
response shape              where the calls are
==========================  ===========================================================================
OpenAI Chat Completions     ``choices[].message.tool_calls[]``: ``function.name``, ``function.arguments``
                            (JSON text), ``id``
OpenAI Responses            ``output[]`` items of type ``function_call``: ``name``, ``arguments`` (JSON
                            text), ``call_id``
Anthropic Messages          ``content[]`` blocks of type ``tool_use``: ``name``, ``input`` (object), ``id``
OTel GenAI messages         ``messages[].parts[]`` of type ``tool_call``: ``name``, ``arguments``, ``id``
                            (third-party spans, as the exporters normalise them)
==========================  ===========================================================================

Python validates only what needs it. An LLM span the tailcut SDK recorded carries
``tailcut.schema_violations``, counted at record time with the same jsonschema rules against the same
request; when it is 0 and every tool schema the request showed is the one its tool enforces, the span's
calls cannot violate or drift, and they are not read (``Thresholds.trust_recorded_counts``). Results
are cached per (schema, arguments), since agents repeat both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset

#: Call item types that are tool calls, across the four shapes (Chat's items carry ``function``).
_CALL_TYPES: Final = ("function", "function_call", "tool_use", "tool_call")

#: The tools a representative span of each tool list sent, given (list key, trace) pairs from the survey
#: (``{spans}``: the relation the survey read).
REPRESENTATIVES_SQL: Final = f"""
SELECT s.tools_key, arg_min(s.tools, s.trace_id || s.span_id) AS tools, min(s.trace_id || s.span_id) AS first
FROM (
    SELECT trace_id, span_id, attributes['{attr.TOOLS_SHA256}'] AS tools_key,
           json_extract(request, '$.tools')::VARCHAR AS tools
    FROM {{spans}} WHERE kind = 'llm' AND trace_id IN (SELECT unnest($traces))
) s
JOIN (SELECT unnest($keys) AS tools_key, unnest($traces) AS trace_id) r USING (tools_key, trace_id)
GROUP BY s.tools_key
"""

#: Tool lists of spans other instrumentations wrote (no hash of their tools: the list itself is hashed).
THIRD_PARTY_LISTS_SQL: Final = """
SELECT 'sql:' || sha256(request_tools) AS tools_key, arg_min(request_tools, trace_id || span_id) AS tools,
       min(trace_id || span_id) AS first
FROM _rows WHERE kind = 'llm' AND tools_key IS NULL AND request_tools IS NOT NULL
GROUP BY 1
"""

#: The tool calls of the LLM spans that need checking, from ``_rows`` (see :mod:`._candidates`).
CALLS_SQL: Final = f"""
WITH candidates AS (
    SELECT trace_id, span_id, name, kind, boundary, occurrence, seq, start_time, response, tools_key
    FROM _rows
    WHERE kind = 'llm' AND response IS NOT NULL AND tools_key IS NOT NULL
      AND (NOT $trust_recorded_counts OR coalesce(recorded_violations, 1) > 0
           OR list_contains($suspect_keys, tools_key))
    UNION ALL
    SELECT trace_id, span_id, name, kind, boundary, occurrence, seq, start_time, response,
           'sql:' || sha256(request_tools)
    FROM _rows
    WHERE kind = 'llm' AND response IS NOT NULL AND tools_key IS NULL
),
listed AS (
    SELECT * EXCLUDE (response), list_concat(
        coalesce(json_extract(response, '$.choices[*].message.tool_calls[*]'), []),
        coalesce(json_extract(response, '$.output[*]'), []),
        coalesce(json_extract(response, '$.content[*]'), []),
        coalesce(json_extract(response, '$.messages[*].parts[*]'), [])) AS items
    FROM candidates
),
items AS (
    SELECT * EXCLUDE (items), unnest(items) AS item, generate_subscripts(items, 1) AS position FROM listed
),
calls AS (
    SELECT * EXCLUDE (item, position),
           coalesce(item ->> '$.function.name', item ->> '$.name') AS tool,
           coalesce(item -> '$.function.arguments', item -> '$.arguments', item -> '$.input')
               AS raw_arguments,
           coalesce(item ->> '$.call_id', item ->> '$.id') AS call_id,
           row_number() OVER (PARTITION BY trace_id, span_id ORDER BY position) AS call_index
    FROM items
    WHERE (item ->> '$.type') IN {_CALL_TYPES}
       OR ((item ->> '$.type') IS NULL AND (item -> '$.function') IS NOT NULL)
),
answered AS (
    SELECT trace_id, tool_call_id, tool_name, schema_sha AS sha
    FROM _rows WHERE kind = 'tool' AND coalesce(attempt, 1) = 1
      AND trace_id IN (SELECT trace_id FROM candidates)
)
SELECT c.* EXCLUDE (raw_arguments),
       CASE WHEN json_type(c.raw_arguments) = 'VARCHAR' THEN c.raw_arguments ->> '$'
            ELSE c.raw_arguments::VARCHAR END AS arguments,
       coalesce(
           (SELECT any_value(a.sha) FROM answered a
            WHERE a.trace_id = c.trace_id AND a.tool_call_id = c.call_id),
           (SELECT any_value(a.sha) FROM answered a
            WHERE a.trace_id = c.trace_id AND a.tool_name = c.tool)) AS enforced_sha
FROM calls c
ORDER BY c.trace_id, c.seq, c.call_index
"""


@dataclass(frozen=True)
class CallProblem:
    """One tool call that breaks a schema.

    Attributes
    ----------
    category : str
        ``schema_violation`` or ``schema_drift``.
    layer : str
        The harness layer it points to.
    evidence : str
        One line: the tool, the rule broken, jsonschema's message.
    confidence : float
        How sure the rule is (see the classifier's table).
    """

    trace_id: str
    span_id: str
    name: str
    kind: str
    boundary: str | None
    occurrence: int | None
    seq: int | None
    category: str
    layer: str
    evidence: str
    confidence: float


def problems_schema() -> pa.Schema:
    """The Arrow schema of a table of :class:`CallProblem` rows (one column per attribute)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("trace_id", pa.string()),
            ("span_id", pa.string()),
            ("name", pa.string()),
            ("kind", pa.string()),
            ("boundary", pa.string()),
            ("occurrence", pa.int32()),
            ("seq", pa.int32()),
            ("category", pa.string()),
            ("layer", pa.string()),
            ("evidence", pa.string()),
            ("confidence", pa.float64()),
        ]
    )


def problems_table(problems: Iterable[CallProblem]) -> pa.Table:
    """``problems`` as rows of :func:`problems_schema`, in their order."""
    import pyarrow as pa

    schema = problems_schema()
    found = list(problems)
    return pa.table([pa.array([getattr(p, f.name) for p in found], f.type) for f in schema], schema=schema)


@dataclass
class SchemaBook:
    """Every recorded version of every tool's schema, and which versions each tool list showed."""

    #: tools_key -> tool name -> sha of the schema shown
    shown: dict[str, dict[str, str]] = field(default_factory=dict)
    #: tool name -> sha -> schema (shown or enforced)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: tool name -> shas its spans enforced
    enforced: dict[str, set[str]] = field(default_factory=dict)
    #: tools_key -> tool names listed more than once with different schemas
    ambiguous: dict[str, set[str]] = field(default_factory=dict)
    _validators: dict[str, Any] = field(default_factory=dict)
    _results: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def suspect_keys(self) -> list[str]:
        """Tool lists that showed some tool a schema other than one its spans enforce."""
        return [
            key
            for key, tools in self.shown.items()
            if any(self.enforced.get(tool) and sha not in self.enforced[tool] for tool, sha in tools.items())
        ]

    def problem(self, sha: str, arguments: Any, text: str) -> str | None:
        """jsonschema's message for ``arguments`` against version ``sha`` (None: valid or uncheckable)."""
        key = (sha, text)
        if key not in self._results:
            validator = self._validator(sha)
            error = None
            if validator is not None:
                from jsonschema.exceptions import best_match

                found = best_match(validator.iter_errors(arguments))
                error = None if found is None else f"{found.json_path}: {found.message}"
            self._results[key] = error
        return self._results[key]

    def verdicts(self, tool: str, text: str) -> list[tuple[str, str | None]]:
        """``(sha, problem)`` of ``text``, a call's arguments, against every checkable version of ``tool``
        (empty when the arguments are not JSON)."""
        try:
            arguments = _arguments(text)
        except orjson.JSONDecodeError:
            return []
        versions = [sha for sha in self.versions.get(tool, {}) if self.checkable(sha)]
        return [(sha, self.problem(sha, arguments, text)) for sha in versions]

    def remember(self, text: str, verdicts: Iterable[tuple[str, str | None]]) -> None:
        """Take the :meth:`verdicts` of ``text`` found earlier (by the writer) instead of validating again."""
        for sha, problem in verdicts:
            self._results[(sha, text)] = problem

    def checkable(self, sha: str) -> bool:
        """Whether version ``sha`` is known and is a valid JSON Schema."""
        return self._validator(sha) is not None

    def _validator(self, sha: str) -> Any:
        if sha not in self._validators:
            schema = next((v[sha] for v in self.versions.values() if sha in v), None)
            self._validators[sha] = _compiled(schema) if isinstance(schema, Mapping) else None
        return self._validators[sha]


#: Compiled validators by the schema's text (keys sorted), shared by every book: checking and compiling a
#: schema costs more than validating the calls against it, and a fleet's few schemas recur in every
#: classification. Keyed by content, not by the recorded sha256, which a span states and may misstate.
_COMPILED: dict[bytes, Any] = {}
_COMPILED_MAX: Final = 4096


def _compiled(schema: Mapping[str, Any]) -> Any:
    """A validator of ``schema``, or None when it is not a valid JSON Schema."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a schema only ever comes from JSON text): not cached
        key = None
    if key is not None and key in _COMPILED:
        return _COMPILED[key]
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
        validator = cls(schema)
    except SchemaError:
        validator = None
    if key is not None:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        _COMPILED[key] = validator
    return validator


def _arguments(text: str | None) -> Any:
    """A call's arguments from their JSON text (none: an empty object); raises on text that is not JSON."""
    return orjson.loads(text) if text and text.strip() else {}


def _tool_entries(tools: Any) -> Iterator[tuple[str, Any]]:
    """``(name, parameters schema)`` of a request's tool list, in any of the providers' shapes."""
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function") if isinstance(tool.get("function"), Mapping) else {}
        name = function.get("name") or tool.get("name")
        schema = next(
            (
                s
                for s in (
                    function.get("parameters"),
                    tool.get("parameters"),
                    tool.get("input_schema"),
                    tool.get("json_schema"),
                )
                if s is not None
            ),
            None,
        )
        if isinstance(name, str):
            yield name, schema


def _sha(schema: Any) -> str:
    return sha256_hex(canonical_json(schema))


def representative_lists(
    dataset: Dataset, survey: pa.Table, *, spans: str = "spans"
) -> list[tuple[str, str, str | None]]:
    """``(first span, list key, tools JSON)`` of every tool list the survey found, from one span showing it.

    The key is the hash of the list, so any span that showed it will do; the first span (by trace and span
    id) of the first trace the survey saw showing it is read, which keeps the choice independent of file
    order and reads the requests of only a few traces.
    """
    rows = [
        (key, trace)
        for facet, key, trace in zip(
            survey["facet"].to_pylist(),
            survey["key"].to_pylist(),
            survey["first_trace"].to_pylist(),
            strict=True,
        )
        if facet == "list" and key is not None
    ]
    if not rows:
        return []
    found = dataset.connection.execute(
        REPRESENTATIVES_SQL.replace("{spans}", spans),
        {"keys": [k for k, _ in rows], "traces": [t for _, t in rows]},
    ).fetchall()
    return [(first, key, tools) for key, tools, first in found]


def third_party_lists(connection: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str | None]]:
    """``(first span, list key, tools JSON)`` of the tool lists in spans other instrumentations wrote."""
    found = connection.execute(THIRD_PARTY_LISTS_SQL).fetchall()
    return [(first, key, tools) for key, tools, first in found]


def enforced_schemas(survey: pa.Table) -> list[tuple[str, str, str | None]]:
    """``(tool, sha, schema JSON)`` of every schema a tool's spans enforced, from the survey."""
    return sorted(
        (tool, sha, schema)
        for facet, tool, sha, schema in zip(
            survey["facet"].to_pylist(),
            survey["tool_name"].to_pylist(),
            survey["key"].to_pylist(),
            survey["schema"].to_pylist(),
            strict=True,
        )
        if facet == "enforced" and tool is not None and sha is not None
    )


def load_schema_book(
    lists: Iterable[tuple[str, str, str | None]], enforced: Iterable[tuple[str, str, str | None]]
) -> SchemaBook:
    """A :class:`SchemaBook` of the tool lists (in the order of their first span) and the enforced schemas."""
    book = SchemaBook()
    for _, key, tools_text in sorted(lists):
        if key in book.shown:
            continue
        tools = orjson.loads(tools_text) if tools_text else []
        shown: dict[str, str] = {}
        for name, schema in _tool_entries(tools):
            sha = _sha(schema)
            if name in shown and shown[name] != sha:
                book.ambiguous.setdefault(key, set()).add(name)
            shown[name] = sha
            book.versions.setdefault(name, {})[sha] = schema
        book.shown[key] = shown
    for tool, sha, schema_text in enforced:
        book.enforced.setdefault(tool, set()).add(sha)
        if schema_text:
            try:
                book.versions.setdefault(tool, {})[sha] = orjson.loads(schema_text)
            except orjson.JSONDecodeError:
                continue
    return book


def calls(connection: duckdb.DuckDBPyConnection, parameters: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The tool calls of :data:`CALLS_SQL` over ``_rows`` (``trust_recorded_counts``, ``suspect_keys``)."""
    cursor = connection.execute(
        CALLS_SQL, {k: parameters[k] for k in ("trust_recorded_counts", "suspect_keys")}
    )
    columns = [d[0] for d in cursor.description]
    while batch := cursor.fetchmany(4096):
        for values in batch:
            yield dict(zip(columns, values, strict=True))


def check_calls(dataset: Dataset, book: SchemaBook, *, trust_recorded_counts: bool) -> pa.Table:
    """The schema violations and argument-level schema drifts of every tool call that needs checking, as a
    table of :func:`problems_schema` in the order of the calls."""
    parameters = {"trust_recorded_counts": trust_recorded_counts, "suspect_keys": book.suspect_keys()}
    return problems_table(
        problem for call in calls(dataset.connection, parameters) for problem in check(book, call)
    )


def check(book: SchemaBook, call: Mapping[str, Any]) -> Iterator[CallProblem]:
    """The problems of one tool call (see the classifier's rule table)."""
    tool, text = call["tool"], call["arguments"]
    shown_tools = book.shown.get(call["tools_key"] or "", {})
    where = {k: call[k] for k in ("trace_id", "span_id", "name", "kind", "boundary", "occurrence", "seq")}

    def found(category: str, layer: str, evidence: str, confidence: float) -> CallProblem:
        return CallProblem(**where, category=category, layer=layer, evidence=evidence, confidence=confidence)

    if shown_tools and tool not in shown_tools:
        yield found(
            "schema_violation", "tool_schema", f"called tool {tool!r}, which the request did not offer", 0.9
        )
        return
    try:
        arguments = _arguments(text)
    except orjson.JSONDecodeError:
        yield found("schema_violation", "model", f"{tool}: arguments are not JSON: {text[:60]!r}", 0.95)
        return
    shown = shown_tools.get(tool)
    if shown is not None:
        problem = book.problem(shown, arguments, text)
        if problem is not None:
            ambiguous = tool in book.ambiguous.get(call["tools_key"] or "", set())
            layer = "tool_schema" if ambiguous else "prompt"
            yield found("schema_violation", layer, f"{tool}: {problem} (schema sent in this request)", 0.95)
    reference = call["enforced_sha"] or shown
    failure = None if reference is None else book.problem(reference, arguments, text)
    if failure is None:
        return
    followed = next(
        (
            sha
            for sha in book.versions.get(tool, {})
            if sha != reference and book.checkable(sha) and book.problem(sha, arguments, text) is None
        ),
        None,
    )
    if followed is not None:
        what = "the schema shown to the model" if followed == shown else "an earlier recorded schema"
        enforced = "enforced" if call["enforced_sha"] else "current"
        yield found(
            "schema_drift",
            "tool_schema",
            f"{tool}: arguments follow {what} ({followed[:8]}) but fail the {enforced} one "
            f"({reference[:8]}): {failure}",
            0.8,
        )
    elif not shown_tools:
        # No tool list was recorded with the request (OpenInference's Agents SDK spans): the schema the
        # tool's own span records is the contract the call is checked against.
        yield found("schema_violation", "tool_schema", f"{tool}: {failure} (schema the tool records)", 0.9)
