"""Where a data dir's Parquet files are, and the DuckDB views that read them whatever their age.

A data dir is local (a path) or remote (``s3://bucket/prefix``, read through pyarrow's S3 filesystem:
:mod:`tailcut.exporters._location`, which also says where the data is). Its tables are hive-partitioned
globs, ``spans/dt=*/*.parquet`` and ``traces/dt=*/*.parquet``. Files written under an older schema lack
the newer columns; ``union_by_name`` fills them with NULL as long as one file has them, a column no file
has yet is added as a typed NULL, and older types are cast (:func:`current_columns`), so a query written
against today's schema runs over yesterday's files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tailcut.analysis._errors import NoDataError, UnreachableDataError
from tailcut.exporters._errors import DataDirError
from tailcut.exporters._location import is_remote
from tailcut.exporters._location import location as parse_location

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

#: The data dir's tables, each read from ``<table>/**/*.parquet``.
TABLES: Final = ("spans", "traces")
#: The hive partition column every table gets from its ``dt=YYYY-MM-DD`` directories.
PARTITION_COLUMN: Final = "dt"


def table_glob(location: str, table: str) -> str:
    """The glob of one table's Parquet files (hidden temporary files never match it)."""
    return f"{location}/{table}/**/*.parquet"


def damaged_file(location: str) -> str | None:
    """The first Parquet file of a local data dir that cannot be read through, relative to it; or None.

    Called only after DuckDB failed to read the data dir without naming the file (damaged metadata or
    pages): it reads every page of every file, a full scan, on the error path only.
    """
    if is_remote(location):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    for table in TABLES:
        for path in sorted(Path(location, table).glob("**/*.parquet")):
            try:
                for _ in pq.ParquetFile(path).iter_batches():
                    pass
            except (OSError, pa.ArrowException):
                return str(path.relative_to(location))
    return None


def present_tables(connection: duckdb.DuckDBPyConnection, location: str) -> dict[str, bool]:
    """Which tables have at least one Parquet file; raises :class:`NoDataError` when none has
    (:class:`UnreachableDataError` when a remote one cannot be listed)."""
    import duckdb

    if not is_remote(location):
        root = Path(location)
        if not root.exists():
            raise NoDataError(f"{location}: no such data dir (write one with `tailcut collect` or `ingest`)")
        if not root.is_dir():
            raise NoDataError(f"{location}: not a directory; --data wants a tailcut data dir")
    found = {}
    for table in TABLES:
        try:
            rows = connection.execute(
                "SELECT count(*) FROM glob(?)", [table_glob(location, table)]
            ).fetchall()[0]
        except duckdb.Error as exc:
            raise NoDataError(f"{location}: cannot list {table}/ ({str(exc).splitlines()[0]})") from None
        found[table] = bool(rows and rows[0])
    if not any(found.values()):
        try:
            parse_location(location).check_reachable()  # an empty listing may be a missing bucket
        except DataDirError as exc:
            raise UnreachableDataError(str(exc)) from None
        raise NoDataError(
            f"{location}: no Parquet files under spans/ or traces/; is it a tailcut data dir? "
            "(it fills as `tailcut collect` or an agent's ParquetSpanExporter writes)"
        )
    return found


@cache
def presented_schema(table: str) -> pa.Schema:
    """A table's columns as the views and frames present them: the stored schema, except that a time
    with a nanosecond twin (``start_time``, ``end_time``) is a nanosecond timestamp rebuilt from it (the
    files store microseconds, for the engines that open nothing finer)."""
    import pyarrow as pa

    from tailcut.exporters import schema

    stored = schema.TABLES[table]
    exact = pa.timestamp("ns", tz="UTC")
    return pa.schema(
        [
            field.with_type(exact) if schema.NANOSECOND_TWINS.get(field.name) in stored.names else field
            for field in stored
        ]
    )


@cache
def duckdb_types(table: str) -> Mapping[str, str]:
    """Column name to DuckDB type name for one table as the views present it (:func:`presented_schema`)."""
    import duckdb

    connection = duckdb.connect()
    try:
        connection.register("empty", presented_schema(table).empty_table())
        rows = connection.execute("DESCRIBE SELECT * FROM empty").fetchall()
    finally:
        connection.close()
    return {name: type_ for name, type_, *_ in rows}


def empty_table(table: str) -> pa.Table:
    """A table's schema with no rows, plus the partition column (for a table with no files yet)."""
    import pyarrow as pa

    empty = presented_schema(table).empty_table()
    return empty.append_column(PARTITION_COLUMN, pa.array([], pa.date32()))


