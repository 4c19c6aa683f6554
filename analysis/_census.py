"""Census flags: which failure categories every trace seen shows, kept or dropped, from its ``traces`` row.

The collector sees every span of every trace before it decides, and the ``traces`` row it leaves for each
trace (kept or dropped) carries the trace's signals. For the categories those signals decide, a group's
rate is an exact count over the traces seen rather than an estimate from the kept ones (DESIGN.md
section 5, "census categories"). Each flag is the ``classify`` rule restated over the row:

======================  ============================================================================
category                census flag (``Thresholds`` defaults)
======================  ============================================================================
``error``               ``error_spans > 0`` or ``root_failed``: a span failed (and it was no
                        refusal) or reported a failure in its status, events or result, whether or
                        not the run survived it (``error_count > 0`` in files written before
                        ``error_spans``)
``schema_violation``    ``schema_violations > 0``: a tool call's arguments broke the schema sent, or
                        ``refused_calls > 0``: a span's failure text says the harness refused the
                        model's output
``tool_loop``           ``max_tool_repeat ≥ loop_min_repeats``, or depth or span count with robust
                        z ≥ ``structure_z`` against the agent's reference (the baseline slice's rows)
``cost_blowup``         tokens or LLM calls with z ≥ ``cost_z``, or duration z ≥ ``duration_z``,
                        against the same reference
``silent_degradation``  no ``error`` (as above), and outcome ``fail``
                        or ``outcome_score < score_threshold`` (a final answer cut off or empty is not
                        in the row: a data dir with such runs takes the sampled path)
``schema_drift``        none: it compares a call's arguments with earlier recorded schema versions
                        (payloads of kept spans), so it stays a sampled category
======================  ============================================================================

The z-scores use the reference and the robust scale of :mod:`._rules` (:data:`._rules.SCORES_SQL`),
computed here for every row instead of the kept ones only.

**A flag is used only where it agrees with the findings.** The flags restate rules that ``classify``
judges from spans, and a rule can see more than a row holds (a third-party convention's tool schemas, an
exception event without an ERROR status, a data dir written before a column existed). So a category is
a census category of a data dir only when its flag equals "has a finding of this category" on **every**
kept trace (:func:`build`); otherwise the category takes the sampled path (1/π weights and
the baseline slice) and the comparison says why. The kept traces include the uniform baseline slice, so
a rule that differed on the traffic at large would show there.

**What compare reads.** ``tailcut compare`` is a gate, run on every build: it reads the flags stored per
``traces`` row with the findings (:mod:`._census_file`, computed here once per change of the data dir)
and pairs them by position with the ``traces`` rows its groups are decided on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tailcut.analysis import _rules, _source
from tailcut.analysis._classify import CATEGORIES

if TYPE_CHECKING:
    from tailcut.analysis._classify import Thresholds
    from tailcut.analysis._dataset import Dataset

#: The categories a ``traces`` row can decide (``schema_drift`` needs kept spans' payloads).
CENSUS_CATEGORIES: Final = ("error", "schema_violation", "tool_loop", "cost_blowup", "silent_degradation")
#: The scratch table of the flags, one row per trace seen.
TABLE: Final = "_census"
#: The scratch table of the findings, one row per kept trace with a finding: ``found_<category>`` flags.
FOUND: Final = "_found"
#: The ``traces`` columns the flags, their reference and a comparison's samples read (and no other).
READ: Final = (
    "trace_id",
    "kept",
    "baseline",
    "inclusion_probability",
    "head_probability",
    "agent_name",
    "root_name",
    "service_name",
    "max_depth",
    "span_count",
    "input_tokens",
    "output_tokens",
    "llm_calls",
    "duration_ms",
    "error_count",
    "error_spans",
    "root_failed",
    "schema_violations",
    "refused_calls",
    "max_tool_repeat",
    "has_root",
    "outcome",
    "outcome_score",
)
#: SQL predicate (over ``traces``) of a tail-kept trace (see :mod:`._estimates`).
TAIL_KEPT: Final = "(kept AND (NOT baseline OR inclusion_probability >= coalesce(head_probability, 1.0)))"


#: The robust z-scores of a row ``t`` against its agent's reference ``r`` (the classifier's, :mod:`._rules`).
_SCORES: Final = {
    "depth": _rules._z("t.max_depth", "depth"),
    "spans": _rules._z("t.span_count", "spans"),
    "tokens": _rules._z("t.input_tokens + t.output_tokens", "tokens"),
    "calls": _rules._z("t.llm_calls", "calls"),
    "duration": _rules._z("t.duration_ms", "duration"),
}


#: A row ``t`` shows an ``error``: a span that shows one (a failure reported in a payload or an event
#: included) or a failed root; in files written before ``error_spans``, a failed span.
_SHOWS_ERROR: Final = (
    "(CASE WHEN t.error_spans IS NULL THEN t.error_count > 0 "
    "ELSE t.error_spans > 0 OR coalesce(t.root_failed, false) END)"
)


def _flags() -> dict[str, str]:
    """Each census category's flag as SQL over a ``traces`` row ``t`` and its z-scores ``z``."""
    return {
        "error": _SHOWS_ERROR,
        "schema_violation": "(t.schema_violations > 0 OR coalesce(t.refused_calls > 0, false))",
        "tool_loop": f"(t.max_tool_repeat >= $loop_min_repeats OR coalesce({_SCORES['depth']} >= "
        f"$structure_z OR {_SCORES['spans']} >= $structure_z, false))",
        "cost_blowup": f"coalesce({_SCORES['tokens']} >= $cost_z OR {_SCORES['calls']} >= $cost_z "
        f"OR {_SCORES['duration']} >= $duration_z, false)",
        "silent_degradation": f"(t.has_root AND NOT {_SHOWS_ERROR} AND (t.outcome = 'fail' "
        "OR coalesce(t.outcome_score < $score_threshold, false)))",
    }


