"""The demo support desk's world: orders, a knowledge base, customer memory, and the tools that act on it.

Everything a tool reads lives in one :class:`SupportDesk` so a replay's reset hook can put it back
exactly as a run found it. The tools are instrumented with tailcut like a production agent's would be,
and fail the way real backends do:

* ``lookup_order`` hits a backend that times out for orders under an outage (a transient fault the
  harness retries);
* ``update_shipping`` calls a shipping service whose contract changed: it now wants a structured
  ``shipping_address``; the v1 harness still describes the old ``address`` string to the model
  (schema drift: the service rejects the old shape);
* ``refund`` moves money: the guard in front of it (``refund_guard``, a router boundary) crashes in v1
  on amounts above its last approval tier (and the harness fails open), and enforces the limit in v2;
* ``cancel_order`` and ``exchange_item`` act on forms, which the ``triage`` router turns into tool calls:
  v1's route table sends exchanges to ``refund``, which cannot take them; a shipped order cannot be
  cancelled, a rejection no retry changes;
* the ``returns`` retriever reads the returns ledger: v1 reads a replica copied nightly, so a return
  that arrived today is not there (stale state); v2 reads the ledger itself.

Each faulty and fixed component is a function here; :mod:`tailcut.demo.harness` puts them together into
the two harness revisions.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import tailcut
from tailcut.canonical import canonical_json, sha256_hex

REFUND_LIMIT: Final = 500.0
#: v1's refund guard: who may approve a refund up to each amount (nobody is listed above the limit).
APPROVAL_TIERS: Final = ((100.0, "agent"), (REFUND_LIMIT, "team lead"))
KB_ARTICLES: Final = (
    {
        "id": "kb-1",
        "title": "Refund policy",
        "body": "Refunds are issued within 14 days to the original card.",
    },
    {"id": "kb-2", "title": "Shipping times", "body": "Standard shipping takes 3 to 5 business days."},
    {"id": "kb-3", "title": "Changing an address", "body": "Addresses can be changed until the order ships."},
    {"id": "kb-4", "title": "Order status", "body": "Order status is updated when the parcel is scanned."},
)

# The shipping service's current contract (what it enforces) and the one it replaced.
SHIPPING_SCHEMA_V2: Final = {
    "type": "object",
    "properties": {
        "order_id": {"type": "integer"},
        "shipping_address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string"},
            },
            "required": ["street", "city", "zip"],
        },
    },
    "required": ["order_id", "shipping_address"],
    "additionalProperties": False,
}
SHIPPING_SCHEMA_V1: Final = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "address": {"type": "string"}},
    "required": ["order_id", "address"],
    "additionalProperties": False,
}
LOOKUP_SCHEMA: Final = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
REFUND_SCHEMA: Final = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "amount": {"type": "number", "exclusiveMinimum": 0}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
SEARCH_SCHEMA: Final = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1}},
    "required": ["query"],
    "additionalProperties": False,
}
CANCEL_SCHEMA: Final = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
EXCHANGE_SCHEMA: Final = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "item": {"type": "string", "minLength": 1}},
    "required": ["order_id", "item"],
    "additionalProperties": False,
}
EMAIL_SCHEMA: Final = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to", "body"],
    "additionalProperties": False,
}


class BackendTimeout(TimeoutError):
    """The order backend did not answer in time (transient: the harness retries it)."""


class UpstreamRejected(RuntimeError):
    """A backend service refused the request (the harness cannot tell this from a transient fault)."""


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's schema."""


class GuardError(RuntimeError):
    """The refund guard could not reach a verdict."""


class RoutingError(RuntimeError):
    """The router built a tool call that its tool does not accept."""


class PolicyViolation(RuntimeError):
    """The desk's audit found a refund above the limit that went out without approval."""


