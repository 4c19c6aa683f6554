"""The Parquet writer: atomic files, schema, partitions, rolling, crash safety and concurrency."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.analysis._features_worker import FeatureHook
from tailcut.canonical import canonical_json
from tailcut.exporters import DataDirError, DataDirWriter, _row_order, schema
from tailcut.exporters._batch import EMPTY_RESOURCE, DecodedSpans, SpanRecord
from tailcut.exporters._hooks import WriterHook
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
    with DataDirWriter(tmp_path, hooks=[FeatureHook()]) as writer:
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
    with DataDirWriter(tmp_path, hooks=[FeatureHook()]) as writer:
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


class Recorder(WriterHook):
    """Notes every callback a writer makes (the events and the rows or files each brought)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_write(self, writer, rows) -> None:
        self.events.append(("write", {name: table.num_rows for name, table in rows.items()}))

    def before_flush(self, writer) -> None:
        self.events.append(("flush", None))

    def on_publish(self, writer, files) -> None:
        self.events.append(("publish", sorted((f.table, f.path) for f in files)))

    def on_close(self, writer, *, aborted) -> None:
        self.events.append(("close", aborted))


def published_files(data: Path) -> list[tuple[str, str]]:
    return sorted((p.parts[-3], p.relative_to(data).as_posix()) for p in data.glob("*/dt=*/*.parquet"))


def test_hooks_hear_each_write_then_every_file_published_then_the_close(tmp_path: Path) -> None:
    hook = Recorder()
    with DataDirWriter(tmp_path, hooks=[hook]) as writer:
        table = spans_table(1)
        writer.write_spans(table)
        writer.write_traces(trace_rows(table, kept=True, decision_reason="embedded"))
        assert [event for event, _ in hook.events] == ["write", "write"]  # nothing published yet
    events = [event for event, _ in hook.events]
    assert events == ["write", "write", "flush", "publish", "close"]
    assert hook.events[0][1] == {"spans": 5, "pieces": 0}
    assert hook.events[1][1] == {"traces": 1}
    assert hook.events[3][1] == published_files(tmp_path) and len(published_files(tmp_path)) == 2
    assert hook.events[-1] == ("close", False)


def test_a_hook_may_write_rows_of_its_own_and_they_are_published_with_the_spans(tmp_path: Path) -> None:
    class Counts(WriterHook):
        """Writes one trace_checks row per trace before each flush (as the features hook does)."""

        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_write(self, writer, rows) -> None:
            if "spans" in rows:
                self.seen += sorted(set(rows["spans"]["trace_id"].to_pylist()))

        def before_flush(self, writer) -> None:
            start = datetime.fromtimestamp(JAN_1 / 10**9, UTC)
            rows = [{"trace_id": t, "start_time": start} for t in self.seen]
            writer.write_table("trace_checks", pa.Table.from_pylist(rows, schema=schema.TRACE_CHECKS))
            self.seen = []

    with DataDirWriter(tmp_path, hooks=[Counts()]) as writer:
        writer.write_spans(pa.concat_tables([spans_table(2), spans_table(1)]))
    assert query(tmp_path, "trace_id", "trace_checks", "ORDER BY 1") == [(f"{1:032x}",), (f"{2:032x}",)]
    with pytest.raises(ValueError, match="write_table takes"):
        DataDirWriter(tmp_path / "other").write_table("spans", spans_table(1))


