"""Failure observations: the texts in which frameworks report a failure that no span status shows.

Agent frameworks catch a failing tool, a broken tool call or code they cannot run, and hand the error to
the model as text: the tool span (when there is one) may stay OK, and the report lives in the tool's
result, in an event of the framework's step span, or in the next model request. The classifier reads those
texts (a span's status message, its ``exception`` and report events, and the result of a boundary span)
through two small tables:

* :data:`RULES`, the **reports**: a pattern that says "this failed", per framework or convention, with the
  finding it makes (``error``, or ``schema_violation`` when the harness refused the model's output) and,
  when the report itself says it, the layer it points to;
* :data:`KINDS`, the **sub-kinds**: what the failure was (``rate_limited``, ``auth``, ``not_found``...),
  found in the same text; the first that matches names it, else the report's own.

=================================  =====================  ===================================================
report (``name``)                  finding, layer         text, as the framework writes it
=================================  =====================  ===================================================
``smolagents.tool_error``          error                  ``Error when executing tool X with arguments ...``
                                                          (≤ 1.10), ``Error executing tool 'X' with ...``
``smolagents.tool_call``           schema_violation,      ``Invalid call to tool 'X' with arguments ...``,
                                   tool_schema            ``Argument X is not in the tool's input schema``
``smolagents.unknown_tool``        schema_violation,      ``Unknown tool X, should be one of: ...``; code
                                   tool_schema            calling a function ``not among the explicitly
                                                          allowed tools``
``smolagents.code_execution``      error                  ``Code execution failed at line '...' due to: ...``
``smolagents.code_parsing``        schema_violation,      ``Code parsing failed on line N due to: ...``,
                                   model                  ``Error in code parsing``, ``Your code snippet is
                                                          invalid``
``smolagents.tool_call_parsing``   schema_violation,      ``Error while parsing tool call from model
                                   model                  output``, ``The JSON blob you used is invalid``
``langchain.invalid_tool_call``    schema_violation,      ``Function X arguments: ... are not valid JSON.
                                   model                  Received JSONDecodeError ...``: LangChain's parse
                                                          error of the model's tool call, kept in the
                                                          message's ``invalid_tool_calls`` (a step's result)
``langgraph.invalid_tool``         schema_violation,      ``Error: X is not a valid tool, try one of [...]``
                                   tool_schema            (ToolNode's INVALID_TOOL_NAME_ERROR_TEMPLATE)
``langgraph.tool_error``           error                  ``Error: ...\\n Please fix your mistakes.``
                                                          (ToolNode's TOOL_CALL_ERROR_TEMPLATE)
``langchain.tool_message_error``   error                  a ``ToolMessage`` with ``"status": "error"``
``openai_agents.tool_error``       error                  ``An error occurred while running the tool. Please
                                                          try again.`` (``default_tool_error_function``)
``openai_agents.invalid_json``     schema_violation,      ``Invalid JSON input for tool X``
                                   model
``openai_agents.unknown_tool``     schema_violation,      ``Tool X not found in agent Y``, ``Tool not found:
                                   tool_schema            {'tool_name': ...}`` (its span error)
``python.arguments``               schema_violation,      ``got an unexpected keyword argument``, ``missing N
                                   tool_schema            required positional argument``, ``validation
                                                          error for``
``http.status``                    error                  ``404 Client Error``, ``503 Server Error``,
                                                          ``Error 403``, ``HTTP Error 429``, ``Error code:
                                                          429`` (the openai SDK), ``HTTP/1.1 502``, ``HTTP
                                                          429 Too Many Requests``
``provider.error_body``            error                  ``"type": "rate_limit_error"`` and the other
                                                          Anthropic error types, OpenAI's
                                                          ``"code": "rate_limit_exceeded"`` /
                                                          ``"insufficient_quota"``, ``RESOURCE_EXHAUSTED``
``timeout``                        error                  a result that starts with a timeout (``Timeout``,
                                                          ``Request timed out``), or a timeout exception name
=================================  =====================  ===================================================

The result of a step that is no boundary (a chain, agent or llm span) is read only from a LangChain
message's non-empty ``invalid_tool_calls`` on (:data:`INVALID_TOOL_CALLS`): the framework's record that it
could not parse the model's tool call, which LangGraph's prebuilt agent then ends on without a tool span.

The HTTP and timeout patterns look at the start of a result or at exception names only, so a clean result
that merely mentions "404" is not a failure. Patterns are RE2 regular expressions (DuckDB's
``regexp_matches``; no look-arounds, no back-references), matched in Python with RE2 too (``google-re2``),
so the classifier's SQL and the trace signals read a text alike; a text is searched once with the union of
the rules, and only a text that some rule matches is searched rule by rule.

Extra rules come from the collector config, ``processors.tailcut.observation_rules`` (a list of mappings
with the keys of :class:`ObservationRule`; see :func:`rules_from_config`); they are tried before the
built-in ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import re2

#: The sub-kinds a failure observation is filed under (in a finding's ``signals``).
SUB_KINDS: Final = (
    "tool_exception",
    "rate_limited",
    "auth",
    "not_found",
    "timeout",
    "service",
    "resource_exhausted",
    "environment",
)
#: The findings an observation can make.
CATEGORIES: Final = ("error", "schema_violation")
#: The layers a rule may name (else the classifier decides by the span and the sub-kind).
LAYERS: Final = ("prompt", "tool_schema", "workflow", "memory", "model", "environment")
#: Sub-kinds that point at the world the agent runs in, whatever span showed them.
ENVIRONMENT_KINDS: Final = ("rate_limited", "auth", "not_found", "timeout", "service", "resource_exhausted")


@dataclass(frozen=True)
class ObservationRule:
    """One way a framework reports a failure in text.

    Attributes
    ----------
    name : str
        Stable name, ``<framework or convention>.<what>`` (it is quoted in the finding's evidence).
    pattern : str
        Regular expression (Python ``re`` and RE2 alike) searched in the failure text.
    kind : str
        The sub-kind when :data:`KINDS` finds none in the text (one of :data:`SUB_KINDS`).
    category : str
        ``error`` or ``schema_violation`` (the harness refused the model's output).
    layer : str or None
        The layer the report itself implies (``tool_schema`` for a tool's contract, ``model`` for a
        format the model broke); None lets the classifier decide by the span and the sub-kind.
    """

    name: str
    pattern: str
    kind: str = "tool_exception"
    category: str = "error"
    layer: str | None = None

    def __post_init__(self) -> None:
        problems = check_rule(self)
        if problems:
            raise ValueError(problems)


def check_rule(rule: ObservationRule) -> str | None:
    """One line naming what is wrong with ``rule``, or None."""
    if not rule.name:
        return "an observation rule needs a name"
    if rule.kind not in SUB_KINDS:
        return f"observation rule {rule.name}: kind must be one of {', '.join(SUB_KINDS)}, got {rule.kind!r}"
    if rule.category not in CATEGORIES:
        return (
            f"observation rule {rule.name}: category must be error or schema_violation, got {rule.category!r}"
        )
    if rule.layer is not None and rule.layer not in LAYERS:
        return f"observation rule {rule.name}: layer must be one of {', '.join(LAYERS)}, got {rule.layer!r}"
    if not rule.pattern:
        return f"observation rule {rule.name}: pattern is empty"
    if re.search(r"\(\?<?[=!]|\\[1-9]", rule.pattern):
        return f"observation rule {rule.name}: look-arounds and back-references are not supported (RE2)"
    try:
        re2.compile(rule.pattern)
    except re2.error as exc:
        return f"observation rule {rule.name}: pattern is not a regular expression: {exc}"
    return None


_R = ObservationRule

#: The built-in reports, tried in order (the first that matches a text decides its finding).
RULES: Final[tuple[ObservationRule, ...]] = (
    # the harness refused the model's output
    _R(
        "smolagents.tool_call",
        r"Invalid call to tool '|Argument \S+ is not in the tool's input schema|\bAgentToolCallError\b",
        "tool_exception",
        "schema_violation",
        "tool_schema",
    ),
    _R(
        "smolagents.unknown_tool",
        r"Unknown tool \S+, should be one of|is not among the explicitly allowed tools",
        "tool_exception",
        "schema_violation",
        "tool_schema",
    ),
    _R(
        "smolagents.code_parsing",
        r"Code parsing failed on line|Error in code parsing|Your code snippet is invalid",
        "tool_exception",
        "schema_violation",
        "model",
    ),
    _R(
        "smolagents.tool_call_parsing",
        r"Error while parsing tool call from model output|The JSON blob you used is invalid",
        "tool_exception",
        "schema_violation",
        "model",
    ),
    _R(
        "langchain.invalid_tool_call",
        r"are not valid JSON\. Received JSONDecodeError",
        "tool_exception",
        "schema_violation",
        "model",
    ),
    _R(
        "langgraph.invalid_tool",
        r"is not a valid tool, try one of \[",
        "tool_exception",
        "schema_violation",
        "tool_schema",
    ),
    _R(
        "openai_agents.invalid_json",
        r"Invalid JSON input for tool",
        "tool_exception",
        "schema_violation",
        "model",
    ),
    _R(
        "openai_agents.unknown_tool",
        r"Tool \S+ not found in agent|Tool not found: \{'tool_name'",
        "tool_exception",
        "schema_violation",
        "tool_schema",
    ),
    # a call broke a tool's contract (the tool span, or the framework's report of it)
    _R(
        "python.arguments",
        r"got an unexpected keyword argument|missing \d+ required (positional|keyword-only) argument"
        r"|\d+ validation errors? for |You should call this tool with correct input arguments"
        r"|should only use this tool with a correct input",
        "tool_exception",
        "schema_violation",
        "tool_schema",
    ),
    # a tool or code failed and the framework handed that to the model
    _R("smolagents.tool_error", r"Error when executing tool \S+ with arguments|Error executing tool '"),
    _R("smolagents.code_execution", r"Code execution failed (at line|due to)"),
    _R("langgraph.tool_error", r"(\n|\\n) ?[Pp]lease fix your mistakes\."),
    _R(
        "langchain.tool_message_error",
        r"\"type\": ?\"tool\"[^}]{0,400}\"status\": ?\"error\"|"
        r"\"status\": ?\"error\"[^}]{0,400}\"type\": ?\"tool\"",
    ),
    _R("openai_agents.tool_error", r"An error occurred while running the tool\. Please try again"),
    # what the world answered, in a tool's result
    _R(
        "http.status",
        r"\b[45]\d\d (Client|Server) Error\b|^\W{0,4}(HTTP )?[Ee]rror:? ?(code:? ?)?[45]\d\d\b"
        r"|\bError code: [45]\d\d\b|^\W{0,4}HTTP(/\d(\.\d)?)? [45]\d\d\b",
        "environment",
    ),
    _R(
        "provider.error_body",
        r"\"type\": ?\"(rate_limit_error|authentication_error|permission_error|not_found_error"
        r"|overloaded_error|api_error)\"|\"code\": ?\"(rate_limit_exceeded|insufficient_quota)\""
        r"|\bRESOURCE_EXHAUSTED\b",
        "environment",
    ),
    _R(
        "timeout",
        r"^\W{0,4}(Error: ?)?((Request|Read|Connect|Connection|Gateway) )?[Tt]ime(d ?)?[ -]?out\b"
        r"|\b(TimeoutError|ReadTimeout|ConnectTimeout|TimeoutException|APITimeoutError|DeadlineExceeded)\b",
        "timeout",
    ),
)

#: The sub-kinds, tried in order over the failure text (the first that matches names it).
KINDS: Final[tuple[tuple[str, str], ...]] = (
    ("rate_limited", r"\b429\b|(?i:rate[ _-]?limit)|(?i:too many requests)|\bRateLimitError\b"),
    (
        "resource_exhausted",
        r"(?i:resource[ _-]?exhausted)|insufficient_quota|(?i:quota (exceeded|exhausted))|\bMemoryError\b"
        r"|(?i:out of memory)|No space left on device",
    ),
    (
        "auth",
        r"\b40[13]\b|(?i:unauthori[sz]ed)|Forbidden for url|(?i:access denied)|(?i:permission[ _-]?denied)"
        r"|\bPermissionError\b"
        r"|(?i:authentication[ _](error|failed))|(?i:invalid api key)|\bAuthenticationError\b",
    ),
    ("not_found", r"\b404\b|\bFileNotFoundError\b|\bNotFoundError\b|not_found_error|(?i:no such file)"),
    ("timeout", r"(?i:timed? ?out)|\bTimeoutError\b|(?i:deadline exceeded)|\bReadTimeout\b"),
    (
        "service",
        r"\b5\d\d (Server Error|Service)|\bError code: 5\d\d\b|(?i:service unavailable)|(?i:bad gateway)"
        r"|(?i:internal server error)|overloaded_error|\bAPIConnectionError\b",
    ),
)

#: Where a tool result that is a message object keeps its text, per convention: a LangChain
#: ``ToolMessage`` as OpenInference records it (``data.content``), as OpenLLMetry does
#: (``output.kwargs.content``), LangChain's own serialisation (``kwargs.content``), any
#: ``{"content": ...}`` message, and LlamaIndex's ``ToolOutput`` as OpenInference records it (what the
#: function returned: ``raw_output``). The text is searched first.
RESULT_TEXT_PATHS: Final = (
    "$.content",
    "$.data.content",
    "$.kwargs.content",
    "$.output.kwargs.content",
    "$.raw_output",
)

#: Where a LangChain message's parse errors of the model's tool calls start in a result (canonical JSON: its
#: ``invalid_tool_calls`` with at least one entry, each ``{"args", "error", "id", "name", "type"}``).
INVALID_TOOL_CALLS: Final = '"invalid_tool_calls":[{'

#: Evidence quotes at most this many characters of the text, from where the report starts.
QUOTE_CHARS: Final = 160


@dataclass(frozen=True)
class Observation:
    """What a failure text says: the rule that matched, its finding and sub-kind, and the quoted text."""

    rule: ObservationRule
    kind: str
    quote: str


def observe(text: str | None, rules: Sequence[ObservationRule] = RULES) -> Observation | None:
    """The first of ``rules`` that ``text`` matches, with its sub-kind and quote; None if none does."""
    if not text or _union(rules).search(text) is None:
        return None
    for rule in rules:
        found = _compiled(rule.pattern).search(text)
        if found is not None:
            kind = next((k for k, pattern in KINDS if _compiled(pattern).search(text)), rule.kind)
            return Observation(rule, kind, _quote(text, found.start()))
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2, as DuckDB compiles it (``\\b``, ``\\w``, ``\\d``, ``\\S``: ASCII)."""
    return re2.compile(pattern)


#: The compiled union of each rule set in use, by the set's identity (hashing a set of rules for each
#: text cost more than searching a short one); each entry holds its set, so the identity stays its own.
_UNIONS: dict[int, tuple[Sequence[ObservationRule], Any]] = {}


def _union(rules: Sequence[ObservationRule]) -> Any:
    """:func:`any_pattern` of ``rules``, compiled (a text no rule matches is searched once)."""
    found = _UNIONS.get(id(rules))
    if found is not None and found[0] is rules:
        return found[1]
    compiled = _compiled(any_pattern(tuple(rules)))
    if len(_UNIONS) >= 64:
        _UNIONS.clear()
    _UNIONS[id(rules)] = (rules, compiled)
    return compiled


def _quote(text: str, start: int) -> str:
    line = text[max(0, start) :].replace("\n", " ").strip(" ")
    return line[:QUOTE_CHARS]


def rules_key(rules: Sequence[ObservationRule]) -> str:
    """A short hash of ``rules`` (features written with other rules are not used)."""
    text = "\n".join(f"{r.name}\t{r.pattern}\t{r.kind}\t{r.category}\t{r.layer}" for r in rules)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_extra(extra: Iterable[ObservationRule]) -> tuple[ObservationRule, ...]:
    """The built-in rules preceded by ``extra`` (a configured rule named like a built-in one replaces it)."""
    added = tuple(extra)
    if not added:
        return RULES
    names = {r.name for r in added}
    return (*added, *(r for r in RULES if r.name not in names))


_CONFIG_KEYS: Final = ("name", "pattern", "kind", "category", "layer")


def rules_from_config(entries: Any, where: str = "observation_rules") -> tuple[ObservationRule, ...]:
    """The rules of a config list (``processors.tailcut.observation_rules``): each entry a mapping with
    ``name`` and ``pattern``, and optionally ``kind`` (default ``tool_exception``), ``category`` (default
    ``error``) and ``layer``. Raises ``ValueError`` naming the entry and the key that is wrong."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ValueError(f"{where}: expected a list of rules, got {type(entries).__name__}")
    rules = []
    for index, entry in enumerate(entries):
        at = f"{where}[{index}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{at}: expected a mapping with name and pattern, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"{at}: unknown key {unknown[0]!r}; allowed: {', '.join(_CONFIG_KEYS)}")
        for key in ("name", "pattern"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise ValueError(f"{at}.{key}: expected a non-empty string")
        fields = {k: entry[k] for k in _CONFIG_KEYS if k in entry and entry[k] is not None}
        try:
            rules.append(ObservationRule(**fields))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{at}: {exc}") from None
    return tuple(rules)


def rules_from_config_file(path: str) -> tuple[ObservationRule, ...]:
    """The rules of ``processors.tailcut.observation_rules`` in a collector config file, followed by the
    built-in ones (:func:`with_extra`). Raises ``ValueError`` naming the file and the key that is wrong."""
    import yaml

    try:
        with open(path, encoding="utf-8") as file:
            document = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the config: {exc}") from None
    processors = (document or {}).get("processors") if isinstance(document, Mapping) else None
    block = processors.get("tailcut") if isinstance(processors, Mapping) else None
    entries = block.get("observation_rules") if isinstance(block, Mapping) else None
    try:
        return with_extra(rules_from_config(entries, where="processors.tailcut.observation_rules"))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------------------------- as SQL


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@functools.lru_cache(maxsize=64)
def any_pattern(rules: tuple[ObservationRule, ...] = RULES) -> str:
    """One regular expression that matches exactly the texts some rule matches."""
    return "|".join(f"(?:{r.pattern})" for r in rules)


def sql_kind(text: str, default: str) -> str:
    """A DuckDB expression: the sub-kind :data:`KINDS` find in the text expression ``text``, else the SQL
    expression ``default``."""
    kinds = " ".join(
        f"WHEN regexp_matches({text}, {_literal(pattern)}) THEN {_literal(kind)}" for kind, pattern in KINDS
    )
    return f"CASE {kinds} ELSE {default} END"


def sql_observation(text: str, rules: Sequence[ObservationRule] = RULES) -> str:
    """A DuckDB expression: the observation of the text expression ``text`` as a struct ``{rule,
    category, layer, kind, quote}``, or NULL when no rule matches (the same answer as :func:`observe`)."""
    branches = []
    for r in rules:
        before = f"length(regexp_replace({text}, {_literal(f'(?s)(?:{r.pattern}).*')}, ''))"
        quote = f"left(trim(replace(substr({text}, {before} + 1), chr(10), ' ')), {QUOTE_CHARS})"
        layer = "NULL" if r.layer is None else _literal(r.layer)
        branches.append(
            f"WHEN regexp_matches({text}, {_literal(r.pattern)}) THEN {{'rule': {_literal(r.name)}, "
            f"'category': {_literal(r.category)}, 'layer': {layer}::VARCHAR, "
            f"'kind': {sql_kind(text, _literal(r.kind))}, 'quote': {quote}}}"
        )
    return f"CASE {' '.join(branches)} END"


# --- the failure text of one span, as the classifier reads it --------------------------------------------

#: The boundary kinds whose result is read for failure observations (an ``llm`` response is the model's).
RESULT_KINDS: Final = ("tool", "retriever", "embedding", "memory")
#: How much of a boundary's result is searched for a failure observation (reports sit at its start).
RESULT_CHARS: Final = 4000
#: The event attributes a failure text reads (an exception's type and message, a step's message).
EVENT_TEXT_KEYS: Final = ("exception.type", "exception.message", "message")
_OPENS_CONTAINER: Final = re.compile(r"^\s*[\[{]")
#: The keys :data:`RESULT_TEXT_PATHS` end in, as canonical JSON writes them.
_PATH_KEYS: Final = tuple(dict.fromkeys(f'"{path.rsplit(".", 1)[1]}"' for path in RESULT_TEXT_PATHS))


def _json_path(value: Any, path: str) -> Any:
    for key in path.removeprefix("$.").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


#: JSON text of a string result longer than this is decoded only at its start (:func:`_string_start`): a
#: character of the string is at most 12 characters of JSON (a surrogate pair of ``\\u`` escapes), so this
#: prefix holds a few more than the :data:`RESULT_CHARS` the failure text reads.
_STRING_PREFIX: Final = 12 * (RESULT_CHARS + 2) + 2


def _string_start(response: str) -> str | None:
    """The first :data:`RESULT_CHARS` characters of ``response``, a long JSON string, decoded from its
    start alone, as ``json.loads(response)[:RESULT_CHARS]`` gives them for valid JSON (a 40 MiB tool
    result is not decoded whole to search its first 4,000 characters). None when the start does not
    read as the opening of one long string (a string that ends early, a control character): the caller
    then decodes the whole. The one difference from the whole decode: a string whose start is valid and
    whose rest is not (hostile input) reads as its start rather than as raw text.

    >>> _string_start('"' + "a\\\\u00e9" * 20000 + '"')[:4]
    'aéaé'
    """
    prefix = response[:_STRING_PREFIX]
    for cut in range(len(prefix), len(prefix) - 13, -1):  # back off a cut escape: at most 12 characters
        try:
            text, end = json.decoder.scanstring(prefix[:cut] + '"', 1)
        except ValueError:
            continue
        # ``end`` past the appended quote: the prefix held no closing quote, so the string runs on (and
        # its start decodes to more than RESULT_CHARS characters, by the bound of _STRING_PREFIX)
        return text[:RESULT_CHARS] if end == cut + 1 else None
    return None


def _result_text(kind: str, response: str | None) -> str | None:
    """The part of a span's stored ``response`` (JSON text) its failure text holds (:func:`failure_text`)."""
    if response is None:
        return None
    if kind in RESULT_KINDS:
        if len(response) > _STRING_PREFIX and response.startswith('"'):
            start = _string_start(response)
            if start is not None:
                return start
        value = None
        # parsed only when it may be a string or hold a message's text (every path ends in one of these)
        if response.startswith('"') or any(key in response for key in _PATH_KEYS):
            try:
                value = json.loads(response)
            except (ValueError, RecursionError):
                value = None
        if isinstance(value, str):
            return value[:RESULT_CHARS]
        texts = (_json_path(value, path) for path in RESULT_TEXT_PATHS)
        message = next((text for text in texts if isinstance(text, str)), None)
        return (response if message is None else f"{message}\n{response}")[:RESULT_CHARS]
    start = response.find(INVALID_TOOL_CALLS)
    return None if start < 0 else response[start : start + RESULT_CHARS]


def failure_text(
    kind: str,
    status_message: str | None,
    events: Iterable[tuple[str, Mapping[str, Any]]],
    response: str | None,
) -> str | None:
    """A span's **failure text** from its stored columns: the Python form of the classifier's SQL
    (``tailcut.analysis._rules.FAILURE_TEXT``; ``tests/test_observations_text.py`` checks they agree).

    Its status message, each ``exception`` event's type and message and the message of any other event
    that has one, and the start of a boundary's result (a JSON string result unquoted; a message object's
    text first, :data:`RESULT_TEXT_PATHS`) or, on another span, the LangChain parse errors of tool calls
    its result carries (:data:`INVALID_TOOL_CALLS` on); lines joined by newlines, None when all are empty.
    ``events`` are ``(name, attributes)`` pairs, ``response`` the span's ``response`` column (JSON text).

    >>> failure_text("tool", None, [], '"HTTP Error 429: Too Many Requests"')
    'HTTP Error 429: Too Many Requests'
    >>> failure_text("chain", "boom", [("exception", {"exception.type": "ValueError"})], None)
    'boom\\nValueError'
    """
    parts = [status_message]
    said = []
    for name, attributes in events:
        message = attributes.get("exception.message")
        if message is None:
            message = attributes.get("message")
        if name == "exception" or attributes.get("message") is not None:
            said.append(
                ": ".join(str(p) for p in (attributes.get("exception.type"), message) if p is not None)
            )
    parts.append("\n".join(said) or None)
    parts.append(_result_text(kind, response))
    return "\n".join(p for p in parts if p is not None) or None


def _malformed_arguments(kind: str, request: str | None) -> bool:
    """Whether a tool span's ``request`` is a JSON string that opens an object or array and does not parse
    (the classifier's ``MALFORMED_ARGUMENTS``: a framework passed the model's broken text on as it came)."""
    if kind != "tool" or request is None:
        return False
    try:
        inner = json.loads(request)
    except (ValueError, RecursionError):
        return False
    if not isinstance(inner, str) or not _OPENS_CONTAINER.search(inner):
        return False
    try:
        json.loads(inner)
    except (ValueError, RecursionError):
        return True
    return False


def reported_category(
    kind: str,
    *,
    failed: bool,
    text: str | None,
    request: str | None = None,
    rules: Sequence[ObservationRule] = RULES,
) -> str | None:
    """What a span's failure text reports, as the classifier's ``error`` and refusal rules read it:
    ``schema_violation`` for a failed call whose arguments are broken JSON or a text matching a refusal
    rule, ``error`` for a text matching an ``error`` rule, None otherwise (``failed``: status ERROR or an
    ``exception`` event; ``text``: :func:`failure_text`; ``request``: the span's ``request`` column).

    The trace signals count these per trace (``tailcut.signals``), so a ``traces`` row says whether
    a trace shows an ``error`` or a refusal, kept or dropped.

    >>> reported_category("tool", failed=False, text="Error: 404 Client Error: Not Found for url")
    'error'
    >>> reported_category("tool", failed=True, text="boom", request='"{\\\\"city\\\\": "')
    'schema_violation'
    """
    if failed and _malformed_arguments(kind, request):
        return "schema_violation"
    seen = observe(text, rules)
    return None if seen is None else seen.rule.category
