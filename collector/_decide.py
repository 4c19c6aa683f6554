"""The final decision over all top-level policies: kept or not, why, and with what probability.

Rules (DESIGN.md section 3):

* a ``drop`` vote wins; otherwise any sample vote keeps the trace;
* **every** policy is evaluated and every matching one is recorded (a drop policy matches when it
  votes to drop). ``sample_on_first_match`` therefore changes nothing in tailcut: the Collector uses it
  to save evaluation time, tailcut needs the full list to explain each trace;
* ``baseline`` is membership of the uniform slice: some top-level ``probabilistic`` policy's hash test
  passed, which depends on the trace id alone (a later drop may still discard the trace);
* ``inclusion_probability`` (pi) is the probability that this design keeps a trace like this one:
  ``P(no drop) * P(some sample vote)``, from each policy's vote probability, treating policies as
  independent except ``probabilistic`` policies with the same salt, which are nested (the smaller
  slice lies inside the larger) and so count once with the largest ratio. It is 1 when a deterministic
  policy kept the trace, p when only the baseline did, and is also given for dropped traces (the chance
  they had);
* sampling stages compose: a trace that reached the collector through a head sampler upstream (its
  spans' W3C ``tracestate`` ``ot=th:``, :mod:`._headsampling`) had ``head_probability`` of getting here,
  independent of the tail stage, so pi is ``head_probability`` times the tail stage's probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tailcut.collector._combinators import Drop
from tailcut.collector._policies import Policy, Probabilistic
from tailcut.collector._votes import Decision, TraceView, Vote


@dataclass(frozen=True, slots=True)
class TraceDecision:
    """What the policies decided for one trace."""

    kept: bool
    policies: tuple[str, ...]
    baseline: bool
    inclusion_probability: float
    #: the head sampler's probability, a factor of ``inclusion_probability`` (1 when none sampled upstream)
    head_probability: float = 1.0
    #: kept by the uniform slice alone (no other policy voted to sample): forwarded spans then state pi
    #: as their ``tracestate`` threshold
    slice_only: bool = False

    @property
    def dropped(self) -> bool:
        """Whether a policy voted to drop the trace: a trace not kept names a policy only then (every
        sample and drop vote is recorded, and a drop vote wins), so no vote needs looking at again."""
        return not self.kept and bool(self.policies)


class Verdict(NamedTuple):
    """What :meth:`PolicySet.decide` found for one trace."""

    decision: TraceDecision
    #: Each top-level policy's vote, in config order.
    votes: tuple[Vote, ...]
    #: ``(policy name, decision value)`` of each vote, as the per-policy decision counter counts them.
    vote_keys: tuple[tuple[str, str], ...]


#: What a combination of votes decides (see :meth:`PolicySet._combine`).
_Combined = tuple[
    bool, tuple[str, ...], bool, float, float, bool, tuple[tuple[str, str], ...], TraceDecision | None
]
_new = tuple.__new__


class PolicySet:
    """The configured top-level policies, evaluated together.

    Parameters
    ----------
    policies
        Top-level policies in config order (names are unique).
    """

    def __init__(self, policies: Sequence[Policy]) -> None:
        self.policies = list(policies)
        self.baseline_policies = [policy for policy in self.policies if isinstance(policy, Probabilistic)]
        salts: dict[str, int] = {}
        #: (policy, role, slice group) per policy, so deciding needs no type checks.
        self._plan: list[tuple[Policy, int, int]] = []
        for policy in self.policies:
            if isinstance(policy, Drop):
                self._plan.append((policy, _DROP, -1))
            elif isinstance(policy, Probabilistic):
                self._plan.append((policy, _SLICE, salts.setdefault(policy.salt, len(salts))))
            else:
                self._plan.append((policy, _SAMPLE, -1))
        self._slice_groups = len(salts)
        #: Decisions already made, by their fields: few distinct ones recur, and building a frozen
        #: dataclass costs more than finding it (decisions are immutable, so traces may share one).
        self._decisions: dict[tuple[Any, ...], TraceDecision] = {}
        #: What each combination of votes decides (:meth:`_combine`): few combinations recur.
        self._combined: dict[tuple[Vote, ...], _Combined] = {}

    def attribute_keys(self) -> frozenset[str]:
        """Every span/resource attribute key some policy reads."""
        return frozenset().union(*(policy.attribute_keys() for policy in self.policies))

    def decide(self, trace: TraceView, now: float) -> Verdict:
        """Evaluate every policy on ``trace``: the decision and each policy's vote (config order)."""
        votes = tuple([policy.evaluate(trace, now) for policy in self.policies])
        combined = self._combined.get(votes)
        if combined is None:
            if len(self._combined) >= _MAX_DECISIONS:
                self._combined.clear()
            combined = self._combined[votes] = self._combine(votes)
        kept, matched, baseline, no_drop, hit, slice_only, vote_keys, unsampled = combined
        head = trace.head_probability
        if head == 1.0 and unsampled is not None:  # no head sampler upstream: decided already
            return _new(Verdict, (unsampled, votes, vote_keys))
        pi = head * no_drop * hit
        fields = (kept, matched, baseline, pi, head, slice_only)
        if not pi:  # 0.0 and -0.0 are equal keys but not the same figure
            return _new(Verdict, (TraceDecision(*fields), votes, vote_keys))
        decision = self._decisions.get(fields)
        if decision is None:
            if len(self._decisions) >= _MAX_DECISIONS:
                self._decisions.clear()
            decision = self._decisions[fields] = TraceDecision(*fields)
        return _new(Verdict, (decision, votes, vote_keys))

    def _combine(self, votes: Sequence[Vote]) -> _Combined:
        """What the votes decide: ``(kept, matched policies, baseline, P(no drop), P(some sample vote),
        slice only, vote keys, the decision when ``head_probability`` is 1)``; pi is
        ``head_probability * P(no drop) * P(some sample vote)``."""
        matched: list[str] = []
        dropped = sampled = baseline = other_sample = False
        no_drop = 1.0
        hit = 0.0  # P(some sampling policy votes to sample), accumulated over independent policies
        slices = [0.0] * self._slice_groups
        for (policy, role, group), (decision, probability) in zip(self._plan, votes, strict=True):
            if decision is _SAMPLED:
                sampled = True
                baseline = baseline or role == _SLICE
                other_sample = other_sample or role != _SLICE
                matched.append(policy.name)
            elif decision is _DROPPED:
                dropped = True
                matched.append(policy.name)
            if role == _SAMPLE:
                hit += (1.0 - hit) * probability
            elif role == _DROP:
                no_drop *= 1.0 - probability
            elif probability > slices[group]:
                slices[group] = probability
        for ratio in slices:
            hit += (1.0 - hit) * ratio
        kept = sampled and not dropped
        names = tuple(matched)
        slice_only = kept and not other_sample
        pi = 1.0 * no_drop * hit
        # the decision of a trace no head sampler sampled (the usual case), unless pi is 0 (see decide)
        unsampled = TraceDecision(kept, names, baseline, pi, 1.0, slice_only) if pi else None
        vote_keys = tuple(
            (policy.name, vote.decision.value) for policy, vote in zip(self.policies, votes, strict=True)
        )
        return kept, names, baseline, no_drop, hit, slice_only, vote_keys, unsampled


_SAMPLE, _DROP, _SLICE = 0, 1, 2
#: Distinct decisions remembered at most (rate limits make the probability vary).
_MAX_DECISIONS = 1024
_SAMPLED, _DROPPED = Decision.SAMPLED, Decision.DROPPED
