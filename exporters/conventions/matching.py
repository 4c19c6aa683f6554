"""What a match compares of a crossing another instrumentation recorded.

tailcut records the request an SDK sends; other conventions record part of it, in their own shape. So a
live ``llm:openai.chat`` request is matched against a third-party record by comparing the two in the
shape and with the fields that convention records (the record's request is rebuilt at export, see
:mod:`tailcut.exporters.conventions.corpus`):

=============  ============================================================================================
convention     a match compares
=============  ============================================================================================
tailcut        the whole request body as sent (its sha256)
openinference  the whole request as ``input.value`` holds it: the keyword arguments of ``create()``
               (model, messages, tools, every parameter given), which is the body the SDK sends; the
               SDK's transport options (``extra_headers``, ``extra_query``, ``extra_body``,
               ``timeout``) a live call passes and no record holds are not compared (the OpenAI Agents
               SDK passes ``extra_headers`` that its instrumentor leaves out). A framework's record
               rebuilt into the request (:mod:`.frameworks`: LangChain, smolagents, a message list)
               is compared by what it holds: each message's ``role``, text, tool calls (``id``,
               ``name``, arguments as JSON values) and the tool call it answers with its result; and
               every other field the boundary's records hold (``model``, ``tools``, ``stop``,
               ``temperature``, ...), as recorded. A field the live request adds that no record holds
               (smolagents' ``tool_choice``, the Agents SDK's ``tools``) is not compared.
openllmetry,   ``model``; each message's ``role``, its text, its tool calls (``id``, ``name``, arguments
genai          as JSON values) and the tool call it answers with its result; the tool *names*, when the
               record lists tools (the GenAI instrumentor does not); and the parameters the record holds
               (``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop_sequences``,
               ``frequency_penalty``, ``presence_penalty``, ``choice_count``). A parameter the live
               request adds that the record lacks is not compared: these conventions leave out what was
               not given, and some leave out more.
=============  ============================================================================================

What a convention does not record cannot be compared, and :meth:`Comparison.not_compared` names it for
the replay's report (``$.tool_choice``, ``$.messages[*].name``); where a recorded field is rendered in a
way the table does not undo, ``--relax BOUNDARY`` matches that boundary on its occurrence alone.

Tool crossings are compared as recorded (their arguments), like tailcut's own, except that OpenInference
records a call of one argument as that argument's value alone (``"Paris"`` for ``get_weather(city=
"Paris")``: its ``input.value`` of a one-key mapping is the value): :class:`ToolArguments` names it by the
tool's one parameter in the schema the run's model requests define, else by the live call's one argument.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tailcut.canonical import canonicalize, loads
from tailcut.exporters.conventions.corpus import GENAI, OPENINFERENCE, OPENLLMETRY
from tailcut.exporters.conventions.frameworks import FRAMEWORKS, REBUILT_KEY

#: Conventions whose llm records are compared in the reduced form below.
REDUCED: Final = frozenset({OPENLLMETRY, GENAI})
#: ``create()`` options that shape the HTTP call, not the request the model gets.
_TRANSPORT_OPTIONS: Final = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
#: Chat Completions body field -> the GenAI parameter name a rebuilt record uses.
_BODY_PARAMETERS: Final = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_completion_tokens": "max_tokens",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "stop": "stop_sequences",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "n": "choice_count",
}


def _value(text: Any) -> Any:
    """A JSON value carried as text (tool arguments, tool results) decoded; other values unchanged."""
    if isinstance(text, str):
        try:
            return loads(text)
        except ValueError:
            return text
    return text


#: Longest tool result read as a Python literal (``ast.literal_eval`` is linear, but not free).
_LITERAL_LIMIT: Final = 1 << 16


def _result(text: Any) -> Any:
    """A tool result as the value it renders: JSON text decoded, or a container's Python ``repr``.

    A framework hands the model ``str()`` of what a tool returned (the OpenAI Agents SDK), while
    OpenInference records that return value as JSON; so ``{'celsius': 21}`` and ``{"celsius": 21}``
    are the same result. Only a ``{...}``/``[...]`` literal is read (``ast.literal_eval``: no code runs).

    >>> _result("{'city': 'Paris', 'celsius': 21}") == _result('{"celsius": 21, "city": "Paris"}')
    True
    >>> _result("[1, 2") , _result("sunny")
    ('[1, 2', 'sunny')
    """
    value = _value(text)
    if not (isinstance(value, str) and len(value) <= _LITERAL_LIMIT and value[:1] in "{[" and value):
        return value
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value
    try:
        return loads(canonicalize(literal)[0])
    except (TypeError, ValueError):  # a set, bytes or complex: not a value JSON has
        return value


def _joined(texts: list[Any]) -> str | None:
    strings = [t for t in texts if isinstance(t, str)]
    return "".join(strings) if strings else None


def _reduced_message(role: Any, text: str | None, calls: list[Any], answers: Any, result: Any) -> dict:
    message: dict[str, Any] = {"role": role, "text": text or None}
    if calls:
        message["tool_calls"] = calls
    if answers is not None:
        message["tool_call_id"] = answers
        message["result"] = _result(result)
    return message


def _from_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """A GenAI ``{"role", "parts"}`` message, reduced."""
    parts = [p for p in message.get("parts") or () if isinstance(p, Mapping)]
    calls = [
        {"id": p.get("id"), "name": p.get("name"), "arguments": _value(p.get("arguments"))}
        for p in parts
        if p.get("type") == "tool_call"
    ]
    answer = next((p for p in parts if p.get("type") == "tool_call_response"), None)
    text = _joined([p.get("content") for p in parts if p.get("type") == "text"])
    return _reduced_message(
        message.get("role"),
        text,
        calls,
        answer.get("id") if answer else None,
        answer.get("response") if answer else None,
    )


def _from_body(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI Chat Completions message, reduced."""
    content = message.get("content")
    if isinstance(content, list):
        text = _joined([b.get("text") for b in content if isinstance(b, Mapping)])
    else:
        text = content if isinstance(content, str) else None
    calls = [
        {
            "id": call.get("id"),
            "name": (call.get("function") or {}).get("name"),
            "arguments": _value((call.get("function") or {}).get("arguments")),
        }
        for call in message.get("tool_calls") or ()
        if isinstance(call, Mapping)
    ]
    answers = message.get("tool_call_id")
    return _reduced_message(
        message.get("role"), None if answers else text, calls, answers, text if answers else None
    )


