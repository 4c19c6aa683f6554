"""``tailcut demo``: run the whole pipeline on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from tailcut._cli_options import out_option
from tailcut.demo.run import DEFAULT_RUNS, DemoOptions


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--runs", type=click.IntRange(min=50), default=DEFAULT_RUNS, show_default=True, help="Agent runs."
)
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="Agent threads.")
@out_option(
    "Output directory (data dir, report, corpus, replay results). A previous demo's is replaced.",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("tailcut-demo"),
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the ticket mix.")
@click.option("--profile", is_flag=True, help="Print each stage's wall time and share of the whole.")
def demo(runs: int, workers: int, out: Path, seed: int, profile: bool) -> None:
    """Run the whole pipeline on this machine, with failures injected at known rates.

    A scripted model serves the OpenAI API on loopback; a fleet of support agents (real openai SDK,
    instrumented with tailcut) sends its traces over OTLP to `tailcut collect`, which keeps every
    failed and anomalous trace plus a 5% baseline slice. The demo then classifies the failures,
    estimates their rates next to the injected true rates, selects a replay corpus, replays it,
    tests a fix of the unsafe-refund incident with cut-point replay, and ends with `tailcut validate`
    of the fixed harness against one incident of each of its six faults.
    """
    from tailcut.analysis._output import console as make_console
    from tailcut.demo.run import run_demo

    console = make_console()  # not a terminal: as wide as its tables, none cut
    run_demo(DemoOptions(runs=runs, workers=workers, out=out, seed=seed, profile=profile), console)
