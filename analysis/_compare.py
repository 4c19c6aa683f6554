"""Regression comparison: failure rates of two groups of traces, each verdict with its intervals.

Two groups of one data dir (two values of a ``traces`` column, such as two harness revisions, or two time
windows) are compared per failure category with :func:`tailcut.analysis._verdict.compare_groups`. For a
*census category* (one its ``traces`` rows decide for every trace seen, kept or dropped: :mod:`._census`)
the verdict rests on the exact counts over every trace seen; for the others on the
population rates (policy-kept failures counted against every trace seen, the rest estimated from the
uniform baseline slice; 1/π-weighted, Horvitz–Thompson with N known) decide ``regression`` and
``improvement``, with Holm's adjustment across the six categories so the family-wise false-alarm rate is
5%; a difference seen only among tail-kept traces is ``confined to tail sample``. The baseline-slice and
tail-kept differences are reported beside the population one.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailcut.analysis import _census, _census_file, stats
from tailcut.analysis._classify import CATEGORIES
from tailcut.analysis._errors import AnalysisError, DataReadError, maps_errors
from tailcut.analysis._estimates import CategoryRate, GroupSample, group_samples
from tailcut.analysis._power import POWER, Guidance, guidance, traces_per_group
from tailcut.analysis._records import difference_record
from tailcut.analysis._verdict import ADJUSTMENT, Verdict, compare_groups

if TYPE_CHECKING:
    from rich.console import Console

    from tailcut.analysis._dataset import Dataset


@dataclass(frozen=True)
class CategoryComparison:
    """One category in both groups: the verdict (with both intervals) and each group's 1/π-weighted rate."""

    category: str
    verdict: Verdict
    first: CategoryRate
    second: CategoryRate
    #: the MDE of the representative test, and what a verdict it could not make would need
    guidance: Guidance

    def to_record(self) -> dict[str, Any]:
        """The category's verdict, p-values and the three differences B − A (see ``_records``)."""
        verdict = self.verdict
        return {
            "category": self.category,
            "verdict": verdict.label,
            "reason": verdict.reason,
            "p_value": verdict.p_value,
            "adjusted_p_value": verdict.adjusted_p_value,
            "test": verdict.test,
            "confidence": verdict.confidence,
            "estimate": verdict.estimate,
            "census": difference_record(verdict.census),
            "population": difference_record(verdict.population),
            "baseline": difference_record(verdict.baseline),
            "tail": difference_record(verdict.tail),
            "sample_size": self.guidance.to_record(),
        }