@dataclass
class SupportDesk:
    """The mutable state the tools act on; :meth:`reset` restores a run's starting point."""

    orders: dict[int, dict[str, Any]] = field(default_factory=dict)
    outage: set[int] = field(default_factory=set)
    outage_probability: float = 1.0
    refunds: list[dict[str, Any]] = field(default_factory=list)
    emails: list[dict[str, Any]] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    #: The returns ledger (RMA -> return), and the replica of it that is copied nightly.
    returns: dict[str, dict[str, Any]] = field(default_factory=dict)
    replica: dict[str, dict[str, Any]] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ensure_order(self, order_id: int, amount: float, *, outage: bool = False) -> None:
        with self.lock:
            self.orders.setdefault(
                order_id,
                {
                    "order_id": order_id,
                    "status": "shipped",
                    "amount": amount,
                    "address": "1 Old Road, Springfield",
                },
            )
            if outage:
                self.outage.add(order_id)

    def receive_return(self, rma: str, order_id: int) -> None:
        """A returned parcel was scanned today: in the ledger, not yet in its nightly replica."""
        with self.lock:
            self.returns[rma] = {"rma": rma, "order_id": order_id, "status": "received"}

    def state_id(self) -> str:
        """A hash of what the tools read, recorded as the run's ``initial_state``."""
        with self.lock:
            return "sha256:" + sha256_hex(
                canonical_json(
                    {
                        "orders": {str(order_id): order for order_id, order in self.orders.items()},
                        "outage": sorted(self.outage),
                        "returns": self.returns,
                        "replica": self.replica,
                    }
                )
            )

    def reset(self, *, outage_probability: float = 1.0, seed: int = 0) -> None:
        """Forget refunds, emails, exchanges and address changes; reseed the backend's fault draws."""
        with self.lock:
            for order in self.orders.values():
                order["address"] = "1 Old Road, Springfield"
                order["status"] = "shipped"
            self.refunds.clear()
            self.emails.clear()
            self.exchanges.clear()
            self.outage_probability = outage_probability
            self.rng = random.Random(seed)


DESK = SupportDesk()


