"""Sort a row group into storage order, copying as little of it as possible.

The writer sorts each row group by trace id (then ``span_index``). Its rows come from several written
batches, each already in that order, and the spans of a trace are written in one call, so the sorted row
group is a sequence of *runs*: stretches of consecutive rows of one batch (a trace, or a few). Gathering
every column with ``take`` would copy the whole row group a second time, payloads included, into freshly
allocated memory, which costs more than the copy itself on a busy machine. A column whose runs are long in
bytes (the payloads) is instead assembled from zero-copy slices of its runs, which the Parquet writer reads
chunk by chunk just as well; the other columns are gathered with ``take``. The rows are the same either way.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: A column is sliced when its runs average at least this many bytes. Below that, the Parquet writer's
#: bookkeeping for one more chunk (a few microseconds) costs more than copying the run's bytes.
SLICE_BYTES: Final = 4096


def sort_rows(table: pa.Table, keys: list[tuple[str, str]]) -> pa.Table:
    """``table`` sorted by ``keys`` (as ``Table.sort_by``), its large columns as slices of the runs.

    Parameters
    ----------
    table
        The rows, in any number of chunks.
    keys
        ``(column, "ascending" | "descending")`` pairs, the first one the most significant.
    """
    order = pc.sort_indices(table, sort_keys=keys)
    lengths = [len(chunk) for chunk in table.column(0).chunks]
    if not table.num_rows or any(
        [len(chunk) for chunk in column.chunks] != lengths for column in table.columns
    ):
        return table.take(order)  # no rows, or columns chunked differently: no shared runs
    index = order.to_numpy().astype(np.int64)
    chunk_starts = np.cumsum([0, *lengths])
    # A run ends where the next row is not the following row of the same chunk.
    follows = (np.diff(index) == 1) & ~np.isin(index[1:], chunk_starts)
    starts = np.flatnonzero(np.r_[True, ~follows])
    first = index[starts]
    chunk = np.searchsorted(chunk_starts, first, side="right") - 1
    offset = first - chunk_starts[chunk]
    size = np.diff(np.r_[starts, len(index)])
    runs = list(zip(chunk.tolist(), offset.tolist(), size.tolist(), strict=True))
    columns = []
    for column in table.columns:
        if column.nbytes >= SLICE_BYTES * len(runs):
            chunks = column.chunks
            columns.append(pa.chunked_array([chunks[c].slice(o, n) for c, o, n in runs], type=column.type))
        else:
            columns.append(column.take(order))
    return pa.Table.from_arrays(columns, schema=table.schema)
