"""Tests of tailcut.analysis.stats: published worked examples, properties, and a tail-sampling simulation.

Reference values are the published ones, found through their public sources (cited at each test); the
simulation draws populations with known rates, applies tailcut's sampling design and checks that the
intervals cover the known rate as often as they claim.
"""

from __future__ import annotations

import doctest
import math
from dataclasses import FrozenInstanceError

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from tailcut.analysis import stats
from tailcut.analysis._verdict import GroupCounts, PopulationSample, compare_groups
from tailcut.analysis.stats import (
    Estimate,
    StatisticsInputError,
    difference,
    horvitz_thompson_mean,
    horvitz_thompson_proportion,
    horvitz_thompson_total,
    kish_effective_size,
    mcnemar,
    newcombe_difference,
    paired_difference,
    proportion,
    weighted_mean,
    weighted_proportion,
    wilson_interval,
)
from tailcut.errors import TailcutError

# ----------------------------------------------------------------------------- published worked examples


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Stat. Med. 17:857,
        # score method without continuity correction; values as checked in m-Py/propint,
        # tests/testthat/test_Single_Proportion_CI.R.
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
    ],
)
def test_wilson_interval_matches_newcombe_1998(successes: int, n: int, low: float, high: float) -> None:
    assert wilson_interval(successes, n) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2", "value", "low", "high"),
    [
        # Newcombe (1998), "Interval estimation for the difference between independent proportions:
        # comparison of eleven methods", Stat. Med. 17:873, Table II, method 10; values as checked in
        # m-Py/propint, tests/testthat/test_Two_Independent_Props_CI.R. For 56/70 − 48/80 the difference
        # is 0.8 − 0.6 = 0.2000 and the interval (0.0524, 0.3339); the figures "0.1833 (0.0336, 0.3170)"
        # sometimes quoted for this example do not belong to it.
        (56, 70, 48, 80, 0.2000, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.6000, 0.1705, 0.8090),
    ],
)
def test_newcombe_difference_matches_newcombe_1998_table_ii(
    x1: int, n1: int, x2: int, n2: int, value: float, low: float, high: float
) -> None:
    d = newcombe_difference(x1, n1, x2, n2, sample="baseline slice")
    assert (d.value, d.low, d.high) == pytest.approx((value, low, high), abs=5e-5)
    assert d.method == "newcombe"
    assert (d.first.n, d.second.n) == (n1, n2)


@pytest.mark.parametrize(
    ("cells", "value", "low", "high"),
    [
        # Newcombe (1998), "Improved confidence intervals for the difference between binomial proportions
        # based on paired data", Stat. Med. 17:2635, method 10; values as checked in m-Py/propint,
        # tests/testthat/test_Two_Dependent_Props_CI.R (cells e, f, g, h).
        ((36, 12, 2, 0), 0.2000, 0.0569, 0.3404),
        ((18, 12, 2, 18), 0.2000, 0.0562, 0.3290),
        ((53, 0, 0, 1), 0.0000, -0.0729, 0.0729),
        ((0, 30, 0, 0), 1.0000, 0.8395, 1.0000),
        # Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables" (2017), chapter 8,
        # Newcombe square-and-add interval; value as checked in ocbe-uio/contingencytables,
        # tests/testthat/test-ch8.R.
        ((59, 6, 16, 80), -0.0621, -0.1186, -0.0046),
    ],
)
def test_paired_difference_matches_newcombe_paired_examples(
    cells: tuple[int, int, int, int], value: float, low: float, high: float
) -> None:
    d = paired_difference(*cells, sample="tail-kept")
    assert (d.value, d.low, d.high) == pytest.approx((value, low, high), abs=5e-5)
    assert d.method == "newcombe-paired"
    assert d.first.n == d.second.n == sum(cells)


def test_mcnemar_chi_square_matches_agresti_presidential_approval() -> None:
    # Agresti (1990), Categorical Data Analysis, p. 350: approval in two surveys of 1600 people,
    # 150 approve → disapprove, 86 disapprove → approve. R's mcnemar.test (documented example) gives
    # McNemar's chi-squared = 16.818 with continuity correction, p-value = 4.115e-05.
    test = mcnemar(150, 86)
    assert test.chi2 == pytest.approx(16.818, abs=5e-4)
    assert test.chi2_p_value == pytest.approx(4.115e-05, rel=1e-3)
    assert test.exact_p_value < test.chi2_p_value


