"""The scenario script: what the scripted model says, turn by turn, in each kind of run, and its label.

A scenario is a list of abstract turns (:class:`Call` a tool, :class:`Answer` the user, :class:`Raw` text
the framework has to parse) that each framework's *style* renders into the
:class:`~tailcut.testing.ScriptedReply` that framework expects: a native tool call, a smolagents
``final_answer`` call, or a ``CodeAgent`` code block. The scenario is the label: :attr:`Scenario.labels`
says which finding a correct analysis makes, at which span (a tool boundary and its occurrence, or the Nth
model call of the run), with which layer and sub-kind; a clean run has none.

A run's question names its framework and scenario (``[langgraph:clean] ...``), so one
:class:`ScenarioModel` serves every framework and run, recorded or replayed: it reads the scenario from
the request, and the turn from whether the request is the run's first one.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tailcut.testing import ReceivedRequest, ScriptedReply, ToolCall

Style = Literal["tools", "smolagents_tools", "code"]
"""How a framework wants the model's turns: native tool calls (``tools``), native tool calls with the
answer as a ``final_answer`` call (smolagents ``ToolCallingAgent``), or Python code blocks (``CodeAgent``)."""


@dataclass(frozen=True)
class Call:
    """The model calls ``tool`` with ``arguments`` (a dict, or raw text that may not be JSON)."""

    tool: str
    arguments: Mapping[str, Any] | str


@dataclass(frozen=True)
class Answer:
    """The model answers the user with ``text`` (ends the run)."""

    text: str


@dataclass(frozen=True)
class Raw:
    """The model replies with ``text`` that is neither a tool call nor, for a parsing framework, an answer."""

    text: str


Turn = Call | Answer | Raw


@dataclass(frozen=True)
class Label:
    """A finding the scenario injects, and where it points.

    Parameters
    ----------
    category
        The finding's category (``error``, ``schema_violation``, ``tool_loop``).
    span
        ``tool:<name>`` for a tool boundary, ``llm`` for a model call.
    occurrence
        1-based: which crossing of the tool in the run, or which model call of the run.
    signal
        The finding's sub-kind (``tool_exception``, ``rate_limited``, ``auth``, ``not_found``), if any.
    layer
        The harness layer the finding points to.
    recovered
        The run did not fail despite it.
    """

    category: str
    span: str
    occurrence: int = 1
    signal: str | None = None
    layer: str | None = None
    recovered: bool = True


@dataclass(frozen=True)
class Scenario:
    """One kind of run: the model's turns, the tools' behaviour, and the label."""

    name: str
    turns: tuple[Turn, ...]
    labels: tuple[Label, ...] = ()
    prompt: str = "What is the weather in Paris?"
    #: The framework hands a tool's exception back to the model (else the run fails on it).
    catch_tool_errors: bool = True
    notes: str = ""

    def question(self, framework: str) -> str:
        """The run's question: names the framework and the scenario, then asks."""
        return f"[{framework}:{self.name}] {self.prompt}"


_PARIS = Call("get_weather", {"city": "Paris"})
_SUNNY = Answer("It is sunny in Paris, 21 degrees.")
_ORDER = "What is the status of order {order}?"


def _order_scenario(name: str, order: str, signal: str, answer: str, **options: Any) -> Scenario:
    where = options.pop("label", {})
    label = Label("error", "tool:lookup_order", signal=signal, layer="environment", **where)
    return Scenario(
        name,
        (Call("lookup_order", {"order_id": order}), Answer(answer)),
        (label,),
        prompt=_ORDER.format(order=order),
        **options,
    )


