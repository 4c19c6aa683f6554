"""Reading a replay corpus, and refusing one that is not exactly what was exported.

A replay that serves a damaged record proves nothing, so :func:`load_corpus` checks every file against
the sha256 the manifest lists (and its size, which catches a truncated copy early), checks that the
manifest's list of traces agrees with ``runs.parquet``, and refuses a manifest it cannot read or whose
schema version it does not know. Every refusal is one line naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from tailcut.canonical import loads
from tailcut.errors import CorpusError, ReplayError
from tailcut.exporters import schema
from tailcut.exporters._location import local_directory, location
from tailcut.exporters.corpus import CORPUS_FORMAT, ENVELOPES, MANIFEST, MANIFEST_DIGEST, RUNS
from tailcut.interceptor import Served

#: Schema versions of corpora this reader understands.
#: Corpora of schema 1 differ only in the type of ``start_time``, which a replay does not read.
KNOWN_SCHEMA_VERSIONS: Final = frozenset({"1", schema.SCHEMA_VERSION})
_FIX: Final = "re-run tailcut export-corpus"
_RUN_COLUMNS: Final = [f.name for f in schema.CORPUS_RUNS if f.name != "start_time"]
_ENVELOPE_COLUMNS: Final = [f.name for f in schema.CORPUS_ENVELOPES]
#: Read when present: the ``seq`` of the boundary crossing a crossing was made inside (see ``Envelope``).
_PARENT_SEQ: Final = "parent_seq"


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

    @property
    def input(self) -> Any:
        """The decoded run input the agent entry point is called with."""
        return loads(self.run_input) if self.run_input is not None else None


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
        if not place.is_file(MANIFEST):
            raise CorpusError(f"corpus refused: {MANIFEST} is missing in {place}; {_FIX}")
        with local_directory(place) as root:
            loaded = _load(root, verify=verify)
        return replace(loaded, path=place.url)
    return _load(place.local_path(), verify=verify)


def _load(root: Path, *, verify: bool) -> Corpus:
    if not root.is_dir():
        raise CorpusError(f"corpus refused: {root} is not a directory; write one with tailcut export-corpus")
    if verify:
        _check_manifest_digest(root)
    manifest = _read_manifest(root)
    listed = manifest.get("files")
    if not isinstance(listed, Mapping):
        raise CorpusError(f"corpus refused: {MANIFEST} lists no files; {_FIX}")
    for name in (RUNS, ENVELOPES):
        _check_file(root, name, listed.get(name), verify=verify)
    runs = [_run(row) for row in _read_rows(root / RUNS, _RUN_COLUMNS, ())]
    if verify:
        _check_trace_list(manifest, runs)
    envelopes: dict[str, list[Envelope]] = {}
    for row in _read_rows(root / ENVELOPES, _ENVELOPE_COLUMNS, (_PARENT_SEQ,)):
        envelopes.setdefault(row["trace_id"], []).append(_envelope(row))
    return Corpus(
        path=root,
        manifest=manifest,
        runs={run.trace_id: run for run in runs},
        _envelopes={trace: tuple(sorted(items, key=lambda e: e.seq)) for trace, items in envelopes.items()},
    )


def _check_manifest_digest(root: Path) -> None:
    """``manifest.sha256`` must hold the sha256 of ``manifest.json`` (the manifest vouches for the rest)."""
    try:
        recorded = (root / MANIFEST_DIGEST).read_text(encoding="utf-8").split()[0]
        actual = hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest()
    except (OSError, IndexError, UnicodeDecodeError):
        raise CorpusError(f"corpus refused: {MANIFEST_DIGEST} is missing or unreadable; {_FIX}") from None
    if recorded != actual:
        raise CorpusError(
            f"corpus refused: {MANIFEST} does not match its sha256 in {MANIFEST_DIGEST}; {_FIX}"
        )


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise CorpusError(f"corpus refused: {MANIFEST} is missing in {root}; {_FIX}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CorpusError(f"corpus refused: {MANIFEST} is unreadable ({exc}); {_FIX}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != CORPUS_FORMAT:
        raise CorpusError(f"corpus refused: {MANIFEST} is not a tailcut corpus manifest; {_FIX}")
    version = manifest.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(sorted(KNOWN_SCHEMA_VERSIONS))
        raise CorpusError(
            f"corpus refused: schema version {version!r} is unknown (this tailcut reads {known}); "
            "export the corpus again with this version"
        )
    return manifest


def _check_file(root: Path, name: str, entry: Any, *, verify: bool) -> None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("sha256"), str):
        raise CorpusError(f"corpus refused: {MANIFEST} lists no sha256 for {name}; {_FIX}")
    path = root / name
    if not path.is_file():
        raise CorpusError(f"corpus refused: {name} is missing; {_FIX}")
    if not verify:
        return
    size = entry.get("bytes")
    if isinstance(size, int) and path.stat().st_size != size:
        raise CorpusError(f"corpus refused: {name} is not the size {MANIFEST} lists (truncated?); {_FIX}")
    with path.open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    if digest != entry["sha256"]:
        raise CorpusError(f"corpus refused: {name} does not match its sha256 in {MANIFEST}; {_FIX}")


def _read_rows(path: Path, columns: list[str], optional: Iterable[str]) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        available = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in available]
        if missing:
            raise CorpusError(f"corpus refused: {path.name} has no column {missing[0]}; {_FIX}")
        wanted = columns + [c for c in optional if c in available]
        return pq.read_table(path, columns=wanted).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise CorpusError(
            f"corpus refused: {path.name} is not a readable Parquet file ({exc}); {_FIX}"
        ) from None


def _check_trace_list(manifest: Mapping[str, Any], runs: list[CorpusRun]) -> None:
    """The manifest's ``traces`` must say what ``runs.parquet`` says (the manifest hashes only the files)."""
    listed = manifest.get("traces")
    expected = [(r.trace_id, r.replayable, r.selection_reason, r.inclusion_probability) for r in runs]
    try:
        found = [
            (t["trace_id"], t["replayable"], t["reason"], t["inclusion_probability"])
            for t in listed  # type: ignore[union-attr]
        ]
    except (TypeError, KeyError):
        found = None
    if found != expected:
        raise CorpusError(f"corpus refused: {MANIFEST} does not agree with {RUNS} on its traces; {_FIX}")


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
        parent_seq=row.get(_PARENT_SEQ),
    )