def test_a_failing_hook_never_fails_the_write(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(WriterHook):
        def on_write(self, writer, rows) -> None:
            raise RuntimeError("the hook is broken")

    after = Recorder()
    with DataDirWriter(tmp_path, hooks=[Broken(), after]) as writer:
        writer.write_spans(spans_table(1))
    assert query(tmp_path, "count(*)") == [(5,)]
    assert [event for event, _ in after.events] == ["write", "flush", "publish", "close"]
    assert "writer hook Broken.on_write failed" in caplog.text


def test_an_aborted_writer_closes_its_hooks_without_publishing(tmp_path: Path) -> None:
    hook = Recorder()
    writer = DataDirWriter(tmp_path, hooks=[hook])
    writer.write_spans(spans_table(1))
    writer.abort()
    writer.abort()  # once only
    assert hook.events == [("write", {"spans": 5, "pieces": 0}), ("close", True)]
    assert published_files(tmp_path) == []


def test_the_writer_alone_computes_no_features(tmp_path: Path) -> None:
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(spans_table(1))
    assert parts(tmp_path) and not parts(tmp_path, "trace_features") and not parts(tmp_path, "trace_checks")


EMBEDDED = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tailcut.exporters import ParquetSpanExporter

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(sys.argv[1], root_grace=0.0)))
tracer = provider.get_tracer("embedded")
for run in range(3):
    with tracer.start_as_current_span("run", attributes={"tailcut.kind": "root"}):
        with tracer.start_as_current_span("lookup", attributes={"tailcut.kind": "tool"}):
            pass
provider.shutdown()
print(",".join(sorted(name for name in ("duckdb", "polars") if name in sys.modules)) or "none")
"""


def test_the_embedded_exporter_never_imports_duckdb_into_the_agent(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", EMBEDDED, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["none"], result.stdout
    assert query(tmp_path, "count(*), count(DISTINCT trace_id)") == [(6, 3)]
    assert query(tmp_path, "count(*)", "traces") == [(3,)]
    assert not parts(tmp_path, "trace_features")


def test_ingest_writes_the_features_and_the_findings(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tailcut.cli import cli

    fixture = Path(__file__).parent / "fixtures" / "otlp" / "tailcut_sdk.json"
    data = tmp_path / "data"
    result = CliRunner().invoke(cli, ["ingest", str(fixture), "--data", str(data)])
    assert result.exit_code == 0, result.output
    traces = query(data, "count(DISTINCT trace_id)")
    assert traces[0][0] > 0
    assert query(data, "count(DISTINCT trace_id)", "trace_features") == traces
    assert list((data / "findings").glob("*.parquet"))


def test_a_collector_writes_the_features_of_the_traces_it_keeps(tmp_path: Path) -> None:
    from tests.test_collector_helpers import export_request, post, simple_trace, start_collector

    keep_errors = [{"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}}]
    collector = start_collector(tmp_path, policies=keep_errors)
    try:
        for index in range(4):
            request = export_request(simple_trace(bytes([index + 1]) * 16, error=index < 2))
            assert post(collector.ports.http, request)[0] == 200
        assert collector.wait_idle(30)
    finally:
        collector.stop()
    data = tmp_path / "data"
    kept = [(f"{i:02x}" * 16,) for i in (1, 2)]
    assert query(data, "DISTINCT trace_id", tail="ORDER BY 1") == kept
    assert query(data, "trace_id", "trace_features", "ORDER BY 1") == kept
    assert query(data, "count(*)", "traces") == [(4,)]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet='[]{}",:0123456789.eE+-tfrunlasNIaiy \\/ubd\t\n', max_size=30),
        st.recursive(
            st.none()
            | st.booleans()
            | st.floats(allow_nan=False)
            | st.integers(-(2**63), 2**64 - 1)
            | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
            max_leaves=8,
        ).map(lambda value: orjson.dumps(value).decode()),
    )
)
def test_every_payload_the_writer_keeps_as_json_is_json_to_duckdb(text: str) -> None:
    from tailcut.exporters._json_columns import readable_json

    column = pa.ExtensionArray.from_storage(pa.json_(), pa.array([text], pa.string()))
    (kept,) = readable_json(pa.table({"payload": column})).column("payload").chunk(0).storage.to_pylist()
    assert kept in (text, canonical_json(text))
    assert duckdb.execute("SELECT json_valid(?)", [kept]).fetchall() == [(True,)]
