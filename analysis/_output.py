"""Everything the analysis and replay commands print: the one output module.

* **Consoles** (:func:`console`): rich, and when the stream is not a terminal (a pipe, a file, CI) as
  wide as any table needs, so nothing is cut at 80 columns with ``…``.
* **Records** (:func:`emit`, :func:`record_json`, :func:`records_csv`): a command's result object as one
  JSON object, or its items as CSV rows with nested keys flattened (``baseline.a.numerator``).
* **Query results** (:func:`print_table`, :func:`to_json`, :func:`to_csv`, :func:`write_file`): Arrow
  tables as a terminal table, CSV, JSON or Parquet (``tailcut sql --format``).

Nested values (maps, lists, structs, JSON) have no CSV cell type, so CSV writes them as JSON text; JSON
writes one array of row objects; Parquet keeps the Arrow types. Nanosecond times (every span and trace
time) print as ISO 8601 text with all nine digits, ``2026-11-29T10:00:00.123456789+00:00``: Python's
datetime holds only microseconds, so they never pass through it (times nested in lists or maps do). A
file is written under a temporary name and renamed, so a failed write leaves nothing behind.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson

from tailcut._atomic import replacing
from tailcut.analysis._errors import AnalysisError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

Format = Literal["table", "csv", "json", "parquet"]
FORMATS: Final = ("table", "csv", "json", "parquet")
#: Rows a terminal table shows before it says how many more there are.
TABLE_ROWS: Final = 200
#: The width of a console whose stream is not a terminal: no table is ever cut to fit it.
PIPE_WIDTH: Final = 100_000


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); not a terminal: :data:`PIPE_WIDTH` wide, whatever
    ``COLUMNS`` says, so tables keep every character of every cell."""
    from rich.console import Console

    made = Console(stderr=stderr)
    if not made.is_terminal:
        made.width = PIPE_WIDTH
    return made


# --- records -------------------------------------------------------------------------------------------


def record_json(record: Any) -> str:
    """A record as indented JSON (keys as given; non-string keys as text)."""
    return orjson.dumps(record, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested keys joined with dots; lists become ``;``-joined text (one CSV cell)."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = ";".join(str(v) for v in value)
        else:
            flat[name] = value
    return flat


def _csv_value(value: Any) -> Any:
    """A CSV cell: empty for null, ``true``/``false`` for booleans (what CSV readers parse back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def records_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Records as CSV with a header: ``columns``, or the union of their flattened keys in first-seen order."""
    flat = [flatten(row) for row in rows]
    names: dict[str, None] = dict.fromkeys(columns or ())
    if columns is None:
        for row in flat:
            names.update(dict.fromkeys(row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(names), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in flat:
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buffer.getvalue()


def emit(
    fmt: Literal["json", "csv"] | str,
    record: Any,
    rows: Iterable[Mapping[str, Any]],
    *,
    columns: Sequence[str] | None = None,
) -> None:
    """Print ``record`` as one JSON object (``--format json``) or ``rows`` as CSV (``--format csv``,
    with these ``columns`` if given)."""
    import click

    if fmt == "json":
        click.echo(record_json(record))
    else:
        click.echo(records_csv(rows, columns), nl=False)


# --- query results -------------------------------------------------------------------------------------


def _microseconds(type_: pa.DataType) -> pa.DataType:
    """``type_`` with every nanosecond timestamp (nested ones too) made microseconds (Python's precision)."""
    import pyarrow as pa

    if pa.types.is_timestamp(type_) and type_.unit == "ns":
        return pa.timestamp("us", tz=type_.tz)
    if pa.types.is_map(type_):
        return pa.map_(_microseconds(type_.key_type), _microseconds(type_.item_type))
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return pa.list_(_microseconds(type_.value_type))
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_microseconds(f.type)) for f in type_])
    return type_


def _nanosecond_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A nanosecond timestamp column as ISO 8601 text with nine fractional digits (and ``+HH:MM``)."""
    import pyarrow.compute as pc

    zoned = column.type.tz is not None
    text = pc.strftime(column, "%Y-%m-%dT%H:%M:%S%z" if zoned else "%Y-%m-%dT%H:%M:%S")
    return pc.replace_substring_regex(text, r"([+-]\d\d)(\d\d)$", r"\1:\2") if zoned else text


def to_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows as dicts; top-level nanosecond times as ISO text with every digit, nested ones cut to
    microseconds (Python's datetime holds no more)."""
    import pyarrow as pa

    for index, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            table = table.set_column(index, field.name, _nanosecond_text(table.column(index)))
    schema = pa.schema([f.with_type(_microseconds(f.type)) for f in table.schema])
    if schema != table.schema:
        table = table.cast(schema, safe=False)
    return table.to_pylist()


def _jsonable(value: Any) -> Any:
    """A cell as JSON: maps (lists of key/value pairs from Arrow) become objects, times ISO 8601."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _jsonable(v) for k, v in value}
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def _cell(value: Any, is_map: bool = False) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict | tuple):
        return orjson.dumps(_value(value, is_map)).decode()
    return _jsonable(value) if isinstance(value, str) else str(_jsonable(value))


def _maps(table: pa.Table) -> set[str]:
    """Names of the top-level map columns (an empty map must print as ``{}``, not ``[]``)."""
    import pyarrow as pa

    return {f.name for f in table.schema if pa.types.is_map(f.type)}


def _value(value: Any, is_map: bool) -> Any:
    if is_map and value is not None:
        return {str(k): _jsonable(v) for k, v in value}
    return _jsonable(value)


def to_json(table: pa.Table) -> bytes:
    """The rows as one JSON array of objects."""
    maps = _maps(table)
    rows = [{k: _value(v, k in maps) for k, v in row.items()} for row in to_rows(table)]
    return orjson.dumps(rows, option=orjson.OPT_INDENT_2) + b"\n"


def to_csv(table: pa.Table) -> bytes:
    """The rows as CSV with a header; nested cells as JSON text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.column_names)
    maps = _maps(table)
    for row in to_rows(table):
        writer.writerow([_cell(row[name], name in maps) for name in table.column_names])
    return buffer.getvalue().encode()


def print_table(table: pa.Table, console: Console, *, limit: int = TABLE_ROWS) -> None:
    """The rows as a rich table (the first ``limit``), with the row count under it."""
    from rich.markup import escape
    from rich.table import Table

    view = Table(show_lines=False)
    for name in table.column_names:
        view.add_column(escape(name), overflow="fold")
    maps = _maps(table)
    for row in to_rows(table.slice(0, limit)):
        view.add_row(
            *(
                escape(_cell(row[name], name in maps)) if row[name] is not None else "[dim]NULL[/]"
                for name in table.column_names
            )
        )
    console.print(view)
    more = f", {limit} shown" if table.num_rows > limit else ""
    console.print(f"[dim]{table.num_rows} row{'s' if table.num_rows != 1 else ''}{more}[/]")


def write_file(table: pa.Table, out: str | os.PathLike[str], fmt: Format) -> Path:
    """Write the rows to ``out`` as ``fmt`` (``table`` is not a file format), atomically."""
    import pyarrow.parquet as pq

    target = Path(out)
    if fmt == "table":
        raise AnalysisError("--format table prints to the terminal; choose csv, json or parquet with --out")
    if not target.parent.is_dir():
        raise AnalysisError(f"{target.parent}: no such directory for --out")
    with replacing(target) as temporary:
        if fmt == "parquet":
            pq.write_table(table, temporary, compression="zstd")
        else:
            temporary.write_bytes(to_csv(table) if fmt == "csv" else to_json(table))
    return target