def schema_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Where ``value`` breaks ``schema`` and how (``$.amount: 'amount' is a required property``), or None."""
    import jsonschema

    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    return None if problem is None else f"{problem.json_path}: {problem.message}"


def _validate(schema: Mapping[str, Any], arguments: dict[str, Any], error: type[Exception]) -> None:
    problem = schema_problem(schema, arguments)
    if problem is not None:
        raise error(problem)


@tailcut.retriever(name="kb")
def kb_retrieve(query: str, k: int = 2) -> list[dict[str, str]]:
    """The knowledge-base articles most related to ``query`` (by shared words)."""
    words = set(query.lower().split())
    ranked = sorted(KB_ARTICLES, key=lambda a: (-len(words & set(a["title"].lower().split())), a["id"]))
    return [dict(a) for a in ranked[:k]]


@tailcut.memory(name="customer_history")
def customer_history(customer_id: str) -> list[dict[str, str]]:
    """What the desk remembers about a customer."""
    number = int(customer_id.rsplit("-", 1)[-1])
    return (
        [{"ticket": f"T-{number * 7 % 1000}", "summary": "asked about delivery"}] if number % 3 == 0 else []
    )


@tailcut.tool(name="search_kb", schema=SEARCH_SCHEMA, description="Search the help-center articles.")
def search_kb(query: str) -> list[dict[str, str]]:
    _validate(SEARCH_SCHEMA, {"query": query}, ToolArgumentError)
    return kb_retrieve(query, 1)


@tailcut.tool(
    name="lookup_order",
    schema=LOOKUP_SCHEMA,
    description="Look up an order by id.",
    retry=tailcut.Retry(attempts=3, on=(BackendTimeout,)),
)
def lookup_order(order_id: Any) -> dict[str, Any]:
    _validate(LOOKUP_SCHEMA, {"order_id": order_id}, ToolArgumentError)
    with DESK.lock:
        if order_id in DESK.outage and DESK.rng.random() < DESK.outage_probability:
            raise BackendTimeout(f"order backend timed out looking up order {order_id}")
        order = DESK.orders.get(order_id)
        if order is None:
            raise ToolArgumentError(f"no order {order_id}")
        return dict(order)


@tailcut.tool(
    name="update_shipping", schema=SHIPPING_SCHEMA_V2, description="Change the shipping address of an order."
)
def update_shipping(order_id: Any, address: Any = None, shipping_address: Any = None) -> dict[str, Any]:
    arguments = {"order_id": order_id}
    if address is not None:
        arguments["address"] = address
    if shipping_address is not None:
        arguments["shipping_address"] = shipping_address
    # The shipping service enforces its current contract.
    _validate(SHIPPING_SCHEMA_V2, arguments, UpstreamRejected)
    with DESK.lock:
        DESK.orders[order_id]["address"] = "{street}, {zip} {city}".format(**shipping_address)
    return {"order_id": order_id, "updated": True}


@tailcut.tool(name="refund", schema=REFUND_SCHEMA, description="Refund an order.")
def refund(order_id: Any, amount: Any) -> dict[str, Any]:
    _validate(REFUND_SCHEMA, {"order_id": order_id, "amount": amount}, ToolArgumentError)
    with DESK.lock:
        DESK.refunds.append({"order_id": order_id, "amount": amount})
    return {"order_id": order_id, "refunded": amount}


@tailcut.tool(name="send_email", schema=EMAIL_SCHEMA, description="Email the customer.")
def send_email(to: str, body: str) -> dict[str, Any]:
    with DESK.lock:
        DESK.emails.append({"to": to, "body": body})
    return {"sent": True}


@tailcut.tool(name="cancel_order", schema=CANCEL_SCHEMA, description="Cancel an order.")
def cancel_order(order_id: Any) -> dict[str, Any]:
    _validate(CANCEL_SCHEMA, {"order_id": order_id}, ToolArgumentError)
    with DESK.lock:
        order = DESK.orders.get(order_id)
        if order is None:
            raise ToolArgumentError(f"no order {order_id}")
        if order["status"] == "shipped":
            raise UpstreamRejected(f"order {order_id} has shipped and can no longer be cancelled")
        order["status"] = "cancelled"
    return {"order_id": order_id, "cancelled": True}


@tailcut.tool(name="exchange_item", schema=EXCHANGE_SCHEMA, description="Exchange an order's item.")
def exchange_item(order_id: Any, item: Any) -> dict[str, Any]:
    _validate(EXCHANGE_SCHEMA, {"order_id": order_id, "item": item}, ToolArgumentError)
    with DESK.lock:
        DESK.exchanges.append({"order_id": order_id, "item": item})
    return {"order_id": order_id, "exchange": item, "booked": True}


#: The schemas of the tools a form can be routed to.
FORM_TOOL_SCHEMAS: Final = {
    "cancel_order": CANCEL_SCHEMA,
    "exchange_item": EXCHANGE_SCHEMA,
    "refund": REFUND_SCHEMA,
}


@tailcut.router(name="refund_guard")
def refund_guard_v1(order_id: int, amount: float) -> dict[str, Any]:
    """v1: looks up who may approve the amount; above the last tier there is nobody, and it raises."""
    for ceiling, approver in APPROVAL_TIERS:
        if amount <= ceiling:
            return {"allow": True, "reason": f"within the {approver} tier"}
    raise GuardError(f"no approval tier for a refund of {amount}")


@tailcut.router(name="refund_guard")
def refund_guard_v2(order_id: int, amount: float) -> dict[str, Any]:
    """v2: refunds above the limit need a human."""
    if amount > REFUND_LIMIT:
        return {"allow": False, "reason": f"amount {amount} is above the {REFUND_LIMIT} limit"}
    return {"allow": True, "reason": "ok"}


def route_form(form: Mapping[str, Any], routes: Mapping[str, str]) -> dict[str, Any]:
    """The tool call a form becomes under the route table ``routes`` (action -> tool).

    The arguments are the form's fields the tool's schema names, checked against that schema, so a form
    routed to a tool that cannot take it fails here, at the router, not later.
    """
    action = form.get("action")
    tool = routes.get(str(action))
    if tool is None:
        raise RoutingError(f"no route for the {action} form")
    schema = FORM_TOOL_SCHEMAS[tool]
    arguments = {k: form[k] for k in schema["properties"] if k in form}
    problem = schema_problem(schema, arguments)
    if problem is not None:
        raise RoutingError(f"the {action} form was routed to {tool}, which cannot take it ({problem})")
    return {"tool": tool, "arguments": arguments}


#: v1's route table: the exchange route was copied from the refund one and never changed.
ROUTES_V1: Final = {"cancel": "cancel_order", "exchange": "refund"}
ROUTES_V2: Final = {"cancel": "cancel_order", "exchange": "exchange_item"}


@tailcut.router(name="triage")
def triage_v1(form: dict[str, Any]) -> dict[str, Any]:
    """v1: sends exchange forms to ``refund`` (which needs an amount a form does not have)."""
    return route_form(form, ROUTES_V1)


@tailcut.router(name="triage")
def triage_v2(form: dict[str, Any]) -> dict[str, Any]:
    """v2: sends exchange forms to ``exchange_item``."""
    return route_form(form, ROUTES_V2)


@tailcut.retriever(name="returns")
def returns_from_replica(rma: str) -> list[dict[str, Any]]:
    """v1: the returns of ``rma`` as of last night's copy of the ledger (stale for today's parcels)."""
    with DESK.lock:
        return [dict(r) for r in DESK.replica.values() if r["rma"] == rma]


@tailcut.retriever(name="returns")
def returns_from_ledger(rma: str) -> list[dict[str, Any]]:
    """v2: the returns of ``rma`` as the ledger holds them now."""
    with DESK.lock:
        return [dict(r) for r in DESK.returns.values() if r["rma"] == rma]
