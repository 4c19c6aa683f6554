"""Findings on the span trees framework instrumentors record: failures the run survived, failures written into
payloads, outputs the harness refused (issue 27), through ``tailcut ingest`` and ``tailcut classify``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tailcut.analysis import Dataset, Thresholds
from tailcut.cli import cli
from tests import findings_trees as trees


@pytest.fixture(scope="module")
def classified(tmp_path_factory):
    folder = tmp_path_factory.mktemp("observations")
    ids = trees.trace_ids()
    source = trees.write(folder / "trees.json", {ids[name]: s.tree for name, s in trees.SCENARIOS.items()})
    data = folder / "data"
    result = CliRunner().invoke(cli, ["ingest", str(source), "--data", str(data)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    dataset = Dataset(data)
    return dataset, ids, dataset.classify()


@pytest.mark.parametrize("name", sorted(trees.SCENARIOS))
def test_each_tree_gets_its_findings_at_the_span_a_person_looks_at(classified, name):
    _, ids, findings = classified
    scenario = trees.SCENARIOS[name]
    rows = findings.filter(trace_id=ids[name]).to_dicts()
    got = {r["category"]: (r["span_name"], r["layer"]) for r in rows}
    want = {c: (span.split("#")[0], layer) for c, (span, layer) in scenario.expected.items()}
    assert got == want, [r["evidence"] for r in rows]
    for row in rows:
        assert row["evidence"] and "\n" not in row["evidence"]
        if scenario.recovered is not None:
            assert row["recovered"] is scenario.recovered
    if scenario.signals:
        [error] = [r for r in rows if r["category"] == "error"]
        assert tuple(error["signals"]) == scenario.signals


def test_the_pointed_span_is_the_right_one_not_a_namesake(classified):
    """The code-execution failure points at the model call after the failed step, not the one inside it."""
    dataset, ids, findings = classified
    [row] = findings.filter(trace_id=ids["smolagents_code_execution_failed"], category="error").to_dicts()
    [(start,)] = dataset.sql(
        f"SELECT (start_time_ns - min(start_time_ns) OVER ()) // 1000000 FROM spans "
        f"WHERE trace_id = '{row['trace_id']}' QUALIFY span_id = '{row['span_id']}'"
    ).rows()
    assert start == 420
    assert "reported to the model in" in row["evidence"] and "Code execution failed" in row["evidence"]


def test_evidence_quotes_the_frameworks_report(classified):
    _, ids, findings = classified
    by = {(r["trace_id"], r["category"]): r for r in findings.to_dicts()}
    assert 'http.status: "Error 403: Forbidden"' in by[(ids["tool_returns_403"], "error")]["evidence"]
    refused = by[(ids["smolagents_code_parsing_failed"], "schema_violation")]
    assert "Code parsing failed on line 3" in refused["evidence"]
    assert refused["signals"] == ["harness refused output", "smolagents.code_parsing"]


def test_the_exhaustive_classification_finds_the_same(classified):
    dataset, _, findings = classified
    exhaustive = dataset.classify(
        thresholds=Thresholds(trust_recorded_counts=False, trust_trace_signals=False)
    )
    columns = ["trace_id", "category", "span_id", "layer", "evidence", "signals", "recovered"]
    assert (
        exhaustive.select(columns)
        .sort("trace_id", "category")
        .equals(findings.select(columns).sort("trace_id", "category"))
    )
    dataset.classify()


def test_configured_observation_rules_find_a_house_error_format(tmp_path):
    from tailcut.exporters.conventions import observations

    ids = trees.trace_ids()
    tree = trees.SCENARIOS["clean_run"].tree
    house = [
        trees.tool("check_stock", "Step 1", 210, 390, {"sku": "A1"}, "ACME-E42: stock service down")
        if span.name == "check_stock"
        else span
        for span in tree
    ]
    source = trees.write(tmp_path / "house.json", {ids["clean_run"]: house})
    data = tmp_path / "data"
    assert CliRunner().invoke(cli, ["ingest", str(source), "--data", str(data)]).exit_code == 0
    dataset = Dataset(data)
    assert dataset.classify().height == 0
    rules = observations.with_extra(
        observations.rules_from_config([{"name": "acme.error", "pattern": r"^ACME-E\d+", "kind": "service"}])
    )
    [row] = dataset.classify(thresholds=Thresholds(observation_rules=rules)).to_dicts()
    assert (row["category"], row["span_name"], row["signals"]) == (
        "error",
        "check_stock",
        ["failure observation", "service"],
    )
