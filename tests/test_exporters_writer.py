"""The Parquet writer: atomic files, schema, partitions, rolling, crash safety and concurrency."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.exporters import DataDirError, DataDirWriter, _row_order, schema
from tailcut.exporters._batch import EMPTY_RESOURCE, DecodedSpans, SpanRecord
from tailcut.exporters._normalize import normalize
from tailcut.exporters._signals import trace_rows

DAY = 86_400 * 10**9
JAN_1 = 1767225600 * 10**9  # 2026-01-01T00:00:00Z


def spans_table(trace: int, count: int = 5, start: int = JAN_1, step: int = 10**6) -> pa.Table:
    records = [
        SpanRecord(
            f"{trace:032x}",
            f"{i + 1:016x}",
            None if i == 0 else "0000000000000001",
            f"span {i}",
            "INTERNAL",
            start + i * step,
            start + (i + 1) * step,
            "UNSET",
            None,
            {"tailcut.kind": "root" if i == 0 else "tool", "payload": "x" * 50},
            (),
            (),
            EMPTY_RESOURCE,
            None,
        )
        for i in range(count)
    ]
    return normalize(DecodedSpans.from_records(records))


def same_schema(read: pa.Schema, expected: pa.Schema) -> bool:
    """Equal names, types, nullability and metadata (Parquet renames list items and map entries)."""

    def spelled(field: pa.Field) -> tuple[str, str, bool]:
        text = re.sub(r" \('\w+'\)", "", str(field.type)).replace("element:", "item:")
        return field.name, text, field.nullable

    return [spelled(f) for f in read] == [spelled(f) for f in expected] and read.metadata == expected.metadata


def query(data: Path, select: str, table: str = "spans", tail: str = "") -> list[tuple]:
    """Run a query over a table of the data dir the way readers do (glob, union_by_name, hive partitions)."""
    source = f"read_parquet('{data}/{table}/**/*.parquet', union_by_name=true, hive_partitioning=true)"
    return duckdb.sql(f"SELECT {select} FROM {source} {tail}").fetchall()


def parts(data: Path, table: str = "spans") -> list[Path]:
    return sorted((data / table).glob("dt=*/*.parquet"))


def test_files_match_the_schema_exactly_and_carry_its_version(tmp_path: Path) -> None:
    with DataDirWriter(tmp_path) as writer:
        table = spans_table(1)
        writer.write_spans(table)
        writer.write_traces(trace_rows(table, kept=True, decision_reason="embedded"))
    for name in ("spans", "traces"):
        (path,) = parts(tmp_path, name)
        assert same_schema(pq.read_schema(path), schema.TABLES[name])
        assert pq.read_table(path).cast(schema.TABLES[name]).schema.equals(schema.TABLES[name])
        metadata = pq.read_metadata(path).metadata
        assert metadata[schema.SCHEMA_VERSION_KEY] == schema.SCHEMA_VERSION.encode()
        assert metadata[schema.TABLE_KEY] == name.encode()
        assert path.name.startswith("part-") and not path.name.startswith(".")
    assert query(tmp_path, "count(*)") == [(5,)]
    assert query(tmp_path, "span_count, kept, decision_reason", "traces") == [(5, True, "embedded")]


def test_an_older_file_without_a_newer_column_still_reads(tmp_path: Path) -> None:
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(spans_table(1))
    old = spans_table(2).drop_columns(["scope_name", "is_orphan"])
    old_schema = pa.schema(
        [f for f in schema.SPANS if f.name in old.schema.names], metadata={b"tailcut.schema_version": b"0"}
    )
    pq.write_table(old.cast(old_schema), tmp_path / "spans" / "dt=2026-01-01" / "part-old.parquet")
    rows = query(tmp_path, "trace_id, is_orphan, dt")
    assert len(rows) == 10
    assert {r[1] for r in rows if r[0] == f"{2:032x}"} == {None}
    assert {r[1] for r in rows if r[0] == f"{1:032x}"} == {False}
    assert {str(r[2]) for r in rows} == {"2026-01-01"}


def test_a_trace_lands_in_the_partition_of_its_start_day(tmp_path: Path) -> None:
    late_evening = JAN_1 + DAY - 2 * 10**9
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(spans_table(1, count=4, start=late_evening, step=10**9))  # runs past midnight
        writer.write_spans(spans_table(2, start=JAN_1 + DAY))
    days = dict(query(tmp_path, "trace_id, list(DISTINCT dt::VARCHAR)", tail="GROUP BY trace_id"))
    assert days == {f"{1:032x}": ["2026-01-01"], f"{2:032x}": ["2026-01-02"]}


def test_the_tables_of_one_row_per_trace_are_cut_into_row_groups_every_core_can_read(tmp_path: Path) -> None:
    from tailcut.exporters._writer import PER_TRACE_ROW_GROUP_ROWS

    traces = PER_TRACE_ROW_GROUP_ROWS + 5
    spans = pa.concat_tables([spans_table(trace, count=1) for trace in range(1, traces + 1)])
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(spans)
        writer.write_traces(trace_rows(spans, kept=True, decision_reason="embedded"))
    (spans_file,) = parts(tmp_path)
    assert pq.ParquetFile(spans_file).metadata.num_row_groups == 1
    for table in ("traces", "trace_features"):
        (path,) = parts(tmp_path, table)
        groups = pq.ParquetFile(path).metadata
        assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [
            PER_TRACE_ROW_GROUP_ROWS,
            5,
        ], table


@pytest.mark.parametrize("table", sorted(schema.TABLES))
def test_the_column_paths_the_encodings_name_are_those_pyarrow_writes(tmp_path: Path, table: str) -> None:
    from tailcut.exporters._writer import leaf_paths

    pq.write_table(schema.TABLES[table].empty_table(), tmp_path / "empty.parquet")
    written = pq.ParquetFile(tmp_path / "empty.parquet").metadata.schema
    assert leaf_paths(schema.TABLES[table]) == [written.column(i).path for i in range(len(written))]


def test_the_ids_of_the_per_trace_tables_are_lz4_without_a_dictionary_and_the_rest_zstd(
    tmp_path: Path,
) -> None:
    spans = pa.concat_tables([spans_table(trace) for trace in range(1, 40)])
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(spans)
        writer.write_traces(trace_rows(spans, kept=True, decision_reason="embedded"))
    for table, ids in (("traces", {"trace_id"}), ("trace_features", {"trace_id", "root_span_id"})):
        (path,) = parts(tmp_path, table)
        group = pq.ParquetFile(path).metadata.row_group(0)
        columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
        for name in ids:
            assert columns[name].compression in ("LZ4", "LZ4_RAW"), (table, name)
            assert "RLE_DICTIONARY" not in columns[name].encodings, (table, name)
        assert columns["span_count"].compression == "ZSTD"
    (spans_file,) = parts(tmp_path)
    group = pq.ParquetFile(spans_file).metadata.row_group(0)
    assert {group.column(i).compression for i in range(group.num_columns)} == {"ZSTD"}
    assert query(tmp_path, "count(*)", "trace_features") == [(39,)]


def test_rows_are_sorted_by_trace_then_span_index_within_a_row_group(tmp_path: Path) -> None:
    with DataDirWriter(tmp_path, row_group_rows=12) as writer:
        for trace in (9, 3, 7, 1):
            writer.write_spans(spans_table(trace))
    (path,) = parts(tmp_path)
    file = pq.ParquetFile(path)
    assert file.metadata.num_row_groups == 2  # 15 rows buffered, then the last 5
    first = file.read_row_group(0).select(["trace_id", "span_index"]).to_pylist()
    assert first == sorted(first, key=lambda r: (r["trace_id"], r["span_index"]))
    assert [r["trace_id"][-1] for r in first[::5]] == ["3", "7", "9"]


def test_files_roll_by_size_and_by_age(tmp_path: Path) -> None:
    writer = DataDirWriter(tmp_path, roll_bytes=1, row_group_rows=1, roll_seconds=3600)
    writer.write_spans(spans_table(1))
    writer.write_spans(spans_table(2))
    writer.flush()
    assert len(parts(tmp_path)) == 2  # each row group filled a file past 1 byte
    aged = DataDirWriter(tmp_path, roll_seconds=0.05)
    aged.write_spans(spans_table(3))
    assert len(parts(tmp_path)) == 2  # buffered: not visible yet
    time.sleep(0.1)
    aged.flush_if_due()
    aged.flush()  # waits for the background writer
    assert len(parts(tmp_path)) == 3
    writer.close()
    aged.close()


def test_writes_from_many_threads(tmp_path: Path) -> None:
    writer = DataDirWriter(tmp_path, row_group_rows=50)

    def work(base: int) -> None:
        for trace in range(base, base + 20):
            writer.write_spans(spans_table(trace))

    threads = [threading.Thread(target=work, args=(k * 100 + 1,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    assert query(tmp_path, "count(*), count(DISTINCT trace_id)") == [(400, 80)]


def test_closed_writer_and_unwritable_dir_raise_clear_errors(tmp_path: Path) -> None:
    writer = DataDirWriter(tmp_path)
    writer.close()
    with pytest.raises(DataDirError, match="closed"):
        writer.write_spans(spans_table(1))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DataDirError, match="cannot use data dir"):
        DataDirWriter(blocker)
    with pytest.raises(DataDirError, match="do not match"):
        DataDirWriter(tmp_path / "d").write_spans(pa.table({"x": [1]}))


WRITER_SCRIPT = textwrap.dedent(
    """
    import sys
    from tailcut.exporters import DataDirWriter
    sys.path.insert(0, sys.argv[2])
    from test_exporters_writer import spans_table
    writer = DataDirWriter(sys.argv[1], roll_bytes=40_000, row_group_rows=200, background=False)
    trace = 1
    while True:
        writer.write_spans(spans_table(trace, count=20))
        trace += 1
    """
)


def test_a_writer_killed_mid_write_leaves_a_readable_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    process = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(data), str(Path(__file__).parent)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # kill it while a file is being written, after some were published
            if len(parts(data)) >= 2 and list(data.glob("spans/dt=*/.part-*.tmp")):
                break
            time.sleep(0.005)
        else:
            pytest.fail("the writer never got going")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert list(data.glob("spans/dt=*/.part-*.tmp"))  # it died mid-file
    [(count, traces)] = query(data, "count(*), count(DISTINCT trace_id)")
    assert count > 0 and count == traces * 20  # only whole files, each holding whole traces
    for path in parts(data):
        assert pq.read_metadata(path).num_rows > 0
    DataDirWriter(data).close()  # the next writer to open the data dir removes the dead writer's file
    assert not list(data.glob("spans/dt=*/.part-*.tmp"))
    assert query(data, "count(*)") == [(count,)]


def bad_payload_table() -> pa.Table:
    """One tool span whose payloads are not JSON (as a buggy instrumentation could send)."""
    record = SpanRecord(
        "c" * 32,
        "0000000000000001",
        None,
        "tool t",
        "INTERNAL",
        JAN_1,
        JAN_1 + 1,
        "UNSET",
        None,
        {
            "tailcut.kind": "tool",
            "tailcut.request": '{"cut": "in the mid',
            "tailcut.response": "NaN x",
            "tailcut.request.sha256": "0" * 64,
        },
        (),
        (),
        EMPTY_RESOURCE,
        None,
    )
    return normalize(DecodedSpans.from_records([record]))


def test_a_payload_that_is_not_json_cannot_make_a_file_unreadable(tmp_path: Path) -> None:
    table = bad_payload_table()
    assert table.column("request").to_pylist() == ['{"cut": "in the mid']  # verbatim until written
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(table)
    rows = query(tmp_path, "request::VARCHAR, response::VARCHAR, request_sha256, request->>'$'")
    assert rows == [('"{\\"cut\\": \\"in the mid"', '"NaN x"', "0" * 64, '{"cut": "in the mid')]


def test_the_background_writer_writes_exactly_what_writing_inline_does(tmp_path: Path) -> None:
    """Batches are checked as they arrive and sorted into row groups on the writer thread."""
    tables = [spans_table(9), bad_payload_table(), spans_table(3), spans_table(7), spans_table(1)]
    files = {}
    for background in (True, False):
        with DataDirWriter(tmp_path / str(background), row_group_rows=12, background=background) as writer:
            for table in tables:
                writer.write_spans(table)
        (path,) = parts(tmp_path / str(background))
        files[background] = pq.ParquetFile(path)
    assert [files[b].metadata.num_row_groups for b in (True, False)] == [2, 2]  # 16 rows, then 5
    assert files[True].read().equals(files[False].read())
    first = files[True].read_row_group(0).select(["trace_id", "span_index", "request"]).to_pylist()
    starts = [(r["trace_id"][-1], r["span_index"]) for r in first][::5]
    assert starts == [("3", 0), ("7", 0), ("9", 0), ("c", 0)]
    assert first[-1]["request"] == '"{\\"cut\\": \\"in the mid"'  # made readable JSON, in its sorted place


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.text(max_size=40)), max_size=12),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([1, _row_order.SLICE_BYTES, 10**9]),
)
def test_a_row_group_is_sorted_exactly_as_sort_by_sorts_it(
    batches: list[list[tuple]], slice_bytes: int
) -> None:
    """Sliced runs (large columns) and gathered columns give the rows ``Table.sort_by`` gives.

    Batches come sorted, like the normaliser's, or not; runs may end at a batch's end or cross into the
    next batch's first row, which must start a new slice.
    """
    columns = pa.schema({"trace_id": pa.string(), "span_index": pa.int64(), "payload": pa.string()})
    tables = [
        pa.table(
            [[f"{k:02d}" for k, _ in rows], list(range(len(rows))), [text for _, text in rows]],
            schema=columns,
        )
        for rows in batches
    ]
    table = pa.concat_tables(tables)
    keys = [("trace_id", "ascending"), ("span_index", "ascending")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_row_order, "SLICE_BYTES", slice_bytes)
        ordered = _row_order.sort_rows(table, keys)
    assert ordered.equals(table.sort_by(keys))
    assert ordered.schema == table.schema
