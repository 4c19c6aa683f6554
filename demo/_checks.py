"""What a rerun of the support agent must not do: one property per incident kind the fleet records.

Each property reads the rerun's crossings (and its input and answer) and returns what went wrong, or
None. A property judges only what the code under test decided. In a cut-point replay a boundary that is
served answers as recorded, so a failure it lets through is the record replaying itself, not evidence
about the new code: a refund the *served* guard allowed, a form the *served* router sent on, arguments
a *served* model call chose, an answer a served model wrote, returns a served retriever gave are not
judged. Harness code always runs (the retry policy, the tool list, the prompt sent), so what it decides
is always judged. A test that serves the boundary a fix changed therefore passes the old code too, and
``tailcut validate`` reports it as not exercising the change instead of as resolved.

==========================  ==============================================  ==============================
property                    fails when                                      decided by
==========================  ==============================================  ==============================
:func:`unsafe_refund`       a refund above the limit went through           the guard (unless served)
:func:`misrouted_form`      a form did not reach the tool its action needs  the router (unless served)
:func:`stale_contract`      ``update_shipping`` was sent arguments its      the model call before it
                            service's current contract refuses              (unless served)
:func:`repeated_rejection`  a tool was called again with the same           the harness's retry policy
                            arguments after a non-transient rejection
:func:`missing_field`       a warranty answer does not quote the order      the final model call (unless
                            number                                          served)
:func:`stale_state`         the model was not shown a return as the ledger  the returns retriever (unless
                            holds it now                                    served)
:func:`crashed`             the rerun raised what its record did not        the code that raised
==========================  ==============================================  ==============================
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from tailcut.demo import support_env as env
from tailcut.interceptor import exception_type_name

if TYPE_CHECKING:
    from tailcut.replay import Rerun
    from tailcut.replay._session import ReplayedCrossing

#: Errors worth retrying: a retry of one of these is not a loop.
TRANSIENT_ERRORS: Final = frozenset({exception_type_name(env.BackendTimeout())})


def _decided_live(decider: ReplayedCrossing | None) -> bool:
    """Whether the code under test made the decision: the deciding crossing ran live, or none was made
    (the harness acted without asking)."""
    return decider is None or not decider.served


def _amount(crossing: ReplayedCrossing) -> float | None:
    amount = (crossing.request or {}).get("amount")
    return float(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) else None


def unsafe_refund(rerun: Rerun) -> str | None:
    """A refund above the limit went through (served or live), on a guard decision the rerun made."""
    guard = None
    for crossing in rerun.crossings:
        if crossing.boundary == "router:refund_guard":
            guard = crossing
        elif crossing.boundary == "tool:refund" and crossing.error_type is None:
            amount = _amount(crossing)
            if amount is not None and amount > env.REFUND_LIMIT and _decided_live(guard):
                how = "served from the record" if crossing.served else crossing.status
                return f"unsafe refund of {amount} went through ({how})"
    return None


def misrouted_form(rerun: Rerun) -> str | None:
    """A form ticket did not reach the tool its action needs (v2's route table is the specification)."""
    form = (rerun.input or {}).get("form") if isinstance(rerun.input, dict) else None
    if not form:
        return None
    action = form.get("action")
    wanted = f"tool:{env.ROUTES_V2.get(action, '?')}"
    router = next((c for c in rerun.crossings if c.boundary == "router:triage"), None)
    if not _decided_live(router):
        return None
    if router is not None and router.error_type is not None:
        return f"the router could not route the {action} form ({router.error_type.rsplit('.', 1)[-1]})"
    after = [
        c.boundary for c in rerun.crossings if c.kind == "tool" and (router is None or c.seq > router.seq)
    ]
    if wanted not in after:
        return f"the {action} form went to {after[0] if after else 'no tool'}, not {wanted}"
    return None


def stale_contract(rerun: Rerun) -> str | None:
    """``update_shipping`` was sent arguments the shipping service's current contract refuses."""
    model = None
    for crossing in rerun.crossings:
        if crossing.kind == "llm":
            model = crossing
        elif crossing.boundary == "tool:update_shipping" and _decided_live(model):
            arguments = {k: v for k, v in (crossing.request or {}).items() if v is not None}
            problem = env.schema_problem(env.SHIPPING_SCHEMA_V2, arguments)
            if problem is not None:
                return f"update_shipping was sent arguments its current contract refuses ({problem})"
    return None


def repeated_rejection(rerun: Rerun) -> str | None:
    """A tool was called again with the same arguments after a rejection no retry changes."""
    last: dict[tuple[str, str | None], ReplayedCrossing] = {}
    for crossing in rerun.crossings:
        if crossing.kind != "tool":
            continue
        key = (crossing.boundary, crossing.request_sha256)
        before = last.get(key)
        if before is not None and before.error_type and before.error_type not in TRANSIENT_ERRORS:
            rejected = before.error_type.rsplit(".", 1)[-1]
            return f"{crossing.boundary} was called again with the same arguments after {rejected}"
        last[key] = crossing
    return None


def missing_field(rerun: Rerun) -> str | None:
    """A warranty answer, written by a live model call, does not quote the ticket's order number."""
    ticket = rerun.input if isinstance(rerun.input, dict) else {}
    if ticket.get("kind") != "warranty":
        return None
    final = next((c for c in reversed(rerun.crossings) if c.kind == "llm"), None)
    if final is None or final.served:
        return None
    wanted = f"order {ticket.get('order_id')}"
    if wanted not in str(rerun.output or ""):
        return f"the warranty answer does not quote {wanted!r}"
    return None


def _context(request: Any) -> dict[str, Any]:
    """The ticket's context (history, articles, returns) as the model request carries it."""
    for message in (request or {}).get("messages", ()):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") == "user" and isinstance(content, str) and "\n" in content:
            try:
                found = json.loads(content.split("\n", 1)[1])
            except json.JSONDecodeError:
                return {}
            return found if isinstance(found, dict) else {}
    return {}


def stale_state(rerun: Rerun) -> str | None:
    """The model was shown a return otherwise than as the returns ledger holds it now."""
    ticket = rerun.input if isinstance(rerun.input, dict) else {}
    rma = ticket.get("rma")
    retrieved = next((c for c in rerun.crossings if c.boundary == "retriever:returns"), None)
    if rma is None or retrieved is None or retrieved.served:
        return None
    model = next((c for c in rerun.crossings if c.kind == "llm" and c.seq > retrieved.seq), None)
    if model is None:
        return None
    with env.DESK.lock:
        current = env.DESK.returns.get(rma)
    shown = [r for r in _context(model.request).get("returns") or () if r.get("rma") == rma]
    if current is not None and current not in shown:
        return f"the model was not shown return {rma} as the ledger holds it ({current['status']})"
    return None


def crashed(rerun: Rerun) -> str | None:
    """The rerun raised, and not what its record raised (a served failure raised again is the record's)."""
    if rerun.error is None:
        return None
    raised = exception_type_name(rerun.error)
    if raised == rerun.recorded_error_type:
        return None
    return f"the rerun raised {rerun.error_text}" + (
        f" (the record raised {rerun.recorded_error_type})" if rerun.recorded_error_type else ""
    )


#: The properties, in the order the check reports the first that fails.
PROPERTIES: Final[tuple[Callable[[Rerun], str | None], ...]] = (
    unsafe_refund,
    misrouted_form,
    stale_contract,
    repeated_rejection,
    missing_field,
    stale_state,
    crashed,
)


def first_problem(
    rerun: Rerun, properties: Iterable[Callable[[Rerun], str | None]] = PROPERTIES
) -> str | None:
    """The first property ``rerun`` breaks, as its message; None when it breaks none."""
    return next((problem for check in properties if (problem := check(rerun)) is not None), None)
