"""Bias-aware statistics: rates with their denominators, from the sample that can support them.

The kept corpus is tail-heavy by design: every failed or anomalous trace is kept, the happy path only
through the uniform baseline slice. A rate computed naively over kept traces therefore measures the
sampling policy as much as the agent. Every estimate here says which sample it came from, and
only three kinds of sample support a population rate:

``"all traces"``
    The ``traces`` table has one row per trace seen, kept or not, so a rate of a trace-level column
    (``error_count > 0``, ``outcome``) is an exact count. Its interval is still reported (see below).
``"baseline slice"``
    Traces whose id fell in the probabilistic policy's hash range. Membership is decided from the trace
    id alone, independently of failure, so the slice is a uniform sample and plain binomial intervals
    hold.
``"kept (1/π weighted)"``
    Quantities that need kept spans (a ``tool_loop`` finding, say) exist only for kept traces. Each kept
    trace stands for ``1/π`` traces of the population (π = its ``inclusion_probability``), so rates are
    Hájek ratios ``Σ y/π / Σ 1/π`` and totals Horvitz–Thompson sums ``Σ y/π``.

``"tail-kept"`` (traces kept by the tail policies, unweighted) is labelled so it can be compared, but it
never stands for the population: ``tailcut compare`` (:mod:`tailcut.analysis._verdict`) reports a change
seen only there as *confined to the tail sample*.

**Which truth an interval is about.** A regression claim is about the process that produces traces (the
agent under a harness revision), not about the particular traces one window happened to see. So the
intervals of :func:`proportion`, :func:`weighted_proportion` and :func:`weighted_mean` are about that
process (a *superpopulation* rate). That is why an exact count from the ``traces`` table still gets a
Wilson interval on its n: the count is exact, the process rate is not. The Horvitz–Thompson functions
answer the other question, "how many of the N traces seen had y": their design-based variance is about
that finite population and is zero for a census (every π = 1).

**Effective sample size.** Wilson intervals for weighted rates are computed on an effective sample size
``n_eff = p̂(1 − p̂) / v̂``, where ``v̂`` is the linearization (sandwich) variance of the Hájek ratio
(the design-effect form of Korn and Graubard, 1998). Kish's ``(Σw)² / Σw²`` is the special case for
weights unrelated to y, and tail sampling is the opposite case: failures are kept with π = 1 and are known
exactly. Under a 5% baseline, Kish's n understates the information about a failure rate by an order of
magnitude, and its intervals (about 3.5 times too wide) cover the true rate in over 99% of draws instead
of 95% (measured in ``tests/test_analysis_stats.py``). Kish's n is the fallback when p̂ is 0 or 1
(where v̂ is 0) and is available as :func:`kish_effective_size`.

Differences of independent rates use Newcombe's hybrid score interval (method 10 of Newcombe, 1998),
and where a count is small (an expected count under 5 in the 2×2 table) an exact one-sided test of a
rise, Boschloo's or Fisher's (:func:`exact_rise`); paired reruns McNemar's test and Newcombe's
paired-data interval, replay outcomes a rate word with their
denominator and mode ("intermittent 3/10 (live)"), never a bare "reproduced".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from tailcut.errors import TailcutError

__all__ = [
    "Difference",
    "Estimate",
    "ExactTest",
    "HorvitzThompsonRate",
    "McNemarTest",
    "StatisticsInputError",
    "ValueEstimate",
    "difference",
    "exact_rise",
    "horvitz_thompson_mean",
    "horvitz_thompson_proportion",
    "horvitz_thompson_total",
    "kish_effective_size",
    "mcnemar",
    "newcombe_difference",
    "paired_difference",
    "proportion",
    "smallest_expected_count",
    "weighted_mean",
    "weighted_proportion",
    "wilson_interval",
]

Sample = Literal["all traces", "baseline slice", "kept (1/π weighted)", "tail-kept"]
#: The samples a plain count can come from; a count of weighted kept traces is not a plain count.
CountSample = Literal["all traces", "baseline slice", "tail-kept"]
Method = Literal["exact", "wilson", "hajek", "horvitz-thompson", "linearization"]
DifferenceMethod = Literal["newcombe", "newcombe-paired"]

WEIGHTED: Final = "kept (1/π weighted)"
DEFAULT_CONFIDENCE: Final = 0.95


class StatisticsInputError(TailcutError, ValueError):
    """A statistic got an argument outside its valid range (counts, weights, probabilities, confidence)."""


# ----------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Estimate:
    """A proportion with its interval, its denominators and the sample it came from.

    Attributes
    ----------
    value : float
        The point estimate, in [0, 1].
    low, high : float
        The interval at ``confidence``: Wilson's score interval on ``n_effective``.
    n : int
        Rows used (traces counted, or kept traces weighted).
    n_effective : float
        The sample size the interval was computed on: ``n`` for plain counts, the design-based effective
        size for weighted rates (see the module docstring).
    successes : float
        Rows with the property; for weighted rates the estimated population count ``Σ w·y``.
    method : str
        ``"exact"`` (whole population counted), ``"wilson"`` (a uniform sample) or ``"hajek"``.
    sample : str
        ``"all traces"``, ``"baseline slice"``, ``"kept (1/π weighted)"`` or ``"tail-kept"``.
    confidence : float
        The interval's confidence level.
    """

    value: float
    low: float
    high: float
    n: int
    n_effective: float
    successes: float
    method: Method
    sample: Sample
    confidence: float = DEFAULT_CONFIDENCE

    def interval(self) -> str:
        """The rate and its interval without the denominator, for a table whose header carries it."""
        return f"{self.value:.1%} [{self.low:.1%}, {self.high:.1%}]"

    def __str__(self) -> str:
        size = f"n={self.n}" if self.method != "hajek" else f"n={self.n}, n_eff={self.n_effective:.0f}"
        return f"{self.interval()} ({size}, {self.sample})"


@dataclass(frozen=True)
class ValueEstimate:
    """A mean or total with its standard error and normal interval.

    Attributes
    ----------
    value, standard_error : float
        The estimate and its estimated standard error.
    low, high : float
        ``value ± z·standard_error`` at ``confidence``.
    n : int
        Rows used.
    n_effective : float
        Kish's effective sample size of the weights (``n`` when all weights are equal).
    method : str
        ``"hajek"`` (weighted mean, linearization variance) or ``"horvitz-thompson"``.
    sample : str
        The sample the rows came from.
    confidence : float
        The interval's confidence level.
    """

    value: float
    standard_error: float
    low: float
    high: float
    n: int
    n_effective: float
    method: Method
    sample: Sample
    confidence: float = DEFAULT_CONFIDENCE

    def __str__(self) -> str:
        return f"{self.value:.4g} [{self.low:.4g}, {self.high:.4g}] (n={self.n}, {self.sample})"


@dataclass(frozen=True)
class Difference:
    """The difference ``first.value − second.value`` of two rates, with its interval and both rates.

    Attributes
    ----------
    value, low, high : float
        The difference and its interval, in [-1, 1].
    first, second : Estimate
        The two rates, so their denominators travel with the difference.
    method : str
        ``"newcombe"`` (independent samples, method 10 of Newcombe 1998) or ``"newcombe-paired"``.
    confidence : float
        The interval's confidence level.
    """

    value: float
    low: float
    high: float
    first: Estimate
    second: Estimate
    method: DifferenceMethod
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or wholly below 0."""
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        rates = f"{self.first.value:.1%} of {self.first.n} vs {self.second.value:.1%} of {self.second.n}"
        samples = {self.first.sample, self.second.sample}
        where = self.first.sample if len(samples) == 1 else f"{self.first.sample} vs {self.second.sample}"
        return f"{_pp(self.value)} pp [{_pp(self.low)}, {_pp(self.high)}] ({rates}, {where})"


