"""Span-tree macros: nested-set answers agree with a recursive CTE, on hand-built and generated trees."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut.analysis import Dataset
from tailcut.exporters import DataDirWriter, schema
from tests.analysis_support import spans_table

TRACE = "0af7651916cd43dd8448eb211c80319c"
_ids = itertools.count(1)

#: The independent reference: every descendant of (tid, sid) by walking parent_span_id.
REFERENCE = """
WITH RECURSIVE walk(span_id) AS (
    SELECT span_id FROM spans WHERE trace_id = $tid AND parent_span_id = $sid
    UNION
    SELECT s.span_id FROM spans s JOIN walk w ON s.parent_span_id = w.span_id WHERE s.trace_id = $tid
)
SELECT span_id FROM walk ORDER BY span_id
"""


def span(span_id: str, parent: str | None, start: int, *, trace: str = TRACE, kind: str = "tool") -> dict:
    return {
        "trace_id": trace,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": f"span {span_id}",
        "kind": "root" if parent is None else kind,
        "start": start,
        "end": start + 1000,
    }


def write(path: Path, tables: list[pa.Table], traces: list[str]) -> Dataset:
    with DataDirWriter(path) as writer:
        for table in tables:
            writer.write_spans(table)
        writer.write_traces(
            [
                {
                    "trace_id": t,
                    "span_count": 0,
                    "error_count": 0,
                    "llm_calls": 0,
                    "tool_calls": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "max_depth": 0,
                    "max_tool_repeat": 0,
                    "schema_violations": 0,
                    "kept": True,
                    "policies": [],
                    "baseline": False,
                    "inclusion_probability": 1.0,
                    "decision_reason": "embedded",
                    "decided_at": 0,
                    "has_root": True,
                    "orphan_count": 0,
                    "late_spans": 0,
                }
                for t in traces
            ]
        )
    return Dataset(path)


def ids(data: Dataset, query: str, *params: str) -> list[str]:
    return sorted(data.sql(query, params=list(params))["span_id"].to_list())


# A hand-built tree:   r ─┬─ a ─┬─ a1
#                         │     └─ a2 ── a21
#                         └─ b ─── b1          plus an orphan o (parent x never arrived) with child o1
HAND = [
    span("000000000000000r".replace("r", "1"), None, 0),
    span("00000000000000a0", "0000000000000001", 10),
    span("00000000000000a1", "00000000000000a0", 20),
    span("00000000000000a2", "00000000000000a0", 30),
    span("0000000000000a21", "00000000000000a2", 40),
    span("00000000000000b0", "0000000000000001", 50),
    span("00000000000000b1", "00000000000000b0", 60),
    span("00000000000000f0", "00000000000000ff", 70),  # orphan
    span("00000000000000f1", "00000000000000f0", 80),
]


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    return write(tmp_path_factory.mktemp("tree") / "data", [spans_table(HAND)], [TRACE])


def test_descendants_of_the_hand_built_tree(hand):
    q = "SELECT span_id FROM descendants(?, ?)"
    assert ids(hand, q, TRACE, "00000000000000a0") == [
        "00000000000000a1",
        "00000000000000a2",
        "0000000000000a21",
    ]
    assert ids(hand, q, TRACE, "0000000000000001") == sorted(
        s["span_id"] for s in HAND[1:7]
    )  # the orphan's subtree is not under the root
    assert ids(hand, q, TRACE, "00000000000000f0") == ["00000000000000f1"]
    assert ids(hand, q, TRACE, "00000000000000b1") == []


def test_descendant_distance_and_ancestors_and_path(hand):
    rows = hand.sql("SELECT span_id, distance FROM descendants(?, ?)", params=[TRACE, "00000000000000a0"])
    assert dict(rows.iter_rows()) == {"00000000000000a1": 1, "00000000000000a2": 1, "0000000000000a21": 2}
    ancestors = hand.sql("SELECT span_id, distance FROM ancestors(?, ?)", params=[TRACE, "0000000000000a21"])
    assert ancestors.rows() == [("0000000000000001", 3), ("00000000000000a0", 2), ("00000000000000a2", 1)]
    path = hand.sql("SELECT * FROM span_path(?, ?)", params=[TRACE, "0000000000000a21"]).row(0, named=True)
    assert path["span_ids"] == [
        "0000000000000001",
        "00000000000000a0",
        "00000000000000a2",
        "0000000000000a21",
    ]
    assert (
        path["path"]
        == "span 0000000000000001 > span 00000000000000a0 > span 00000000000000a2 > span 0000000000000a21"
    )
    assert path["depth"] == 3
    orphan = hand.sql("SELECT span_ids FROM span_path(?, ?)", params=[TRACE, "00000000000000f1"]).item()
    assert orphan.to_list() == ["00000000000000f0", "00000000000000f1"]


def test_a_trace_with_a_late_batch_falls_back_to_the_recursive_walk(tmp_path):
    """Late spans carry tree columns of their own batch only; the macros must still find them."""
    early = spans_table(HAND[:5])
    late = spans_table([span("00000000000000c0", "00000000000000a2", 90)])  # written later, index 0 again
    data = write(tmp_path / "data", [early, late], [TRACE])
    assert data.sql("SELECT tree_is_nested(?) AS ok", params=[TRACE]).item() is False
    found = ids(data, "SELECT span_id FROM descendants(?, ?)", TRACE, "00000000000000a0")
    assert found == ["00000000000000a1", "00000000000000a2", "00000000000000c0", "0000000000000a21"]
    assert ids(data, "SELECT span_id FROM ancestors(?, ?)", TRACE, "00000000000000c0") == [
        "0000000000000001",
        "00000000000000a0",
        "00000000000000a2",
    ]


@st.composite
def forests(draw):
    """Several traces, each a random tree (parents drawn among earlier spans), some with an orphan."""
    traces = []
    for _ in range(draw(st.integers(1, 2))):
        trace = f"{next(_ids):032x}"
        size = draw(st.integers(1, 12))
        parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, size)]
        starts = draw(st.lists(st.integers(0, 10**6), min_size=size, max_size=size))
        spans = [
            span(f"{i + 1:016x}", None if p is None else f"{p + 1:016x}", starts[i], trace=trace)
            for i, p in enumerate(parents)
        ]
        if draw(st.booleans()):
            spans.append(span(f"{size + 1:016x}", "deadbeefdeadbeef", 5, trace=trace))
        traces.append(spans)
    return traces


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(forest=forests())
def test_nested_set_macros_agree_with_a_recursive_cte(forest, tmp_path_factory):
    data = write(
        tmp_path_factory.mktemp("forest") / "data",
        [spans_table([s for trace in forest for s in trace])],
        [trace[0]["trace_id"] for trace in forest],
    )
    for trace in forest:
        tid = trace[0]["trace_id"]
        reachable: dict[str, set[str]] = {}
        for s in sorted(trace, key=lambda s: int(s["span_id"], 16)):
            sid = s["span_id"]
            expected = data.sql(REFERENCE, params={"tid": tid, "sid": sid})["span_id"].to_list()
            assert ids(data, "SELECT span_id FROM descendants(?, ?)", tid, sid) == expected
            path = data.sql("SELECT span_ids FROM span_path(?, ?)", params=[tid, sid]).item().to_list()
            assert path[-1] == sid
            for ancestor in path[:-1]:  # each span on the path has sid among its descendants
                assert sid in reachable[ancestor]
            reachable[sid] = set(expected)
    data.close()


def test_schema_of_tree_helpers_is_the_spans_schema(hand):
    columns = hand.sql("SELECT * FROM descendants(?, ?) LIMIT 0", params=[TRACE, "0000000000000001"]).columns
    assert columns[: len(schema.SPANS.names)] == schema.SPANS.names
    assert "distance" in columns
