"""The scripted "model" behind the demo fleet: a deterministic policy over the conversation so far.

It stands in for a hosted model (which cannot run here) behind the loopback server of
:mod:`tailcut.testing`. Given the same conversation it always answers the same way, so the
fleet's failure modes happen at exactly the rates the ticket mix sets. Each ticket kind scripts a
realistic trajectory, including the ones that go wrong: arguments that break a tool's schema, a tool
called again and again, a cost blowup, a confidently wrong answer, and arguments that follow the old
contract of a tool whose schema changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tailcut.testing import ReceivedRequest, ScriptedReply, TokenUsage, ToolCall

TICKET_MARKER = "TICKET "
BLOWUP_USAGE = TokenUsage(14000, 2600)


@dataclass(frozen=True)
class Step:
    """A tool call the model made earlier in the conversation, and what came back."""

    name: str
    arguments: dict[str, Any]
    result: str


def _ticket(messages: list[Mapping[str, Any]]) -> dict[str, Any]:
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.startswith(TICKET_MARKER):
            return json.loads(content[len(TICKET_MARKER) :].split("\n", 1)[0])
    raise ValueError("no ticket in the conversation")


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
    ticket = _ticket(messages)
    steps = _steps(messages)
    policy = _POLICIES[ticket["kind"]]
    return policy(ticket, steps, list(body.get("tools", [])))


def _faq(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    return ScriptedReply(text="Refunds are issued within 14 days to the original card.")


def _degraded(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    # Completes without error, but the answer contradicts the knowledge base.
    return ScriptedReply(text="Refunds can take up to 90 days and are paid as store credit.")


def _order_status(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if not steps:
        return _call("lookup_order", order_id=ticket["order_id"])
    return ScriptedReply(text=f"Your order {ticket['order_id']} has shipped.")


def _bad_args(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if not steps:  # the schema says integer; the model sends the display form
        return _call("lookup_order", order_id=f"ORD-{ticket['order_id']}")
    if len(steps) == 1:
        return _call("lookup_order", order_id=ticket["order_id"])
    return ScriptedReply(text=f"Your order {ticket['order_id']} has shipped.")


def _refund(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if not steps:
        return _call("lookup_order", order_id=ticket["order_id"])
    if len(steps) == 1:
        return _call("refund", order_id=ticket["order_id"], amount=ticket["amount"])
    if "escalated" in steps[-1].result:
        return ScriptedReply(text="This refund needs a supervisor; I have escalated it to a human agent.")
    return ScriptedReply(text=f"I have refunded {ticket['amount']:.2f} to your card.")


def _address(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if not steps:
        # The model follows the contract it is shown; v1 still shows the old one.
        schema = _sent_schema(tools, "update_shipping")
        if "shipping_address" in schema.get("properties", {}):
            return _call(
                "update_shipping",
                order_id=ticket["order_id"],
                shipping_address={"street": "9 New Street", "city": "Shelbyville", "zip": "12345"},
            )
        return _call(
            "update_shipping", order_id=ticket["order_id"], address="9 New Street, 12345 Shelbyville"
        )
    if "error" in steps[-1].result:
        return ScriptedReply(text="I'm sorry, I could not change the address right now.")
    return ScriptedReply(text="Your shipping address has been updated.")


def _loop(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if len(steps) < 4:  # keeps asking the same thing, as if the answer never arrived
        return _call("search_kb", query="where is my order")
    return ScriptedReply(text="Standard shipping takes 3 to 5 business days.")


def _blowup(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    if len(steps) < 2:
        return ScriptedReply(
            tool_calls=[ToolCall("search_kb", {"query": f"refund policy part {len(steps)}"})],
            usage=BLOWUP_USAGE,
        )
    return ScriptedReply(
        text="Refunds are issued within 14 days to the original card. " * 40, usage=BLOWUP_USAGE
    )


def _timeout(ticket: dict[str, Any], steps: list[Step], tools: list[Any]) -> ScriptedReply:
    return _order_status(ticket, steps, tools)


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
}
