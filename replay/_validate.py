"""``tailcut validate``: one controlled test of a candidate fix against recorded incidents, one verdict.

A fix is shown to work by four things at once (DESIGN.md section 6):

1. **The test exercises the changed code where the failure was attributed.** Each incident is replayed
   cut-point at the boundary its finding points at (the ``findings`` table's ``boundary``, with its
   ``layer``; the earliest finding of the trace that names a boundary): that boundary runs live, every
   other one is served from the record. ``live`` overrides the cut for every incident.
2. **The new code passes it.** ``n`` reruns with the new agent; each passes when the check passes.
3. **The old code still fails it.** ``n`` reruns with the baseline agent at the same cut. An incident
   whose baseline rerun passes *does not exercise the change*: the test cannot tell the fix from the
   fault, so it proves nothing about the change and is never reported as resolved.
4. **Unrelated behaviour is unchanged.** A golden slice (a seeded sample of the data dir's baseline
   slice, or a given corpus) is replayed by both agents in cut mode at the union of the incidents' cuts.
   A golden trace the baseline agent passes is *broken* when the new agent fails the check, or its path
   changes after the cut where the baseline agent's did not (:func:`path_changes`: a divergence
   downstream of a live crossing that the baseline agent's reruns never had, and that the new harness's
   own differences before the cut do not explain); it is listed with that divergence. A golden trace
   the baseline agent fails is *fixed* when the new agent passes it (its path may change: that is the
   fix) and *fails with both* otherwise, which is not counted against the fix.

A rerun is judged by the check alone. A divergence after the cut is what a fix does (the guard now
says no, so the record's next request is not sent) and one before it is a harness that differs
elsewhere too (a new prompt); both are reported, neither fails an incident's rerun. The default check
asks that the rerun neither raise nor record the outcome ``fail``; give one that judges what the cut
exercises (``tailcut.demo.fleet:check_run`` is an example).

Verdicts, per incident and overall:

==================================  ==================================================================
verdict                             when
==================================  ==================================================================
``resolved``                        every new rerun passes and every baseline rerun fails
``not resolved``                    a new rerun fails (and the baseline fails too)
``does not exercise the change``    a baseline rerun passes: the test does not reproduce the failure
``resolved, but breaks N of M``     every incident resolved, and N of the M golden traces broken
==================================  ==================================================================

Overall, ``not resolved`` wins over ``does not exercise the change``, which wins over the rest. Exit
codes: 0 resolved with nothing broken, 1 any other verdict, 2 the validation could not run
(:class:`ValidateError`, one line saying why).

Before any rerun, the estimated cost of the model calls the cuts make live is worked out from the
recorded tokens (:mod:`tailcut.replay._cost`) and reported; above ``max_cost`` (or unknown, with a
model that has no price) the validation refuses to start.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from tailcut.errors import ReplayError
from tailcut.replay._corpus import Corpus, CorpusRun, load_corpus
from tailcut.replay._cost import CostEstimate, PlannedReruns, RecordedCall, estimate_cost
from tailcut.replay._diff import MAX_PATHS
from tailcut.replay._divergence import DivergenceRecord
from tailcut.replay._loading import load_callable
from tailcut.replay._matching import LiveSpec, parse_live
from tailcut.replay._modes import ReplayMode
from tailcut.replay._rates import rate_text
from tailcut.replay._rerun import Check, Rerun, RerunResult
from tailcut.replay._runner import Hook, run_replay

if TYPE_CHECKING:
    from tailcut.analysis import Dataset

Role = Literal["new", "baseline"]
Sample = Literal["incident", "golden"]
IncidentVerdict = Literal["resolved", "not resolved", "does not exercise the change"]
GoldenStatus = Literal["broken", "fixed", "unchanged", "fails with both"]

DEFAULT_RERUNS: Final = 3
DEFAULT_GOLDEN_SIZE: Final = 20
EXIT_RESOLVED: Final = 0
EXIT_NOT_RESOLVED: Final = 1
EXIT_COULD_NOT_RUN: Final = 2
_TRACE_ID: Final = re.compile(r"^[0-9a-f]{32}$")


class ValidateError(ReplayError):
    """A validation cannot run as asked (an unknown incident, no cut to make, no golden slice, ...)."""


class CostRefused(ValidateError):
    """The live reruns would cost more than ``--max-cost`` allows (or their cost is unknown)."""


@dataclass(frozen=True)
class Finding:
    """The finding an incident's cut comes from: its category and the span it points at."""

    category: str
    boundary: str | None
    occurrence: int | None
    layer: str
    evidence: str = ""

    def __str__(self) -> str:
        at = f"{self.boundary}#{self.occurrence}" if self.boundary else "the run itself"
        return f"{self.category} at {at} (layer {self.layer})"


