"""What the ``tailcut`` commands share: the ``--data``/``--format``/``--out`` flags and the exit-code rule.

Each flag is declared once here and used by every command that takes it (the help text may say what the
command does with it; name, destination and default stay the same). The exit-code rule belongs to the
commands that report (``sql``, ``tree``, ``classify``, ``report``, ``compare``, ``select``, ``replay``),
each built with ``cls=ReportingCommand``:

* ``0``: success, and no ``--fail-on`` verdict fired;
* ``1``: a ``--fail-on`` verdict fired (``replay``: a rerun failed its check or diverged, or the canary
  failed; ``3`` no trace could be replayed, ``130`` interrupted, as its help says);
* ``2``: the command could not run (a bad option, an unknown group, a missing or empty data dir, bad SQL, a
  damaged file): one line on stderr says why, and with ``--format json`` (``tree``: ``--json``) stdout
  gets one JSON object, ``{"error": "<that line>"}``.

Like the group, this module imports only click and the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

import click

from tailcut.errors import TailcutError

#: The exit statuses of a reporting command.
EXIT_OK: Final = 0
EXIT_FIRED: Final = 1
EXIT_COULD_NOT_RUN: Final = 2
#: What ``--help`` of every reporting command ends with.
EXIT_RULE: Final = (
    "Exit status: 0 success (no --fail-on verdict fired); 1 a --fail-on verdict fired; 2 could not run "
    "(bad option, unknown group, missing or empty data, bad SQL): one line on stderr says why, and with "
    '--format json stdout gets {"error": "..."}.'
)
#: The ``--data`` help most commands show.
DATA_HELP: Final = "The data dir: a local path, or s3://bucket/prefix (standard AWS variables)."

Decorator = Callable[[Any], Any]


def data_option(
    help: str = DATA_HELP,
    *,
    required: bool = True,
    dest: str = "data_dir",
    metavar: str | None = "DIR",
    type: click.ParamType | None = None,
) -> Decorator:
    """``--data DIR``: the data dir a command reads or writes (parameter ``data_dir`` unless ``dest``)."""
    return click.option(
        "--data", dest, required=required, default=None, metavar=metavar, type=type, help=help
    )


def format_option(help_text: str, choices: Sequence[str] = ("table", "json", "csv")) -> Decorator:
    """``--format table|json|csv`` (parameter ``fmt``, default ``table``): how a command prints its result."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default="table",
        show_default=True,
        help=help_text,
    )


def out_option(
    help_text: str, *, type: click.ParamType | None = None, required: bool = False, default: Any = None
) -> Decorator:
    """``--out PATH`` (parameter ``out``): where a command writes its file (default type) or directory."""
    return click.option(
        "--out",
        type=type or click.Path(dir_okay=False),
        required=required,
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def wants_json(args: Sequence[str]) -> bool:
    """Whether raw command-line ``args`` ask for JSON (``--format json``, ``--format=json``, ``--json``)."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("--json", "--format=json") or (
            arg == "--format" and i + 1 < len(args) and args[i + 1] == "json"
        ):
            return True
    return False


def _json_error(message: str) -> None:
    click.echo(json.dumps({"error": message}))


class ReportingCommand(click.Command):
    """A command that follows the exit-code rule of this module: what could not run exits 2, says why in
    one line on stderr and, when JSON was asked for, as ``{"error": ...}`` on stdout. Its ``--help``
    ends with the rule (:data:`EXIT_RULE`, or the ``epilog`` given)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_RULE)
        super().__init__(*args, **kwargs)

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        raw = list(args)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # click prints it and exits 2
            if wants_json(raw):
                _json_error(exc.format_message())
            raise

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tailcut.json"] = wants_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if ctx.meta.get("tailcut.json"):
                _json_error(exc.format_message())
            raise
        except TailcutError as exc:
            message = str(exc)
            if ctx.meta.get("tailcut.json"):
                _json_error(message)
            click.echo(f"Error: {message}", err=True)
            ctx.exit(EXIT_COULD_NOT_RUN)
