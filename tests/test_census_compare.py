"""``tailcut compare`` on one small data dir, held to what the data dir was made of (issue 29).

Two harness revisions (300 traces each, planted at known rates) go through the real collector with an
errors policy, a latency policy and a 10% baseline slice. The comparison is checked two ways:

* **from first principles**: each census count is the number of traces planted with the category, the
  traces seen and kept are the data dir's, each census interval is Newcombe's (statsmodels'
  ``newcomb``) at the row's Holm level, and each row's ``test`` is the exact one where the census table
  has an expected count under 5;
* **against a stored expectation** (``fixtures/census_compare.json``): every key the stored comparison
  has (by revision and by time window) has the same value now, to the last bit of every float. It was
  written by the comparison before it was restructured to read each table once (so a change of how the
  numbers are computed cannot change a number), and keys may be added, never changed. Rewrite it with
  ``TAILCUT_WRITE_EXPECTED=1`` only when a change of the numbers is intended.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from statsmodels.stats.proportion import confint_proportions_2indep

from tailcut.analysis import Dataset, compare_by, compare_windows
from tailcut.analysis.stats import smallest_expected_count
from tests.census_support import EPOCH_NS, PLANTED, Run, draw, feed, truth

pytestmark = pytest.mark.slow

EXPECTED = Path(__file__).parent / "fixtures" / "census_compare.json"
PER_GROUP = 300
RATES = {
    "v1": {"error": 0.06, "silent_degradation": 0.08, "tool_loop": 0.05, "slow": 0.05},
    "v2": {"error": 0.25, "silent_degradation": 0.10, "tool_loop": 0.05, "slow": 0.05},
}
#: The windows: the first and the second half of the traces in time (one trace every 2 s; see ``feed``).
MIDDLE = dt.datetime.fromtimestamp(EPOCH_NS / 1e9 + PER_GROUP * 2, dt.UTC)


def _runs() -> list[Run]:
    rng = random.Random(2929)
    runs = [run for group, rates in RATES.items() for run in draw(group, PER_GROUP, rates, rng)]
    rng.shuffle(runs)
    return runs


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[list[Run], dict[str, Any]]:
    runs = _runs()
    with Dataset(feed(tmp_path_factory.mktemp("compare"), runs, baseline_percent=10.0, seed=3)) as data:
        start = dt.datetime.fromtimestamp(EPOCH_NS / 1e9, dt.UTC)
        end = start + dt.timedelta(seconds=2 * len(runs))
        records = {
            "by": compare_by(data, "harness_revision", "v1", "v2").to_record(),
            "windows": compare_windows(data, (start, MIDDLE), (MIDDLE, end)).to_record(),
        }
    return runs, json.loads(json.dumps(records))  # as `--format json` gives it: plain JSON values


def test_the_census_counts_are_what_was_planted(compared):
    runs, records = compared
    record = records["by"]
    assert record["a"]["seen"] == record["b"]["seen"] == PER_GROUP
    assert set(PLANTED) <= set(record["census"]["categories"])
    rows = {row["category"]: row for row in record["categories"]}
    for category in PLANTED:
        row = rows[category]
        census = row["census"]
        a = truth([r for r in runs if r.group == "v1"], category)
        b = truth([r for r in runs if r.group == "v2"], category)
        assert (census["a"]["numerator"], census["a"]["denominator"]) == (a, PER_GROUP)
        assert (census["b"]["numerator"], census["b"]["denominator"]) == (b, PER_GROUP)
        assert row["estimate"] == "census"
        small = smallest_expected_count(b, PER_GROUP, a, PER_GROUP) < 5
        assert row["test"] == (
            "fisher" if small else "newcombe"
        )  # 301 x 301 tables: Fisher's, not Boschloo's
        alpha = 1 - row["confidence"]
        low, high = confint_proportions_2indep(b, PER_GROUP, a, PER_GROUP, method="newcomb", alpha=alpha)
        assert census["low"] == pytest.approx(low, abs=1e-9) and census["high"] == pytest.approx(
            high, abs=1e-9
        )
    for row in rows.values():  # no hits in either group: the exact test, which sees no rise
        if (
            row["census"] is not None
            and row["census"]["a"]["numerator"] == row["census"]["b"]["numerator"] == 0
        ):
            assert (row["test"], row["p_value"], row["verdict"]) == ("fisher", 1.0, "no evidence")
    assert records["windows"]["a"]["seen"] == records["windows"]["b"]["seen"] == PER_GROUP


def _subset_mismatches(expected: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` differs from ``expected`` on a key ``expected`` has (keys ``got`` adds are allowed)."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r} is not an object"]
        return [
            m
            for key, value in expected.items()
            for m in (
                _subset_mismatches(value, got[key], f"{where}.{key}")
                if key in got
                else [f"{where}.{key}: gone"]
            )
        ]
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{where}: {got!r} != {expected!r}"]
        return [
            m
            for i, (e, g) in enumerate(zip(expected, got, strict=True))
            for m in _subset_mismatches(e, g, f"{where}[{i}]")
        ]
    return [] if expected == got else [f"{where}: {got!r} != {expected!r}"]


def test_the_comparison_is_the_stored_one(compared):
    _, records = compared
    if os.environ.get("TAILCUT_WRITE_EXPECTED"):
        EXPECTED.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert _subset_mismatches(expected, records) == []