def _tool_names(tools: Any) -> list[str]:
    """The names of the tools a request defines (GenAI ``{"name"}`` or OpenAI ``{"function": {"name"}}``)."""
    names = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            names.append(str(name))
    return sorted(names)


def _reduced(
    model: Any, messages: list[dict[str, Any]], tools: list[str], parameters: Mapping[str, Any]
) -> tuple[str, str]:
    reduced: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        reduced["tools"] = tools
    if parameters:
        reduced["parameters"] = dict(parameters)
    return canonicalize(reduced)


#: The message fields a reduced or rebuilt comparison reads (the others are not compared).
_MESSAGE_FIELDS: Final = frozenset({"role", "content", "tool_calls", "tool_call_id"})


def _message_gaps(messages: Any) -> set[str]:
    """What of the live messages a reduced comparison leaves out: other fields, and non-text parts."""
    gaps: set[str] = set()
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        gaps.update(f"$.messages[*].{k}" for k in message if k not in _MESSAGE_FIELDS)
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, Mapping) and block.get("type") not in (None, "text"):
                gaps.add(f"$.messages[*].content[*] ({block.get('type')} parts)")
    return gaps


class Comparison:
    """How live requests at one boundary are compared with records of another convention.

    Built from every recorded request of the boundary, so the live side keeps exactly the kinds of field
    the records hold: tool names when some record lists tools, and the parameters some record holds.

    Examples
    --------
    >>> part = '{"type": "text", "content": "hi"}'
    >>> record = '{"model": "m", "messages": [{"role": "user", "parts": [%s]}]}' % part
    >>> compare = Comparison("genai", [record])
    >>> live = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 1}'
    >>> compare.recorded(record) == compare.live(live)
    True
    >>> compare.not_compared(live)
    ('$.seed',)
    """

    def __init__(self, convention: str, recorded: list[str | None]) -> None:
        self.convention = convention
        self._tools = False
        self._parameters: set[str] = set()
        #: Transport options some OpenInference record holds (those are compared).
        self._options: set[str] = set()
        #: The framework format of rebuilt OpenInference records, and the fields they hold.
        self.rebuilt_from: str | None = None
        self._held: set[str] = set()
        for text in recorded:
            if convention == OPENINFERENCE and text is not None:
                decoded = loads(text)
                if isinstance(decoded, Mapping):
                    self._options.update(_TRANSPORT_OPTIONS.intersection(decoded))
                    if REBUILT_KEY in decoded:
                        self.rebuilt_from = str(decoded[REBUILT_KEY])
                        self._held.update(k for k in decoded if k != REBUILT_KEY)
            request = self._decoded(text)
            if request is not None:
                self._tools = self._tools or isinstance(request.get("tools"), list)
                if isinstance(request.get("parameters"), Mapping):
                    self._parameters.update(request["parameters"])

    @property
    def source(self) -> str:
        """Who made the records, for a report: ``smolagents under OpenInference``, ``OpenLLMetry``."""
        names = {OPENINFERENCE: "OpenInference", OPENLLMETRY: "OpenLLMetry", GENAI: "the GenAI instrumentor"}
        name = names.get(self.convention, self.convention)
        if self.rebuilt_from is None:
            return name
        return f"{FRAMEWORKS.get(self.rebuilt_from, self.rebuilt_from)} under {name}"

    def _decoded(self, text: str | None) -> Mapping[str, Any] | None:
        if text is None or self.convention not in REDUCED:
            return None
        decoded = loads(text)
        return decoded if isinstance(decoded, Mapping) else None

    def recorded(self, text: str | None) -> tuple[str | None, str | None]:
        """A recorded request as compared: canonical JSON and its sha256 (``(text, None)``: as is)."""
        if self.rebuilt_from is not None and text is not None:
            record = loads(text)
            if isinstance(record, Mapping):
                return self._rebuilt_form(record, set(record) - {REBUILT_KEY})
        request = self._decoded(text)
        if request is None:
            return text, None
        messages = [_from_parts(m) for m in request.get("messages") or () if isinstance(m, Mapping)]
        instructions = request.get("system_instructions")
        if isinstance(instructions, list):
            system = _joined([p.get("content") for p in instructions if isinstance(p, Mapping)])
            messages.insert(0, _reduced_message("system", system, [], None, None))
        parameters = request.get("parameters")
        return _reduced(
            request.get("model"),
            messages,
            _tool_names(request.get("tools")),
            parameters if isinstance(parameters, Mapping) else {},
        )

    def live(self, text: str | None) -> tuple[str | None, str | None]:
        """The live Chat Completions body as compared with this boundary's records."""
        if self.rebuilt_from is not None and text is not None:
            body = loads(text)
            if isinstance(body, Mapping):
                return self._rebuilt_form(body, self._held)
        if self.convention == OPENINFERENCE and text is not None:
            return self._without_transport_options(text)
        body = self._decoded(text)
        if body is None:
            return text, None
        given = self._given(body)
        return _reduced(
            body.get("model"),
            [_from_body(m) for m in body.get("messages") or () if isinstance(m, Mapping)],
            _tool_names(body.get("tools")) if self._tools else [],
            {k: v for k, v in given.items() if k in self._parameters},
        )

    def not_compared(self, text: str | None) -> tuple[str, ...]:
        """The parts of a live request :meth:`live` leaves out (JSON paths, sorted): what no record holds.

        >>> Comparison("openinference", ['{"messages": [], "model": "m"}']).not_compared(
        ...     '{"messages": [], "model": "m", "extra_headers": {"X": "1"}}')
        ('$.extra_headers',)
        """
        body = loads(text) if text is not None else None
        if not isinstance(body, Mapping):
            return ()
        if self.rebuilt_from is not None:
            gaps = {f"$.{k}" for k in body if k not in self._held} | _message_gaps(body.get("messages"))
        elif self.convention == OPENINFERENCE:
            gaps = {f"$.{k}" for k in body if k in _TRANSPORT_OPTIONS and k not in self._options}
        elif self.convention in REDUCED:
            compared = {"model", "messages"} | ({"tools"} if self._tools else set())
            compared |= {k for k, name in _BODY_PARAMETERS.items() if name in self._parameters}
            gaps = {f"$.{k}" for k in body if k not in compared} | _message_gaps(body.get("messages"))
            if self._tools and "tools" in body:
                gaps.add("$.tools[*] (but their names)")
        else:
            gaps = set()
        return tuple(sorted(gaps))

    def _rebuilt_form(self, request: Mapping[str, Any], held: set[str]) -> tuple[str, str]:
        """A request as a rebuilt record is compared: reduced messages, every other held field as is."""
        compared: dict[str, Any] = {k: request[k] for k in held if k in request and k != "messages"}
        compared["messages"] = [
            _from_body(m) for m in request.get("messages") or () if isinstance(m, Mapping)
        ]
        return canonicalize(compared)

    @staticmethod
    def _given(body: Mapping[str, Any]) -> dict[str, Any]:
        given = {_BODY_PARAMETERS[k]: v for k, v in body.items() if k in _BODY_PARAMETERS and v is not None}
        if isinstance(given.get("stop_sequences"), str):
            given["stop_sequences"] = [given["stop_sequences"]]
        return given

    def _without_transport_options(self, text: str) -> tuple[str | None, str | None]:
        body = loads(text)
        if not isinstance(body, Mapping) or not (_TRANSPORT_OPTIONS - self._options).intersection(body):
            return text, None
        return canonicalize(
            {k: v for k, v in body.items() if k in self._options or k not in _TRANSPORT_OPTIONS}
        )


