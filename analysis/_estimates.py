"""Population rates of the failure categories, from the samples that can support them.

A finding needs spans, and spans exist only for kept traces, so a category's population rate comes from
the kept traces weighted by ``1/π`` over the exact number of traces seen (Horvitz–Thompson with N
known: the traces the policies kept are counted, the rest are represented by their baseline members),
with the baseline-slice rate beside it (the uniform sample: kept baseline traces, classified like the
rest). Quantities of the ``traces`` table itself (traffic,
outcomes, tokens) are exact counts over every trace seen. Every estimate carries its n, its effective n
and its sample (:class:`tailcut.analysis.stats.Estimate`).

**Which traces are tail-kept.** A kept trace is *tail-kept* when a deterministic (tail) policy kept it:
it is not in the baseline slice, or it is but its π is 1, or its head probability when it was head-sampled
upstream (a failure that the slice happened to hold too).
A baseline member with π < 1 was kept by the slice alone.

**Head sampling upstream.** A trace that reached the collector through a head sampler has π = head ×
tail (``head_probability`` in ``traces``). Head samplers decide from the trace id, independently of the
outcome, so the traces seen are a uniform sample of the population and a rate over them is a rate of
the population: the estimates use each kept trace's tail-stage probability ``π / head`` over the traces
seen. When the head probabilities differ within a group (services sampled at different rates), each
trace seen stands for ``1/head`` traces instead: π itself over N = Σ 1/head.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tailcut.analysis import _census, stats
from tailcut.analysis._census import TAIL_KEPT as TAIL_KEPT
from tailcut.analysis._census import CensusCounts, CensusCoverage, group_census
from tailcut.analysis._census_file import bit
from tailcut.analysis._classify import CATEGORIES
from tailcut.analysis._errors import maps_errors
from tailcut.analysis._verdict import CensusCount, GroupCounts, PopulationSample

if TYPE_CHECKING:
    from tailcut.analysis._dataset import Dataset


@dataclass(frozen=True)
class CategoryRate:
    """One category's population rate, two ways.

    Attributes
    ----------
    category : str
        The failure category.
    kept_hits : int
        Kept traces with a finding of this category.
    weighted : Estimate or None
        Horvitz–Thompson estimate over kept traces with weights ``1/π`` and N the traces seen
        (None when nothing is kept).
    baseline : Estimate or None
        Rate among classified baseline-slice traces (None when the slice is empty).
    """

    category: str
    kept_hits: int
    weighted: stats.Estimate | None
    baseline: stats.Estimate | None


@dataclass(frozen=True)
class GroupSample:
    """One group's traces as the estimates need them (one row per kept trace)."""

    inclusion_probability: Sequence[float]
    baseline: Sequence[bool]
    #: traces seen in the group, kept or dropped (the ``traces`` table has a row for each)
    population: int
    tail: Sequence[bool]
    #: category -> per-trace indicator, aligned with the other fields
    hits: Mapping[str, Sequence[bool]]
    #: every trace seen counted, per census category (None: no census asked for)
    census: CensusCounts | None = None
    #: which categories the census covers in this data dir
    coverage: CensusCoverage | None = None
    #: how many kept traces each row stands for, alike in every field (None: one each)
    repeats: Sequence[int] | None = None

    @functools.cached_property
    def _repeats(self) -> np.ndarray:
        if self.repeats is None:
            return np.ones(len(self.inclusion_probability), dtype=np.int64)
        return np.asarray(self.repeats, dtype=np.int64)

    @property
    def size(self) -> int:
        """Kept traces in the group."""
        return int(self._repeats.sum())

    @property
    def represented(self) -> bool:
        """Whether the kept traces stand for every trace seen: nothing was dropped, or some kept trace
        was kept by a probability below 1 (the baseline slice) and so stands for the dropped ones."""
        return bool(self.size) and (
            self.size >= self.population or bool((np.asarray(self.inclusion_probability) < 1).any())
        )

    def _count(self, rows: np.ndarray) -> int:
        """Kept traces in the rows where ``rows`` is true."""
        return int(self._repeats[rows].sum())

    @functools.cached_property
    def _populations(self) -> dict[str, PopulationSample]:
        """Each category's kept traces for its 1/π rate, made once (each caches its sums): the verdict
        and the rate beside it ask for the same one."""
        return {
            category: PopulationSample(hits, self.inclusion_probability, self.population, self.repeats)
            for category, hits in self.hits.items()
        }

    def census_count(self, category: str) -> CensusCount | None:
        """The census of ``category`` in this group, when the category is a census category here."""
        census, coverage = self.census, self.coverage
        if census is None or coverage is None or census.note is not None or not census.seen:
            return None
        if not coverage.applies(category):
            return None
        return CensusCount(census.hits[category], census.seen, census.head_probability)

    def counts(self, category: str) -> GroupCounts:
        """One category's baseline-slice and tail-kept counts and population sample (a verdict's inputs)."""
        hits = np.asarray(self.hits[category], dtype=bool)
        baseline, tail = np.asarray(self.baseline, dtype=bool), np.asarray(self.tail, dtype=bool)
        return GroupCounts(
            baseline_hits=self._count(hits & baseline),
            baseline_n=self._count(baseline),
            tail_hits=self._count(hits & tail),
            tail_n=self._count(tail),
            population=self._populations[category] if self.represented else None,
            census=self.census_count(category),
        )

    def rate(self, category: str) -> CategoryRate:
        """The Horvitz–Thompson and baseline-slice estimates of one category."""
        hits = self.hits[category]
        counts = self.counts(category)
        weighted = self._populations[category].estimate() if self.size else None
        baseline = (
            stats.proportion(counts.baseline_hits, counts.baseline_n, sample="baseline slice")
            if counts.baseline_n
            else None
        )
        return CategoryRate(category, self._count(np.asarray(hits, dtype=bool)), weighted, baseline)


