"""``tailcut ingest``: OTLP files (JSON, JSON lines, protobuf) into a data dir.

Each file is read and checked whole before anything of it is written, so a bad file leaves nothing behind:
the error names the file and its first problem (with the line number for JSON lines). With ``skip_bad``,
bad records (a JSON line, a span) are skipped and counted instead, and a file that is not OTLP at all
counts as one skipped record. Ingested traces are kept, with ``decision_reason`` ``ingested`` (written
without a collector) and an inclusion probability of 1. The spans of a trace are expected in one file; a
trace split over files is written as one trace per file (its spans in the other file are orphans there).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, TracesData

from tailcut.exporters._batch import DecodedSpans
from tailcut.exporters._errors import BadOtlpInput
from tailcut.exporters._hooks import WriterHook
from tailcut.exporters._normalize import normalize
from tailcut.exporters._payloads import copy_payloads, data_dir_store
from tailcut.exporters._pieces import drop_carriers
from tailcut.exporters._signals import trace_rows
from tailcut.exporters._writer import DataDirWriter
from tailcut.exporters.wire.columns import decode_resource_spans
from tailcut.exporters.wire.otlp_json import json_request
from tailcut.payloads import PayloadStore

_GZIP_MAGIC: Final = b"\x1f\x8b"


@dataclass
class IngestReport:
    """What :func:`ingest` wrote and skipped."""

    files: int = 0
    spans: int = 0
    traces: int = 0
    skipped: int = 0
    #: The first few skip reasons, for the user.
    problems: list[str] = field(default_factory=list)
    payloads_missing: int = 0


def _decode_json(text: bytes, name: str, skip: Callable[[str], None] | None) -> DecodedSpans:
    """One OTLP/JSON document, or JSON lines (a document a line, as the Collector's file exporter writes).

    Each document becomes an encoded request (:func:`~tailcut.exporters.wire.otlp_json.json_request`, the
    one JSON reader); the requests of all lines, joined, are one request (protobuf concatenates repeated
    fields), decoded as a protobuf file is.
    """
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as whole:
        lines = text.splitlines()
        first = next((line for line in lines if line.strip()), b"")
        try:
            orjson.loads(first)
        except orjson.JSONDecodeError:
            raise BadOtlpInput(
                f"{name}: invalid JSON at line {whole.lineno}, column {whole.colno}: {whole.msg}"
            ) from None
        requests = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{name}, line {number}"
            try:
                requests.append(_json_request(orjson.loads(line), where, skip))
            except orjson.JSONDecodeError as exc:
                problem = f"{where}: invalid JSON at column {exc.colno}: {exc.msg}"
                if skip is None:
                    raise BadOtlpInput(problem) from None
                skip(problem)
            except BadOtlpInput as exc:
                if skip is None:
                    raise
                skip(str(exc))
        request = b"".join(requests)
    else:
        request = _json_request(document, name, skip)
    return _decoded(request, name, skip)


def _json_request(document: object, where: str, skip: Callable[[str], None] | None) -> bytes:
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        raise BadOtlpInput(f"{where}: not OTLP/JSON (expected an object with a resourceSpans list)")
    return json_request(document, where=where, on_bad_span=skip)


def _decoded(
    spans: bytes | Sequence[ResourceSpans], name: str, skip: Callable[[str], None] | None
) -> DecodedSpans:
    """The column decoder's spans, each problem named by the file (raised, or skipped with ``skip``)."""
    on_bad_span = None if skip is None else lambda problem: skip(f"{name}: {problem}")
    try:
        return decode_resource_spans(spans, on_bad_span=on_bad_span)
    except BadOtlpInput as exc:
        raise BadOtlpInput(f"{name}: {exc}") from None


def _decode_protobuf(data: bytes, name: str, skip: Callable[[str], None] | None) -> DecodedSpans:
    """``TracesData`` or ``ExportTraceServiceRequest`` bytes (the two share their encoding)."""
    try:
        message = TracesData.FromString(data)
    except DecodeError as exc:
        raise BadOtlpInput(f"{name}: not OTLP (neither OTLP/JSON nor OTLP protobuf: {exc})") from None
    if len(UnknownFieldSet(message)) or not message.resource_spans:
        raise BadOtlpInput(f"{name}: not OTLP (neither OTLP/JSON nor OTLP protobuf with resource spans)")
    return _decoded(message.resource_spans, name, skip)


def read_otlp_file(
    path: str | os.PathLike[str], *, skip: Callable[[str], None] | None = None
) -> DecodedSpans:
    """Read and check a whole OTLP file (JSON, JSON lines or protobuf; gzip-compressed or not).

    Parameters
    ----------
    path
        The file.
    skip
        Called with each bad record's problem, which is then skipped; when None, the first one raises.

    Raises
    ------
    BadOtlpInput
        If the file is empty, not OTLP, or (without ``skip``) has a bad record.
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadOtlpInput(f"{name}: cannot read: {exc.strerror or exc}") from None
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadOtlpInput(f"{name}: broken gzip data: {exc}") from None
    stripped = data.lstrip()
    if not stripped:
        raise BadOtlpInput(f"{name}: empty file (no OTLP data)")
    if stripped[:1] in (b"{", b"["):
        return _decode_json(data, name, skip)
    return _decode_protobuf(data, name, skip)


def ingest(
    paths: Sequence[str | os.PathLike[str]],
    data_dir: str | os.PathLike[str],
    *,
    skip_bad: bool = False,
    payload_stores: Sequence[PayloadStore] = (),
    progress: Callable[[int], None] | None = None,
    hooks: Sequence[WriterHook] = (),
) -> IngestReport:
    """Normalise OTLP files and write them into a data dir (each file whole, or nothing of it).

    Parameters
    ----------
    paths
        OTLP/JSON, JSON-lines or protobuf files.
    data_dir
        The data dir to write to.
    skip_bad
        Skip and count bad records instead of stopping at the first.
    payload_stores
        Stores to copy offloaded payloads from into ``DATA/payloads``.
    progress
        Called with the number of bytes of each file once it is done.
    hooks
        Post-write hooks for the data-dir writer (``tailcut ingest`` passes the classifier's per-trace
        features, :mod:`tailcut.analysis._writer_hooks`; none by default).

    Returns
    -------
    IngestReport

    Raises
    ------
    BadOtlpInput
        At the first bad file or record (without ``skip_bad``); files before it stay written.
    """
    report = IngestReport()

    def skip(problem: str) -> None:
        report.skipped += 1
        if len(report.problems) < 5:
            report.problems.append(problem)

    target = data_dir_store(data_dir)
    with DataDirWriter(data_dir, hooks=hooks) as writer:
        for path in paths:
            try:
                batch = read_otlp_file(path, skip=skip if skip_bad else None)
            except BadOtlpInput as exc:
                if not skip_bad:
                    raise
                skip(str(exc))
                continue
            table = normalize(batch)
            report.payloads_missing += copy_payloads(table, payload_stores, target)
            spans, _ = drop_carriers(table)  # carriers give their pieces, never a row or a count
            rows = trace_rows(spans, kept=True, decision_reason="ingested", inclusion_probability=1.0)
            writer.write_spans(table)
            writer.write_traces(rows)
            report.files += 1
            report.spans += spans.num_rows
            report.traces += len(rows)
            if progress is not None:
                progress(os.path.getsize(path))
    return report
