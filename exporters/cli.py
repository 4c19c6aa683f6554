"""The exporters' commands: ``tailcut export-corpus``, and ``tailcut ingest`` as :func:`ingest_command`
builds it (registered by :mod:`tailcut.analysis.cli`, which wires in the analysis work)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from tailcut._cli_options import data_option, out_option
from tailcut.errors import TailcutError

if TYPE_CHECKING:
    from tailcut.exporters._hooks import WriterHook
    from tailcut.exporters._ingest import IngestReport

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
#: Why an exported trace is in its corpus (the manifest says so for every trace).
EXPORT_REASON = "exported by id"

#: Show a progress bar (on a terminal) from this much input on, or for several files.
_PROGRESS_BYTES = 16 * 1024 * 1024


def ingest_command(
    hooks: Callable[[], Sequence[WriterHook]] = tuple, after: Callable[[str], None] | None = None
) -> click.Command:
    """The ``tailcut ingest`` command, writing through the post-write ``hooks()`` it makes for each run and
    calling ``after(data_dir)`` once files were written.

    Storage computes nothing from what it writes: :mod:`tailcut.analysis.cli` registers this command with
    the classifier's per-trace features as hooks and the findings refresh as ``after``.
    """

    @click.command("ingest")
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
    @click.option(
        "--data",
        "data_dir",
        required=True,
        type=click.Path(file_okay=False, path_type=str),
        help="The data dir to write to, a path or s3://bucket/prefix (created if missing).",
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
        report = _run_ingest(files, data_dir, skip_bad, payload_dirs, hooks())
        if report.files and after is not None:
            after(data_dir)
        click.echo(
            f"ingested {report.spans} spans in {report.traces} traces from {report.files} file(s) "
            f"into {data_dir}"
        )
        if report.skipped:
            click.echo(f"skipped {report.skipped} bad record(s); first: {report.problems[0]}")
        if report.payloads_missing:
            click.echo(f"{report.payloads_missing} offloaded payload(s) were not found in the payload stores")

    return ingest


def _run_ingest(
    files: tuple[str, ...],
    data_dir: str,
    skip_bad: bool,
    payload_dirs: tuple[str, ...],
    hooks: Sequence[WriterHook],
) -> IngestReport:
    """:func:`tailcut.exporters.ingest` with a progress bar on a terminal (several files, or large ones)."""
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
            return run_ingest(
                files,
                data_dir,
                skip_bad=skip_bad,
                payload_stores=[PayloadStore(d) for d in payload_dirs],
                progress=lambda done: progress.advance(task, done),
                hooks=hooks,
            )
        except TailcutError as exc:
            raise click.ClickException(str(exc)) from None


@click.command("export-corpus")
@data_option("The data dir the traces were written to (a path or s3://bucket/prefix).")
@click.option(
    "--trace",
    "trace_ids",
    multiple=True,
    required=True,
    metavar="ID",
    help="A trace to export, 32 hex characters (repeatable).",
)
@out_option("The corpus directory to create.", type=click.Path(path_type=str), required=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing corpus at --out.")
def export_corpus(data_dir: str, trace_ids: tuple[str, ...], out: str, overwrite: bool) -> None:
    """Write the given traces of a data dir as a replay corpus.

    Each trace keeps its inclusion probability and baseline membership from the data dir's traces
    table. A trace that cannot be replayed (missing spans or payloads, content capture off) is listed
    in the manifest with the reason, never dropped. Python twin: tailcut.exporters.corpus.write_corpus.
    """
    from tailcut.exporters.corpus import Selection, write_corpus

    ids = [trace_id.strip().lower() for trace_id in trace_ids]
    bad = next((t for t in ids if not _TRACE_ID.match(t)), None)
    if bad is not None:
        raise click.ClickException(f"--trace {bad!r} is not a trace id (32 hex characters)")
    try:
        sampling = _sampling(data_dir, ids)
        selections = [
            Selection(
                trace_id,
                EXPORT_REASON,
                inclusion_probability=sampling.get(trace_id, {}).get("inclusion_probability", 1.0),
                baseline=sampling.get(trace_id, {}).get("baseline", False),
            )
            for trace_id in dict.fromkeys(ids)
        ]
        summary = write_corpus(data_dir, selections, out, overwrite=overwrite)
    except TailcutError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"wrote corpus {summary.path}: {summary.runs} run(s), {summary.envelopes} boundary crossing(s)"
    )
    for trace_id, why in summary.not_replayable.items():
        click.echo(f"not replayable: {trace_id}: {why}")


def _sampling(data_dir: str, trace_ids: list[str]) -> dict[str, dict[str, Any]]:
    """π and baseline membership of each trace, from its latest row in the data dir's ``traces`` table."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from tailcut.exporters._errors import DataDirError
    from tailcut.exporters._location import location, read_table

    place = location(data_dir)
    try:
        table = read_table(
            place,
            "traces",
            ["trace_id", "inclusion_probability", "baseline", "decided_at"],
            ds.field("trace_id").isin(trace_ids),
        )
    except (OSError, pa.ArrowException) as exc:
        raise DataDirError(f"cannot read the traces table of {place}: {exc}") from None
    latest_last = table.sort_by([("decided_at", "ascending")]).drop_columns(["decided_at"])
    found: dict[str, dict[str, Any]] = {}
    for row in latest_last.to_pylist():
        found[row["trace_id"]] = row  # a later decision about the same trace wins
    return found