@dataclass(frozen=True)
class Comparison:
    """What ``tailcut compare --by``/``--window`` reports.

    Attributes
    ----------
    description : str
        How the groups were formed, e.g. ``harness_revision: v1 → v2``.
    first_label, second_label : str
        Group A (the reference) and group B (the candidate).
    first_traces, second_traces : int
        Kept traces in each group.
    first_seen, second_seen : int
        Traces seen in each group, kept or dropped.
    categories : list of CategoryComparison
        In the order of ``CATEGORIES``.
    """

    description: str
    first_label: str
    second_label: str
    first_traces: int
    second_traces: int
    first_seen: int
    second_seen: int
    categories: list[CategoryComparison]
    #: one minus the family-wise error rate the verdicts hold
    confidence: float = stats.DEFAULT_CONFIDENCE
    #: the census categories of the data dir, and why the others are not
    coverage: _census.CensusCoverage | None = None
    #: each group's head-sampling probability upstream (1: none) and why a group has no census, if so
    heads: tuple[float, float] = (1.0, 1.0)
    census_notes: tuple[str | None, str | None] = (None, None)

    def census_record(self) -> dict[str, Any]:
        """Which categories were counted over every trace seen, and why the others were not."""
        coverage = self.coverage
        notes = {
            label: note
            for label, note in zip((self.first_label, self.second_label), self.census_notes, strict=True)
            if note is not None
        }
        return {
            "categories": list(coverage.categories) if coverage else [],
            "not_census": dict(coverage.reasons) if coverage else {},
            "head_probability": {"a": self.heads[0], "b": self.heads[1]},
            "groups_without_census": notes,
        }

    def census_sentence(self) -> str:
        """The census in words: which categories, of which traces."""
        record = self.census_record()
        if not record["categories"] or self.census_notes != (None, None):
            why = "; ".join(f"{k}: {v}" for k, v in record["groups_without_census"].items())
            return f"no census categories{f' ({why})' if why else ''}: every verdict is sampled."
        heads = ""
        if self.heads != (1.0, 1.0):
            heads = (
                f" The census is of the head-sampled traces (head probability {self.heads[0]:g} in "
                f"{self.first_label}, {self.heads[1]:g} in {self.second_label}): a uniform sample of the "
                "traffic, so the rates are the traffic's."
            )
        return (
            f"census categories (every trace seen counted, kept or dropped): "
            f"{', '.join(record['categories'])}.{heads}"
        )

    def labels(self) -> set[str]:
        """The verdict labels that occur (``tailcut compare --fail-on`` checks these)."""
        return {row.verdict.label for row in self.categories}

    def to_record(self) -> dict[str, Any]:
        """The comparison as the JSON of ``tailcut compare --format json`` (keys in the README)."""
        return {
            "kind": "groups",
            "description": self.description,
            "a": {"label": self.first_label, "traces": self.first_traces, "seen": self.first_seen},
            "b": {"label": self.second_label, "traces": self.second_traces, "seen": self.second_seen},
            "family": {
                "method": ADJUSTMENT,
                "error_rate": round(1 - self.confidence, 12),
                "tests": len(self.categories),
            },
            "census": self.census_record(),
            "categories": [row.to_record() for row in self.categories],
        }

    def rows(self) -> list[dict[str, Any]]:
        """One record per category (the rows of ``--format csv``)."""
        return [row.to_record() for row in self.categories]

    def render_terminal(self, console: Console) -> None:
        """Print the comparison as a rich table: verdict, both intervals and their denominators."""
        from rich.table import Table

        a, b = self.first_label, self.second_label
        table = Table(title=f"compare {self.description}", title_justify="left")
        table.add_column("category")
        table.add_column("verdict")
        table.add_column("verdict level\n(Holm)", justify="right")
        table.add_column("detectable\n(80% power)", justify="right")
        table.add_column(f"census (every trace seen)\n{b} − {a}\n(hits/traces {a} → {b})")
        table.add_column(f"population (1/π weighted)\n{b} − {a}\n(rate {a} → {b})")
        table.add_column(f"baseline slice\n{b} − {a}\n(hits/traces {a} → {b})")
        table.add_column(f"tail-kept\n{b} − {a}\n(hits/traces {a} → {b})")
        styles = {"regression": "bold red", "improvement": "green", "confined to tail sample": "yellow"}
        for row in self.categories:
            verdict = row.verdict
            table.add_row(
                row.category,
                f"[{styles.get(verdict.label, 'dim')}]{verdict.label}[/]\non {verdict.estimate or '-'}",
                f"{verdict.confidence:.2%}\np={_p(verdict.adjusted_p_value)}"
                + (f"\n({verdict.test}, exact)" if verdict.test != "newcombe" else ""),
                _detectable(row.guidance),
                _difference_cell(verdict.census),
                _difference_cell(verdict.population, rates=True),
                _difference_cell(verdict.baseline),
                _difference_cell(verdict.tail),
            )
        console.print(table)
        console.print(
            f"traces seen: {a} {self.first_seen:,}, {b} {self.second_seen:,}; kept: {a} "
            f"{self.first_traces:,}, {b} {self.second_traces:,}. {self.census_sentence()} Verdicts rest "
            "on the census where a category has one (an exact count; the interval and test are about the "
            "process producing traces), else on the population estimate (policy-kept failures counted "
            "against every trace seen, the rest from the uniform baseline slice); a change seen only "
            f"among tail-kept traces is 'confined to tail sample'. Family-wise error rate "
            f"{1 - self.confidence:.0%} over {len(self.categories)} categories (Holm): each row's census, "
            "population and baseline intervals are at its Holm level (the tail-kept one at "
            f"{self.confidence:.0%}), p is Holm-adjusted: from Newcombe's interval, or where a census "
            "table has an expected count under 5, from an exact one-sided test of a rise (Boschloo's, "
            "or Fisher's for large groups; such a row is never an improvement). 'detectable' is the "
            "smallest rise the verdict's test detects 80% of the time at the sizes in hand."
        )
        for row in self.categories:
            hint = row.guidance.hint()
            if hint is not None:
                console.print(f"{row.category}: {row.verdict.label}; {hint}")


