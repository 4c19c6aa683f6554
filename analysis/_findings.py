"""The ``findings`` table of a data dir, kept as Parquet in ``findings/`` and never stale.

``DATA/findings/findings.parquet`` holds the findings of the default thresholds, so DuckDB, Spark,
ClickHouse or polars read them like ``spans`` and ``traces``. The file's Parquet metadata records the
**source key**: a sha256 of tailcut's version and the sorted names and sizes of every ``spans/`` and
``traces/`` file it was computed from (data files are immutable once renamed into place, so name and size
identify one). Whenever a ``Dataset`` needs ``findings`` (a query names it, or a report or comparison
reads it), the key of the files present now is compared with the stored one; on a mismatch (new files
landed, files were compacted or removed, or tailcut was upgraded) the whole table is recomputed and the
file replaced atomically. It is recomputed rather than extended because a finding of an old trace can
change with new traffic: ``cost_blowup`` is judged against the baseline slice's medians and schemas
against the schema book, both of which grow with new traces.

A remote data dir (``s3://`` ...) or one that cannot be written keeps its findings in memory for the
session. Findings of non-default thresholds (``classify --cost-z 4``) are never written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tailcut._atomic import replacing
from tailcut.analysis import _source

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset

#: The folder of the data dir that holds the findings, and its one file.
DIRECTORY: Final = "findings"
FILE: Final = "findings.parquet"
#: Parquet key-value metadata key of the source key.
SOURCE_KEY: Final = b"tailcut.findings.source"
#: Columns of (nearly) one value per row: dictionary-encoding them costs time and saves nothing.
_IDENTIFIERS: Final = ("trace_id", "span_id")
#: The columns the findings are sorted by: the only ones whose min/max statistics can skip a row group.
_SORTED_BY: Final = ("trace_id", "category")


def path(location: str) -> Path:
    """Where a local data dir's findings file is."""
    return Path(location, DIRECTORY, FILE)


def source_files(dataset: Dataset) -> dict[str, list[tuple[str, int]]]:
    """Per table, every Parquet file present now: its name relative to the data dir (a remote one: its
    URL) and its size (-1 when a listing gives none), sorted by name."""
    location = dataset.location
    listed = {}
    for table in _source.TABLES:
        if _source.is_remote(location):
            rows = dataset.connection.execute(
                "SELECT file FROM glob(?) ORDER BY file", [_source.table_glob(location, table)]
            ).fetchall()
            listed[table] = [(str(name), -1) for (name,) in rows]
        else:
            root = Path(location, table)
            listed[table] = sorted(
                (str(file.relative_to(location)), file.stat().st_size) for file in root.glob("**/*.parquet")
            )
    return listed


def source_key(dataset: Dataset, files: dict[str, list[tuple[str, int]]] | None = None) -> str:
    """The sha256 of tailcut's version and every ``spans``/``traces`` file (name and size) present now
    (or of ``files``, a :func:`source_files` listing)."""
    from tailcut._version import __version__

    listed = files if files is not None else source_files(dataset)
    digest = hashlib.sha256(f"tailcut {__version__}\n".encode())
    for table in _source.TABLES:
        for name, size in listed[table]:
            digest.update(f"{name}\t{size}\n".encode())
    return digest.hexdigest()


def stored_key(location: str) -> str | None:
    """The source key recorded in the findings file, or None when there is no readable file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if _source.is_remote(location):
        return None
    try:
        metadata = pq.read_schema(path(location)).metadata or {}
    except (OSError, pa.ArrowException):
        return None
    key = metadata.get(SOURCE_KEY)
    return key.decode() if key else None


def write(location: str, table: pa.Table, key: str) -> Path | None:
    """Write ``table`` as the findings file with its source key, atomically; None if it cannot be written.

    zstd-compressed, the columns of few distinct values dictionary-encoded, statistics only of the columns
    the rows are sorted by (a standard Parquet file: any engine reads it)."""
    import pyarrow.parquet as pq

    if _source.is_remote(location):
        return None
    target = path(location)
    metadata = {**(table.schema.metadata or {}), SOURCE_KEY: key.encode()}
    try:
        with replacing(target) as temporary:
            pq.write_table(
                table.replace_schema_metadata(metadata),
                temporary,
                compression="zstd",
                use_dictionary=[name for name in table.column_names if name not in _IDENTIFIERS],
                write_statistics=[name for name in _SORTED_BY if name in table.column_names],
            )
    except OSError:
        return None
    return target
