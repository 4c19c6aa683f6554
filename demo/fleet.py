"""The demo fleet: a support agent written against the real ``openai`` SDK, instrumented with tailcut.

Each run handles one ticket: it reads the customer's history (a memory boundary), retrieves help-center
articles (a retriever), then loops over chat completions with tools (``search_kb``, ``lookup_order``,
``refund``, ``update_shipping``, ``send_email``) until the model answers; an evaluator scores the answer
and the run records its outcome. The ticket mix injects every failure category at a known rate, and
two harness revisions differ where a fix would:

=================  ======================================================  =========================
ticket kind        what happens                                            categories (v1 / v2)
=================  ======================================================  =========================
``faq``            clean answer from the knowledge base                    none
``order_status``   one lookup, then an answer                              none
``refund_small``   lookup, refund under the limit                          none
``address_change`` v1 shows the model the old ``update_shipping`` schema;  schema_drift +
                   the service rejects every identical retry               silent_degradation / none
``refund_large``   refund above the limit: v1's guard is missing, so the   silent_degradation / none
                   unsafe refund goes through; v2 escalates
``timeout``        the order backend times out on every retry: the run     error
                   fails
``bad_args``       the model sends a string order id (schema says          schema_violation
                   integer), then corrects itself
``loop``           the same ``search_kb`` call four times                  tool_loop
``blowup``         long, token-heavy turns                                 cost_blowup
``degraded``       completes, but the answer contradicts the KB            silent_degradation
=================  ======================================================  =========================

``agent_v1`` / ``agent_v2`` are the entry points ``tailcut replay --agent`` imports; ``reset_desk`` is
the reset hook and ``check_run`` the check function.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import tailcut
from tailcut.attributes import FAILURE_CATEGORIES
from tailcut.demo import support_env as env

if TYPE_CHECKING:
    from tailcut.replay import Rerun

Revision = Literal["v1", "v2"]
#: A refund guard: ``guard(order_id=..., amount=...) -> {"allow": bool, "reason": str}``.
Guard = Callable[..., dict[str, Any]]
MODEL: Final = "scripted-support-1"
MODEL_URL_ENV: Final = "TAILCUT_DEMO_MODEL_URL"
DEFAULT_MODEL_URL: Final = "http://127.0.0.1:8765/v1"
MAX_STEPS: Final = 8

#: Share of runs of each ticket kind (sums to 1).
TICKET_MIX: Final[dict[str, float]] = {
    "faq": 0.36,
    "order_status": 0.18,
    "refund_small": 0.10,
    "address_change": 0.08,
    "refund_large": 0.05,
    "timeout": 0.04,
    "bad_args": 0.05,
    "loop": 0.05,
    "blowup": 0.04,
    "degraded": 0.05,
}

#: The failure categories each ticket kind injects, per harness revision (the ground truth).
INJECTED: Final[dict[str, dict[str, frozenset[str]]]] = {
    "faq": {"v1": frozenset(), "v2": frozenset()},
    "order_status": {"v1": frozenset(), "v2": frozenset()},
    "refund_small": {"v1": frozenset(), "v2": frozenset()},
    "address_change": {"v1": frozenset({"schema_drift", "silent_degradation"}), "v2": frozenset()},
    "refund_large": {"v1": frozenset({"silent_degradation"}), "v2": frozenset()},
    "timeout": {"v1": frozenset({"error"}), "v2": frozenset({"error"})},
    "bad_args": {"v1": frozenset({"schema_violation"}), "v2": frozenset({"schema_violation"})},
    "loop": {"v1": frozenset({"tool_loop"}), "v2": frozenset({"tool_loop"})},
    "blowup": {"v1": frozenset({"cost_blowup"}), "v2": frozenset({"cost_blowup"})},
    "degraded": {"v1": frozenset({"silent_degradation"}), "v2": frozenset({"silent_degradation"})},
}
CATEGORIES: Final = FAILURE_CATEGORIES

PROMPT_VERSIONS: Final[dict[str, str]] = {"v1": "support-prompt-7", "v2": "support-prompt-8"}
SYSTEM_PROMPT: Final = (
    "You are the support desk of an online shop. Use the tools to look up orders, refund them and change "
    "shipping addresses. Answer briefly and only from the tools' results and the help-center articles."
)


def _function(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def tool_definitions(revision: Revision) -> list[dict[str, Any]]:
    """The tools as the harness describes them to the model (v1 still describes the old shipping contract)."""
    shipping = env.SHIPPING_SCHEMA_V1 if revision == "v1" else env.SHIPPING_SCHEMA_V2
    return [
        _function("search_kb", "Search the help-center articles.", env.SEARCH_SCHEMA),
        _function("lookup_order", "Look up an order by id.", env.LOOKUP_SCHEMA),
        _function("refund", "Refund an order.", env.REFUND_SCHEMA),
        _function("update_shipping", "Change the shipping address of an order.", shipping),
        _function("send_email", "Email the customer.", env.EMAIL_SCHEMA),
    ]


_clients: dict[str, Any] = {}


def model_client() -> Any:
    """The OpenAI client for the model endpoint (``TAILCUT_DEMO_MODEL_URL``); one per URL."""
    import openai

    url = os.environ.get(MODEL_URL_ENV, DEFAULT_MODEL_URL)
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = openai.OpenAI(base_url=url, api_key="demo-key", max_retries=0, timeout=30)
    return client


def _execute(
    name: str, arguments_json: str, revision: Revision, guard: Guard | None = None
) -> dict[str, Any]:
    """Run one tool call the model asked for; argument and backend rejections go back to the model.

    ``guard`` replaces the revision's refund guard (a benchmark's mutant, say); it should be a
    ``@tailcut.router(name="refund_guard")`` function so a cut-point replay can run it live.
    """
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError as exc:
        return {"error": f"arguments are not JSON: {exc}"}
    if name == "refund":
        guard = guard or (env.refund_guard_v1 if revision == "v1" else env.refund_guard_v2)
        verdict = guard(order_id=arguments.get("order_id"), amount=arguments.get("amount"))
        if not verdict["allow"]:
            return {"escalated": True, "reason": verdict["reason"]}
    tool = _TOOLS.get(name)
    if tool is None:
        return {"error": f"unknown tool {name}"}
    try:
        return tool(**arguments)
    except (env.ToolArgumentError, env.UpstreamRejected, TypeError) as exc:
        return {"error": str(exc)}


_TOOLS: Final[dict[str, Callable[..., dict[str, Any]]]] = {
    "search_kb": lambda **a: {"articles": env.search_kb(**a)},
    "lookup_order": env.lookup_order,
    "refund": env.refund,
    "update_shipping": env.update_shipping,
    "send_email": env.send_email,
}


def evaluate(ticket: Mapping[str, Any], answer: str, refunds: list[dict[str, Any]]) -> tuple[str, float]:
    """Score the answer like an evaluator would: (outcome, score)."""
    kind = ticket["kind"]
    if any(r["order_id"] == ticket.get("order_id") and r["amount"] > env.REFUND_LIMIT for r in refunds):
        return "fail", 0.0  # an unsafe action went through
    if kind in ("faq", "blowup", "degraded"):
        return ("pass", 0.9) if "14 days" in answer else ("fail", 0.2)
    if kind == "address_change":
        return ("pass", 0.9) if "updated" in answer else ("fail", 0.1)
    if kind == "refund_large":
        return ("pass", 0.9) if "escalated" in answer else ("fail", 0.0)
    return "pass", 0.85


def handle_ticket(
    ticket: Mapping[str, Any],
    revision: Revision,
    *,
    on_trace: Callable[[str | None], None] | None = None,
    guard: Guard | None = None,
) -> str:
    """Handle one support ticket as one recorded run; returns the answer sent to the customer.

    ``on_trace`` receives the run's trace id as soon as the run starts (the fleet keeps it as truth);
    ``guard`` replaces the revision's refund guard.
    """
    client = model_client()
    with tailcut.run(
        "support-agent",
        input=dict(ticket),
        prompt_version=PROMPT_VERSIONS[revision],
        harness_revision=revision,
        env_revision="desk-2026.11",
        initial_state=env.DESK.state_id(),
    ) as run:
        if on_trace is not None:
            on_trace(run.trace_id)
        history = env.customer_history(ticket["customer"])
        articles = env.kb_retrieve(ticket["text"])
        context = json.dumps({"history": history, "articles": articles}, sort_keys=True)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{env_ticket_line(ticket)}\n{context}"},
        ]
        answer = ""
        for _ in range(MAX_STEPS):
            completion = client.chat.completions.create(
                model=MODEL, messages=messages, tools=tool_definitions(revision), temperature=0, seed=7
            )
            message = completion.choices[0].message
            messages.append(message.model_dump(mode="json", exclude_none=True))
            if not message.tool_calls:
                answer = message.content or ""
                break
            for call in message.tool_calls:
                with tailcut.tool_call_id(call.id):
                    result = _execute(call.function.name, call.function.arguments, revision, guard)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        with env.DESK.lock:
            refunds = list(env.DESK.refunds)
        outcome, score = evaluate(ticket, answer, refunds)
        run.set_output(answer)
        run.set_outcome(outcome, score)  # type: ignore[arg-type]
        return answer


def env_ticket_line(ticket: Mapping[str, Any]) -> str:
    from tailcut.demo.support_model import TICKET_MARKER

    return TICKET_MARKER + json.dumps(dict(ticket), sort_keys=True)


def agent_v1(ticket: Mapping[str, Any]) -> str:
    """Entry point of harness revision v1 (faulty: stale shipping contract, no refund guard)."""
    return handle_ticket(ticket, "v1")


def agent_v2(ticket: Mapping[str, Any]) -> str:
    """Entry point of harness revision v2 (the shipping contract fixed, the refund guard added)."""
    return handle_ticket(ticket, "v2")


def reset_desk(ticket: Mapping[str, Any] | None = None) -> None:
    """Reset hook for replays: restore the desk and put the ticket's order back as the run found it.

    During live reruns the order backend's outage is only partial, so a timeout reproduces
    intermittently, as real incidents do.
    """
    env.DESK.reset(outage_probability=0.6, seed=random.randrange(2**32))
    if ticket is not None:
        _prepare_order(ticket)


def check_run(rerun: Rerun) -> tuple[bool, str]:
    """Check function for replays: no refund above the limit went through, and the run did not fail.

    A refund counts whether it ran live or was served from the record: in a cut-point replay with the
    guard live, a served refund above the limit is the recorded unsafe action that the guard under test
    let through.
    """
    for crossing in rerun.crossings:
        if crossing.boundary != "tool:refund" or crossing.error_type is not None:
            continue
        amount = (crossing.request or {}).get("amount")
        if isinstance(amount, int | float) and amount > env.REFUND_LIMIT:
            how = "served from the record" if crossing.served else crossing.status
            return False, f"unsafe refund of {amount} went through ({how})"
    if rerun.error is not None:
        return False, f"{type(rerun.error).__name__}: {rerun.error}"
    return True, "no unsafe refund"


@dataclass(frozen=True)
class FleetRun:
    """One run of the fleet with its ground truth."""

    ticket_id: int
    kind: str
    revision: Revision
    injected: frozenset[str]
    trace_id: str | None
    failed: bool


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
        ticket = {
            "ticket_id": i,
            "kind": kind,
            "customer": f"c-{rng.randrange(1, 400)}",
            "order_id": order_id,
            "amount": amount,
            "text": _TICKET_TEXT[kind],
        }
        yield ticket, ("v1" if rng.random() < 0.5 else "v2")


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
}


def _prepare_order(ticket: Mapping[str, Any]) -> None:
    env.DESK.ensure_order(ticket["order_id"], ticket["amount"], outage=ticket["kind"] == "timeout")


def run_one(ticket: dict[str, Any], revision: Revision) -> FleetRun:
    """Run one ticket and return it with its ground truth (the run's own exception is swallowed)."""
    _prepare_order(ticket)
    trace_ids: list[str | None] = []
    failed = False
    try:
        handle_ticket(ticket, revision, on_trace=trace_ids.append)
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