@dataclass(frozen=True)
class Reruns:
    """The reruns of one trace by one agent, judged by the check alone (divergences reported apart)."""

    role: Role
    mode: ReplayMode
    results: tuple[RerunResult, ...]

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        """Reruns whose check passed."""
        return sum(r.check_passed is True for r in self.results)

    @property
    def diverged(self) -> int:
        """Reruns in which anything left the record (before or after the cut)."""
        return sum(bool(r.rerun.divergences) for r in self.results)

    @property
    def rate(self) -> str:
        """``always 3/3 (cut)``: reruns whose check passed, of all, in the mode they ran."""
        return rate_text(self.passed, self.n, self.mode)

    @property
    def failure(self) -> str | None:
        """What the check said of the first rerun it failed."""
        return next((r.check_message for r in self.results if r.check_passed is not True), None)

    @property
    def first_divergence(self) -> DivergenceRecord | None:
        return next((r.rerun.first_divergence for r in self.results if r.rerun.divergences), None)

    def downstream(self) -> dict[tuple[str, str, int], DivergenceRecord]:
        """Every change of path after the cut (:func:`path_changes`) over the reruns, by (kind, boundary,
        occurrence)."""
        found: dict[tuple[str, str, int], DivergenceRecord] = {}
        for result in self.results:
            for key, divergence in path_changes(result.rerun).items():
                found.setdefault(key, divergence)
        return found


def path_changes(rerun: Rerun) -> dict[tuple[str, str, int], DivergenceRecord]:
    """The divergences of ``rerun`` after the cut that change its path, by (kind, boundary, occurrence).

    A divergence downstream of a live crossing is a changed path when a crossing is missing or extra, or
    a request differs in a way no divergence before the cut already showed: a harness whose prompt or tool
    list differs changes every model request, before the cut and after it alike, and that change is the
    harness's, not a consequence of the live boundary.
    """
    upstream = {path for d in rerun.divergences if not d.expected for path in d.paths}
    found: dict[tuple[str, str, int], DivergenceRecord] = {}
    for divergence in rerun.divergences:
        if not divergence.expected:
            continue
        paths = set(divergence.paths)
        if divergence.kind == "request" and paths and paths <= upstream and len(paths) < MAX_PATHS:
            continue
        found.setdefault((divergence.kind, divergence.boundary, divergence.occurrence), divergence)
    return found


@dataclass(frozen=True)
class IncidentResult:
    """One incident: where it was cut and why, and the new and baseline agents' reruns there."""

    trace_id: str
    label: str
    cut: tuple[str, ...]
    cut_from: Literal["finding", "--live"]
    finding: Finding | None
    new: Reruns
    old: Reruns

    @property
    def verdict(self) -> IncidentVerdict:
        if self.old.passed:
            return "does not exercise the change"
        return "resolved" if self.new.passed == self.new.n else "not resolved"


@dataclass(frozen=True)
class GoldenResult:
    """One golden trace, replayed by both agents at the incidents' cuts."""

    trace_id: str
    label: str
    new: Reruns
    old: Reruns

    @property
    def new_divergence(self) -> DivergenceRecord | None:
        """The first divergence after the cut the new agent made and the baseline agent never did."""
        old = self.old.downstream()
        return next((d for key, d in self.new.downstream().items() if key not in old), None)

    def rerun_passes(self, result: RerunResult) -> bool:
        """Whether one of the new agent's reruns keeps the behaviour: its check passed, and, where the
        baseline agent passed every rerun, its path changed after the cut nowhere the baseline agent's did."""
        if result.check_passed is not True:
            return False
        if self.old.passed < self.old.n:  # the old code got this trace wrong: a changed path is the fix
            return True
        return self.old.downstream().keys() >= path_changes(result.rerun).keys()

    @property
    def status(self) -> GoldenStatus:
        new_fails, old_fails = self.new.passed < self.new.n, self.old.passed < self.old.n
        if old_fails:
            return "fails with both" if new_fails else "fixed"
        if new_fails or self.new_divergence is not None:
            return "broken"
        return "unchanged"

    @property
    def reason(self) -> str | None:
        """Why a broken trace is broken; None for the others."""
        if self.status != "broken":
            return None
        if self.new.passed < self.new.n:
            return f"now fails its check: {self.new.failure}"
        return f"diverges after the cut where the baseline agent did not: {self.new_divergence}"


