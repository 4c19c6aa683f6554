"""Framework agents recorded by tailcut alone replay strictly: no model call, no tool execution.

Per framework, a few scenario runs (clean, a tool raising and caught, a fatal one where the framework has
it, a repeated call) are recorded by ``tailcut.init(auto_instrument=True)`` alone through a real
``tailcut collect``, exported with ``tailcut export-corpus`` and replayed with ``tailcut replay``:
recorded mode is exit 0, bit-stable 5/5 for every run, one trace per run, with the model server
forbidden and no tool run; cut mode runs the chosen tool (or the model) live and serves the rest; the
agent with a changed system prompt is reported as a divergence at the first model call.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tailcut.cli import cli
from tests.frameworks import harness, tools

SCENARIOS = ["clean", "tool_raises_caught", "tool_raises_fatal", "repeated_call"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=harness.FRAMEWORKS)
def recorded(request, scenario_server, tmp_path_factory):
    """``(framework, corpus, scenario -> trace id)`` of runs recorded by tailcut alone."""
    framework = request.param
    reason = harness.missing(framework)
    if reason is not None:
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp(framework)
    runs = harness.runs(framework, SCENARIOS)
    data = harness.record(framework, "tailcut", runs, directory, scenario_server)
    corpus = directory / "corpus"
    return framework, corpus, harness.export_corpus(data, corpus)


def replay(corpus, agent: str, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["replay", str(corpus), "--agent", agent, "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_a_recorded_replay_is_strict_bit_stable_and_calls_no_model_and_no_tool(recorded, scenario_model):
    framework, corpus, traces = recorded
    assert set(traces) == set(harness.runs(framework, SCENARIOS)), "one trace per run"
    with scenario_model.forbid():
        status, report = replay(corpus, harness.entry_point(framework), "-n", "5")
    assert scenario_model.violations == []
    assert tools.EXECUTIONS == {}
    assert status == 0, report
    assert sorted(t["trace_id"] for t in report["traces"]) == sorted(traces.values())
    assert {(t["rate"], t["bit_stable"]) for t in report["traces"]} == {("bit-stable 5/5 (recorded)", True)}
    assert report["canary"]["caught"] is True


def test_cut_at_a_tool_runs_that_tool_live_and_serves_the_model(recorded, scenario_model):
    framework, corpus, traces = recorded
    with scenario_model.forbid():
        status, report = replay(
            corpus,
            harness.entry_point(framework),
            *("--trace", traces["repeated_call"], "--mode", "cut", "--live", "tool:get_weather", "-n", "2"),
        )
    assert scenario_model.violations == []
    assert status == 0, report
    assert tools.EXECUTIONS == {"get_weather": 6}  # three calls a run, two reruns
    assert report["traces"][0]["rate"].endswith("2/2 (cut)"), report["traces"][0]


def test_cut_at_the_model_calls_it_live_and_serves_the_tools(recorded, scenario_model):
    framework, corpus, traces = recorded
    before = scenario_model.request_count
    status, report = replay(
        corpus,
        harness.entry_point(framework),
        *("--trace", traces["clean"], "--mode", "cut", "--live", "llm:openai.chat"),
    )
    assert status == 0, report
    assert scenario_model.request_count - before == 2
    assert tools.EXECUTIONS == {}


def test_a_changed_system_prompt_is_a_divergence_at_the_first_model_call(recorded, scenario_model):
    framework, corpus, traces = recorded
    with scenario_model.forbid():
        status, report = replay(corpus, f"tests.frameworks.changed:{framework}", "--trace", traces["clean"])
    assert status == 1
    (trace,) = report["traces"]
    assert trace["diverged"] == 1
    assert "llm:openai.chat#1" in json.dumps(trace["first_divergence"]), trace
    assert tools.EXECUTIONS == {}


@pytest.mark.parametrize("framework", harness.FRAMEWORKS)
def test_with_openinference_in_the_same_process_each_call_is_replayed_once(
    framework, scenario_server, scenario_model, tmp_path
):
    """tailcut and the framework's OpenInference instrumentor both record: the corpus holds each model
    call and tool call once (tailcut's), and the replay is strict and bit-stable."""
    reason = harness.missing(framework, "openinference")
    if reason is not None:
        pytest.skip(reason)
    scenarios = ["clean", "tool_raises_caught"]
    data = harness.record(framework, "tailcut+openinference", scenarios, tmp_path, scenario_server)
    traces = harness.export_corpus(data, tmp_path / "corpus")
    import pyarrow.parquet as pq

    envelopes = pq.read_table(tmp_path / "corpus" / "envelopes.parquet").to_pylist()
    clean = [(e["boundary"], e["convention"]) for e in envelopes if e["trace_id"] == traces["clean"]]
    assert [boundary for boundary, _ in clean if boundary.startswith("llm:")] == ["llm:openai.chat"] * 2
    assert {convention for _, convention in clean} == {"tailcut"}
    with scenario_server.forbid():
        status, report = replay(tmp_path / "corpus", harness.entry_point(framework), "-n", "2")
    assert status == 0, report
    assert {t["rate"] for t in report["traces"]} == {"bit-stable 2/2 (recorded)"}
    assert tools.EXECUTIONS == {}
