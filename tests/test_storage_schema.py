"""Schema 2 beside schema 1: files written before the timestamp change still read, to the nanosecond.

Schema 1 stored ``timestamp[ns, tz=UTC]`` and had no ``start_time_ns``/``end_time_ns`` twins and no
``head_probability``; a data dir holding both generations reads as today's schema everywhere: DuckDB
views, polars frames and the pyarrow reader the corpus exporter uses. The views and frames present
``start_time``/``end_time`` in nanoseconds again, rebuilt from the twins.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tailcut.analysis import Dataset
from tailcut.analysis._source import duckdb_types
from tailcut.exporters import DataDirWriter, schema
from tailcut.exporters._location import location, read_table
from tailcut.exporters._signals import trace_rows
from tests.analysis_support import spans_table

TRACE = "0af7651916cd43dd8448eb211c80319c"
OLD_TRACE = "1af7651916cd43dd8448eb211c80319c"
START = 1_767_225_600_123_456_789  # not a whole microsecond


def _spans(trace_id: str) -> pa.Table:
    return spans_table(
        [
            {"trace_id": trace_id, "span_id": "a" * 16, "parent_span_id": None, "name": "run", "kind": "root",
             "start": START, "end": START + 5_000_001},
            {"trace_id": trace_id, "span_id": "b" * 16, "parent_span_id": "a" * 16, "name": "llm",
             "kind": "llm", "start": START + 1, "end": START + 2_000_003},
        ]
    )  # fmt: skip


def _schema_1(table: pa.Table, name: str) -> pa.Table:
    """``table`` as schema 1 wrote it: nanosecond timestamps, no twins, no head_probability."""
    drop = [c for c in ("start_time_ns", "end_time_ns", "head_probability") if c in table.column_names]
    exact = {t: table.column(twin) for t, twin in schema.NANOSECOND_TWINS.items()}
    table = table.drop_columns(drop)
    fields = []
    for field in table.schema:
        if pa.types.is_timestamp(field.type):
            field = field.with_type(pa.timestamp("ns", tz="UTC"))
        fields.append(field)
    old = table.cast(pa.schema(fields))
    for time_name, column in exact.items():
        if time_name in old.column_names:
            position = old.schema.get_field_index(time_name)
            nanoseconds = column.cast(pa.timestamp("ns", tz="UTC"))
            old = old.set_column(position, old.schema.field(time_name), nanoseconds)
    metadata = {schema.TABLE_KEY: name.encode(), schema.SCHEMA_VERSION_KEY: b"1"}
    return old.replace_schema_metadata(metadata)


@pytest.fixture
def mixed(tmp_path) -> Path:
    data = tmp_path / "data"
    spans = _spans(TRACE)
    with DataDirWriter(data) as writer:
        writer.write_spans(spans)
        writer.write_traces(trace_rows(spans, kept=True, decision_reason="embedded"))
    old_spans = _spans(OLD_TRACE)
    old_traces = schema.from_rows("traces", trace_rows(old_spans, kept=True, decision_reason="embedded"))
    for name, table in (("spans", old_spans), ("traces", old_traces)):
        directory = data / name / "dt=2026-01-01"  # the day START falls on
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(_schema_1(table, name), directory / "part-old.parquet")
    return data


def test_new_files_store_microsecond_timestamps_and_exact_nanoseconds(mixed):
    (new,) = (p for p in (mixed / "spans").rglob("*.parquet") if p.name != "part-old.parquet")
    stored = pq.read_table(new)
    assert stored.schema.field("start_time").type == pa.timestamp("us", tz="UTC")
    assert sorted(stored.column("start_time_ns").to_pylist()) == [START, START + 1]
    assert pq.read_metadata(new).metadata[schema.SCHEMA_VERSION_KEY] == b"2"


def test_duckdb_views_read_both_generations_as_todays_schema(mixed):
    with Dataset(mixed) as data:
        assert dict(data.schema("spans")) | {"dt": "DATE"} == {**duckdb_types("spans"), "dt": "DATE"}
        # start_time is presented in nanoseconds, rebuilt from the twin (old files: from their own ns)
        rows = data.sql(
            "SELECT trace_id, min(start_time_ns) AS ns, epoch_ns(min(start_time)) AS t FROM spans "
            "GROUP BY trace_id ORDER BY trace_id"
        ).rows()
        assert rows == [(TRACE, START, START), (OLD_TRACE, START, START)]
        assert dict(data.schema("spans"))["start_time"] == "TIMESTAMPTZ_NS"
        traces = data.sql("SELECT trace_id, start_time_ns, head_probability FROM traces ORDER BY 1").rows()
        assert traces == [(TRACE, START, 1.0), (OLD_TRACE, START, None)]


def test_polars_frames_read_both_generations(mixed):
    with Dataset(mixed) as data:
        frame = data.spans(columns=["trace_id", "start_time", "start_time_ns"]).sort("trace_id")
    assert frame.schema["start_time"] == pl.Datetime("ns", "UTC")
    first = frame.group_by("trace_id").agg(pl.col("start_time_ns").min(), pl.col("start_time").min())
    assert first.sort("trace_id").with_columns(pl.col("start_time").dt.epoch("ns")).rows() == [
        (TRACE, START, START),
        (OLD_TRACE, START, START),  # the old file's own nanoseconds
    ]


def test_the_pyarrow_reader_upgrades_old_files_exactly(mixed):
    table = read_table(location(mixed), "spans", ["trace_id", "start_time", "start_time_ns"])
    old = table.filter(pc.equal(table.column("trace_id"), OLD_TRACE))
    assert sorted(old.column("start_time_ns").to_pylist()) == [START, START + 1]
    assert table.schema.field("start_time").type == schema.TIMESTAMP


def test_row_builders_take_nanoseconds_and_derive_the_twins():
    table = schema.from_rows("traces", trace_rows(_spans(TRACE), kept=True, decision_reason="embedded"))
    assert table.schema.equals(schema.TRACES)
    assert table.column("start_time_ns").to_pylist() == [START]
    assert table.column("start_time").cast(pa.int64()).to_pylist() == [START // 1000]
    assert table.column("head_probability").to_pylist() == [1.0]
