"""``Viewer``: the data dir, results files and corpora the web app reads, and the query behind each page.

One DuckDB connection serves every request, one query at a time (a lock: a connection is not safe to
share between threads). Everything the pages list as choices (policies, revisions, prompt versions,
outcomes, services) and the totals seen and kept are read once when the viewer opens; pages read
the Parquet files on every request.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailcut.exporters.conventions.readable import Message, readable
from tailcut.ui import _trace, _traces
from tailcut.ui._errors import BadRequest, NotFound, UiError
from tailcut.ui._findings import ensure_findings
from tailcut.ui._replays import ResultsFile, TraceReplay, load_results, recorded_spans

if TYPE_CHECKING:
    from tailcut.analysis import Comparison, Dataset
    from tailcut.replay._corpus import CorpusRun


@dataclass(frozen=True)
class Facets:
    """Totals and the values each filter offers, read when the viewer opens."""

    seen: int
    kept: int
    policies: list[str]
    categories: list[str]
    boundaries: list[str]
    harness_revisions: list[str]
    prompt_versions: list[str]
    outcomes: list[str]
    services: list[str]
    columns: list[str]


@dataclass(frozen=True)
class Payload:
    """One span's request or response: its size, its text when loaded, and the text rendered."""

    part: str
    chars: int
    text: str | None
    messages: list[Message]

    @property
    def deferred(self) -> bool:
        """True when the payload is too large to show inline (or offloaded): it loads on demand."""
        return self.chars > 0 and self.text is None


