"""The demo fleet: a support agent written against the real ``openai`` SDK, instrumented with tailcut.

Each run handles one ticket: it reads the customer's history (a memory boundary), retrieves help-center
articles (a retriever) and, for a ticket about a return, the return from the returns ledger (the
``returns`` retriever). A form ticket (cancel an order, exchange an item) is turned into a tool call by
the ``triage`` router and answered from its result; any other ticket loops over chat completions with
tools (``search_kb``, ``lookup_order``, ``refund``, ``update_shipping``, ``send_email``) until the model
answers. An evaluator scores the answer and the run records its outcome; the desk's audit fails the run
when a refund above the limit went out. The ticket mix injects every failure category at a known rate,
and the two harness revisions (:mod:`tailcut.demo.harness`) differ in six components, each the fix of
one incident kind:

==================  =====================================================  =========================
ticket kind         what happens                                           categories (v1 / v2)
==================  =====================================================  =========================
``faq``             clean answer from the knowledge base                   none
``order_status``    one lookup, then an answer                             none
``refund_small``    lookup, refund under the limit                         none
``address_change``  v1 shows the model the old ``update_shipping`` schema  schema_drift + error / none
                    and the service rejects the call (a failed tool span)
``refund_large``    refund above the limit: v1's guard crashes, the        error / none
                    harness fails open, the refund goes out and the audit
                    fails the run; v2 escalates
``exchange``        an exchange form: v1's router sends it to ``refund``,  error / none
                    which cannot take it, and the run fails
``cancel_order``    a cancel form for a shipped order: the rejection is    tool_loop + error / error
                    retried 4 times by v1, taken as final by v2
``warranty``        v1's prompt lost the rule to quote the order number    silent_degradation / none
                    in warranty answers, so the answer fails the evaluator
``return_status``   v1 reads the returns ledger's nightly replica: the     silent_degradation / none
                    return that arrived today is not there
``timeout``         the order backend times out on every retry: the run    error
                    fails
``bad_args``        the model sends a string order id (schema says         schema_violation + error
                    integer), the tool rejects it, the model corrects
                    itself (the run survives the failed tool span)
``loop``            the same ``search_kb`` call four times                 tool_loop
``blowup``          long, token-heavy turns                                cost_blowup
``degraded``        completes, but the answer contradicts the KB           silent_degradation
==================  =====================================================  =========================

``agent_v1`` / ``agent_v2`` are the entry points ``tailcut replay --agent`` and ``tailcut validate``
import; ``reset_desk`` is the reset hook and ``check_run`` the check function.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import tailcut
from tailcut import environment
from tailcut.attributes import FAILURE_CATEGORIES
from tailcut.demo import _checks
from tailcut.demo import support_env as env
from tailcut.demo.harness import HARNESSES, Harness, Revision

if TYPE_CHECKING:
    from tailcut.replay import Rerun

MODEL: Final = "scripted-support-1"
MODEL_URL_ENV: Final = environment.TAILCUT_DEMO_MODEL_URL
DEFAULT_MODEL_URL: Final = "http://127.0.0.1:8765/v1"
MAX_STEPS: Final = 8

#: Share of runs of each ticket kind (sums to 1).
TICKET_MIX: Final[dict[str, float]] = {
    "faq": 0.28,
    "order_status": 0.14,
    "refund_small": 0.10,
    "address_change": 0.08,
    "refund_large": 0.05,
    "exchange": 0.03,
    "cancel_order": 0.03,
    "warranty": 0.03,
    "return_status": 0.03,
    "timeout": 0.04,
    "bad_args": 0.05,
    "loop": 0.05,
    "blowup": 0.04,
    "degraded": 0.05,
}

_NONE: Final[dict[str, frozenset[str]]] = {"v1": frozenset(), "v2": frozenset()}
#: The failure categories each ticket kind injects, per harness revision (the ground truth).
INJECTED: Final[dict[str, dict[str, frozenset[str]]]] = {
    "faq": _NONE,
    "order_status": _NONE,
    "refund_small": _NONE,
    "address_change": {"v1": frozenset({"schema_drift", "error"}), "v2": frozenset()},
    "refund_large": {"v1": frozenset({"error"}), "v2": frozenset()},
    "exchange": {"v1": frozenset({"error"}), "v2": frozenset()},
    "cancel_order": {"v1": frozenset({"tool_loop", "error"}), "v2": frozenset({"error"})},
    "warranty": {"v1": frozenset({"silent_degradation"}), "v2": frozenset()},
    "return_status": {"v1": frozenset({"silent_degradation"}), "v2": frozenset()},
    "timeout": {"v1": frozenset({"error"}), "v2": frozenset({"error"})},
    "bad_args": {
        "v1": frozenset({"schema_violation", "error"}),
        "v2": frozenset({"schema_violation", "error"}),
    },
    "loop": {"v1": frozenset({"tool_loop"}), "v2": frozenset({"tool_loop"})},
    "blowup": {"v1": frozenset({"cost_blowup"}), "v2": frozenset({"cost_blowup"})},
    "degraded": {"v1": frozenset({"silent_degradation"}), "v2": frozenset({"silent_degradation"})},
}
#: The incident kinds: one per component v2 fixes, each the kind whose v1 runs show that fault.
INCIDENT_KINDS: Final = (
    "refund_large",
    "exchange",
    "address_change",
    "cancel_order",
    "warranty",
    "return_status",
)
CATEGORIES: Final = FAILURE_CATEGORIES

_clients: dict[str, Any] = {}


def model_client() -> Any:
    """The OpenAI client for the model endpoint (``TAILCUT_DEMO_MODEL_URL``); one per URL."""
    import openai

    url = environment.demo_model_url(DEFAULT_MODEL_URL)
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = openai.OpenAI(base_url=url, api_key="demo-key", max_retries=0, timeout=30)
    return client


_TOOLS: Final[dict[str, Callable[..., dict[str, Any]]]] = {
    "search_kb": lambda **a: {"articles": env.search_kb(**a)},
    "lookup_order": env.lookup_order,
    "refund": env.refund,
    "update_shipping": env.update_shipping,
    "send_email": env.send_email,
    "cancel_order": env.cancel_order,
    "exchange_item": env.exchange_item,
}
#: What a tool raises that goes back to the model (or the form's answer) instead of failing the run.
_REPORTED: Final = (env.ToolArgumentError, env.UpstreamRejected, TypeError)


def _execute(name: str, arguments_json: str, harness: Harness) -> dict[str, Any]:
    """Run one tool call the model asked for; argument and backend rejections go back to the model.

    A refund passes the harness's guard first; a guard that cannot decide lets it through (the harness
    fails open, so a broken guard never blocks the desk).
    """
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError as exc:
        return {"error": f"arguments are not JSON: {exc}"}
    if name == "refund":
        try:
            verdict = harness.guard(order_id=arguments.get("order_id"), amount=arguments.get("amount"))
        except env.GuardError as exc:
            verdict = {"allow": True, "reason": f"guard unavailable ({exc}); failing open"}
        if not verdict["allow"]:
            return {"escalated": True, "reason": verdict["reason"]}
    tool = _TOOLS.get(name)
    if tool is None:
        return {"error": f"unknown tool {name}"}
    try:
        return tool(**arguments)
    except _REPORTED as exc:
        return {"error": str(exc)}


def _act(call: Mapping[str, Any], harness: Harness) -> dict[str, Any]:
    """Run the tool call a form was routed to, retrying failed attempts as the harness's policy says."""
    tool = _TOOLS[call["tool"]]
    attempt = 1
    while True:
        try:
            return tool(**call["arguments"])
        except (*_REPORTED, env.BackendTimeout) as exc:
            if not harness.retry(exc, attempt):
                return {"error": str(exc)}
            attempt += 1


