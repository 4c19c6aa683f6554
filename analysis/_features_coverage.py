"""Which traces the stored per-trace features describe exactly, at classify time (see :mod:`._features`).

**On classify** (:func:`usable`, :func:`roles_sql`, :func:`._features_stored.read`) the features stand in for
the survey and the suspects' spans of every trace they describe exactly: one row for the trace (not written in
two batches), one root, the same ``rules`` key (version, ``drift_min_attempts``, ``transient_errors``), and
its spans counted by that row (no span written before the features existed). The other traces alone are
classified from their spans, as the whole data dir is when the caller asked for the exhaustive classification
(``trust_recorded_counts`` or ``trust_trace_signals`` false), when some ``trace_checks`` row the features were
written with is missing, or when they describe no trace. Robust z-scores are still computed at classify time,
from the ``traces`` rows and the stored tokens, and only the traces they flag have their roles read (for
``cost_blowup`` and the depth and size of a ``tool_loop``), unless the written ``tool_loop`` and
``silent_degradation`` findings cannot stand (:func:`written_judgments_hold`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

from tailcut.analysis._features import CHECKS_TABLE, CHECKS_VIEW, TABLE, VIEW, role_fields, rules_key
from tailcut.analysis._pieces import STORED_VIEW

if TYPE_CHECKING:
    import duckdb

    from tailcut.analysis._classify import Thresholds
    from tailcut.analysis._dataset import Dataset

#: The relations :func:`usable` makes are of the main schema, not temporary ones (those of ``_checks`` aside,
#: read by the connection alone): the classifier runs statements that read them on cursors of its own.
_ROWS_VIEW: Final = "_feature_rows"
#: The traces the features do not describe, and their spans, read once (see :func:`usable`).
UNCOVERED: Final = "_uncovered"
UNCOVERED_SPANS: Final = "_uncovered_spans"

#: The ``spans`` columns the classifier reads of the traces the features do not describe (the survey, the
#: suspects' rows, the tool lists they showed, their calls' tokens and repeated calls; :mod:`._candidates`).
_SPAN_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "is_orphan",
    "name",
    "kind",
    "boundary",
    "occurrence",
    "seq",
    "attempt",
    "start_time",
    "end_time",
    "span_index",
    "subtree_end",
    "depth",
    "status_code",
    "error_type",
    "status_message",
    "tool_name",
    "tool_call_id",
    "request_sha256",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "attributes",
    "request",
    "response",
    "events",
)

_COVERAGE: Final = f"""
SELECT count(*), count(DISTINCT hash(trace_id)), coalesce(max(roots), 0),
       coalesce(bool_and(rules = $rules), false), coalesce(bool_or(rules = $rules), false),
       coalesce(sum(checks), 0) = (SELECT count(*) FROM {CHECKS_VIEW}), coalesce(sum(span_count), 0),
       (SELECT count(*) FROM {STORED_VIEW}),
       sum(hash(trace_id, root_outcome, root_score)) IS DISTINCT FROM
           (SELECT sum(hash(trace_id, outcome, outcome_score)) FROM traces WHERE kept)
