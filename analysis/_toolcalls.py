"""Tool calls checked against tool schemas: the jsonschema half of ``schema_violation`` and ``schema_drift``.

DuckDB does the reading: which tool definitions each LLM request sent (grouped by their hash, so each
distinct tool list is parsed once), every recorded version of each tool's schema (the schemas shown to
the model in requests, and the schema the tool enforces, which the tailcut SDK records on tool spans as
``tailcut.tool.schema``), and the tool calls of the LLM responses that need checking, in each provider's
shape:

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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex

if TYPE_CHECKING:
    from tailcut.analysis._dataset import Dataset

#: Call item types that are tool calls, across the four shapes (Chat's items carry ``function``).
_CALL_TYPES: Final = ("function", "function_call", "tool_use", "tool_call")

#: Distinct tool lists sent to models, one representative span each.
TOOL_LISTS_SQL: Final = f"""
WITH keyed AS (
    SELECT trace_id, span_id, attributes['{attr.TOOLS_SHA256}'] AS tools_key
    FROM spans WHERE kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NOT NULL
    UNION ALL
    -- spans other instrumentations wrote carry no hash of their tools: hash the list itself (read only here)
    SELECT trace_id, span_id, 'sql:' || sha256(json_extract(request, '$.tools')::VARCHAR)
    FROM spans
    WHERE kind = 'llm' AND attributes['{attr.TOOLS_SHA256}'] IS NULL
      AND json_extract(request, '$.tools') IS NOT NULL
)
SELECT tools_key, arg_min(trace_id, trace_id || span_id) AS trace_id,
       arg_min(span_id, trace_id || span_id) AS span_id
FROM keyed GROUP BY tools_key
"""

#: The tools of the representative spans (read only for those few spans).
TOOLS_OF_SQL: Final = """
SELECT trace_id, span_id, json_extract(request, '$.tools')::VARCHAR AS tools
FROM spans WHERE kind = 'llm' AND trace_id IN (SELECT unnest(?)) AND span_id IN (SELECT unnest(?))
"""

#: Every schema a tool enforces, as recorded on its spans (the tailcut SDK writes the full schema).
ENFORCED_SQL: Final = f"""
SELECT tool_name, attributes['{attr.TOOL_SCHEMA_SHA256}'] AS sha,
       any_value(attributes['{attr.TOOL_SCHEMA}']) AS schema
FROM spans
WHERE kind = 'tool' AND tool_name IS NOT NULL AND attributes['{attr.TOOL_SCHEMA_SHA256}'] IS NOT NULL
GROUP BY ALL
"""

#: The tool calls of the LLM spans that need checking (``_suspect_keys`` holds the tool lists to recheck).
CALLS_SQL: Final = f"""
WITH candidates AS (
    SELECT trace_id, span_id, name, kind, boundary, occurrence, seq, start_time, response,
           attributes['{attr.TOOLS_SHA256}'] AS tools_key
    FROM spans
    WHERE kind = 'llm' AND response IS NOT NULL AND attributes['{attr.TOOLS_SHA256}'] IS NOT NULL
      AND (NOT $trust
           OR coalesce(TRY_CAST(attributes['{attr.SCHEMA_VIOLATIONS}'] AS INTEGER), 1) > 0
           OR attributes['{attr.TOOLS_SHA256}'] IN (SELECT tools_key FROM _suspect_keys))
    UNION ALL
    SELECT trace_id, span_id, name, kind, boundary, occurrence, seq, start_time, response,
           'sql:' || sha256(json_extract(request, '$.tools')::VARCHAR)
    FROM spans
    WHERE kind = 'llm' AND response IS NOT NULL AND attributes['{attr.TOOLS_SHA256}'] IS NULL
),
items AS (
    SELECT * EXCLUDE (response), unnest(list_concat(
        coalesce(json_extract(response, '$.choices[*].message.tool_calls[*]'), []),
        coalesce(json_extract(response, '$.output[*]'), []),
        coalesce(json_extract(response, '$.content[*]'), []),
        coalesce(json_extract(response, '$.messages[*].parts[*]'), []))) AS item
    FROM candidates
),
calls AS (
    SELECT * EXCLUDE (item),
           coalesce(item ->> '$.function.name', item ->> '$.name') AS tool,
           coalesce(item -> '$.function.arguments', item -> '$.arguments', item -> '$.input')
               AS raw_arguments,
           coalesce(item ->> '$.call_id', item ->> '$.id') AS call_id,
           row_number() OVER (PARTITION BY trace_id, span_id) AS call_index
    FROM items
    WHERE (item ->> '$.type') IN {_CALL_TYPES}
       OR ((item ->> '$.type') IS NULL AND (item -> '$.function') IS NOT NULL)
),
answered AS (
    SELECT trace_id, tool_call_id, tool_name, attributes['{attr.TOOL_SCHEMA_SHA256}'] AS sha
    FROM spans WHERE kind = 'tool' AND coalesce(attempt, 1) = 1
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

    def checkable(self, sha: str) -> bool:
        """Whether version ``sha`` is known and is a valid JSON Schema."""
        return self._validator(sha) is not None

    def _validator(self, sha: str) -> Any:
        if sha not in self._validators:
            from jsonschema import SchemaError
            from jsonschema.validators import validator_for

            schema = next((v[sha] for v in self.versions.values() if sha in v), None)
            validator = None
            if isinstance(schema, Mapping):
                cls = validator_for(schema)
                try:
                    cls.check_schema(schema)
                    validator = cls(schema)
                except SchemaError:
                    validator = None
            self._validators[sha] = validator
        return self._validators[sha]


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


def load_schema_book(dataset: Dataset) -> SchemaBook:
    """Read every tool list sent and every enforced tool schema of the data dir into a :class:`SchemaBook`."""
    book = SchemaBook()
    lists = dataset.connection.execute(TOOL_LISTS_SQL).fetchall()
    if lists:
        keys = {(trace, span): key for key, trace, span in lists}
        rows = dataset.connection.execute(
            TOOLS_OF_SQL, [[t for t, _ in keys], [s for _, s in keys]]
        ).fetchall()
        for trace, span, tools_text in rows:
            key = keys.get((trace, span))
            if key is None or key in book.shown:
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
    for tool, sha, schema_text in dataset.connection.execute(ENFORCED_SQL).fetchall():
        book.enforced.setdefault(tool, set()).add(sha)
        if schema_text:
            try:
                book.versions.setdefault(tool, {})[sha] = orjson.loads(schema_text)
            except orjson.JSONDecodeError:
                continue
    return book


def check_calls(dataset: Dataset, book: SchemaBook, *, trust_recorded_counts: bool) -> list[CallProblem]:
    """The schema violations and argument-level schema drifts of every tool call that needs checking."""
    connection = dataset.connection
    connection.execute("CREATE OR REPLACE TEMP TABLE _suspect_keys (tools_key VARCHAR)")
    suspects = book.suspect_keys()
    if suspects:
        connection.executemany("INSERT INTO _suspect_keys VALUES (?)", [[k] for k in suspects])
    query = CALLS_SQL.replace("$trust", "true" if trust_recorded_counts else "false")
    cursor = connection.execute(query)
    columns = [d[0] for d in cursor.description]
    problems: list[CallProblem] = []
    while batch := cursor.fetchmany(4096):
        for values in batch:
            problems.extend(_check(book, dict(zip(columns, values, strict=True))))
    return problems


def _check(book: SchemaBook, call: Mapping[str, Any]) -> Iterator[CallProblem]:
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
        arguments = orjson.loads(text) if text and text.strip() else {}
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
