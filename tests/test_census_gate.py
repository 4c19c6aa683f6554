"""The clean-baseline gate (issue 29): a "before" revision with no failures is the normal case for a CI gate.

v1 has no failures, so no policy keeps any of its traces (and without a baseline slice none is kept at
all); v2 has errors and failed outcomes. Through the real collector, ``tailcut compare`` must compare them
(census rates of 0 with honest upper bounds), exit 0 without ``--fail-on``, 1 when a ``--fail-on``
verdict fired, 2 with ``{"error": ...}`` when the comparison cannot be made.
"""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from tailcut.analysis._power import traces_per_group
from tailcut.analysis.stats import wilson_interval
from tailcut.cli import cli
from tests.census_support import Run, draw, feed, viewer_compare

pytestmark = pytest.mark.slow


def _runs() -> list[Run]:
    rng = random.Random(7)
    clean = [Run("v1") for _ in range(60)]
    failing = draw("v2", 60, {"error": 0.2, "silent_degradation": 0.2, "tool_loop": 0.05}, rng)
    return clean + failing


@pytest.fixture(scope="module", params=[10.0, 0.0], ids=["baseline-10%", "no-baseline"])
def data(request, tmp_path_factory):
    return feed(tmp_path_factory.mktemp("gate"), _runs(), baseline_percent=request.param), request.param


def compare(data_dir, *args: str):
    return CliRunner().invoke(
        cli, ["compare", "--data", str(data_dir), "--by", "harness_revision", *args], catch_exceptions=False
    )


def test_a_clean_before_revision_is_compared_and_its_regression_fires(data):
    data_dir, baseline = data
    result = compare(data_dir, "v1", "v2", "--format", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["a"]["seen"] == 60 and record["b"]["seen"] == 60
    if baseline == 0:
        assert record["a"]["traces"] == 0  # nothing of v1 was kept
    assert {"error", "silent_degradation"} <= set(record["census"]["categories"])
    rows = {row["category"]: row for row in record["categories"]}
    for category in ("error", "silent_degradation"):
        row = rows[category]
        census = row["census"]
        assert row["estimate"] == "census"
        assert census["a"]["numerator"] == 0 and census["a"]["denominator"] == 60
        # Wilson's upper bound at 0/60, at the row's Holm level
        upper = wilson_interval(0, 60, confidence=row["confidence"])[1]
        assert census["a"]["low"] == 0 and census["a"]["high"] == pytest.approx(upper) and upper > 0.05
        assert census["b"]["numerator"] >= 6
        assert row["verdict"] == "regression", row["reason"]
    fired = compare(data_dir, "v1", "v2", "--fail-on", "regression")
    assert fired.exit_code == 1 and "failing on verdict regression" in fired.output
    calm = compare(data_dir, "v2", "v1", "--fail-on", "regression", "--format", "json")
    assert calm.exit_code == 0, calm.output
    reversed_ = {row["category"]: row["verdict"] for row in json.loads(calm.output)["categories"]}
    assert reversed_["error"] == reversed_["silent_degradation"] == "improvement"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("v1", "v9"), "no trace has harness_revision = 'v9'; values present: v1, v2"),
        (("v1",), "needs two values"),
        (("v1", "v2", "--fail-on", "worse"), "unknown verdict 'worse'"),
    ],
)
def test_a_comparison_that_cannot_be_made_exits_2_with_a_json_error(data, args, message):
    data_dir, _ = data
    result = compare(data_dir, *args, "--format", "json")
    assert result.exit_code == 2
    error = json.loads(result.stdout.splitlines()[0])
    assert set(error) == {"error"} and message in error["error"]
    assert message in result.stderr


def test_sizing_uses_the_census_where_it_applies(data):
    """Traffic, not the slice, sets the power of a census category: --plan needs the uniform figure of
    traces seen, and the hint's traces per group is the uniform figure for the observed change."""
    data_dir, _ = data
    result = CliRunner().invoke(
        cli, ["compare", "--plan", "5%", "5%", "--data", str(data_dir), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    rows = {row["category"]: row for row in plan["categories"]}
    for category in ("error", "silent_degradation"):
        assert rows[category]["census"] is True
        assert rows[category]["traces_per_group"] == plan["traces_per_group"]
    assert rows["schema_drift"]["census"] is False
    record = json.loads(compare(data_dir, "v1", "v2", "--format", "json").output)
    loop = next(row for row in record["categories"] if row["category"] == "tool_loop")
    assert loop["estimate"] == "census" and loop["verdict"] == "no evidence" and loop["census"]["value"] > 0
    needed = traces_per_group(0.0, loop["census"]["value"], confidence=loop["confidence"])
    assert loop["sample_size"]["traces_per_group_needed"] == needed


def test_the_viewer_shows_the_numbers_of_the_cli(data):
    """/compare: the same verdicts, Holm levels, adjusted p-values and intervals as `tailcut compare`, each
    interval labelled at the level it is drawn at (never "[95%]" for a Holm-level one), and the hint."""
    data_dir, _ = data
    record = json.loads(compare(data_dir, "v1", "v2", "--format", "json").output)
    page = viewer_compare(data_dir)
    assert page.status_code == 200
    html = page.text
    assert "[95%]" not in html and "census categories (every trace seen counted" in html
    for row in record["categories"]:
        assert f"{row['confidence'] * 100:.2f}%" in html
        assert f"p = {row['adjusted_p_value']:.2g}" in html or row["adjusted_p_value"] < 1e-4
        census = row["census"]
        if census is not None:
            low, high = census["low"] * 100, census["high"] * 100
            assert f"{census['value'] * 100:+.1f} pp [{low:+.1f}, {high:+.1f}]" in html
            assert f"{census['a']['numerator']:.0f}/{census['a']['denominator']} → " in html
    loop = next(row for row in record["categories"] if row["category"] == "tool_loop")
    needed = loop["sample_size"]["traces_per_group_needed"]
    assert f"about {needed:,} traces per group" in html


def test_with_head_sampling_upstream_the_census_is_of_the_head_sampled_traces(tmp_path):
    """ot=th:8: the head sampler passed half the traffic on; the census counts the traces seen (a uniform
    sample of the traffic, so the rates are the traffic's) and the output says so."""
    data_dir = feed(tmp_path, _runs(), baseline_percent=10.0, tracestate="ot=th:8")
    result = compare(data_dir, "v1", "v2", "--format", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["census"]["head_probability"] == {"a": 0.5, "b": 0.5}
    error = next(row for row in record["categories"] if row["category"] == "error")
    assert error["estimate"] == "census" and error["census"]["a"]["denominator"] == 60
    table = CliRunner().invoke(
        cli,
        ["compare", "--data", str(data_dir), "--by", "harness_revision", "v1", "v2"],
        env={"COLUMNS": "400"},
    )
    assert "census is of the head-sampled traces (head probability 0.5 in v1, 0.5 in v2)" in table.output
