"""The analysis report: traffic seen and kept, decisions, failure rates with intervals, layers, boundaries.

:func:`build_report` gathers everything once into a :class:`Report`; the report renders itself in the
terminal (rich tables) or as one self-contained HTML file whose plots are inline SVG drawn by matplotlib
(no network, no JavaScript). Every rate carries its interval, its n and its sample; failure-category
rates are shown two ways, Horvitz–Thompson over kept traces (1/π weighted, N known) and the baseline
slice, side by side, with an optional column of true rates (``truth``) that ``tailcut demo`` fills
from the fleet's mix.
"""

from __future__ import annotations

import datetime as dt
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

from tailcut._atomic import replacing
from tailcut.analysis import stats
from tailcut.analysis._errors import maps_errors
from tailcut.analysis._estimates import TAIL_KEPT, CategoryRate, category_rates
from tailcut.analysis._power import POWER, detectable_difference
from tailcut.analysis._records import estimate_record, value_record

if TYPE_CHECKING:
    from rich.console import Console

    from tailcut.analysis._dataset import Dataset

#: Values kept per distribution for the plots (a deterministic subsample beyond it).
_PLOT_VALUES: Final = 50_000
_TIMELINE_BUCKETS: Final = 48


@dataclass(frozen=True)
class Traffic:
    """Traces seen (one ``traces`` row each), kept, dropped and in each sample."""

    seen: int
    kept: int
    baseline: int
    baseline_kept: int
    tail_kept: int
    spans: int

    @property
    def dropped(self) -> int:
        return self.seen - self.kept


@dataclass(frozen=True)
class CountRow:
    """A labelled count, with the traces it stands for in the population (Σ 1/π)."""

    label: str
    count: int
    weighted: float
    detail: str = ""


