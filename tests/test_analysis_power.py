"""Sample-size guidance: the MDE and the traces a change needs, checked against a simulation."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.analysis import _power
from tailcut.analysis._power import detectable_difference, guidance, power, traces_per_group
from tailcut.analysis.stats import StatisticsInputError, newcombe_difference


def _detected(
    rng: np.random.Generator, rate: float, delta: float, n: int, confidence: float, reps: int
) -> float:
    """Share of draws in which Newcombe's interval at ``confidence`` excludes 0 (the test compare runs)."""
    a = rng.binomial(n, rate, size=reps)
    b = rng.binomial(n, rate + delta, size=reps)
    hits = sum(
        newcombe_difference(int(y), n, int(x), n, sample="baseline slice", confidence=confidence).low > 0
        for x, y in zip(a, b, strict=True)
    )
    return hits / reps


@pytest.mark.parametrize(
    ("rate", "n", "confidence"),
    [(0.05, 1000, 0.95), (0.10, 400, 1 - 0.05 / 6), (0.02, 3000, 0.99)],
)
def test_the_mde_is_detected_eighty_percent_of_the_time(rate: float, n: int, confidence: float) -> None:
    """At the MDE the real test rejects in about 80% of 2000 draws (standard error 0.9 pp; the normal
    approximation and Newcombe's interval differ by a few points at most)."""
    mde = detectable_difference(rate, n, n, confidence=confidence)
    assert mde is not None
    share = _detected(np.random.default_rng(int(rate * 1000) + n), rate, mde, n, confidence, 2000)
    assert 0.74 <= share <= 0.86, share
    # half the MDE is detected far less often: the figure is not just any large number
    assert _detected(np.random.default_rng(n), rate, mde / 2, n, confidence, 500) < 0.45


def test_traces_per_group_reaches_eighty_percent_in_simulation() -> None:
    n = traces_per_group(0.05, 0.05, confidence=1 - 0.05 / 6)
    share = _detected(np.random.default_rng(3), 0.05, 0.05, n, 1 - 0.05 / 6, 2000)
    assert 0.74 <= share <= 0.86, share


@settings(deadline=None)
@given(st.floats(0.01, 0.5), st.floats(0.01, 0.3), st.sampled_from([0.95, 0.99, 1 - 0.05 / 6]))
def test_traces_per_group_and_mde_agree(rate: float, delta: float, confidence: float) -> None:
    n = traces_per_group(rate, delta, confidence=confidence)
    assert power(rate, delta, n, n, confidence=confidence) >= _power.POWER
    mde = detectable_difference(rate, n, n, confidence=confidence)
    assert mde is not None and mde <= delta + 1e-9
    if n > 2:
        assert power(rate, delta, n - 1, n - 1, confidence=confidence) < _power.POWER


def test_guidance_says_what_would_make_a_verdict_possible() -> None:
    unsure = guidance(0.05, (450.0, 550.0), (5000, 5000), 0.03, confidence=0.99, decided=False)
    needed = traces_per_group(0.05, 0.03, confidence=0.99)
    assert unsure.traces_per_group == math.ceil(needed / 0.1)  # 1 effective trace per 10 seen today
    assert unsure.baseline_percent == pytest.approx(100 * needed / 5000)
    assert unsure.hint() == (
        f"to detect the observed +3.0 pp at 5.0%: about {unsure.traces_per_group:,} traces per group "
        f"(now 5,000), or a baseline slice of {unsure.baseline_percent:.0f}% at today's traffic"
    )
    decided = guidance(0.05, (900.0, 1100.0), (1000, 1000), 0.08, confidence=0.99, decided=True)
    assert decided.hint() is None and decided.detectable is not None
    assert guidance(0.05, (3.0, 3.0), (10, 10), 0.0, confidence=0.99, decided=False).detectable is None
    too_much = guidance(0.05, (90.0, 110.0), (1000, 1000), 0.03, confidence=0.99, decided=False)
    assert too_much.baseline_percent is None and "baseline slice" not in (too_much.hint() or "")


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(StatisticsInputError, match="rate must lie in"):
        detectable_difference(1.5, 10, 10)
    with pytest.raises(StatisticsInputError, match="delta must be non-zero"):
        traces_per_group(0.5, 0.0)


def test_module_examples_run() -> None:
    result = doctest.testmod(_power)
    assert result.attempted >= 4 and result.failed == 0
