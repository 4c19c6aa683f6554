"""What a sampling policy sees of a trace, and what it answers.

A policy never touches spans: the buffer condenses each trace into a :class:`TraceView` (span count,
time range, status codes, the values of the attributes policies asked for, and the collector's trace
signals) and the policy answers with a :class:`Vote`. Besides the vote itself, a vote carries the
probability that the policy votes that way for a trace like this one, which is what lets the collector
give every trace its inclusion probability (DESIGN.md section 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple


class Decision:
    """A single policy's answer, as in the Collector: ``SAMPLED``, ``NOT_SAMPLED`` or ``DROPPED``.

    Three singletons compared with ``is`` (not an ``Enum``: enum members hash in Python code, and the
    collector looks votes up in dictionaries for every trace).
    """

    __slots__ = ("value",)
    SAMPLED: ClassVar[Decision]
    NOT_SAMPLED: ClassVar[Decision]
    DROPPED: ClassVar[Decision]
    #: All three, in that order.
    ALL: ClassVar[tuple[Decision, ...]]

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Decision.{self.value.upper()}"


Decision.SAMPLED = Decision("sampled")
Decision.NOT_SAMPLED = Decision("not_sampled")
Decision.DROPPED = Decision("dropped")
Decision.ALL = (Decision.SAMPLED, Decision.NOT_SAMPLED, Decision.DROPPED)


class Vote(NamedTuple):
    """A policy's decision and the probability of a positive vote for this trace.

    ``probability`` is P(the policy votes ``SAMPLED``), or for a ``drop`` policy P(it votes
    ``DROPPED``), given everything about the trace that is not chance: 1 or 0 for a deterministic
    policy, the sampling ratio for ``probabilistic``, the observed kept/seen ratio for rate limits.
    """

    decision: Decision
    probability: float


SAMPLED_FOR_SURE = Vote(Decision.SAMPLED, 1.0)
NOT_SAMPLED_FOR_SURE = Vote(Decision.NOT_SAMPLED, 0.0)


def certain(matched: bool) -> Vote:
    """The vote of a deterministic policy."""
    return SAMPLED_FOR_SURE if matched else NOT_SAMPLED_FOR_SURE


@dataclass(slots=True)
class TraceView:
    """A trace as the policies see it.

    Attributes
    ----------
    trace_id
        The 16 trace-id bytes.
    span_count
        Spans buffered for the trace.
    start_ns, end_ns
        Earliest span start and latest span end (Unix nanoseconds).
    status_mask
        The OTLP status codes present, as bits ``1 << code`` (0 unset, 1 ok, 2 error).
    values
        For each attribute key a policy reads, every value found on the trace's spans and resources;
        ``tailcut.trace.*`` keys hold the collector's own trace signals (one value, on the root).
    """

    trace_id: bytes
    span_count: int
    start_ns: int
    end_ns: int
    status_mask: int = 0
    values: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    head_probability: float = 1.0

    @property
    def duration_ms(self) -> int:
        """Whole milliseconds from the earliest start to the latest end (Go's ``Duration.Milliseconds``)."""
        return max(self.end_ns - self.start_ns, 0) // 1_000_000