@dataclass
class Report:
    """Everything ``tailcut report`` shows; build it with :func:`build_report`.

    Attributes
    ----------
    location : str
        The data dir.
    traffic : Traffic
        Traces seen, kept, dropped, per sample.
    reasons, policies : list of CountRow
        Decisions by decision reason and by matching policy (``weighted`` is the kept count there).
    categories : list of CategoryRate
        Each category's 1/π-weighted and baseline-slice rate.
    population : list of tuple
        ``(quantity, estimate)`` exact over every trace seen (``traces`` table).
    layers, boundaries : list of CountRow
        Findings by harness layer and by boundary (top offenders first), with weighted counts.
    truth : mapping of str to float, optional
        True rate per category, shown as an extra column (``tailcut demo`` passes the injected rates).
    distributions : dict
        ``{"tokens"|"duration_ms": {"tail-kept"|"baseline slice": [values]}}`` for the plots.
    timeline : list of tuple
        ``(bucket start, kept, dropped)`` over the decision times.
    incidents : list of tuple
        ``(category, trace_id, first span id, boundary)`` of a few traces per category, the ones the
        HTML report links to in the trace viewer (``tailcut ui``) when given its URL.
    survival : list of CountRow
        Per category, the findings whose run survived them (``recovered``) and those whose run failed.
    """

    location: str
    traffic: Traffic
    reasons: list[CountRow]
    policies: list[CountRow]
    categories: list[CategoryRate]
    population: list[tuple[str, stats.Estimate | stats.ValueEstimate]]
    layers: list[CountRow]
    boundaries: list[CountRow]
    truth: Mapping[str, float] | None = None
    distributions: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    timeline: list[tuple[dt.datetime, int, int]] = field(default_factory=list)
    incidents: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    #: per category, its findings whose run survived them and those whose run failed (``recovered``)
    survival: list[CountRow] = field(default_factory=list)

    # --- records -------------------------------------------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        """The report as the JSON of ``tailcut report --format json`` (keys in the README)."""
        t = self.traffic
        return {
            "location": self.location,
            "traffic": {
                "seen": t.seen,
                "kept": t.kept,
                "dropped": t.dropped,
                "baseline": t.baseline,
                "baseline_kept": t.baseline_kept,
                "tail_kept": t.tail_kept,
                "spans": t.spans,
            },
            "decisions": {
                "by_reason": [
                    {"reason": r.label, "traces": r.count, "kept": int(r.weighted)} for r in self.reasons
                ],
                "by_policy": [
                    {"policy": r.label, "traces": r.count, "kept": int(r.weighted)} for r in self.policies
                ],
            },
            "categories": self.rows(),
            "population": [
                {
                    "quantity": name,
                    "estimate": estimate_record(e) if isinstance(e, stats.Estimate) else value_record(e),
                }
                for name, e in self.population
            ],
            "layers": [_finding_record("layer", row) for row in self.layers],
            "boundaries": [_finding_record("boundary", row) for row in self.boundaries],
            "survival": [_finding_record("category", row) for row in self.survival],
        }

    def rows(self) -> list[dict[str, Any]]:
        """One record per failure category (the rows of ``--format csv``)."""
        rows = []
        for rate in self.categories:
            row: dict[str, Any] = {
                "category": rate.category,
                "kept_hits": rate.kept_hits,
                "weighted": estimate_record(rate.weighted),
                "baseline": estimate_record(rate.baseline),
                "sample_size": {
                    "weighted_detectable_difference": _detectable(rate.weighted),
                    "baseline_detectable_difference": _detectable(rate.baseline),
                    "power": POWER,
                    "confidence": stats.DEFAULT_CONFIDENCE,
                },
            }
            if self.truth is not None:
                row["truth"] = self.truth.get(rate.category)
            rows.append(row)
        return rows

    # --- terminal ------------------------------------------------------------------------------------------
    def render_terminal(self, console: Console) -> None:
        """Print the report as rich tables."""
        for table in self._tables():
            console.print(table)

    def _tables(self) -> list[Any]:
        from rich.table import Table

        t = self.traffic
        traffic = Table(title=f"traffic: {self.location}", title_justify="left")
        for column in ("traces seen", "kept", "dropped", "baseline slice (kept)", "tail-kept", "spans"):
            traffic.add_column(column, justify="right")
        kept_share = f"{t.kept} ({t.kept / t.seen:.1%})" if t.seen else "0"
        traffic.add_row(
            str(t.seen),
            kept_share,
            str(t.dropped),
            f"{t.baseline} ({t.baseline_kept})",
            str(t.tail_kept),
            str(t.spans),
        )
        tables: list[Any] = [traffic]
        for title, rows in (("decisions by reason", self.reasons), ("decisions by policy", self.policies)):
            table = Table(title=title, title_justify="left")
            table.add_column(title.split()[-1])
            table.add_column("traces", justify="right")
            table.add_column("kept", justify="right")
            for row in rows:
                table.add_row(row.label, str(row.count), f"{row.weighted:.0f}")
            tables.append(table)
        categories = Table(title="failure categories (population rate, 95% interval)", title_justify="left")
        categories.add_column("category")
        categories.add_column("kept traces", justify="right")
        weighted = _estimate_column([rate.weighted for rate in self.categories])
        baseline = _estimate_column([rate.baseline for rate in self.categories])
        categories.add_column(f"kept, 1/π weighted (HT){weighted.header}")
        categories.add_column(f"baseline slice{baseline.header}")
        categories.add_column("detectable change\nHT / slice (80%)", justify="right")
        if self.truth is not None:
            categories.add_column("true rate", justify="right")
        for rate in self.categories:
            cells = [
                rate.category,
                str(rate.kept_hits),
                weighted.cell(rate.weighted, "-"),
                baseline.cell(rate.baseline, "- (no baseline slice)"),
                f"{_pp(_detectable(rate.weighted))} / {_pp(_detectable(rate.baseline))}",
            ]
            if self.truth is not None:
                truth = self.truth.get(rate.category)
                cells.append(f"{truth:.1%}" if truth is not None else "-")
            categories.add_row(*cells)
        tables.append(categories)
        notes = Table.grid()
        notes.add_row(
            "[dim]detectable change: the smallest rise from each rate that a comparison of two groups "
            "this size detects with 80% power at 95% (`tailcut compare --plan RATE DELTA` for a plan)[/]"
        )
        tables.append(notes)
        population = Table(title="population (exact, every trace seen)", title_justify="left")
        population.add_column("quantity")
        population.add_column("estimate")
        for name, estimate in self.population:
            population.add_row(name, str(estimate))
        tables.append(population)
        for title, rows, label in (
            ("layers implicated", self.layers, "layer"),
            ("top offending boundaries", self.boundaries, "boundary"),
            ("findings the run survived (recovered) or not", self.survival, "category"),
        ):
            table = Table(title=title, title_justify="left")
            table.add_column(label)
            table.add_column("findings", justify="right")
            table.add_column("traces represented (Σ 1/π)", justify="right")
            table.add_column("categories")
            for row in rows:
                table.add_row(row.label, str(row.count), f"{row.weighted:.1f}", row.detail)
            tables.append(table)
        return tables

    # --- HTML ----------------------------------------------------------------------------------------------
    def write_html(self, path: str | os.PathLike[str], *, ui_url: str | None = None) -> Path:
        """Write the report as one self-contained HTML file (tables and inline SVG plots); returns its path.

        With ``ui_url`` (where ``tailcut ui`` serves this data dir) the report links each category, each
        offending boundary and a few traces per category to the viewer. The file is written to a
        temporary name beside ``path`` and renamed, so a failure leaves nothing.
        """
        from markupsafe import Markup
        from rich.console import Console

        from tailcut.analysis._plots import category_plot, distribution_plot, timeline_plot

        console = Console(record=True, width=160, file=io.StringIO())
        for table in self._tables():
            console.print(table)
        tables_html = console.export_html(inline_styles=True, code_format="<pre>{code}</pre>")
        figures = [
            ("Tokens and latency: tail-kept vs baseline slice", distribution_plot(self.distributions)),
            ("Failure-category rates with 95% intervals", category_plot(self.categories, self.truth)),
            ("Decisions over time", timeline_plot(self.timeline)),
        ]
        document = (
            _templates()
            .get_template("report.html")
            .render(
                location=self.location,
                generated=f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}",
                tables=Markup(tables_html),  # rich's export: escaped by rich
                figures=[(title, Markup(svg)) for title, svg in figures if svg],  # matplotlib's SVG
                viewer=self._viewer_links(ui_url) if ui_url else None,
            )
        )
        target = Path(path)
        with replacing(target) as temporary:
            temporary.write_text(document, encoding="utf-8")
        return target

    def _viewer_links(self, ui_url: str) -> dict[str, Any]:
        """What ``_viewer_links.html`` links to the trace viewer at ``ui_url``: categories, their incident
        traces and the offending boundaries (the template escapes every text and address)."""
        base = ui_url.rstrip("/")
        categories = [
            {
                "name": category,
                "href": f"{base}/?{urlencode({'category': category})}",
                "traces": [
                    {
                        "href": f"{base}/traces/{t}" + (f"?span={s}" if s else ""),
                        "text": f"{t[:12]}… ({where})",
                    }
                    for c, t, s, where in self.incidents
                    if c == category
                ],
            }
            for category in sorted({c for c, *_ in self.incidents})
        ]
        boundaries = [
            {"href": f"{base}/?{urlencode({'boundary': row.label})}", "text": row.label}
            for row in self.boundaries
            if row.label != "(trace)"
        ]
        return {"base": base, "categories": categories, "boundaries": boundaries}