def _census_sql(source: str, positions: bool) -> str:
    """The ``_census`` table: every row of ``source`` (``traces``, or a scan of some of its files) with its
    flags and the columns a sample needs, and with ``positions`` each row's ``filename`` and
    ``file_row_number``. Only the :data:`READ` columns are read: the CTE named ``traces`` shadows the view
    for the reference (:data:`._rules.REFERENCE`) and the flags."""
    flags = _flags()
    selected = ", ".join(f"coalesce({sql}, false) AS flag_{c}" for c, sql in flags.items())
    located = ", filename, file_row_number" if positions else ""
    carried = ", t.filename, t.file_row_number" if positions else ""
    return f"""
CREATE OR REPLACE TEMP TABLE {TABLE} AS
WITH traces AS NOT MATERIALIZED (SELECT {", ".join(READ)}{located} FROM {source}),
{_rules.REFERENCE}
SELECT t.trace_id, t.kept, t.baseline, t.inclusion_probability, coalesce(t.head_probability, 1.0) AS head,
       {TAIL_KEPT} AS tail{carried}, {selected}
FROM traces t LEFT JOIN reference r ON r.agent = {_rules.agent_key("t")}
"""


def _found_sql() -> str:
    """The :data:`FOUND` table: per trace with findings, a flag per category (the findings read once)."""
    found = ", ".join(f"bool_or(category = '{c}') AS found_{c}" for c in CATEGORIES)
    return f"CREATE OR REPLACE TEMP TABLE {FOUND} AS SELECT trace_id, {found} FROM findings GROUP BY trace_id"


def fill_found(dataset: Dataset) -> None:
    """Read the findings (classifying first if they are stale) into :data:`FOUND`."""
    dataset.ensure_findings()
    with dataset.reading():
        dataset.connection.execute(_found_sql())


def found_columns(alias: str = "f") -> str:
    """Each category's ``found_<category>`` of :data:`FOUND` as a column named for the category (false for
    a trace without findings)."""
    return ", ".join(f"coalesce({alias}.found_{c}, false) AS {c}" for c in CATEGORIES)


@dataclass(frozen=True)
class CensusCoverage:
    """Which categories are census categories of a data dir, and why the others are not.

    Attributes
    ----------
    categories : tuple of str
        The census categories (their flags agree with the findings on every kept trace).
    reasons : mapping of str to str
        For every other category of :data:`CENSUS_CATEGORIES` and ``schema_drift``, why not.
    """

    categories: tuple[str, ...]
    reasons: Mapping[str, str]

    def applies(self, category: str) -> bool:
        return category in self.categories


