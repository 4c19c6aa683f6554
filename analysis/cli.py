"""The analysis commands: ``tailcut sql``, ``tree``, ``classify``, ``report``, ``compare``, ``select``, and
``ingest`` (the exporters' command, registered here with the per-trace features and findings refresh).

Each command opens a :class:`~tailcut.analysis.Dataset`, calls one library function and renders its
result. Each is a :class:`~tailcut._cli_options.ReportingCommand`: a library error
(:class:`~tailcut.errors.TailcutError`) is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

import click

from tailcut._cli_options import ReportingCommand, data_option, format_option, out_option
from tailcut.exporters.cli import ingest_command

_report_format_option = format_option(
    "table for people; json (one object, keys in the README) or csv (one row per item) for machines."
)


def _emit(fmt: str, record: Any, rows: Any) -> None:
    from tailcut.analysis._output import emit

    emit(fmt, record, rows)


def _console() -> Any:
    from tailcut.analysis._output import console

    return console()


def _open(data_dir: str) -> Any:
    from tailcut.analysis import Dataset

    return Dataset(data_dir)


# ------------------------------------------------------------------------------------------------------ sql


@click.command(cls=ReportingCommand)
@click.argument("query", required=False)
@data_option()
@format_option("Output format (parquet needs --out).", ("table", "csv", "json", "parquet"))
@out_option("Write the result to this file instead of stdout.")
def sql(query: str | None, data_dir: str, fmt: str, out: str | None) -> None:
    """Run QUERY (DuckDB SQL) over the data dir, or open a shell without one.

    Views: spans, traces, llm_calls, tool_calls, retrievals, kept_traces, baseline_traces, findings
    (DATA/findings/findings.parquet, reclassified first when new files landed). Table macros:
    descendants(trace_id, span_id), ancestors(trace_id, span_id), span_path(trace_id, span_id). The shell
    runs a statement once a line ends with ';' and knows .tables, .schema VIEW, .help and .quit;
    '.tables' and '.schema VIEW' also work as QUERY. Errors keep DuckDB's hints ("Did you mean"). Times
    keep their nanoseconds. Python twin: tailcut.analysis.Dataset.sql.
    """
    from tailcut.analysis._output import print_table, to_csv, to_json, write_file

    dataset = _open(data_dir)
    if query is None:
        from tailcut.analysis._shell import run_shell

        run_shell(dataset, _console(), interactive=sys.stdin.isatty())
        return
    if query.lstrip().startswith("."):
        from tailcut.analysis._shell import dot_query

        table = dot_query(dataset, query)
    else:
        table = dataset.sql_arrow(query)
    if out is not None:
        if fmt == "table":
            fmt = "parquet" if out.endswith(".parquet") else "json" if out.endswith(".json") else "csv"
        write_file(table, out, fmt)  # type: ignore[arg-type]
        click.echo(f"wrote {table.num_rows} rows to {out}", err=True)
    elif fmt == "table":
        print_table(table, _console())
    elif fmt == "parquet":
        raise click.UsageError("--format parquet writes a file: give --out FILE")
    else:
        click.echo((to_csv(table) if fmt == "csv" else to_json(table)).decode(), nl=False)


# ----------------------------------------------------------------------------------------------------- tree


@click.command(cls=ReportingCommand)
@click.argument("trace_id")
@data_option()
@click.option("--json", "as_json", is_flag=True, help="Print the tree as JSON instead.")
@click.option("--payloads", is_flag=True, help="Show each span's request and response (abridged).")
@click.option("--full", is_flag=True, help="With --payloads: whole payloads, not their first 200 characters.")
def tree(trace_id: str, data_dir: str, as_json: bool, payloads: bool, full: bool) -> None:
    """Show trace TRACE_ID as an indented span tree.

    Each span shows its kind, name, boundary#occurrence, duration, tokens, status and the first line of
    its error; --payloads adds what it sent and received (offloaded payloads resolved), abridged to 200
    characters unless --full. Times keep their nanoseconds. Python twin: tailcut.analysis.Dataset.tree.
    """
    import orjson

    span_tree = _open(data_dir).tree(trace_id.lower(), payloads=payloads, full=full)
    if as_json:
        click.echo(orjson.dumps(span_tree.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        span_tree.render(_console())


# ------------------------------------------------------------------------------------------------- classify


@click.command(cls=ReportingCommand)
@data_option()
@out_option("Write every finding to this file (.parquet, .csv, .json).")
@click.option("--show", default=20, show_default=True, help="Findings to list in the terminal.")
@click.option("--loop-min-repeats", type=int, help="Identical tool calls that make a tool_loop (default 3).")
@click.option("--cost-z", type=float, help="Robust z of tokens or LLM calls for cost_blowup (default 6).")
@click.option("--score-threshold", type=float, help="outcome_score below which a run degraded (default 0.5).")
@click.option("--min-baseline", type=int, help="Reference traces an agent needs for z-scores (default 20).")
@click.option(
    "--max-reference",
    type=int,
    help="Reference traces per agent at most; of more, a sub-slice of about this many (default 5000).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Collector config whose processors.tailcut.observation_rules extend the failure observations.",
)
@_report_format_option
def classify(
    data_dir: str,
    out: str | None,
    show: int,
    fmt: str,
    loop_min_repeats: int | None,
    cost_z: float | None,
    score_threshold: float | None,
    min_baseline: int | None,
    max_reference: int | None,
    config_path: str | None = None,
) -> None:
    """Find failure categories in the kept traces: first span, harness layer, evidence.

    Categories: error, schema_violation, schema_drift, tool_loop, cost_blowup, silent_degradation.
    --format json prints {kept_traces, summary, findings}; csv prints every finding. Python twin:
    tailcut.analysis.classify (the rule table is in its docstring).
    """
    from rich.table import Table

    from tailcut.analysis._classify import Thresholds
    from tailcut.analysis._output import to_csv, to_rows, write_file

    changes = {
        "loop_min_repeats": loop_min_repeats,
        "cost_z": cost_z,
        "score_threshold": score_threshold,
        "min_baseline": min_baseline,
        "max_reference": max_reference,
    }
    given: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
    if config_path is not None:
        from tailcut.exporters.conventions.observations import rules_from_config_file

        try:
            given["observation_rules"] = rules_from_config_file(config_path)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    thresholds = Thresholds(**given)
    dataset = _open(data_dir)
    findings = dataset.classify(thresholds=thresholds)
    console = _console()
    summary = dataset.sql_arrow(
        "SELECT category, count(*) AS findings, string_agg(DISTINCT layer, ', ' ORDER BY layer) AS layers "
        "FROM findings GROUP BY 1 ORDER BY 2 DESC, 1"
    )
    kept = dataset.sql_arrow("SELECT count(DISTINCT trace_id) AS n FROM spans")["n"][0].as_py()
    if out is not None:
        out_fmt = "parquet" if out.endswith(".parquet") else "json" if out.endswith(".json") else "csv"
        write_file(findings.to_arrow(), out, out_fmt)  # type: ignore[arg-type]
        click.echo(f"wrote {len(findings)} findings to {out}", err=fmt != "table")
    if fmt == "csv":
        click.echo(to_csv(findings.to_arrow()).decode(), nl=False)
        return
    if fmt == "json":
        summary_rows = [
            {**row, "layers": row["layers"].split(", ") if row["layers"] else []}
            for row in summary.to_pylist()
        ]
        _emit(
            "json",
            {"kept_traces": kept, "summary": summary_rows, "findings": to_rows(findings.to_arrow())},
            [],
        )
        return
    table = Table(title=f"findings in {kept} kept traces", title_justify="left")
    for column in ("category", "findings", "layers"):
        table.add_column(column)
    for row in summary.to_pylist():
        table.add_row(row["category"], str(row["findings"]), row["layers"])
    console.print(table)
    listing = Table(show_lines=False)
    for column in ("trace", "category", "first span", "layer", "evidence"):
        listing.add_column(column, overflow="fold")
    for row in findings.head(show).iter_rows(named=True):
        where = f"{row['boundary'] or row['span_name']}" + (
            f"#{row['occurrence']}" if row["occurrence"] else ""
        )
        listing.add_row(row["trace_id"], row["category"], where, row["layer"], row["evidence"])
    if show and len(findings):
        console.print(listing)


# --------------------------------------------------------------------------------------------------- report


@click.command(cls=ReportingCommand)
@data_option()
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False), help="Also write a self-contained HTML report."
)
@click.option(
    "--ui-url",
    metavar="URL",
    help="Where `tailcut ui` serves this data dir: the HTML report links traces and boundaries to it.",
)
@_report_format_option
def report(data_dir: str, html_path: str | None, ui_url: str | None, fmt: str) -> None:
    """Traffic seen vs kept, decisions, failure rates with intervals, layers and boundaries.

    Failure-category rates are shown twice: over kept traces weighted by 1/π (Horvitz–Thompson) and
    from the baseline slice. --html adds plots (tokens and latency, rates with intervals, decisions over
    time) as inline SVG; with --ui-url its traces and boundaries link to the trace viewer. --format json
    prints the whole report as one object, csv the category rates. Python twin:
    tailcut.analysis.build_report.
    """
    from tailcut.analysis._report import build_report

    if ui_url is not None and html_path is None:
        raise click.UsageError("--ui-url adds links to the HTML report: give --html FILE too")
    result = build_report(_open(data_dir))
    if fmt == "table":
        result.render_terminal(_console())
    else:
        _emit(fmt, result.to_record(), result.rows())
    if html_path is not None:
        click.echo(f"wrote {result.write_html(html_path, ui_url=ui_url)}", err=fmt != "table")


# -------------------------------------------------------------------------------------------------- compare


def _moment(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time, e.g. 2026-11-29T10:00") from None


def _fail_on(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> frozenset[str]:
    """``--fail-on`` labels: repeatable, each a comma-separated list of verdict labels."""
    from tailcut.analysis._verdict import VERDICT_LABELS

    labels = {label.strip() for value in values for label in value.split(",") if label.strip()}
    unknown = sorted(labels - set(VERDICT_LABELS))
    if unknown:
        raise click.BadParameter(
            f"unknown verdict {', '.join(map(repr, unknown))}; choose from {', '.join(VERDICT_LABELS)}"
        )
    return frozenset(labels)


@click.command(cls=ReportingCommand)
@data_option("The data dir (for --by and --window).", required=False)
@click.option(
    "--by", "column", metavar="COLUMN", help="Compare two values of this traces column (then give A B)."
)
@click.option(
    "--window", "windows", nargs=2, multiple=True, metavar="START END", help="A time window; give two."
)
@click.option(
    "--results", nargs=2, type=click.Path(dir_okay=False), metavar="A B", help="Two replay-result files."
)
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    metavar="LABELS",
    callback=_fail_on,
    help="Exit 1 when any verdict is one of these labels (comma-separated or repeated), e.g. regression.",
)
@click.option(
    "--plan",
    nargs=2,
    metavar="RATE DELTA",
    help="Print the traces per group needed to detect RATE → RATE + DELTA (0.05 or 5%); --data adds "
    "the data dir's policies.",
)
@_report_format_option
@click.argument("values", nargs=-1)
def compare(
    data_dir: str | None,
    column: str | None,
    windows: tuple[tuple[str, str], ...],
    results: tuple[str, str] | None,
    fail_on: frozenset[str],
    plan: tuple[str, str] | None,
    fmt: str,
    values: tuple[str, ...],
) -> None:
    """Compare failure rates of two groups, with a verdict and its intervals per category.

    \b
      tailcut compare --data DIR --by harness_revision v1 v2
      tailcut compare --data DIR --window 2026-11-01 2026-11-08 --window 2026-11-08 2026-11-15
      tailcut compare --results before.parquet after.parquet
      tailcut compare --data DIR --by harness_revision v1 v2 --fail-on regression --format json
      tailcut compare --plan 5% 2% --data DIR

    Verdicts: regression / improvement (the interval the verdict rests on excludes 0: for a census
    category, the exact count over every trace seen, kept or dropped; else the population estimate,
    policy-kept failures counted against every trace seen and the rest from the baseline slice),
    confined to tail sample (only the tail-kept interval does), no evidence. The six categories are one
    family: Holm's method holds the chance of any false regression or improvement at 5%. A group with
    no kept, failed or baseline-slice traces is compared all the same. Each row shows the smallest rise
    its test detects with 80% power, and a category without a verdict says what traffic would give one.

    Exit codes: 0 no --fail-on verdict fired; 1 a --fail-on verdict fired (for CI); 2 the comparison
    could not be made (bad option, unknown group, no data), with one line saying why and, with
    --format json, an object with an "error" key on stdout. Python twins: tailcut.analysis.compare_by,
    compare_windows, compare_results.
    """
    if plan:
        if column or windows or results or values or fail_on:
            raise click.UsageError("--plan RATE DELTA takes only --data and --format")
        comparison = _plan(plan, data_dir)
    else:
        comparison = _comparison(data_dir, column, windows, results, values)
    if fmt == "table":
        comparison.render_terminal(_console())
    else:
        _emit(fmt, comparison.to_record(), comparison.rows())
    failed = sorted(comparison.labels() & fail_on)
    if failed:
        click.echo(f"tailcut compare: failing on verdict {', '.join(failed)} (--fail-on)", err=True)
        sys.exit(1)


def _fraction(text: str, name: str) -> float:
    """``0.05`` or ``5%`` as a fraction."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter(f"{name} {text!r} is not a number such as 0.05 or 5%") from None