def _templates() -> Any:
    """The report's Jinja2 environment: templates in ``tailcut/analysis/templates``, autoescaping on."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("tailcut.analysis", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _incidents(dataset: Dataset, per_category: int = 5) -> list[tuple[str, str, str | None, str]]:
    """A few findings per category, most confident first: (category, trace, first span, boundary)."""
    rows = dataset.connection.execute(
        "SELECT category, trace_id, span_id, coalesce(boundary, span_name, '(trace)') FROM findings "
        "QUALIFY row_number() OVER (PARTITION BY category ORDER BY confidence DESC, trace_id) <= ? "
        "ORDER BY category, trace_id",
        [per_category],
    ).fetchall()
    return [(str(c), str(t), s, str(b)) for c, t, s, b in rows]


def _detectable(estimate: stats.Estimate | None) -> float | None:
    """The MDE of two groups of this estimate's effective size, from its rate (None: no estimate, or none)."""
    if estimate is None or estimate.n_effective <= 0:
        return None
    return detectable_difference(estimate.value, estimate.n_effective, estimate.n_effective)


def _pp(value: float | None) -> str:
    return "-" if value is None else f"+{value * 100:.1f} pp"


def _finding_record(key: str, row: CountRow) -> dict[str, Any]:
    categories = [c for c in row.detail.split(", ") if c]
    return {
        key: row.label,
        "findings": row.count,
        "traces_represented": row.weighted,
        "categories": categories,
    }


