"""The estimated cost of the model calls a validation will make live, known before any is made.

A cut-point rerun with an ``llm`` boundary live sends every one of that boundary's requests to the
model again. An agent resends its whole transcript at every step, so step k's request holds every
message before it: the cost of a rerun is the sum over its steps of each step's own input and output
tokens, which is exactly what the record holds per ``llm`` span (``input_tokens`` counts the transcript
as it was sent then). The estimate prices each recorded call at the rate of its model in
``pricing.toml`` (:func:`tailcut.exporters._pricing.default_pricing`: the packaged table plus
``$TAILCUT_PRICING``) and multiplies by the reruns planned. It is an estimate: a rerun whose path
changes after the cut can make calls the record does not have.

Examples
--------
>>> from tailcut.exporters._pricing import Pricing
>>> calls = [RecordedCall("t1", "llm:openai.chat", 1, "gpt-4o", 1000, 100),
...          RecordedCall("t1", "llm:openai.chat", 2, "gpt-4o", 1500, 50)]
>>> plan = [PlannedReruns("t1", (LiveSpec("llm:openai.chat"),), 6)]
>>> estimate = estimate_cost(calls, plan, Pricing({"gpt-4o": (2.5, 10.0)}))
>>> estimate.calls, estimate.input_tokens, round(estimate.usd, 4)
(12, 15000, 0.0465)
>>> print(estimate)
estimated cost of the live model calls: $0.0465 for 12 calls (15,000 input + 900 output tokens)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailcut.replay._matching import LiveSpec

if TYPE_CHECKING:
    from tailcut.exporters._pricing import Pricing


@dataclass(frozen=True)
class RecordedCall:
    """One recorded ``llm`` crossing: where it was, the model it asked and the tokens it took."""

    trace_id: str
    boundary: str
    occurrence: int
    model: str | None
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class PlannedReruns:
    """``reruns`` cut-point reruns of ``trace_id`` with the ``live`` boundaries running live."""

    trace_id: str
    live: tuple[LiveSpec, ...]
    reruns: int


@dataclass(frozen=True)
class CostEstimate:
    """What the planned reruns' live model calls cost, from the record.

    ``usd`` is None when a model called has no price (``unpriced`` names them; ``priced_usd`` is what the
    priced calls alone cost).
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    priced_usd: float = 0.0
    unpriced: tuple[str, ...] = ()

    @property
    def usd(self) -> float | None:
        return None if self.unpriced else self.priced_usd

    def over(self, limit: float) -> bool:
        """Whether the estimate may exceed ``limit`` USD (an unknown price may)."""
        return self.calls > 0 and (self.usd is None or self.usd > limit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "usd": self.usd,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "unpriced_models": list(self.unpriced),
        }

    def __str__(self) -> str:
        if not self.calls:
            return "no model call runs live (every llm boundary is served from the record)"
        tokens = f"{self.calls:,} calls ({self.input_tokens:,} input + {self.output_tokens:,} output tokens)"
        if self.usd is None:
            return (
                f"estimated cost of the live model calls: unknown for {tokens}: "
                f"{', '.join(self.unpriced)} has no price in pricing.toml (set TAILCUT_PRICING to a "
                "pricing file that lists it)"
            )
        return f"estimated cost of the live model calls: ${self.usd:.4f} for {tokens}"


def estimate_cost(
    recorded: Iterable[RecordedCall], plan: Iterable[PlannedReruns], pricing: Pricing
) -> CostEstimate:
    """The cost of the recorded calls each planned rerun makes live, over every rerun planned."""
    by_trace: dict[str, list[RecordedCall]] = {}
    for call in recorded:
        by_trace.setdefault(call.trace_id, []).append(call)
    calls = input_tokens = output_tokens = 0
    usd = 0.0
    unpriced: dict[str, None] = {}
    for planned in plan:
        for call in by_trace.get(planned.trace_id, ()):
            if not any(spec.matches(call.boundary, call.occurrence) for spec in planned.live):
                continue
            calls += planned.reruns
            input_tokens += (call.input_tokens or 0) * planned.reruns
            output_tokens += (call.output_tokens or 0) * planned.reruns
            cost = pricing.cost(call.model, call.input_tokens, call.output_tokens)
            if cost is None:
                unpriced[call.model or "(no model)"] = None
            else:
                usd += cost * planned.reruns
    return CostEstimate(calls, input_tokens, output_tokens, usd, tuple(unpriced))
