"""Comparison of two replay-result files of the same corpus (``tailcut compare --results A B``).

Each file has the ``replay_results`` schema: one row per rerun of a trace. **A trace passes in a file
when every one of its reruns passed** (one failing rerun in ten is still a reproduced failure, reported
with its rate elsewhere). Traces present in both files are paired, so changes are counted per trace:
*fixed* (fails in A, passes in B) and *broken* (passes in A, fails in B), tested with McNemar's exact
test, and the change in failure rate gets Newcombe's paired interval. The incident corpus (``baseline``
false) and the baseline slice (``baseline`` true) are reported side by side, since only the slice is a
uniform sample of the traffic; a 1/π-weighted (Hájek) pass rate over all paired traces is given beside
them. The verdict applies the rule of :func:`tailcut.analysis._verdict.decide` to the paired
intervals of failure rate (B − A): one test, so no multiple-comparison adjustment.

A ``tailcut validate`` results file (``validate_results``: a ``role`` column) holds the reruns of both
agents: as A it stands for the baseline agent's reruns, as B for the new agent's, so
``tailcut compare --results validate.parquet validate.parquet`` compares the old code with the fix on the
incidents (fixed) and the golden slice (broken); with a ``tailcut replay`` file on the other side, the
one agent's reruns are paired with that replay's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tailcut.analysis import stats
from tailcut.analysis._errors import ResultsFileError
from tailcut.analysis._records import difference_record, estimate_record
from tailcut.analysis._verdict import Verdict, decide

if TYPE_CHECKING:
    from rich.console import Console

_REQUIRED: Final = ("trace_id", "rerun", "passed", "baseline", "inclusion_probability", "mode")
#: The ``role`` of a validate results file's reruns each side of a comparison takes.
_VALIDATE_ROLES: Final = {"a": "baseline", "b": "new"}


@dataclass(frozen=True)
class _Trace:
    passed: bool
    reruns: int
    baseline: bool
    inclusion_probability: float
    category: str | None
    mode: str
    harness_revision: str | None


@dataclass(frozen=True)
class PairedChange:
    """Pass rates of one sample under A and B, and the paired change in failure rate.

    Attributes
    ----------
    sample : str
        ``"incident corpus"`` or ``"baseline slice"``.
    first, second : Estimate
        Pass rates (traces whose every rerun passed) under A and B.
    change : Difference
        Failure rate B − A, Newcombe's paired interval.
    test : McNemarTest
        ``first_only`` = broken (fail in B only), ``second_only`` = fixed (fail in A only).
    """

    sample: str
    first: stats.Estimate
    second: stats.Estimate
    change: stats.Difference
    test: stats.McNemarTest

    @property
    def fixed(self) -> int:
        return self.test.second_only

    @property
    def broken(self) -> int:
        return self.test.first_only

    def to_record(self) -> dict[str, Any]:
        """Pass rates under A and B, fixed and broken counts, McNemar's p and the fail-rate change."""
        return {
            "sample": self.sample,
            "pass_a": estimate_record(self.first),
            "pass_b": estimate_record(self.second),
            "fixed": self.fixed,
            "broken": self.broken,
            "mcnemar_exact_p": self.test.exact_p_value,
            "fail_rate_change": difference_record(self.change),
        }


@dataclass(frozen=True)
class ResultsComparison:
    """What ``tailcut compare --results`` reports (see the module docstring)."""

    first_path: Path
    second_path: Path
    first_label: str
    second_label: str
    incidents: PairedChange | None
    baseline: PairedChange | None
    weighted: tuple[stats.Estimate, stats.Estimate]
    verdict: Verdict | None
    by_category: list[tuple[str, PairedChange]]
    unpaired: int
    modes: tuple[str, ...]

    def labels(self) -> set[str]:
        """The verdict label, if there is a verdict (``tailcut compare --fail-on`` checks it)."""
        return {self.verdict.label} if self.verdict is not None else set()

    def to_record(self) -> dict[str, Any]:
        """The comparison as the JSON of ``tailcut compare --results --format json`` (keys in the README)."""
        verdict = self.verdict
        return {
            "kind": "results",
            "a": {"label": self.first_label, "path": str(self.first_path)},
            "b": {"label": self.second_label, "path": str(self.second_path)},
            "modes": list(self.modes),
            "unpaired": self.unpaired,
            "samples": self.rows()[: sum(p is not None for p in (self.incidents, self.baseline))],
            "by_category": [{"category": c, **p.to_record()} for c, p in self.by_category],
            "weighted_pass": {"a": estimate_record(self.weighted[0]), "b": estimate_record(self.weighted[1])},
            "verdict": None
            if verdict is None
            else {
                "verdict": verdict.label,
                "reason": verdict.reason,
                "baseline": difference_record(verdict.baseline),
                "incidents": difference_record(verdict.tail),
            },
        }

    def rows(self) -> list[dict[str, Any]]:
        """The incident corpus, the baseline slice, then each category (the rows of ``--format csv``)."""
        samples = [p.to_record() for p in (self.incidents, self.baseline) if p is not None]
        return samples + [p.to_record() for _, p in self.by_category]

    def render_terminal(self, console: Console) -> None:
        """Print both samples, the per-category changes and the verdict with its intervals."""
        from rich.table import Table

        a, b = self.first_label, self.second_label
        table = Table(
            title=f"replay results {a} → {b} (modes: {', '.join(self.modes)})", title_justify="left"
        )
        for column in (
            "sample",
            f"pass {a}",
            f"pass {b}",
            "fixed",
            "broken",
            "McNemar p",
            "fail-rate change",
        ):
            table.add_column(column)
        rows = [(p.sample, p) for p in (self.incidents, self.baseline) if p is not None]
        rows += [(f"  {category}", p) for category, p in self.by_category]
        for name, paired in rows:
            table.add_row(
                name,
                str(paired.first),
                str(paired.second),
                str(paired.fixed),
                str(paired.broken),
                f"{paired.test.exact_p_value:.3g}",
                str(paired.change),
            )
        console.print(table)
        console.print(f"1/π weighted pass rate: {a} {self.weighted[0]}; {b} {self.weighted[1]}")
        if self.verdict is not None:
            console.print(f"verdict: [bold]{self.verdict.label}[/] ({self.verdict.reason})")
        else:
            console.print(
                "verdict: none (a verdict needs paired traces in both the incident corpus and the "
                "baseline slice)"
            )
        if self.unpaired:
            console.print(f"{self.unpaired} trace(s) appear in only one file and are not compared")
        console.print("a trace passes in a file when all its reruns passed")


