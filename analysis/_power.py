"""Sample-size guidance: the smallest change a comparison can detect, and the traces a change needs.

Two independent groups, a failure rate ``p`` in group A and ``p + δ`` in B, tested two-sided at level
``confidence`` with the usual normal approximation (pooled standard error under "no change",
unpooled under the alternative; Fleiss, *Statistical Methods for Rates and Proportions*, 3rd ed., 4.2):

    power(δ) = Φ((|δ| − z₁₋α/₂ · se₀) / se₁),
    se₀ = √(p̄(1 − p̄)(1/n_A + 1/n_B)),   se₁ = √(p(1 − p)/n_A + (p + δ)(1 − p − δ)/n_B).

The **minimum detectable difference** (MDE) at the sizes in hand is the smallest δ > 0 with power 80%;
for a weighted estimate the sizes are its effective sample sizes. The level is the test's: for
``tailcut compare`` each category's Holm level, and for planning the strictest Holm step ``α/6``, which
guarantees the power whatever the other five categories do.

Examples
--------
>>> round(detectable_difference(0.05, 1000, 1000), 4)
0.031
>>> traces_per_group(0.05, 0.05)
435

(the textbook 435 per group for 5% against 10%, without continuity correction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from scipy import special

from tailcut.analysis import stats

#: The power every figure here is computed for.
POWER: Final = 0.8


def power(rate: float, delta: float, n_a: float, n_b: float, *, confidence: float) -> float:
    """The chance that a two-sided test at ``confidence`` finds a change from ``rate`` to ``rate + delta``.

    Examples
    --------
    >>> round(power(0.05, 0.05, 435, 435, confidence=0.95), 2)
    0.8
    """
    _check(rate, n_a, n_b, confidence)
    other = rate + delta
    if not 0 <= other <= 1:
        raise stats.StatisticsInputError(f"rate + delta must lie in [0, 1], got {other!r}")
    pooled = (rate * n_a + other * n_b) / (n_a + n_b)
    null_se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    alternative_se = math.sqrt(rate * (1 - rate) / n_a + other * (1 - other) / n_b)
    if alternative_se == 0:
        return 1.0 if delta != 0 else 0.0
    z = _z(confidence)
    return float(special.ndtr((abs(delta) - z * null_se) / alternative_se))


def detectable_difference(
    rate: float, n_a: float, n_b: float, *, confidence: float = stats.DEFAULT_CONFIDENCE
) -> float | None:
    """The smallest rise δ > 0 from ``rate`` that groups of ``n_a`` and ``n_b`` detect with 80% power.

    None when even a rise to 100% would not be detected that often (the groups are too small).
    """
    _check(rate, n_a, n_b, confidence)
    top = 1 - rate
    if top <= 0 or power(rate, top, n_a, n_b, confidence=confidence) < POWER:
        return None
    low, high = 0.0, top
    for _ in range(60):
        middle = (low + high) / 2
        if power(rate, middle, n_a, n_b, confidence=confidence) >= POWER:
            high = middle
        else:
            low = middle
    return high


def traces_per_group(rate: float, delta: float, *, confidence: float = stats.DEFAULT_CONFIDENCE) -> int:
    """Traces per group (a uniform sample of each) to detect ``rate`` → ``rate + delta`` with 80% power.

    Examples
    --------
    >>> traces_per_group(0.05, 0.05, confidence=1 - 0.05 / 6)
    671
    """
    _check(rate, 1, 1, confidence)
    other = rate + delta
    if delta == 0 or not 0 <= other <= 1:
        raise stats.StatisticsInputError(f"delta must be non-zero with rate + delta in [0, 1], got {delta!r}")
    pooled = (rate + other) / 2
    z_alpha, z_power = _z(confidence), float(special.ndtri(POWER))
    root = z_alpha * math.sqrt(2 * pooled * (1 - pooled)) + z_power * math.sqrt(
        rate * (1 - rate) + other * (1 - other)
    )
    n = math.ceil((root / delta) ** 2)
    while n > 1 and power(rate, delta, n - 1, n - 1, confidence=confidence) >= POWER:
        n -= 1
    while power(rate, delta, n, n, confidence=confidence) < POWER:
        n += 1
    return n


def _z(confidence: float) -> float:
    return float(special.ndtri(1 - (1 - confidence) / 2))


def _check(rate: float, n_a: float, n_b: float, confidence: float) -> None:
    stats.check_confidence(confidence)
    if not 0 <= rate <= 1:
        raise stats.StatisticsInputError(f"rate must lie in [0, 1], got {rate!r}")
    if not (n_a > 0 and n_b > 0):
        raise stats.StatisticsInputError(f"group sizes must be positive, got {n_a!r} and {n_b!r}")


@dataclass(frozen=True)
class Guidance:
    """What a comparison of one category can detect, and what a verdict it could not make would need.

    Attributes
    ----------
    rate : float
        Group A's rate the figures start from.
    detectable : float or None
        The MDE at the sizes in hand (None: not even a rise to 100%).
    confidence : float
        The test's level.
    observed : float
        The observed difference B − A.
    traces_per_group : int or None
        Traces seen per group that would detect the observed difference under the current policies
        (None when a verdict was made or nothing was observed).
    baseline_percent : float or None
        The baseline slice, in percent of the traces seen, that would detect it with the current traffic
        (None when more than all of it would be needed).
    """

    rate: float
    detectable: float | None
    confidence: float
    observed: float
    traces_per_group: int | None = None
    baseline_percent: float | None = None
    #: traces seen per group now (the mean of the two), beside ``traces_per_group``
    traces_now: int | None = None

    def to_record(self) -> dict[str, float | int | None]:
        return {
            "detectable_difference": self.detectable,
            "power": POWER,
            "confidence": self.confidence,
            "traces_per_group_needed": self.traces_per_group,
            "baseline_percent_needed": self.baseline_percent,
        }

    def hint(self) -> str | None:
        """What would make a verdict possible, in words (None when there is nothing to say)."""
        if self.traces_per_group is None:
            return None
        slice_ = (
            f", or a baseline slice of {self.baseline_percent:.0f}% at today's traffic"
            if self.baseline_percent is not None
            else ""
        )
        return (
            f"to detect the observed {self.observed * 100:+.1f} pp at {self.rate:.1%}: about "
            f"{self.traces_per_group:,} traces per group (now {self.traces_now:,}){slice_}"
        )


def guidance(
    rate: float,
    sizes: tuple[float, float],
    seen: tuple[int, int],
    observed: float,
    *,
    confidence: float,
    decided: bool,
) -> Guidance:
    """The MDE at effective ``sizes``, and, without a verdict, the traffic the observed change needs.

    ``seen`` are the traces seen per group: the ratio of effective size to traces seen is the
    information the current policies get from each trace, so it converts an effective size needed
    into traces; the baseline percentage treats the slice as the only source.
    """
    detectable = detectable_difference(rate, *sizes, confidence=confidence)
    if decided or observed == 0 or not 0 <= rate + observed <= 1:
        return Guidance(rate, detectable, confidence, observed)
    needed = traces_per_group(rate, observed, confidence=confidence)
    per_trace = (sizes[0] + sizes[1]) / max(seen[0] + seen[1], 1)
    traffic = (seen[0] + seen[1]) / 2
    percent = 100 * needed / traffic if traffic and needed <= traffic else None
    return Guidance(
        rate, detectable, confidence, observed, math.ceil(needed / per_trace), percent, round(traffic)
    )
