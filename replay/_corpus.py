"""Reading a replay corpus, and refusing one that is not exactly what was exported.

A replay that serves a damaged record proves nothing, so :func:`load_corpus` checks every file against
the sha256 the manifest lists (and its size, which catches a truncated copy early), checks that the
manifest's list of traces agrees with ``runs.parquet``, and refuses a manifest it cannot read or whose
schema version it does not know. The format and its checks are defined once, in
:mod:`tailcut.exporters.corpus_format`; this module turns the rows into the objects a replay uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tailcut.canonical import loads
from tailcut.errors import CorpusError, ReplayError
from tailcut.exporters import corpus_format
from tailcut.exporters._location import local_directory, location
from tailcut.exporters.conventions.corpus import TAILCUT
from tailcut.interceptor import Served


@dataclass(frozen=True, slots=True)
class Envelope:
    """One recorded boundary crossing, as a replay serves it.

    Payload fields hold the recorded canonical JSON text. ``parent_seq`` is the ``seq`` of the boundary
    crossing this one was made inside (a tool that calls a retriever), when the corpus records it: serving
    the outer crossing means the inner ones never happen, so the session counts them as covered.
    """

    seq: int
    boundary: str
    occurrence: int
    kind: str
    request: str | None
    request_sha256: str | None
    response: str | None
    response_sha256: str | None
    stream_events: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    latency_ms: float = 0.0
    attempt: int | None = None
    parent_seq: int | None = None
    convention: str = TAILCUT

    @property
    def third_party(self) -> bool:
        """Recorded by another instrumentation (OpenInference, OpenLLMetry, GenAI), not by tailcut."""
        return self.convention != TAILCUT

    @property
    def key(self) -> str:
        """``boundary#occurrence``, the way divergences and ``--live`` name a crossing."""
        return f"{self.boundary}#{self.occurrence}"

    def served(self) -> Served:
        """What a session serves for this crossing; decoded afresh, so the agent may mutate it."""
        return Served(
            response=loads(self.response) if self.response is not None else None,
            response_json=self.response,
            error_type=self.error_type,
            error_message=self.error_message,
            stream_events=loads(self.stream_events) if self.stream_events is not None else None,
        )


@dataclass(frozen=True, slots=True)
class CorpusRun:
    """One recorded run of a corpus (a row of ``runs.parquet``)."""

    trace_id: str
    run_input: str | None
    outcome: str | None
    harness_revision: str | None = None
    category: str | None = None
    categories: tuple[str, ...] = ()
    baseline: bool = False
    inclusion_probability: float = 1.0
    selection_reason: str = ""
    replayable: bool = True
    not_replayable_reason: str | None = None
    agent_name: str | None = None
    error_type: str | None = None  # what the recorded run raised, if it raised
    run_output: str | None = None  # what the recorded run returned, where its convention records it
    run_input_source: str | None = None

    @property
    def input(self) -> Any:
        """The decoded run input the agent entry point is called with."""
        return loads(self.run_input) if self.run_input is not None else None

    @property
    def output(self) -> Any:
        """The decoded output the recorded run returned (None when not recorded)."""
        return loads(self.run_output) if self.run_output is not None else None


@dataclass(frozen=True)
class Corpus:
    """A verified replay corpus: its runs in manifest order and each run's envelopes in ``seq`` order.

    ``path`` is the corpus directory, or the ``s3://`` URL it was read from.
    """

    path: Path | str
    manifest: Mapping[str, Any]
    runs: Mapping[str, CorpusRun]
    _envelopes: Mapping[str, tuple[Envelope, ...]] = field(repr=False)

    def run(self, trace_id: str) -> CorpusRun:
        """The run recorded as ``trace_id``.

        Raises
        ------
        ReplayError
            If the corpus has no such trace.
        """
        found = self.runs.get(trace_id.lower())
        if found is None:
            raise ReplayError(f"trace {trace_id} is not in the corpus at {self.path}")
        return found

    def envelopes(self, trace_id: str) -> tuple[Envelope, ...]:
        """The recorded crossings of ``trace_id``, in the order they started."""
        return self._envelopes.get(self.run(trace_id).trace_id, ())

    @property
    def not_replayable(self) -> dict[str, str]:
        """Trace id -> why it cannot be replayed, for the traces the writer marked so."""
        return {
            run.trace_id: run.not_replayable_reason or "not replayable"
            for run in self.runs.values()
            if not run.replayable
        }

    def boundaries(self) -> frozenset[str]:
        """Every boundary name some envelope of the corpus crosses."""
        return frozenset(e.boundary for envelopes in self._envelopes.values() for e in envelopes)


