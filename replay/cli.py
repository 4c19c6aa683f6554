"""The replay command: ``tailcut replay`` (Python twin: :func:`tailcut.replay.run_replay`)."""

from __future__ import annotations

import json

import click

from tailcut.cli import format_option
from tailcut.errors import TailcutError


@click.command()
@click.argument("corpus", type=click.Path(path_type=str))
@click.option(
    "--agent",
    required=True,
    metavar="MODULE:FUNCTION",
    help="The agent entry point, called with each run's recorded input.",
)
@click.option(
    "--mode",
    type=click.Choice(["recorded", "live", "cut"]),
    default="recorded",
    show_default=True,
    help="recorded: serve every boundary; live: run every boundary; cut: run --live boundaries only.",
)
@click.option(
    "--live",
    "live",
    multiple=True,
    metavar="BOUNDARY",
    help="Cut mode: a boundary that runs live, kind:name or kind:name#occurrence (repeatable).",
)
@click.option("-n", "n", type=click.IntRange(min=1), default=1, show_default=True, help="Reruns per trace.")
@click.option(
    "--reset",
    metavar="MODULE:FUNCTION",
    help="Called before every rerun (with the run input if it takes an argument).",
)
@click.option(
    "--check",
    metavar="MODULE:FUNCTION",
    help="Judges each rerun: check(rerun) -> bool or (bool, message). Default: the outcome reproduces.",
)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=str), help="Write one row per rerun to this Parquet."
)
@click.option("--trace", "traces", multiple=True, metavar="ID", help="Replay only this trace (repeatable).")
@click.option("--no-verify", is_flag=True, help="Do not check the corpus files against their sha256.")
@click.option(
    "--canary/--no-canary",
    default=None,
    help="Corrupt one stored response and check the replay notices (default: on in recorded mode).",
)
@click.option(
    "--on-divergence",
    type=click.Choice(["stop", "continue"]),
    default=None,
    help="At a divergence, stop the run or serve the record anyway (default: stop; cut mode: continue).",
)
@click.option(
    "--relax",
    multiple=True,
    metavar="BOUNDARY",
    help="Match this boundary on boundary and occurrence only, not its request (repeatable).",
)
@click.option(
    "--strict/--no-strict",
    default=True,
    show_default=True,
    help="Exit with status 1 when any rerun fails its check or diverges; --no-strict only reports.",
)
@format_option("table: lines for a reader; json: one object with stable keys; csv: one row per trace.")
def replay(
    corpus: str,
    agent: str,
    mode: str,
    live: tuple[str, ...],
    n: int,
    reset: str | None,
    check: str | None,
    out: str | None,
    traces: tuple[str, ...],
    no_verify: bool,
    canary: bool | None,
    on_divergence: str | None,
    relax: tuple[str, ...],
    strict: bool,
    fmt: str,
) -> None:
    """Replay the runs of CORPUS: recorded, live or cut-point.

    Each replayable run is rerun N times: the reset hook restores the environment, the agent is called
    with the run's recorded input, and the check judges the rerun. Each trace is reported as a rate with
    its denominator and mode, e.g. "intermittent 3/10 (live)", with a Wilson interval; a rerun in which
    anything diverged from the record is counted as diverged, never as passed. Python twin:
    tailcut.replay.run_replay.

    The agent entry point is called with the run's recorded input (decoded JSON) as its one argument;
    it should open tailcut.run itself (or a root span of its own instrumentation): crossings outside
    any run are numbered per rerun.

    Exit status: 0 every rerun passed; 1 a rerun failed or diverged (report only with --no-strict), the
    canary failed, or the replay could not start; 3 no trace of the corpus could be replayed; 130
    interrupted.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tailcut.replay._output import exit_status, report_csv, report_dict
    from tailcut.replay._runner import run_replay

    console = Console(stderr=True)
    progress = Progress(
        TextColumn(f"replaying ({mode})"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    task = progress.add_task("replay", total=None)
    with progress:
        try:
            report = run_replay(
                corpus,
                agent,
                mode=mode,
                live=live,
                n=n,
                reset=reset,
                check=check,
                traces=traces or None,
                out=out,
                verify=not no_verify,
                canary=canary,
                on_divergence=on_divergence,
                match_on=dict.fromkeys(relax, ("boundary", "occurrence")) or None,
                on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        except TailcutError as exc:
            raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(report_dict(report, strict=strict), indent=2))
    elif fmt == "csv":
        click.echo(report_csv(report), nl=False)
    else:
        for line in report.summary_lines():
            click.echo(line)
    if report.canary is not None and report.canary.failed:
        click.secho(str(report.canary), fg="red", bold=True, err=True)
    if report.nothing_replayed:
        click.secho(
            "tailcut replay: no trace of the corpus could be replayed (see why each was skipped)", err=True
        )
    raise SystemExit(exit_status(report, strict=strict))