def _one(dataset: Dataset, query: str) -> tuple[Any, ...]:
    """The single row of an aggregate query."""
    return tuple(dataset.connection.execute(query).fetchall()[0])


def _count_rows(dataset: Dataset, query: str) -> list[CountRow]:
    return [
        CountRow(str(label), int(count), float(weighted or 0), str(detail or ""))
        for label, count, weighted, detail in dataset.connection.execute(query).fetchall()
    ]


def _population(dataset: Dataset, seen: int) -> list[tuple[str, stats.Estimate | stats.ValueEstimate]]:
    """Exact rates and means over every trace seen (``traces`` has a row for each, kept or dropped)."""
    if not seen:
        return []
    fail, failed_span, judged = _one(
        dataset,
        "SELECT count(*) FILTER (WHERE outcome = 'fail'), count(*) FILTER (WHERE error_count > 0), "
        "count(*) FILTER (WHERE outcome IS NOT NULL) FROM traces",
    )
    rows: list[tuple[str, stats.Estimate | stats.ValueEstimate]] = [
        ("traces with a failed span", stats.proportion(failed_span, seen, sample="all traces"))
    ]
    if judged:
        rows.append(
            ("outcome fail (of traces with an outcome)", stats.proportion(fail, judged, sample="all traces"))
        )
    values = dataset.sql_arrow(
        "SELECT (input_tokens + output_tokens)::DOUBLE AS tokens, duration_ms FROM traces "
        "WHERE duration_ms IS NOT NULL"
    )
    if values.num_rows >= 2:
        for name, column in (
            ("mean tokens per trace", "tokens"),
            ("mean duration per trace (ms)", "duration_ms"),
        ):
            data = values.column(column).to_numpy()
            rows.append((name, stats.weighted_mean(data, [1.0] * len(data), sample="all traces")))
    return rows


def _distributions(dataset: Dataset) -> dict[str, dict[str, list[float]]]:
    samples = {"tail-kept": TAIL_KEPT, "baseline slice": "baseline"}
    result: dict[str, dict[str, list[float]]] = {"tokens": {}, "duration_ms": {}}
    for label, predicate in samples.items():
        table = dataset.sql_arrow(
            f"SELECT (input_tokens + output_tokens)::DOUBLE AS tokens, duration_ms FROM traces "
            f"WHERE {predicate} AND duration_ms IS NOT NULL ORDER BY hash(trace_id) LIMIT {_PLOT_VALUES}"
        )
        result["tokens"][label] = table.column("tokens").to_pylist()
        result["duration_ms"][label] = table.column("duration_ms").to_pylist()
    return result


