"""Findings on real framework agents (issue 27): smolagents (``ToolCallingAgent``, ``CodeAgent``), LangGraph's
prebuilt ReAct agent and the OpenAI Agents SDK, each recorded by its OpenInference instrumentor (LangGraph
also by OpenLLMetry) through ``tailcut collect``, then ``tailcut classify``. The scenario script is the
label: each labelled finding comes out at its span, clean runs have none; what the classifier does not
find yet is listed in :data:`tests.findings_scoring.KNOWN_GAPS` and printed. The ``traces`` rows the collector
wrote flag ``error`` on exactly the traces with an ``error`` finding (a census category)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tailcut.analysis import Dataset, _census
from tailcut.cli import cli
from tests import findings_scoring
from tests.frameworks import harness

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("framework", "recorder"), findings_scoring.PAIRS)
def test_findings_at_the_labelled_spans(framework, recorder, scenario_server, tmp_path):
    reason = harness.missing(framework, recorder)
    if reason is not None:
        pytest.skip(reason)
    data = harness.record(framework, recorder, harness.runs(framework), tmp_path, scenario_server)
    result = CliRunner().invoke(cli, ["classify", "--data", str(data), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    findings = Dataset(data).findings()
    assert len(json.loads(result.output)["findings"]) == findings.height  # the stored table, shown
    gaps = [key for key in findings_scoring.KNOWN_GAPS if key[:2] == (framework, recorder)]
    for key in gaps:
        print(f"known gap {'/'.join(key)}: {findings_scoring.KNOWN_GAPS[key]}")
    score = findings_scoring.score(data, findings, recorder, gaps=gaps)
    assert not score.misses, score.misses
    assert not score.extras, score.extras
    assert score.clean_findings == 0
    assert sum(score.labels.values()) >= 6  # the scenarios were played and labelled (gaps aside)
    errors = findings.filter(category="error").to_dicts()
    assert errors and all(len(r["signals"]) >= 2 for r in errors)  # how it showed, and the sub-kind
    # the collector read the failures each framework reports in payloads: its traces rows flag exactly
    # the traces with an error finding, so compare counts errors on every trace seen (issue 29)
    assert "error" in _census.build(Dataset(data)).categories
