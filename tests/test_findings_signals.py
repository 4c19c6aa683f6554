"""Per-trace signals and findings agree (issue 27): a trace the ``errors`` signal would keep for a failure has
a finding for it, over random span trees in the OpenInference shape, through ``tailcut ingest`` and
``classify``; and the one definition of a failed boundary (:func:`._rules.failed_boundary`)."""

from __future__ import annotations

import itertools

import duckdb
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut.analysis import Dataset, _rules
from tailcut.cli import cli
from tailcut.signals import SpanSignals, trace_signals
from tests import findings_trees as trees

_KINDS = ("LLM", "TOOL", "CHAIN", "AGENT", "RETRIEVER")
_RESULTS = (
    None,
    "in stock: 4",
    "The page says error 404 pages are customisable.",
    "Error 403: Forbidden",
    "An error occurred while running the tool. Please try again.",
)
_SPAN = st.tuples(
    st.sampled_from(_KINDS),
    st.booleans(),  # status ERROR
    st.booleans(),  # an exception event
    st.sampled_from(_RESULTS),
    st.integers(min_value=0, max_value=50),  # the parent: any earlier span
)


def _tree(specs: list[tuple[str, bool, bool, str | None, int]]) -> list[trees.Span]:
    spans = [trees.Span("run", "AGENT", None, 0, 10_000)]
    for index, (kind, failed, raised, result, parent) in enumerate(specs):
        start = 10 + 20 * index
        attributes = {"tool.name": f"tool{index % 3}"} if kind == "TOOL" else {}
        if result is not None and kind in ("TOOL", "RETRIEVER"):
            attributes["output.value"] = result
        spans.append(
            trees.Span(
                f"span{index}",
                kind,
                spans[parent % len(spans)].name,
                start,
                start + 10,
                attributes,
                error="boom" if failed else None,
                events=[trees.exception("RuntimeError", "boom")] if raised else [],
            )
        )
    return spans


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_SPAN, min_size=1, max_size=8), min_size=6, max_size=6))
def test_a_trace_kept_for_a_failure_has_its_finding(tmp_path_factory, forest):
    folder = tmp_path_factory.mktemp("signals")
    ids = [f"{i + 1:032x}" for i in range(len(forest))]
    source = trees.write(
        folder / "forest.json", {t: _tree(specs) for t, specs in zip(ids, forest, strict=True)}
    )
    data = folder / "data"
    assert CliRunner().invoke(cli, ["ingest", str(source), "--data", str(data)]).exit_code == 0
    dataset = Dataset(data)
    findings = dataset.classify()
    by_trace = {t: set(findings.filter(trace_id=t)["category"]) for t in ids}
    rows = dataset.sql(
        "SELECT trace_id, span_id, parent_span_id, kind, status_code = 'ERROR' FROM spans"
    ).rows()
    for trace_id, spans in itertools.groupby(sorted(rows), key=lambda row: row[0]):
        signals = trace_signals(SpanSignals(s, p, k, failed=f) for _, s, p, k, f in spans)
        if signals.errors:
            assert by_trace[trace_id] & {"error", "schema_violation"}, (trace_id, by_trace[trace_id])
    traces = dataset.sql("SELECT trace_id, error_count FROM traces").rows()
    for trace_id, error_count in traces:
        if error_count:  # what the errors policy samples on
            assert "error" in by_trace[trace_id] or "schema_violation" in by_trace[trace_id]


def test_the_failed_boundary_is_one_definition():
    rows = (
        duckdb.connect()
        .sql(
            f"SELECT kind, status, raised, {_rules.failed_boundary('kind', 'status', 'raised')} "
            "FROM (VALUES ('tool', 'ERROR', false), ('tool', 'OK', true), ('llm', 'OK', false), "
            "('chain', 'ERROR', true), ('memory', 'UNSET', true)) AS t(kind, status, raised)"
        )
        .fetchall()
    )
    assert [r[3] for r in rows] == [True, True, False, False, True]
