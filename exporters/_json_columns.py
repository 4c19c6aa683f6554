"""Keep JSON columns readable: one invalid value makes DuckDB reject the whole file.

Payload columns use Arrow's JSON extension type, which DuckDB reads as ``JSON`` and validates on read.
Payloads are stored verbatim (their sha256 is over that exact text), so a span that carried something
other than JSON in ``tailcut.request`` would poison its file. Before a file is written, each JSON column is
checked with orjson's strict RFC 8259 parser, and any value it rejects is replaced by a JSON string of its
text: kept, never dropped. orjson accepts a subset of what DuckDB's reader does (it refuses ``NaN``,
trailing commas, numbers out of the double range and nesting deeper than 1024, which DuckDB takes), so a
value it passes never poisons a file; the writer itself runs no DuckDB, so the agent's in-process exporter
never loads it (``tests/test_exporters_writer.py`` checks both).
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa

from tailcut.canonical import canonical_json


def _invalid(values: pa.ChunkedArray) -> np.ndarray:
    """The rows of a string column whose value is not JSON (nulls are fine)."""
    bad = []
    for i, value in enumerate(values.to_pylist()):
        if value is None:
            continue
        try:
            orjson.loads(value)
        except orjson.JSONDecodeError:
            bad.append(i)
    return np.array(bad, dtype=np.int64)


def readable_json(table: pa.Table) -> pa.Table:
    """``table`` with every value of its JSON columns that is not JSON replaced by a JSON string of it."""
    for position, field in enumerate(table.schema):
        column = table.column(position)
        if not isinstance(field.type, pa.JsonType) or column.null_count == table.num_rows:
            continue
        storage = pa.chunked_array([chunk.storage for chunk in column.chunks], pa.string())
        bad = _invalid(storage)
        if not len(bad):
            continue
        values = storage.to_pylist()
        for i in bad.tolist():
            values[i] = canonical_json(values[i])
        fixed = pa.ExtensionArray.from_storage(field.type, pa.array(values, pa.string()))
        table = table.set_column(position, field, fixed)
    return table
