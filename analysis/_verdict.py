"""The regression verdict of ``tailcut compare``: per category, with the family-wise error rate held.

A verdict rests on the *representative* difference of one failure category from group A to group B: the
census rates when the category is a census category (every trace seen counted from its ``traces`` row,
:mod:`._census`: an exact count, and a test about the process producing traces), else the population rates
(kept traces weighted by 1/π over every trace seen) when both groups have one, else the baseline slice.
Each category is one test of "no change" (Newcombe's interval inverted into a p-value); for a census whose
2×2 table has an expected count under 5 (:data:`~.stats.EXACT_BELOW`: few failures, or few traces) the
normal approximation behind that interval fails, and an exact test decides instead: Boschloo's, or
Fisher's for large groups (:func:`~.stats.exact_rise`), one-sided in the direction of a regression, so
such a category is a ``regression`` or ``no evidence``, never an ``improvement``. Each verdict names its
``test``. The six categories are one family, so their p-values are adjusted with **Holm's step-down
method** (Holm, 1979): sorted ascending, the i-th smallest of m is multiplied by ``m − i + 1`` and the
running maximum taken. A category whose adjusted p-value is at most ``1 − confidence`` is a ``regression``
(rate up) or an ``improvement`` (rate down). Under no change in any category, the chance that any one says
``regression`` or ``improvement`` is then at most ``1 − confidence`` (5% by default), where six unadjusted
95% tests would give about one false alarm in four.

Each category's census, population and baseline-slice intervals are shown at its Holm step's level,
``1 − α/(m − i + 1)`` for the i-th smallest p-value, so an interval that excludes 0 is the test that
rejected (unless a smaller p-value before it failed its own step, which stops Holm's procedure). A
change seen only among tail-kept traces (the tail interval, at the nominal level ``confidence``, excludes
0) is ``confined to tail sample``: a warning that it may come from which traces the tail policies kept
rather than from the agent, never a claim of change, so it is not adjusted. Anything else is
``no evidence``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from scipy import special

from tailcut.analysis import stats

VerdictLabel = Literal["regression", "improvement", "no evidence", "confined to tail sample"]
#: The test behind a verdict's p-value: Newcombe's interval inverted, or an exact one for small counts.
TestName = Literal["newcombe", "boschloo", "fisher"]
#: Every verdict label, in the order a reader meets them (``tailcut compare --fail-on`` takes these).
VERDICT_LABELS: Final[tuple[VerdictLabel, ...]] = (
    "regression",
    "improvement",
    "confined to tail sample",
    "no evidence",
)
#: The family-wise method, as the output names it.
ADJUSTMENT: Final = "holm"
#: Largest z searched when inverting an interval into a p-value (p ≈ 1e-15 beyond it).
_Z_MAX: Final = 8.0
#: Bisection steps on z: 8 / 2**32, far finer than any p-value is read.
_BISECTIONS: Final = 32


@dataclass(frozen=True)
class PopulationSample:
    """One group's kept traces as a 1/π population rate needs them (an entry per kept trace, or per set of
    alike ones with ``repeats``).

    Attributes
    ----------
    hits : sequence of bool
        Whether each kept trace shows the category.
    inclusion_probability : sequence of float
        Each kept trace's π.
    size : int
        Traces seen in the group, kept or dropped (N).
    repeats : sequence of int, optional
        How many kept traces each entry stands for (default: one each).
    """

    hits: Sequence[bool]
    inclusion_probability: Sequence[float]
    size: int
    repeats: Sequence[int] | None = None

    @functools.cached_property
    def _rate(self) -> stats.HorvitzThompsonRate:
        """The sums over the kept traces, once: a p-value asks for the rate at many levels."""
        hits = np.asarray(self.hits, dtype=np.float64)
        return stats.HorvitzThompsonRate.of(hits, self.inclusion_probability, self.size, repeats=self.repeats)

    def estimate(self, confidence: float = stats.DEFAULT_CONFIDENCE) -> stats.Estimate:
        """The Horvitz–Thompson rate with N known (:func:`~.stats.horvitz_thompson_proportion`)."""
        return self._rate.estimate(confidence)


@dataclass(frozen=True)
class GroupCounts:
    """One group's counts of one failure category, in the samples a verdict needs.

    Attributes
    ----------
    baseline_hits, baseline_n : int
        Baseline-slice traces showing the category, and baseline-slice traces in all.
    tail_hits, tail_n : int
        Tail-kept traces (kept by a deterministic policy) showing the category, and tail-kept traces in all.
    population : PopulationSample or None
        The group's kept traces for the population rate (1/π weighted over the traces seen), when known.
    census : CensusCount or None
        Every trace seen counted (a census category, :mod:`._census`); then the verdict rests on it.

    A sample may be empty (0 traces): its difference is then not computed, and a verdict rests on the
    samples that remain, never an error.
    """

    baseline_hits: int
    baseline_n: int
    tail_hits: int
    tail_n: int
    population: PopulationSample | None = None
    census: CensusCount | None = None


@dataclass(frozen=True)
class CensusCount:
    """One group's census of one category: the traces seen that show it, of all seen (kept or dropped).

    The count is exact; the interval and the test are about the process producing traces (Wilson's
    interval on ``n``, Newcombe's for the difference): the group's traces are a sample of what its
    harness revision produces. ``head_probability`` below 1: the census is of the traces a head sampler
    upstream passed on (a uniform sample of the traffic, so the rate is still the traffic's).
    """

    hits: int
    n: int
    head_probability: float = 1.0


@dataclass(frozen=True)
class Verdict:
    """Whether one failure category got worse from group A to group B, with the evidence for it.

    Attributes
    ----------
    category : str
        The failure category.
    label : str
        ``"regression"``, ``"improvement"``, ``"no evidence"`` or ``"confined to tail sample"``.
    baseline : Difference or None
        B − A among baseline-slice traces (the uniform sample alone); None when a group has none.
    tail : Difference or None
        B − A among tail-kept traces; None when a group has none.
    reason : str
        The rule that fired, in words.
    population : Difference or None
        B − A of the population rates (1/π weighted over the traces seen), when both groups had one:
        then the verdict rests on it rather than on the baseline slice alone.
    census : Difference or None
        B − A of the census rates (every trace seen counted), for a census category: the verdict rests on
        it first.
    p_value : float or None
        p-value of "no change" from the representative difference (census, else population, else
        baseline): two-sided from its interval, or one-sided (a rise) from the exact test of ``test``;
        None for a verdict made from 95% intervals alone (``compare --results``).
    adjusted_p_value : float or None
        ``p_value`` after Holm's adjustment over the categories compared together.
    confidence : float
        The level of the population and baseline-slice intervals (Holm's step for this category); the
        tail-kept interval is at the nominal level.
    test : str
        The test behind ``p_value``: ``"newcombe"`` (the interval inverted), or for a census with an
        expected count under 5, ``"boschloo"`` or ``"fisher"`` (exact, one-sided).
    """

    category: str
    label: VerdictLabel
    baseline: stats.Difference | None
    tail: stats.Difference | None
    reason: str
    population: stats.Difference | None = None
    p_value: float | None = None
    adjusted_p_value: float | None = None
    confidence: float = stats.DEFAULT_CONFIDENCE
    census: stats.Difference | None = None
    test: TestName = "newcombe"

    @property
    def representative(self) -> stats.Difference | None:
        """The difference the verdict rests on: census, else population, else baseline slice (or None)."""
        for difference in (self.census, self.population, self.baseline):
            if difference is not None:
                return difference
        return None

    @property
    def estimate(self) -> str | None:
        """Which difference the verdict rests on: ``census``, ``population``, ``baseline slice`` or None."""
        names = ("census", "population", "baseline slice")
        found = (self.census, self.population, self.baseline)
        return next((name for name, d in zip(names, found, strict=True) if d is not None), None)

    def __str__(self) -> str:
        parts = [f"{self.category}: {self.label}"]
        for name, difference in (
            ("census", self.census),
            ("population", self.population),
            ("baseline slice", self.baseline),
            ("tail-kept", self.tail),
        ):
            if difference is not None or name in ("baseline slice", "tail-kept"):
                parts.append(f"{name} {difference if difference is not None else '-'}")
        return "; ".join(parts)


def decide(
    representative: stats.Difference | None,
    tail: stats.Difference | None,
    name: str = "baseline-slice",
) -> tuple[VerdictLabel, str]:
    """The rule for one test at its level: the representative interval first, then the tail-kept one.

    1. ``regression`` if the representative interval lies wholly above 0;
    2. ``improvement`` if it lies wholly below 0;
    3. otherwise ``confined to tail sample`` if the tail interval excludes 0;
    4. otherwise ``no evidence``.

    Examples
    --------
    >>> change = stats.newcombe_difference(60, 500, 40, 500, sample="baseline slice")
    >>> decide(change, change)
    ('regression', 'the baseline-slice interval lies above 0')
    """
    if representative is not None and representative.low > 0:
        return "regression", f"the {name} interval lies above 0"
    if representative is not None and representative.high < 0:
        return "improvement", f"the {name} interval lies below 0"
    if tail is not None and tail.excludes_zero:
        return (
            "confined to tail sample",
            f"the tail-kept interval excludes 0 but the {name} interval contains it",
        )
    if representative is None:
        return "no evidence", "no sample represents both groups' traffic"
    return (
        "no evidence",
        "both intervals contain 0" if tail is not None else f"the {name} interval contains 0",
    )


def p_value(interval_at: Callable[[float], stats.Difference]) -> float:
    """The two-sided p-value of "no difference" got by inverting a family of intervals.

    ``interval_at(confidence)`` returns the difference's interval at that level; the intervals widen
    with the level, so the p-value is ``1 − c*`` for the level c* at which the interval just touches 0
    (found by bisection on the normal quantile).

    Examples
    --------
    >>> p = p_value(lambda c: stats.newcombe_difference(60, 500, 40, 500, sample="baseline slice",
    ...                                                  confidence=c))
    >>> 0.03 < p < 0.05
    True
    """
    if interval_at(stats.DEFAULT_CONFIDENCE).value == 0:
        return 1.0

    def excludes(z: float) -> bool:
        return interval_at(_confidence(z)).excludes_zero

    if excludes(_Z_MAX):
        return _p_of(_Z_MAX)
    low, high = 1e-6, _Z_MAX  # the interval excludes 0 at `low` (if at all) and contains it at `high`
    if not excludes(low):
        return 1.0
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if excludes(middle):
            low = middle
        else:
            high = middle
    return _p_of(high)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def compare_groups(
    first: Mapping[str, GroupCounts],
    second: Mapping[str, GroupCounts],
    *,
    confidence: float = stats.DEFAULT_CONFIDENCE,
) -> dict[str, Verdict]:
    """The verdict of every category from group A to group B, family-wise rate held by Holm's method.

    For each category: Newcombe intervals (method 10) for the rate in B minus the rate in A, from the
    baseline-slice counts, the tail-kept counts, when both groups carry a ``population``, the
    population rates (on their effective sizes), and when both carry a ``census``, the census rates
    (every trace seen counted). The representative one (census, else population, else baseline) gives
    the category's p-value (1 when no sample covers both groups: a group without kept traces, a
    baseline slice or a census is still compared, never refused); Holm's adjustment over the categories
    decides ``regression`` and ``improvement`` (see the module docstring); the intervals are reported at
    each category's Holm level.

    Parameters
    ----------
    first : mapping of str to GroupCounts
        Group A (the reference, e.g. the old harness revision), by category.
    second : mapping of str to GroupCounts
        Group B (the candidate), by the same categories.
    confidence : float, default 0.95
        One minus the family-wise error rate.

    Returns
    -------
    dict of str to Verdict
        In the order of ``first``.

    Examples
    --------
    >>> old = {"tool_loop": GroupCounts(baseline_hits=40, baseline_n=1000, tail_hits=30, tail_n=400)}
    >>> new = {"tool_loop": GroupCounts(baseline_hits=44, baseline_n=1000, tail_hits=90, tail_n=410)}
    >>> verdict = compare_groups(old, new)["tool_loop"]
    >>> verdict.label
    'confined to tail sample'
    >>> print(verdict.baseline)
    +0.4 pp [-1.4, +2.2] (4.4% of 1000 vs 4.0% of 1000, baseline slice)
    """
    if set(first) != set(second):
        missing = sorted(set(first) ^ set(second))
        raise stats.StatisticsInputError(f"groups must report the same categories; only one has: {missing}")
    stats.check_confidence(confidence)
    families = {}
    for category, a in first.items():
        b = second[category]
        _check_group_counts(category, "A", a)
        _check_group_counts(category, "B", b)
        families[category] = _Category(a, b)
    alpha = 1 - confidence
    p_values = {c: family.p_value() for c, family in families.items()}
    adjusted = dict(zip(p_values, holm(list(p_values.values())), strict=True))
    ranks = {c: rank for rank, c in enumerate(sorted(p_values, key=p_values.__getitem__))}
    m = len(families)
    verdicts = {}
    for category, family in families.items():
        level = 1 - alpha / (m - ranks[category])
        representative = family.representative(level)
        tail = family.tail(confidence)
        name = family.name
        test = family.test
        if adjusted[category] <= alpha and representative is not None and representative.value != 0:
            label: VerdictLabel = "regression" if representative.value > 0 else "improvement"
            if test != "newcombe":
                reason = f"the exact {test} test finds a rise (Holm-adjusted p = {adjusted[category]:.2g})"
            else:
                side = "above" if label == "regression" else "below"
                reason = f"the {name} interval lies {side} 0 (Holm-adjusted p = {adjusted[category]:.2g})"
        else:
            label, reason = decide(representative, tail, name)
            if label in ("regression", "improvement") and test != "newcombe":
                label, reason = (
                    "no evidence",
                    (
                        f"few counts: the exact one-sided {test} test of a rise decides (Holm-adjusted p = "
                        f"{adjusted[category]:.2g}), not {reason}"
                    ),
                )
            elif label in ("regression", "improvement"):  # Holm stopped at a smaller p-value before it
                label, reason = "no evidence", f"Holm's procedure stopped before this category: {reason}"
        verdicts[category] = Verdict(
            category,
            label,
            family.baseline(level),
            tail,
            reason,
            family.population(level),
            p_value=p_values[category],
            adjusted_p_value=adjusted[category],
            confidence=level,
            census=family.census(level),
            test=test,
        )
    return verdicts


@dataclass(frozen=True)
class _Category:
    """Group A's and B's counts of one category, with B − A at any level (None where a group lacks the
    sample)."""

    a: GroupCounts
    b: GroupCounts

    @property
    def name(self) -> str:
        """The sample the verdict rests on, as its reason names it."""
        if self.a.census is not None and self.b.census is not None:
            return "census"
        if self.a.population is not None and self.b.population is not None:
            return "population"
        return "baseline-slice"

    def census(self, confidence: float) -> stats.Difference | None:
        a, b = self.a.census, self.b.census
        if a is None or b is None or not (a.n and b.n):
            return None
        return stats.newcombe_difference(b.hits, b.n, a.hits, a.n, sample="all traces", confidence=confidence)

    def baseline(self, confidence: float) -> stats.Difference | None:
        a, b = self.a, self.b
        if not (a.baseline_n and b.baseline_n):
            return None
        return stats.newcombe_difference(
            b.baseline_hits,
            b.baseline_n,
            a.baseline_hits,
            a.baseline_n,
            sample="baseline slice",
            confidence=confidence,
        )

    def tail(self, confidence: float) -> stats.Difference | None:
        a, b = self.a, self.b
        if not (a.tail_n and b.tail_n):
            return None
        return stats.newcombe_difference(
            b.tail_hits, b.tail_n, a.tail_hits, a.tail_n, sample="tail-kept", confidence=confidence
        )

    def population(self, confidence: float) -> stats.Difference | None:
        if self.a.population is None or self.b.population is None:
            return None
        return stats.difference(
            self.b.population.estimate(confidence), self.a.population.estimate(confidence)
        )

    def representative(self, confidence: float) -> stats.Difference | None:
        name = self.name
        if name == "census":
            return self.census(confidence)
        if name == "population":
            return self.population(confidence)
        return self.baseline(confidence)

    @functools.cached_property
    def _exact(self) -> stats.ExactTest | None:
        """The exact one-sided test of a rise, for a census with an expected count under 5; else None."""
        a, b = self.a.census, self.b.census
        if self.name != "census" or a is None or b is None or not (a.n and b.n):
            return None
        if stats.smallest_expected_count(b.hits, b.n, a.hits, a.n) >= stats.EXACT_BELOW:
            return None
        return stats.exact_rise(b.hits, b.n, a.hits, a.n)

    @property
    def test(self) -> TestName:
        """The test behind :meth:`p_value`."""
        return self._exact.method if self._exact is not None else "newcombe"

    def p_value(self) -> float:
        """The representative test's p-value: the exact one-sided one for small census counts, else
        two-sided from its interval (1 when no sample covers both groups)."""
        if self._exact is not None:
            return self._exact.p_value
        if self.representative(stats.DEFAULT_CONFIDENCE) is None:
            return 1.0
        return p_value(self.representative)  # type: ignore[arg-type]


def _check_group_counts(category: str, group: str, counts: GroupCounts) -> None:
    """Hits within their total in every sample (a sample may be empty); name the category and group if not."""
    samples = [
        ("baseline-slice", counts.baseline_hits, counts.baseline_n),
        ("tail-kept", counts.tail_hits, counts.tail_n),
    ]
    if counts.census is not None:
        samples.append(("census", counts.census.hits, counts.census.n))
    for sample, hits, total in samples:
        stats.check_count(hits, f"{category}: group {group} {sample} hits", minimum=0)
        stats.check_count(total, f"{category}: group {group} {sample} traces", minimum=0)
        if hits > total:
            raise stats.StatisticsInputError(
                f"{category}: group {group} has {hits} {sample} hits among only {total} {sample} traces"
            )


def _confidence(z: float) -> float:
    return float(special.erf(z / math.sqrt(2)))


def _p_of(z: float) -> float:
    return float(special.erfc(z / math.sqrt(2)))