def group_sample(
    dataset: Dataset,
    where: str = "true",
    params: Sequence[object] = (),
    *,
    coverage: CensusCoverage | None = None,
    census: CensusCounts | None = None,
) -> GroupSample:
    """The kept traces matching ``where`` (SQL over ``traces``) with their categories; classifies if needed.

    Parameters
    ----------
    dataset : Dataset
        The data dir.
    where : str
        A predicate over the ``traces`` columns (``?`` placeholders take ``params``).
    params : sequence
        Values for the placeholders.
    coverage : CensusCoverage, optional
        The census categories (:func:`._census.build`, which fills the flags): then the group's census
        counts come along.
    census : CensusCounts, optional
        The group's census counts when the caller has them already (:func:`._census.group_census`).

    See Also
    --------
    group_samples : a comparison's groups, from the stored census (:mod:`._census_file`).
    """
    _census.fill_found(dataset)
    table = dataset.sql_arrow(
        f"""
        SELECT DISTINCT t.trace_id, t.inclusion_probability, coalesce(t.head_probability, 1) AS head,
               t.baseline, {TAIL_KEPT} AS tail, {_census.found_columns()}
        FROM traces t LEFT JOIN {_census.FOUND} f USING (trace_id)
        WHERE t.kept AND ({where})
        ORDER BY t.trace_id
        """,
        params=list(params),
    )
    if census is None and coverage is not None:
        census = group_census(dataset, where, params)
    if census is not None:  # it counted the traces seen at each head probability
        seen, heads = census.seen, len(census.heads)
        weighted = sum(n / h for h, n in census.heads)
    else:
        seen, weighted, heads = dataset.sql(
            "SELECT count(*), sum(1 / h), count(DISTINCT h) FROM (SELECT any_value(coalesce("
            f"head_probability, 1)) AS h FROM traces t WHERE ({where}) GROUP BY trace_id)",
            params=list(params),
        ).row(0)
    columns = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    return _sample(columns, seen, weighted, heads, census=census, coverage=coverage)


