"""The tool-call problems and drift findings as Arrow tables: per-trace choice, merge of the two drift
signals and the judging key of stored calls, against plain-Python statements of the same rules."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.analysis import _toolcalls
from tailcut.analysis._classify import _merge_drift, _problem_rows, rule_rows_schema, violation_rows
from tailcut.analysis._features_stored import _judging_keys
from tailcut.analysis._toolcalls import CallProblem, problems_table
from tailcut.exporters import schema

TRACES = st.sampled_from(["t1", "t2", "t3", "t4"])
SEQS = st.one_of(st.none(), st.integers(-2, 3))


@st.composite
def problems(draw: Any) -> list[CallProblem]:
    """Problems of a few traces in call order, several per trace, ties of ``seq`` and null ``seq``."""
    found = []
    for n in range(draw(st.integers(0, 12))):
        found.append(
            CallProblem(
                trace_id=draw(TRACES),
                span_id=f"s{n}",
                name="chat m",
                kind="llm",
                boundary=draw(st.one_of(st.none(), st.just("llm:m"))),
                occurrence=draw(st.one_of(st.none(), st.integers(1, 3))),
                seq=draw(SEQS),
                category=draw(st.sampled_from(["schema_violation", "schema_drift"])),
                layer="tool_schema",
                evidence=f"evidence {n}",
                confidence=draw(st.sampled_from([0.8, 0.9, 0.95])),
            )
        )
    return found


def expected_rows(found: list[CallProblem], category: str, signal: str) -> list[dict[str, Any]]:
    """Per trace, the first problem of ``category`` with the lowest ``seq`` (null as 0)."""
    first: dict[str, CallProblem] = {}
    for p in found:
        if p.category == category and (
            p.trace_id not in first or (p.seq or 0) < (first[p.trace_id].seq or 0)
        ):
            first[p.trace_id] = p
    return [
        {
            "trace_id": p.trace_id,
            "category": category,
            "span_id": p.span_id,
            "span_name": p.name,
            "span_kind": p.kind,
            "boundary": p.boundary,
            "occurrence": p.occurrence,
            "seq": p.seq,
            "layer": p.layer,
            "evidence": p.evidence,
            "confidence": p.confidence,
            "signals": [signal],
        }
        for p in first.values()
    ]


def by_trace(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: row["trace_id"])


@settings(max_examples=200, deadline=None)
@given(problems(), st.sampled_from(["schema_violation", "schema_drift"]))
def test_problem_rows_keep_the_earliest_call_of_each_trace(found: list[CallProblem], category: str) -> None:
    table = _problem_rows(problems_table(found), category, "a signal")
    assert table.schema == rule_rows_schema()
    assert by_trace(table.to_pylist()) == by_trace(expected_rows(found, category, "a signal"))


def test_violation_rows_of_no_problem_is_an_empty_findings_table() -> None:
    table = violation_rows(problems_table([]))
    assert table.num_rows == 0
    assert table.schema == rule_rows_schema()


@st.composite
def drift_signals(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Argument-drift and retry findings, at most one of each per trace, some traces with both."""

    def finding(trace: str, what: str, signals: list[str]) -> dict[str, Any]:
        return {
            "trace_id": trace,
            "category": "schema_drift",
            "span_id": f"{what}-{trace}",
            "span_name": what,
            "span_kind": draw(st.sampled_from(["llm", "tool"])),
            "boundary": None,
            "occurrence": draw(st.one_of(st.none(), st.integers(1, 2))),
            "seq": draw(SEQS),
            "layer": "tool_schema",
            "evidence": f"{what} of {trace}",
            "confidence": 0.8 if what == "arguments" else 0.6,
            "signals": signals,
        }

    traces = ["t1", "t2", "t3", "t4", "t5"]
    arguments = [finding(t, "arguments", ["a"]) for t in traces if draw(st.booleans())]
    retries = [
        finding(t, "retries", draw(st.lists(st.sampled_from(["r", "s"]), max_size=2)))
        for t in traces
        if draw(st.booleans())
    ]
    return arguments, retries


def expected_merge(arguments: list[dict[str, Any]], retries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trace one finding: the earlier span of the two (arguments on a tie), both evidences and signals."""
    merged = {row["trace_id"]: row for row in retries}
    for row in arguments:
        other = merged.get(row["trace_id"])
        if other is None:
            merged[row["trace_id"]] = row
            continue
        earlier = row if (row["seq"] or 0) <= (other["seq"] or 0) else other
        merged[row["trace_id"]] = {
            **earlier,
            "evidence": f"{row['evidence']}; {other['evidence']}",
            "confidence": 0.9,
            "signals": [*row["signals"], *other["signals"]],
        }
    return list(merged.values())


@settings(max_examples=200, deadline=None)
@given(drift_signals())
def test_merge_drift_joins_both_signals_of_a_trace(signals: tuple[list[dict], list[dict]]) -> None:
    arguments, retries = signals
    table = _merge_drift(
        pa.Table.from_pylist(arguments, schema=rule_rows_schema()),
        pa.Table.from_pylist(retries, schema=rule_rows_schema()),
    )
    assert table.schema == rule_rows_schema()
    assert by_trace(table.to_pylist()) == by_trace(expected_merge(arguments, retries))


TEXT = st.one_of(st.none(), st.text(alphabet="ab:-\xfe\xff\U0001f600", max_size=4))
VERDICTS = st.one_of(st.none(), st.lists(st.fixed_dictionaries({"sha": TEXT, "problem": TEXT}), max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT, TEXT, VERDICTS), min_size=1, max_size=6))
def test_judging_keys_are_equal_exactly_when_the_judged_parts_are(calls: list[tuple]) -> None:
    call_type = schema.TRACE_CHECKS.field("calls").type.value_type
    rows = [
        {"tool": tool, "tools_key": key, "enforced_sha": sha, "verdicts": v} for tool, key, sha, v in calls
    ]
    table = pa.Table.from_pylist(rows, schema=pa.schema([call_type.field(n) for n in rows[0]]))
    keys = _judging_keys(table).to_pylist()

    def judged(call: tuple) -> tuple:
        tool, key, sha, verdicts = call
        return tool, key, sha, tuple((v["sha"], v["problem"]) for v in verdicts) if verdicts else ()

    for i, first in enumerate(calls):
        for j, second in enumerate(calls):
            assert (keys[i] == keys[j]) == (judged(first) == judged(second)), (first, second)


def test_a_schema_is_compiled_once_by_its_content_and_an_invalid_one_is_no_validator():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    same = {"required": ["city"], "properties": {"city": {"type": "string"}}, "type": "object"}
    first = _toolcalls._compiled(schema)
    assert first is _toolcalls._compiled(same)  # keys in another order: the same schema
    assert first.is_valid({"city": "Paris"}) and not first.is_valid({})
    other = _toolcalls._compiled({**schema, "required": []})
    assert other is not first and other.is_valid({})
    assert _toolcalls._compiled({"type": 12}) is None  # not a JSON Schema