@dataclass(frozen=True)
class McNemarTest:
    """McNemar's test of paired pass/fail outcomes; only the discordant pairs carry information.

    Attributes
    ----------
    first_only : int
        Pairs positive under the first condition only (``b``).
    second_only : int
        Pairs positive under the second condition only (``c``).
    exact_p_value : float
        Two-sided exact (conditional binomial) p-value: ``min(1, 2·P(X ≤ min(b, c)))``, X ~ Bin(b+c, ½).
    chi2 : float
        The continuity-corrected statistic ``max(|b − c| − 1, 0)² / (b + c)`` (0 when b + c = 0).
    chi2_p_value : float
        Its p-value on the chi-square distribution with 1 degree of freedom.
    """

    first_only: int
    second_only: int
    exact_p_value: float
    chi2: float
    chi2_p_value: float


# ------------------------------------------------------------------------------------ single proportions


def wilson_interval(
    successes: float, n: float, *, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion.

    Unlike the Wald interval it stays inside [0, 1], is not degenerate at 0 or n successes, and keeps
    close to its nominal coverage for small n, which matters here: a failure category is often a handful
    of traces. ``successes`` and ``n`` may be fractional (an effective sample size).

    Parameters
    ----------
    successes : float
        Successes, 0 ≤ successes ≤ n.
    n : float
        Trials (or effective sample size), > 0.
    confidence : float, default 0.95
        Confidence level, strictly between 0 and 1.

    Returns
    -------
    tuple of float
        ``(low, high)``.

    See Also
    --------
    proportion : the same interval wrapped in an :class:`Estimate`.

    Examples
    --------
    >>> low, high = wilson_interval(81, 263)
    >>> print(f"{low:.4f} {high:.4f}")
    0.2553 0.3662
    >>> wilson_interval(0, 10)[0]
    0.0
    """
    check_confidence(confidence)
    if not (math.isfinite(n) and n > 0):
        raise StatisticsInputError(f"n must be a positive number, got {n!r}")
    if not (0 <= successes <= n):
        raise StatisticsInputError(f"successes must lie in [0, n={n}], got {successes!r}")
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At p = 0 or 1 the bound is exactly 0 or 1; rounding must not push it a hair inside.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def proportion(
    successes: int, n: int, *, sample: CountSample, confidence: float = DEFAULT_CONFIDENCE
) -> Estimate:
    """A rate from plain counts, labelled with its sample.

    From the ``traces`` table (``sample="all traces"``) the count covers every trace seen, so the rate is
    exact and ``method`` is ``"exact"``; the Wilson interval is still given, as the interval for the rate
    of the process that produced those traces (what a regression claim is about). From the baseline slice
    or the tail-kept traces, ``method`` is ``"wilson"``.

    Parameters
    ----------
    successes : int
        Traces with the property.
    n : int
        Traces counted, ≥ 1.
    sample : {"all traces", "baseline slice", "tail-kept"}
        Where the counts come from. Weighted kept traces go through :func:`weighted_proportion`.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    Estimate

    Examples
    --------
    >>> print(proportion(49, 400, sample="baseline slice"))
    12.2% [9.4%, 15.8%] (n=400, baseline slice)
    >>> proportion(49, 400, sample="all traces").method
    'exact'
    """
    _check_choice(sample, get_args(CountSample), "sample")
    check_count(successes, "successes", minimum=0)
    check_count(n, "n")
    low, high = wilson_interval(successes, n, confidence=confidence)
    return Estimate(
        value=successes / n,
        low=low,
        high=high,
        n=int(n),
        n_effective=float(n),
        successes=successes,
        method="exact" if sample == "all traces" else "wilson",
        sample=sample,
        confidence=confidence,
    )


def kish_effective_size(weights: ArrayLike) -> float:
    """Kish's effective sample size ``(Σw)² / Σw²``: n for equal weights, less otherwise.

    Parameters
    ----------
    weights : array_like
        Positive finite weights.

    Returns
    -------
    float

    Examples
    --------
    >>> kish_effective_size([1, 2, 4, 2])
    3.24
    """
    w = _weights(weights)
    return float(w.sum() ** 2 / np.square(w).sum())


def weighted_proportion(
    indicator: ArrayLike,
    weights: ArrayLike,
    *,
    sample: Sample = WEIGHTED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Estimate:
    """The Hájek estimate ``Σ w·y / Σ w`` of a population rate from weighted rows.

    Pass kept traces with ``weights = 1 / inclusion_probability``. The interval is Wilson's on the
    effective sample size ``n_eff = p̂(1 − p̂) / v̂``, with the linearization variance
    ``v̂ = Σ w²(y − p̂)² / (Σ w)²``; when p̂ is 0 or 1 (v̂ = 0) Kish's ``(Σw)² / Σw²`` stands in. With equal
    weights this is exactly Wilson's interval on n. Why not Kish's n throughout: see the module docstring.
    The linearization variance is unstable when only a few rows carry large weights (say, fewer than
    about ten baseline-only traces); such estimates deserve the baseline slice instead.

    Parameters
    ----------
    indicator : array_like of bool or {0, 1}
        Whether each row has the property.
    weights : array_like of float
        Positive finite weights, one per row.
    sample : str, default "kept (1/π weighted)"
        Label of the rows' sample.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    Estimate
        ``method="hajek"``; ``successes`` is the estimated population count ``Σ w·y``.

    See Also
    --------
    kish_effective_size, horvitz_thompson_total

    Examples
    --------
    A ``tool_loop`` finding in 30 of the 45 traces the tail policies kept (π = 1) and in 4 of the 55
    kept only by a 5% baseline (π = 0.05). Over kept traces naively it looks like 34%:

    >>> import numpy as np
    >>> loop = np.repeat([1, 0, 1, 0], [30, 15, 4, 51])
    >>> weights = np.repeat([1, 1, 20, 20], [30, 15, 4, 51])
    >>> print(weighted_proportion(loop, weights))
    9.6% [4.8%, 18.4%] (n=100, n_eff=75, kept (1/π weighted))
    """
    _check_choice(sample, get_args(Sample), "sample")
    y = _indicator(indicator)
    w = _weights(weights, length=y.size)
    if y.min() == y.max():
        # Every row agrees, so p̂ is exactly 0 or 1 and v̂ is 0 (rounding in Σw·y/Σw must not fake a
        # tiny v̂ and a huge n_eff): fall back to Kish.
        p = float(y[0])
        n_effective = kish_effective_size(w)
    else:
        p = float(np.dot(w, y) / w.sum())
        n_effective = p * (1 - p) / _linearized_variance(y, w, p)
    low, high = wilson_interval(p * n_effective, n_effective, confidence=confidence)
    return Estimate(
        value=p,
        low=low,
        high=high,
        n=int(y.size),
        n_effective=float(n_effective),
        successes=float(np.dot(w, y)),
        method="hajek",
        sample=sample,
        confidence=confidence,
    )


# ------------------------------------------------------------------------------------- means and totals


def weighted_mean(
    values: ArrayLike,
    weights: ArrayLike,
    *,
    sample: Sample = WEIGHTED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> ValueEstimate:
    """The Hájek mean ``Σ w·x / Σ w`` (tokens, duration, ...) with a linearization standard error.

    The variance is the sandwich (linearization) estimator ``n/(n−1) · Σ w²(x − x̄)² / (Σ w)²``; the
    factor ``n/(n−1)`` makes it the textbook ``s²/n`` when all weights are equal. The interval is normal.

    Parameters
    ----------
    values : array_like of float
        One finite value per row; at least two rows.
    weights : array_like of float
        Positive finite weights (``1/π`` for kept traces).
    sample : str, default "kept (1/π weighted)"
        Label of the rows' sample.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    ValueEstimate
        ``method="hajek"``.

    Examples
    --------
    Tokens of three runaway traces kept with π = 1 and five kept by a 5% baseline:

    >>> tokens = [52000, 48000, 61000, 1200, 900, 1500, 1100, 1300]
    >>> print(weighted_mean(tokens, [1, 1, 1, 20, 20, 20, 20, 20]))
    2728 [442.6, 5014] (n=8, kept (1/π weighted))
    """
    check_confidence(confidence)
    _check_choice(sample, get_args(Sample), "sample")
    x = _finite(values, "values")
    if x.size < 2:
        raise StatisticsInputError(f"a mean's standard error needs at least 2 rows, got {x.size}")
    w = _weights(weights, length=x.size)
    mean = float(np.dot(w, x) / w.sum())
    n = x.size
    standard_error = math.sqrt(n / (n - 1) * _linearized_variance(x, w, mean))
    return _normal_estimate(mean, standard_error, w, method="hajek", sample=sample, confidence=confidence)


def horvitz_thompson_total(
    values: ArrayLike, inclusion_probabilities: ArrayLike, *, confidence: float = DEFAULT_CONFIDENCE
) -> ValueEstimate:
    """The Horvitz–Thompson total ``Σ y/π`` over the traces seen, from the kept ones.

    The variance is the design-based one for Poisson sampling (each trace kept independently with its
    own π), ``Σ (1 − π)/π² · y²``. It is about the finite population of traces seen: traces kept with
    π = 1 contribute no uncertainty, and a census has none.

    Parameters
    ----------
    values : array_like of float
        y for each kept trace (1/0 for a count).
    inclusion_probabilities : array_like of float
        Each kept trace's π, in (0, 1].
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    ValueEstimate
        ``method="horvitz-thompson"``, ``sample="kept (1/π weighted)"``.

    See Also
    --------
    horvitz_thompson_mean

    Examples
    --------
    >>> total = horvitz_thompson_total([1, 0, 1, 0], [1, 0.5, 0.25, 0.5])
    >>> print(total.value, round(total.standard_error, 4))
    5.0 3.4641
    """
    check_confidence(confidence)
    y, pi = _values_and_probabilities(values, inclusion_probabilities)
    total = float(np.sum(y / pi))
    variance = float(np.sum((1 - pi) / np.square(pi) * np.square(y)))
    return _normal_estimate(
        total, math.sqrt(variance), 1 / pi, method="horvitz-thompson", sample=WEIGHTED, confidence=confidence
    )


def horvitz_thompson_mean(
    values: ArrayLike,
    inclusion_probabilities: ArrayLike,
    population_size: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> ValueEstimate:
    """The Horvitz–Thompson mean ``Σ (y/π) / N`` when N, the number of traces seen, is known.

    N comes from the ``traces`` table, which has a row for every trace seen. Unlike the Hájek ratio this
    estimator is exactly unbiased, but it varies more when the number of kept traces varies; for rates
    :func:`weighted_proportion` is usually the better choice. The standard error is the total's over N,
    so the interval is about the traces seen (see :func:`horvitz_thompson_total`).

    Parameters
    ----------
    values : array_like of float
        y for each kept trace.
    inclusion_probabilities : array_like of float
        Each kept trace's π, in (0, 1].
    population_size : int
        N, traces seen (kept or dropped), ≥ the number of kept traces.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    ValueEstimate
        ``method="horvitz-thompson"``.

    Examples
    --------
    >>> mean = horvitz_thompson_mean([1, 0, 1, 0], [1, 0.5, 0.25, 0.5], population_size=10)
    >>> print(f"{mean.value:.2f} ± {mean.standard_error:.4f}")
    0.50 ± 0.3464
    """
    y, pi = _values_and_probabilities(values, inclusion_probabilities)
    check_count(population_size, "population_size")
    if population_size < y.size:
        raise StatisticsInputError(
            f"population_size ({population_size}) is smaller than the {y.size} kept traces given"
        )
    total = horvitz_thompson_total(y, pi, confidence=confidence)
    return _normal_estimate(
        total.value / population_size,
        total.standard_error / population_size,
        1 / pi,
        method="horvitz-thompson",
        sample=WEIGHTED,
        confidence=confidence,
    )


def horvitz_thompson_proportion(
    indicator: ArrayLike,
    inclusion_probabilities: ArrayLike,
    population_size: int,
    *,
    sample: Sample = WEIGHTED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Estimate:
    """A population rate ``Σ (y/π) / N`` from kept traces when N, the number of traces seen, is known.

    tailcut's ``traces`` table has a row for every trace seen, so N is exact. The traces a
    deterministic policy kept (π = 1) are a census of their stratum: their hits are counted, not
    estimated. The other N − n₁ traces are represented by the baseline members among them, a uniform
    sample (each trace joins the slice from its id alone, with the same probability p), so their rate
    r₂ is a plain proportion of that sample. The estimate is ``(h₁ + (N − n₁)·r̂₂) / N``, which equals
    the Horvitz–Thompson mean.

    The interval is about the rate of the process producing traces (as for :func:`proportion`). It
    combines Wilson's interval for the counted part (h₁ of N) and Wilson's interval for r₂ (h₂ of the
    m sampled traces, scaled by (N − n₁)/N) with the MOVER rule (Newcombe's method for sums), so a
    category the policies never catch, seen 0 times in the sample, still gets an honest upper bound.
    When the π < 1 traces do not share one probability (rate-limited policies), the linearized
    variance ``p(1 − p)/N + Σ (1 − π)/π² · y² / N²`` and Wilson's interval on its effective n are
    used instead.

    Parameters
    ----------
    indicator : array_like of bool or {0, 1}
        Whether each kept trace has the property.
    inclusion_probabilities : array_like of float
        Each kept trace's π, in (0, 1].
    population_size : int
        N, traces seen (kept or dropped), ≥ the number of kept traces.
    sample : str, default "kept (1/π weighted)"
        Label of the rows' sample.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    Estimate
        ``method="horvitz-thompson"``; ``successes`` is the estimated count ``Σ y/π`` and ``n_effective``
        the effective sample size the interval's width corresponds to.

    Examples
    --------
    Every one of 30 loops in 1000 traces was kept by a policy (π = 1): the count is exact.

    >>> print(horvitz_thompson_proportion([1] * 30 + [0] * 70, [1.0] * 100, population_size=1000))
    3.0% [2.1%, 4.3%] (n=100, kept (1/π weighted))
    """
    return HorvitzThompsonRate.of(
        indicator, inclusion_probabilities, population_size, sample=sample
    ).estimate(confidence)


@dataclass(frozen=True)
class HorvitzThompsonRate:
    """The sums :func:`horvitz_thompson_proportion` needs from the kept traces, computed once.

    A verdict asks for the same rate at many levels (inverting an interval into a p-value bisects on
    the level), and every sum over the kept traces is the same at each: :meth:`estimate` then costs a
    few floating-point operations instead of a pass over the traces. Build it with :meth:`of`.

    Attributes
    ----------
    kept : int
        Kept traces given.
    population_size : int
        N, traces seen.
    count : float
        ``Σ y/π``, the estimated count.
    one_probability : bool
        Whether the π < 1 traces share one probability (some exist and all are equal).
    certain_hits, certain : float, int
        Hits among the π = 1 traces, and their number.
    sampled_hits, sampled : float, int
        Hits among the π < 1 traces, and their number.
    variance_sum : float
        ``Σ (1 − π)/π² · y``, the sampled part of the linearized variance.
    sample : str
        The rows' sample label.
    """

    kept: int
    population_size: int
    count: float
    one_probability: bool
    certain_hits: float
    certain: int
    sampled_hits: float
    sampled: int
    variance_sum: float
    sample: Sample = WEIGHTED

    @classmethod
    def of(
        cls,
        indicator: ArrayLike,
        inclusion_probabilities: ArrayLike,
        population_size: int,
        *,
        sample: Sample = WEIGHTED,
        repeats: ArrayLike | None = None,
    ) -> HorvitzThompsonRate:
        """The sums of kept traces (``indicator``, each one's π) among ``population_size`` traces seen.

        ``repeats``: how many kept traces each entry stands for (alike in indicator and π), so a
        comparison passes a few distinct rows with their counts instead of every trace; the sums are those
        of the entries repeated.

        >>> compact = HorvitzThompsonRate.of([1, 0], [0.5, 1.0], 10, repeats=[2, 3])
        >>> compact == HorvitzThompsonRate.of([1, 1, 0, 0, 0], [0.5, 0.5, 1.0, 1.0, 1.0], 10)
        True

        Raises
        ------
        StatisticsInputError
            As :func:`horvitz_thompson_proportion`, or when a repeat is not a positive whole number.
        """
        _check_choice(sample, get_args(Sample), "sample")
        y, pi = _values_and_probabilities(_indicator(indicator), inclusion_probabilities)
        times = np.ones_like(y) if repeats is None else _repeats(repeats, length=y.size)
        kept = int(times.sum())
        check_count(population_size, "population_size")
        if population_size < kept:
            raise StatisticsInputError(
                f"population_size ({population_size}) is smaller than the {kept} kept traces given"
            )
        sampled = pi < 1
        return cls(
            kept=kept,
            population_size=int(population_size),
            count=float(np.sum(times * y / pi)),
            one_probability=bool(sampled.any() and np.ptp(pi[sampled]) == 0),
            certain_hits=float((times * y)[~sampled].sum()),
            certain=int(times[~sampled].sum()),
            sampled_hits=float((times * y)[sampled].sum()),
            sampled=int(times[sampled].sum()),
            variance_sum=float(np.sum(times * (1 - pi) / pi**2 * y)),
            sample=sample,
        )

    def estimate(self, confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
        """The rate and its interval at ``confidence`` (see :func:`horvitz_thompson_proportion`)."""
        n = self.population_size
        count = self.count
        p = min(count / n, 1.0)
        if self.one_probability:
            census_hits = self.certain_hits
            rest = n - self.certain
            a, (a_low, a_high) = census_hits / n, wilson_interval(census_hits, n, confidence=confidence)
            r_hits, r_n = self.sampled_hits, self.sampled
            r_low, r_high = wilson_interval(r_hits, r_n, confidence=confidence)
            scale = rest / n
            b, b_low, b_high = scale * r_hits / r_n, scale * r_low, scale * r_high
            p = min(a + b, 1.0)
            low = max(0.0, p - math.hypot(a - a_low, b - b_low))
            high = min(1.0, p + math.hypot(a_high - a, b_high - b))
            half = (high - low) / 2
            z = _z(confidence)
            n_effective = p * (1 - p) * (z / half) ** 2 if 0 < p < 1 and half > 0 else float(n)
        else:
            variance = p * (1 - p) / n + self.variance_sum / n**2
            n_effective = p * (1 - p) / variance if 0 < p < 1 and variance > 0 else float(n)
            low, high = wilson_interval(p * n_effective, n_effective, confidence=confidence)
        return Estimate(
            value=p,
            low=low,
            high=high,
            n=self.kept,
            n_effective=float(n_effective),
            successes=count,
            method="horvitz-thompson",
            sample=self.sample,
            confidence=confidence,
        )


# ------------------------------------------------------------------------------------------- differences


def difference(first: Estimate, second: Estimate) -> Difference:
    """Newcombe's interval for ``first.value − second.value`` from two independent estimates.

    Newcombe's hybrid score interval (method 10) combines the two Wilson intervals: the lower limit is
    ``d − √((p₁ − l₁)² + (u₂ − p₂)²)`` and the upper ``d + √((u₁ − p₁)² + (p₂ − l₂)²)``. Because each
    :class:`Estimate` already carries its Wilson interval on its effective sample size, the same
    formula serves plain counts and weighted rates.

    Parameters
    ----------
    first, second : Estimate
        Rates from independent samples, at the same confidence level.

    Returns
    -------
    Difference
        ``method="newcombe"``.

    See Also
    --------
    newcombe_difference : the same from counts.

    Examples
    --------
    >>> new = proportion(60, 500, sample="baseline slice")
    >>> old = proportion(40, 500, sample="baseline slice")
    >>> print(difference(new, old))
    +4.0 pp [+0.3, +7.8] (12.0% of 500 vs 8.0% of 500, baseline slice)
    """
    if not math.isclose(first.confidence, second.confidence):
        raise StatisticsInputError(
            f"cannot combine intervals at confidence {first.confidence} and {second.confidence}"
        )
    d = first.value - second.value
    low = d - math.hypot(first.value - first.low, second.high - second.value)
    high = d + math.hypot(first.high - first.value, second.value - second.low)
    return Difference(
        value=d,
        low=max(-1.0, low),
        high=min(1.0, high),
        first=first,
        second=second,
        method="newcombe",
        confidence=first.confidence,
    )


def newcombe_difference(
    successes1: int,
    n1: int,
    successes2: int,
    n2: int,
    *,
    sample: CountSample,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Difference:
    """Newcombe's hybrid score interval (method 10) for ``x₁/n₁ − x₂/n₂``, independent samples.

    Parameters
    ----------
    successes1, n1 : int
        Counts of the first sample.
    successes2, n2 : int
        Counts of the second sample.
    sample : {"all traces", "baseline slice", "tail-kept"}
        Where both sets of counts come from.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    Difference

    See Also
    --------
    difference : the same from two :class:`Estimate` values (weighted ones too).

    Examples
    --------
    Newcombe (1998), Table II, example (a):

    >>> d = newcombe_difference(56, 70, 48, 80, sample="baseline slice")
    >>> print(f"{d.value:.4f} ({d.low:.4f}, {d.high:.4f})")
    0.2000 (0.0524, 0.3339)
    """
    first = proportion(successes1, n1, sample=sample, confidence=confidence)
    second = proportion(successes2, n2, sample=sample, confidence=confidence)
    return difference(first, second)


def paired_difference(
    both: int,
    first_only: int,
    second_only: int,
    neither: int,
    *,
    sample: CountSample,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Difference:
    """Newcombe's interval for the difference of two rates measured on the same traces.

    The rates are ``p₁ = (both + first_only)/n`` and ``p₂ = (both + second_only)/n``; the difference is
    ``(first_only − second_only)/n``. This is method 10 of Newcombe's paired-data paper (1998): the two
    Wilson intervals combined as for independent samples, but corrected by the estimated correlation φ
    of the pairs (φ = 0 when a margin is empty; a positive ``both·neither − first_only·second_only`` is
    reduced by n/2 first, floored at 0). It is chosen over Wald's interval with continuity correction
    because it stays inside [-1, 1] and keeps its coverage when discordant pairs are few, as in a few
    reruns of a handful of traces.

    Parameters
    ----------
    both, first_only, second_only, neither : int
        The paired 2×2 table: traces positive under both conditions, the first only, the second only,
        neither.
    sample : {"all traces", "baseline slice", "tail-kept"}
        Where the traces come from.
    confidence : float, default 0.95
        Confidence level.

    Returns
    -------
    Difference
        ``method="newcombe-paired"``; ``first`` and ``second`` are the two marginal rates.

    See Also
    --------
    mcnemar : the matching test.

    Examples
    --------
    Newcombe (1998, paired data), example (a):

    >>> d = paired_difference(36, 12, 2, 0, sample="tail-kept")
    >>> print(f"{d.value:.4f} ({d.low:.4f}, {d.high:.4f})")
    0.2000 (0.0569, 0.3404)
    """
    cells = {"both": both, "first_only": first_only, "second_only": second_only, "neither": neither}
    for name, value in cells.items():
        check_count(value, name, minimum=0)
    n = both + first_only + second_only + neither
    if n == 0:
        raise StatisticsInputError("a paired difference needs at least one pair; all four cells are 0")
    first = proportion(both + first_only, n, sample=sample, confidence=confidence)
    second = proportion(both + second_only, n, sample=sample, confidence=confidence)
    margins = (both + first_only) * (second_only + neither) * (both + second_only) * (first_only + neither)
    if margins == 0:
        phi = 0.0
    else:
        cross = both * neither - first_only * second_only
        if cross > 0:
            cross = max(cross - n / 2, 0.0)
        phi = cross / math.sqrt(margins)
    below1, above1 = first.value - first.low, first.high - first.value
    below2, above2 = second.value - second.low, second.high - second.value
    d = first.value - second.value
    low = d - math.sqrt(max(below1**2 - 2 * phi * below1 * above2 + above2**2, 0.0))
    high = d + math.sqrt(max(above1**2 - 2 * phi * above1 * below2 + below2**2, 0.0))
    return Difference(
        value=d,
        low=max(-1.0, low),
        high=min(1.0, high),
        first=first,
        second=second,
        method="newcombe-paired",
        confidence=confidence,
    )


def mcnemar(first_only: int, second_only: int) -> McNemarTest:
    """McNemar's test for paired pass/fail outcomes (the same traces replayed under two revisions).

    Only discordant pairs count: ``first_only`` traces fail under the first revision but not the second,
    ``second_only`` the reverse. Under "no change" each discordant pair is a fair coin. The exact
    conditional p-value is the one to report for the few reruns replay affords; the continuity-corrected
    chi-square is given for comparison with other tools.

    Parameters
    ----------
    first_only, second_only : int
        The discordant counts b and c.

    Returns
    -------
    McNemarTest

    See Also
    --------
    paired_difference : the interval for the change in rate.

    Examples
    --------
    Agresti (1990), p. 350, presidential approval (b = 150, c = 86):

    >>> test = mcnemar(150, 86)
    >>> print(f"chi2={test.chi2:.3f} p={test.chi2_p_value:.3e}")
    chi2=16.818 p=4.115e-05
    >>> mcnemar(1, 7).exact_p_value
    0.0703125
    """
    check_count(first_only, "first_only", minimum=0)
    check_count(second_only, "second_only", minimum=0)
    discordant = first_only + second_only
    if discordant == 0:
        return McNemarTest(first_only, second_only, exact_p_value=1.0, chi2=0.0, chi2_p_value=1.0)
    exact = min(1.0, 2 * float(special.bdtr(min(first_only, second_only), discordant, 0.5)))
    chi2 = max(abs(first_only - second_only) - 1, 0) ** 2 / discordant
    return McNemarTest(
        first_only,
        second_only,
        exact_p_value=exact,
        chi2=chi2,
        chi2_p_value=float(special.chdtrc(1, chi2)),
    )


# ------------------------------------------------------------------------------------- exact tests


#: A 2×2 table whose smallest expected count under "no change" is below this is tested exactly.
EXACT_BELOW: Final = 5.0
#: Boschloo's test enumerates every table of the two sample sizes, (n₁ + 1)(n₂ + 1) of them: up to 100
#: traces per group it takes a few ms to 40 ms; at 1,500 per group scipy needs 35 s. Beyond it Fisher's test.
BOSCHLOO_MAX_TABLES: Final = 101 * 101
ExactMethod = Literal["boschloo", "fisher"]


@dataclass(frozen=True)
class ExactTest:
    """An exact one-sided test that the first rate is above the second.

    Attributes
    ----------
    p_value : float
        P(a table at least as extreme | no change), maximized over the common rate for Boschloo's.
    method : str
        ``"boschloo"`` (unconditional) or ``"fisher"`` (conditional on the total).
    """

    p_value: float
    method: ExactMethod


def smallest_expected_count(successes1: int, n1: int, successes2: int, n2: int) -> float:
    """The smallest expected cell count of the 2×2 table under "no change" (the pooled rate).

    The normal approximation behind Wilson's and Newcombe's intervals wants every expected count to be
    at least about 5 (:data:`EXACT_BELOW`); below it an exact test decides (:func:`exact_rise`).

    Examples
    --------
    >>> smallest_expected_count(0, 60, 6, 60)
    3.0
    """
    total = n1 + n2
    hits = successes1 + successes2
    return min(hits, total - hits) * min(n1, n2) / total


def exact_rise(successes1: int, n1: int, successes2: int, n2: int) -> ExactTest:
    """An exact one-sided test of "no change" against ``x₁/n₁``'s rate being above ``x₂/n₂``'s.

    Two independent binomial samples (a group's traces, each showing the category or not). Boschloo's
    unconditional test (Fisher's one-sided p-value as the statistic, its size maximized over the common
    rate) is uniformly more powerful than Fisher's; it enumerates every table of the two sizes, so from
    :data:`BOSCHLOO_MAX_TABLES` on Fisher's conditional test is used. There the two nearly agree: with
    few hits among many traces, conditioning on the total number of hits loses almost nothing (3 of
    1,500 against 0 of 1,500: Boschloo 0.119, Fisher 0.125). Both hold their level at every sample size.

    Parameters
    ----------
    successes1, n1 : int
        The candidate group's hits and traces (the one whose rise is a regression).
    successes2, n2 : int
        The reference group's.

    Returns
    -------
    ExactTest

    Examples
    --------
    The example of scipy's ``boschloo_exact``, 74 of 117 against 31 of 63:

    >>> test = exact_rise(74, 117, 31, 63)
    >>> print(f"{test.method} {test.p_value:.4f}")
    boschloo 0.0356
    >>> exact_rise(3, 1500, 0, 1500).method
    'fisher'
    """
    for value, name in ((n1, "n1"), (n2, "n2")):
        check_count(value, name)
    for value, total, name in ((successes1, n1, "successes1"), (successes2, n2, "successes2")):
        check_count(value, name, minimum=0)
        if value > total:
            raise StatisticsInputError(f"{name} ({value}) exceeds its number of traces ({total})")
    from scipy import stats as scipy_stats

    table = [[successes1, successes2], [n1 - successes1, n2 - successes2]]
    if (n1 + 1) * (n2 + 1) <= BOSCHLOO_MAX_TABLES:
        p = scipy_stats.boschloo_exact(table, alternative="greater").pvalue
        return ExactTest(min(1.0, float(p)), "boschloo")
    p = scipy_stats.fisher_exact(table, alternative="greater").pvalue
    return ExactTest(min(1.0, float(p)), "fisher")


# ------------------------------------------------------------------------------------------------ helpers


def _z(confidence: float) -> float:
    """The two-sided standard normal quantile for ``confidence``."""
    return float(special.ndtri(1 - (1 - confidence) / 2))


def _pp(fraction: float) -> str:
    """A difference of rates in signed percentage points, one decimal."""
    return f"{fraction * 100:+.1f}"


def _linearized_variance(y: NDArray[np.float64], w: NDArray[np.float64], estimate: float) -> float:
    """The linearization (sandwich) variance of the ratio ``Σ w·y / Σ w``, without small-sample factor."""
    return float(np.sum(np.square(w * (y - estimate))) / w.sum() ** 2)


def _normal_estimate(
    value: float,
    standard_error: float,
    weights: NDArray[np.float64],
    *,
    method: Method,
    sample: Sample,
    confidence: float,
) -> ValueEstimate:
    """A :class:`ValueEstimate` with the normal interval ``value ± z·standard_error``."""
    half = _z(confidence) * standard_error
    return ValueEstimate(
        value=value,
        standard_error=standard_error,
        low=value - half,
        high=value + half,
        n=int(weights.size),
        n_effective=float(weights.sum() ** 2 / np.square(weights).sum()),
        method=method,
        sample=sample,
        confidence=confidence,
    )


def check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise StatisticsInputError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise StatisticsInputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_count(value: int, name: str, *, minimum: int = 1) -> None:
    """Counts are whole numbers (numpy integers too) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise StatisticsInputError(f"{name} must be a whole number ≥ {minimum}, got {value!r}")


def _finite(values: ArrayLike, name: str) -> NDArray[np.float64]:
    """A non-empty one-dimensional float array with no NaN or infinity."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise StatisticsInputError(f"{name} must be numbers: {error}") from None
    if array.ndim != 1 or array.size == 0:
        raise StatisticsInputError(
            f"{name} must be a non-empty one-dimensional array, got shape {array.shape}"
        )
    if not np.isfinite(array).all():
        raise StatisticsInputError(f"{name} must be finite; found NaN or infinity")
    return array


def _indicator(values: ArrayLike) -> NDArray[np.float64]:
    y = _finite(values, "indicator")
    if not np.isin(y, (0.0, 1.0)).all():
        raise StatisticsInputError("indicator must hold only booleans or 0/1 values")
    return y


def _weights(weights: ArrayLike, *, length: int | None = None) -> NDArray[np.float64]:
    w = _finite(weights, "weights")
    if length is not None and w.size != length:
        raise StatisticsInputError(f"weights has {w.size} entries for {length} rows")
    if (w <= 0).any():
        raise StatisticsInputError("weights must be positive")
    return w


def _repeats(repeats: ArrayLike, *, length: int) -> NDArray[np.float64]:
    r = _weights(repeats, length=length)
    if (r != np.round(r)).any():
        raise StatisticsInputError("repeats must be whole numbers")
    return r


def _values_and_probabilities(
    values: ArrayLike, inclusion_probabilities: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    y = _finite(values, "values")
    pi = _finite(inclusion_probabilities, "inclusion_probabilities")
    if pi.size != y.size:
        raise StatisticsInputError(f"inclusion_probabilities has {pi.size} entries for {y.size} values")
    if ((pi <= 0) | (pi > 1)).any():
        raise StatisticsInputError("inclusion_probabilities must lie in (0, 1]")
    return y, pi
