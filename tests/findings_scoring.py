"""Findings scored against the framework scenarios' labels: which finding is right, at which span.

The scenario script of :mod:`tests.frameworks.scenarios` is the label: a run of a scenario must show each of
its labels' categories at the labelled span (``tool:<name>`` and its occurrence, or the Nth ``llm`` span of
the run), and nothing else. A finding counts as at the right span when it points at the labelled span, its
parent or one of its children (the issue's rule: an agent step that wraps the call, or a span an
instrumentor nests inside it). Used by ``tests/test_findings_frameworks.py`` and
``benchmarks/bench_findings.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailcut.signals import is_preparation_span
from tests.frameworks import harness
from tests.frameworks.scenarios import Label

#: (framework, recorder) pairs with a third-party instrumentor (the recordings issue 27 is about).
PAIRS: tuple[tuple[str, str], ...] = (
    *((framework, "openinference") for framework in harness.FRAMEWORKS),
    ("langgraph", "openllmetry"),
)

#: What the classifier does not find yet, by (framework, recorder, scenario), and why; scored as misses.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


@dataclass
class Score:
    """Per category: labelled findings found at the right span (``hits``), labels missed, findings that
    match no label (``extra``), and findings on clean runs."""

    hits: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    found: Counter[str] = field(default_factory=Counter)
    clean_findings: int = 0
    misses: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        self.hits.update(other.hits)
        self.labels.update(other.labels)
        self.found.update(other.found)
        self.clean_findings += other.clean_findings
        self.misses += other.misses
        self.extras += other.extras

    def recall(self, category: str) -> float | None:
        return self.hits[category] / self.labels[category] if self.labels[category] else None

    def precision(self, category: str) -> float | None:
        return self.hits[category] / self.found[category] if self.found[category] else None


def _spans(connection: Any, trace_id: str) -> list[dict[str, Any]]:
    rows = connection.execute(
        "SELECT span_id, parent_span_id, kind, boundary, start_time_ns, name FROM spans WHERE trace_id = ? "
        "ORDER BY start_time_ns, span_index",
        [trace_id],
    ).fetchall()
    columns = ("span_id", "parent", "kind", "boundary", "start", "name")
    return [dict(zip(columns, row, strict=True)) for row in rows]


def labelled_span(spans: list[dict[str, Any]], label: Label) -> dict[str, Any] | None:
    """The span ``label`` names in a run's spans (in start order): the Nth crossing of the tool, or the Nth
    ``llm`` span that is a model call (a request-preparation span is not one)."""
    if label.span == "llm":
        chosen = [s for s in spans if s["kind"] == "llm" and not is_preparation_span("llm", s["name"])]
    else:
        chosen = [s for s in spans if s["kind"] == "tool" and s["boundary"] == label.span]
    return chosen[label.occurrence - 1] if len(chosen) >= label.occurrence else None


def near(spans: list[dict[str, Any]], target: dict[str, Any], span_id: str | None) -> bool:
    """Whether ``span_id`` is ``target``, its parent or one of its children."""
    if span_id is None:
        return False
    if span_id in (target["span_id"], target["parent"]):
        return True
    return any(s["span_id"] == span_id and s["parent"] == target["span_id"] for s in spans)


def agrees(label: Label, finding: dict[str, Any]) -> bool:
    """Whether a finding at the labelled span says what the label says: the sub-kind of an ``error`` and
    the layer of an ``error`` or ``schema_violation`` (a ``tool_loop``'s layer is the classifier's own)."""
    if label.category == "error" and label.signal and label.signal not in finding["signals"]:
        return False
    layered = label.category in ("error", "schema_violation") and label.layer is not None
    return not layered or label.layer == finding["layer"]


def score(data: Path, findings: Any, recorder: str, *, gaps: Iterable[tuple[str, str, str]] = ()) -> Score:
    """The :class:`Score` of ``findings`` (a classification of ``data``) against the labels of every run
    recorded there; runs of the (framework, recorder, scenario) triples in ``gaps`` are left out."""
    import duckdb

    skipped = set(gaps)
    result = Score()
    connection = duckdb.connect()
    connection.execute(
        f"CREATE VIEW spans AS SELECT * FROM read_parquet('{data}/spans/**/*.parquet', union_by_name = true)"
    )
    rows = findings.to_dicts()
    for trace_id, (framework, scenario) in sorted(harness.scenarios_by_trace(data).items()):
        if (framework, recorder, scenario) in skipped:
            continue
        found = [r for r in rows if r["trace_id"] == trace_id]
        labels = harness.labels(framework, scenario)
        where = f"{framework}/{recorder}/{scenario}"
        if not labels:
            result.clean_findings += len(found)
            result.extras += [
                f"{where}: {r['category']} on a clean run ({r['evidence'][:80]})" for r in found
            ]
            continue
        spans = _spans(connection, trace_id)
        matched: set[int] = set()
        for label in labels:
            result.labels[label.category] += 1
            target = labelled_span(spans, label)
            hit = next(
                (
                    i
                    for i, r in enumerate(found)
                    if r["category"] == label.category
                    and target is not None
                    and near(spans, target, r["span_id"])
                    and agrees(label, r)
                ),
                None,
            )
            if hit is None:
                result.misses.append(f"{where}: {label.category} at {label.span}#{label.occurrence}")
            else:
                result.hits[label.category] += 1
                matched.add(hit)
        for i, r in enumerate(found):
            result.found[r["category"]] += 1
            if i not in matched:
                result.extras.append(
                    f"{where}: extra {r['category']} at {r['span_name']} ({r['evidence'][:80]})"
                )
    connection.close()
    return result
