"""Selection of a replay corpus: every incident of the chosen categories plus a stratified baseline sample.

The **incident corpus** is every kept trace with a finding of the chosen categories (default: all six)
that matches ``where``. The **representative slice** is a uniform sample of ``baseline`` traces from the
baseline slice (kept traces with ``baseline`` true that match ``where``), stratified by a ``traces``
column with proportional allocation (largest remainders, so the stratum sizes add up to the request).
Failures are not excluded from the slice: it must show them at their natural rate. A trace that is both
is written once, with both reasons.

Within a stratum, traces are ranked by ``sha256("<seed>:<trace_id>")``, so the sample depends only on the
seed and the set of candidates, never on file or row order: the same seed gives the same corpus.

Each trace's ``inclusion_probability`` in the manifest is the chance it reached the corpus: its π in the
data dir, times, for a baseline sample, the stratum's sampling fraction (``selected / available``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailcut.analysis._classify import CATEGORIES
from tailcut.analysis._errors import AnalysisError, maps_errors

if TYPE_CHECKING:
    from tailcut.analysis._dataset import Dataset
    from tailcut.exporters.corpus import CorpusSummary, Selection

#: The stratum name of traces whose stratification column is null.
NO_VALUE = "(none)"
#: Each category's place in :data:`CATEGORIES` (incidents are listed in this order).
_ORDER = {c: i for i, c in enumerate(CATEGORIES)}


@dataclass(frozen=True)
class CorpusSelection:
    """What :func:`select_corpus` wrote.

    Attributes
    ----------
    summary : CorpusSummary
        The corpus writer's counts (path, runs, envelopes, traces that are not replayable).
    selections : list of Selection
        Every trace in the corpus, in manifest order, with why it is there and its π.
    incidents : int
        Traces selected as incidents.
    baseline : int
        Traces selected as the baseline sample.
    strata : dict
        Per stratum: ``{"available": n, "selected": k}``.
    description : dict
        What the manifest records about the selection.
    """

    summary: CorpusSummary
    selections: list[Selection]
    incidents: int
    baseline: int
    strata: dict[str, dict[str, int]] = field(default_factory=dict)
    description: dict[str, Any] = field(default_factory=dict)


def allocate(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Proportional allocation of ``total`` draws over strata of ``sizes`` (largest remainders, capped).

    Parameters
    ----------
    sizes : dict of str to int
        Candidates per stratum.
    total : int
        Draws wanted (at most the sum of ``sizes``).

    Returns
    -------
    dict of str to int
        Draws per stratum; they add up to ``min(total, sum(sizes))``.

    Examples
    --------
    >>> allocate({"a": 50, "b": 30, "c": 20}, 10)
    {'a': 5, 'b': 3, 'c': 2}
    >>> allocate({"a": 1, "b": 99}, 3)
    {'a': 0, 'b': 3}
    """
    available = sum(sizes.values())
    total = min(total, available)
    if total <= 0:
        return dict.fromkeys(sizes, 0)
    quotas = {k: total * n / available for k, n in sizes.items()}
    counts = {k: int(q) for k, q in quotas.items()}
    by_remainder = sorted(sizes, key=lambda k: (-(quotas[k] - counts[k]), k))
    for key in by_remainder[: total - sum(counts.values())]:
        counts[key] += 1
    return counts


def _rank(seed: int, trace_id: str) -> str:
    return hashlib.sha256(f"{seed}:{trace_id}".encode()).hexdigest()


