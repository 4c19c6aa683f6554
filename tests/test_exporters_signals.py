"""Trace signals: the SDK's semantics over all the spans of a trace, and the traces row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.exporters import SpanFacts, compute_signals, traces_row
from tailcut.signals import RunFacts


def fact(span: int, parent: int | None, kind: str = "other", **fields: object) -> SpanFacts:
    return SpanFacts(
        trace_id="a" * 32,
        span_id=f"{span:016x}",
        parent_span_id=None if parent is None else f"{parent:016x}",
        name=f"s{span}",
        kind=kind,
        failed=bool(fields.pop("failed", False)),
        start_ns=span,
        end_ns=span + 10,
        **fields,  # type: ignore[arg-type]
    )


def test_retries_count_once_failed_attempts_are_errors_and_repeats_use_first_attempts() -> None:
    facts = [
        fact(1, None, "root", run=RunFacts(outcome="pass", harness_revision="r1"), service_name="svc"),
        fact(2, 1, "tool", boundary="tool:search", request_sha256="q1", attempt=1, failed=True),
        fact(3, 1, "tool", boundary="tool:search", request_sha256="q1", attempt=2),
        fact(4, 1, "tool", boundary="tool:search", request_sha256="q1", attempt=1),
        fact(5, 1, "tool", boundary="tool:other", request_sha256="q1", attempt=1),
        fact(6, 1, "llm", input_tokens=100, output_tokens=20, schema_violations=2),
        fact(7, 6, "llm", input_tokens=100, output_tokens=20, failed=True),  # the same call, seen by its SDK
        fact(8, 99, "llm", input_tokens=1, output_tokens=1),  # orphan: still a call
    ]
    s = compute_signals(facts)
    assert (s.tool_calls, s.max_tool_repeat, s.errors) == (3, 2, 2)  # the nested call failed too
    assert (s.llm_calls, s.input_tokens, s.output_tokens, s.total_tokens) == (2, 101, 21, 122)
    assert (s.schema_violations, s.depth, s.span_count, s.orphan_count) == (2, 2, 8, 1)
    assert (s.has_root, s.root_name, s.run.outcome, s.run.harness_revision) == (True, "s1", "pass", "r1")
    assert (s.start_ns, s.end_ns, s.duration_ms) == (1, 18, 17e-6)
    assert s.as_attributes()["tailcut.trace.max_tool_repeat"] == 2


@given(st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_max_tool_repeat_is_the_most_identical_first_attempts(requests: list[int]) -> None:
    facts = [fact(1, None, "root")] + [
        fact(i + 2, 1, "tool", boundary="tool:t", request_sha256=str(r)) for i, r in enumerate(requests)
    ]
    s = compute_signals(facts)
    assert s.max_tool_repeat == max(requests.count(r) for r in set(requests))
    assert s.tool_calls == len(requests)


def test_traces_row_validates_the_decision() -> None:
    s = compute_signals([fact(1, None, "root")])
    row = traces_row(
        s, kept=False, decision_reason="idle", policies=["errors"], inclusion_probability=0.1, decided_at_ns=5
    )
    assert (row["kept"], row["policies"], row["inclusion_probability"], row["decided_at"]) == (
        False,
        ["errors"],
        0.1,
        5,
    )
    with pytest.raises(ValueError, match="decision_reason"):
        traces_row(s, kept=True, decision_reason="because")
    with pytest.raises(ValueError, match="inclusion_probability"):
        traces_row(s, kept=True, decision_reason="embedded", inclusion_probability=0)
    with pytest.raises(ValueError, match="at least one span"):
        compute_signals([])
