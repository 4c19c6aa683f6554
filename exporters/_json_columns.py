"""Keep JSON columns readable: one invalid value makes DuckDB reject the whole file.

Payload columns use Arrow's JSON extension type, which DuckDB reads as ``JSON`` and validates on read.
Payloads are stored verbatim (their sha256 is over that exact text), so a span that carried something
other than JSON in ``tailcut.request`` would poison its file. Before a file is written, each JSON column is
checked with DuckDB's own parser (``json_valid``, vectorised, and agreeing exactly with what its Parquet
reader accepts) and any value it rejects is replaced by a JSON string of its text: kept, never dropped.
"""

from __future__ import annotations

import threading
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from tailcut.canonical import canonical_json

_connection: Any = None
_lock = threading.Lock()


def _cursor() -> Any:
    """A DuckDB cursor: one connection per process, a cursor per call (safe across threads).

    The connection runs each check on one thread: a batch's check is short, it runs on the writer's
    background thread beside the caller's work, and more threads would only contend with that work.
    """
    global _connection
    with _lock:
        if _connection is None:
            _connection = duckdb.connect(config={"threads": 1})
        return _connection.cursor()


def _invalid(columns: dict[int, pa.ChunkedArray]) -> dict[int, np.ndarray]:
    """Per column, the rows whose value is not JSON; one query checks all the columns together."""
    names = {position: f"c{position}" for position in columns}
    checks = ", ".join(f"coalesce(json_valid({name}), true) AS {name}" for name in names.values())
    cursor = _cursor()
    try:
        cursor.register("payloads", pa.table({names[p]: values for p, values in columns.items()}))
        ok = cursor.execute(f"SELECT {checks} FROM payloads").fetchnumpy()
    finally:
        cursor.close()
    return {p: np.flatnonzero(~np.asarray(ok[name], dtype=bool)) for p, name in names.items()}


def readable_json(table: pa.Table) -> pa.Table:
    """``table`` with every value of its JSON columns that is not JSON replaced by a JSON string of it."""
    columns = {
        position: pa.chunked_array([chunk.storage for chunk in table.column(position).chunks], pa.string())
        for position, field in enumerate(table.schema)
        if isinstance(field.type, pa.JsonType) and table.column(position).null_count < table.num_rows
    }
    if not columns:
        return table
    for position, bad in _invalid(columns).items():
        if not len(bad):
            continue
        values = columns[position].to_pylist()
        for i in bad.tolist():
            values[i] = canonical_json(values[i])
        field = table.schema.field(position)
        fixed = pa.ExtensionArray.from_storage(field.type, pa.array(values, pa.string()))
        table = table.set_column(position, field, fixed)
    return table
