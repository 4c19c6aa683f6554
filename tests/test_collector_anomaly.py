"""tailcut.trace.anomaly_score: robust z-scores (median, MAD, upper spread) against a per-key window."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.collector._anomaly import AnomalyScorer, robust_location_scale

KEY = ("support-agent", "run")


def filled(values: list[tuple[float, float, float]], **kwargs: int) -> AnomalyScorer:
    scorer = AnomalyScorer(**kwargs)
    for row in values:
        scorer.observe(KEY, row)
    return scorer


def test_no_score_until_the_window_has_min_window_traces():
    scorer = AnomalyScorer(window=50, min_window=5)
    for i in range(4):
        scorer.observe(KEY, (100 + i, 1000, 10))
        assert scorer.score(KEY, (100, 1000, 10)) is None
    scorer.observe(KEY, (104, 1000, 10))
    assert scorer.score(KEY, (100, 1000, 10)) is not None
    assert scorer.score(("other", "run"), (100, 1000, 10)) is None


def _scale(column: list[float]) -> tuple[float, float]:
    """The rule as the docstring states it, from the statistics module."""
    median = statistics.median(column)
    mad = statistics.median(abs(x - median) for x in column)
    q90 = statistics.quantiles(column, n=10, method="inclusive")[-1]
    return median, max(1.4826 * mad, (q90 - median) / 1.2816, 0.1 * abs(median), 1.0)


def test_score_is_the_largest_robust_z_score():
    rng = random.Random(5)
    rows = [(rng.gauss(1000, 300), rng.gauss(2000, 100), rng.choice([9, 10, 11])) for _ in range(100)]
    scorer = filled(rows, window=100, min_window=10)
    columns = list(zip(*rows, strict=True))
    expected = []
    probe = (2400.0, 2100.0, 12.0)
    for value, column in zip(probe, columns, strict=True):
        median, scale = _scale(list(column))
        expected.append((value - median) / scale)
    assert scorer.score(KEY, probe) == pytest.approx(max(expected))
    # for normal traffic the score is close to Iglewicz and Hoaglin's modified z-score
    tokens = columns[0]
    median = statistics.median(tokens)
    modified_z = (2400.0 - median) / (1.4826 * statistics.median(abs(x - median) for x in tokens))
    assert scorer.score(KEY, probe) == pytest.approx(modified_z, rel=0.15)


def test_a_cost_blowup_scores_high_and_an_ordinary_run_low():
    rng = random.Random(9)
    scorer = filled([(rng.gauss(3000, 300), rng.gauss(5000, 500), rng.randint(8, 12)) for _ in range(200)])
    assert scorer.score(KEY, (3100, 5200, 10)) < 3.5
    assert scorer.score(KEY, (30000, 5000, 10)) > 3.5  # tokens far above peers
    assert scorer.score(KEY, (3000, 5000, 60)) > 3.5  # a loop: span count far above


def test_a_reference_in_one_tight_mode_does_not_flag_its_other_modes():
    """Most runs answer in one call (MAD 0): the ordinary multi-call runs must not score as anomalies."""
    rng = random.Random(3)
    rows = [
        (537.0 + rng.randint(-3, 3), 20.0 + rng.random(), 4.0)
        if rng.random() < 0.6
        else (rng.uniform(1000, 2700), rng.uniform(40, 90), float(rng.choice([6, 7, 8, 9])))
        for _ in range(200)
    ]
    scorer = filled(rows)
    assert scorer.score(KEY, (2600.0, 85.0, 9.0)) < 3.5  # an ordinary multi-call run
    assert scorer.score(KEY, (16600.0, 60.0, 6.0)) > 3.5  # a token blowup
    assert scorer.score(KEY, (1500.0, 60.0, 40.0)) > 3.5  # a loop


def test_a_constant_reference_has_a_floor_not_a_zero_scale():
    assert robust_location_scale([7.0] * 30) == (7.0, 1.0)  # one unit
    assert robust_location_scale([500.0] * 30) == (500.0, 50.0)  # a tenth of the median


def test_window_keeps_only_the_last_traces():
    scorer = AnomalyScorer(window=20, min_window=20)
    for _ in range(20):
        scorer.observe(KEY, (100, 100, 10))
    high = scorer.score(KEY, (200, 100, 10))
    for _ in range(20):
        scorer.observe(KEY, (200, 100, 10))
    assert scorer.score(KEY, (200, 100, 10)) == 0.0 < high


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=25, max_size=60),
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
)
def test_score_rises_with_the_measure_and_its_scale_has_its_floors(tokens, low, high):
    low, high = sorted((low, high))
    scorer = AnomalyScorer(window=100, min_window=20)
    for value in tokens:
        scorer.observe(KEY, (value, 0.0, 0.0))
    assert scorer.score(KEY, (low, 0.0, 0.0)) <= scorer.score(KEY, (high, 0.0, 0.0))
    median, scale = robust_location_scale(tokens[-100:])
    assert median == pytest.approx(statistics.median(tokens))
    assert scale >= max(1.0, 0.1 * abs(median), 1.4826 * statistics.median(abs(x - median) for x in tokens))