def test_mcnemar_exact_matches_fagerland_bentur_example() -> None:
    # Fagerland, Lydersen & Laake (2013), "The McNemar test for binary matched-pairs data: mid-p and
    # asymptotic are better than exact conditional", BMC Med. Res. Methodol. 13:91, Table 1 (Bentur et al.,
    # airway hyper-responsiveness before/after transplant): discordant pairs 1 and 7. Their supplement
    # defines the exact p-value as 2·binomcdf(1, 8, 0.5) = 18/256 (the paper reports 0.070).
    test = mcnemar(1, 7)
    assert test.exact_p_value == pytest.approx(18 / 256, abs=1e-12)
    assert test.chi2 == pytest.approx((6 - 1) ** 2 / 8)


# ------------------------------------------------------------------------------- hand-computed examples

# Four kept traces: y = [1, 0, 1, 0], π = [1, 0.5, 0.25, 0.5], so weights 1/π = [1, 2, 4, 2].
Y = [1, 0, 1, 0]
PI = [1.0, 0.5, 0.25, 0.5]
W = [1.0, 2.0, 4.0, 2.0]


def test_horvitz_thompson_total_by_hand() -> None:
    # Σ y/π = 1 + 4 = 5; Σ (1−π)/π² y² = 0 + (0.75 / 0.0625)·1 = 12.
    total = horvitz_thompson_total(Y, PI)
    assert total.value == 5.0
    assert total.standard_error == pytest.approx(math.sqrt(12))
    assert (total.low, total.high) == pytest.approx(
        (5 - 1.959964 * math.sqrt(12), 5 + 1.959964 * math.sqrt(12))
    )
    assert total.method == "horvitz-thompson"
    assert total.sample == "kept (1/π weighted)"


def test_horvitz_thompson_mean_divides_total_by_population() -> None:
    mean = horvitz_thompson_mean(Y, PI, population_size=10)
    assert mean.value == 0.5
    assert mean.standard_error == pytest.approx(math.sqrt(12) / 10)


def test_horvitz_thompson_census_has_no_uncertainty() -> None:
    total = horvitz_thompson_total([3.0, 4.0, 0.0], [1.0, 1.0, 1.0])
    assert (total.value, total.standard_error, total.low, total.high) == (7.0, 0.0, 7.0, 7.0)


def test_hajek_proportion_by_hand() -> None:
    # p̂ = 5/9. Linearization variance Σ w²(y − p̂)² / (Σw)² = (16 + 100 + 256 + 100)/81 / 81 = 472/6561,
    # so n_eff = p̂(1 − p̂)/v̂ = (20/81)·(6561/472) = 1620/472.
    estimate = weighted_proportion(Y, W)
    assert estimate.value == pytest.approx(5 / 9)
    assert estimate.successes == 5.0
    assert estimate.n == 4
    assert estimate.n_effective == pytest.approx(1620 / 472)
    assert (estimate.low, estimate.high) == pytest.approx(
        wilson_interval(5 / 9 * 1620 / 472, 1620 / 472), abs=1e-12
    )
    assert (estimate.method, estimate.sample) == ("hajek", "kept (1/π weighted)")


def test_hajek_proportion_falls_back_to_kish_when_no_row_has_the_property() -> None:
    # Kish: (Σw)²/Σw² = 81/25.
    estimate = weighted_proportion([0, 0, 0, 0], W)
    assert estimate.value == 0.0
    assert estimate.n_effective == pytest.approx(81 / 25)
    assert estimate.low == 0.0
    assert estimate.high == pytest.approx(wilson_interval(0, 81 / 25)[1])


def test_kish_effective_size_by_hand() -> None:
    assert kish_effective_size(W) == pytest.approx(81 / 25)


def test_weighted_mean_by_hand() -> None:
    # x̄ = (10 + 2·20 + 4·30)/7 = 170/7; v̂ = n/(n−1)·Σ w²(x − x̄)²/(Σw)² with n = 3.
    values, weights = [10.0, 20.0, 30.0], [1.0, 2.0, 4.0]
    mean = 170 / 7
    variance = 3 / 2 * ((10 - mean) ** 2 + 4 * (20 - mean) ** 2 + 16 * (30 - mean) ** 2) / 49
    estimate = weighted_mean(values, weights)
    assert estimate.value == pytest.approx(mean)
    assert estimate.standard_error == pytest.approx(math.sqrt(variance))
    assert estimate.n_effective == pytest.approx(49 / 21)


# ------------------------------------------------------------------------------------------- properties

counts = st.integers(min_value=1, max_value=5000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
)
confidences = st.floats(min_value=0.5, max_value=0.999)


