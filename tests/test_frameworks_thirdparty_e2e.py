"""Framework agents recorded by another instrumentor alone replay strictly, without ``--relax``.

Per (framework, instrumentor) pair of issue 28's table, five scenario runs are recorded by that
instrumentor alone (no tailcut SDK in the agent's process) through a real ``tailcut collect`` against the
scripted model server, exported with ``tailcut export-corpus`` and replayed with ``tailcut replay`` in
recorded mode with the model server forbidden: every run passes every rerun with no tool executed, and what
the records do not hold is reported as not compared rather than hidden; cut mode runs the chosen tool live
and serves the rest. A changed system prompt is still a divergence at
the first model call, so the rebuilt comparison is not vacuous.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tailcut.cli import cli
from tests.frameworks import harness, thirdparty_table, tools

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=thirdparty_table.PAIRS, ids="/".join)
def recorded(request, scenario_server, tmp_path_factory):
    """``(framework, instrumentor, corpus, scenario -> trace id)`` of runs that instrumentor recorded."""
    framework, instrumentor = request.param
    reason = harness.missing(framework, instrumentor)
    if reason is not None:
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp(f"{framework}-{instrumentor}")
    runs = harness.runs(framework, thirdparty_table.SCENARIOS)
    data = harness.record(framework, instrumentor, runs, directory, scenario_server)
    corpus = directory / "corpus"
    return framework, instrumentor, corpus, harness.export_corpus(data, corpus)


def test_a_third_party_recording_replays_strictly_without_relax(recorded, scenario_model):
    framework, _, corpus, traces = recorded
    with scenario_model.forbid():
        status, report, stderr = thirdparty_table.replay_json(corpus, framework, "-n", "2")
    assert status == 0, (stderr, thirdparty_table.said(report))
    assert {t["trace_id"] for t in report["traces"]} == set(traces.values())
    assert all(t["passed"] == t["reruns"] == 2 for t in report["traces"]), report["traces"]
    assert report.get("skipped", []) == []
    assert scenario_model.violations == []
    assert tools.EXECUTIONS == {}  # every tool call served from the record
    # no tool ran live; a call LangChain refused (the extra "units" argument) is said to be refused
    assert all(t["unwrapped"] == [] for t in report["traces"]), report["traces"]
    refused = {t["trace_id"]: t["rejected"] for t in report["traces"] if t["rejected"]}
    if framework == "langgraph":
        assert list(refused) == [traces["unexpected_argument"]], refused
        assert refused[traces["unexpected_argument"]][0].startswith("tool:get_weather#1 (")
        assert "validation error for" in refused[traces["unexpected_argument"]][0]
    else:
        assert refused == {}


def test_cut_mode_runs_the_chosen_tool_live_and_serves_the_rest(recorded, scenario_model):
    framework, _, corpus, traces = recorded
    cut = ("--trace", traces["repeated_call"], "--mode", "cut", "--live", "tool:get_weather")
    with scenario_model.forbid():
        status, report, stderr = thirdparty_table.replay_json(corpus, framework, *cut)
    assert status == 0, (stderr, thirdparty_table.said(report))
    (trace,) = report["traces"]
    assert trace["passed"] == trace["reruns"] == 1
    assert tools.EXECUTIONS["get_weather"] >= 1 and "lookup_order" not in tools.EXECUTIONS


def test_what_the_records_do_not_hold_is_reported_as_not_compared(recorded, scenario_model):
    framework, instrumentor, corpus, traces = recorded
    with scenario_model.forbid():
        _, report, _ = thirdparty_table.replay_json(corpus, framework, "--trace", traces["clean"])
    (trace,) = report["traces"]
    for entry in trace["not_compared"]:
        boundary, _, rest = entry.partition(": ")
        assert boundary.startswith("llm:"), entry
        assert "$." in rest and "(not in the records of " in rest, entry
    if instrumentor == "openllmetry":  # its records name the tools but hold no schema
        assert any("$.tools[*] (but their names)" in entry for entry in trace["not_compared"]), trace


def test_a_changed_system_prompt_is_a_divergence_at_the_first_model_call(recorded, scenario_model):
    framework, _, corpus, traces = recorded
    changed = ["--agent", f"tests.frameworks.changed:{framework}", "--trace", traces["clean"]]
    with scenario_model.forbid():
        result = CliRunner().invoke(cli, ["replay", str(corpus), *changed, "--format", "json"])
    assert result.exit_code == 1, result.stdout
    (trace,) = json.loads(result.stdout)["traces"]
    assert trace["diverged"] == 1
    assert "llm:openai.chat#1" in json.dumps(trace["first_divergence"]), trace