def _plan(plan: tuple[str, str], data_dir: str | None) -> Any:
    from tailcut.analysis._compare import plan as make_plan

    rate, delta = _fraction(plan[0], "RATE"), _fraction(plan[1], "DELTA")
    return make_plan(rate, delta, _open(data_dir) if data_dir else None)


def _comparison(
    data_dir: str | None,
    column: str | None,
    windows: tuple[tuple[str, str], ...],
    results: tuple[str, str] | None,
    values: tuple[str, ...],
) -> Any:
    """The comparison that ``tailcut compare``'s options ask for."""
    modes = [bool(column), bool(windows), bool(results)]
    if sum(modes) != 1:
        raise click.UsageError(
            "give exactly one of --by COLUMN A B, --window START END (twice), --results A B"
        )
    if results:
        from tailcut.analysis._results import compare_results

        if values:
            raise click.UsageError("--results takes its two files; no further arguments")
        return compare_results(*results)
    if data_dir is None:
        raise click.UsageError("--by and --window need --data DIR")
    from tailcut.analysis._compare import compare_by, compare_windows

    if column:
        if len(values) != 2:
            raise click.UsageError(f"--by {column} needs two values to compare, e.g. --by {column} v1 v2")
        return compare_by(_open(data_dir), column, values[0], values[1])
    if len(windows) != 2 or values:
        raise click.UsageError("--window takes START END and must be given exactly twice")
    first, second = ((_moment(s), _moment(e)) for s, e in windows)
    return compare_windows(_open(data_dir), first, second)


