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
               SDK passes ``extra_headers`` that its instrumentor leaves out)
openllmetry,   ``model``; each message's ``role``, its text, its tool calls (``id``, ``name``, arguments
genai          as JSON values) and the tool call it answers with its result; the tool *names*, when the
               record lists tools (the GenAI instrumentor does not); and the parameters the record holds
               (``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop_sequences``,
               ``frequency_penalty``, ``presence_penalty``, ``choice_count``). A parameter the live
               request adds that the record lacks is not compared: these conventions leave out what was
               not given, and some leave out more.
=============  ============================================================================================

What a convention does not record cannot be compared; where a recorded field is rendered in a way the
table does not undo, ``--relax BOUNDARY`` matches that boundary on its occurrence alone. Tool crossings
are compared as recorded (their arguments), like tailcut's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tailcut.canonical import canonicalize, loads
from tailcut.exporters.conventions.corpus import GENAI, OPENINFERENCE, OPENLLMETRY

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


def _joined(texts: list[Any]) -> str | None:
    strings = [t for t in texts if isinstance(t, str)]
    return "".join(strings) if strings else None


def _reduced_message(role: Any, text: str | None, calls: list[Any], answers: Any, result: Any) -> dict:
    message: dict[str, Any] = {"role": role, "text": text or None}
    if calls:
        message["tool_calls"] = calls
    if answers is not None:
        message["tool_call_id"] = answers
        message["result"] = _value(result)
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
    """

    def __init__(self, convention: str, recorded: list[str | None]) -> None:
        self.convention = convention
        self._tools = False
        self._parameters: set[str] = set()
        #: Transport options some OpenInference record holds (those are compared).
        self._options: set[str] = set()
        for text in recorded:
            if convention == OPENINFERENCE and text is not None:
                decoded = loads(text)
                if isinstance(decoded, Mapping):
                    self._options.update(_TRANSPORT_OPTIONS.intersection(decoded))
            request = self._decoded(text)
            if request is not None:
                self._tools = self._tools or isinstance(request.get("tools"), list)
                if isinstance(request.get("parameters"), Mapping):
                    self._parameters.update(request["parameters"])

    def _decoded(self, text: str | None) -> Mapping[str, Any] | None:
        if text is None or self.convention not in REDUCED:
            return None
        decoded = loads(text)
        return decoded if isinstance(decoded, Mapping) else None

    def recorded(self, text: str | None) -> tuple[str | None, str | None]:
        """A recorded request as compared: canonical JSON and its sha256 (``(text, None)``: as is)."""
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
        if self.convention == OPENINFERENCE and text is not None:
            return self._without_transport_options(text)
        body = self._decoded(text)
        if body is None:
            return text, None
        given = {_BODY_PARAMETERS[k]: v for k, v in body.items() if k in _BODY_PARAMETERS and v is not None}
        if isinstance(given.get("stop_sequences"), str):
            given["stop_sequences"] = [given["stop_sequences"]]
        return _reduced(
            body.get("model"),
            [_from_body(m) for m in body.get("messages") or () if isinstance(m, Mapping)],
            _tool_names(body.get("tools")) if self._tools else [],
            {k: v for k, v in given.items() if k in self._parameters},
        )

    def _without_transport_options(self, text: str) -> tuple[str | None, str | None]:
        body = loads(text)
        if not isinstance(body, Mapping) or not (_TRANSPORT_OPTIONS - self._options).intersection(body):
            return text, None
        return canonicalize(
            {k: v for k, v in body.items() if k in self._options or k not in _TRANSPORT_OPTIONS}
        )
