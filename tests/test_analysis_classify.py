"""Failure classification on real SDK spans: each category positive and negative, first span and layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tailcut
from tailcut import attributes as attr
from tailcut.analysis import CATEGORIES, Dataset, Thresholds
from tailcut.errors import ConfigError
from tests.analysis_support import record, scripted_clock

NEW_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "address": {"type": "object"}},
    "required": ["order_id", "address"],
    "additionalProperties": False,
}
OLD_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "address": {"type": "string"}},
    "required": ["order_id", "address"],
    "additionalProperties": False,
}
LOOKUP_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}


class Rejected(RuntimeError):
    """The service refuses the request (the harness cannot tell it from a transient fault)."""


class BackendTimeout(TimeoutError):
    pass


@tailcut.tool(name="fetch")
def fetch(url: str) -> str:
    raise ConnectionError(f"connection refused by {url}")


@tailcut.tool(name="lookup", schema=LOOKUP_SCHEMA)
def lookup(order_id: int) -> dict:
    return {"order_id": order_id, "status": "shipped"}


@tailcut.tool(name="ship", schema=NEW_SCHEMA, retry=tailcut.Retry(attempts=3, on=(Rejected,)))
def ship(order_id: int, address: Any) -> dict:
    if not isinstance(address, dict):
        raise Rejected("$.address: not of type 'object'")
    return {"ok": True}


@tailcut.tool(name="slow_lookup", retry=tailcut.Retry(attempts=3, on=(BackendTimeout,)))
def slow_lookup(order_id: int) -> dict:
    raise BackendTimeout(f"backend timed out looking up order {order_id}")


@tailcut.retriever(name="kb")
def kb(query: str) -> list:
    return [] if "nothing" in query else [{"id": "kb-1", "body": "Refunds take 14 days."}]


def chat_tools(*pairs: tuple[str, dict]) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in pairs]


def chat_response(calls: list[tuple[str, Any]] = (), text: str | None = None) -> dict:
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)},
        }
        for i, (n, a) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": text, **({"tool_calls": tool_calls} if tool_calls else {})}
    return {"choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}]}


def llm(
    request: dict, response: dict, *, tokens: tuple[int, int] = (100, 20), finish: str | None = None
) -> dict:
    """One LLM call recorded by hand (provider-shaped request and response, usage, finish reason)."""
    attributes = {attr.GEN_AI_USAGE_INPUT_TOKENS: tokens[0], attr.GEN_AI_USAGE_OUTPUT_TOKENS: tokens[1]}
    if finish:
        attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS] = [finish]
    with tailcut.boundary("llm", "fake.chat", request=request, attributes=attributes) as call:
        return call.record(response)


def normal_run(run: tailcut.Run, i: int) -> None:
    kb("refund policy")
    request = {
        "messages": [{"role": "user", "content": "where is my order"}],
        "tools": chat_tools(("lookup", LOOKUP_SCHEMA)),
    }
    llm(request, chat_response([("lookup", {"order_id": i})]))
    lookup(i)
    llm(request, chat_response(text="It has shipped."), finish="stop")
    run.set_output("It has shipped.")
    run.set_outcome("pass", 0.9)


# --- the scenarios: name -> body(run); each body is one agent run ------------------------------------------


def wrapped_error(run: tailcut.Run) -> None:
    """A tool fails, the agent wraps it in its own error: the visible error is downstream of the cause."""
    normal_call = {"messages": [], "tools": []}
    llm(normal_call, chat_response(text="let me check"))
    with tailcut.span("agent", "planner"):
        try:
            fetch("http://127.0.0.1:9/inventory")
        except ConnectionError as exc:
            raise RuntimeError("planning failed: inventory unavailable") from exc


def handled_error(run: tailcut.Run) -> None:
    try:
        fetch("http://127.0.0.1:9/optional")
    except ConnectionError:
        pass
    run.set_outcome("pass", 0.9)


def model_error(run: tailcut.Run) -> None:
    with tailcut.boundary("llm", "fake.chat", request={"messages": []}):
        raise ValueError("model endpoint returned 500")


def bad_arguments(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": chat_tools(("lookup", LOOKUP_SCHEMA))}
    llm(request, chat_response(text="let me look"), finish="stop")
    llm(request, chat_response([("lookup", {"order_id": "ORD-7"})]))  # the schema says integer
    llm(request, chat_response([("lookup", {"order_id": 7})]))
    lookup(7)
    run.set_outcome("pass", 0.9)


def unoffered_tool(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": chat_tools(("lookup", LOOKUP_SCHEMA))}
    llm(request, chat_response([("delete_order", {"order_id": 7})]))
    run.set_outcome("pass", 0.9)


def not_json(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": chat_tools(("lookup", LOOKUP_SCHEMA))}
    llm(request, chat_response([("lookup", '{"order_id": 7')]))
    run.set_outcome("pass", 0.9)


def anthropic_bad_arguments(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": [{"name": "lookup", "input_schema": LOOKUP_SCHEMA}]}
    response = {
        "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"order_id": "x"}},
        ]
    }
    llm(request, response)
    run.set_outcome("pass", 0.9)


def responses_bad_arguments(run: tailcut.Run) -> None:
    request = {"input": "hi", "tools": [{"type": "function", "name": "lookup", "parameters": LOOKUP_SCHEMA}]}
    response = {"output": [{"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}]}
    llm(request, response)
    run.set_outcome("pass", 0.9)


def genai_bad_arguments(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": [{"type": "function", "name": "lookup", "parameters": LOOKUP_SCHEMA}]}
    response = {
        "messages": [
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"order_id": 1.5}}
                ],
            }
        ]
    }
    llm(request, response)
    run.set_outcome("pass", 0.9)


def anthropic_good_arguments(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": [{"name": "lookup", "input_schema": LOOKUP_SCHEMA}]}
    llm(
        request, {"content": [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"order_id": 3}}]}
    )
    lookup(3)
    run.set_outcome("pass", 0.9)


def stale_contract(run: tailcut.Run) -> None:
    """The harness shows the model the old contract; the service enforces the new one and rejects retries."""
    request = {"messages": [], "tools": chat_tools(("ship", OLD_SCHEMA))}
    llm(request, chat_response(text="sure"), finish="stop")
    llm(request, chat_response([("ship", {"order_id": 5, "address": "1 Main St"})]))
    try:
        ship(5, "1 Main St")
    except Rejected:
        pass
    run.set_outcome("pass", 0.9)


def current_contract(run: tailcut.Run) -> None:
    request = {"messages": [], "tools": chat_tools(("ship", NEW_SCHEMA))}
    llm(request, chat_response([("ship", {"order_id": 5, "address": {"street": "1 Main St"}})]))
    ship(5, {"street": "1 Main St"})
    run.set_outcome("pass", 0.9)


def transient_retries(run: tailcut.Run) -> None:
    try:
        slow_lookup(9)
    except BackendTimeout:
        pass
    run.set_outcome("pass", 0.9)


def loop(run: tailcut.Run) -> None:
    kb("refund policy")
    for _ in range(3):
        lookup(11)
    lookup(12)
    run.set_outcome("pass", 0.9)


def two_calls(run: tailcut.Run) -> None:
    lookup(11)
    lookup(11)
    run.set_outcome("pass", 0.9)


def blowup(run: tailcut.Run) -> None:
    request = {"messages": [{"role": "user", "content": "explain everything"}], "tools": []}
    llm(request, chat_response(text="short"), tokens=(120, 20))
    llm(request, chat_response(text="very long " * 100), tokens=(30_000, 900))
    run.set_outcome("pass", 0.9)


def failed_outcome(run: tailcut.Run) -> None:
    kb("refund policy")
    request = {"messages": [], "tools": []}
    llm(request, chat_response(text="thinking"))
    llm(request, chat_response(text="Refunds take 90 days."), finish="stop")
    run.set_output("Refunds take 90 days.")
    run.set_outcome("fail", 0.1)


def empty_retrieval(run: tailcut.Run) -> None:
    kb("nothing relevant")
    llm({"messages": [], "tools": []}, chat_response(text="I do not know."), finish="stop")
    run.set_outcome("fail", 0.2)


def cut_off(run: tailcut.Run) -> None:
    llm({"messages": [], "tools": []}, chat_response(text="Refunds are issued wi"), finish="length")
    run.set_outcome("unknown")


def empty_answer(run: tailcut.Run) -> None:
    llm({"messages": [], "tools": []}, chat_response(text=""), tokens=(100, 0), finish="stop")
    run.set_output("")


SCENARIOS = {
    f.__name__: f
    for f in (
        wrapped_error,
        handled_error,
        model_error,
        bad_arguments,
        unoffered_tool,
        not_json,
        anthropic_bad_arguments,
        responses_bad_arguments,
        genai_bad_arguments,
        anthropic_good_arguments,
        stale_contract,
        current_contract,
        transient_retries,
        loop,
        two_calls,
        blowup,
        failed_outcome,
        empty_retrieval,
        cut_off,
        empty_answer,
    )
}
NORMAL_RUNS = 24

#: scenario -> {category: (first span's boundary or name, seq or None, layer)}; every other category absent
EXPECTED: dict[str, dict[str, tuple[str, int | None, str]]] = {
    "wrapped_error": {"error": ("tool:fetch", 2, "environment")},
    "handled_error": {"error": ("tool:fetch", 1, "environment")},
    "model_error": {"error": ("llm:fake.chat", 1, "model")},
    "bad_arguments": {"schema_violation": ("llm:fake.chat", 2, "prompt")},
    "unoffered_tool": {"schema_violation": ("llm:fake.chat", 1, "tool_schema")},
    "not_json": {"schema_violation": ("llm:fake.chat", 1, "model")},
    "anthropic_bad_arguments": {"schema_violation": ("llm:fake.chat", 1, "prompt")},
    "responses_bad_arguments": {"schema_violation": ("llm:fake.chat", 1, "prompt")},
    "genai_bad_arguments": {"schema_violation": ("llm:fake.chat", 1, "prompt")},
    "anthropic_good_arguments": {},
    "stale_contract": {
        "schema_drift": ("llm:fake.chat", 2, "tool_schema"),
        "error": ("tool:ship", 3, "environment"),
    },
    "current_contract": {},
    "transient_retries": {"error": ("tool:slow_lookup", 1, "environment")},
    "loop": {"tool_loop": ("tool:lookup", 2, "workflow")},
    "two_calls": {},
    "blowup": {"cost_blowup": ("llm:fake.chat", 2, "workflow")},
    "failed_outcome": {"silent_degradation": ("llm:fake.chat", 3, "prompt")},
    "empty_retrieval": {"silent_degradation": ("retriever:kb", 1, "memory")},
    "cut_off": {"silent_degradation": ("llm:fake.chat", 1, "model")},
    "empty_answer": {"silent_degradation": ("llm:fake.chat", 1, "model")},
}


def record_census(data: Path, *, features: bool = False) -> dict[str, str]:
    """Record normal runs, then every scenario once, through the SDK; the trace id of each scenario
    (``features``: with the per-trace features, see :func:`tests.analysis_support.record`)."""
    traces: dict[str, str] = {}

    def body() -> None:
        for i in range(NORMAL_RUNS):
            with tailcut.run("support", input={"i": i}) as run:
                normal_run(run, i)
        for name, scenario in SCENARIOS.items():
            try:
                with tailcut.run("support", input={"scenario": name}) as run:
                    traces[name] = run.trace_id
                    scenario(run)
            except (RuntimeError, ValueError):
                pass

    record(data, body, features=features)
    return traces


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Every scenario once, plus normal runs (the census the cost and structure z-scores need)."""
    data = tmp_path_factory.mktemp("classify") / "data"
    traces = record_census(data)
    scripted_clock(data)  # durations the cost rule reads must not depend on the host's speed
    dataset = Dataset(data)
    return dataset, traces, dataset.classify()


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_scenario_gets_exactly_its_categories_first_span_and_layer(recorded, scenario):
    _dataset, traces, findings = recorded
    rows = findings.filter(trace_id=traces[scenario]).to_dicts()
    got = {r["category"]: (r["boundary"] or r["span_name"], r["seq"], r["layer"]) for r in rows}
    assert got == EXPECTED[scenario], [r["evidence"] for r in rows]
    for row in rows:
        assert row["evidence"] and "\n" not in row["evidence"]
        assert 0 < row["confidence"] <= 1
        assert row["signals"]