def group_samples(
    rows: Sequence[tuple[bool, bool, float, float, int, int]], coverage: CensusCoverage
) -> list[GroupSample]:
    """Both groups' :class:`GroupSample` from :meth:`._census_file.Census.grouped`'s rows ``(in A, in B,
    head, π, bits, traces)``: the same samples as :func:`group_sample` of each group's predicate, a row
    for each set of alike kept traces (``repeats``)."""
    kept, baseline, tail = bit("kept"), bit("baseline"), bit("tail")
    samples = []
    for group in range(2):
        mine = [row for row in rows if row[group]]
        census = _census.counts(
            [
                _census_row(head, [row for row in mine if row[2] == head])
                for head in sorted({r[2] for r in mine})
            ]
        )
        chosen = [row for row in mine if row[4] & kept]
        bits = np.array([row[4] for row in chosen], dtype=np.int64)
        columns = {
            "head": np.array([row[2] for row in chosen], dtype=np.float64),
            "inclusion_probability": np.array([row[3] for row in chosen], dtype=np.float64),
            "baseline": (bits & baseline) != 0,
            "tail": (bits & tail) != 0,
            **{c: (bits & bit(f"found_{c}")) != 0 for c in CATEGORIES},
        }
        repeats = [row[5] for row in chosen]
        weighted = sum(n / h for h, n in census.heads)
        samples.append(
            _sample(
                columns,
                census.seen,
                weighted,
                len(census.heads),
                census=census,
                coverage=coverage,
                repeats=repeats,
            )
        )
    return samples


def _census_row(head: float, rows: Sequence[tuple[bool, bool, float, float, int, int]]) -> tuple:
    """``(head, traces seen, traces of each census category)`` of the grouped rows at one head
    probability (the rows :func:`._census.counts` takes)."""
    flagged = (sum(row[5] for row in rows if row[4] & bit(f"flag_{c}")) for c in _census.CENSUS_CATEGORIES)
    return (head, sum(row[5] for row in rows), *flagged)


def _sample(
    columns: Mapping[str, np.ndarray],
    seen: int,
    weighted: float,
    heads: int,
    *,
    census: CensusCounts | None,
    coverage: CensusCoverage | None,
    repeats: Sequence[int] | None = None,
) -> GroupSample:
    """A :class:`GroupSample` from a group's kept traces (a row each of the ``columns``: π, head
    probability, baseline, tail, one per category; ``repeats``: how many kept traces each row stands for)
    and its traces seen (``seen``; ``weighted``: Σ 1/head over them)."""
    pi, head = columns["inclusion_probability"].astype(np.float64), columns["head"].astype(np.float64)
    if heads <= 1:  # one head probability: the traces seen are a uniform sample; the tail stage's pi
        probabilities, population = pi / head, seen
    else:
        kept = len(pi) if repeats is None else sum(repeats)
        probabilities, population = pi, max(round(weighted), kept)
    return GroupSample(
        population=population,
        inclusion_probability=probabilities,
        baseline=columns["baseline"].astype(bool),
        tail=columns["tail"].astype(bool),
        hits={c: columns[c].astype(bool) for c in CATEGORIES},
        census=census,
        coverage=coverage,
        repeats=repeats,
    )


@maps_errors
def category_rates(dataset: Dataset) -> list[CategoryRate]:
    """Every category's population rate: Horvitz–Thompson over kept traces and the baseline-slice rate.

    Parameters
    ----------
    dataset : Dataset
        The data dir (classified first if it has no ``findings`` yet).

    Returns
    -------
    list of CategoryRate
        In the order of :data:`~tailcut.analysis.CATEGORIES`.
    """
    sample = group_sample(dataset)
    return [sample.rate(category) for category in CATEGORIES]
