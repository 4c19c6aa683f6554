"""Spans to Parquet: normalisation, the ``spans`` and ``traces`` tables, file ingest and forwarding.

Examples
--------
::

    from tailcut.exporters import DataDirWriter, normalize_otlp, compute_signals, facts_from_otlp

    with DataDirWriter("data") as writer:
        writer.write_spans(normalize_otlp(request.resource_spans))

Writing in the agent's own process, without a collector::

    tailcut.init(exporter=ParquetSpanExporter("data"))
"""

from tailcut.exporters import schema
from tailcut.exporters._errors import BadOtlpInput, DataDirError
from tailcut.exporters._exporter import ParquetSpanExporter
from tailcut.exporters._forwarder import OtlpForwarder
from tailcut.exporters._ingest import IngestReport, ingest, read_otlp_file
from tailcut.exporters._payloads import resolve_payload
from tailcut.exporters._signals import facts_from_otlp, facts_from_row
from tailcut.exporters._spans import normalize_otlp, normalize_sdk
from tailcut.exporters._writer import DataDirWriter
from tailcut.exporters.conventions.mapping import KIND_KEYS, resolve_kind
from tailcut.payloads import PayloadStore
from tailcut.signals import SpanFacts, TraceSignals, compute_signals, traces_row

__all__ = [
    "KIND_KEYS",
    "BadOtlpInput",
    "DataDirError",
    "DataDirWriter",
    "IngestReport",
    "OtlpForwarder",
    "ParquetSpanExporter",
    "PayloadStore",
    "SpanFacts",
    "TraceSignals",
    "compute_signals",
    "facts_from_otlp",
    "facts_from_row",
    "ingest",
    "normalize_otlp",
    "normalize_sdk",
    "read_otlp_file",
    "resolve_kind",
    "resolve_payload",
    "schema",
    "traces_row",
]
