"""The classifier reads the spans of suspect traces only: each way a trace becomes a suspect, on a data dir
where it is the only way, so a suspect source that went missing loses the finding.

The suspect sources are described in ``tailcut.analysis._candidates``: span-level signs and bad schemas
from the survey, stale tool lists, trace-level z-scores and outcomes, and repeated tool calls (from
``traces.max_tool_repeat`` when the ``traces`` rows account for every span, else counted).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.compute as pc
import pytest

import tailcut
from tailcut import attributes as attr
from tailcut.analysis import Dataset, Thresholds
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.exporters import DataDirWriter
from tailcut.exporters._signals import trace_rows
from tests.analysis_support import copy_pieces, read_table, record, rewrite, scripted_clock, spans_table
from tests.test_analysis_classify import LOOKUP_SCHEMA, chat_response, chat_tools, llm, lookup, normal_run

NORMAL_RUNS = 24
NOTE_OLD = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
NOTE_NEW = {
    "type": "object",
    "properties": {"body": {"type": "string"}},
    "required": ["body"],
    "additionalProperties": False,
}


@tailcut.tool(name="note", schema=NOTE_NEW)
def note(**arguments: Any) -> dict:
    """Accepts anything, so a stale call neither fails nor retries: only its schema shows the drift."""
    return {"ok": True}


def instrumented_llm(request: dict, response: dict) -> None:
    """An LLM call with the attributes the openai instrumentation records: the hash of the tools sent, and
    the count of calls that broke them (0: the calls follow the schemas shown)."""
    attributes = {
        attr.TOOLS_SHA256: sha256_hex(canonical_json(request["tools"])),
        attr.SCHEMA_VIOLATIONS: 0,
        attr.GEN_AI_USAGE_INPUT_TOKENS: 100,
        attr.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
    }
    with tailcut.boundary("llm", "fake.chat", request=request, attributes=attributes) as call:
        call.record(response)


def stale_list(run: tailcut.Run) -> None:
    """The harness still shows the model the old ``note`` contract; the call follows it and succeeds."""
    request = {"messages": [], "tools": chat_tools(("note", NOTE_OLD))}
    instrumented_llm(request, chat_response([("note", {"text": "call back"})]))
    note(text="call back")
    instrumented_llm(request, chat_response(text="Noted."))
    run.set_outcome("pass", 0.9)


def deep_plan(run: tailcut.Run) -> None:
    """A planner that recursed far deeper than any ordinary run; the deepest step is a chain span."""

    def step(level: int) -> None:
        with tailcut.span("chain", f"plan step {level}"):
            if level < 12:
                step(level + 1)

    step(1)
    run.set_outcome("pass", 0.9)


def two_bad_calls(run: tailcut.Run) -> None:
    """One response, two bad calls: the finding names the first one in the response."""
    request = {"messages": [], "tools": chat_tools(("lookup", LOOKUP_SCHEMA))}
    llm(request, chat_response([("lookup", {"order_id": "first"}), ("cancel_order", {"order_id": 2})]))
    run.set_outcome("pass", 0.9)


def repeated_lookup(run: tailcut.Run) -> None:
    for _ in range(3):
        lookup(11)
    run.set_outcome("pass", 0.9)


SCENARIOS = {f.__name__: f for f in (stale_list, deep_plan, two_bad_calls, repeated_lookup)}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    data = tmp_path_factory.mktemp("candidates") / "data"
    traces: dict[str, str] = {}

    def body() -> None:
        for i in range(NORMAL_RUNS):
            with tailcut.run("support", input={"i": i}) as run:
                normal_run(run, i)
        for name, scenario in SCENARIOS.items():
            with tailcut.run("support", input={"scenario": name}) as run:
                traces[name] = run.trace_id
                scenario(run)

    record(data, body)
    scripted_clock(data)  # durations the cost rule reads must not depend on the host's speed
    return data, traces, Dataset(data).classify()


def finding(findings, trace_id: str, category: str) -> dict[str, Any]:
    rows = findings.filter(trace_id=trace_id, category=category).to_dicts()
    assert len(rows) == 1, findings.filter(trace_id=trace_id).select("category", "evidence").rows()
    return rows[0]


def test_a_stale_tool_list_makes_its_traces_suspects(recorded):
    """Nothing else points at the trace: no error, no retry, a passing outcome, no recorded violation, and
    its spans carry the hash of their tools (so they are not read as third-party spans)."""
    data, traces, findings = recorded
    row = finding(findings, traces["stale_list"], "schema_drift")
    assert (row["boundary"], row["occurrence"], row["layer"]) == ("llm:fake.chat", 1, "tool_schema")
    assert "follow the schema shown to the model" in row["evidence"]
    assert set(findings.filter(trace_id=traces["stale_list"])["category"]) == {"schema_drift"}
    recorded_attributes = (
        Dataset(data)
        .sql(
            f"SELECT DISTINCT attributes['{attr.TOOLS_SHA256}'] AS tools, "
            f"attributes['{attr.SCHEMA_VIOLATIONS}'] AS n FROM spans WHERE trace_id = ? AND kind = 'llm'",
            params=[traces["stale_list"]],
        )
        .rows()
    )
    assert recorded_attributes == [(sha256_hex(canonical_json(chat_tools(("note", NOTE_OLD)))), "0")]


def test_the_deepest_span_of_a_trace_far_too_deep_is_read_whatever_its_kind(recorded):
    _, traces, findings = recorded
    row = finding(findings, traces["deep_plan"], "tool_loop")
    assert "depth" in row["signals"]
    assert (row["span_kind"], row["span_name"]) == ("chain", "plan step 12")


def test_a_response_with_several_bad_calls_is_reported_by_its_first_call(recorded):
    _, traces, findings = recorded
    row = finding(findings, traces["two_bad_calls"], "schema_violation")
    assert row["evidence"].startswith("lookup:"), row["evidence"]
    assert row["layer"] == "prompt"


def test_counting_repeated_calls_finds_what_the_trace_signal_finds(recorded):
    data, _, findings = recorded
    counted = Dataset(data).classify(thresholds=Thresholds(trust_trace_signals=False))
    assert counted.equals(findings)


def test_repeated_calls_are_counted_when_a_trace_has_no_traces_row(recorded, tmp_path):
    """The traces rows no longer account for every span, so max_tool_repeat is not trusted."""
    data, traces, _ = recorded
    loop = traces["repeated_lookup"]
    rows = read_table(data, "traces")
    with DataDirWriter(tmp_path / "data") as writer:
        writer.write_spans(read_table(data, "spans"))
        writer.write_traces(rows.filter(pc.invert(pc.equal(rows["trace_id"], loop))))
    copy_pieces(data, tmp_path / "data")
    findings = Dataset(tmp_path / "data").classify()
    assert "3 times" in finding(findings, loop, "tool_loop")["evidence"]


def test_an_understated_trace_signal_is_trusted_unless_told_not_to(recorded, tmp_path):
    """Rows that account for every span are trusted: a max_tool_repeat of 1 hides the loop, and
    trust_trace_signals=False counts the calls instead."""
    data, traces, _ = recorded
    rewrite(data, tmp_path / "data", lambda row: {"max_tool_repeat": 1})
    dataset = Dataset(tmp_path / "data")
    assert traces["repeated_lookup"] not in set(dataset.classify().filter(category="tool_loop")["trace_id"])
    counted = dataset.classify(thresholds=Thresholds(trust_trace_signals=False))
    assert "3 times" in finding(counted, traces["repeated_lookup"], "tool_loop")["evidence"]


def third_party_trace(index: int, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """A run another instrumentation recorded: its llm span has no tailcut.tools.sha256 attribute."""
    trace_id, root, call = f"{index + 1:032x}", f"{index:08x}00000001", f"{index:08x}00000002"
    start = 1_790_000_000 * 10**9 + index * 10**10

    def span(span_id: str, parent: str | None, kind: str, offset_ms: int, **columns: Any) -> dict[str, Any]:
        begin = start + offset_ms * 10**6
        ids = {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent}
        return {**ids, "name": kind, "kind": kind, "start": begin, "end": begin + 100 * 10**6, **columns}

    request = {"messages": [], "tools": chat_tools(("lookup", LOOKUP_SCHEMA))}
    response = chat_response([("lookup", arguments)])
    payloads = {"request": canonical_json(request), "response": json.dumps(response)}
    return [
        span(root, None, "root", 0),
        span(call, root, "llm", 1, boundary="llm:openai.chat", occurrence=1, seq=1, **payloads),
    ]


def test_tool_lists_of_third_party_spans_are_hashed_from_their_requests(tmp_path):
    spans = spans_table(third_party_trace(0, {"order_id": 7}) + third_party_trace(1, {"order_id": "x"}))
    with DataDirWriter(tmp_path / "data") as writer:
        writer.write_spans(spans)
        writer.write_traces(trace_rows(spans, kept=True, decision_reason="ingested"))
    findings = Dataset(tmp_path / "data").classify()
    assert findings.select("trace_id", "category", "layer").rows() == [
        (f"{2:032x}", "schema_violation", "prompt")
    ]
    assert "'x' is not of type 'integer'" in findings["evidence"][0]