def _difference_cell(difference: stats.Difference | None, *, rates: bool = False) -> str:
    """``+4.0 pp [+0.3, +7.8]`` over ``12/500 → 40/500`` or ``2.4% → 8.0%`` (B − A; ``first`` is B)."""
    if difference is None:
        return "-"
    before, after = difference.second, difference.first
    if rates:
        below = f"{before.value:.1%} → {after.value:.1%}"
    else:
        below = f"{before.successes:.0f}/{before.n} → {after.successes:.0f}/{after.n}"
    low, high = difference.low * 100, difference.high * 100
    return f"{difference.value * 100:+.1f} pp [{low:+.1f}, {high:+.1f}]\n{below}"


def _detectable(guide: Guidance) -> str:
    return f"+{guide.detectable * 100:.1f} pp" if guide.detectable is not None else "none at this size"


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2g}" if value >= 1e-4 else "<0.0001"


def _compare(
    description: str,
    labels: tuple[str, str],
    groups: tuple[GroupSample, GroupSample],
    coverage: _census.CensusCoverage | None = None,
) -> Comparison:
    """Every category's verdict. A group without kept traces, failures or a baseline slice is compared
    all the same: its samples that are empty give no interval, and a verdict rests on those that remain."""
    first, second = groups
    verdicts = compare_groups(
        {c: first.counts(c) for c in CATEGORIES}, {c: second.counts(c) for c in CATEGORIES}
    )
    seen = (first.population, second.population)
    rows = [
        CategoryComparison(c, verdicts[c], first.rate(c), second.rate(c), _guidance(verdicts[c], seen))
        for c in CATEGORIES
    ]
    heads = tuple(g.census.head_probability if g.census is not None else 1.0 for g in groups)
    notes = tuple(g.census.note if g.census is not None else None for g in groups)
    return Comparison(
        description,
        labels[0],
        labels[1],
        first.size,
        second.size,
        *seen,
        rows,
        coverage=coverage,
        heads=(heads[0], heads[1]),
        census_notes=(notes[0], notes[1]),
    )


def _guidance(verdict: Verdict, seen: tuple[int, int]) -> Guidance:
    """Sample-size guidance for the representative test of one verdict, at its level."""
    test = verdict.representative
    if test is None:
        return Guidance(0.0, None, verdict.confidence, 0.0)
    a, b = test.second, test.first
    return guidance(
        a.value,
        (a.n_effective, b.n_effective),
        seen,
        test.value,
        confidence=verdict.confidence,
        decided=verdict.label in ("regression", "improvement"),
    )


