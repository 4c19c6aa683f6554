"""The replay commands: ``tailcut replay`` and ``tailcut validate`` (Python twins:
:func:`tailcut.replay.run_replay`, :func:`tailcut.replay.validate`)."""

from __future__ import annotations

import json
from typing import NoReturn

import click

from tailcut._cli_options import ReportingCommand, data_option, format_option, out_option
from tailcut.errors import TailcutError

#: How ``tailcut replay`` exits (its ``1`` is about the reruns: replay has no ``--fail-on``).
REPLAY_EXIT_RULE = (
    "Exit status: 0 every rerun passed; 1 a rerun failed or diverged (report only with --no-strict) or "
    "the canary failed; 2 the replay could not run (a bad option, a refused or missing corpus): one line "
    'on stderr says why, and with --format json stdout gets {"error": "..."}; 3 no trace of the corpus '
    "could be replayed; 130 interrupted."
)


@click.command(cls=ReportingCommand, epilog=REPLAY_EXIT_RULE)
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
@out_option("Write one row per rerun to this Parquet.", type=click.Path(dir_okay=False, path_type=str))
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
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tailcut.analysis._output import emit
    from tailcut.replay._records import CSV_COLUMNS, exit_status, report_dict, report_rows
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
    if fmt != "table":
        emit(fmt, report_dict(report, strict=strict), report_rows(report), columns=CSV_COLUMNS)
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


@click.command()
@data_option("The data dir the incidents were recorded in.")
@click.option(
    "--incident",
    "incidents",
    multiple=True,
    metavar="TRACE_ID",
    help="An incident to validate the fix against (repeatable); with --corpus, the ones of it to take.",
)
@click.option(
    "--corpus",
    type=click.Path(path_type=str),
    metavar="INCIDENTS",
    help="An incident corpus instead of --incident.",
)
@click.option(
    "--agent", required=True, metavar="MODULE:FUNCTION", help="The new code: the candidate fix's entry point."
)
@click.option(
    "--baseline-agent",
    required=True,
    metavar="MODULE:FUNCTION",
    help="The old code: the entry point the incidents were recorded with.",
)
@click.option(
    "--live",
    multiple=True,
    metavar="BOUNDARY",
    help="Cut every incident here instead of at its finding's boundary (repeatable).",
)
@click.option(
    "--golden", type=click.Path(path_type=str), metavar="CORPUS", help="A golden corpus of unrelated traces."
)
@click.option(
    "--golden-size",
    type=click.IntRange(min=0),
    metavar="K",
    help="Draw K traces of the data dir's baseline slice as the golden slice (default 20; 0: none).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the golden slice's draw.")
@click.option(
    "--check",
    metavar="MODULE:FUNCTION",
    help="Judges each rerun: check(rerun) -> bool or (bool, message). Default: no raise, outcome not fail.",
)
@click.option("--reset", metavar="MODULE:FUNCTION", help="Called before every rerun (with the run input).")
@click.option(
    "-n", "n", type=click.IntRange(min=1), default=3, show_default=True, help="Reruns per trace and agent."
)
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    metavar="USD",
    help="Refuse to start when the live model calls are estimated above this (or cannot be priced).",
)
@format_option("table: lines for a reader; json: one object with stable keys.", ("table", "json"))
@out_option("Write one row per rerun to this Parquet.", type=click.Path(dir_okay=False, path_type=str))
def validate(
    data_dir: str,
    incidents: tuple[str, ...],
    corpus: str | None,
    agent: str,
    baseline_agent: str,
    live: tuple[str, ...],
    golden: str | None,
    golden_size: int | None,
    seed: int,
    check: str | None,
    reset: str | None,
    n: int,
    max_cost: float | None,
    fmt: str,
    out: str | None,
) -> None:
    """Validate a fix: the new agent against recorded incidents, the old one as the control.

    Each incident is replayed cut-point at the boundary its finding points at (or --live): N reruns
    with the new agent must pass the check, N with the baseline agent must still fail it (if the
    baseline passes, the test does not exercise the change). A golden slice of unrelated traces is
    replayed by both agents at the same boundaries: a trace the new agent now fails, or where it
    diverges after the cut and the baseline did not, is broken. Before any model call runs live its
    estimated cost is printed (recorded tokens, pricing.toml); --max-cost refuses above it. Python
    twin: tailcut.replay.validate.

    Verdicts: resolved, not resolved, does not exercise the change, resolved, but breaks N of M
    unrelated. Exit status: 0 resolved with nothing broken; 1 any other verdict; 2 the validation
    could not run (one line says why; with --format json, an object with an "error" key).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tailcut.replay._validate import EXIT_COULD_NOT_RUN
    from tailcut.replay._validate import validate as run_validation
    from tailcut.replay._validation_output import summary_lines, validation_dict

    def could_not_run(message: str) -> NoReturn:
        if fmt == "json":
            click.echo(json.dumps({"error": message}))
        else:
            click.echo(f"Error: {message}", err=True)
        raise SystemExit(EXIT_COULD_NOT_RUN)

    if golden is not None and golden_size is not None:
        could_not_run("give --golden CORPUS or --golden-size K, not both")
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("validating (cut)"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    task = progress.add_task("validate", total=None)
    try:
        with progress:
            validation = run_validation(
                data_dir,
                agent=agent,
                baseline_agent=baseline_agent,
                incidents=incidents,
                corpus=corpus,
                live=live,
                golden=golden,
                golden_size=golden_size,
                seed=seed,
                check=check,
                reset=reset,
                n=n,
                max_cost=max_cost,
                out=out,
                on_estimate=lambda estimate: console.print(str(estimate), highlight=False, soft_wrap=True),
                on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
    except TailcutError as exc:
        could_not_run(str(exc))
    if fmt == "json":
        click.echo(json.dumps(validation_dict(validation), indent=2))
    else:
        for line in summary_lines(validation):
            click.echo(line)
    raise SystemExit(validation.exit_code)