def create_table_view(
    connection: duckdb.DuckDBPyConnection, location: str, table: str, present: bool
) -> None:
    """``CREATE VIEW <table>`` over its files, every current column present (typed NULL if no file has it).

    A table with no files is a view of an empty table of the main schema (not of a registered Arrow table,
    which only this connection would see: the classifier reads the views on cursors of its own too)."""
    if not present:
        connection.register("_empty", empty_table(table))
        try:
            connection.execute(f"CREATE OR REPLACE TABLE _empty_{table} AS SELECT * FROM _empty")
        finally:
            connection.unregister("_empty")
        connection.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM _empty_{table}")
        return
    scan = table_scan(connection, table, f"'{quote(table_glob(location, table))}'")
    connection.execute(f"CREATE OR REPLACE VIEW {table} AS {scan}")


def table_scan(
    connection: duckdb.DuckDBPyConnection, table: str, files: str, *, positions: bool = False
) -> str:
    """A ``SELECT`` of ``table``'s rows in ``files`` (a glob or a list, as SQL) with today's columns
    (:func:`current_columns`); with ``positions`` also each row's ``filename`` and ``file_row_number``.

    Over a list of files, its rows come in the list's order and each file's rows in theirs (DuckDB
    preserves a scan's order unless told not to), which lets a stored column line up with them."""
    scan = parquet_scan(files, positions=positions)
    return current_columns(table, scanned_columns(connection, scan), scan)


def parquet_scan(files: str, *, positions: bool = False) -> str:
    """The ``read_parquet`` of a table's ``files`` (see :func:`table_scan`)."""
    extra = ", filename = true, file_row_number = true" if positions else ""
    return f"read_parquet({files}, hive_partitioning = true, union_by_name = true{extra})"


def scanned_columns(connection: duckdb.DuckDBPyConnection, scan: str) -> dict[str, str]:
    """The columns ``scan`` gives and their DuckDB types (read from the files' footers)."""
    rows = connection.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()  # Dataset maps its errors
    return {name: type_ for name, type_, *_ in rows}


def current_columns(table: str, have: Mapping[str, str], scan: str) -> str:
    """A ``SELECT`` over ``scan`` (whose columns and DuckDB types are ``have``) giving today's schema.

    A time with a nanosecond twin is rebuilt from the twin at full precision (from itself in older files,
    which stored nanoseconds and no twin), and the twin is filled the same way; other columns of another
    type are cast, a column no file has is a typed NULL; the partition column and any column today's
    schema lacks pass through.
    """
    from tailcut.exporters.schema import NANOSECOND_TWINS

    replaced, added = [], []
    types = duckdb_types(table)
    sources = {twin: time for time, twin in NANOSECOND_TWINS.items() if twin in types}
    for name, type_ in types.items():
        twin = NANOSECOND_TWINS.get(name) if name in sources.values() else None
        source = sources.get(name)
        if twin is not None and name in have:
            exact = f"coalesce({twin}, epoch_ns({name}))" if twin in have else f"epoch_ns({name})"
            replaced.append(f"timezone('UTC', make_timestamp_ns({exact})) AS {name}")
        elif source is not None and source in have:
            exact = f"epoch_ns({source})"
            if name in have:
                replaced.append(f"coalesce({name}, {exact}) AS {name}")
            else:
                added.append(f"{exact} AS {name}")
        elif name not in have:
            added.append(f"CAST(NULL AS {type_}) AS {name}")
        elif have[name] != type_:
            # truncated like the writer truncates, not rounded as a cast from nanoseconds would be
            value = f"date_trunc('microseconds', {name})" if have[name].startswith("TIMESTAMP") else name
            replaced.append(f"CAST({value} AS {type_}) AS {name}")
    star = f"* REPLACE ({', '.join(replaced)})" if replaced else "*"
    return f"SELECT {', '.join([star, *added])} FROM {scan}"


def file_list(files: Sequence[str]) -> str:
    """Paths as a SQL list of strings.

    >>> file_list(["a.parquet", "it's.parquet"])
    "['a.parquet', 'it''s.parquet']"
    """
    return "[" + ", ".join(f"'{quote(name)}'" for name in files) + "]"


def quote(text: str) -> str:
    """A string literal's body for SQL (single quotes doubled)."""
    return text.replace("'", "''")