FROM {_ROWS_VIEW}
"""
"""Rows, traces (a hash collision only sends two traces to their spans), the most roots of a row, whether
every row and whether any row has the wanted rules, whether every ``trace_checks`` row they were written
with is present, the spans they count and the spans present (counted in the stored rows: the ``spans``
view, which puts requests back together, took four times as long to count), and whether the kept
traces' ``traces`` rows may state other outcomes or scores than the roots the rows describe (or be other
traces)."""

_UNCOVERED_SQL: Final = f"""
CREATE OR REPLACE TABLE {UNCOVERED} AS
SELECT trace_id FROM {_ROWS_VIEW}
GROUP BY trace_id HAVING count(*) > 1 OR max(roots) > 1 OR bool_or(rules <> $rules)
"""
"""The traces written in several batches, with several roots, or under other rules."""

_MISCOUNTED_SQL: Final = f"""
INSERT INTO {UNCOVERED}
SELECT coalesce(s.trace_id, f.trace_id)
FROM (SELECT trace_id, count(*) AS n FROM spans GROUP BY trace_id) s
FULL OUTER JOIN (SELECT trace_id, sum(span_count) AS n FROM {_ROWS_VIEW} GROUP BY trace_id) f USING (trace_id)
WHERE s.n IS DISTINCT FROM f.n
EXCEPT SELECT trace_id FROM {UNCOVERED}
"""
"""The traces whose spans the features do not count exactly (spans written before the features, or files
removed since)."""


@dataclass(frozen=True)
class Coverage:
    """Which traces the stored features describe (see :func:`usable`).

    Attributes
    ----------
    uncovered : int
        Traces classified from their spans instead (the ``_uncovered`` table); 0 when the features
        describe every trace.
    restated : bool
        Whether the ``traces`` rows of the traces described may state another outcome or score than their
        root spans do (judged by a 64-bit checksum over both: equal sums are taken to mean equal rows), so
        that the ``silent_degradation`` findings written with the features, which read the root span's,
        cannot be used.
    """

    uncovered: int
    restated: bool = False

    @property
    def partial(self) -> bool:
        return self.uncovered > 0


_DEFAULT_JUDGMENT: Final = ("loop_min_repeats", "score_threshold", "degraded_finish_reasons")
"""The thresholds the ``tool_loop`` and ``silent_degradation`` findings written with the features used."""


def written_judgments_hold(coverage: Coverage | None, limits: Thresholds) -> bool:
    """Whether the ``tool_loop`` and ``silent_degradation`` findings the writers judged (the default
    thresholds; no reference, so repeated calls alone; each root span's outcome) stand for the traces the
    features describe under ``limits``: then only the traces far from the reference (``_scores``) need
    their roles read, and ``tool_loop`` is judged again for them alone. Not when some trace is classified
    from its spans (their roles are judged with the others'), a ``traces`` row may restate an outcome,
    or ``limits`` sets other thresholds for those two categories."""
    if coverage is None or coverage.partial or coverage.restated:
        return False
    defaults = type(limits)()  # the thresholds the writers judged with (importing them would be a cycle)
    return all(getattr(limits, name) == getattr(defaults, name) for name in _DEFAULT_JUDGMENT)


#: The roles of the traces far from the reference that ``cost_blowup`` points at (beside ``heavy``), and those
#: ``tool_loop`` points at when it is judged again (:func:`roles_sql`).
_COST_ROLES: Final = ("root",)
_LOOP_ROLES: Final = ("root", "deepest", "repeat")


@cache
def roles_sql(*, every: bool, loops: bool = True) -> str:
    """``_roles`` from the flat role columns. ``every``: of the traces some judgement may flag, far from
    the reference (``_scores``), a repeated call, or a bad outcome, score, output or final answer (the
    ``traces`` row's outcome included); else of the traces far from the reference alone, with only the
    roles their judgements read (:func:`written_judgments_hold`): those of ``cost_blowup``, and those of
    ``tool_loop`` when it is judged again (``loops``). Each column read costs its decoding for every row,
    though few rows are kept."""
    wanted = {*_COST_ROLES, *(_LOOP_ROLES if loops else ())}
    fields: dict[str, list[str]] = defaultdict(list)
    for role, field in role_fields():
        if every or role in wanted:
            fields[role].append(field)
    structs = {role: ", ".join(f"'{f}': {role}_{f}" for f in names) for role, names in fields.items()}
    roles = ", ".join(
        f"CASE WHEN {role}_span_id IS NOT NULL THEN {{{struct}}} END AS {role}"
        for role, struct in structs.items()
    )
    selected = f"""
CREATE OR REPLACE TABLE _roles AS
SELECT trace_id, roots, {roles}, heavy FROM {VIEW}
WHERE trace_id IN (SELECT trace_id FROM _scores)"""
    if not every:
        return selected
    return f"""{selected}
   OR repeat_n >= $loop_min_repeats
   OR (root_status_code <> 'ERROR'
       AND (root_outcome = 'fail' OR root_score < $score_threshold OR root_output_empty
            OR list_contains($degraded_finish_reasons, final_finish) OR final_tokens = 0
            OR trace_id IN (SELECT trace_id FROM traces
                            WHERE outcome = 'fail' OR outcome_score < $score_threshold)))
"""


def usable(dataset: Dataset, limits: Thresholds) -> Coverage | None:
    """Whether the stored features can be used for ``limits`` and for which traces (None: for none).

    They describe a trace when it has exactly one row, with at most one root and the wanted rules, and
    that row counts the trace's spans present; the other traces go to ``_uncovered`` (their spans are the
    ``_uncovered_spans`` view), and the rest are the ``_features`` view of ``dataset``'s connection. They
    are not used at all when the caller asked for the exhaustive classification, when some ``trace_checks``
    row they were written with is missing (the tool lists of a whole batch are then unknown), or when they
    describe no trace. The spans of each trace are counted only when the features' count of all spans
    differs from the spans present.
    """
    import duckdb

    from tailcut.analysis import _source
    from tailcut.exporters import schema

    if not (limits.trust_recorded_counts and limits.trust_trace_signals):
        return None
    connection = dataset.connection
    pattern = _source.table_glob(dataset.location, TABLE)
    rules = {"rules": rules_key(limits.drift_min_attempts, limits.transient_errors, limits.observation_rules)}
    try:
        [(files,)] = connection.execute("SELECT count(*) FROM glob(?)", [pattern]).fetchall()
        if not files:
            return None
        connection.execute(
            f"CREATE OR REPLACE VIEW {_ROWS_VIEW} AS SELECT * FROM read_parquet('{_source.quote(pattern)}')"
        )
        checks = _source.table_glob(dataset.location, CHECKS_TABLE)
        [(check_files,)] = connection.execute("SELECT count(*) FROM glob(?)", [checks]).fetchall()
        if check_files:
            connection.execute(
                f"CREATE OR REPLACE TEMP VIEW {CHECKS_VIEW} AS "
                f"SELECT * FROM read_parquet('{_source.quote(checks)}')"
            )
        else:
            connection.register("_no_checks", schema.TRACE_CHECKS.empty_table())
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {CHECKS_VIEW} AS SELECT * FROM _no_checks")
        [(rows, traces, roots, every, some, checked, counted, present, restated)] = connection.execute(
            _COVERAGE, rules
        ).fetchall()
        if not (checked and some):
            coverage = None
        elif rows == traces and roots <= 1 and every and counted == present:
            connection.execute(f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM {_ROWS_VIEW}")
            coverage = Coverage(0, restated=restated)
        else:
            coverage = _partial(connection, rules, count_spans=counted != present, traces=traces)
    except duckdb.Error:
        coverage = None
    if coverage is None:
        drop(dataset)
    return coverage


def _partial(
    connection: duckdb.DuckDBPyConnection, rules: dict[str, str], *, count_spans: bool, traces: int
) -> Coverage | None:
    """Fill ``_uncovered`` and make the views of :func:`usable` when only some traces are described."""
    connection.execute(_UNCOVERED_SQL, rules)
    if count_spans:
        connection.execute(_MISCOUNTED_SQL)
    [(uncovered,)] = connection.execute(
        f"SELECT count(*) FROM {UNCOVERED} WHERE trace_id IN (SELECT trace_id FROM {_ROWS_VIEW})"
    ).fetchall()
    if uncovered >= traces:
        return None
    [(uncovered,)] = connection.execute(f"SELECT count(*) FROM {UNCOVERED}").fetchall()
    connection.execute(
        f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM {_ROWS_VIEW} "
        f"WHERE trace_id NOT IN (SELECT trace_id FROM {UNCOVERED})"
    )
    connection.execute(
        f"CREATE OR REPLACE TABLE {UNCOVERED_SPANS} AS SELECT {', '.join(_SPAN_COLUMNS)} FROM spans "
        f"WHERE trace_id IN (SELECT trace_id FROM {UNCOVERED})"
    )
    return Coverage(uncovered)


def drop(dataset: Dataset) -> None:
    """Remove the views and tables :func:`usable` made."""
    for view in (VIEW, _ROWS_VIEW, CHECKS_VIEW):
        dataset.connection.execute(f"DROP VIEW IF EXISTS {view}")
    for table in (UNCOVERED_SPANS, UNCOVERED):
        dataset.connection.execute(f"DROP TABLE IF EXISTS {table}")