def _form_answer(form: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    order_id = form.get("order_id")
    if "error" in result:
        return f"Your {form.get('action')} of order {order_id} could not be done: {result['error']}."
    if result.get("cancelled"):
        return f"Order {order_id} is cancelled."
    if result.get("booked"):
        return f"Your exchange of order {order_id} for {result.get('exchange')} is booked."
    return f"Your {form.get('action')} of order {order_id} is done."


def _converse(
    ticket: Mapping[str, Any], context: str, harness: Harness, refunds: list[dict[str, Any]]
) -> str:
    """The model loop: chat completions with tools until the model answers (at most ``MAX_STEPS``)."""
    client = model_client()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": harness.prompt},
        {"role": "user", "content": f"{env_ticket_line(ticket)}\n{context}"},
    ]
    for _ in range(MAX_STEPS):
        completion = client.chat.completions.create(
            model=MODEL, messages=messages, tools=list(harness.tools), temperature=0, seed=7
        )
        message = completion.choices[0].message
        messages.append(message.model_dump(mode="json", exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            with tailcut.tool_call_id(call.id):
                result = _execute(call.function.name, call.function.arguments, harness)
            if call.function.name == "refund" and "refunded" in result:
                refunds.append(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return ""


def evaluate(ticket: Mapping[str, Any], answer: str, refunds: list[dict[str, Any]]) -> tuple[str, float]:
    """Score the answer like an evaluator would: (outcome, score). ``refunds`` are the run's refunds."""
    kind = ticket["kind"]
    if any(r.get("refunded", 0) > env.REFUND_LIMIT for r in refunds):
        return "fail", 0.0  # an unsafe action went through
    wanted = {
        "faq": "14 days",
        "blowup": "14 days",
        "degraded": "14 days",
        "address_change": "updated",
        "refund_large": "escalated",
        "exchange": "is booked",
        "warranty": f"order {ticket.get('order_id')}",
        "return_status": "arrived",
    }.get(kind)
    if wanted is None:
        return "pass", 0.85
    return ("pass", 0.9) if wanted in answer else ("fail", 0.1)


def _audit(refunds: list[dict[str, Any]]) -> None:
    """The desk's audit: a refund above the limit that went out fails the run, whatever it answered."""
    for refund in refunds:
        if refund.get("refunded", 0) > env.REFUND_LIMIT:
            raise env.PolicyViolation(
                f"refund of {refund['refunded']} on order {refund.get('order_id')} is above the "
                f"{env.REFUND_LIMIT} limit and was not approved"
            )


def handle_ticket(
    ticket: Mapping[str, Any],
    harness: Harness,
    *,
    on_trace: Callable[[str | None], None] | None = None,
) -> str:
    """Handle one support ticket as one recorded run; returns the answer sent to the customer.

    ``harness`` is a revision (``HARNESSES["v1"]``) or a variant of one; ``on_trace`` receives the run's
    trace id as soon as the run starts (the fleet keeps it as truth).
    """
    with tailcut.run(
        "support-agent",
        input=dict(ticket),
        prompt_version=harness.prompt_version,
        harness_revision=harness.revision,
        env_revision="desk-2026.11",
        initial_state=env.DESK.state_id(),
    ) as run:
        if on_trace is not None:
            on_trace(run.trace_id)
        refunds: list[dict[str, Any]] = []
        form = ticket.get("form")
        if form:  # a form needs no conversation: the router turns it into a tool call
            answer = _form_answer(form, _act(harness.triage(dict(form)), harness))
        else:
            facts: dict[str, Any] = {
                "history": env.customer_history(ticket["customer"]),
                "articles": env.kb_retrieve(ticket["text"]),
            }
            if "rma" in ticket:
                facts["returns"] = harness.returns(ticket["rma"])
            answer = _converse(ticket, json.dumps(facts, sort_keys=True), harness, refunds)
        outcome, score = evaluate(ticket, answer, refunds)
        run.set_output(answer)
        run.set_outcome(outcome, score)  # type: ignore[arg-type]
        _audit(refunds)
        return answer


def env_ticket_line(ticket: Mapping[str, Any]) -> str:
    from tailcut.demo.support_model import TICKET_MARKER

    return TICKET_MARKER + json.dumps(dict(ticket), sort_keys=True)


def agent_v1(ticket: Mapping[str, Any]) -> str:
    """Entry point of harness revision v1 (the six faults of :mod:`tailcut.demo.harness`)."""
    return handle_ticket(ticket, HARNESSES["v1"])


def agent_v2(ticket: Mapping[str, Any]) -> str:
    """Entry point of harness revision v2 (the six fixes)."""
    return handle_ticket(ticket, HARNESSES["v2"])


def reset_desk(ticket: Mapping[str, Any] | None = None) -> None:
    """Reset hook for replays: restore the desk and put the ticket's order back as the run found it.

    During live reruns the order backend's outage is only partial, so a timeout reproduces
    intermittently, as real incidents do.
    """
    env.DESK.reset(outage_probability=0.6, seed=random.randrange(2**32))
    if ticket is not None:
        _prepare_order(ticket)


def check_run(rerun: Rerun) -> tuple[bool, str]:
    """Check function for replays: the rerun broke none of the properties of :mod:`tailcut.demo._checks`.

    Each property judges only what the code under test decided. A refund above the limit counts whether
    it ran live or was served from the record when the guard that let it through ran live: in a
    cut-point replay with the guard live, a served refund above the limit is the recorded unsafe action
    that the guard under test let through; with the guard served, it is the record's own decision.
    """
    problem = _checks.first_problem(rerun)
    if problem is not None:
        return False, problem
    return True, "no unsafe refund, misrouted form, refused contract, repeated rejection or stale answer"


@dataclass(frozen=True)
class FleetRun:
    """One run of the fleet with its ground truth."""

    ticket_id: int
    kind: str
    revision: Revision
    injected: frozenset[str]
    trace_id: str | None
    failed: bool


_TICKET_TEXT: Final = {
    "faq": "How long do refunds take?",
    "degraded": "How long do refunds take?",
    "blowup": "Explain the refund policy in detail please.",
    "order_status": "Where is my order?",
    "bad_args": "Where is my order?",
    "timeout": "Where is my order?",
    "loop": "Where is my order? It is late.",
    "refund_small": "Please refund my order.",
    "refund_large": "Please refund my order.",
    "address_change": "Please change my shipping address.",
    "exchange": "Please exchange my order for another size.",
    "cancel_order": "Please cancel my order.",
    "warranty": "My kettle stopped working. Is it still under warranty?",
    "return_status": "I sent my return back. Has it arrived?",
}
#: The form a form ticket carries: its action and the fields the form asks for.
_FORMS: Final = {"exchange": {"action": "exchange", "item": "size M"}, "cancel_order": {"action": "cancel"}}


def make_tickets(n: int, seed: int) -> Iterator[tuple[dict[str, Any], Revision]]:
    """``n`` tickets drawn from :data:`TICKET_MIX`, half under each revision (reproducible from ``seed``)."""
    rng = random.Random(seed)
    kinds, weights = zip(*TICKET_MIX.items(), strict=True)
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        order_id = 1000 + i
        amount = (
            round(rng.uniform(600, 5000), 2) if kind == "refund_large" else round(rng.uniform(10, 300), 2)
        )
        ticket: dict[str, Any] = {
            "ticket_id": i,
            "kind": kind,
            "customer": f"c-{rng.randrange(1, 400)}",
            "order_id": order_id,
            "amount": amount,
            "text": _TICKET_TEXT[kind],
        }
        if kind in _FORMS:
            ticket["form"] = {**_FORMS[kind], "order_id": order_id}
        if kind == "return_status":
            ticket["rma"] = f"RMA-{order_id}"
        yield ticket, ("v1" if rng.random() < 0.5 else "v2")


def _prepare_order(ticket: Mapping[str, Any]) -> None:
    env.DESK.ensure_order(ticket["order_id"], ticket["amount"], outage=ticket["kind"] == "timeout")
    if "rma" in ticket:
        env.DESK.receive_return(ticket["rma"], ticket["order_id"])


def run_one(ticket: dict[str, Any], revision: Revision) -> FleetRun:
    """Run one ticket and return it with its ground truth (the run's own exception is swallowed)."""
    _prepare_order(ticket)
    trace_ids: list[str | None] = []
    failed = False
    try:
        handle_ticket(ticket, HARNESSES[revision], on_trace=trace_ids.append)
    except Exception:
        failed = True
    trace_id = trace_ids[0] if trace_ids else None
    return FleetRun(
        ticket["ticket_id"], ticket["kind"], revision, INJECTED[ticket["kind"]][revision], trace_id, failed
    )


def run_fleet(
    n: int,
    *,
    workers: int = 4,
    seed: int = 0,
    on_done: Callable[[FleetRun], None] | None = None,
) -> list[FleetRun]:
    """Run ``n`` tickets on ``workers`` threads; the model server must be reachable at the model URL.

    Ctrl-C (or any failure here) cancels the runs not yet started and waits only for those in flight.
    """
    env.DESK.reset(outage_probability=1.0, seed=seed)
    results: list[FleetRun] = []
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    try:
        futures = [pool.submit(run_one, ticket, revision) for ticket, revision in make_tickets(n, seed)]
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            results.append(run)
            if on_done is not None:
                on_done(run)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return sorted(results, key=lambda r: r.ticket_id)
