"""The framework test harness plays its scenarios as labelled, and records them through ``tailcut collect``.

In process, each framework agent runs every scenario it supports against the scripted model: the clean
run answers after one tool call, a tool's failure reaches the model (or ends the run where the scenario
says it is fatal), a repeated call runs the tool three times. Then each (framework, recorder) pair
records a few runs through a real collector, and every stored trace is traced back to its scenario.
"""

from __future__ import annotations

import json

import pytest

from tests.frameworks import harness, tools
from tests.frameworks.scenarios import SCENARIOS, Answer, parse_tag

PAIRS = [
    (framework, recorder)
    for recorder in harness.RECORDERS
    for framework in harness.FRAMEWORKS
    if recorder == "tailcut" or framework in harness.INSTRUMENTORS[recorder]
]
RECORDED = ["clean", "tool_raises_caught", "tool_raises_fatal", "unknown_tool"]


def skip_unless_installed(framework: str, recorder: str = "tailcut") -> None:
    reason = harness.missing(framework, recorder)
    if reason is not None:
        pytest.skip(reason)


def play(framework: str, scenario: str, server) -> tuple[object, list[dict]]:
    """Run one scenario in process; returns (the answer or the exception, the model requests' bodies)."""
    before = len(server.requests)
    tools.EXECUTIONS.clear()
    try:
        outcome: object = harness.agent_module(framework).agent(SCENARIOS[scenario].question(framework))
    except Exception as exc:
        outcome = exc
    return outcome, [request.body for request in server.requests[before:]]


@pytest.mark.parametrize("framework", harness.FRAMEWORKS)
def test_every_supported_scenario_plays_as_labelled(framework, scenario_model):
    skip_unless_installed(framework)
    for scenario in harness.runs(framework):
        outcome, bodies = play(framework, scenario, scenario_model)
        where = f"{framework}/{scenario}"
        assert bodies, f"{where}: the model was never asked"
        assert {parse_tag(json.dumps(body))[1].name for body in bodies} == {scenario}
        if harness.fails(framework, scenario):
            assert isinstance(outcome, Exception), f"{where} should fail; it answered {outcome!r}"
            continue
        assert not isinstance(outcome, Exception), f"{where} raised {outcome!r}"
        if scenario == "invalid_json_arguments" and framework == "langgraph":
            assert outcome == "" and len(bodies) == 1  # LangGraph ends the graph on an invalid tool call
            continue
        final = SCENARIOS[scenario].turns[-1]
        assert isinstance(final, Answer) and outcome == final.text, f"{where} answered {outcome!r}"
        if scenario.startswith("tool_http_"):
            order = SCENARIOS[scenario].turns[0].arguments["order_id"]
            assert tools.HTTP_ERRORS[order] in json.dumps(bodies[1]), f"{where}: the model never saw it"
        if scenario.startswith("tool_"):
            assert tools.EXECUTIONS == {"lookup_order": 1}, where
        if scenario == "clean":
            assert tools.EXECUTIONS == {"get_weather": 1} and len(bodies) == 2, where
        if scenario == "repeated_call":
            assert tools.EXECUTIONS == {"get_weather": 3} and len(bodies) == 4, where


def test_labels_say_where_and_whether_the_run_survived():
    assert harness.labels("langgraph", "clean") == ()
    (caught,) = harness.labels("langgraph", "tool_raises_caught")
    assert (caught.category, caught.span, caught.signal, caught.recovered) == (
        "error",
        "tool:lookup_order",
        "tool_exception",
        True,
    )
    assert not harness.labels("langgraph", "tool_raises_fatal")[0].recovered
    assert not harness.labels("openai_agents", "unknown_tool")[0].recovered
    assert harness.labels("smolagents", "unknown_tool")[0].recovered
    assert "tool_raises_fatal" not in harness.runs("smolagents")
    assert harness.runs("langgraph", ["clean"], repeat=3) == ["clean"] * 3


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "recorder"), PAIRS)
def test_recording_through_a_real_collector(framework, recorder, scenario_server, tmp_path):
    skip_unless_installed(framework, recorder)
    scenarios = harness.runs(framework, RECORDED)
    requests_before = scenario_server.request_count
    data = harness.record(framework, recorder, scenarios, tmp_path, scenario_server)
    summary = json.loads((tmp_path / "record.json").read_text())
    assert summary == {"runs": len(scenarios), "failed": sum(harness.fails(framework, s) for s in scenarios)}
    found = harness.scenarios_by_trace(data)
    assert {framework for framework, _ in found.values()} == {framework}
    assert {scenario for _, scenario in found.values()} == set(scenarios)
    import duckdb

    kinds = dict(
        duckdb.connect()
        .sql(f"select kind, count(*) from read_parquet('{data}/spans/**/*.parquet') group by kind")
        .fetchall()
    )
    assert kinds.get("llm", 0) >= scenario_server.request_count - requests_before
    assert len(found) >= len(scenarios) and kinds.get("tool", 0) >= len(scenarios) - 1
    if recorder == "tailcut":  # one trace per run, its model calls and tools inside it
        assert len(found) == len(scenarios) == kinds["root"]
        assert kinds["llm"] == scenario_server.request_count - requests_before
