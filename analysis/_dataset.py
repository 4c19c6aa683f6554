"""``Dataset``: DuckDB views and polars frames over one data dir.

One in-memory DuckDB connection per ``Dataset`` holds the views of DESIGN.md section 5 (``spans``,
``traces``, ``llm_calls``, ``tool_calls``, ``retrievals``, ``kept_traces``, ``baseline_traces``), the
span-tree table macros of ``tree.sql`` and the ``findings`` view over ``findings/findings.parquet``,
brought up to date (see :mod:`tailcut.analysis._findings`) whenever a query names ``findings``.
Nothing is copied: every query reads the Parquet files, so a data dir that is being written shows its new
files after :meth:`Dataset.refresh`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tailcut.analysis import _findings, _pieces, _source
from tailcut.analysis._errors import QueryError, UnknownTraceError, translate
from tailcut.errors import MissingDependencyError
from tailcut.exporters._location import location

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa

    from tailcut.analysis._classify import Thresholds
    from tailcut.analysis._select import CorpusSelection
    from tailcut.analysis._tree import SpanTree

#: Views derived from the two tables, in creation order.
DERIVED_VIEWS: Final = {
    "llm_calls": "SELECT * FROM spans WHERE kind = 'llm'",
    "tool_calls": "SELECT * FROM spans WHERE kind = 'tool'",
    "retrievals": "SELECT * FROM spans WHERE kind = 'retriever'",
    "kept_traces": "SELECT * FROM traces WHERE kept",
    "baseline_traces": "SELECT * FROM traces WHERE baseline",
}
#: A query that reads the findings (brought up to date before it runs).
_NAMES_FINDINGS: Final = re.compile(r"\bfindings\b", re.IGNORECASE)
#: The table macros ``tree.sql`` defines (the ``*_recursive`` twins are what the others fall back to).
TREE_MACROS: Final = (
    "descendants",
    "ancestors",
    "span_path",
    "descendants_recursive",
    "ancestors_recursive",
    "tree_is_nested",
    "nested_layout_ok",
)


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError as exc:  # pragma: no cover - the pipeline extra brings it
        raise MissingDependencyError(
            'tailcut.analysis needs duckdb: pip install "tailcut[pipeline]"'
        ) from exc
    return duckdb


def _parameters(params: Sequence[Any] | Mapping[str, Any] | None) -> list[Any] | dict[str, Any] | None:
    if not params:
        return None
    return dict(params) if isinstance(params, Mapping) else list(params)


class Dataset:
    """A data dir opened for analysis: DuckDB views, span-tree macros and polars frames over its files.

    Parameters
    ----------
    path : str or path-like
        The data dir: a local directory, or ``s3://bucket/prefix`` (endpoint, region and credentials
        from the standard AWS variables; see :mod:`tailcut.exporters._location`).
    threads : int, optional
        DuckDB worker threads (default: one per core).
    memory_limit : str, optional
        DuckDB's ``memory_limit`` (``"128MB"``; default: 80% of the machine's memory). Beyond it DuckDB
        spills to a directory under the system's temporary directory, so a bounded session is slower,
        not refused, where an operator can spill.

    Raises
    ------
    NoDataError
        If the data dir does not exist or has no ``spans``/``traces`` files
        (:class:`~tailcut.analysis.UnreachableDataError` when a bucket cannot be listed).
    DataReadError
        If a Parquet file of the data dir is damaged (the message names it); any method may raise it.
    QueryError
        If DuckDB refuses a query (its message, hints and position).

    See Also
    --------
    tailcut.analysis.classify : failure findings of the kept traces.

    Examples
    --------
    Record three runs of a small agent into a data dir (``tailcut collect`` or an agent's
    ``ParquetSpanExporter`` writes one the same way), then query it:

    >>> import tailcut
    >>> from tailcut.exporters import ParquetSpanExporter
    >>> from tailcut.testing import capture_spans
    >>> @tailcut.tool
    ... def lookup(city: str) -> str:
    ...     if city == "Atlantis":
    ...         raise LookupError(f"no weather for {city}")
    ...     return "sunny"
    >>> with capture_spans() as spans:
    ...     for city in ("Paris", "Oslo", "Atlantis"):
    ...         try:
    ...             with tailcut.run("weather", input={"city": city}) as run:
    ...                 run.set_output(lookup(city))
    ...         except LookupError:
    ...             pass
    >>> exporter = ParquetSpanExporter("data")
    >>> exporter.export(spans).name
    'SUCCESS'
    >>> exporter.shutdown()

    >>> from tailcut.analysis import Dataset
    >>> with Dataset("data") as data:
    ...     kinds = data.sql("SELECT kind, count(*) AS n FROM spans GROUP BY kind ORDER BY kind").rows()
    ...     failed = data.sql("SELECT name, error_type FROM tool_calls WHERE status_code = 'ERROR'").rows()
    ...     finding = data.sql("SELECT category, boundary, layer FROM findings").rows()
    >>> kinds
    [('root', 3), ('tool', 3)]
    >>> failed
    [('execute_tool lookup', 'LookupError')]
    >>> finding
    [('error', 'tool:lookup', 'environment')]

    The span-tree macros take a trace and a span:
    ``data.sql("SELECT name FROM descendants(?, ?)", params=[trace_id, span_id])``. A query DuckDB refuses
    raises tailcut's error, with DuckDB's hint:

    >>> from tailcut.analysis import QueryError
    >>> try:
    ...     Dataset("data").sql("SELECT * FROM trace")
    ... except QueryError as error:
    ...     print(error)
    Catalog Error: Table with name trace does not exist! Did you mean "traces"?
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        memory_limit: str | None = None,
    ) -> None:
        duckdb = _duckdb()
        self._place = location(path)
        #: the data dir as a string: an absolute path or an ``s3://`` URL
        self.location = self._place.url
        self._connection: duckdb.DuckDBPyConnection = duckdb.connect(":memory:")
        if threads is not None:
            self._connection.execute(f"SET threads = {int(threads)}")
        if memory_limit is not None:
            self._connection.execute("SET memory_limit = ?", [memory_limit])
            spill = Path(tempfile.gettempdir()) / "tailcut-duckdb"
            self._connection.execute("SET temp_directory = ?", [str(spill)])
        if not self._place.remote:
            # Each statement binds its views again, and with them every file's footer: keep the footers
            # parsed. DuckDB reads a file again when its modification time changed since (a file rewritten
            # in place included); for an object store's files that time may be missing, so not there.
            self._connection.execute("SET parquet_metadata_cache = true")
        self._place.register_with(self._connection)
        self._present: dict[str, bool] = {}
        #: source key of the registered findings; None when none are, or they came from custom thresholds
        self._findings_key: str | None = None
        self._custom_findings = False
        self._findings_generation = 0
        self._requests: _pieces.Requests | None = None
        self.refresh()

    # --- setup ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self, query: str | None = None) -> Iterator[None]:
        """Map the DuckDB errors raised inside to tailcut's: the one place they are translated.

        A damaged file of this data dir becomes a :class:`~tailcut.analysis.DataReadError` naming it,
        any other DuckDB error a :class:`~tailcut.analysis.QueryError` (positions relative to
        ``query``). Every method here runs its queries inside it; code that queries :attr:`connection`
        directly can too.
        """
        duckdb = _duckdb()
        try:
            yield
        except duckdb.Error as exc:
            raise translate(exc, location=self.location, query=query) from None

    def refresh(self) -> None:
        """Re-read the file lists and re-create the views (files written since opening become visible)."""
        with self.reading():
            self._refresh()

    def _refresh(self) -> None:
        self._present = _source.present_tables(self._connection, self.location)
        for table in _source.TABLES:
            _source.create_table_view(self._connection, self.location, table, self._present[table])
        self._requests = _pieces.install(self._connection, self.location, self._requests)
        for name, query in DERIVED_VIEWS.items():
            self._connection.execute(f"CREATE OR REPLACE VIEW {name} AS {query}")
        script = resources.files("tailcut.analysis").joinpath("tree.sql").read_text(encoding="utf-8")
        self._connection.execute(script)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the views (for queries the methods here do not cover)."""
        return self._connection

    def close(self) -> None:
        """Close the DuckDB connection."""
        self._connection.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Dataset({self.location!r})"

    # --- SQL -----------------------------------------------------------------------------------------------
    def sql_arrow(self, query: str, *, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pa.Table:
        """Run ``query`` and return its rows as a pyarrow Table.

        Parameters
        ----------
        query : str
            DuckDB SQL over the views and macros (``?`` placeholders for ``params``).
        params : sequence, optional
            Values for the ``?`` placeholders, or a mapping for ``$name`` ones.

        Returns
        -------
        pyarrow.Table
            Empty (no columns) for a statement that returns nothing.

        Raises
        ------
        QueryError
            DuckDB's message and the line and column it points at.
        """
        import pyarrow as pa

        if _NAMES_FINDINGS.search(query):
            self.ensure_findings()
        with self.reading(query):
            relation = self._connection.sql(query, params=_parameters(params))
            return pa.table({}) if relation is None else relation.to_arrow_table()

    def sql(self, query: str, *, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pl.DataFrame:
        """Run ``query`` and return its rows as a polars DataFrame.

        Parameters
        ----------
        query : str
            DuckDB SQL over ``spans``, ``traces``, ``llm_calls``, ``tool_calls``, ``retrievals``,
            ``kept_traces``, ``baseline_traces`` and ``findings`` (classified first if stale), with the macros
            ``descendants(trace_id, span_id)``, ``ancestors(trace_id, span_id)`` and
            ``span_path(trace_id, span_id)``.
        params : sequence, optional
            Values for ``?`` placeholders, or a mapping for ``$name`` ones.

        Returns
        -------
        polars.DataFrame

        Raises
        ------
        QueryError
            DuckDB's message and the line and column it points at.

        See Also
        --------
        sql_arrow : the same rows as a pyarrow Table.

        Examples
        --------
        ::

            data.sql("SELECT count(*) AS n FROM traces WHERE kept")
        """
        import polars as pl

        return pl.from_arrow(self.sql_arrow(query, params=params))  # type: ignore[return-value]

    def tables(self) -> list[str]:
        """The views and tables a query can read, sorted (``findings`` always: it is made on demand)."""
        rows = self._connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND NOT starts_with(table_name, '_') ORDER BY table_name"
        ).fetchall()
        return sorted({name for (name,) in rows} | {"findings"})

    def schema(self, name: str) -> list[tuple[str, str]]:
        """``(column, DuckDB type)`` of one view or table.

        Raises
        ------
        QueryError
            If there is no such view.
        """
        if name not in self.tables():
            raise QueryError(f"no view or table named {name!r}; try one of: {', '.join(self.tables())}")
        if name == "findings":
            self.ensure_findings()
        with self.reading():
            rows = self._connection.execute(f'DESCRIBE SELECT * FROM "{name}"').fetchall()
        return [(column, type_) for column, type_, *_ in rows]

    # --- polars --------------------------------------------------------------------------------------------
    def spans_lazy(self, *, columns: Sequence[str] | None = None) -> pl.LazyFrame:
        """The ``spans`` table as a polars LazyFrame over the same files.

        Parameters
        ----------
        columns : sequence of str, optional
            Only these columns (default: all).

        Returns
        -------
        polars.LazyFrame

        See Also
        --------
        spans : the eager twin.
        """
        return self._scan("spans", columns)

    def spans(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """The ``spans`` table as a polars DataFrame (see :meth:`spans_lazy`)."""
        return self.spans_lazy(columns=columns).collect()

    def traces_lazy(self, *, columns: Sequence[str] | None = None) -> pl.LazyFrame:
        """The ``traces`` table as a polars LazyFrame over the same files.

        Parameters
        ----------
        columns : sequence of str, optional
            Only these columns (default: all).

        Returns
        -------
        polars.LazyFrame

        See Also
        --------
        traces : the eager twin.
        """
        return self._scan("traces", columns)

    def traces(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """The ``traces`` table as a polars DataFrame (see :meth:`traces_lazy`)."""
        return self.traces_lazy(columns=columns).collect()

    def _scan(self, table: str, columns: Sequence[str] | None) -> pl.LazyFrame:
        import polars as pl

        from tailcut.exporters.schema import NANOSECOND_TWINS

        empty = pl.from_arrow(_source.empty_table(table))
        assert isinstance(empty, pl.DataFrame)
        if self._present[table]:
            frame = pl.scan_parquet(
                _source.table_glob(self.location, table),
                hive_partitioning=True,
                storage_options=self._place.polars_options(),
                schema=empty.schema,
                missing_columns="insert",
                extra_columns="ignore",
                # files store microseconds (schema 1: nanoseconds, and no twins); the twin-backed times
                # are presented in nanoseconds, rebuilt from the twin
                cast_options=pl.ScanCastOptions(datetime_cast=["nanosecond-downcast", "microsecond-upcast"]),
            )
            twins = {time: twin for time, twin in NANOSECOND_TWINS.items() if twin in empty.schema}
            frame = frame.with_columns(
                pl.coalesce(twin, pl.col(time).dt.epoch("ns")).alias(twin) for time, twin in twins.items()
            ).with_columns(
                pl.from_epoch(twin, "ns").dt.replace_time_zone("UTC").alias(time)
                for time, twin in twins.items()
            )
        else:
            frame = empty.lazy()
        if (
            table == "spans"
            and self._present[table]
            and (columns is None or {"request", "response"} & set(columns))
        ):
            frame = _pieces.put_back(frame, self.location)
        if columns is not None:
            unknown = [c for c in columns if c not in empty.schema]
            if unknown:
                raise QueryError(f"{table} has no column {unknown[0]!r}")
            frame = frame.select(list(columns))
        return frame

    # --- trees, findings, selection ------------------------------------------------------------------------
    def tree(self, trace_id: str, *, payloads: bool = False, full: bool = False) -> SpanTree:
        """One trace's spans as a tree (what ``tailcut tree`` shows).

        Parameters
        ----------
        trace_id : str
            The trace, 32 hex characters.
        payloads : bool, default False
            Also each span's request and response (offloaded ones resolved), abridged unless ``full``.
        full : bool, default False
            Whole payloads instead of their first 200 characters.

        Raises
        ------
        UnknownTraceError
            If the data dir has neither a span nor a ``traces`` row of the trace (a trace sampling dropped
            has a row: its tree has no spans and its header says it was dropped, with its decision).
        """
        from tailcut.analysis._tree import load_tree

        with self.reading():
            tree = load_tree(self, trace_id, payloads=payloads or full, full=full)
        if tree is None:
            raise UnknownTraceError(f"no trace {trace_id} in {self.location} (no span and no traces row)")
        return tree

    def classify(self, *, thresholds: Thresholds | None = None, store: bool = True) -> pl.DataFrame:
        """Find the failure categories of every kept trace; registers the ``findings`` table.

        With the default thresholds and ``store`` the findings are also written to
        ``findings/findings.parquet`` (a local, writable data dir); otherwise they are kept in this
        session only (other thresholds: until :meth:`ensure_findings` is told to go back to the default
        ones). A reader that must not write into the data dir (``tailcut ui``) passes ``store=False``.

        Parameters
        ----------
        thresholds : Thresholds, optional
            Detection thresholds (default: :class:`~tailcut.analysis.Thresholds` defaults).

        Returns
        -------
        polars.DataFrame
            One row per (trace, category); see :func:`tailcut.analysis.classify`.
        """
        import polars as pl

        from tailcut.analysis._classify import Thresholds, compute_findings

        limits = thresholds or Thresholds()
        default = limits == Thresholds()
        with self.reading():
            key = _findings.source_key(self)
            table = compute_findings(self, limits)
            written = _findings.write(self.location, table, key) if default and store else None
            if written is not None:
                self._register_findings(f"SELECT * FROM read_parquet('{_source.quote(str(written))}')")
            else:
                self._connection.register("_findings_arrow", table)
                try:
                    self._register_findings("SELECT * FROM _findings_arrow", table=True)
                finally:
                    self._connection.unregister("_findings_arrow")
        self._findings_key = key if default else None
        self._custom_findings = not default
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def ensure_findings(self, *, default: bool = False, store: bool = True) -> None:
        """Make the ``findings`` table current: read the stored file if it matches the files present,
        else classify (default thresholds) and store the result (``store=False``: keep it in this
        session only, writing nothing).

        Findings of custom thresholds registered by :meth:`classify` are kept unless ``default``.
        """
        if self._custom_findings and not default:
            return
        with self.reading():
            key = _findings.source_key(self)
            if key == self._findings_key:
                return
            if _findings.stored_key(self.location) == key:
                stored = _source.quote(str(_findings.path(self.location)))
                self._register_findings(f"SELECT * FROM read_parquet('{stored}')")
                self._findings_key, self._custom_findings = key, False
                return
        self.classify(store=store)

    def _register_findings(self, query: str, *, table: bool = False) -> None:
        """Replace the ``findings`` view or table (whichever exists) with ``query``'s rows."""
        self._findings_generation += 1
        for kind in ("VIEW", "TABLE"):
            try:
                self._connection.execute(f"DROP {kind} IF EXISTS findings")
            except _duckdb().CatalogException:  # the other kind holds the name
                continue
        kind = "TABLE" if table else "VIEW"
        self._connection.execute(f"CREATE {kind} findings AS {query}")

    @property
    def findings_key(self) -> str | None:
        """The source key (:func:`._findings.source_key`) of the registered findings when they are the
        default thresholds' (None: none registered, or of other thresholds)."""
        return self._findings_key

    @property
    def findings_generation(self) -> int:
        """A number that changes whenever the ``findings`` table is replaced: what this session derived
        from the findings (an in-memory census) stays current while it and the source key are unchanged."""
        return self._findings_generation

    def has_findings(self) -> bool:
        """Whether a ``findings`` table is registered in this session (it may be stale; see
        :meth:`ensure_findings`)."""
        return self._findings_key is not None or self._custom_findings

    def findings(self) -> pl.DataFrame:
        """The ``findings`` table, brought up to date first."""
        return self.sql("SELECT * FROM findings ORDER BY trace_id, category")

    def select(
        self,
        out: str | os.PathLike[str],
        *,
        categories: Sequence[str] | None = None,
        where: str | None = None,
        baseline: int = 0,
        stratify_by: str | None = "agent_name",
        seed: int = 0,
        overwrite: bool = False,
    ) -> CorpusSelection:
        """Write a replay corpus: incidents plus a stratified baseline sample (see :func:`select_corpus`)."""
        from tailcut.analysis._select import select_corpus

        return select_corpus(
            self,
            out,
            categories=categories,
            where=where,
            baseline=baseline,
            stratify_by=stratify_by,
            seed=seed,
            overwrite=overwrite,
        )