@dataclass
class Validation:
    """What :func:`validate` found: each incident's verdict, the golden slice's, and the overall one."""

    agent: str
    baseline_agent: str
    check: str
    n: int
    incidents: list[IncidentResult]
    golden: list[GoldenResult]
    golden_source: str
    golden_cut: tuple[str, ...]
    estimate: CostEstimate
    max_cost: float | None = None
    results_file: Path | None = None
    #: model calls the reruns made live (the estimate's are from the record)
    live_calls: int = 0

    @property
    def broken(self) -> list[GoldenResult]:
        return [g for g in self.golden if g.status == "broken"]

    @property
    def verdict(self) -> str:
        verdicts = {i.verdict for i in self.incidents}
        for worst in ("not resolved", "does not exercise the change"):
            if worst in verdicts:
                return worst
        if self.broken:
            return f"resolved, but breaks {len(self.broken)} of {len(self.golden)} unrelated"
        return "resolved"

    @property
    def exit_code(self) -> int:
        return EXIT_RESOLVED if self.verdict == "resolved" else EXIT_NOT_RESOLVED


def default_check(rerun: Rerun) -> tuple[bool, str]:
    """The default check: the rerun neither raised nor recorded the outcome ``fail``."""
    if rerun.error is not None:
        return False, f"the rerun raised {rerun.error_text}"
    if rerun.outcome == "fail":
        return False, "the rerun's outcome is fail"
    return True, f"the rerun ended with outcome {rerun.outcome or '(none)'}"


def _name(value: Hook | str | None, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, str):
        return value
    return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"