def tool_parameters(requests: Iterable[str | None]) -> dict[str, tuple[str, ...]]:
    """Tool name -> its parameter names, from the tool definitions of recorded llm requests.

    Reads Chat Completions tools (``{"type": "function", "function": {"name", "parameters"}}``) and the
    GenAI shape ingest rebuilds (``{"name", "parameters"}``); a JSON schema's ``properties`` are the names.

    >>> tool_parameters(['{"tools": [{"type": "function", "function": {"name": "get_weather",'
    ...                  ' "parameters": {"type": "object", "properties": {"city": {}}}}}]}'])
    {'get_weather': ('city',)}
    """
    found: dict[str, tuple[str, ...]] = {}
    for text in requests:
        request = loads(text) if text is not None else None
        tools = request.get("tools") if isinstance(request, Mapping) else None
        for tool in tools if isinstance(tools, list) else ():
            if not isinstance(tool, Mapping):
                continue
            function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
            schema = function.get("parameters")
            properties = schema.get("properties") if isinstance(schema, Mapping) else None
            if isinstance(function.get("name"), str) and isinstance(properties, Mapping):
                found.setdefault(function["name"], tuple(properties))
    return found


class ToolArguments:
    """How live arguments of one tool are compared with OpenInference records of it.

    A record is the call's arguments by name, except a call of one argument, which OpenInference records
    as the argument's value alone. With ``parameters`` (the tool's schema, when the run's model requests
    define it) naming exactly one, a record that is not already ``{name: ...}`` is keyed by it; without,
    a bare record (not a JSON object) is compared with the value of a live call of one argument.

    >>> compare = ToolArguments(['"Paris"'], ("city",))
    >>> compare.recorded('"Paris"')[0], compare.live('{"city": "Paris"}')[1] is None
    ('{"city":"Paris"}', True)
    >>> by_live_name = ToolArguments(['"Paris"'], None)
    >>> by_live_name.recorded('"Paris"')[1] is None, by_live_name.live('{"city": "Paris"}')[0]
    (True, '"Paris"')
    """

    source: Final = "OpenInference"

    def __init__(self, recorded: Sequence[str | None], parameters: Sequence[str] | None) -> None:
        self._name = parameters[0] if parameters is not None and len(parameters) == 1 else None
        self._bare = any(text is not None and not isinstance(loads(text), Mapping) for text in recorded)

    def recorded(self, text: str | None) -> tuple[str | None, str | None]:
        """A record keyed by the tool's one parameter (``(text, None)``: compared as is)."""
        if self._name is None or text is None:
            return text, None
        value = loads(text)
        if isinstance(value, Mapping) and set(value) == {self._name}:
            return text, None
        return canonicalize({self._name: value})

    def live(self, text: str | None) -> tuple[str | None, str | None]:
        """A live call of one argument as its value, when the records are bare and no schema names it."""
        if self._name is not None or not self._bare or text is None:
            return text, None
        arguments = loads(text)
        if isinstance(arguments, Mapping) and len(arguments) == 1:
            return canonicalize(next(iter(arguments.values())))
        return text, None

    def not_compared(self, text: str | None) -> tuple[str, ...]:
        """Nothing: a tool's arguments are compared whole."""
        return ()