@given(counts, confidences)
def test_wilson_interval_contains_estimate_inside_unit_interval(
    count: tuple[int, int], confidence: float
) -> None:
    successes, n = count
    low, high = wilson_interval(successes, n, confidence=confidence)
    assert 0.0 <= low <= successes / n <= high <= 1.0
    assert low < high


@given(counts, st.integers(min_value=2, max_value=50))
def test_wilson_interval_narrows_with_n(count: tuple[int, int], factor: int) -> None:
    successes, n = count
    low, high = wilson_interval(successes, n)
    wide_low, wide_high = wilson_interval(successes * factor, n * factor)
    assert wide_high - wide_low < high - low


@given(counts, st.floats(min_value=0.5, max_value=0.98))
def test_wilson_interval_widens_with_confidence(count: tuple[int, int], confidence: float) -> None:
    successes, n = count
    low, high = wilson_interval(successes, n, confidence=confidence)
    wider_low, wider_high = wilson_interval(successes, n, confidence=confidence + 0.01)
    assert wider_low <= low
    assert high <= wider_high
    assert wider_high - wider_low > high - low


@given(counts, st.floats(min_value=0.01, max_value=1000))
def test_hajek_with_equal_weights_is_the_plain_proportion(count: tuple[int, int], weight: float) -> None:
    successes, n = count
    indicator = np.repeat([1, 0], [successes, n - successes])
    weighted = weighted_proportion(indicator, np.full(n, weight))
    plain = proportion(successes, n, sample="baseline slice")
    assert weighted.value == pytest.approx(plain.value, abs=1e-12)
    assert weighted.n_effective == pytest.approx(n, rel=1e-9)
    assert (weighted.low, weighted.high) == pytest.approx((plain.low, plain.high), abs=1e-9)


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=200))
def test_kish_effective_size_never_exceeds_n(weights: list[float]) -> None:
    assert 0 < kish_effective_size(weights) <= len(weights) * (1 + 1e-12)


@given(st.integers(min_value=1, max_value=200), st.floats(min_value=1e-3, max_value=1e3))
def test_kish_effective_size_is_n_for_equal_weights(n: int, weight: float) -> None:
    assert kish_effective_size([weight] * n) == pytest.approx(n)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=100))
def test_weighted_mean_with_equal_weights_is_the_textbook_mean(values: list[float]) -> None:
    x = np.array(values)
    estimate = weighted_mean(x, np.ones(x.size), sample="baseline slice")
    assert estimate.value == pytest.approx(x.mean(), abs=1e-6)
    assert estimate.standard_error == pytest.approx(x.std(ddof=1) / math.sqrt(x.size), rel=1e-6, abs=1e-9)


@given(counts, counts)
def test_newcombe_interval_contains_difference_and_flips_with_order(
    first: tuple[int, int], second: tuple[int, int]
) -> None:
    forward = newcombe_difference(*first, *second, sample="baseline slice")
    backward = newcombe_difference(*second, *first, sample="baseline slice")
    assert -1.0 <= forward.low <= forward.value <= forward.high <= 1.0
    assert (backward.value, backward.low, backward.high) == pytest.approx(
        (-forward.value, -forward.high, -forward.low), abs=1e-12
    )


@given(st.lists(st.integers(min_value=0, max_value=300), min_size=4, max_size=4))
def test_paired_interval_contains_difference(cells: list[int]) -> None:
    assume(sum(cells) > 0)
    d = paired_difference(*cells, sample="tail-kept")
    assert -1.0 <= d.low <= d.value <= d.high <= 1.0
    assert d.value == pytest.approx((cells[1] - cells[2]) / sum(cells))


@given(st.integers(min_value=0, max_value=500), st.integers(min_value=0, max_value=500))
def test_mcnemar_is_symmetric_and_bounded(b: int, c: int) -> None:
    forward, backward = mcnemar(b, c), mcnemar(c, b)
    assert forward.exact_p_value == backward.exact_p_value
    assert forward.chi2 == backward.chi2
    assert 0.0 <= forward.exact_p_value <= 1.0
    assert 0.0 <= forward.chi2_p_value <= 1.0


@given(st.integers(min_value=0, max_value=500))
def test_mcnemar_without_imbalance_is_no_evidence(b: int) -> None:
    test = mcnemar(b, b)
    assert (test.exact_p_value, test.chi2, test.chi2_p_value) == (1.0, 0.0, 1.0)


