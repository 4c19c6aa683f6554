"""Append ``spans`` and ``traces`` rows to a data dir as Parquet, partitioned by day, never half-visible.

Layout (DESIGN.md section 4): ``DATA/spans/dt=YYYY-MM-DD/part-<uuid7>.parquet`` and the same under
``traces/``. The day is the trace's start in UTC, so all the spans of a trace written together land in one
partition. Rows are buffered per partition and written as row groups of about ``row_group_rows`` rows,
each sorted by ``trace_id`` then ``span_index`` (a trace written in one call stays in one row group); a file
is closed and published once it reaches ``roll_bytes`` or its oldest row is ``roll_seconds`` old (checked
on every write and by :meth:`DataDirWriter.flush_if_due`, which a caller with no writes for a while should
call periodically). Files are zstd-compressed, carry the schema version in their metadata and appear
atomically (:mod:`tailcut._atomic`). The data dir may be an ``s3://bucket/prefix`` URL (:mod:`._location`):
files are then written in a local staging directory and each is uploaded whole when it is published, so
the object store only ever holds finished files. JSON columns are checked so one bad value cannot make a
file unreadable (:mod:`._json_columns`).

Encoding and compressing a row group is the expensive part and releases the GIL, so by default it runs on
one background thread while the caller goes on normalising the next batch; at most two row groups wait for
it (the caller blocks beyond that). That thread also checks each written batch's JSON columns as the batch
arrives, while it would otherwise wait for a row group to fill, so the last row group (written when the
writer is flushed or closed, with the caller waiting) costs only its sort and encoding. A failure there is
raised by the caller's next call.

The writer computes nothing from the rows it stores: whoever owns it passes post-write hooks
(:mod:`._hooks`), called back after each write and publish, so the owner decides what analysis work runs
where (the collector and ``tailcut ingest`` wire in the classifier's per-trace features and the findings
refresh; the agent's in-process exporter wires in none, and runs no DuckDB).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tailcut._atomic import publish, stale_temporaries, temporary_name
from tailcut.exporters import schema
from tailcut.exporters._errors import DataDirError
from tailcut.exporters._hooks import Published, WriterHook
from tailcut.exporters._json_columns import readable_json
from tailcut.exporters._location import Location, location
from tailcut.exporters._part_names import part_name
from tailcut.exporters._pieces import drop_carriers, piece_days, take_pieces
from tailcut.exporters._row_order import sort_rows

_logger = logging.getLogger("tailcut.exporters")
DEFAULT_ROLL_BYTES: Final = 128 * 1024 * 1024
DEFAULT_ROLL_SECONDS: Final = 60.0
DEFAULT_ROW_GROUP_ROWS: Final = 100_000
#: A partition's buffered rows go to its open file as a row group once they take this many bytes in
#: memory, whatever their count: a writer holds at most about this much per table and day between
#: publishes (large payloads would otherwise wait in memory until ``row_group_rows`` of them arrived).
ROW_GROUP_BYTES: Final = 8 * 1024 * 1024
_DAY_US: Final = 86_400 * 10**6  # schema.TIMESTAMP is in microseconds
_SORT_KEYS: Final = {
    "spans": [("trace_id", "ascending"), ("span_index", "ascending")],
    "traces": [("trace_id", "ascending")],
    "pieces": [("trace_id", "ascending")],
    "trace_features": [("trace_id", "ascending")],
    "trace_checks": [("trace_id", "ascending")],
}
#: The tables of one row per trace, cut into row groups of at most :data:`PER_TRACE_ROW_GROUP_ROWS` rows
#: when written: a trace has many spans, so a spans-sized row group of them would be read by one thread,
#: where the classifier and the reports read these tables whole, on every core.
_PER_TRACE_TABLES: Final = frozenset({"traces", "trace_features", "trace_checks"})
PER_TRACE_ROW_GROUP_ROWS: Final = 8192


def leaf_paths(fields: Iterable[pa.Field], prefix: str = "") -> list[str]:
    """The Parquet column paths of ``fields`` as pyarrow writes them (``heavy.list.element.span_id``).

    >>> heavy = pa.field("heavy", pa.list_(pa.struct([("span_id", pa.string())])))
    >>> leaf_paths([heavy, pa.field("n", pa.int32())])
    ['heavy.list.element.span_id', 'n']
    """
    paths = []
    for column in fields:
        path, kind = f"{prefix}{column.name}", column.type
        if pa.types.is_struct(kind):
            paths += leaf_paths(kind, f"{path}.")
        elif pa.types.is_list(kind):
            paths += leaf_paths([kind.value_field.with_name("element")], f"{path}.list.")
        elif pa.types.is_map(kind):
            paths += leaf_paths([kind.key_field, kind.item_field], f"{path}.key_value.")
        else:
            paths.append(path)
    return paths


def file_options(name: str, level: int | None = None) -> dict[str, Any]:
    """How the files of table ``name`` are encoded: zstd (at ``level``, default the library's), with
    dictionaries where pyarrow finds them worth it.

    In the per-trace tables the trace and span ids (``trace_id``, ``root_span_id``, ``heavy``'s
    ``span_id``...) are written LZ4-compressed and without a dictionary instead. Each id occurs once, so a
    dictionary is built only to be given up, and the classifier reads these columns in most of its
    statements: decoding them from zstd took about a tenth of a classification's time (issue 15), for 12%
    (``traces``) to 27% (``trace_features``) more bytes in these small tables. The spans table, the large
    one, keeps zstd throughout.

    >>> file_options("spans", 3)
    {'compression': 'zstd', 'compression_level': 3}
    >>> options = file_options("traces")
    >>> options["compression"]["trace_id"], options["compression"]["duration_ms"]
    ('lz4', 'zstd')
    >>> "trace_id" in options["use_dictionary"], "agent_name" in options["use_dictionary"]
    (False, True)
    >>> levels = file_options("trace_features", 3)["compression_level"]
    >>> levels["span_count"], "heavy.list.element.span_id" in levels
    (3, False)
    """
    if name not in _PER_TRACE_TABLES:
        return {"compression": "zstd", "compression_level": level}
    paths = leaf_paths(schema.TABLES[name])
    ids = {path for path in paths if path.endswith(("trace_id", "span_id"))}
    return {
        "compression": {path: "lz4" if path in ids else "zstd" for path in paths},
        "compression_level": None if level is None else {path: level for path in paths if path not in ids},
        "use_dictionary": [path for path in paths if path not in ids],
    }


@dataclass
class _Partition:
    """One table's rows for one day: the rows not yet written, and the file being written (writer thread)."""

    name: str
    directory: Path
    #: rows written to the partition since its last row group, and their bytes in memory (caller side)
    buffered_rows: int = 0
    buffered_bytes: int = 0
    #: those rows once their JSON columns are checked, waiting for the row group (writer thread)
    checked: list[pa.Table] = field(default_factory=list)
    #: monotonic time of the oldest row not yet published (buffered or in the open file)
    oldest: float | None = None
    writer: pq.ParquetWriter | None = None
    temporary: Path | None = None
    final: Path | None = None


class _Worker:
    """Runs jobs in order on one thread; remembers the first failure.

    Row-group jobs are bounded: :meth:`submit` blocks while two wait. Other jobs (checking one batch) queue
    freely: the rows they hold are bounded by the row group they will join.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], None], bool] | None] = queue.Queue()
        self._row_group_slots = threading.Semaphore(2)
        self.failure: DataDirError | None = None
        self._thread = threading.Thread(target=self._run, name="tailcut-parquet-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                self._jobs.task_done()
                return
            job, is_row_group = item
            try:
                if self.failure is None:
                    job()
            except DataDirError as exc:
                self.failure = exc
            except Exception as exc:  # a bug must not end the thread: the caller would wait for it forever
                self.failure = DataDirError(f"the Parquet writer thread failed: {exc!r}")
            finally:
                if is_row_group:
                    self._row_group_slots.release()
                self._jobs.task_done()

    def submit(self, job: Callable[[], None], *, row_group: bool) -> None:
        if row_group:
            self._row_group_slots.acquire()
        self._jobs.put((job, row_group))

    def wait(self) -> None:
        self._jobs.join()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()


class DataDirWriter:
    """Writes ``spans`` and ``traces`` tables into a data dir (thread-safe).

    Parameters
    ----------
    data_dir
        The data dir, a path or an ``s3://bucket/prefix`` URL; created if missing. Temporary files left
        by a crashed writer are removed (a remote data dir's temporary files are in a local staging
        directory of their own, removed on close).
    roll_bytes
        Close a file once it is this large.
    roll_seconds
        Publish rows at most this long after they were written (closing the file they are in).
    row_group_rows
        Rows per Parquet row group (written once this many are buffered for a partition).
    compression_level
        zstd level (default: the library's; see :func:`file_options`).
    background
        Encode row groups on a background thread (default), overlapping with the caller's work.
    before_publish
        Called with each finished file's table name and final path (relative to the data dir) just
        before the file appears there; if it raises, the file is not published (its rows are lost and the
        error is raised like a write error). The collector logs the name in its write-ahead log first.
    hooks
        Work to run after the writes (:class:`~tailcut.exporters._hooks.WriterHook`), such as the
        per-trace features of the classifier; the writer owns them from here on (it closes them).

    Raises
    ------
    DataDirError
        If the data dir cannot be created or written.

    Examples
    --------
    ::

        with DataDirWriter("data") as writer:
            writer.write_spans(normalize_otlp(request.resource_spans))
            writer.write_traces([traces_row(signals, kept=True, decision_reason="embedded", ...)])
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        roll_seconds: float = DEFAULT_ROLL_SECONDS,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        compression_level: int | None = None,
        background: bool = True,
        before_publish: Callable[[str, str], None] | None = None,
        hooks: Sequence[WriterHook] = (),
    ) -> None:
        if roll_bytes < 1 or roll_seconds <= 0 or row_group_rows < 1:
            raise ValueError("roll_bytes, roll_seconds and row_group_rows must be positive")
        self.location = location(data_dir)
        self._remote: Location | None = self.location if self.location.remote else None
        #: where files are written: the data dir itself, or the local staging directory of a remote one
        self.root = (
            self.location.local_path() if self._remote is None else Path(tempfile.mkdtemp(prefix="tailcut-"))
        )
        self.roll_bytes = roll_bytes
        self.roll_seconds = roll_seconds
        self.row_group_rows = row_group_rows
        self.compression_level = compression_level
        self._before_publish = before_publish
        self.hooks: tuple[WriterHook, ...] = tuple(hooks)
        #: files published and not yet reported to the hooks (appended by the writer thread)
        self._published: list[Published] = []
        self._published_lock = threading.Lock()
        self._lock = threading.RLock()
        self._partitions: dict[tuple[str, str], _Partition] = {}
        self._closed = False
        try:
            for table in schema.TABLES:
                if table in _SORT_KEYS:
                    (self.root / table).mkdir(parents=True, exist_ok=True)
            for stale in stale_temporaries(self.root, "*/dt=*/.part-*.tmp"):
                stale.unlink(missing_ok=True)
        except OSError as exc:
            raise DataDirError(f"cannot use data dir {self.location}: {exc.strerror or exc}") from None
        self._worker = _Worker() if background else None

    # --- public ------------------------------------------------------------------------------------------
    def write_spans(self, table: pa.Table) -> None:
        """Add ``spans`` rows (a table with the :data:`~tailcut.exporters.schema.SPANS` schema).

        The request pieces the spans carry become ``pieces`` rows in the same day partitions; carrier
        spans (``tailcut._carriers``) give their pieces and no ``spans`` row.
        """
        table, pieces = take_pieces(_conform("spans", table))
        days = _trace_days(table)
        pieces_days = piece_days(pieces, table, days) if pieces.num_rows else None
        table, kept = drop_carriers(table)
        if kept is not None:
            days = days[kept]
        self._write("spans", table, days)
        if pieces_days is not None:
            self._write("pieces", pieces, pieces_days)
        self._after_write({"spans": table, "pieces": pieces})

    def write_traces(self, rows: pa.Table | Sequence[Mapping[str, Any]]) -> None:
        """Add ``traces`` rows: a table with the ``TRACES`` schema, or row dicts (times as ns integers,
        :func:`~tailcut.exporters.schema.nanosecond_fields`)."""
        table = _conform("traces", rows if isinstance(rows, pa.Table) else schema.from_rows("traces", rows))
        start = pc.coalesce(table.column("start_time"), table.column("decided_at"))
        days = np.floor_divide(start.cast(pa.int64()).to_numpy(), _DAY_US)
        self._write("traces", table, days)
        self._after_write({"traces": table})

    def write_table(self, name: str, table: pa.Table) -> None:
        """Add rows to another table of one row per trace (``trace_features``, ``trace_checks``: what a
        hook computes), partitioned by their ``start_time``."""
        if name not in _PER_TRACE_TABLES or name == "traces":
            raise ValueError(f"write_table takes {sorted(_PER_TRACE_TABLES - {'traces'})}, not {name!r}")
        table = _conform(name, table)
        days = np.floor_divide(table.column("start_time").cast(pa.int64()).to_numpy(), _DAY_US)
        self._write(name, table, days)
        self._after_write({name: table})

    def flush_if_due(self) -> None:
        """Publish every partition whose oldest unpublished row is ``roll_seconds`` old."""
        with self._lock:
            self._raise_failure()
            self._publish_due()
        self._report_published()

    def flush(self) -> None:
        """Write and publish everything written so far (returns once it is on disk)."""
        with self._lock:
            self._raise_failure()
            if not self._closed:
                self._call_hooks("before_flush")
            for key, partition in list(self._partitions.items()):
                self._publish(key, partition)
            if self._worker is not None:
                self._worker.wait()
            self._raise_failure()
        self._report_published()

    def close(self) -> None:
        """Flush everything and stop accepting rows (idempotent); the hooks are closed last."""
        with self._lock:
            if self._closed:
                return
            try:
                self._call_hooks("before_flush")
            finally:
                self._closed = True
            try:
                self.flush()
            finally:
                if self._worker is not None:
                    self._worker.stop()
                if self._remote is not None:
                    shutil.rmtree(self.root, ignore_errors=True)
                self._call_hooks("on_close", aborted=False)

    def abort(self) -> None:
        """Stop at once without publishing anything: files being written are deleted (after an I/O error).

        Rows not yet published are lost; the caller still holds them elsewhere (the write-ahead log).
        """
        with self._lock:
            was_closed, self._closed = self._closed, True
            if self._worker is not None:
                self._worker.failure = self._worker.failure or DataDirError("the writer was aborted")
                self._worker.stop()
            for partition in self._partitions.values():
                self._abandon(partition)
            self._partitions.clear()
            if not was_closed:
                self._call_hooks("on_close", aborted=True)

    def __enter__(self) -> DataDirWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- internals ---------------------------------------------------------------------------------------
    def _after_write(self, rows: Mapping[str, pa.Table]) -> None:
        self._call_hooks("on_write", rows)
        self._report_published()

    def _report_published(self) -> None:
        """Tell the hooks which files appeared since the last report (on the caller's thread)."""
        if not self.hooks:
            return
        with self._published_lock:
            files, self._published = self._published, []
        if files:
            self._call_hooks("on_publish", files)

    def _call_hooks(self, callback: str, *args: Any, **kwargs: Any) -> None:
        """Run one callback of every hook; a hook's failure is logged, never raised (the rows are stored)."""
        for hook in self.hooks:
            try:
                getattr(hook, callback)(self, *args, **kwargs)
            except Exception as exc:
                _logger.warning("writer hook %s.%s failed: %r", type(hook).__name__, callback, exc)

    def _write(self, name: str, table: pa.Table, days: np.ndarray) -> None:
        if table.num_rows == 0:
            return
        with self._lock:
            if self._closed:
                raise DataDirError(f"the writer for {self.location} is closed")
            self._raise_failure()
            for day in np.unique(days).tolist():
                part = table if len(days) and (days == day).all() else table.filter(pa.array(days == day))
                self._append(name, _day_name(day), part)
            self._publish_due()

    def _publish_due(self) -> None:
        now = time.monotonic()
        for key, partition in list(self._partitions.items()):
            if partition.oldest is not None and now - partition.oldest >= self.roll_seconds:
                self._publish(key, partition)

    def _append(self, name: str, day: str, table: pa.Table) -> None:
        key = (name, day)
        partition = self._partitions.get(key)
        if partition is None:
            partition = self._partitions[key] = _Partition(name, self.root / name / f"dt={day}")
        partition.buffered_rows += table.num_rows
        partition.buffered_bytes += table.nbytes
        if partition.oldest is None:
            partition.oldest = time.monotonic()

        def check() -> None:
            partition.checked.append(readable_json(table))

        self._run(check, row_group=False)
        if partition.buffered_rows >= self.row_group_rows or partition.buffered_bytes >= ROW_GROUP_BYTES:
            self._submit_row_group(partition, close=False)

    def _publish(self, key: tuple[str, str], partition: _Partition) -> None:
        """Write what is buffered and close the partition's file (a new one opens on the next rows)."""
        self._submit_row_group(partition, close=True)
        del self._partitions[key]

    def _submit_row_group(self, partition: _Partition, *, close: bool) -> None:
        partition.buffered_rows = partition.buffered_bytes = 0
        if close:
            partition.oldest = None

        def write() -> None:
            rows = pa.concat_tables(partition.checked) if partition.checked else None
            partition.checked = []
            self._write_row_group(partition, rows, close=close)

        self._run(write, row_group=True)

    def _run(self, job: Callable[[], None], *, row_group: bool) -> None:
        """Run ``job`` on the writer thread (after the jobs before it), or now without one."""
        if self._worker is None:
            job()
        else:
            self._worker.submit(job, row_group=row_group)

    def _raise_failure(self) -> None:
        if self._worker is not None and self._worker.failure is not None:
            raise self._worker.failure

    # --- on the writer thread ------------------------------------------------------------------------------
    def _write_row_group(self, partition: _Partition, rows: pa.Table | None, *, close: bool) -> None:
        try:
            if rows is not None and rows.num_rows:
                if len(rows.column("trace_id").chunks) > 1 or not _is_sorted(rows, partition.name):
                    rows = sort_rows(rows, _SORT_KEYS[partition.name])
                if partition.writer is None:
                    self._open_file(partition)
                assert partition.writer is not None and partition.temporary is not None
                group = rows.num_rows
                if partition.name in _PER_TRACE_TABLES:
                    group = min(group, PER_TRACE_ROW_GROUP_ROWS)
                partition.writer.write_table(rows, row_group_size=group)
                if partition.temporary.stat().st_size >= self.roll_bytes:
                    close = True
            if close and partition.writer is not None:
                partition.writer.close()
                assert partition.temporary is not None and partition.final is not None
                if self._before_publish is not None:
                    self._before_publish(partition.name, partition.final.relative_to(self.root).as_posix())
                self._publish_file(partition.temporary, partition.final)
                if self.hooks:
                    relative = partition.final.relative_to(self.root).as_posix()
                    with self._published_lock:
                        self._published.append(Published(partition.name, relative))
                partition.writer = partition.temporary = partition.final = None
        except OSError as exc:
            self._abandon(partition)
            where = self.location.child(*partition.directory.relative_to(self.root).parts)
            raise DataDirError(f"cannot write {where}: {exc.strerror or exc}") from None
        except Exception:
            self._abandon(partition)
            raise

    def _publish_file(self, temporary: Path, final: Path) -> None:
        """Make a finished file visible: renamed in place, or uploaded whole to the remote data dir."""
        if self._remote is None:
            publish(temporary, final)
            return
        self._remote.upload(temporary, final.relative_to(self.root).as_posix())
        temporary.unlink()

    def _open_file(self, partition: _Partition) -> None:
        partition.directory.mkdir(parents=True, exist_ok=True)
        partition.final = partition.directory / part_name()
        partition.temporary = temporary_name(partition.final)
        partition.writer = pq.ParquetWriter(
            str(partition.temporary),
            schema.TABLES[partition.name],
            **file_options(partition.name, self.compression_level),
        )

    def _abandon(self, partition: _Partition) -> None:
        """Drop a file that failed mid-write (its rows are lost; the caller gets the error)."""
        if partition.writer is not None:
            try:
                partition.writer.close()
            except (OSError, pa.ArrowException):
                pass
        if partition.temporary is not None:
            with contextlib.suppress(OSError):  # its directory may be gone: the next writer's cleanup
                partition.temporary.unlink()
        partition.writer = partition.temporary = partition.final = None


def _conform(name: str, table: pa.Table) -> pa.Table:
    """``table`` with exactly the table's schema (columns in order, types cast), or a DataDirError."""
    expected = schema.TABLES[name]
    if table.schema.equals(expected, check_metadata=True):
        return table
    try:
        return table.select(expected.names).cast(expected)
    except (KeyError, ValueError, pa.ArrowInvalid) as exc:
        raise DataDirError(f"rows for the {name} table do not match its schema: {exc}") from None


def _trace_days(table: pa.Table) -> np.ndarray:
    """Per row, the UTC day (days since the epoch) its trace started: the earliest start among its rows."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    trace = pc.dictionary_encode(table.column("trace_id")).combine_chunks().indices.to_numpy()
    start = table.column("start_time").cast(pa.int64()).to_numpy()  # microseconds
    earliest = np.full(int(trace.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(earliest, trace, start)
    return np.floor_divide(earliest[trace], _DAY_US)


def _day_name(day: int) -> str:
    return datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")


def _is_sorted(table: pa.Table, name: str) -> bool:
    """Whether a single-chunk table is already in storage order (``normalize`` output is)."""
    ids = table.column("trace_id").chunk(0)
    if len(ids) < 2:
        return True
    previous, following = ids.slice(0, len(ids) - 1), ids.slice(1)
    if not pc.all(pc.less_equal(previous, following)).as_py():
        return False
    if name != "spans":
        return True
    index = table.column("span_index").chunk(0).to_numpy()
    same = pc.equal(previous, following).to_numpy(zero_copy_only=False)
    return bool((index[1:][same] > index[:-1][same]).all())
