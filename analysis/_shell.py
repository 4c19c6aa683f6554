"""The interactive SQL shell of ``tailcut sql`` (no query given).

A statement may span several lines and runs once a line ends with ``;``. Dot commands work at the start
of a statement: ``.tables``, ``.schema VIEW``, ``.help``, ``.quit``. On a terminal the shell uses
prompt_toolkit (line editing, history kept in :data:`HISTORY_FILE`, SQL highlighting); with piped input it
reads lines plainly, so scripts and tests can drive it. An error prints one line and the shell goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tailcut.analysis._errors import AnalysisError
from tailcut.analysis._output import print_table

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from tailcut.analysis._dataset import Dataset

#: Where the shell keeps its history (created on first use).
HISTORY_FILE: Final = (
    Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "tailcut" / "sql_history"
)
HELP: Final = (
    "End a statement with ';' (it may span lines). Commands: .tables  .schema VIEW  .help  .quit\n"
    "Tree macros: descendants(trace_id, span_id), ancestors(trace_id, span_id), span_path(trace_id, span_id)"
)


def _lines(interactive: bool) -> Iterator[Callable[[str], str]]:
    """Yields a read function per line: prompt_toolkit on a terminal, plain input() otherwise."""
    if interactive:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.lexers import PygmentsLexer
        from pygments.lexers.sql import SqlLexer

        HISTORY_FILE.parent.mkdir(parents=True, exist_ok=True)
        session: PromptSession[str] = PromptSession(
            history=FileHistory(str(HISTORY_FILE)), lexer=PygmentsLexer(SqlLexer)
        )
        while True:
            yield lambda prompt: session.prompt(prompt)
    while True:
        yield lambda prompt: input()


def _command(dataset: Dataset, line: str, console: Console) -> bool:
    """Run a dot command; returns False when the shell should stop."""
    name, _, argument = line.strip().partition(" ")
    if name in (".quit", ".exit"):
        return False
    if name == ".tables":
        console.print("  ".join(dataset.tables()))
    elif name == ".schema":
        if not argument.strip():
            raise AnalysisError(".schema needs a view name, e.g. .schema spans")
        for column, type_ in dataset.schema(argument.strip()):
            console.print(f"{column}  [dim]{type_}[/]")
    elif name == ".help":
        console.print(HELP)
    else:
        raise AnalysisError(f"unknown command {name}; try .help")
    return True


def dot_query(dataset: Dataset, line: str) -> pa.Table:
    """``.tables`` or ``.schema VIEW`` given as ``tailcut sql``'s query: its answer as rows.

    ``.tables`` gives one ``name`` per view; ``.schema VIEW`` a ``column`` and ``type`` per column, so
    ``--format json|csv`` and ``--out`` apply as to any query.
    """
    import pyarrow as pa

    name, _, argument = line.strip().partition(" ")
    if name == ".tables":
        return pa.table({"name": pa.array(dataset.tables(), pa.string())})
    if name == ".schema":
        if not argument.strip():
            raise AnalysisError(".schema needs a view name, e.g. .schema spans")
        columns = dataset.schema(argument.strip())
        return pa.table(
            {"column": [c for c, _ in columns], "type": [t for _, t in columns]},
            schema=pa.schema([("column", pa.string()), ("type", pa.string())]),
        )
    raise AnalysisError(f"{name} works in the shell only; as a query give .tables or .schema VIEW")


def run_shell(dataset: Dataset, console: Console, *, interactive: bool) -> None:
    """Read statements until ``.quit`` or end of input, printing each result as a table.

    Parameters
    ----------
    dataset : Dataset
        The data dir to query.
    console : Console
        Where results and errors go.
    interactive : bool
        Use prompt_toolkit (a terminal) rather than plain line reads (piped input).
    """
    from tailcut.errors import TailcutError

    if interactive:
        console.print(f"tailcut sql on {dataset.location}. {HELP}")
    pending: list[str] = []
    for read in _lines(interactive):
        try:
            line = read("  ...> " if pending else "tailcut> ")
        except KeyboardInterrupt:
            pending.clear()
            continue
        except EOFError:
            break
        if not pending and line.strip().startswith("."):
            try:
                if not _command(dataset, line, console):
                    break
            except TailcutError as exc:
                console.print(f"[red]Error:[/] {exc}", highlight=False)
            continue
        if not line.strip() and not pending:
            continue
        pending.append(line)
        if not line.rstrip().endswith(";"):
            continue
        statement = "\n".join(pending)
        pending.clear()
        try:
            print_table(dataset.sql_arrow(statement), console)
        except TailcutError as exc:
            console.print(f"[red]Error:[/] {exc}", highlight=False)