def test_weighted_difference_uses_each_estimates_own_interval() -> None:
    # A Hájek rate enters Newcombe through its Wilson interval on n_eff, not on its row count.
    weighted = weighted_proportion(
        np.repeat([1, 0, 1, 0], [30, 15, 4, 51]), np.repeat([1, 1, 20, 20], [30, 15, 4, 51])
    )
    plain = proportion(5, 100, sample="baseline slice")
    d = difference(weighted, plain)
    assert d.low == pytest.approx(
        d.value - math.hypot(weighted.value - weighted.low, plain.high - plain.value)
    )
    assert d.high == pytest.approx(
        d.value + math.hypot(weighted.high - weighted.value, plain.value - plain.low)
    )


def test_difference_refuses_mixed_confidence_levels() -> None:
    with pytest.raises(StatisticsInputError, match=r"confidence 0\.95 and 0\.9"):
        difference(
            proportion(1, 10, sample="tail-kept"), proportion(1, 10, sample="tail-kept", confidence=0.9)
        )


# ----------------------------------------------------------------------------------- labels and output


def test_proportion_from_all_traces_is_exact_with_a_wilson_interval() -> None:
    exact = proportion(49, 400, sample="all traces")
    sampled = proportion(49, 400, sample="baseline slice")
    assert (exact.method, sampled.method) == ("exact", "wilson")
    assert (exact.low, exact.high) == (sampled.low, sampled.high)


def test_estimate_prints_rate_interval_denominator_and_sample() -> None:
    assert str(proportion(49, 400, sample="baseline slice")) == "12.2% [9.4%, 15.8%] (n=400, baseline slice)"
    assert str(proportion(0, 20, sample="tail-kept")) == "0.0% [0.0%, 16.1%] (n=20, tail-kept)"


def test_estimate_is_frozen() -> None:
    estimate = proportion(1, 2, sample="tail-kept")
    with pytest.raises(FrozenInstanceError):
        estimate.value = 0.9  # type: ignore[misc]


def test_difference_prints_signed_points_and_both_rates() -> None:
    d = newcombe_difference(60, 500, 40, 500, sample="baseline slice")
    assert str(d) == "+4.0 pp [+0.3, +7.8] (12.0% of 500 vs 8.0% of 500, baseline slice)"
    assert d.excludes_zero


# ----------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: wilson_interval(11, 10), r"successes must lie in \[0, n=10\]"),
        (lambda: wilson_interval(1, 0), "n must be a positive number"),
        (lambda: wilson_interval(1, 10, confidence=1.0), "confidence must lie strictly between 0 and 1"),
        (lambda: proportion(1, 0, sample="all traces"), "n must be a whole number ≥ 1"),
        (lambda: proportion(1.5, 10, sample="all traces"), "successes must be a whole number"),
        (lambda: proportion(1, 10, sample="kept (1/π weighted)"), "sample must be one of"),
        (lambda: weighted_proportion([1, 0.5], [1, 1]), "indicator must hold only booleans or 0/1"),
        (lambda: weighted_proportion([1, 0], [1, 0]), "weights must be positive"),
        (lambda: weighted_proportion([1, 0], [1]), "weights has 1 entries for 2 rows"),
        (lambda: weighted_proportion([], []), "indicator must be a non-empty one-dimensional array"),
        (lambda: weighted_proportion([1, float("nan")], [1, 1]), "indicator must be finite"),
        (lambda: weighted_mean([1.0], [1.0]), "needs at least 2 rows"),
        (lambda: horvitz_thompson_total([1, 2], [0.5, 0.0]), r"inclusion_probabilities must lie in \(0, 1\]"),
        (lambda: horvitz_thompson_total([1, 2], [0.5, 1.5]), r"inclusion_probabilities must lie in \(0, 1\]"),
        (
            lambda: horvitz_thompson_mean([1, 2], [1, 1], population_size=1),
            "population_size \\(1\\) is smaller",
        ),
        (lambda: paired_difference(0, 0, 0, 0, sample="tail-kept"), "needs at least one pair"),
        (lambda: mcnemar(-1, 3), "first_only must be a whole number ≥ 0"),
    ],
)
def test_bad_input_raises_one_clear_error(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StatisticsInputError, match=message) as raised:
        call()
    assert isinstance(raised.value, TailcutError)
    assert "\n" not in str(raised.value)


# ------------------------------------------------------------------------------------ compare_groups


def _counts(baseline: tuple[int, int], tail: tuple[int, int]) -> GroupCounts:
    return GroupCounts(baseline_hits=baseline[0], baseline_n=baseline[1], tail_hits=tail[0], tail_n=tail[1])