def validate(
    data: str | os.PathLike[str],
    *,
    agent: Hook | str,
    baseline_agent: Hook | str,
    incidents: Sequence[str] = (),
    corpus: Corpus | str | os.PathLike[str] | None = None,
    live: Sequence[LiveSpec | str] = (),
    golden: Corpus | str | os.PathLike[str] | None = None,
    golden_size: int | None = None,
    seed: int = 0,
    check: Check | str | None = None,
    reset: Hook | str | None = None,
    n: int = DEFAULT_RERUNS,
    max_cost: float | None = None,
    out: str | os.PathLike[str] | None = None,
    on_estimate: Callable[[CostEstimate], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Validation:
    """Validate ``agent`` (the candidate fix) against incidents, with ``baseline_agent`` (the old code).

    Parameters
    ----------
    data
        The data dir the incidents were recorded in (their findings and recorded tokens are read there).
    agent, baseline_agent
        The new and the old entry points, or their ``module:function``.
    incidents
        The incidents' trace ids (exported from ``data``); with ``corpus``, the ones of it to take.
    corpus
        An incident corpus (``tailcut select`` / ``export-corpus``) instead of, or as well as, trace ids.
    live
        The cut for every incident (``kind:name[#occurrence]``); default: each incident's finding's boundary.
    golden
        A golden corpus; default: ``golden_size`` traces of ``data``'s baseline slice, drawn with ``seed``.
    golden_size
        Traces of the baseline slice to draw (default :data:`DEFAULT_GOLDEN_SIZE`; 0: no golden slice).
    seed
        Seed of the golden slice's draw (the same seed draws the same traces).
    check
        ``check(rerun) -> bool | (bool, message)``; default :func:`default_check`.
    reset
        Called before every rerun (with the run input if it takes an argument).
    n
        Reruns per trace and agent.
    max_cost
        Refuse to start when the live model calls may cost more than this many US dollars.
    out
        Write one row per rerun (``validate_results`` schema) to this Parquet file.
    on_estimate
        Called with the cost estimate before any rerun, when a model call will run live.
    on_progress
        Called with ``(done, total)`` reruns.

    Returns
    -------
    Validation

    Raises
    ------
    ValidateError
        The validation cannot run as asked; :class:`CostRefused` when the cost is over ``max_cost``.
    ReplayError, CorpusError
        A bad option, hook or corpus.
    """
    from tailcut.analysis import Dataset

    if n < 1:
        raise ValidateError(f"-n must be at least 1 rerun per trace; got {n}")
    if golden is not None and golden_size is not None:
        raise ValidateError("give a golden corpus or a golden slice size, not both")
    if max_cost is not None and max_cost < 0:
        raise ValidateError(f"--max-cost must be 0 or more US dollars; got {max_cost}")
    hooks = _Hooks(
        new=load_callable(agent, "--agent") if isinstance(agent, str) else agent,
        old=load_callable(baseline_agent, "--baseline-agent")
        if isinstance(baseline_agent, str)
        else baseline_agent,
        reset=load_callable(reset, "--reset") if isinstance(reset, str) else reset,
        check=(load_callable(check, "--check") if isinstance(check, str) else check) or default_check,
        n=n,
    )
    specs = parse_live(live)
    with Dataset(data) as dataset, tempfile.TemporaryDirectory(prefix="tailcut-validate-") as scratch:
        work = Path(scratch)
        incident_corpus = _incident_corpus(dataset, incidents, corpus, work / "incidents")
        chosen = _chosen_incidents(incident_corpus, incidents if corpus is not None else ())
        findings = _findings(dataset, chosen)
        cuts = {trace_id: _cut(trace_id, findings.get(trace_id), specs) for trace_id in chosen}
        golden_corpus, golden_source = _golden_corpus(
            dataset, golden, DEFAULT_GOLDEN_SIZE if golden_size is None else golden_size, seed, chosen, work
        )
        union = tuple(dict.fromkeys(spec for cut in cuts.values() for spec in cut))
        golden_cut = _within(union, golden_corpus)
        golden_ids = (
            [r.trace_id for r in golden_corpus.runs.values() if r.replayable] if golden_corpus else []
        )
        plan = [PlannedReruns(t, cuts[t], 2 * n) for t in chosen]
        plan += [PlannedReruns(t, golden_cut, 2 * n) for t in golden_ids]
        estimate = _estimate(dataset, plan)
    if estimate.calls and on_estimate is not None:
        on_estimate(estimate)
    if max_cost is not None and estimate.over(max_cost):
        cost = "unknown" if estimate.usd is None else f"${estimate.usd:.4f}"
        raise CostRefused(
            f"refusing to start: the live model calls are estimated at {cost} ({estimate.calls} calls), "
            f"over --max-cost {max_cost:g}"
        )
    progress = _Progress(on_progress, 2 * n * (len(chosen) + len(golden_ids)))
    results = [
        IncidentResult(
            trace_id=trace_id,
            label=_label(incident_corpus, trace_id, findings.get(trace_id)),
            cut=tuple(str(s) for s in cuts[trace_id]),
            cut_from="--live" if specs else "finding",
            finding=findings.get(trace_id),
            new=hooks.reruns("new", "incident", incident_corpus, [trace_id], cuts[trace_id], progress)[
                trace_id
            ],
            old=hooks.reruns("baseline", "incident", incident_corpus, [trace_id], cuts[trace_id], progress)[
                trace_id
            ],
        )
        for trace_id in chosen
    ]
    golden_results: list[GoldenResult] = []
    if golden_corpus is not None and golden_ids:
        new = hooks.reruns("new", "golden", golden_corpus, golden_ids, golden_cut, progress)
        old = hooks.reruns("baseline", "golden", golden_corpus, golden_ids, golden_cut, progress)
        golden_results = [
            GoldenResult(t, _label(golden_corpus, t, None), new[t], old[t]) for t in golden_ids if t in new
        ]
    validation = Validation(
        agent=_name(agent, "?"),
        baseline_agent=_name(baseline_agent, "?"),
        check=_name(check, "default: the rerun neither raises nor ends with outcome fail"),
        n=n,
        incidents=results,
        golden=golden_results,
        golden_source=golden_source,
        golden_cut=tuple(str(s) for s in golden_cut),
        estimate=estimate,
        max_cost=max_cost,
        live_calls=hooks.live_llm_calls,
    )
    if out is not None:
        from tailcut.replay._validation_output import write_validation

        validation.results_file = write_validation(validation, hooks.rows, out)
    return validation


@dataclass
class _Progress:
    callback: Callable[[int, int], None] | None
    total: int
    done: int = 0

    def offset(self) -> Callable[[int, int], None] | None:
        if self.callback is None:
            return None
        start, callback, total = self.done, self.callback, self.total
        return lambda done, _total: callback(start + done, total)

    def advance(self, reruns: int) -> None:
        self.done += reruns


@dataclass
class _Hooks:
    """The agents, reset hook and check every rerun of one validation shares, and what the reruns did."""

    new: Hook
    old: Hook
    reset: Hook | None
    check: Check
    n: int
    #: (role, sample, live, the judged rerun, its corpus run) of every rerun, for the results file
    rows: list[tuple[Role, Sample, tuple[str, ...], RerunResult, CorpusRun]] = field(default_factory=list)
    live_llm_calls: int = 0

    def reruns(
        self,
        role: Role,
        sample: Sample,
        corpus: Corpus,
        traces: list[str],
        cut: tuple[LiveSpec, ...],
        progress: _Progress,
    ) -> dict[str, Reruns]:
        """``n`` reruns of each of ``traces`` by the ``role`` agent at ``cut`` (recorded mode without one)."""
        mode = ReplayMode.CUT if cut else ReplayMode.RECORDED
        report = run_replay(
            corpus,
            self.new if role == "new" else self.old,
            mode=mode,
            live=cut,
            n=self.n,
            reset=self.reset,
            check=self.check,
            traces=traces,
            canary=False,
            on_divergence="continue",
            on_progress=progress.offset(),
        )
        progress.advance(len(report.results))
        if report.interrupted:
            raise ValidateError("interrupted: the validation stopped before its reruns finished")
        by_trace: dict[str, list[RerunResult]] = {}
        for result in report.results:
            by_trace.setdefault(result.trace_id, []).append(result)
            self.live_llm_calls += result.rerun.live_counts.get("llm", 0)
            self.rows.append((role, sample, tuple(str(s) for s in cut), result, corpus.runs[result.trace_id]))
        return {t: Reruns(role, mode, tuple(rs)) for t, rs in by_trace.items()}


# -- the incidents -------------------------------------------------------------------------------------------


def _incident_corpus(
    dataset: Dataset, incidents: Sequence[str], corpus: Corpus | str | os.PathLike[str] | None, out: Path
) -> Corpus:
    """The incident corpus: the one given, or the ``incidents`` exported from the data dir."""
    if corpus is not None:
        return corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    if not incidents:
        raise ValidateError("name the incidents: --incident TRACE_ID (repeatable) or --corpus INCIDENTS")
    from tailcut.exporters.corpus import Selection, write_corpus

    ids = _trace_ids(incidents)
    rows = {
        r["trace_id"]: r
        for r in dataset.sql_arrow(
            "SELECT trace_id, kept, inclusion_probability FROM traces WHERE list_contains(?, trace_id)",
            params=[ids],
        ).to_pylist()
    }
    for trace_id in ids:
        row = rows.get(trace_id)
        if row is None:
            raise ValidateError(f"incident {trace_id} is not in {dataset.location}")
        if not row["kept"]:
            raise ValidateError(
                f"incident {trace_id} was not kept (its spans were dropped): nothing to replay"
            )
    categories = _categories(dataset, ids)
    selections = [
        Selection(
            trace_id,
            f"incident: {', '.join(categories.get(trace_id, ())) or 'named by --incident'}",
            categories.get(trace_id, ()),
            rows[trace_id]["inclusion_probability"],
            False,
        )
        for trace_id in ids
    ]
    write_corpus(
        dataset.location, selections, out, description={"selected_by": "tailcut validate --incident"}
    )
    return load_corpus(out)


def _trace_ids(values: Sequence[str]) -> list[str]:
    ids = list(dict.fromkeys(v.strip().lower() for v in values))
    for trace_id in ids:
        if not _TRACE_ID.match(trace_id):
            raise ValidateError(f"--incident {trace_id!r} is not a trace id (32 hex characters)")
    return ids


def _chosen_incidents(corpus: Corpus, named: Sequence[str]) -> list[str]:
    """The replayable incidents of ``corpus`` (those ``named``, when some are)."""
    ids = [corpus.run(t).trace_id for t in _trace_ids(named)] if named else list(corpus.runs)
    for trace_id in ids:
        run = corpus.run(trace_id)
        if not run.replayable:
            raise ValidateError(f"incident {trace_id} cannot be replayed: {run.not_replayable_reason}")
    if not ids:
        raise ValidateError(f"the incident corpus at {corpus.path} holds no run")
    return ids


def _categories(dataset: Dataset, ids: list[str]) -> dict[str, tuple[str, ...]]:
    dataset.ensure_findings()
    rows = dataset.sql_arrow(
        "SELECT trace_id, list(DISTINCT category ORDER BY category) AS categories FROM findings "
        "WHERE list_contains(?, trace_id) GROUP BY trace_id",
        params=[ids],
    ).to_pylist()
    return {r["trace_id"]: tuple(r["categories"]) for r in rows}


def _findings(dataset: Dataset, ids: list[str]) -> dict[str, Finding]:
    """Each incident's finding the cut comes from: its earliest (by ``seq``) that names a boundary, else
    its first."""
    dataset.ensure_findings()
    rows = dataset.sql_arrow(
        "SELECT trace_id, category, boundary, occurrence, layer, evidence FROM findings "
        "WHERE list_contains(?, trace_id) "
        "ORDER BY trace_id, boundary IS NULL, seq NULLS LAST, confidence DESC, category",
        params=[ids],
    ).to_pylist()
    found: dict[str, Finding] = {}
    for row in rows:
        found.setdefault(
            row["trace_id"],
            Finding(row["category"], row["boundary"], row["occurrence"], row["layer"], row["evidence"] or ""),
        )
    return found


def _cut(trace_id: str, finding: Finding | None, live: tuple[LiveSpec, ...]) -> tuple[LiveSpec, ...]:
    """The boundaries an incident runs live: ``live`` when given, else its finding's boundary."""
    if live:
        return live
    if finding is None:
        raise ValidateError(
            f"incident {trace_id} has no finding to take the cut from: name the boundary with --live"
        )
    if finding.boundary is None:
        raise ValidateError(
            f"incident {trace_id}'s finding ({finding.category}) points at the run itself, not a boundary: "
            "name the boundary to cut at with --live"
        )
    return (LiveSpec(finding.boundary),)


def _label(corpus: Corpus, trace_id: str, finding: Finding | None) -> str:
    run = corpus.run(trace_id)
    if finding is not None:
        return finding.category
    return run.category or ("baseline" if run.baseline else "")


# -- the golden slice ----------------------------------------------------------------------------------------


def _golden_corpus(
    dataset: Dataset,
    golden: Corpus | str | os.PathLike[str] | None,
    size: int,
    seed: int,
    exclude: list[str],
    work: Path,
) -> tuple[Corpus | None, str]:
    """The golden corpus and where it came from: the one given, or a draw of the baseline slice."""
    if golden is not None:
        loaded = golden if isinstance(golden, Corpus) else load_corpus(golden)
        return loaded, f"corpus {loaded.path}"
    if size < 0:
        raise ValidateError(f"--golden-size must be 0 or more traces; got {size}")
    if size == 0:
        return None, "none (--golden-size 0)"
    from tailcut.analysis import select_corpus

    quoted = ", ".join(f"'{t}'" for t in exclude)  # trace ids, checked to be hex
    where = f"baseline AND trace_id NOT IN ({quoted})" if exclude else "baseline"
    available = dataset.sql_arrow(f"SELECT count(*) AS n FROM traces WHERE kept AND {where}").column("n")[0]
    if not available.as_py():
        raise ValidateError(
            f"{dataset.location} has no baseline-slice trace to draw a golden slice from: "
            "give --golden CORPUS, or --golden-size 0 to check no unrelated behaviour"
        )
    selection = select_corpus(
        dataset,
        work / "golden",
        where=where,
        baseline=size,
        seed=seed,
        with_incidents=False,
    )
    return load_corpus(work / "golden"), f"{selection.baseline} baseline-slice traces (seed {seed})"


def _within(cut: tuple[LiveSpec, ...], corpus: Corpus | None) -> tuple[LiveSpec, ...]:
    """The boundaries of ``cut`` that some run of ``corpus`` crosses (a replay refuses the others)."""
    if corpus is None:
        return ()
    known = corpus.boundaries()
    return tuple(spec for spec in cut if spec.boundary in known)


# -- the cost ------------------------------------------------------------------------------------------------


def _estimate(dataset: Dataset, plan: list[PlannedReruns]) -> CostEstimate:
    """The planned reruns' live model calls, priced from the data dir's recorded ``llm`` spans."""
    from tailcut.exporters._pricing import default_pricing

    live_llm = [p for p in plan if any(spec.boundary.startswith("llm:") for spec in p.live)]
    if not live_llm:
        return CostEstimate()
    rows = dataset.sql_arrow(
        "SELECT trace_id, boundary, occurrence, model, input_tokens, output_tokens FROM spans "
        "WHERE kind = 'llm' AND boundary IS NOT NULL AND list_contains(?, trace_id)",
        params=[sorted({p.trace_id for p in live_llm})],
    ).to_pylist()
    return estimate_cost((RecordedCall(**row) for row in rows), live_llm, default_pricing())
