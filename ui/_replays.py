"""Replay results files (what ``tailcut replay --out`` and ``tailcut validate --out`` write) as the viewer
shows them.

Each trace of a file is one rate line with its mode and denominator and its 95% Wilson interval, the way
``tailcut replay`` prints it (``intermittent 3/10 (live)``). A validate results file holds two agents'
reruns of each trace: they are two lines (``role`` new and baseline), each counted as the validation
judged it (the check, divergences reported beside), and the file carries the validation's summary (its
``--format json`` object), which the replays page and each incident's page show.

A rerun's row keeps its first divergence (``divergence``, with a unified diff of the recorded and live
requests as indented JSON) and the count of all of them; the viewer shows each stored divergence as a
side-by-side diff rebuilt from those hunks, linked to the recorded span: the span of the same trace
whose ``seq`` is the divergence's ``recorded_seq``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tailcut.ui._errors import UiError


@dataclass(frozen=True)
class DiffRow:
    """One aligned row of a side-by-side diff: recorded line, live line, and how they differ."""

    left: str | None
    right: str | None
    kind: str  # "same", "changed", "removed", "added", "hunk"


@dataclass(frozen=True)
class Divergence:
    """One stored divergence, and every rerun of the trace that diverged exactly so (most reruns of a
    deterministic divergence repeat it: the page shows it once, with the reruns that hit it)."""

    reruns: tuple[int, ...]
    kind: str
    boundary: str
    occurrence: int
    seq: int | None
    recorded_seq: int | None
    message: str
    paths: list[str]
    rows: list[DiffRow]
    downstream_of: str | None
    labels: tuple[str, str]


@dataclass
class TraceReplay:
    """The reruns of one trace in one results file."""

    trace_id: str
    mode: str
    reruns: int = 0
    passed: int = 0
    #: Reruns that left the record: never counted among the passes (as ``tailcut replay`` counts them).
    diverged: int = 0
    divergence_count: int = 0
    category: str | None = None
    baseline: bool = False
    harness_revision: str | None = None
    messages: list[str] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    #: ``new`` or ``baseline`` in a validate results file (None in a replay's)
    role: str | None = None

    @property
    def stored_divergences(self) -> int:
        """The divergences the results file stored (one per rerun that diverged: its first)."""
        return sum(len(d.reruns) for d in self.divergences)

    @property
    def rate(self) -> str:
        """``intermittent 3/10 (live)``, ``pass 0/3, diverged 3/3 (cut)``: as ``tailcut replay`` says it;
        ``always 3/3 (cut)`` for an agent of a validation, which judges by the check alone."""
        from tailcut.replay import rate_text

        diverged = 0 if self.role is not None else self.diverged
        return rate_text(self.passed, self.reruns, self.mode, diverged=diverged)

    @property
    def interval(self) -> tuple[float, float]:
        from tailcut.analysis.stats import wilson_interval

        return wilson_interval(self.passed, self.reruns)


@dataclass(frozen=True)
class ResultsFile:
    """One replay results file: its traces in file order."""

    path: Path
    traces: list[TraceReplay]
    #: the validation's summary (``tailcut validate --format json``), for a validate results file
    validation: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def incident(self, trace_id: str) -> dict[str, Any] | None:
        """The validation's summary of one incident (None if it is not one of the file's incidents)."""
        incidents = (self.validation or {}).get("incidents", ())
        return next((i for i in incidents if i["trace_id"] == trace_id), None)

    def reruns(self, trace_id: str, role: str) -> TraceReplay | None:
        """The reruns of ``trace_id`` by the agent of ``role`` (validate files)."""
        return next((t for t in self.traces if t.trace_id == trace_id and t.role == role), None)

    @property
    def modes(self) -> list[str]:
        return sorted({t.mode for t in self.traces})


def side_by_side(diff: str) -> tuple[list[DiffRow], tuple[str, str]]:
    """Align a unified diff's hunks into recorded/live rows (removed and added lines paired in order)."""
    rows: list[DiffRow] = []
    labels = ("recorded", "live")
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for i in range(max(len(removed), len(added))):
            left = removed[i] if i < len(removed) else None
            right = added[i] if i < len(added) else None
            kind = (
                "changed"
                if left is not None and right is not None
                else "removed"
                if right is None
                else "added"
            )
            rows.append(DiffRow(left, right, kind))
        removed.clear()
        added.clear()

    for line in diff.splitlines():
        if line.startswith("--- "):
            labels = (line[4:], labels[1])
        elif line.startswith("+++ "):
            labels = (labels[0], line[4:])
        elif line.startswith("@@") or line.startswith("... ("):
            flush()
            rows.append(DiffRow(line, line, "hunk"))
        elif line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        else:
            flush()
            rows.append(DiffRow(line[1:], line[1:], "same"))
    flush()
    return rows, labels