@pytest.mark.parametrize(
    ("a", "b", "label"),
    [
        (_counts((40, 1000), (30, 400)), _counts((80, 1000), (30, 400)), "regression"),
        (_counts((80, 1000), (30, 400)), _counts((40, 1000), (90, 400)), "improvement"),
        (_counts((40, 1000), (30, 400)), _counts((44, 1000), (90, 400)), "confined to tail sample"),
        (_counts((40, 1000), (90, 400)), _counts((44, 1000), (30, 400)), "confined to tail sample"),
        (_counts((40, 1000), (30, 400)), _counts((44, 1000), (35, 400)), "no evidence"),
    ],
)
def test_compare_groups_rule(a: GroupCounts, b: GroupCounts, label: str) -> None:
    verdict = compare_groups({"tool_loop": a}, {"tool_loop": b})["tool_loop"]
    assert verdict.label == label
    # B − A, with both denominators carried.
    assert verdict.baseline.value == pytest.approx(
        b.baseline_hits / b.baseline_n - a.baseline_hits / a.baseline_n
    )
    assert (verdict.baseline.first.n, verdict.baseline.second.n) == (b.baseline_n, a.baseline_n)
    assert (verdict.tail.first.n, verdict.tail.second.n) == (b.tail_n, a.tail_n)
    assert verdict.baseline.first.sample == "baseline slice"
    assert verdict.tail.first.sample == "tail-kept"


def test_compare_groups_prints_verdict_with_both_intervals() -> None:
    verdict = compare_groups(
        {"error": _counts((40, 1000), (30, 400))}, {"error": _counts((44, 1000), (90, 400))}
    )["error"]
    assert str(verdict) == (
        "error: confined to tail sample; "
        "baseline slice +0.4 pp [-1.4, +2.2] (4.4% of 1000 vs 4.0% of 1000, baseline slice); "
        "tail-kept +15.0 pp [+10.1, +19.9] (22.5% of 400 vs 7.5% of 400, tail-kept)"
    )


def test_compare_groups_refuses_mismatched_categories() -> None:
    counts = _counts((1, 10), (1, 10))
    with pytest.raises(StatisticsInputError, match=r"only one has: \['tool_loop'\]"):
        compare_groups({"error": counts}, {"error": counts, "tool_loop": counts})


def test_compare_groups_compares_a_group_without_a_baseline_slice() -> None:
    """An empty sample gives no interval and the verdict rests on the others (issue 29: never an error)."""
    first, second = {"error": _counts((0, 0), (3, 10))}, {"error": _counts((1, 10), (3, 10))}
    verdict = compare_groups(first, second)["error"]
    assert verdict.baseline is None and verdict.tail is not None and verdict.label == "no evidence"
    assert verdict.p_value == 1.0


def test_compare_groups_refuses_more_hits_than_traces() -> None:
    with pytest.raises(StatisticsInputError, match="error: group B has 11 tail-kept hits among only 10"):
        compare_groups({"error": _counts((1, 10), (3, 10))}, {"error": _counts((1, 10), (11, 10))})


# --------------------------------------------------------------------------- tail-sampling simulation

BASELINE_P = 0.05
REPETITIONS = 2000
# Coverage tolerance: with 2000 repetitions the binomial standard error of an observed coverage at the
# nominal 95% is √(0.95·0.05/2000) ≈ 0.49 pp, so 93–97% is ±4.1 standard errors: a method with true
# coverage of 95% lands outside with probability below 1e-4, while one that is off by 3 pp or more (Kish's
# over-wide interval, or the naive kept-corpus rate) lands outside almost surely. The seed makes it exact.
COVERAGE_RANGE = (0.93, 0.97)


