"""The ``tailcut`` command group.

It lives in the SDK but imports nothing above it: each command name maps to the ``module:function`` of
the component that owns it (each component keeps its commands in its own ``cli.py``), loaded only when
that command runs, so ``tailcut --help`` is fast and ``import tailcut`` stays light. A command whose
optional dependencies are not installed says which ``pip install`` fixes it; any other import error
propagates with its traceback.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from tailcut._cli_options import format_option
from tailcut._version import __version__
from tailcut.errors import MissingDependencyError, TailcutError

#: command name -> (``module:function``, one-line help shown by ``tailcut --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("tailcut.demo.cli:demo", "Run the whole pipeline on this machine with a scripted model."),
    "collect": ("tailcut.collector.cli:collect", "Receive OTLP, tail-sample traces and write Parquet."),
    "ingest": ("tailcut.analysis.cli:ingest", "Write OTLP JSON or protobuf files into a data dir."),
    "sql": ("tailcut.analysis.cli:sql", "Query the data dir with DuckDB SQL (shell without a query)."),
    "tree": ("tailcut.analysis.cli:tree", "Show one trace as an indented span tree."),
    "classify": ("tailcut.analysis.cli:classify", "Find failure categories in the kept traces."),
    "report": ("tailcut.analysis.cli:report", "Traffic, decisions and failure rates (terminal and HTML)."),
    "compare": ("tailcut.analysis.cli:compare", "Compare failure rates between revisions or replay results."),
    "select": ("tailcut.analysis.cli:select", "Select incident and baseline traces into a replay corpus."),
    "export-corpus": ("tailcut.exporters.cli:export_corpus", "Write given traces as a replay corpus."),
    "replay": ("tailcut.replay.cli:replay", "Replay a corpus: recorded, live or cut-point."),
    "validate": ("tailcut.replay.cli:validate", "Test a fix against recorded incidents: one verdict."),
    "ui": ("tailcut.ui.cli:ui", "Browse traces, spans, findings and replays in a local web viewer."),
}

__all__ = ["COMMANDS", "LazyGroup", "cli", "format_option"]


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked (click's lazy-group pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target[0].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if not is_missing_dependency(exc):
                raise  # a bug inside tailcut: its traceback is what a report needs
            raise click.ClickException(_missing_dependency_message(cmd_name, exc)) from None
        command: click.Command = getattr(module, attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands from the table, so ``tailcut --help`` imports no component."""
        rows = [(name, help_) for name, (_, help_) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TailcutError as exc:
            raise click.ClickException(str(exc)) from None


def is_missing_dependency(exc: ImportError) -> bool:
    """Whether ``exc`` says that a package outside tailcut is not installed.

    Only a ``ModuleNotFoundError`` for a module of another package qualifies (or tailcut's own
    :class:`~tailcut.errors.MissingDependencyError`); a tailcut module that fails to import, or a name
    missing from a module, is a bug to report, not an install to suggest.
    """
    if isinstance(exc, MissingDependencyError):
        return True
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return False
    return exc.name.partition(".")[0] != "tailcut"


def _missing_dependency_message(command: str, exc: ImportError) -> str:
    missing = exc.name or str(exc)
    extra = "demo" if command == "demo" else "pipeline"
    if isinstance(exc, MissingDependencyError):
        return str(exc)
    return f'`tailcut {command}` needs {missing!s}: install it with pip install "tailcut[{extra}]"'


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailcut")
def cli() -> None:
    """tailcut: record, tail-sample, analyse and replay LLM agent runs.

    Instrument agents with the SDK (`import tailcut`), run `tailcut collect` to keep every failed
    and anomalous trace plus a uniform baseline slice, query the Parquet it writes with `tailcut sql`,
    and replay selected runs with `tailcut replay`. `tailcut demo` shows all of it on this machine.
    """