#: scenario -> whether its ``error`` finding says the run survived it
RECOVERED = {
    "wrapped_error": False,
    "handled_error": True,
    "model_error": False,
    "transient_retries": True,
    "stale_contract": True,
}


@pytest.mark.parametrize("scenario", sorted(RECOVERED))
def test_an_error_the_run_survived_is_a_finding_marked_recovered(recorded, scenario):
    _dataset, traces, findings = recorded
    [row] = findings.filter(trace_id=traces[scenario], category="error").to_dicts()
    assert row["recovered"] is RECOVERED[scenario]
    assert row["signals"][0] in ("failed boundary", "root status ERROR")
    assert ("; the run failed" in row["evidence"]) is (not RECOVERED[scenario])


def test_no_finding_in_normal_runs(recorded):
    _dataset, traces, findings = recorded
    assert set(findings["trace_id"]) <= set(traces.values())


def test_evidence_names_the_cause(recorded):
    _, traces, findings = recorded
    by = {(r["trace_id"], r["category"]): r for r in findings.to_dicts()}
    wrapped = by[(traces["wrapped_error"], "error")]
    assert "ConnectionError" in wrapped["evidence"] and "RuntimeError" in wrapped["evidence"]
    drift = by[(traces["stale_contract"], "schema_drift")]
    assert set(drift["signals"]) == {
        "arguments follow another schema version",
        "identical retries, identical errors",
    }
    assert drift["confidence"] == 0.9
    assert "3 identical attempts" in drift["evidence"]
    assert "ORD-7" in by[(traces["bad_arguments"], "schema_violation")]["evidence"]
    assert "3 times" in by[(traces["loop"], "tool_loop")]["evidence"]


