"""The replay-corpus writer: selected traces of a data dir as a self-contained, verifiable directory.

A corpus is what a replay needs and nothing else (DESIGN.md section 6):

* ``runs.parquet``: one row per trace: the run's input, harness and environment revision, initial
  state, original outcome, failure categories, why it was selected and its inclusion probability;
* ``envelopes.parquet``: one row per boundary crossing, with its full request and response (payloads
  offloaded to the payload store are resolved and their hashes checked), stream events and error;
* ``manifest.json``: what was selected and why, the schema version, and the sha256 of every file;
  ``manifest.sha256`` holds the manifest's own sha256 (``sha256sum`` format).

A trace that cannot be replayed (its root span is missing, a payload the store no longer has, content
capture was off) is written with ``replayable = false`` and the reason: it is never silently dropped.
The corpus is built in a temporary directory beside ``out`` and renamed into place, so a failed write
leaves nothing behind. The format (file names, manifest keys, schemas, integrity check) is defined in
:mod:`tailcut.exporters.corpus_format`; what is taken from spans of other instrumentations (the run's
input from its parentless span, third-party llm crossings as Chat Completions exchanges), in
:mod:`tailcut.exporters.conventions.corpus`. The data dir and ``out`` may be ``s3://bucket/prefix``
URLs (:mod:`._location`): a remote corpus is built locally and uploaded file by file, the manifest last.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from tailcut import attributes as attr
from tailcut._atomic import replacing
from tailcut._pieces import PAYLOAD_ATTRIBUTES, PIECED_SUFFIX
from tailcut.canonical import sha256_hex
from tailcut.errors import TailcutError
from tailcut.exporters import corpus_format, schema
from tailcut.exporters._location import Location, location, upload_directory
from tailcut.exporters._payloads import data_dir_store, resolve_payload
from tailcut.exporters._pieces import PieceError, PieceReader
from tailcut.exporters.conventions import corpus as conventions
from tailcut.payloads import PayloadStore, PayloadStoreError


class CorpusWriteError(TailcutError):
    """A corpus could not be written (no such data dir, no such trace, output exists)."""


@dataclass(frozen=True)
class Selection:
    """Why one trace goes into a corpus.

    Parameters
    ----------
    trace_id
        The trace, 32 hex characters.
    reason
        A sentence a reader understands, e.g. ``"incident: schema_drift"`` or
        ``"baseline slice, stratum agent_name=support-agent"``.
    categories
        The failure categories found in the trace (empty for a clean baseline run).
    inclusion_probability
        The trace's π in the data dir's ``traces`` table (1 when unknown).
    baseline
        Whether it is a member of the uniform baseline slice.
    """

    trace_id: str
    reason: str
    categories: tuple[str, ...] = ()
    inclusion_probability: float = 1.0
    baseline: bool = False


@dataclass
class CorpusSummary:
    """What :func:`write_corpus` wrote (``path``: the directory, or the ``s3://`` URL)."""

    path: Path | str
    runs: int
    envelopes: int
    not_replayable: dict[str, str] = field(default_factory=dict)


def payload_stores(
    data_dir: str | os.PathLike[str], extra: Iterable[str | os.PathLike[str]] = ()
) -> list[PayloadStore]:
    """The payload stores to resolve offloaded payloads from: ``DATA/payloads`` first, then ``extra``.

    A payload store is a local directory: a remote data dir contributes none.
    """
    own = data_dir_store(data_dir)
    return [*([own] if own is not None else []), *(PayloadStore(p) for p in extra)]


def _read_spans(data_dir: Location, trace_ids: Sequence[str]) -> pa.Table:
    files = data_dir.files("spans")
    if not files:
        raise CorpusWriteError(
            f"{data_dir} has no spans/ directory (or no files in it): is it a tailcut data dir?"
        )
    wanted = ds.field("trace_id").isin(list(trace_ids))
    parts = []
    for fragment in ds.dataset(files, filesystem=data_dir.filesystem, format="parquet").get_fragments():
        columns = [c for c in _SPAN_COLUMNS if c in fragment.physical_schema.names]
        part = schema.upgrade("spans", fragment.to_table(columns=columns, filter=wanted))
        parts.append(part.select(_SPAN_COLUMNS))
    table = pa.concat_tables(parts)
    return table.sort_by([("trace_id", "ascending"), ("span_index", "ascending")])


_SPAN_COLUMNS: Final = [
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "service_name",
    "start_time",
    "duration_ms",
    "status_message",
    "error_type",
    "model",
    "provider",
    "tool_name",
    "agent_name",
    "finish_reason",
    "input_tokens",
    "output_tokens",
    "boundary",
    "occurrence",
    "seq",
    "attempt",
    "request",
    "request_sha256",
    "response",
    "response_sha256",
    "attributes",
    "events",
    "span_index",
]


def _resolve(
    text: str | None, expected_sha: str | None, stores: Sequence[PayloadStore]
) -> tuple[str | None, str | None]:
    """The full payload text behind an inline value (resolving a stub), or ``(None, why not)``."""
    if text is None:
        return None, None
    try:
        text = resolve_payload(text, stores)
    except PayloadStoreError as exc:
        return None, str(exc)
    if expected_sha and hashlib.sha256(text.encode("utf-8")).hexdigest() != expected_sha:
        return None, "a recorded payload does not match its sha256"
    return text, None


def _whole(
    span: Mapping[str, Any],
    field: str,
    span_attrs: Mapping[str, str],
    pieces: PieceReader,
    stores: Sequence[PayloadStore],
) -> tuple[str | None, str | None]:
    """One payload of a span, whole: put back from its pieces, or resolved from its stub."""
    name = PAYLOAD_ATTRIBUTES[field]
    text = span_attrs.get(name) if field == "events" else span[field]
    expected = None if field == "events" else span[f"{field}_sha256"]
    if text is not None and span_attrs.get(name + PIECED_SUFFIX) == "true":
        try:
            text = pieces.payload(
                text, trace_id=span["trace_id"], boundary=span["boundary"], sha256=None, field=field
            )
        except PieceError as exc:
            return None, str(exc)
    return _resolve(text, expected, stores)


def _attributes(row: Mapping[str, Any]) -> dict[str, str]:
    value = row.get("attributes")
    return dict(value) if value else {}


def _json_or_text(value: str | None) -> str | None:
    """A run-level attribute as JSON text (plain strings become JSON strings)."""
    if value is None:
        return None
    try:
        json.loads(value)
    except ValueError:
        return json.dumps(value)
    return value


def _root(spans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's span: the trace's parentless span (tailcut's ``root`` first when there are several)."""
    parentless = [s for s in spans if s["parent_span_id"] is None]
    return min(parentless, key=lambda s: (s["kind"] != "root", s["span_index"]), default=None)


def _as_crossing(span: dict[str, Any]) -> dict[str, Any]:
    """A boundary span as a crossing: one of tailcut's that storage counted as a second view of its
    parent's model call (kind ``other`` under a framework instrumentor's llm span) keeps its kind."""
    if span["kind"] in attr.BOUNDARY_KINDS:
        return span
    return {**span, "kind": span["boundary"].partition(":")[0]}


def _mirrored(crossings: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Third-party crossings of a boundary tailcut recorded in the same trace: they mirror tailcut's
    (OpenInference's LangChain ``ChatOpenAI`` span beside the ``openai`` call tailcut records, its tool
    span beside tailcut's), so each call is replayed once, as tailcut recorded it."""
    ours = {span["boundary"] for span in crossings.values() if span["attempt"] is not None}
    return {
        span_id for span_id, span in crossings.items() if span["attempt"] is None and span["boundary"] in ours
    }


def _envelope(
    trace_id: str,
    span: dict[str, Any],
    parents: Mapping[str, str | None],
    crossings: Mapping[str, Mapping[str, Any]],
    stores: Sequence[PayloadStore],
    pieces: PieceReader,
    problems: list[str],
) -> dict[str, Any]:
    """The envelope row of one boundary crossing; what keeps it from being replayed goes to ``problems``."""
    span_attrs = _attributes(span)
    key = f"{span['boundary']}#{span['occurrence']}"
    request, why_request = _whole(span, "request", span_attrs, pieces, stores)
    response, why_response = _whole(span, "response", span_attrs, pieces, stores)
    events, why_events = _whole(span, "events", span_attrs, pieces, stores)
    for why in (why_request, why_response, why_events):
        if why:
            problems.append(f"{key}: {why}")
    recorded_by = conventions.convention(span, span_attrs)
    request_sha, response_sha = span["request_sha256"], span["response_sha256"]
    if recorded_by == conventions.TAILCUT:
        if request is None and request_sha and not why_request:
            hint = conventions.CAPTURE_HINTS[recorded_by]
            problems.append(f"{key}: content capture was off (hash only); {hint}")
    else:
        if span["boundary"] == conventions.OPENAI_CHAT:
            exchange = conventions.openai_chat_exchange(
                recorded_by, {**span, "request": request, "response": response}, span_attrs
            )
            request, response = exchange.request, exchange.response
            if exchange.problem:
                problems.append(f"{key} ({recorded_by}): {exchange.problem}")
            request_sha = sha256_hex(request) if request is not None else None
            response_sha = sha256_hex(response) if response is not None else None
        elif span["kind"] == "tool":
            request = conventions.tool_request(recorded_by, request)
            request_sha = sha256_hex(request) if request is not None else None
            response = conventions.tool_response(recorded_by, response)
            response_sha = sha256_hex(response) if response is not None else None
        elif span["kind"] == "llm":
            problems.append(
                f"{key} ({recorded_by}): tailcut replays third-party llm crossings of "
                f"{conventions.OPENAI_CHAT} only; record this call with tailcut's instrumentation"
            )
        missing = [what for what, value in (("request", request), ("response", response)) if value is None]
        if missing and span["error_type"] is None and not (why_request or why_response):
            hint = conventions.CAPTURE_HINTS[recorded_by]
            problems.append(f"{key} ({recorded_by}): its {' and '.join(missing)} was not recorded; {hint}")
    error_type, error_message = (
        span["error_type"],
        span_attrs.get(attr.ERROR_MESSAGE) or span["status_message"],
    )
    if recorded_by != conventions.TAILCUT:
        error_type, error_message = conventions.recorded_error(span, error_message)
    retries = span_attrs.get(attr.RETRIES)
    return {
        "trace_id": trace_id,
        "seq": span["seq"] or 0,
        "boundary": span["boundary"],
        "occurrence": span["occurrence"] or 0,
        "kind": span["kind"],
        "name": span["name"],
        "span_id": span["span_id"],
        "parent_seq": _enclosing_seq(span["span_id"], parents, crossings),
        "request": request,
        "request_sha256": request_sha,
        "response": response,
        "response_sha256": response_sha,
        "stream_events": events,
        "error_type": error_type,
        "error_message": error_message,
        "latency_ms": span["duration_ms"],
        "attempt": span["attempt"],
        "retries": int(retries) if retries is not None else None,
        "model": span["model"],
        "provider": span["provider"],
        "tool_name": span["tool_name"],
        "convention": recorded_by,
    }


def _build(
    trace_id: str,
    spans: list[dict[str, Any]],
    selection: Selection,
    stores: Sequence[PayloadStore],
    pieces: PieceReader,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The runs row and envelope rows of one trace."""
    problems: list[str] = []
    root = _root(spans)
    if not spans:
        problems.append("no spans of this trace are in the data dir")
    elif root is None:
        problems.append(
            "the run's root span was not recorded (missing spans): no span is parentless; the process "
            "that opens the run's root span must export it (and flush before it exits)"
        )
    root_attrs = _attributes(root) if root else {}
    if root is not None and root["kind"] == "llm" and root_attrs.get(attr.REQUEST_PIECED):
        # An llm call made with no run open: its request, pieces filled in, is the run's input.
        root = {**root, "request": _whole(root, "request", root_attrs, pieces, stores)[0]}
    descendants = [(s, _attributes(s)) for s in sorted(spans, key=lambda s: s["span_index"]) if s is not root]
    fields = conventions.run_fields(root, root_attrs, descendants) if root else {}
    run_input = run_output = None
    if root is not None:
        run_input, why = _resolve(fields["input"].value, None, stores)
        if run_input is None:
            problems.append(why or f"the run's input was not recorded: {conventions.INPUT_HINT}")
        elif (unusable := conventions.input_problem(run_input)) is not None:
            problems.append(unusable)
        run_output, _ = _resolve(fields["output"].value, None, stores)
    crossings = {
        s["span_id"]: _as_crossing(s)
        for s in spans
        if s["boundary"] is not None and (s["kind"] in attr.BOUNDARY_KINDS or s["attempt"] is not None)
    }
    parents = {s["span_id"]: s["parent_span_id"] for s in spans}
    for duplicate in _mirrored(crossings):
        del crossings[duplicate]
    envelopes = [
        _envelope(trace_id, span, parents, crossings, stores, pieces, problems)
        for span in spans
        if span["span_id"] in crossings
    ]
    if root is not None and root["kind"] != "root" and not envelopes and not problems:
        problems.append(
            "the trace recorded no boundary crossing (llm or tool call) to replay: instrument the model "
            "client (tailcut.instrument_openai(), or an OpenInference, OpenLLMetry or GenAI instrumentor)"
        )
    score = root_attrs.get(attr.OUTCOME_SCORE)
    run = {
        "trace_id": trace_id,
        "service_name": root["service_name"] if root else None,
        "root_name": root["name"] if root else None,
        "agent_name": root["agent_name"] if root else None,
        "run_input": run_input,
        "harness_revision": root_attrs.get(attr.HARNESS_REVISION),
        "env_revision": root_attrs.get(attr.ENV_REVISION),
        "prompt_version": root_attrs.get(attr.PROMPT_VERSION),
        "initial_state": _json_or_text(root_attrs.get(attr.INITIAL_STATE)),
        "outcome": fields["outcome"].value if root else None,
        "outcome_score": float(score) if score is not None else None,
        "error_type": root["error_type"] if root else None,
        "categories": list(selection.categories),
        "category": selection.categories[0] if selection.categories else None,
        "inclusion_probability": selection.inclusion_probability,
        "baseline": selection.baseline,
        "selection_reason": selection.reason,
        "replayable": not problems,
        "not_replayable_reason": "; ".join(problems) if problems else None,
        "boundary_count": len(envelopes),
        "start_time": root["start_time"] if root else None,
        "root_kind": root["kind"] if root else None,
        "run_input_source": fields["input"].source if run_input is not None else None,
        "run_output": run_output,
        "run_output_source": fields["output"].source if run_output is not None else None,
        "outcome_source": fields["outcome"].source if root else None,
    }
    return run, sorted(envelopes, key=lambda e: e["seq"])


def _enclosing_seq(
    span_id: str, parents: Mapping[str, str | None], crossings: Mapping[str, Mapping[str, Any]]
) -> int | None:
    """The seq of the nearest boundary crossing above ``span_id`` in the tree (None at the top level)."""
    seen = {span_id}
    parent = parents.get(span_id)
    while parent is not None and parent not in seen:
        if parent in crossings:
            return crossings[parent]["seq"]
        seen.add(parent)
        parent = parents.get(parent)
    return None


def _write_parquet(rows: list[dict[str, Any]], table_schema: pa.Schema, path: Path) -> None:
    table = pa.Table.from_pylist(rows, schema=table_schema)
    pq.write_table(table, path, compression="zstd")


def write_corpus(
    data_dir: str | os.PathLike[str],
    selections: Sequence[Selection],
    out: str | os.PathLike[str],
    *,
    stores: Sequence[PayloadStore] | None = None,
    description: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> CorpusSummary:
    """Write the selected traces of ``data_dir`` as a replay corpus at ``out``.

    Parameters
    ----------
    data_dir
        A tailcut data dir (``spans/``, ``traces/``, ``payloads/``).
    selections
        The traces and why each is selected, in the order they should appear.
    out
        The corpus directory to create.
    stores
        Payload stores for offloaded payloads (default: :func:`payload_stores` of ``data_dir``).
    description
        How the selection was made (categories, baseline size, seed, ...), kept in the manifest.
    overwrite
        Replace an existing corpus at ``out``.

    Returns
    -------
    CorpusSummary
        Counts, and the reason for every trace that is not replayable.
    """
    data = location(data_dir)
    place = location(out)
    if place.exists() and not overwrite:
        raise CorpusWriteError(
            f"{place} already exists; choose another --out, or pass --overwrite to replace it"
        )
    if not selections:
        raise CorpusWriteError("nothing selected: the corpus would be empty")
    ids = [s.trace_id for s in selections]
    if len(set(ids)) != len(ids):
        raise CorpusWriteError("a trace is selected twice")
    stores = list(stores) if stores is not None else payload_stores(data.url)
    table = _read_spans(data, ids)
    pieces = PieceReader(data, stores)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        by_trace.setdefault(row["trace_id"], []).append(row)
    runs, envelopes = [], []
    for selection in selections:
        run, crossings = _build(
            selection.trace_id, by_trace.get(selection.trace_id, []), selection, stores, pieces
        )
        runs.append(run)
        envelopes.extend(crossings)

    with _staging(place) as staging:
        _write_parquet(runs, corpus_format.RUNS_SCHEMA, staging / corpus_format.RUNS)
        _write_parquet(envelopes, corpus_format.ENVELOPES_SCHEMA, staging / corpus_format.ENVELOPES)
        manifest = corpus_format.build_manifest(staging, runs, description or {})
        corpus_format.write_manifest(staging, manifest)
    return CorpusSummary(
        path=place.url if place.remote else place.local_path(),
        runs=len(runs),
        envelopes=len(envelopes),
        not_replayable={r["trace_id"]: r["not_replayable_reason"] for r in runs if not r["replayable"]},
    )


@contextmanager
def _staging(place: Location) -> Iterator[Path]:
    """A directory to build the corpus in that becomes the corpus when the block succeeds.

    Locally it is renamed over the target (:mod:`tailcut._atomic`); remotely it is uploaded with the
    manifest last. On failure it is removed and the target is left as it was.
    """
    if not place.remote:
        with replacing(place.local_path(), directory=True) as staging:
            yield staging
        return
    staging = Path(tempfile.mkdtemp(prefix="tailcut-corpus-"))
    try:
        yield staging
        if place.exists():
            place.filesystem.delete_dir_contents(place.path, missing_dir_ok=True)
        upload_directory(staging, place, last=(corpus_format.MANIFEST, corpus_format.MANIFEST_DIGEST))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
