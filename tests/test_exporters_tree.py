"""Tree columns: the nested-set range equals the descendants a recursive query finds, for any tree."""

from __future__ import annotations

from typing import Any

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.exporters._batch import EMPTY_RESOURCE, DecodedSpans, SpanRecord
from tailcut.exporters._normalize import normalize

MISSING_PARENT = "ffffffffffffffff"


@st.composite
def traces(draw: Any) -> list[SpanRecord]:
    """One or two traces of random shape: parents among earlier spans, some missing (orphans), start ties."""
    records = []
    for t in range(draw(st.integers(1, 2))):
        trace_id = f"{t + 1:032x}"
        count = draw(st.integers(1, 25))
        for i in range(count):
            choice = draw(st.integers(-2, i - 1)) if i else -1
            parent = None if choice == -1 else MISSING_PARENT if choice == -2 else f"{choice + 1:016x}"
            start = draw(st.integers(0, 50)) * 1000
            records.append(
                SpanRecord(
                    trace_id=trace_id,
                    span_id=f"{i + 1:016x}",
                    parent_span_id=parent,
                    name=f"s{i}",
                    span_kind="INTERNAL",
                    start_ns=start,
                    end_ns=start + draw(st.integers(0, 40)) * 1000,
                    status_code="UNSET",
                    status_message=None,
                    attributes={},
                    events=(),
                    links=(),
                    resource=EMPTY_RESOURCE,
                    scope_name=None,
                )
            )
    return records


CLOSURE = """
WITH RECURSIVE edges AS (
    SELECT c.trace_id, c.parent_span_id AS ancestor, c.span_id AS descendant
    FROM spans c JOIN spans p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
), closure(trace_id, ancestor, descendant) AS (
    SELECT * FROM edges
    UNION
    SELECT c.trace_id, e.ancestor, c.descendant
    FROM closure c JOIN edges e ON e.trace_id = c.trace_id AND e.descendant = c.ancestor
)
SELECT trace_id, ancestor, descendant FROM closure
"""
NESTED_SET = """
SELECT a.trace_id, a.span_id, d.span_id FROM spans a JOIN spans d
ON d.trace_id = a.trace_id AND d.span_index > a.span_index AND d.span_index <= a.subtree_end
"""


def self_time_ms(span: SpanRecord, children: list[SpanRecord]) -> float:
    """Reference: duration minus the covered part of [start, end], by brute force over the timeline."""
    covered = 0
    for t in range(span.start_ns, span.end_ns, 1000):
        if any(c.start_ns <= t < c.end_ns for c in children):
            covered += 1000
    return (span.end_ns - span.start_ns - covered) / 1e6


@settings(max_examples=60, deadline=None)
@given(traces())
def test_nested_set_equals_recursive_descendants(records: list[SpanRecord]) -> None:
    table = normalize(DecodedSpans.from_records(records))
    spans = table.select(["trace_id", "span_id", "parent_span_id", "span_index", "subtree_end", "depth"])
    assert spans.num_rows == len(records)  # orphans are kept
    closure = set(duckdb.sql(CLOSURE).fetchall())
    nested = set(duckdb.sql(NESTED_SET).fetchall())
    assert nested == closure
    depth = {(t, s): d for t, s, d in duckdb.sql("SELECT trace_id, span_id, depth FROM spans").fetchall()}
    ancestors = duckdb.sql(f"SELECT trace_id, descendant, count(*) FROM ({CLOSURE}) GROUP BY ALL").fetchall()
    expected = dict.fromkeys(depth, 0)
    expected.update({(t, s): n for t, s, n in ancestors})
    assert depth == expected


@settings(max_examples=60, deadline=None)
@given(traces())
def test_children_in_start_order_self_time_and_orphans(records: list[SpanRecord]) -> None:
    table = normalize(DecodedSpans.from_records(records))
    table = table.set_column(7, "start_time", table.column("start_time_ns"))
    table = table.set_column(8, "end_time", table.column("end_time_ns"))
    rows = {(r["trace_id"], r["span_id"]): r for r in table.to_pylist()}
    ids = set(rows)
    # storage order: by trace, then span_index 0..n-1 with no gaps
    keys = [(r["trace_id"], r["span_index"]) for r in table.to_pylist()]
    assert keys == sorted(keys)
    for trace_id in {t for t, _ in ids}:
        assert sorted(r["span_index"] for (t, _), r in rows.items() if t == trace_id) == list(
            range(sum(1 for t, _ in ids if t == trace_id))
        )
    for record in records:
        row = rows[(record.trace_id, record.span_id)]
        children = [
            c for c in records if c.trace_id == record.trace_id and c.parent_span_id == record.span_id
        ]
        assert row["child_count"] == len(children)
        by_index = sorted(children, key=lambda c: rows[(c.trace_id, c.span_id)]["span_index"])
        assert by_index == sorted(children, key=lambda c: (c.start_ns, c.span_id))
        assert abs(row["self_time_ms"] - self_time_ms(record, children)) < 1e-9
        orphan = record.parent_span_id is not None and (record.trace_id, record.parent_span_id) not in ids
        assert row["is_orphan"] is orphan
        if orphan or record.parent_span_id is None:
            assert row["depth"] == 0


def test_root_comes_first_then_orphans_and_a_cycle_is_broken() -> None:
    def span(i: int, parent: int | None, start: int) -> SpanRecord:
        return SpanRecord(
            "a" * 32,
            f"{i:016x}",
            None if parent is None else f"{parent:016x}",
            f"s{i}",
            "INTERNAL",
            start,
            start + 10,
            "UNSET",
            None,
            {},
            (),
            (),
            EMPTY_RESOURCE,
            None,
        )

    records = [span(1, 99, 0), span(2, None, 5), span(3, 4, 7), span(4, 3, 8), span(5, 2, 6)]
    table = (
        normalize(DecodedSpans.from_records(records)).select(["span_id", "is_orphan", "depth"]).to_pydict()
    )
    order = [int(s, 16) for s in table["span_id"]]
    assert order == [2, 5, 1, 3, 4]  # the root, its child, then orphan 1, then the cycle cut at span 3
    assert table["is_orphan"] == [False, False, True, True, False]
    assert table["depth"] == [0, 1, 0, 0, 1]
