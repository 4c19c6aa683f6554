"""The canary: corrupt one stored response and confirm the recorded replay notices.

A recorded replay is green by construction, so green alone proves nothing: it would be just as green if
the agent re-derived everything and ignored the record (seed ``000_665ba71824ebdc6b.txt``). The canary
picks a recorded response that *feeds a later boundary* (one of its values reappears in a later recorded
request: a tool-call id, the arguments of a call, an order the model read), changes that value in memory,
and replays once. A replay that follows the trace sends the changed value onward and diverges, or ends
differently from a clean replay; one that does not is not following the trace.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tailcut.canonical import canonical_json, loads
from tailcut.replay._corpus import Envelope
from tailcut.replay._rerun import Rerun

_MIN_STRING: Final = 4
_MIN_NUMBER_DIGITS: Final = 3
_MARK: Final = "canary:"
_SHOWN_CHARS: Final = 40


@dataclass(frozen=True)
class CanaryPlan:
    """Which recorded response the canary corrupts, and the envelopes with it corrupted."""

    trace_id: str
    target: Envelope
    value: Any
    envelopes: tuple[Envelope, ...]

    @property
    def description(self) -> str:
        value = (
            self.value if not isinstance(self.value, str) or len(self.value) <= 40 else self.value[:37] + "…"
        )
        return f"{self.target.key} of trace {self.trace_id} (value {json.dumps(value, ensure_ascii=False)})"


@dataclass(frozen=True)
class CanaryResult:
    """What the canary found. ``caught`` is None when no recorded response feeds a later boundary."""

    caught: bool | None
    detail: str
    plan: CanaryPlan | None = None

    @property
    def failed(self) -> bool:
        """True when the corrupted replay went on as if nothing happened."""
        return self.caught is False

    def __str__(self) -> str:
        return self.detail


def plan_canary(trace_id: str, envelopes: Sequence[Envelope]) -> CanaryPlan | None:
    """The first recorded response that introduces a value a later request carries on, corrupted.

    Of such values in a response, the longest is corrupted (an id or a text, rather than a role).

    A value already in this crossing's request or an earlier one (the model name, say) is not
    introduced by the response: the agent may send it again without reading the response at all. Values
    are looked for among the *values* of the requests (inside their strings too), never their keys: a
    finish reason ``tool_calls`` is not carried on by a request that has a ``tool_calls`` field.
    """
    ordered = sorted(envelopes, key=lambda e: e.seq)
    for i, envelope in enumerate(ordered):
        payload_text = envelope.stream_events or envelope.response
        if envelope.error_type is not None or payload_text is None:
            continue
        earlier = _values(ordered[: i + 1])
        later = _values(ordered[i + 1 :])
        if not later:
            break
        # the most distinctive first: an id or a text the agent passes on, not a role both sides spell
        candidates = sorted(_leaves(loads(payload_text)), key=lambda v: -len(_token(v)))
        for value in candidates:
            token = _token(value)
            if token in later and token not in earlier:
                corrupted = _corrupt(envelope, value)
                replaced = tuple(corrupted if e is envelope else e for e in ordered)
                return CanaryPlan(trace_id, envelope, value, replaced)
    return None


def judge_canary(plan: CanaryPlan, clean: Rerun, corrupted: Rerun) -> CanaryResult:
    """Caught when the corrupted replay diverged, or ended, differently from a clean replay.

    Inconclusive (``caught`` None) when the corrupted response was never served: the replay left the
    trace before reaching it, which the clean replay's own divergences already show.
    """
    what = f"canary: corrupted {plan.description}"
    reached = any(c.served and c.recorded == plan.target.key for c in corrupted.crossings)
    if not reached:
        first = clean.first_divergence
        why = f"; the clean replay already diverges: {first}" if first else ""
        return CanaryResult(None, f"{what}; inconclusive: the replay never served it{why}", plan)
    if [str(d) for d in corrupted.divergences] != [str(d) for d in clean.divergences]:
        first = next(d for d in corrupted.divergences if str(d) not in {str(c) for c in clean.divergences})
        return CanaryResult(True, f"{what}; the recorded replay diverged: {first}", plan)
    if _ending(clean) != _ending(corrupted):
        return CanaryResult(True, f"{what}; the recorded replay ended differently from a clean one", plan)
    return CanaryResult(
        False,
        f"CANARY FAILED: corrupting {plan.description} changed nothing: the replay is not following the "
        "trace (the agent does not use the recorded responses it is served)",
        plan,
    )


def _ending(rerun: Rerun) -> tuple[Any, ...]:
    try:
        output = canonical_json(rerun.output)
    except Exception:
        output = repr(rerun.output)
    requests = [(c.boundary, c.request_sha256) for c in rerun.crossings]
    return output, rerun.error_text, rerun.outcome, requests


def _leaves(value: Any) -> Iterator[Any]:
    """Strings and numbers distinctive enough that finding them later means they were passed on."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        if len(value.strip()) >= _MIN_STRING:
            yield value
    elif (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and len(str(abs(value)).replace(".", "")) >= _MIN_NUMBER_DIGITS
    ):
        yield value


def _values(envelopes: Sequence[Envelope]) -> str:
    """Every leaf value of the envelopes' requests, as canonical JSON, one per line."""
    return "\n".join(
        canonical_json(leaf)
        for e in envelopes
        if e.request is not None
        for leaf in _all_leaves(loads(e.request))
    )


def _all_leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _all_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _all_leaves(item)
    else:
        yield value


def _token(value: Any) -> str:
    """How ``value`` appears inside canonical JSON text (a string without its quotes)."""
    text = canonical_json(value)
    return text[1:-1] if isinstance(value, str) else text


def _corrupt(envelope: Envelope, value: Any) -> Envelope:
    changed = _MARK + value if isinstance(value, str) else value + 1

    def replace(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: replace(v) for k, v in node.items()}
        if isinstance(node, list):
            return [replace(v) for v in node]
        return changed if type(node) is type(value) and node == value else node

    def rewrite(text: str | None) -> str | None:
        return canonical_json(replace(loads(text))) if text is not None else None

    return dataclasses.replace(
        envelope, response=rewrite(envelope.response), stream_events=rewrite(envelope.stream_events)
    )
