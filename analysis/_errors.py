"""Errors the analysis raises on purpose; the CLI prints each as one line, without a traceback."""

from __future__ import annotations

import re
from typing import Final

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


def is_data_read_error(error: Exception) -> bool:
    """Whether a DuckDB error is about reading a file rather than about the query.

    DuckDB raises an I/O or invalid-input error for a truncated file, and a bare error carrying the
    Thrift decoder's or the Parquet reader's complaint for damaged metadata or pages.
    """
    import duckdb

    if isinstance(error, duckdb.IOException | duckdb.InvalidInputException):
        return True
    text = str(error)
    return type(error) is duckdb.Error and ("TProtocolException" in text or "arquet" in text)


def data_read_error(error: Exception, location: str | None = None) -> DataReadError:
    """DuckDB's file-reading error as a one-line :class:`DataReadError` that says what to do.

    When DuckDB's message names no file and ``location`` (the data dir) is local, the damaged file is
    found and named.
    """
    first = str(error).splitlines()[0].strip() if str(error).strip() else type(error).__name__
    if location is not None and ".parquet" not in first:
        from tailcut.analysis._source import damaged_file

        found = damaged_file(location)
        if found is not None:
            first = f"{found}: {first}"
    return DataReadError(
        f"cannot read the data dir: {first}. tailcut never leaves a file half-written, so this one was "
        "damaged or copied partially: move it out of the data dir and retry"
    )


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