def _divergence(rerun: int, text: str) -> Divergence:
    data = json.loads(text)
    rows, labels = side_by_side(data.get("diff") or "")
    return Divergence(
        reruns=(rerun,),
        kind=str(data.get("kind", "")),
        boundary=str(data.get("boundary", "")),
        occurrence=int(data.get("occurrence") or 0),
        seq=data.get("seq"),
        recorded_seq=data.get("recorded_seq"),
        message=str(data.get("message", "")),
        paths=[str(p) for p in data.get("paths") or []],
        rows=rows,
        downstream_of=data.get("downstream_of"),
        labels=labels,
    )


def _add_divergence(found: list[Divergence], new: Divergence) -> None:
    """Add ``new`` to ``found``, or add its rerun to the divergence that is the same but for the rerun."""
    for i, old in enumerate(found):
        if replace(old, reruns=new.reruns) == new:
            found[i] = replace(old, reruns=old.reruns + new.reruns)
            return
    found.append(new)


def load_results(path: str | os.PathLike[str]) -> ResultsFile:
    """Read one results file; raises :class:`UiError` for a missing or foreign file."""
    import pyarrow.parquet as pq

    target = Path(path)
    if not target.is_file():
        raise UiError(f"--results {target}: no such file (write one with `tailcut replay --out FILE`)")
    try:
        table = pq.read_table(target)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise UiError(f"--results {target}: not a readable Parquet file ({exc})") from None
    needed = ("trace_id", "mode", "rerun", "passed", "divergence", "divergence_count")
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise UiError(f"--results {target}: not a replay results file (no column {', '.join(missing)})")
    validation = _summary(target, table.schema.metadata or {})
    traces: dict[tuple[str, str | None], TraceReplay] = {}
    for row in table.to_pylist():
        role = row.get("role")
        key = (row["trace_id"], role)
        trace = traces.setdefault(key, TraceReplay(row["trace_id"], row["mode"], role=role))
        trace.reruns += 1
        diverged = bool(row["divergence_count"])
        trace.diverged += diverged
        # a diverged rerun is never a pass of a replay, in any mode; a validation judged it already
        trace.passed += bool(row["passed"]) and (role is not None or not diverged)
        trace.divergence_count += int(row["divergence_count"] or 0)
        trace.category = row.get("category") or trace.category
        trace.baseline = bool(row.get("baseline"))
        trace.harness_revision = row.get("harness_revision") or trace.harness_revision
        for key in ("check_message", "error"):
            if row.get(key) and row[key] not in trace.messages:
                trace.messages.append(row[key])
        if row["divergence"]:
            _add_divergence(trace.divergences, _divergence(int(row["rerun"]), row["divergence"]))
    return ResultsFile(target, list(traces.values()), validation)


def _summary(path: Path, metadata: dict[bytes, bytes]) -> dict[str, Any] | None:
    """The validation summary a validate results file keeps in its metadata (None for a replay's)."""
    from tailcut.replay._validation_output import SUMMARY_KEY

    raw = metadata.get(SUMMARY_KEY)
    if raw is None:
        return None
    try:
        summary = json.loads(raw)
    except ValueError:
        raise UiError(f"--results {path}: its validation summary is not JSON") from None
    if not isinstance(summary, dict) or "incidents" not in summary:
        raise UiError(f"--results {path}: its validation summary has no incidents")
    return summary


def recorded_spans(rows: list[dict[str, Any]]) -> dict[tuple[str, int], str]:
    """``(trace_id, seq) → span_id`` from ``spans`` rows, to link a divergence to its recorded span."""
    return {(r["trace_id"], int(r["seq"])): r["span_id"] for r in rows if r["seq"] is not None}
