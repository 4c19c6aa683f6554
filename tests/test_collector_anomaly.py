"""tailcut.trace.anomaly_score: robust z-scores (median/MAD) against a per-(service, root) window."""

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


def test_score_is_the_largest_modified_z_score():
    rng = random.Random(5)
    rows = [(rng.gauss(1000, 50), rng.gauss(2000, 100), rng.choice([9, 10, 11])) for _ in range(100)]
    scorer = filled(rows, window=100, min_window=10)
    columns = list(zip(*rows, strict=True))
    expected = []
    probe = (1400.0, 2100.0, 12.0)
    for value, column in zip(probe, columns, strict=True):
        median = statistics.median(column)
        mad = statistics.median(abs(x - median) for x in column)
        expected.append((value - median) / (1.4826 * mad))
    assert scorer.score(KEY, probe) == pytest.approx(max(expected))


def test_a_cost_blowup_scores_high_and_an_ordinary_run_low():
    rng = random.Random(9)
    scorer = filled([(rng.gauss(3000, 300), rng.gauss(5000, 500), rng.randint(8, 12)) for _ in range(200)])
    assert scorer.score(KEY, (3100, 5200, 10)) < 3.5
    assert scorer.score(KEY, (30000, 5000, 10)) > 3.5  # tokens far above peers
    assert scorer.score(KEY, (3000, 5000, 60)) > 3.5  # a loop: span count far above


def test_mad_zero_falls_back_to_mean_absolute_deviation_then_one_unit():
    values = [10.0] * 60 + [20.0] * 10
    median, scale = robust_location_scale(values)
    mean_ad = sum(abs(v - 10.0) for v in values) / len(values)
    assert (median, scale) == (10.0, pytest.approx(1.2533 * mean_ad))
    assert robust_location_scale([7.0] * 30) == (7.0, 1.0)


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
    st.floats(-1e5, 1e5, allow_nan=False),
)
def test_score_is_translation_invariant(tokens, probe, shift):
    base = AnomalyScorer(window=100, min_window=20)
    moved = AnomalyScorer(window=100, min_window=20)
    for value in tokens:
        base.observe(KEY, (value, 0.0, 0.0))
        moved.observe(KEY, (value + shift, 0.0, 0.0))
    assert moved.score(KEY, (probe + shift, 0.0, 0.0)) == pytest.approx(
        base.score(KEY, (probe, 0.0, 0.0)), rel=1e-6, abs=1e-6
    )