class Viewer:
    """The read-only state behind ``tailcut ui``.

    Parameters
    ----------
    data : path-like
        The data dir.
    results : sequence of path-like
        Replay results files (``tailcut replay --out``).
    corpora : sequence of path-like
        Replay corpora, for why each replayed trace was selected.
    """

    def __init__(
        self,
        data: str | os.PathLike[str],
        *,
        results: Sequence[str | os.PathLike[str]] = (),
        corpora: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        from tailcut.analysis import Dataset
        from tailcut.exporters import PayloadStore

        self.dataset: Dataset = Dataset(data)
        self._lock = threading.Lock()
        with self.dataset.reading():
            ensure_findings(self.dataset)
        self.results: list[ResultsFile] = [load_results(path) for path in results]
        self.corpus_runs: dict[str, CorpusRun] = _corpus_runs(corpora)
        local = Path(self.dataset.location)
        self._stores = [PayloadStore(local / "payloads")] if local.is_dir() else []
        self.facets = self._facets()
        self._recorded = self._recorded_spans()

    # --- queries -------------------------------------------------------------------------------------------
    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run one query under the lock and return its rows as dicts."""
        with self._lock, self.dataset.reading():
            cursor = self.dataset.connection.execute(sql, dict(params or {}))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def _values(self, sql: str) -> list[str]:
        return [str(r["v"]) for r in self.rows(sql) if r["v"] is not None]

    def _facets(self) -> Facets:
        (totals,) = self.rows("SELECT count(*) AS seen, count(*) FILTER (WHERE kept) AS kept FROM traces")
        return Facets(
            seen=int(totals["seen"]),
            kept=int(totals["kept"] or 0),
            policies=self._values("SELECT DISTINCT unnest(policies) AS v FROM traces ORDER BY 1"),
            categories=self._values("SELECT DISTINCT category AS v FROM findings ORDER BY 1"),
            boundaries=self._values("SELECT DISTINCT boundary AS v FROM findings ORDER BY 1"),
            harness_revisions=self._values("SELECT DISTINCT harness_revision AS v FROM traces ORDER BY 1"),
            prompt_versions=self._values("SELECT DISTINCT prompt_version AS v FROM traces ORDER BY 1"),
            outcomes=self._values("SELECT DISTINCT outcome AS v FROM traces ORDER BY 1"),
            services=self._values("SELECT DISTINCT service_name AS v FROM traces ORDER BY 1"),
            columns=[name for name, _ in self.dataset.schema("traces")],
        )

    def _recorded_spans(self) -> dict[tuple[str, int], str]:
        ids = sorted({t.trace_id for f in self.results for t in f.traces})
        if not ids:
            return {}
        return recorded_spans(
            self.rows(
                "SELECT trace_id, seq, span_id FROM spans WHERE list_contains($ids, trace_id) "
                "AND seq IS NOT NULL",
                {"ids": ids},
            )
        )

    # --- pages ---------------------------------------------------------------------------------------------
    def traces_page(self, query: _traces.TraceQuery) -> _traces.TracePage:
        """One page of the traces table."""
        sql, params = _traces.page_sql(query)
        rows = self.rows(sql, params)
        if rows:
            kept = [row["trace_id"] for row in rows if row["kept"]]
            previews = {r["trace_id"]: r["preview"] for r in self.rows(_traces.PREVIEW_SQL, {"ids": kept})}
            for row in rows:
                row["input_preview"] = previews.get(row["trace_id"])
            return _traces.page_from_rows(query, rows, rows[0])
        sql, params = _traces.count_sql(query)
        return _traces.page_from_rows(query, [], self.rows(sql, params)[0])

    def trace(self, trace_id: str) -> _trace.TraceView:
        """One trace's row, spans and findings; raises :class:`NotFound` when the data dir has neither."""
        params = {"trace": trace_id}
        rows = self.rows(_trace.TRACE_SQL, params)
        spans = self.rows(_trace.SPANS_SQL, params)
        if not rows and not spans:
            raise NotFound(f"no trace {trace_id} in {self.dataset.location}")
        findings = self.rows(_trace.FINDINGS_SQL, params) if spans else []
        timeline, duration = _trace.timeline(spans, findings)
        return _trace.TraceView(trace_id, rows[0] if rows else None, timeline, findings, duration)

    def span(self, trace_id: str, span_id: str) -> tuple[dict[str, Any], list[Payload], list[dict[str, Any]]]:
        """One span's row, its request and response (inline when small) and the findings it is first in."""
        rows = self.rows(_trace.SPAN_SQL, {"trace": trace_id, "span": span_id})
        if not rows:
            raise NotFound(f"trace {trace_id} has no span {span_id} in {self.dataset.location}")
        span = rows[0]
        payloads = []
        for part in _trace.PARTS:
            text = span.pop(part)
            chars = int(span.pop(f"{part}_chars") or 0)
            if text is not None and self._is_stub(text):
                text = None  # offloaded: loads on demand, resolved from the payload store
            payloads.append(Payload(part, chars, text, readable(text)))
        if span["parent_span_id"] is None:
            payloads = _run_payloads(span.get("attributes") or {}) + [p for p in payloads if p.chars]
        return span, payloads, self.span_findings(trace_id, span_id)

    def span_findings(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        """The findings whose first span is this one."""
        return self.rows(
            "SELECT category, layer, evidence, confidence FROM findings "
            "WHERE trace_id = $trace AND span_id = $span ORDER BY category",
            {"trace": trace_id, "span": span_id},
        )

    @staticmethod
    def _is_stub(text: str) -> bool:
        import orjson

        from tailcut.payloads import STUB_KEY, stub_ref

        return text.startswith('{"' + STUB_KEY) and stub_ref(orjson.loads(text)) is not None

    def payload(self, trace_id: str, span_id: str, part: str) -> Payload:
        """The whole request or response of one span (offloaded payloads resolved from the store)."""
        from tailcut.exporters import resolve_payload
        from tailcut.payloads import PayloadStoreError

        if part not in _trace.PARTS:
            raise NotFound(f"a span has a request and a response, not {part!r}")
        sql = _trace.PAYLOAD_SQL.format(part=part)
        rows = self.rows(sql, {"trace": trace_id, "span": span_id})
        if not rows:
            raise NotFound(f"trace {trace_id} has no span {span_id} in {self.dataset.location}")
        text = rows[0]["text"]
        if text is not None:
            try:
                text = resolve_payload(text, self._stores)
            except PayloadStoreError as exc:
                raise NotFound(f"the {part} of span {span_id}: {exc}") from None
        return Payload(part, len(text or ""), text, readable(text))

    def compare(self, column: str, first: str, second: str) -> Comparison:
        """The verdict table of ``tailcut compare --by COLUMN A B`` (:class:`BadRequest` if it has none)."""
        from tailcut.analysis import AnalysisError, compare_by

        with self._lock:
            try:
                return compare_by(self.dataset, column, first, second, store=False)  # read-only
            except AnalysisError as exc:
                raise BadRequest(str(exc)) from None

    def replays_of(self, trace_id: str) -> list[tuple[ResultsFile, TraceReplay]]:
        """Every results file that replayed ``trace_id``, with that trace's reruns."""
        return [(f, t) for f in self.results for t in f.traces if t.trace_id == trace_id]

    def incident(self, name: str, trace_id: str) -> tuple[ResultsFile, dict[str, Any]]:
        """One incident of the validate results file ``name`` (:class:`NotFound` when there is none)."""
        file = next((f for f in self.results if f.name == name and f.validation is not None), None)
        if file is None:
            raise NotFound(f"no validate results file {name!r}: start tailcut ui with --results FILE")
        found = file.incident(trace_id)
        if found is None:
            raise NotFound(f"trace {trace_id} is not an incident of {name}")
        return file, found

    def recorded_span(self, trace_id: str, seq: int | None) -> str | None:
        """The span id of the recorded crossing ``seq`` of a trace (None when not in the data dir)."""
        return None if seq is None else self._recorded.get((trace_id, int(seq)))

    def close(self) -> None:
        self.dataset.close()


def _run_payloads(attributes: Mapping[str, Any]) -> list[Payload]:
    """A root span's run input and output (``tailcut.run.input``/``.output``), shown as its payloads:
    a run span records no request or response of its own, and what it was asked is what a reader wants."""
    from tailcut import attributes as attr

    payloads = []
    for part, key in (("run input", attr.RUN_INPUT), ("run output", attr.RUN_OUTPUT)):
        text = attributes.get(key)
        payloads.append(Payload(part, len(text or ""), text, readable(text)))
    return payloads


def _corpus_runs(corpora: Sequence[str | os.PathLike[str]]) -> dict[str, CorpusRun]:
    from tailcut.errors import CorpusError
    from tailcut.replay import load_corpus

    runs: dict[str, CorpusRun] = {}
    for path in corpora:
        try:
            runs.update(load_corpus(path).runs)
        except CorpusError as exc:
            raise UiError(f"--corpus {path}: {exc}") from None
    return runs