@maps_errors
def select_corpus(
    dataset: Dataset,
    out: str | os.PathLike[str],
    *,
    categories: Sequence[str] | None = None,
    where: str | None = None,
    baseline: int = 0,
    stratify_by: str | None = "agent_name",
    seed: int = 0,
    per_category: int | None = None,
    overwrite: bool = False,
    with_incidents: bool = True,
) -> CorpusSelection:
    """Select incidents and a stratified baseline sample, and write them as a replay corpus.

    Parameters
    ----------
    dataset : Dataset
        A local data dir (classified first if it has no ``findings``).
    out : path-like
        The corpus directory to create.
    categories : sequence of str, optional
        Failure categories of the incident corpus (default: all).
    where : str, optional
        SQL predicate over ``traces`` columns that every selected trace must satisfy.
    baseline : int, default 0
        Baseline traces to sample (all available when fewer).
    stratify_by : str or None, default "agent_name"
        ``traces`` column to stratify the baseline sample by (None: one stratum).
    seed : int, default 0
        Seed of the sample; the same seed gives the same selection.
    per_category : int, optional
        At most this many incidents per category (a seeded uniform sample of each category's incidents,
        taken in category order; a trace taken for one category counts for the others it shows).
        Default: every incident.
    overwrite : bool, default False
        Replace an existing corpus at ``out``.
    with_incidents : bool, default True
        Take the incidents; False selects the baseline sample alone (``tailcut validate``'s golden slice).

    Returns
    -------
    CorpusSelection

    Raises
    ------
    AnalysisError
        For an unknown category or column, a negative ``baseline``, a remote data dir, or an empty selection.
    QueryError
        If ``where`` is not valid SQL over ``traces``.

    See Also
    --------
    Dataset.select : the method form; ``tailcut select`` on the command line.

    Examples
    --------
    A data dir of three runs, one of which failed in its tool (see :class:`Dataset` for how it is made):

    >>> import tailcut
    >>> from tailcut.exporters import ParquetSpanExporter
    >>> from tailcut.testing import capture_spans
    >>> @tailcut.tool
    ... def lookup(city: str) -> str:
    ...     if city == "Atlantis":
    ...         raise LookupError(f"no weather for {city}")
    ...     return "sunny"
    >>> with capture_spans() as spans:
    ...     for city in ("Paris", "Oslo", "Atlantis"):
    ...         try:
    ...             with tailcut.run("weather", input={"city": city}) as run:
    ...                 run.set_output(lookup(city))
    ...         except LookupError:
    ...             pass
    >>> exporter = ParquetSpanExporter("data")
    >>> exporter.export(spans).name
    'SUCCESS'
    >>> exporter.shutdown()

    The incident corpus of the ``error`` category, ready for ``tailcut replay corpus``:

    >>> from tailcut.analysis import Dataset, select_corpus
    >>> chosen = select_corpus(Dataset("data"), "corpus", categories=["error"])
    >>> chosen.incidents, chosen.baseline, chosen.summary.runs
    (1, 0, 1)
    >>> [(s.reason, s.inclusion_probability) for s in chosen.selections]
    [('incident: error', 1.0)]
    >>> sorted(path.name for path in chosen.summary.path.iterdir())
    ['envelopes.parquet', 'manifest.json', 'manifest.sha256', 'runs.parquet']
    """
    from tailcut.exporters.corpus import write_corpus

    chosen = _validate(dataset, categories, baseline, per_category, stratify_by)
    rows = _candidates(dataset, chosen, where, stratify_by)
    incidents, incident_fraction = (
        _incidents(rows, chosen, per_category, seed) if with_incidents else ([], {})
    )
    sample = _stratified_sample(rows, baseline, seed)
    selections = _selections(incidents, incident_fraction, sample, rows, stratify_by)
    if not selections:
        raise AnalysisError("nothing to select: no kept trace shows those categories and --baseline is 0")
    description = {
        "data_dir": dataset.location,
        "categories": list(chosen),
        "where": where,
        "baseline_requested": baseline,
        "baseline_selected": len(sample.sampled),
        "stratify_by": stratify_by,
        "strata": sample.strata,
        "seed": seed,
        "incidents": len(incidents),
        "per_category": per_category,
        "inclusion_probability": "the data dir's pi times the stratum's sampling fraction (baseline sample)",
    }
    summary = write_corpus(dataset.location, selections, out, description=description, overwrite=overwrite)
    return CorpusSelection(
        summary, selections, len(incidents), len(sample.sampled), sample.strata, description
    )


def _validate(
    dataset: Dataset,
    categories: Sequence[str] | None,
    baseline: int,
    per_category: int | None,
    stratify_by: str | None,
) -> tuple[str, ...]:
    """The chosen categories, once every option is known to be valid (:class:`AnalysisError` if not)."""
    chosen = tuple(categories) if categories else CATEGORIES
    unknown = [c for c in chosen if c not in CATEGORIES]
    if unknown:
        raise AnalysisError(f"unknown category {unknown[0]!r}; choose from: {', '.join(CATEGORIES)}")
    if baseline < 0:
        raise AnalysisError(f"--baseline must be 0 or more, got {baseline}")
    if per_category is not None and per_category < 1:
        raise AnalysisError(f"--per-category must be 1 or more, got {per_category}")
    columns = [name for name, _ in dataset.schema("traces")]
    if stratify_by is not None and stratify_by not in columns:
        raise AnalysisError(
            f"traces has no column {stratify_by!r} to stratify by; choose one of: {', '.join(columns)}"
        )
    return chosen