def _timeline(dataset: Dataset) -> list[tuple[dt.datetime, int, int]]:
    start, end = _one(dataset, "SELECT min(epoch_ns(decided_at)), max(epoch_ns(decided_at)) FROM traces")
    if start is None:
        return []
    width = max((end - start) // _TIMELINE_BUCKETS + 1, 10**9)
    rows = dataset.connection.execute(
        "SELECT (epoch_ns(decided_at) - $start) // $width AS bucket, count(*) FILTER (WHERE kept), "
        "count(*) FILTER (WHERE NOT kept) FROM traces GROUP BY 1 ORDER BY 1",
        {"start": start, "width": width},
    ).fetchall()
    origin = dt.datetime.fromtimestamp(start / 1e9, dt.UTC)
    return [
        (origin + dt.timedelta(microseconds=bucket * width / 1000), int(kept), int(dropped))
        for bucket, kept, dropped in rows
    ]


@maps_errors
def build_report(dataset: Dataset, *, truth: Mapping[str, float] | None = None) -> Report:
    """Gather the report of a data dir (classifying its kept traces first if needed).

    Parameters
    ----------
    dataset : Dataset
        The data dir.
    truth : mapping of str to float, optional
        True rate per failure category, shown beside the estimates (the demo knows them).

    Returns
    -------
    Report
        ``report.render_terminal(console)`` prints it; ``report.write_html(path)`` writes it.

    Examples
    --------
    ::

        from rich.console import Console

        report = build_report(Dataset("data"), truth={"tool_loop": 0.05})
        report.render_terminal(Console())
        report.write_html("report.html")
    """
    dataset.ensure_findings()
    seen, kept, baseline, baseline_kept, tail_kept = _one(
        dataset,
        "SELECT count(*), count(*) FILTER (WHERE kept), count(*) FILTER (WHERE baseline), "
        f"count(*) FILTER (WHERE baseline AND kept), count(*) FILTER (WHERE {TAIL_KEPT}) FROM traces",
    )
    (spans,) = _one(dataset, "SELECT count(*) FROM spans")
    weight = "1.0 / t.inclusion_probability"
    return Report(
        location=dataset.location,
        traffic=Traffic(seen, kept, baseline, baseline_kept, tail_kept, spans),
        reasons=_count_rows(
            dataset,
            "SELECT decision_reason, count(*), count(*) FILTER (WHERE kept), '' FROM traces "
            "GROUP BY 1 ORDER BY 2 DESC, 1",
        ),
        policies=_count_rows(
            dataset,
            "SELECT coalesce(policy, '(none)'), count(*), count(*) FILTER (WHERE kept), '' "
            "FROM (SELECT unnest(CASE WHEN len(policies) = 0 THEN [NULL] ELSE policies END) AS policy, kept "
            "FROM traces) GROUP BY 1 ORDER BY 2 DESC, 1",
        ),
        categories=category_rates(dataset),
        population=_population(dataset, seen),
        layers=_count_rows(
            dataset,
            f"SELECT f.layer, count(*), sum({weight}), "
            "string_agg(DISTINCT f.category, ', ' ORDER BY f.category) "
            "FROM findings f JOIN traces t USING (trace_id) GROUP BY 1 ORDER BY 3 DESC, 1",
        ),
        boundaries=_count_rows(
            dataset,
            f"SELECT coalesce(f.boundary, f.span_name, '(trace)'), count(*), sum({weight}), "
            "string_agg(DISTINCT f.category, ', ' ORDER BY f.category) "
            "FROM findings f JOIN traces t USING (trace_id) GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT 10",
        ),
        survival=_count_rows(
            dataset,
            f"SELECT f.category || CASE WHEN f.recovered THEN ': run survived' ELSE ': run failed' END, "
            f"count(*), sum({weight}), '' FROM findings f JOIN traces t USING (trace_id) "
            "GROUP BY 1 ORDER BY 1",
        ),
        truth=truth,
        distributions=_distributions(dataset),
        timeline=_timeline(dataset),
        incidents=_incidents(dataset),
    )


@dataclass(frozen=True)
class _EstimateColumn:
    """How a column of estimates shows its denominator: once in the header when every row shares it."""

    shared_n: bool
    header: str

    def cell(self, estimate: stats.Estimate | None, missing: str) -> str:
        if estimate is None:
            return missing
        return estimate.interval() if self.shared_n else str(estimate)


def _estimate_column(estimates: Sequence[stats.Estimate | None]) -> _EstimateColumn:
    sizes = {estimate.n for estimate in estimates if estimate is not None}
    if len(sizes) == 1:
        return _EstimateColumn(True, f", n={sizes.pop()}")
    return _EstimateColumn(False, "")
