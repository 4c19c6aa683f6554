"""The replay-corpus format, in one place: file names, manifest keys, table schemas, the integrity check.

A corpus is a directory of four files (DESIGN.md section 6):

==================  =====================================================================================
file                holds
==================  =====================================================================================
``runs.parquet``    one row per trace (:data:`RUNS_SCHEMA`)
``envelopes.parquet`` one row per recorded boundary crossing (:data:`ENVELOPES_SCHEMA`)
``manifest.json``   ``format`` (always ``tailcut-corpus``), ``schema_version``, ``created_at``,
                    ``selection`` (how the traces were chosen), ``traces`` (per trace: ``trace_id``,
                    ``reason``, ``categories``, ``inclusion_probability``, ``baseline``, ``replayable``,
                    ``not_replayable_reason``) and ``files`` (per data file: ``sha256`` and ``bytes``)
``manifest.sha256`` the sha256 of ``manifest.json`` in ``sha256sum`` format
==================  =====================================================================================

The writer (:mod:`tailcut.exporters.corpus`) builds the manifest with :func:`build_manifest` and writes it
with :func:`write_manifest`; the reader (:mod:`tailcut.replay`) checks a directory with
:func:`verified_manifest` and reads the tables with :func:`read_rows`. Columns listed in
:data:`OPTIONAL_COLUMNS` were added after the first corpora were written: a reader takes them when present.
Every refusal is one :class:`~tailcut.errors.CorpusError` line naming the file and the fix.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tailcut.errors import CorpusError
from tailcut.exporters import schema

FORMAT: Final = "tailcut-corpus"
MANIFEST: Final = "manifest.json"
MANIFEST_DIGEST: Final = "manifest.sha256"
RUNS: Final = "runs.parquet"
ENVELOPES: Final = "envelopes.parquet"
#: The data files, each listed with its sha256 and size under the manifest's ``files``.
DATA_FILES: Final = (RUNS, ENVELOPES)
RUNS_SCHEMA: Final = schema.CORPUS_RUNS
ENVELOPES_SCHEMA: Final = schema.CORPUS_ENVELOPES
#: Schema versions of corpora this tailcut reads. Schema 1 differs only in its timestamps' unit (ns, not
#: us), which :func:`read_rows` makes irrelevant by returning every time as integer nanoseconds.
KNOWN_SCHEMA_VERSIONS: Final = frozenset({"1", schema.SCHEMA_VERSION})
#: Columns a reader takes when present (a corpus written before they existed lacks them).
OPTIONAL_COLUMNS: Final = frozenset(
    {
        "parent_seq",
        "convention",
        "run_input_source",
        "run_output",
        "run_output_source",
        "outcome_source",
        "root_kind",
    }
)
#: The keys of each entry of the manifest's ``traces`` list.
TRACE_KEYS: Final = (
    "trace_id",
    "reason",
    "categories",
    "inclusion_probability",
    "baseline",
    "replayable",
    "not_replayable_reason",
)
_FIX: Final = "re-run tailcut export-corpus"


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, as hex."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def build_manifest(
    corpus: Path, runs: Sequence[Mapping[str, Any]], selection: Mapping[str, Any]
) -> dict[str, Any]:
    """The manifest of the data files written in ``corpus`` for ``runs`` (rows of ``runs.parquet``)."""
    return {
        "format": FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "selection": dict(selection),
        "traces": [_trace_entry(run) for run in runs],
        "files": {
            name: {"sha256": sha256_file(corpus / name), "bytes": (corpus / name).stat().st_size}
            for name in DATA_FILES
        },
    }


def _trace_entry(run: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "trace_id": run["trace_id"],
        "reason": run["selection_reason"],
        "categories": list(run["categories"]),
        "inclusion_probability": run["inclusion_probability"],
        "baseline": run["baseline"],
        "replayable": run["replayable"],
        "not_replayable_reason": run["not_replayable_reason"],
    }


def write_manifest(corpus: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` and its digest ``manifest.sha256`` (``sha256sum`` format)."""
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (corpus / MANIFEST).write_text(text, encoding="utf-8")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    (corpus / MANIFEST_DIGEST).write_text(f"{digest}  {MANIFEST}\n", encoding="utf-8")


def verified_manifest(root: Path, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of the corpus at ``root``, after checking it and the files it lists.

    With ``verify`` (the default) the manifest must match ``manifest.sha256`` and each data file its
    sha256 and size; without it only the manifest must be readable, of a known schema version, and list
    the data files.

    Raises
    ------
    CorpusError
        Naming the file at fault, e.g. ``corpus refused: envelopes.parquet does not match its sha256 in
        manifest.json; re-run tailcut export-corpus``.
    """
    if not root.is_dir():
        raise CorpusError(f"corpus refused: {root} is not a directory; write one with tailcut export-corpus")
    if verify:
        _check_manifest_digest(root)
    manifest = _read_manifest(root)
    listed = manifest.get("files")
    if not isinstance(listed, Mapping):
        raise CorpusError(f"corpus refused: {MANIFEST} lists no files; {_FIX}")
    for name in DATA_FILES:
        _check_file(root, name, listed.get(name), verify=verify)
    return manifest


def check_trace_list(manifest: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]) -> None:
    """The manifest's ``traces`` must say what ``runs.parquet`` says (the manifest hashes only the files).

    Raises
    ------
    CorpusError
        If the two disagree on the traces, their order, replayability, reason or inclusion probability.
    """
    expected = [
        (r["trace_id"], r["replayable"], r["selection_reason"], r["inclusion_probability"]) for r in runs
    ]
    try:
        found = [
            (t["trace_id"], t["replayable"], t["reason"], t["inclusion_probability"])
            for t in manifest.get("traces")  # type: ignore[union-attr]
        ]
    except (TypeError, KeyError):
        found = None
    if found != expected:
        raise CorpusError(f"corpus refused: {MANIFEST} does not agree with {RUNS} on its traces; {_FIX}")


def read_rows(path: Path, table_schema: Any) -> list[dict[str, Any]]:
    """The rows of one corpus table: every column of ``table_schema``, the optional ones when present.

    Timestamps come as integer nanoseconds (Python's datetime cannot hold them).

    Raises
    ------
    CorpusError
        If the file is not readable Parquet or lacks a required column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        available = set(pq.read_schema(path).names)
        wanted = [f.name for f in table_schema if f.name in available]
        missing = [f.name for f in table_schema if f.name not in available and f.name not in OPTIONAL_COLUMNS]
        if missing:
            raise CorpusError(f"corpus refused: {path.name} has no column {missing[0]}; {_FIX}")
        table = pq.read_table(path, columns=wanted)
        for i, column in enumerate(table.schema):
            if pa.types.is_timestamp(column.type):
                as_ns = table.column(i).cast(pa.timestamp("ns", tz=column.type.tz))
                table = table.set_column(i, column.name, as_ns.cast(pa.int64()))
        return table.to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise CorpusError(
            f"corpus refused: {path.name} is not a readable Parquet file ({exc}); {_FIX}"
        ) from None


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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
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
    if sha256_file(path) != entry["sha256"]:
        raise CorpusError(f"corpus refused: {name} does not match its sha256 in {MANIFEST}; {_FIX}")
