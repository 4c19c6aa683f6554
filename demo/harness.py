"""The support agent's two harness revisions, as the six components a fix can change.

Every incident the demo fleet records is a fault in one component of harness v1, fixed in v2, each at
a different layer of the harness; the boundary in the last column is where its trace shows it, so a
cut-point replay there runs the component under test:

==============  ===============================================  ==========================================
component       v1 (faulty) / v2 (fixed)                         ticket kind, boundary of the finding
==============  ===============================================  ==========================================
``guard``       crashes above its last approval tier and the     ``refund_large``: ``error`` at
                harness fails open / refunds above the limit     ``router:refund_guard``
                need a human
``triage``      routes exchange forms to ``refund`` / to         ``exchange``: ``error`` at
                ``exchange_item``                                ``router:triage``
``tools``       shows the shipping tool's old schema / its       ``address_change``: ``schema_drift`` at
                current one                                      ``llm:openai.chat``
``retry``       retries every failed form action 4 times / only  ``cancel_order``: ``tool_loop`` at
                transient ones                                   ``tool:cancel_order``
``prompt``      an edit dropped the rule to quote the order      ``warranty``: ``silent_degradation`` at
                number in warranty answers / keeps it            ``llm:openai.chat``
``returns``     reads the nightly replica of the returns         ``return_status``: ``silent_degradation``
                ledger / the ledger                              at ``retriever:returns``
==============  ===============================================  ==========================================

A :class:`Harness` is a frozen dataclass, so a variant is one ``dataclasses.replace``: the replay
benchmark's mutants are ``replace(HARNESSES["v2"], guard=mutant)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from tailcut.demo import support_env as env

Revision = Literal["v1", "v2"]
#: A refund guard: ``guard(order_id=..., amount=...) -> {"allow": bool, "reason": str}``, a
#: ``@tailcut.router(name="refund_guard")`` function so a cut-point replay can run it live.
Guard = Callable[..., dict[str, Any]]
#: A form router: ``triage(form) -> {"tool": name, "arguments": {...}}``, a ``router:triage`` boundary.
Triage = Callable[[dict[str, Any]], dict[str, Any]]
#: A retry policy for form actions: ``retry(error, attempt) -> bool``, whether to try again after
#: attempt number ``attempt`` failed with ``error``.
RetryPolicy = Callable[[Exception, int], bool]
#: The returns retriever: ``returns(rma) -> [return, ...]``, a ``retriever:returns`` boundary.
Returns = Callable[[str], list[dict[str, Any]]]

PROMPT_RULES_V1: Final = (
    "You are the support desk of an online shop.",
    "Use the tools to look up orders, refund them and change shipping addresses.",
    "Answer briefly and only from the tools' results and the help-center articles.",
)
#: The rule v1's prompt edit dropped, which warranty answers need.
QUOTE_ORDER_RULE: Final = "Quote the order number in every warranty answer."
PROMPT_RULES_V2: Final = (*PROMPT_RULES_V1, QUOTE_ORDER_RULE)


def function_tool(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool definition in the Chat Completions shape."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def tool_definitions(shipping: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The tools as a harness describes them to the model, with ``shipping`` as ``update_shipping``'s."""
    return (
        function_tool("search_kb", "Search the help-center articles.", env.SEARCH_SCHEMA),
        function_tool("lookup_order", "Look up an order by id.", env.LOOKUP_SCHEMA),
        function_tool("refund", "Refund an order.", env.REFUND_SCHEMA),
        function_tool("update_shipping", "Change the shipping address of an order.", shipping),
        function_tool("send_email", "Email the customer.", env.EMAIL_SCHEMA),
    )


def retry_every_error(error: Exception, attempt: int) -> bool:
    """v1: whatever went wrong, try up to 4 times (a rejection is retried like a timeout)."""
    return attempt < 4


def retry_transient(error: Exception, attempt: int) -> bool:
    """v2: only a timeout is worth another try, up to 3 attempts; a rejection stands."""
    return attempt < 3 and isinstance(error, env.BackendTimeout)


@dataclass(frozen=True)
class Harness:
    """One revision of the support agent's harness: the components a fix can change (module docstring)."""

    revision: str
    prompt_version: str
    guard: Guard
    triage: Triage
    tools: tuple[dict[str, Any], ...]
    retry: RetryPolicy
    prompt: str
    returns: Returns


HARNESSES: Final[dict[str, Harness]] = {
    "v1": Harness(
        revision="v1",
        prompt_version="support-prompt-7",
        guard=env.refund_guard_v1,
        triage=env.triage_v1,
        tools=tool_definitions(env.SHIPPING_SCHEMA_V1),
        retry=retry_every_error,
        prompt=" ".join(PROMPT_RULES_V1),
        returns=env.returns_from_replica,
    ),
    "v2": Harness(
        revision="v2",
        prompt_version="support-prompt-8",
        guard=env.refund_guard_v2,
        triage=env.triage_v2,
        tools=tool_definitions(env.SHIPPING_SCHEMA_V2),
        retry=retry_transient,
        prompt=" ".join(PROMPT_RULES_V2),
        returns=env.returns_from_ledger,
    ),
}