def _read(path: Path, side: str) -> dict[str, _Trace]:
    """Per trace of one results file: passed (all reruns), reruns, baseline, π, category, mode.

    Of a validate results file, the reruns of the agent ``side`` (``a`` or ``b``) stands for."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise ResultsFileError(f"{path}: no such replay-results file")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise ResultsFileError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in _REQUIRED if c not in table.column_names]
    if missing:
        raise ResultsFileError(
            f"{path}: not a replay-results file (no column {', '.join(missing)}; written by `tailcut replay`)"
        )
    if "role" in table.column_names:
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table["role"], _VALIDATE_ROLES[side]))
    if table.num_rows == 0:
        raise ResultsFileError(f"{path}: no reruns in the file")
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in table.select(
        [c for c in (*_REQUIRED, "category", "harness_revision") if c in table.column_names]
    ).to_pylist():
        rows.setdefault(row["trace_id"], []).append(row)
    return {
        trace: _Trace(
            passed=all(r["passed"] for r in reruns),
            reruns=len(reruns),
            baseline=bool(reruns[0]["baseline"]),
            inclusion_probability=float(reruns[0]["inclusion_probability"]),
            category=reruns[0].get("category"),
            mode=reruns[0]["mode"],
            harness_revision=reruns[0].get("harness_revision"),
        )
        for trace, reruns in rows.items()
    }


def _paired(
    sample: str, count_sample: stats.CountSample, pairs: list[tuple[_Trace, _Trace]]
) -> PairedChange | None:
    if not pairs:
        return None
    fail_a = [not a.passed for a, _ in pairs]
    fail_b = [not b.passed for _, b in pairs]
    both = sum(x and y for x, y in zip(fail_a, fail_b, strict=True))
    broken = sum(y and not x for x, y in zip(fail_a, fail_b, strict=True))
    fixed = sum(x and not y for x, y in zip(fail_a, fail_b, strict=True))
    n = len(pairs)
    return PairedChange(
        sample=sample,
        first=stats.proportion(n - sum(fail_a), n, sample=count_sample),
        second=stats.proportion(n - sum(fail_b), n, sample=count_sample),
        change=stats.paired_difference(both, broken, fixed, n - both - broken - fixed, sample=count_sample),
        test=stats.mcnemar(broken, fixed),
    )


def _label(path: Path, traces: Mapping[str, _Trace]) -> str:
    revisions = {t.harness_revision for t in traces.values() if t.harness_revision}
    return next(iter(revisions)) if len(revisions) == 1 else path.name


def compare_results(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> ResultsComparison:
    """Compare two replay-result files of the same corpus, paired per trace.

    Parameters
    ----------
    first, second : path-like
        ``replay_results`` Parquet files (A: the reference, B: the candidate).

    Returns
    -------
    ResultsComparison

    Raises
    ------
    ResultsFileError
        If a file is missing, unreadable, not of the ``replay_results`` schema, or the files share no trace.
    """
    path_a, path_b = Path(first), Path(second)
    traces_a, traces_b = _read(path_a, "a"), _read(path_b, "b")
    shared = sorted(set(traces_a) & set(traces_b))
    if not shared:
        raise ResultsFileError(f"{path_a} and {path_b} share no trace: are they replays of the same corpus?")
    pairs = [(traces_a[t], traces_b[t]) for t in shared]
    incidents = _paired("incident corpus", "tail-kept", [p for p in pairs if not p[0].baseline])
    baseline = _paired("baseline slice", "baseline slice", [p for p in pairs if p[0].baseline])
    weights = [1.0 / a.inclusion_probability for a, _ in pairs]
    weighted = (
        stats.weighted_proportion([float(a.passed) for a, _ in pairs], weights),
        stats.weighted_proportion([float(b.passed) for _, b in pairs], weights),
    )
    verdict = None
    if incidents is not None and baseline is not None:
        label, reason = decide(baseline.change, incidents.change)
        verdict = Verdict("replay failure", label, baseline.change, incidents.change, reason)
    categories = sorted({a.category for a, _ in pairs if a.category and not a.baseline})
    by_category = []
    for category in categories:
        change = _paired(
            category, "tail-kept", [p for p in pairs if p[0].category == category and not p[0].baseline]
        )
        if change is not None:
            by_category.append((category, change))
    return ResultsComparison(
        first_path=path_a,
        second_path=path_b,
        first_label=_label(path_a, traces_a),
        second_label=_label(path_b, traces_b),
        incidents=incidents,
        baseline=baseline,
        weighted=weighted,
        verdict=verdict,
        by_category=by_category,
        unpaired=len(set(traces_a) ^ set(traces_b)),
        modes=tuple(sorted({t.mode for t in (*traces_a.values(), *traces_b.values())})),
    )
