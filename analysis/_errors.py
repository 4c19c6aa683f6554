"""Errors the analysis raises on purpose; the CLI prints each as one line, without a traceback."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Final, ParamSpec, TypeVar

from tailcut.errors import TailcutError


class AnalysisError(TailcutError):
    """Base class of the analysis errors."""


class NoDataError(AnalysisError, FileNotFoundError):
    """The data dir is missing, or holds no ``spans``/``traces`` Parquet files."""


class QueryError(AnalysisError, ValueError):
    """DuckDB refused or failed a query; carries DuckDB's message and the position it points at.

    Attributes
    ----------
    message : str
        DuckDB's message with its hints on one line (e.g. ``Catalog Error: ... Did you mean "traces"?``).
    line, column : int or None
        1-based position in the query DuckDB pointed at, when it did.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f" (at line {line}, column {column})" if line is not None and column is not None else ""
        super().__init__(f"{message}{where}")
        self.message = message
        self.line = line
        self.column = column


class DataReadError(AnalysisError, OSError):
    """A file of the data dir that DuckDB cannot read: a damaged or partially copied Parquet file."""


class UnreachableDataError(NoDataError):
    """A remote data dir (``s3://``) cannot be listed: no such bucket, no network, refused credentials."""


#: A file DuckDB names in its message (``'…/part-….parquet'`` or ``"…"``).
_NAMED_FILE: Final = re.compile(r"""['"]([^'"]+\.parquet)['"]""")
#: Words of DuckDB's complaints about a file's bytes when it names no file (Thrift, the Parquet reader).
_FILE_WORDS: Final = ("TProtocolException", "arquet", "magic bytes", "don't know what type")


def _named_file(error: Exception) -> str | None:
    match = _NAMED_FILE.search(str(error))
    return match.group(1) if match else None


def _is_data_read_error(error: Exception, location: str | None) -> bool:
    """Whether a DuckDB error is about reading a file of the data dir rather than about the query.

    DuckDB raises an I/O or invalid-input error for a truncated file, and a bare error carrying the
    Thrift decoder's or the Parquet reader's complaint for damaged metadata or pages. A file it names
    must be under ``location``: a query's own ``read_parquet('elsewhere.parquet')`` is the query's
    problem.
    """
    import duckdb

    named = _named_file(error)
    if named is not None:
        return location is not None and named.startswith(location.rstrip("/") + "/")
    if isinstance(error, duckdb.IOException):
        return True
    text = str(error)
    if isinstance(error, duckdb.InvalidInputException) or type(error) is duckdb.Error:
        return any(word in text for word in _FILE_WORDS)
    return False


def _data_read_error(error: Exception, location: str | None) -> DataReadError | None:
    """DuckDB's file-reading error as a one-line :class:`DataReadError` that says what to do; or None
    when DuckDB named no file and every file of a local data dir reads through (the query's fault).

    When DuckDB's message names no file and ``location`` (the data dir) is local, the damaged file is
    found (a full read, on this error path only) and named.
    """
    first = str(error).splitlines()[0].strip() if str(error).strip() else type(error).__name__
    if location is not None and _named_file(error) is None:
        from tailcut.analysis._source import damaged_file
        from tailcut.exporters._location import is_remote

        found = damaged_file(location)
        if found is not None:
            first = f"{found}: {first}"
        elif not is_remote(location):
            return None
    return DataReadError(
        f"cannot read the data dir: {first}. tailcut never leaves a file half-written, so this one was "
        "damaged or copied partially: move it out of the data dir and retry"
    )


def translate(error: Exception, *, location: str | None = None, query: str | None = None) -> AnalysisError:
    """DuckDB's ``error`` as tailcut's: the one place DuckDB errors are mapped (:class:`Dataset` uses it).

    A damaged or truncated file of the data dir at ``location`` becomes a :class:`DataReadError` naming
    the file; anything else a :class:`QueryError` with DuckDB's message, its hints and the position it
    points at in ``query``.
    """
    if _is_data_read_error(error, location):
        damaged = _data_read_error(error, location)
        if damaged is not None:
            return damaged
    return query_error(error, query)


class UnknownTraceError(AnalysisError, LookupError):
    """A trace id that is not in the data dir."""


class ResultsFileError(AnalysisError, ValueError):
    """A replay-results file is missing, unreadable or not of the ``replay_results`` schema."""


def query_error(error: Exception, query: str | None = None) -> QueryError:
    """DuckDB's error as a :class:`QueryError`: its message with its hints, and the position its caret marks.

    DuckDB ends a message that points into the query with ``LINE n: <text>`` and a line of carets under
    the offending token; both are folded into the position, so the message fits on one line. DuckDB
    shows a long line as a window (``...text...``); given the ``query``, the window is found in it. The
    lines DuckDB adds to help (``Did you mean "traces"?``, ``Candidate bindings: "trace_id"``) are kept,
    joined to the first with spaces.
    """
    lines = str(error).splitlines()
    position: tuple[int, int] | None = None
    hints: list[str] = []
    skip = False
    for i, text in enumerate(lines):
        if skip:
            skip = False
            continue
        match = _LINE.match(text)
        caret = lines[i + 1] if i + 1 < len(lines) else ""
        if match is not None and "^" in caret:
            skip = True
            if position is None:
                line = int(match.group(1))
                offset = caret.index("^") - match.end(1) - 2
                shown = match.group(2)
                if shown.startswith("...") and query is not None:
                    source = query.splitlines()[line - 1] if line <= len(query.splitlines()) else ""
                    window = source.find(shown[3:].removesuffix("..."))
                    offset += window - 3 if window >= 0 else 0
                position = (line, offset + 1)
        elif text.strip():
            hints.append(text.strip())
    message = " ".join(hints) if hints else type(error).__name__
    return QueryError(message, *(position or (None, None)))


_LINE: Final = re.compile(r"^LINE (\d+): (.*)$")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def maps_errors(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a function whose first argument is a ``Dataset`` inside its ``reading()``, so the DuckDB
    errors of the queries it runs reach its caller as tailcut's (the public functions over a dataset:
    ``build_report``, ``compare_by``, ``select_corpus``, ...). It lives here, below ``Dataset``, so
    that the modules ``Dataset`` calls into can use it without an import cycle."""

    @functools.wraps(function)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        dataset = args[0]  # a Dataset (duck-typed: this module sits below it)
        with dataset.reading():  # type: ignore[attr-defined]
            return function(*args, **kwargs)

    return run