#: Every scenario, by name.
SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario("clean", (_PARIS, _SUNNY)),
        _order_scenario("tool_raises_caught", "A-boom", "tool_exception", "The order service is down."),
        _order_scenario(
            "tool_raises_fatal",
            "B-boom",
            "tool_exception",
            "The order service is down.",
            catch_tool_errors=False,
            label={"recovered": False},
        ),
        _order_scenario("tool_http_429", "A-429", "rate_limited", "The orders API is rate limited."),
        _order_scenario("tool_http_403", "A-403", "auth", "I may not read that order."),
        _order_scenario("tool_http_404", "A-404", "not_found", "There is no order A-404."),
        Scenario(
            "unexpected_argument",
            (Call("get_weather", {"city": "Paris", "units": "kelvin"}), _PARIS, _SUNNY),
            (Label("schema_violation", "llm", 1, layer="tool_schema"),),
        ),
        Scenario(
            "invalid_json_arguments",
            (Call("get_weather", '{"city": "Paris"'), _PARIS, _SUNNY),
            (Label("schema_violation", "llm", 1, layer="model"),),
        ),
        Scenario(
            "unknown_tool",
            (Call("get_forecast", {"city": "Paris"}), _PARIS, _SUNNY),
            (Label("schema_violation", "llm", 1, layer="tool_schema"),),
        ),
        Scenario(
            "unparseable_output",
            (Raw("I should look up the weather in Paris first."), _PARIS, _SUNNY),
            (Label("schema_violation", "llm", 1, layer="model"),),
            notes="only frameworks that parse the model's text (smolagents) refuse it",
        ),
        Scenario(
            "repeated_call",
            (_PARIS, _PARIS, _PARIS, _SUNNY),
            (Label("tool_loop", "tool:get_weather", 1, layer="prompt"),),
        ),
    )
}

#: The tag every run's question starts with.
TAG = re.compile(r"\[(?P<framework>[a-z_]+):(?P<scenario>[a-z_0-9]+)\]")


def parse_tag(text: str) -> tuple[str, Scenario]:
    """The (framework, scenario) a run's question (or any text containing it) names."""
    match = TAG.search(text)
    if match is None or match["scenario"] not in SCENARIOS:
        raise ValueError(f"no [framework:scenario] tag in {text[:200]!r}")
    return match["framework"], SCENARIOS[match["scenario"]]


def _code(source: str) -> ScriptedReply:
    return ScriptedReply(text=f"Thought: I will use Python for this.\n<code>\n{source}\n</code>")


def _code_arguments(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):  # not JSON: the code equivalent is code that does not parse
        return f"city={arguments[:-1]}"
    return ", ".join(f"{name}={value!r}" for name, value in arguments.items())


def render(turn: Turn, style: Style) -> ScriptedReply:
    """The reply that plays ``turn`` for a framework of ``style``."""
    if style == "code":
        if isinstance(turn, Call):
            return _code(f"print({turn.tool}({_code_arguments(turn.arguments)}))")
        if isinstance(turn, Answer):
            return _code(f"final_answer({turn.text!r})")
        return ScriptedReply(text=turn.text)
    if isinstance(turn, Call):
        return ScriptedReply(tool_calls=[ToolCall(turn.tool, turn.arguments)])
    if isinstance(turn, Answer) and style == "smolagents_tools":
        return ScriptedReply(tool_calls=[ToolCall("final_answer", {"answer": turn.text})])
    return ScriptedReply(text=turn.text)


def _transcript(request: ReceivedRequest) -> tuple[list[str], str]:
    """The roles of the request's messages and the text of its last user message."""
    messages = request.body.get("messages") or request.body.get("input") or []
    roles = [m.get("role", "") for m in messages if isinstance(m, dict)]
    return roles, request.last_user_text


class ScenarioModel:
    """The responder of the scripted model: plays each run's scenario, in the style of its framework.

    A request is a run's first one when it carries no assistant or tool message and its last user message
    ends with the question; each later request of the run plays the next turn (the last turn repeats if
    the framework asks again). Runs are sequential, so one counter per (framework, scenario) suffices.
    """

    def __init__(self, styles: Mapping[str, Style]) -> None:
        self.styles = dict(styles)
        self._turns: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: ReceivedRequest) -> ScriptedReply:
        text = json.dumps(request.body.get("messages") or request.body.get("input") or [])
        framework, scenario = parse_tag(text)
        roles, last_user = _transcript(request)
        first = not {"assistant", "tool"} & set(roles) and last_user.rstrip().endswith(scenario.prompt)
        key = (framework, scenario.name)
        with self._lock:
            turn = 0 if first else self._turns.get(key, 0) + 1
            self._turns[key] = turn
        return render(scenario.turns[min(turn, len(scenario.turns) - 1)], self.styles[framework])
