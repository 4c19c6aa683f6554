"""Shared by the replay tests: record real runs into a data dir, write corpora, and rewrite them."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tailcut import _config
from tailcut._threads import thread_context
from tailcut.exporters import ParquetSpanExporter, schema
from tailcut.exporters.corpus import Selection, write_corpus
from tailcut.exporters.corpus_format import write_manifest
from tailcut.payloads import PayloadStore
from tailcut.testing import ModelServer, ScriptedReply, ToolCall  # the third-party replay tests' model


@contextlib.contextmanager
def recording_into(data: Path) -> Iterator[None]:
    """Record every tailcut span made in the block into ``data`` (the embedded Parquet exporter)."""
    store = PayloadStore(data.parent / f"{data.name}-payloads")
    exporter = ParquetSpanExporter(data, root_grace=0.0, payload_stores=[store])
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = _config.install(
        _config.Config(enabled=True, tracer=provider.get_tracer("test"), payload_store=store)
    )
    applied = thread_context.apply()
    try:
        yield
    finally:
        if applied:
            thread_context.restore()
        _config.install(previous)
        provider.shutdown()


def trace_ids(data: Path) -> list[str]:
    """The data dir's traces, oldest first."""
    table = ds.dataset(data / "traces", format="parquet", partitioning="hive", schema=schema.TRACES)
    rows = table.to_table(columns=["trace_id", "start_time"]).sort_by("start_time")
    return rows.column("trace_id").to_pylist()


def record_corpus(
    tmp_path: Path, calls: list[Callable[[], Any]], *, name: str = "corpus"
) -> tuple[Path, list[str]]:
    """Run each call (an agent run) while recording, and write every run into one corpus.

    A call's exception is swallowed: a run that failed is recorded like any other.
    """
    data = tmp_path / f"{name}-data"
    with recording_into(data):
        for call in calls:
            try:
                call()
            except Exception:
                pass
    ids = trace_ids(data)
    out = tmp_path / name
    write_corpus(data, [Selection(trace_id, "test run") for trace_id in ids], out)
    return out, ids


def rewrite_corpus_file(corpus: Path, name: str, table: pa.Table) -> None:
    """Replace one corpus file and record its new hash, as a writer of a newer version would."""
    pq.write_table(table, corpus / name)
    manifest_path = corpus / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    data = (corpus / name).read_bytes()
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    write_manifest(corpus, manifest)


__all__ = [
    "ModelServer",
    "ScriptedReply",
    "ToolCall",
    "record_corpus",
    "recording_into",
    "rewrite_corpus_file",
    "trace_ids",
]