def _candidates(
    dataset: Dataset, chosen: Sequence[str], where: str | None, stratify_by: str | None
) -> list[dict[str, Any]]:
    """Every kept trace matching ``where``: its π, baseline membership, stratum and chosen categories
    found (``found``, empty for a trace with none)."""
    dataset.ensure_findings()
    condition = f"({where})" if where else "true"
    stratum = (
        f"coalesce(CAST(t.\"{stratify_by}\" AS VARCHAR), '{NO_VALUE}')" if stratify_by else f"'{NO_VALUE}'"
    )
    return dataset.sql_arrow(
        f"""
        SELECT t.trace_id, t.inclusion_probability, t.baseline, {stratum} AS stratum,
               coalesce(list(DISTINCT f.category) FILTER (WHERE list_contains(?, f.category)), []) AS found
        FROM (SELECT * FROM traces WHERE kept AND {condition}) t
        LEFT JOIN findings f USING (trace_id)
        GROUP BY ALL
        """,
        params=[list(chosen)],
    ).to_pylist()


def _incidents(
    rows: list[dict[str, Any]], chosen: Sequence[str], per_category: int | None, seed: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The candidates with a finding, in category then trace order (at most ``per_category`` each), and
    the sampling fraction of each one the cap sampled."""
    incidents = sorted(
        (r for r in rows if r["found"]),
        key=lambda r: (min(_ORDER[c] for c in r["found"]), r["trace_id"]),
    )
    if per_category is None:
        return incidents, {}
    return _cap_per_category(incidents, chosen, per_category, seed)


@dataclass(frozen=True)
class _Sample:
    """The stratified baseline sample: ``sampled`` maps trace id to (stratum, sampling fraction)."""

    sampled: dict[str, tuple[str, float]]
    strata: dict[str, dict[str, int]]


def _stratified_sample(rows: list[dict[str, Any]], baseline: int, seed: int) -> _Sample:
    """``baseline`` of the baseline-slice candidates, allocated proportionally over the strata and
    ranked by seed within each (:func:`allocate`, :func:`_rank`)."""
    candidates: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["baseline"]:
            candidates.setdefault(row["stratum"], []).append(row)
    quota = allocate({k: len(v) for k, v in candidates.items()}, baseline)
    sampled: dict[str, tuple[str, float]] = {}
    for name in sorted(candidates):
        pool = sorted(candidates[name], key=lambda r: _rank(seed, r["trace_id"]))
        fraction = quota[name] / len(pool)
        for row in pool[: quota[name]]:
            sampled[row["trace_id"]] = (name, fraction)
    strata = {k: {"available": len(v), "selected": quota[k]} for k, v in sorted(candidates.items())}
    return _Sample(sampled, strata)


def _selections(
    incidents: list[dict[str, Any]],
    incident_fraction: dict[str, float],
    sample: _Sample,
    rows: list[dict[str, Any]],
    stratify_by: str | None,
) -> list[Selection]:
    """The manifest's entries: the incidents (a sampled one says so too), then the rest of the sample by
    stratum, each with why it is there and its chance of being there."""
    from tailcut.exporters.corpus import Selection

    selections = []
    for row in incidents:
        found = tuple(sorted(row["found"], key=_ORDER.__getitem__))
        reason = f"incident: {', '.join(found)}"
        if row["trace_id"] in sample.sampled:
            reason += (
                f"; baseline slice sample ({_stratum_text(stratify_by, sample.sampled[row['trace_id']][0])})"
            )
        pi = row["inclusion_probability"] * incident_fraction.get(row["trace_id"], 1.0)
        selections.append(Selection(row["trace_id"], reason, found, pi, row["baseline"]))
    chosen_ids = {s.trace_id for s in selections}
    by_id = {r["trace_id"]: r for r in rows}
    for trace_id, (name, fraction) in sorted(sample.sampled.items(), key=lambda item: (item[1][0], item[0])):
        if trace_id in chosen_ids:
            continue
        reason = f"baseline slice sample ({_stratum_text(stratify_by, name)})"
        selections.append(
            Selection(trace_id, reason, (), by_id[trace_id]["inclusion_probability"] * fraction, True)
        )
    return selections


def _cap_per_category(
    incidents: list[dict[str, Any]], categories: Sequence[str], limit: int, seed: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """At most ``limit`` incidents per category, seeded; and each kept trace's sampling fraction.

    A trace's fraction is that of the first category it was taken for (``taken / available``).
    """
    taken: dict[str, float] = {}
    for category in categories:
        pool = sorted(
            (r for r in incidents if category in r["found"]), key=lambda r: _rank(seed, r["trace_id"])
        )
        already = sum(1 for r in pool if r["trace_id"] in taken)
        room = max(0, limit - already)
        fresh = [r for r in pool if r["trace_id"] not in taken][:room]
        for row in fresh:
            taken[row["trace_id"]] = (already + len(fresh)) / len(pool)
    return [r for r in incidents if r["trace_id"] in taken], taken


def _stratum_text(column: str | None, value: str) -> str:
    return f"stratum {column}={value}" if column else "one stratum"