def test_findings_view_is_registered_and_queryable(recorded):
    dataset, _traces, findings = recorded
    counts = dataset.sql("SELECT category, count(*) AS n FROM findings GROUP BY ALL ORDER BY category")
    assert dict(counts.iter_rows()) == dict(findings.group_by("category").len().iter_rows())
    assert set(findings["category"]) <= set(CATEGORIES)


def test_revalidating_every_call_finds_the_same(recorded):
    dataset, _, findings = recorded
    again = dataset.classify(thresholds=Thresholds(trust_recorded_counts=False))
    assert again.sort("trace_id", "category").equals(findings.sort("trace_id", "category"))


def test_thresholds_change_the_verdicts(recorded):
    dataset, traces, _ = recorded
    looser = dataset.classify(thresholds=Thresholds(loop_min_repeats=2))
    assert traces["two_calls"] in set(looser.filter(category="tool_loop")["trace_id"])
    no_reference = dataset.classify(thresholds=Thresholds(min_baseline=1000))
    assert "cost_blowup" not in set(no_reference["category"])
    dataset.classify()  # leave the module's dataset as the other tests expect


@pytest.mark.parametrize(
    "change",
    [
        {"loop_min_repeats": 1},
        {"cost_z": 0},
        {"score_threshold": 2.0},
        {"transient_errors": "("},
        {"min_baseline": 0},
    ],
)
def test_bad_thresholds_are_refused(change):
    with pytest.raises(ConfigError):
        Thresholds(**change)
