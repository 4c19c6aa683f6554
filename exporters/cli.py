"""The exporters' commands: ``tailcut ingest``."""

from __future__ import annotations

import os

import click

from tailcut.errors import TailcutError

#: Show a progress bar (on a terminal) from this much input on, or for several files.
_PROGRESS_BYTES = 16 * 1024 * 1024


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option(
    "--data",
    "data_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=str),
    help="The data dir to write to (created if missing).",
)
@click.option(
    "--skip-bad", is_flag=True, help="Skip bad records (and files) instead of stopping at the first."
)
@click.option(
    "--payloads",
    "payload_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=str),
    help="A payload store to copy offloaded payloads from (repeatable).",
)
def ingest(files: tuple[str, ...], data_dir: str, skip_bad: bool, payload_dirs: tuple[str, ...]) -> None:
    """Write OTLP JSON or protobuf FILES into a data dir.

    Reads OTLP/JSON (a request body, or JSON lines as the OpenTelemetry Collector's file exporter
    writes them) and OTLP protobuf (ExportTraceServiceRequest or TracesData), gzip-compressed or not.
    Each file is checked whole before any of it is written. Python twin:
    tailcut.exporters.ingest.
    """
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from tailcut.exporters._ingest import ingest as run_ingest
    from tailcut.payloads import PayloadStore

    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise click.ClickException(f"{missing[0]}: no such file")
    total = sum(os.path.getsize(f) for f in files)
    console = Console(stderr=True)
    show = console.is_terminal and (len(files) > 1 or total >= _PROGRESS_BYTES)
    progress = Progress(
        TextColumn("ingesting"),
        BarColumn(),
        DownloadColumn(),
        console=console,
        transient=True,
        disable=not show,
    )
    with progress:
        task = progress.add_task("ingest", total=total)
        try:
            report = run_ingest(
                files,
                data_dir,
                skip_bad=skip_bad,
                payload_stores=[PayloadStore(d) for d in payload_dirs],
                progress=lambda done: progress.advance(task, done),
            )
        except TailcutError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(
        f"ingested {report.spans} spans in {report.traces} traces from {report.files} file(s) into {data_dir}"
    )
    if report.skipped:
        click.echo(f"skipped {report.skipped} bad record(s); first: {report.problems[0]}")
    if report.payloads_missing:
        click.echo(f"{report.payloads_missing} offloaded payload(s) were not found in the payload stores")