# --------------------------------------------------------------------------------------------------- select


@click.command(cls=ReportingCommand)
@data_option()
@click.option(
    "--category", "categories", multiple=True, help="Incident category (repeatable; default: all six)."
)
@click.option("--where", help="SQL predicate over traces columns that every selected trace satisfies.")
@click.option(
    "--baseline", type=click.IntRange(min=0), default=0, show_default=True, help="Baseline traces to sample."
)
@click.option(
    "--stratify-by", default="agent_name", show_default=True, help="traces column to stratify the sample by."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the baseline sample.")
@click.option(
    "--per-category",
    type=click.IntRange(min=1),
    default=None,
    help="At most N incidents per category (a seeded sample); default every incident.",
)
@out_option("The corpus directory to create.", type=click.Path(file_okay=False), required=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing corpus at --out.")
@_report_format_option
def select(
    data_dir: str,
    categories: tuple[str, ...],
    where: str | None,
    baseline: int,
    stratify_by: str,
    seed: int,
    per_category: int | None,
    out: str,
    overwrite: bool,
    fmt: str,
) -> None:
    """Select incidents plus a stratified baseline sample into a replay corpus.

    Every kept trace with a finding of the chosen categories (the incident corpus) plus BASELINE traces
    drawn uniformly from the baseline slice, proportionally per stratum; the manifest says why each trace
    is there and its inclusion probability. The same seed gives the same selection. --format json
    prints the counts and every selected trace, csv the selected traces. Python twin:
    tailcut.analysis.select_corpus.
    """
    from tailcut.analysis._select import select_corpus

    chosen = select_corpus(
        _open(data_dir),
        out,
        categories=categories or None,
        where=where,
        baseline=baseline,
        stratify_by=stratify_by or None,
        seed=seed,
        per_category=per_category,
        overwrite=overwrite,
    )
    summary = chosen.summary
    if fmt != "table":
        selections = [_selection_record(s) for s in chosen.selections]
        record = {
            "path": str(summary.path),
            "traces": summary.runs,
            "incidents": chosen.incidents,
            "baseline": chosen.baseline,
            "baseline_requested": baseline,
            "envelopes": summary.envelopes,
            "not_replayable": dict(summary.not_replayable),
            "strata": chosen.strata,
            "selections": selections,
        }
        _emit(fmt, record, selections)
        return
    click.echo(
        f"wrote {summary.runs} traces ({chosen.incidents} incidents, {chosen.baseline} baseline) and "
        f"{summary.envelopes} envelopes to {summary.path}"
    )
    if chosen.baseline < baseline:
        click.echo(f"only {chosen.baseline} baseline-slice traces were available (asked for {baseline})")
    if summary.not_replayable:
        click.echo(f"{len(summary.not_replayable)} trace(s) are not replayable; see the manifest")


def _selection_record(selection: Any) -> dict[str, Any]:
    """One selected trace of ``tailcut select --format json|csv``."""
    return {
        "trace_id": selection.trace_id,
        "reason": selection.reason,
        "categories": list(selection.categories),
        "inclusion_probability": selection.inclusion_probability,
        "baseline": selection.baseline,
    }


def _ingest_hooks() -> list[Any]:
    """What ``tailcut ingest`` writes beside the spans: the classifier's per-trace features."""
    from tailcut.analysis._features_worker import FeatureHook

    return [FeatureHook()]


def _refresh_findings(data_dir: str) -> None:
    """Recompute ``findings/`` for the files just written (a failure only warns: reads refresh it too)."""
    from tailcut.analysis._refresh import refresh
    from tailcut.errors import TailcutError

    try:
        refresh(data_dir)
    except TailcutError as exc:
        click.echo(f"findings/ not refreshed ({exc}); the next read of findings refreshes it", err=True)


#: ``tailcut ingest``: the exporters' command (storage alone) with the analysis work wired in.
ingest = ingest_command(_ingest_hooks, _refresh_findings)