@maps_errors
def compare_by(dataset: Dataset, column: str, first: str, second: str, *, store: bool = True) -> Comparison:
    """Compare the traces whose ``column`` is ``first`` (group A) with those where it is ``second`` (B).

    Parameters
    ----------
    dataset : Dataset
        The data dir (classified first if needed).
    column : str
        A ``traces`` column, e.g. ``harness_revision``, ``prompt_version``, ``agent_name``, ``session_id``,
        ``user_id``.
    first, second : str
        The two values (compared as text).
    store : bool
        Whether findings and census computed on the way are written into the data dir (the read-only
        viewer passes False: they are then kept in this session).

    Returns
    -------
    Comparison

    Raises
    ------
    AnalysisError
        If the column does not exist, or no trace has one of the values (a group without kept,
        failed or baseline-slice traces is compared all the same).
    """
    columns = [name for name, _ in dataset.schema("traces")]
    if column not in columns:
        raise AnalysisError(f"traces has no column {column!r}; choose one of: {', '.join(columns)}")
    predicate = f'CAST("{column}" AS VARCHAR) = ?'

    def missing(value: str) -> AnalysisError:
        present = dataset.sql_arrow(f'SELECT DISTINCT CAST("{column}" AS VARCHAR) AS v FROM traces')
        return AnalysisError(
            f"no trace has {column} = {value!r}; values present: "
            f"{', '.join(labels_of(present.column('v').to_pylist())) or 'none'}"
        )

    values = (first, second)
    coverage, groups = _groups(
        dataset, predicate, ([first], [second]), lambda i: missing(values[i]), store=store
    )
    return _compare(f"{column}: {first} → {second}", (first, second), groups, coverage)


@maps_errors
def compare_windows(
    dataset: Dataset,
    first: tuple[dt.datetime, dt.datetime],
    second: tuple[dt.datetime, dt.datetime],
) -> Comparison:
    """Compare the traces that started in window ``first`` with those that started in ``second``.

    Each window is ``[start, end)``; naive datetimes are UTC.

    Raises
    ------
    AnalysisError
        If a window ends before it starts, or no trace started in it.
    """
    bounds = []
    for start, end in (first, second):
        start, end = _utc(start), _utc(end)
        if end <= start:
            raise AnalysisError(f"window {start.isoformat()} .. {end.isoformat()} ends before it starts")
        bounds.append((start, end))
    # over the exact nanoseconds, which the traces view rebuilds start_time from (cheaper to compare)
    predicate = "start_time_ns >= ? AND start_time_ns < ?"
    labels = tuple(f"{s:%Y-%m-%d %H:%M}..{e:%Y-%m-%d %H:%M}" for s, e in bounds)

    def empty(i: int) -> AnalysisError:
        return AnalysisError(f"no trace started in window {labels[i]}; choose a window with traffic")

    nanoseconds = [tuple(_nanoseconds(moment) for moment in bound) for bound in bounds]
    coverage, groups = _groups(dataset, predicate, (nanoseconds[0], nanoseconds[1]), empty)
    return _compare(f"window {labels[0]} → {labels[1]}", (labels[0], labels[1]), groups, coverage)


def _groups(
    dataset: Dataset,
    predicate: str,
    params: tuple[Sequence[Any], Sequence[Any]],
    empty: Callable[[int], AnalysisError],
    *,
    store: bool = True,
) -> tuple[_census.CensusCoverage, tuple[GroupSample, GroupSample]]:
    """Both groups (``predicate`` over ``traces`` with each group's ``params``) from one query: the
    stored census rows (:mod:`._census_file`) paired with the ``traces`` rows' groups. ``empty(i)`` is
    raised when no trace is in group ``i``; ``store`` as :func:`compare_by`'s."""
    census = _census_file.current(dataset, store=store)
    try:
        rows = census.grouped(dataset, predicate, params)
    except DataReadError:  # a listed file was removed since (compacted): the census of the files now
        census = _census_file.current(dataset, store=store)
        rows = census.grouped(dataset, predicate, params)
    first, second = group_samples(rows, census.coverage)
    for i, sample in enumerate((first, second)):
        if sample.census is None or not sample.census.seen:
            raise empty(i)
    return census.coverage, (first, second)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def _nanoseconds(moment: dt.datetime) -> int:
    """A UTC datetime as Unix nanoseconds, exactly (a datetime holds whole microseconds).

    >>> _nanoseconds(dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC))
    1000005000
    """
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000


def labels_of(values: Sequence[Any]) -> list[str]:
    """Distinct values of a column as text (for error messages that list the choices)."""
    return sorted({str(v) for v in values if v is not None})


