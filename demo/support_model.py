"""The scripted "model" behind the demo fleet: a deterministic policy over the conversation so far.

It stands in for a hosted model (which cannot run here) behind the loopback server of
:mod:`tailcut.testing`. Given the same conversation it always answers the same way, so the
fleet's failure modes happen at exactly the rates the ticket mix sets. Each ticket kind scripts a
realistic trajectory, including the ones that go wrong: arguments that break a tool's schema, a tool
called again and again, a cost blowup, a confidently wrong answer, and arguments that follow the old
contract of a tool whose schema changed. Like a real model it follows what the harness shows it: the
tool schemas it is sent, the instructions of the system prompt and the facts of the ticket's context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tailcut.testing import ReceivedRequest, ScriptedReply, TokenUsage, ToolCall

TICKET_MARKER = "TICKET "
BLOWUP_USAGE = TokenUsage(14000, 2600)
#: The system prompt's instruction to quote the order number in warranty answers, unless negated.
QUOTE_RULE_PATTERN = re.compile(
    r"(?<!never )(?<!not )quote the order number in (every|each|all) warranty answers?", re.I
)


@dataclass(frozen=True)
class Step:
    """A tool call the model made earlier in the conversation, and what came back."""

    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Turn:
    """What the model is shown at one step: the ticket, its context, the steps so far, tools and prompt."""

    ticket: dict[str, Any]
    context: dict[str, Any]
    steps: list[Step]
    tools: list[Mapping[str, Any]]
    system: str


def ticket_context(messages: list[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ticket and its context (history, articles, ...) from the conversation's ticket message."""
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.startswith(TICKET_MARKER):
            ticket_line, _, context = content[len(TICKET_MARKER) :].partition("\n")
            return json.loads(ticket_line), json.loads(context) if context else {}
    raise ValueError("no ticket in the conversation")


def _system(messages: list[Mapping[str, Any]]) -> str:
    return next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")


def _steps(messages: list[Mapping[str, Any]]) -> list[Step]:
    results = {m.get("tool_call_id"): str(m.get("content", "")) for m in messages if m.get("role") == "tool"}
    steps = []
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = {}
            steps.append(Step(function.get("name", ""), arguments, results.get(call.get("id"), "")))
    return steps


def _sent_schema(tools: list[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    for tool in tools:
        function = tool.get("function", {})
        if function.get("name") == name:
            return function.get("parameters", {})
    return {}


def _call(name: str, **arguments: Any) -> ScriptedReply:
    return ScriptedReply(tool_calls=[ToolCall(name, arguments)])


def support_responder(request: ReceivedRequest) -> ScriptedReply:
    """Answer one chat-completions request of the support agent."""
    body = request.body
    messages = list(body.get("messages", []))
    ticket, context = ticket_context(messages)
    turn = Turn(ticket, context, _steps(messages), list(body.get("tools", [])), _system(messages))
    return _POLICIES[ticket["kind"]](turn)


def _faq(turn: Turn) -> ScriptedReply:
    return ScriptedReply(text="Refunds are issued within 14 days to the original card.")


def _degraded(turn: Turn) -> ScriptedReply:
    # Completes without error, but the answer contradicts the knowledge base.
    return ScriptedReply(text="Refunds can take up to 90 days and are paid as store credit.")


def _order_status(turn: Turn) -> ScriptedReply:
    order_id = turn.ticket["order_id"]
    if not turn.steps:
        return _call("lookup_order", order_id=order_id)
    return ScriptedReply(text=f"Your order {order_id} has shipped.")


def _bad_args(turn: Turn) -> ScriptedReply:
    order_id = turn.ticket["order_id"]
    if not turn.steps:  # the schema says integer; the model sends the display form
        return _call("lookup_order", order_id=f"ORD-{order_id}")
    if len(turn.steps) == 1:
        return _call("lookup_order", order_id=order_id)
    return ScriptedReply(text=f"Your order {order_id} has shipped.")


def _refund(turn: Turn) -> ScriptedReply:
    ticket, steps = turn.ticket, turn.steps
    if not steps:
        return _call("lookup_order", order_id=ticket["order_id"])
    if len(steps) == 1:
        return _call("refund", order_id=ticket["order_id"], amount=ticket["amount"])
    if "escalated" in steps[-1].result:
        return ScriptedReply(text="This refund needs a supervisor; I have escalated it to a human agent.")
    return ScriptedReply(text=f"I have refunded {ticket['amount']:.2f} to your card.")


def _address(turn: Turn) -> ScriptedReply:
    order_id = turn.ticket["order_id"]
    if not turn.steps:
        # The model follows the contract it is shown; v1 still shows the old one.
        shown = _sent_schema(turn.tools, "update_shipping").get("properties", {})
        if shown.get("shipping_address", {}).get("type") == "object":
            return _call(
                "update_shipping",
                order_id=order_id,
                shipping_address={"street": "9 New Street", "city": "Shelbyville", "zip": "12345"},
            )
        field = "shipping_address" if "shipping_address" in shown else "address"
        return _call("update_shipping", order_id=order_id, **{field: "9 New Street, 12345 Shelbyville"})
    if "error" in turn.steps[-1].result:
        return ScriptedReply(text="I'm sorry, I could not change the address right now.")
    return ScriptedReply(text="Your shipping address has been updated.")


def _loop(turn: Turn) -> ScriptedReply:
    if len(turn.steps) < 4:  # keeps asking the same thing, as if the answer never arrived
        return _call("search_kb", query="where is my order")
    return ScriptedReply(text="Standard shipping takes 3 to 5 business days.")


def _blowup(turn: Turn) -> ScriptedReply:
    if len(turn.steps) < 2:
        return ScriptedReply(
            tool_calls=[ToolCall("search_kb", {"query": f"refund policy part {len(turn.steps)}"})],
            usage=BLOWUP_USAGE,
        )
    return ScriptedReply(
        text="Refunds are issued within 14 days to the original card. " * 40, usage=BLOWUP_USAGE
    )


def _timeout(turn: Turn) -> ScriptedReply:
    return _order_status(turn)


def _warranty(turn: Turn) -> ScriptedReply:
    # Quotes the order number only when the system prompt says to (v1's prompt edit dropped the rule).
    quoted = f" for order {turn.ticket['order_id']}" if QUOTE_RULE_PATTERN.search(turn.system) else ""
    return ScriptedReply(
        text=f"Your kettle is covered by our 2-year warranty; a replacement is on its way{quoted}."
    )


def _return_status(turn: Turn) -> ScriptedReply:
    # Answers from the returns the harness retrieved: an empty list reads as "not arrived".
    rma = turn.ticket["rma"]
    if any(r.get("status") == "received" for r in turn.context.get("returns") or ()):
        return ScriptedReply(text=f"Your return {rma} arrived; the refund is on its way.")
    return ScriptedReply(text=f"We have not received your return {rma} yet.")


_POLICIES = {
    "faq": _faq,
    "degraded": _degraded,
    "order_status": _order_status,
    "bad_args": _bad_args,
    "refund_small": _refund,
    "refund_large": _refund,
    "address_change": _address,
    "loop": _loop,
    "blowup": _blowup,
    "timeout": _timeout,
    "warranty": _warranty,
    "return_status": _return_status,
}
