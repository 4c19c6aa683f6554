"""The verdict of ``tailcut compare``: Holm's adjustment across categories, checked by simulation."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from tailcut.analysis import _records, _verdict
from tailcut.analysis._verdict import GroupCounts, PopulationSample, compare_groups, holm, p_value
from tailcut.analysis.stats import newcombe_difference

#: Six categories at different base rates, like a real fleet's.
RATES = {
    "error": 0.01,
    "schema_violation": 0.02,
    "schema_drift": 0.05,
    "tool_loop": 0.05,
    "cost_blowup": 0.10,
    "silent_degradation": 0.20,
}
TRACES = 1500
SLICE = 0.1
#: Share of a category's traces that a tail policy flags and keeps (the rest only through the slice).
FLAGGED = 0.7


def _group(
    rng: np.random.Generator,
    shift: dict[str, float] | None = None,
    *,
    traces: int = TRACES,
    population: bool = True,
) -> dict[str, GroupCounts]:
    """One group as the collector keeps it: flagged failures (π = 1) plus a uniform 10% slice."""
    member = rng.random(traces) < SLICE
    counts = {}
    for category, rate in RATES.items():
        hit = rng.random(traces) < rate + (shift or {}).get(category, 0.0)
        tail = hit & (rng.random(traces) < FLAGGED)
        kept = tail | member
        counts[category] = GroupCounts(
            baseline_hits=int((hit & member).sum()),
            baseline_n=int(member.sum()),
            tail_hits=int(tail.sum()),
            tail_n=max(int(tail.sum()), 1),
            population=PopulationSample(hit[kept], np.where(tail, 1.0, SLICE)[kept], traces)
            if population
            else None,
        )
    return counts


def _false_alarms(seed: int, reps: int, **group: object) -> tuple[float, float]:
    """Shares of draws without change in which any category says regression or improvement: Holm's
    verdicts, and what unadjusted tests at 95% would have said."""
    rng = np.random.default_rng(seed)
    alarms = unadjusted = 0
    for _ in range(reps):
        verdicts = compare_groups(_group(rng, **group), _group(rng, **group))  # type: ignore[arg-type]
        alarms += any(v.label in ("regression", "improvement") for v in verdicts.values())
        unadjusted += any((v.p_value or 1) <= 0.05 for v in verdicts.values())
    return alarms / reps, unadjusted / reps


@settings(deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=8))
def test_holm_agrees_with_statsmodels(p_values: list[float]) -> None:
    _, expected, _, _ = multipletests(p_values, alpha=0.05, method="holm")
    assert holm(p_values) == pytest.approx(list(expected), abs=1e-12)


@settings(deadline=None)
@given(
    st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
)
def test_p_value_is_the_level_at_which_the_interval_touches_zero(
    first: tuple[int, int], second: tuple[int, int]
) -> None:
    def at(confidence: float):
        return newcombe_difference(*first, *second, sample="baseline slice", confidence=confidence)

    p = p_value(at)
    assert 0 < p <= 1
    if 1e-9 < p < 0.999:
        assert at(1 - p * 1.001).excludes_zero
        assert not at(1 - p * 0.999).excludes_zero


def test_under_no_change_any_false_alarm_is_at_most_five_percent() -> None:
    """Family-wise: P(any category says regression or improvement) ≤ 5% when nothing changed.

    With the population estimates ``compare --by`` uses (300 draws), and with the baseline slice alone
    (1500 draws of larger groups), where Newcombe's intervals keep close to their nominal 95%: there six
    unadjusted tests raise a false alarm in about one draw of four, so the check has teeth. (The
    population intervals over-cover: their unadjusted false alarms are rarer still.)
    """
    holm_population, _ = _false_alarms(15, 300)
    assert holm_population <= _at_most_five_percent(300)
    holm_slice, unadjusted_slice = _false_alarms(16, 1500, traces=20_000, population=False)
    assert holm_slice <= _at_most_five_percent(1500)
    assert unadjusted_slice >= 0.15


def _at_most_five_percent(reps: int) -> float:
    """The largest share of ``reps`` draws consistent with a true 5%: three binomial standard errors
    above it (a method at 5% fails this one time in 700; one at 8% fails it nearly always)."""
    return 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_a_real_shift_in_one_category_is_found_and_only_there() -> None:
    """tool_loop doubles (5% → 13%) in groups of 4000 traces: found almost always, nothing else moves."""
    rng = np.random.default_rng(16)
    reps, found, elsewhere = 100, 0, 0
    for _ in range(reps):
        verdicts = compare_groups(_group(rng, traces=4000), _group(rng, {"tool_loop": 0.08}, traces=4000))
        found += verdicts["tool_loop"].label == "regression"
        elsewhere += any(v.label == "regression" for c, v in verdicts.items() if c != "tool_loop")
    assert found / reps >= 0.95
    assert elsewhere / reps <= 0.05


def test_each_verdict_reports_its_holm_level_and_adjusted_p() -> None:
    rng = np.random.default_rng(17)
    verdicts = compare_groups(_group(rng), _group(rng, {"tool_loop": 0.08}))
    loop = verdicts["tool_loop"]
    assert loop.label == "regression"
    assert loop.confidence == pytest.approx(1 - 0.05 / 6)  # the smallest p-value faces α/m
    assert loop.population is not None and loop.population.confidence == pytest.approx(loop.confidence)
    assert loop.adjusted_p_value == pytest.approx(min(1.0, 6 * loop.p_value))
    assert "Holm-adjusted p" in loop.reason
    assert sorted(v.confidence for v in verdicts.values()) == pytest.approx(
        [1 - 0.05 / k for k in range(1, 7)]
    )


def test_module_examples_run() -> None:
    for module in (_verdict, _records):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0
    assert doctest.testmod(_verdict).attempted >= 4