def load_corpus(path: str | os.PathLike[str], *, verify: bool = True) -> Corpus:
    """Open the corpus at ``path``, refusing it unless every file matches the manifest.

    Parameters
    ----------
    path
        A corpus directory written by ``tailcut export-corpus`` or ``tailcut select``, or its
        ``s3://bucket/prefix`` URL (its files are copied to a temporary local directory and read there).
    verify
        Check each file's sha256 and size and the manifest's trace list (``--no-verify`` turns it off;
        the manifest must still be readable and of a known schema version).

    Returns
    -------
    Corpus

    Raises
    ------
    CorpusError
        Naming the file at fault, e.g. ``corpus refused: envelopes.parquet does not match its sha256 in
        manifest.json; re-run tailcut export-corpus``.
    """
    place = location(path)
    if place.remote:
        if not place.is_file(corpus_format.MANIFEST) and place.child("traces").exists():
            raise CorpusError(_a_data_dir(place.url))
        if not place.is_file(corpus_format.MANIFEST):
            manifest = corpus_format.MANIFEST
            raise CorpusError(
                f"corpus refused: {manifest} is missing in {place}; re-run tailcut export-corpus"
            )
        with local_directory(place) as root:
            loaded = _load(root, verify=verify)
        return replace(loaded, path=place.url)
    return _load(place.local_path(), verify=verify)


def _a_data_dir(where: object) -> str:
    return (
        f"{where} is a data dir (spans/, traces/), not a replay corpus: make a corpus from it with "
        f"`tailcut select --data {where} --out CORPUS` or `tailcut export-corpus --data {where} ...`"
    )


def _load(root: Path, *, verify: bool) -> Corpus:
    if not root.is_dir():
        raise CorpusError(f"corpus refused: {root} is not a directory; write one with tailcut export-corpus")
    if not (root / corpus_format.MANIFEST).exists() and (root / "traces").is_dir():
        raise CorpusError(_a_data_dir(root))
    manifest = corpus_format.verified_manifest(root, verify=verify)
    rows = corpus_format.read_rows(root / corpus_format.RUNS, corpus_format.RUNS_SCHEMA)
    if verify:
        corpus_format.check_trace_list(manifest, rows)
    runs = [_run(row) for row in rows]
    envelopes: dict[str, list[Envelope]] = {}
    for row in corpus_format.read_rows(root / corpus_format.ENVELOPES, corpus_format.ENVELOPES_SCHEMA):
        envelopes.setdefault(row["trace_id"], []).append(_envelope(row))
    return Corpus(
        path=root,
        manifest=manifest,
        runs={run.trace_id: run for run in runs},
        _envelopes={trace: tuple(sorted(items, key=lambda e: e.seq)) for trace, items in envelopes.items()},
    )


def _run(row: Mapping[str, Any]) -> CorpusRun:
    return CorpusRun(
        trace_id=row["trace_id"],
        run_input=row["run_input"],
        outcome=row["outcome"],
        harness_revision=row["harness_revision"],
        category=row["category"],
        categories=tuple(row["categories"] or ()),
        baseline=bool(row["baseline"]),
        inclusion_probability=float(row["inclusion_probability"]),
        selection_reason=row["selection_reason"],
        replayable=bool(row["replayable"]),
        not_replayable_reason=row["not_replayable_reason"],
        agent_name=row["agent_name"],
        error_type=row["error_type"],
        run_output=row.get("run_output"),
        run_input_source=row.get("run_input_source"),
    )


def _envelope(row: Mapping[str, Any]) -> Envelope:
    return Envelope(
        seq=row["seq"],
        boundary=row["boundary"],
        occurrence=row["occurrence"],
        kind=row["kind"],
        request=row["request"],
        request_sha256=row["request_sha256"],
        response=row["response"],
        response_sha256=row["response_sha256"],
        stream_events=row["stream_events"],
        error_type=row["error_type"],
        error_message=row["error_message"],
        latency_ms=row["latency_ms"],
        attempt=row["attempt"],
        parent_seq=row.get("parent_seq"),
        convention=row.get("convention") or TAILCUT,
    )