def build(
    dataset: Dataset, thresholds: Thresholds | None = None, *, files: Sequence[str] | None = None
) -> CensusCoverage:
    """Fill the ``_census`` table (a flag per census category for every trace seen) and :data:`FOUND`,
    and check each flag against the findings of the kept traces (classifying first if needed).

    ``files``: the ``traces`` files to read (paths, in the order their rows are wanted), each row with its
    ``filename`` and ``file_row_number`` (:mod:`._census_file` stores the census in that order); by
    default the ``traces`` view."""
    from tailcut.analysis._classify import Thresholds

    limits = thresholds or Thresholds()
    fill_found(dataset)
    connection = dataset.connection
    with dataset.reading():
        if files is None:
            query = _census_sql("main.traces", positions=False)
        else:
            query = _census_sql(
                f"({_source.table_scan(connection, 'traces', _source.file_list(files), positions=True)})",
                True,
            )
    with dataset.reading(query):
        connection.execute(query, _rules.named_parameters(query, limits.parameters()))
    disagreements = ", ".join(
        f"count(*) FILTER (WHERE c.flag_{c} <> coalesce(f.found_{c}, false))" for c in CENSUS_CATEGORIES
    )
    [(kept, *wrong)] = connection.execute(
        f"SELECT count(*), {disagreements} FROM {TABLE} c LEFT JOIN {FOUND} f USING (trace_id) WHERE c.kept"
    ).fetchall()
    reasons = {"schema_drift": "it compares kept spans' payloads (no traces-row flag)"}
    chosen = []
    for category, misses in zip(CENSUS_CATEGORIES, wrong, strict=True):
        if misses:
            reasons[category] = (
                f"its traces-row flag differs from the findings on {misses:,} of {kept:,} kept traces"
            )
        else:
            chosen.append(category)
    return CensusCoverage(tuple(chosen), reasons)


@dataclass(frozen=True)
class CensusCounts:
    """One group's census: traces seen and, per census category, those that show it.

    Attributes
    ----------
    seen : int
        Traces seen in the group (kept or dropped).
    hits : mapping of str to int
        Per census category, the traces seen that show it.
    head_probability : float
        The head sampler's probability upstream (1: none); below 1 the census is of the head-sampled
        traces, a uniform sample of the traffic.
    note : str or None
        Why the group has no census (several head probabilities), else None.
    heads : tuple of (float, int)
        The traces seen at each head probability.
    """

    seen: int
    hits: Mapping[str, int]
    head_probability: float = 1.0
    note: str | None = None
    heads: tuple[tuple[float, int], ...] = ()


def group_census(dataset: Dataset, where: str, params: Sequence[Any]) -> CensusCounts:
    """The census counts of the traces matching ``where`` over ``traces`` (``_census`` must be built:
    :func:`build`): traces seen at each head probability and the traces of each census category; a trace
    with several rows counts once (a flag if any row has it)."""
    flags = ", ".join(f"bool_or(c.flag_{c}) AS {c}" for c in CENSUS_CATEGORIES)
    sums = ", ".join(f"count(*) FILTER (WHERE {c})" for c in CENSUS_CATEGORIES)
    query = (
        f"SELECT h, count(*), {sums} FROM (SELECT c.trace_id, any_value(c.head) AS h, {flags} FROM {TABLE} c "
        f"WHERE c.trace_id IN (SELECT trace_id FROM traces WHERE ({where})) GROUP BY c.trace_id) "
        "GROUP BY h ORDER BY h"
    )
    with dataset.reading(query):
        rows = dataset.connection.execute(query, list(params) or None).fetchall()
    return counts(rows)


def counts(rows: Sequence[Sequence[Any]]) -> CensusCounts:
    """One group's :class:`CensusCounts` from its rows ``(head probability, seen, hits...)``."""
    if not rows:
        return CensusCounts(0, dict.fromkeys(CENSUS_CATEGORIES, 0))
    heads = tuple((float(row[0]), int(row[1])) for row in rows)
    if len(rows) > 1:
        listed = ", ".join(f"{head:g}" for head, _ in heads)
        return CensusCounts(
            sum(n for _, n in heads),
            dict.fromkeys(CENSUS_CATEGORIES, 0),
            note=f"its traces were head-sampled at different probabilities ({listed})",
            heads=heads,
        )
    head, seen, *hits = rows[0]
    counted = dict(zip(CENSUS_CATEGORIES, map(int, hits), strict=True))
    return CensusCounts(int(seen), counted, float(head), heads=heads)