def _draw_design(
    rng: np.random.Generator,
    *,
    traces: int,
    rate: float,
    flagged_if_hit: float,
    flagged_if_not: float,
    reps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``reps`` populations and tailcut's sampling of each, as counts per cell.

    Cells: (hit, flagged), (hit, not flagged), (no hit, flagged), (no hit, not flagged). Flagged traces
    (failed or anomalous) are kept with π = 1. Independently, each trace joins the uniform baseline slice
    with probability p; a trace kept only through the baseline has π = p. Returns the population cell
    counts and the baseline members per cell.
    """
    cell_probabilities = [
        rate * flagged_if_hit,
        rate * (1 - flagged_if_hit),
        (1 - rate) * flagged_if_not,
        (1 - rate) * (1 - flagged_if_not),
    ]
    population = rng.multinomial(traces, cell_probabilities, size=reps)
    baseline = rng.binomial(population, BASELINE_P)
    return population, baseline


def _kept_rows(population_row: np.ndarray, baseline_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kept traces of one population as (indicator, weight 1/π) rows."""
    hit_flagged, _, miss_flagged, _ = population_row
    _, hit_baseline_only, _, miss_baseline_only = baseline_row
    sizes = [hit_flagged, hit_baseline_only, miss_flagged, miss_baseline_only]
    indicator = np.repeat([1.0, 1.0, 0.0, 0.0], sizes)
    weights = np.repeat([1.0, 1 / BASELINE_P, 1.0, 1 / BASELINE_P], sizes)
    return indicator, weights


@pytest.mark.parametrize(
    ("traces", "rate", "flagged_if_hit", "flagged_if_not"),
    [
        # The category is what the tail policies keep on (every failure kept), plus 3% anomalies.
        (20_000, 0.03, 1.0, 0.03),
        (20_000, 0.15, 1.0, 0.03),
        # A span-derived category (a tool loop, say) that the policies catch only 70% of the time; the rest
        # reaches the kept corpus only through the baseline (about 45 such traces per population).
        (100_000, 0.03, 0.7, 0.03),
    ],
)
def test_weighted_and_baseline_intervals_cover_the_true_rate(
    traces: int, rate: float, flagged_if_hit: float, flagged_if_not: float
) -> None:
    rng = np.random.default_rng(20_260_101)
    population, baseline = _draw_design(
        rng,
        traces=traces,
        rate=rate,
        flagged_if_hit=flagged_if_hit,
        flagged_if_not=flagged_if_not,
        reps=REPETITIONS,
    )
    hajek_hits = baseline_hits = kish_hits = naive_hits = 0
    for population_row, baseline_row in zip(population, baseline, strict=True):
        indicator, weights = _kept_rows(population_row, baseline_row)
        hajek = weighted_proportion(indicator, weights)
        hajek_hits += hajek.low <= rate <= hajek.high
        uniform = proportion(
            int(baseline_row[0] + baseline_row[1]), int(baseline_row.sum()), sample="baseline slice"
        )
        baseline_hits += uniform.low <= rate <= uniform.high
        kish = kish_effective_size(weights)
        kish_low, kish_high = wilson_interval(hajek.value * kish, kish)
        kish_hits += kish_low <= rate <= kish_high
        naive = proportion(int(indicator.sum()), indicator.size, sample="tail-kept")
        naive_hits += naive.low <= rate <= naive.high
    low, high = COVERAGE_RANGE
    assert low <= hajek_hits / REPETITIONS <= high
    assert low <= baseline_hits / REPETITIONS <= high
    # Why n_eff is design-based rather than Kish's: Kish's interval is far too wide under tail sampling.
    assert kish_hits / REPETITIONS > 0.99
    # And why the kept corpus must be weighted: unweighted, it is nowhere near the true rate.
    assert naive_hits / REPETITIONS < 0.01


@pytest.mark.parametrize(
    ("traces", "rate", "flagged_if_hit"),
    [
        (20_000, 0.03, 1.0),  # the policies keep every hit: a counted stratum plus a sampled one
        (2_000, 0.04, 1.0),  # the demo's size
        (2_000, 0.04, 0.7),  # small N, 30% of hits known only through ~100 baseline traces
        (2_000, 0.01, 0.0),  # no policy catches it: everything rests on the baseline slice
    ],
)
def test_horvitz_thompson_proportion_covers_the_true_rate(
    traces: int, rate: float, flagged_if_hit: float
) -> None:
    """N known (the traces table): the counted hits plus the sampled rest cover the process rate.

    The MOVER combination of two Wilson intervals is a little conservative when one stratum is a census
    (coverage up to about 97.5%), so the band here is 93-98%. The same small-N cases make the Hájek
    interval undercover badly (about 82% and below), which is why the report uses this one.
    """
    rng = np.random.default_rng(20_260_101)
    population, baseline = _draw_design(
        rng, traces=traces, rate=rate, flagged_if_hit=flagged_if_hit, flagged_if_not=0.03, reps=REPETITIONS
    )
    covered = 0
    for population_row, baseline_row in zip(population, baseline, strict=True):
        indicator, weights = _kept_rows(population_row, baseline_row)
        estimate = horvitz_thompson_proportion(indicator, 1 / weights, population_size=traces)
        covered += estimate.low <= rate <= estimate.high
    assert 0.93 <= covered / REPETITIONS <= 0.98


def test_horvitz_thompson_proportion_counts_a_census_exactly() -> None:
    # Every hit kept by a policy (pi = 1) and no sampled hit: the estimate is the count over N.
    estimate = horvitz_thompson_proportion(
        [1] * 75 + [0] * 20, [1.0] * 75 + [0.05] * 20, population_size=2000
    )
    assert estimate.value == pytest.approx(75 / 2000)
    assert estimate.successes == pytest.approx(75)
    assert estimate.method == "horvitz-thompson"
    assert estimate.low < 75 / 2000 < estimate.high
    with pytest.raises(StatisticsInputError, match="smaller than the 3 kept traces"):
        horvitz_thompson_proportion([1, 0, 1], [1.0, 1.0, 1.0], population_size=2)


def test_horvitz_thompson_mean_covers_the_rate_of_the_traces_seen() -> None:
    # Every hit flagged would make the HT mean exact; here 30% of hits are known only through the baseline.
    rng = np.random.default_rng(7)
    traces = 100_000
    population, baseline = _draw_design(
        rng, traces=traces, rate=0.03, flagged_if_hit=0.7, flagged_if_not=0.03, reps=REPETITIONS
    )
    covered = 0
    for population_row, baseline_row in zip(population, baseline, strict=True):
        indicator, weights = _kept_rows(population_row, baseline_row)
        mean = horvitz_thompson_mean(indicator, 1 / weights, population_size=traces)
        seen_rate = (population_row[0] + population_row[1]) / traces
        covered += mean.low <= seen_rate <= mean.high
    low, high = COVERAGE_RANGE
    assert low <= covered / REPETITIONS <= high


def _group_counts(population_row: np.ndarray, baseline_row: np.ndarray) -> GroupCounts:
    return GroupCounts(
        baseline_hits=int(baseline_row[0] + baseline_row[1]),
        baseline_n=int(baseline_row.sum()),
        tail_hits=int(population_row[0]),
        tail_n=int(population_row[0] + population_row[2]),
    )


def _verdict_shares(
    seed: int, a: dict[str, float], b: dict[str, float], *, reps: int = 400
) -> dict[str, float]:
    """How often each verdict comes out over ``reps`` independent draws of groups A and B."""
    rng = np.random.default_rng(seed)
    population_a, baseline_a = _draw_design(rng, traces=20_000, reps=reps, **a)
    population_b, baseline_b = _draw_design(rng, traces=20_000, reps=reps, **b)
    labels = []
    for rep in range(reps):
        first = {"tool_loop": _group_counts(population_a[rep], baseline_a[rep])}
        second = {"tool_loop": _group_counts(population_b[rep], baseline_b[rep])}
        labels.append(compare_groups(first, second)["tool_loop"].label)
    return {label: labels.count(label) / reps for label in set(labels)}


def test_compare_groups_says_confined_when_only_the_tail_differs() -> None:
    # Same true rate (5%); B's anomaly detector flags 90% of loops instead of 30%, so loops crowd the
    # tail-kept traces of B, while the baseline slice sees the same 5% in both.
    shares = _verdict_shares(
        11,
        {"rate": 0.05, "flagged_if_hit": 0.3, "flagged_if_not": 0.05},
        {"rate": 0.05, "flagged_if_hit": 0.9, "flagged_if_not": 0.05},
    )
    # About 95% expected (the baseline interval contains the true difference, 0, 95% of the time); 400
    # draws put 90% 4.5 standard errors below that.
    assert shares.get("confined to tail sample", 0) >= 0.90
    assert shares.get("regression", 0) <= 0.06


def test_compare_groups_says_regression_when_the_true_rate_rises() -> None:
    detector = {"flagged_if_hit": 0.7, "flagged_if_not": 0.05}
    shares = _verdict_shares(12, {"rate": 0.05, **detector}, {"rate": 0.10, **detector})
    assert shares.get("regression", 0) >= 0.95
    reversed_shares = _verdict_shares(13, {"rate": 0.10, **detector}, {"rate": 0.05, **detector})
    assert reversed_shares.get("improvement", 0) >= 0.95


# ------------------------------------------------------------------------------------------- doctests


def test_docstring_examples_run() -> None:
    result = doctest.testmod(stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 15
    assert result.failed == 0


def test_public_results_are_estimates() -> None:
    assert isinstance(proportion(1, 2, sample="all traces"), Estimate)
    assert set(stats.__all__) <= set(dir(stats))


def test_population_estimates_decide_the_verdict_when_both_groups_have_one() -> None:
    """A fix visible in the population rates (failures counted against every trace seen) is an
    improvement even when the small baseline slice alone cannot tell."""
    counted = {"baseline_hits": 2, "baseline_n": 47, "tail_hits": 75, "tail_n": 376}
    fixed = {"baseline_hits": 0, "baseline_n": 64, "tail_hits": 0, "tail_n": 266}
    before = PopulationSample([True] * 75 + [False] * 301, [1.0] * 376, size=1000)
    after = PopulationSample([False] * 266, [1.0] * 266, size=1000)
    without = compare_groups({"c": GroupCounts(**counted)}, {"c": GroupCounts(**fixed)})["c"]
    assert without.label == "confined to tail sample"  # the slice's 2/47 vs 0/64 cannot say
    assert without.population is None
    with_population = compare_groups(
        {"c": GroupCounts(**counted, population=before)}, {"c": GroupCounts(**fixed, population=after)}
    )["c"]
    assert with_population.label == "improvement"
    assert with_population.population.high < 0
    assert "population interval lies below 0" in with_population.reason


# --------------------------------------------------------------------------- statsmodels as the oracle


@settings(deadline=None)
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_agrees_with_statsmodels(count: tuple[int, int]) -> None:
    successes, n = count
    expected = proportion_confint(successes, n, alpha=0.05, method="wilson")
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-9)


@settings(deadline=None)
@given(
    st.integers(1, 1000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.integers(1, 1000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
)
def test_newcombe_difference_agrees_with_statsmodels(first: tuple[int, int], second: tuple[int, int]) -> None:
    expected = confint_proportions_2indep(*first, *second, method="newcomb", compare="diff", alpha=0.05)
    got = newcombe_difference(*first, *second, sample="baseline slice")
    assert (got.low, got.high) == pytest.approx(expected, abs=1e-9)


@settings(deadline=None)
@given(st.integers(0, 300), st.integers(0, 300))
def test_mcnemar_agrees_with_statsmodels(b: int, c: int) -> None:
    """Where they differ on purpose: for b = c statsmodels squares |b − c| − 1 = −1 into a statistic of
    1/(b + c); tailcut floors the corrected difference at 0 (no imbalance, p = 1), as Edwards' correction
    intends, and that case is checked by test_mcnemar_without_imbalance_is_no_evidence."""
    assume(b != c)
    table = [[5, b], [c, 7]]
    test = mcnemar(b, c)
    assert test.exact_p_value == pytest.approx(statsmodels_mcnemar(table, exact=True).pvalue, rel=1e-9)
    corrected = statsmodels_mcnemar(table, exact=False, correction=True)
    assert test.chi2 == pytest.approx(corrected.statistic, rel=1e-9, abs=1e-12)
    assert test.chi2_p_value == pytest.approx(corrected.pvalue, rel=1e-9)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from([1.0, 0.5, 0.1, 0.037]), st.integers(1, 40)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 400),
)
def test_repeated_rows_give_the_sums_and_estimate_of_the_rows_written_out(rows, extra):
    """``repeats`` (how compare passes its kept traces: distinct rows and their counts) gives the rate of
    every trace written out, at every level."""
    hits, pi, repeats = (list(column) for column in zip(*rows, strict=True))
    size = sum(repeats) + extra
    compact = stats.HorvitzThompsonRate.of(hits, pi, size, repeats=repeats)
    expanded = stats.HorvitzThompsonRate.of(np.repeat(hits, repeats), np.repeat(pi, repeats), size)
    assert (compact.kept, compact.certain, compact.sampled) == (
        expanded.kept,
        expanded.certain,
        expanded.sampled,
    )
    assert compact.one_probability == expanded.one_probability
    for name in ("count", "certain_hits", "sampled_hits", "variance_sum"):
        assert getattr(compact, name) == pytest.approx(getattr(expanded, name), rel=1e-12, abs=1e-12)
    for level in (0.9, 0.95, 1 - 0.05 / 6):
        a, b = compact.estimate(level), expanded.estimate(level)
        assert (a.value, a.low, a.high, a.n_effective) == pytest.approx(
            (b.value, b.low, b.high, b.n_effective), rel=1e-9, abs=1e-12
        )


@pytest.mark.parametrize("repeats", [[0, 1], [1.5, 1], [-1, 2], [1]])
def test_repeats_must_be_positive_whole_numbers_one_per_row(repeats):
    with pytest.raises(StatisticsInputError):
        stats.HorvitzThompsonRate.of([1, 0], [0.5, 1.0], 10, repeats=repeats)


def test_more_repeated_kept_traces_than_traces_seen_is_refused():
    with pytest.raises(StatisticsInputError, match="smaller than the 5 kept"):
        stats.HorvitzThompsonRate.of([1, 0], [0.5, 1.0], 4, repeats=[2, 3])
