"""``traces`` rows (:func:`tailcut.signals.traces_row`) to an Arrow table, for the collector's writer.

Rows arrive in batches of thousands, so each column is built with one ``pa.array`` call from the rows'
values (taken by column name, in C) rather than ``Table.from_pylist``'s per-cell work.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import itemgetter

import pyarrow as pa

from tailcut.exporters import schema
from tailcut.signals import TraceRow


@functools.cache
def _fields() -> tuple[pa.Schema, itemgetter]:
    fields = schema.nanosecond_fields("traces")
    return fields, itemgetter(*fields.names)


def traces_table(rows: Sequence[TraceRow]) -> pa.Table:
    """The rows as a table with the ``traces`` schema."""
    fields, values = _fields()
    columns = list(zip(*map(values, rows), strict=True)) if rows else [() for _ in fields]
    arrays = {f.name: pa.array(column, type=f.type) for column, f in zip(columns, fields, strict=True)}
    return schema.from_nanoseconds("traces", arrays)