@dataclass(frozen=True)
class Plan:
    """What ``tailcut compare --plan RATE DELTA`` prints: traces per group a change needs.

    Attributes
    ----------
    rate, delta : float
        The failure rate in group A and the change to detect (B − A).
    confidence : float
        The strictest Holm level of six categories, ``1 − 0.05/6``: the size holds whatever the others do.
    uniform : int
        Traces per group when every one is observed (or in a uniform sample of each group).
    baseline_share : float or None
        The data dir's baseline slice, as a share of the traces seen (None without ``--data``).
    per_category : list of tuple
        ``(category, effective traces per trace seen, traces seen per group)`` under the data dir's
        policies: 1 for a census category (every trace seen is counted, so traffic sets the power), else
        from the category's population estimate (its information per trace at its own rate).
    census : tuple of str
        The data dir's census categories.
    """

    rate: float
    delta: float
    confidence: float
    uniform: int
    baseline_share: float | None = None
    per_category: list[tuple[str, float, int | None]] = field(default_factory=list)
    census: tuple[str, ...] = ()

    def labels(self) -> set[str]:
        """A plan has no verdicts."""
        return set()

    @property
    def baseline_only(self) -> int | None:
        """Traces seen per group when the baseline slice alone decides."""
        if not self.baseline_share:
            return None
        return math.ceil(self.uniform / self.baseline_share)

    def to_record(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "delta": self.delta,
            "power": POWER,
            "confidence": self.confidence,
            "traces_per_group": self.uniform,
            "baseline_share": self.baseline_share,
            "baseline_slice_traces_per_group": self.baseline_only,
            "categories": self.rows(),
        }

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"category": c, "census": c in self.census, "effective_per_trace": ratio, "traces_per_group": n}
            for c, ratio, n in self.per_category
        ]

    def render_terminal(self, console: Console) -> None:
        console.print(
            f"to detect {self.rate:.1%} → {self.rate + self.delta:.1%} with {POWER:.0%} power at "
            f"{self.confidence:.2%} (Holm's strictest step over 6 categories): {self.uniform:,} traces "
            "per group, every one observed or a uniform sample"
        )
        if self.baseline_only is not None:
            console.print(
                f"under this data dir's policies: {self.baseline_only:,} traces seen per group for the "
                f"baseline slice alone ({self.baseline_share:.1%} of traces); with every trace counted "
                "for a census category, and the policy-kept failures counted for the others (the "
                "estimates compare uses), per category:"
            )
        if self.per_category:
            for category, ratio, n in self.per_category:
                needed = f"{n:,}" if n is not None else "-"
                how = "census: every trace seen counted" if category in self.census else "sampled"
                console.print(
                    f"  {category}: {needed} traces seen per group ({ratio:.2f} effective per trace, {how})"
                )


def plan(rate: float, delta: float, dataset: Dataset | None = None) -> Plan:
    """Traces per group to detect ``rate`` → ``rate + delta``, and under ``dataset``'s policies if given.

    Raises
    ------
    StatisticsInputError
        If the rate or the change is out of range.
    """
    from tailcut.analysis._estimates import category_rates

    confidence = 1 - (1 - stats.DEFAULT_CONFIDENCE) / len(CATEGORIES)
    uniform = traces_per_group(rate, delta, confidence=confidence)
    if dataset is None:
        return Plan(rate, delta, confidence, uniform)
    ((seen, members),) = dataset.connection.execute(
        "SELECT count(*), count(*) FILTER (WHERE baseline) FROM traces"
    ).fetchall()
    if not seen:
        raise AnalysisError(f"{dataset.location}: no traces seen; plan without --data")
    coverage = _census_file.current(dataset).coverage
    rows = []
    for category in category_rates(dataset):
        weighted = category.weighted
        if coverage.applies(category.category):
            ratio = 1.0  # every trace seen is counted: traffic, not the slice, sets the power
        else:
            ratio = weighted.n_effective / seen if weighted is not None else 0.0
        rows.append((category.category, ratio, math.ceil(uniform / ratio) if ratio > 0 else None))
    share = members / seen if members else None
    return Plan(rate, delta, confidence, uniform, share, rows, census=coverage.categories)
