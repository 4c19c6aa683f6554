"""``--format json|csv`` of classify, report, compare and select, and ``compare --fail-on`` exit codes.

The JSON keys checked here are the ones the README's analysis section documents.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest
from click.testing import CliRunner

from tailcut.cli import cli
from tests.analysis_support import fleet_data, split_in_two, tail_sample

ESTIMATE = {
    "value",
    "numerator",
    "denominator",
    "n_effective",
    "low",
    "high",
    "confidence",
    "method",
    "sample",
}
DIFFERENCE = {"value", "low", "high", "confidence", "method", "a", "b"}
CATEGORY_VERDICT = {
    "category",
    "verdict",
    "reason",
    "p_value",
    "adjusted_p_value",
    "test",
    "confidence",
    "estimate",
    "census",
    "population",
    "baseline",
    "tail",
    "sample_size",
}
CENSUS = {"categories", "not_census", "head_probability", "groups_without_census"}
SAMPLE_SIZE = {
    "detectable_difference",
    "power",
    "confidence",
    "traces_per_group_needed",
    "baseline_percent_needed",
}
CATEGORIES = {"error", "schema_violation", "schema_drift", "tool_loop", "cost_blowup", "silent_degradation"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return fleet_data(tmp_path_factory)


@pytest.fixture(scope="module")
def revisions(fleet, tmp_path_factory):
    """v1 and v2 (v2 fixes a stale contract) with a 50% slice decided from the ticket: v2 → v1 regresses."""
    path = tmp_path_factory.mktemp("revisions") / "data"
    ticket = {r.trace_id: r.ticket_id for r in fleet.runs}
    tail_sample(fleet.path, path, fleet.failing, 0.5, member=lambda t: ticket[t] % 2 == 0)
    return path


@pytest.fixture(scope="module")
def unchanged(fleet, tmp_path_factory):
    """Two halves of the same traffic (alternate tickets as harness_revision A and B), kept alike."""
    path = tmp_path_factory.mktemp("unchanged") / "data"
    return split_in_two(fleet, path, "harness_revision", ("A", "B"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _estimate(record: Any) -> None:
    assert set(record) == ESTIMATE, record
    assert record["low"] <= record["value"] <= record["high"]
    assert 0 <= record["numerator"] <= record["denominator"] or record["method"] == "horvitz-thompson"
    assert record["denominator"] >= 1 and isinstance(record["sample"], str)


def _difference(record: Any) -> None:
    assert set(record) == DIFFERENCE, record
    assert record["low"] <= record["value"] <= record["high"]
    _estimate(record["a"])
    _estimate(record["b"])
    assert record["value"] == pytest.approx(record["b"]["value"] - record["a"]["value"])


def test_compare_json_has_the_documented_keys_and_holm(revisions):
    result = run(
        "compare", "--data", str(revisions), "--by", "harness_revision", "v1", "v2", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) == {"kind", "description", "a", "b", "family", "categories", "census"}
    assert set(record["census"]) == CENSUS
    assert record["family"] == {"method": "holm", "error_rate": 0.05, "tests": 6}
    assert record["a"]["label"] == "v1" and 0 < record["a"]["traces"] <= record["a"]["seen"]
    assert {row["category"] for row in record["categories"]} == CATEGORIES
    for row in record["categories"]:
        assert set(row) == CATEGORY_VERDICT
        for key in ("population", "baseline", "tail"):
            _difference(row[key])
        if row["census"] is not None:
            _difference(row["census"])
            assert row["census"]["a"]["sample"] == "all traces" and row["estimate"] == "census"
            assert row["census"]["a"]["denominator"] == record["a"]["seen"]
        assert row["population"]["a"]["sample"] == "kept (1/π weighted)"
        assert row["baseline"]["a"]["sample"] == "baseline slice"
        assert row["p_value"] <= row["adjusted_p_value"] <= 1
        assert set(row["sample_size"]) == SAMPLE_SIZE
        assert row["sample_size"]["power"] == 0.8 and row["sample_size"]["confidence"] == row["confidence"]
        if row["verdict"] in ("regression", "improvement"):
            assert row["sample_size"]["traces_per_group_needed"] is None
    verdicts = {row["category"]: row["verdict"] for row in record["categories"]}
    assert verdicts["error"] == "improvement"  # v1's failed tool calls, errors since issue 27


def test_fail_on_regression_exits_1_on_a_planted_regression_and_0_without_change(revisions, unchanged):
    regressed = run(
        "compare", "--data", str(revisions), "--by", "harness_revision", "v2", "v1", "--fail-on", "regression"
    )
    assert regressed.exit_code == 1, regressed.output
    assert "failing on verdict regression" in regressed.output
    same = run(
        "compare",
        "--data",
        str(unchanged),
        "--by",
        "harness_revision",
        "A",
        "B",
        "--fail-on",
        "regression,improvement",
    )
    assert same.exit_code == 0, same.output
    assert "regression" not in {
        row["verdict"]
        for row in json.loads(
            run(
                "compare", "--data", str(unchanged), "--by", "harness_revision", "A", "B", "--format", "json"
            ).output
        )["categories"]
    }
    fixed = ("compare", "--data", str(revisions), "--by", "harness_revision", "v1", "v2")
    assert run(*fixed, "--fail-on", "regression").exit_code == 0
    listed = run(*fixed, "--fail-on", "regression", "--fail-on", "confined to tail sample,improvement")
    assert listed.exit_code == 1
    assert "failing on verdict confined to tail sample, improvement" in listed.output
    wrong = run(
        "compare", "--data", str(revisions), "--by", "harness_revision", "v1", "v2", "--fail-on", "worse"
    )
    assert wrong.exit_code == 2 and "unknown verdict 'worse'" in wrong.output


def test_compare_csv_has_one_row_per_category(revisions):
    result = run(
        "compare", "--data", str(revisions), "--by", "harness_revision", "v1", "v2", "--format", "csv"
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert {row["category"] for row in rows} == CATEGORIES
    assert {"verdict", "population.a.numerator", "baseline.b.denominator", "tail.low"} <= set(rows[0])


def test_report_json_and_csv(revisions):
    result = run("report", "--data", str(revisions), "--format", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) == {
        "location",
        "traffic",
        "decisions",
        "categories",
        "population",
        "layers",
        "boundaries",
        "survival",
    }
    survival = record["survival"]
    assert all(row["category"].endswith((": run survived", ": run failed")) for row in survival)
    assert sum(row["findings"] for row in survival) == sum(row["findings"] for row in record["layers"])
    assert set(record["traffic"]) == {
        "seen",
        "kept",
        "dropped",
        "baseline",
        "baseline_kept",
        "tail_kept",
        "spans",
    }
    for row in record["categories"]:
        assert set(row) == {"category", "kept_hits", "weighted", "baseline", "sample_size"}
        assert set(row["sample_size"]) == {
            "weighted_detectable_difference",
            "baseline_detectable_difference",
            "power",
            "confidence",
        }
        _estimate(row["weighted"])
        _estimate(row["baseline"])
    for row in record["population"]:
        assert set(row) == {"quantity", "estimate"}
    assert {"layer", "findings", "traces_represented", "categories"} == set(record["layers"][0])
    table = list(
        csv.DictReader(io.StringIO(run("report", "--data", str(revisions), "--format", "csv").output))
    )
    assert {row["category"] for row in table} == CATEGORIES
    assert "weighted.numerator" in table[0] and "baseline.denominator" in table[0]


def test_classify_json_and_csv(revisions):
    result = run("classify", "--data", str(revisions), "--format", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) == {"kept_traces", "summary", "findings"}
    assert sum(row["findings"] for row in record["summary"]) == len(record["findings"])
    assert set(record["findings"][0]) >= {"trace_id", "category", "span_id", "layer", "evidence"}
    rows = list(
        csv.DictReader(io.StringIO(run("classify", "--data", str(revisions), "--format", "csv").output))
    )
    assert len(rows) == len(record["findings"])


def test_select_json_and_csv(revisions, tmp_path):
    result = run(
        "select",
        "--data",
        str(revisions),
        "--baseline",
        "5",
        "--out",
        str(tmp_path / "c"),
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) == {
        "path",
        "traces",
        "incidents",
        "baseline",
        "baseline_requested",
        "envelopes",
        "not_replayable",
        "strata",
        "selections",
    }
    assert record["baseline_requested"] == 5 and len(record["selections"]) == record["traces"]
    assert set(record["selections"][0]) == {
        "trace_id",
        "reason",
        "categories",
        "inclusion_probability",
        "baseline",
    }
    again = run(
        "select", "--data", str(revisions), "--baseline", "5", "--out", str(tmp_path / "d"), "--format", "csv"
    )
    rows = list(csv.DictReader(io.StringIO(again.output)))
    assert [row["trace_id"] for row in rows] == [s["trace_id"] for s in record["selections"]]


def test_compare_results_json_and_fail_on(tmp_path):
    from tests.test_analysis_cli import results_file

    incidents = {f"{i:032x}": (False, [True]) for i in range(30)}
    baseline = {f"{i + 100:032x}": (True, [True]) for i in range(40)}
    before = results_file(tmp_path / "a.parquet", {**incidents, **baseline}, "v1")
    broken = {t: (True, [i % 2 == 0]) for i, t in enumerate(baseline)}  # half the slice now fails
    after = results_file(tmp_path / "b.parquet", {**incidents, **broken}, "v2")
    result = run("compare", "--results", before, after, "--format", "json", "--fail-on", "regression")
    assert result.exit_code == 1
    record = json.loads(result.output.split("\ntailcut compare:")[0])
    assert set(record) == {
        "kind",
        "a",
        "b",
        "modes",
        "unpaired",
        "samples",
        "by_category",
        "weighted_pass",
        "verdict",
    }
    assert record["verdict"]["verdict"] == "regression"
    _difference(record["verdict"]["baseline"])
    sample = record["samples"][1]
    assert sample["sample"] == "baseline slice" and sample["broken"] == 20
    _estimate(sample["pass_a"])
    _difference(sample["fail_rate_change"])


def test_compare_plan_prints_traces_per_group(revisions):
    alone = run("compare", "--plan", "5%", "2%")
    assert alone.exit_code == 0, alone.output
    assert "3,414 traces per group" in alone.output  # 5% → 7%, 80% power at 1 − 0.05/6
    result = run("compare", "--plan", "0.05", "0.02", "--data", str(revisions), "--format", "json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) == {
        "rate",
        "delta",
        "power",
        "confidence",
        "traces_per_group",
        "baseline_share",
        "baseline_slice_traces_per_group",
        "categories",
    }
    assert record["traces_per_group"] == 3414 and record["confidence"] == pytest.approx(1 - 0.05 / 6)
    assert record["baseline_slice_traces_per_group"] == math.ceil(3414 / record["baseline_share"])
    assert {row["category"] for row in record["categories"]} == CATEGORIES
    for row in record["categories"]:
        # counting the policy-kept failures needs fewer traces than the slice alone
        assert row["traces_per_group"] <= record["baseline_slice_traces_per_group"]
    bad = run("compare", "--plan", "0.05", "x")
    assert bad.exit_code == 2 and "DELTA 'x' is not a number" in bad.output
    assert run("compare", "--plan", "0.05", "0").exit_code == 2  # could not plan (issue 29)
