"""The ``spans`` view's payload columns: full requests and responses put back from their pieces on read.

LLM requests are stored as a skeleton plus content-addressed pieces (``tailcut.exporters._pieces``). The
raw ``spans`` view is renamed ``_spans_stored`` and ``spans`` becomes the same rows with ``request``
and ``response`` replaced, for the rows marked ``tailcut.request.pieced`` / ``tailcut.response.pieced``,
by the scalar function ``tailcut_request``, which expands the skeleton from the trace's pieces and
verifies every piece and the result's sha256. Queries that read neither column never call it; a
missing or damaged piece fails the query with an error naming the trace, the boundary and the hash.
:func:`put_back` does the same for the polars frames of ``Dataset.spans_lazy()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tailcut import attributes as attr

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from tailcut.exporters._pieces import PieceReader

FUNCTION: Final = "tailcut_request"
STORED_VIEW: Final = "_spans_stored"


class Requests:
    """The scalar function's state: the reader of the data dir's pieces (replaced on refresh)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.reader: PieceReader | None = None

    def refresh(self) -> None:
        from tailcut.exporters._pieces import PieceReader

        self.reader = PieceReader(self.location)

    def __call__(
        self, trace_id: str, boundary: str | None, field: str, text: str | None, sha256: str | None
    ) -> str | None:
        if text is None:
            return None
        assert self.reader is not None  # install() refreshes before the view can call
        return self.reader.payload(text, trace_id=trace_id, boundary=boundary, sha256=sha256, field=field)


def install(connection: duckdb.DuckDBPyConnection, location: str, state: Requests | None) -> Requests:
    """Make ``spans`` put requests back together (after the raw view was (re)created); returns the state."""
    if state is None:
        state = Requests(location)
        connection.create_function(
            FUNCTION,
            state,
            ["VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR"],
            "VARCHAR",
            null_handling="special",
            side_effects=False,
        )
    state.refresh()
    connection.execute(f"DROP VIEW IF EXISTS {STORED_VIEW}")
    connection.execute(f"ALTER VIEW spans RENAME TO {STORED_VIEW}")
    columns = ", ".join(
        f"CASE WHEN attributes['{marker}'] = 'true' THEN CAST({FUNCTION}(trace_id, boundary, '{column}', "
        f"CAST({column} AS VARCHAR), {column}_sha256) AS JSON) ELSE {column} END AS {column}"
        for column, marker in (("request", attr.REQUEST_PIECED), ("response", attr.RESPONSE_PIECED))
    )
    connection.execute(f"CREATE VIEW spans AS SELECT * REPLACE ({columns}) FROM {STORED_VIEW}")
    return state


def put_back(frame: pl.LazyFrame, location: str) -> pl.LazyFrame:
    """``frame`` (``spans`` rows) with ``request`` and ``response`` put back from their pieces.

    Only values holding a placeholder are expanded (a Python call each); the others pass as they are.
    """
    import polars as pl

    from tailcut.exporters._pieces import PieceReader

    reader = PieceReader(location)
    schema = frame.collect_schema()
    expanded = []
    for column in ("request", "response"):
        needed = [column, "trace_id", "boundary", f"{column}_sha256"]

        def expand(row: dict[str, str | None], column: str = column) -> str | None:
            text = row[column]
            if text is None:
                return None
            return reader.payload(
                text,
                trace_id=str(row["trace_id"]),
                boundary=row["boundary"],
                sha256=row[f"{column}_sha256"],
                field=column,
            )

        json_type = schema[column]  # the JSON extension type: its text is the storage
        texts = [pl.col(column).ext.storage(), *(pl.col(name).cast(pl.String) for name in needed[1:])]
        expanded.append(
            pl.struct(texts).map_elements(expand, return_dtype=pl.String).ext.to(json_type).alias(column)
        )
    return frame.with_columns(expanded)
