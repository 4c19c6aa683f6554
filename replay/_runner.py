"""The replay runner: rerun every replayable run of a corpus n times and report honest rates.

Each rerun resets the environment through the user's hook, calls the agent entry point with the run's
recorded input under a :class:`~tailcut.replay.ReplaySession`, and judges it (see
:mod:`tailcut.replay._rerun` for what "passed" means per mode). Results are rates with their
denominator, their mode and a Wilson interval ("intermittent 3/10 (live)"), never a bare "reproduced".
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailcut._run import resolve_harness_revision
from tailcut.errors import ReplayError
from tailcut.replay._canary import CanaryResult, judge_canary, plan_canary
from tailcut.replay._corpus import Corpus, CorpusRun, Envelope, load_corpus
from tailcut.replay._loading import call_agent, load_callable, takes_argument
from tailcut.replay._matching import LiveSpec, MatchOn, MatchPolicy, Normalize
from tailcut.replay._modes import ReplayMode, resolve_on_divergence
from tailcut.replay._rates import rate_text
from tailcut.replay._rerun import Check, Rerun, RerunResult, judge
from tailcut.replay._results import write_results
from tailcut.replay._session import ReplaySession, check_live_options

Hook = Callable[..., Any]


@dataclass(frozen=True)
class TraceSummary:
    """The reruns of one trace as a rate: passed of n, in a mode, with its Wilson interval.

    ``diverged`` reruns are counted apart and never among the passed (see :mod:`tailcut.replay._rerun`).
    """

    trace_id: str
    mode: ReplayMode
    passed: int
    n: int
    bit_stable: bool
    not_live: bool
    low: float
    high: float
    first_divergence: str | None = None
    label: str = ""
    diverged: int = 0
    unwrapped: tuple[str, ...] = ()
    #: Recorded tool calls the framework refused before the tool ran, which the reruns never asked for.
    rejected: tuple[str, ...] = ()
    #: What the live requests held that the third-party records do not (per boundary): not compared.
    not_compared: tuple[str, ...] = ()
    #: Why the first failed rerun failed: what the agent raised (type and message), else the check's word.
    first_failure: str | None = None

    @property
    def failed(self) -> int:
        """Reruns the check failed (that did not diverge)."""
        return self.n - self.passed - self.diverged

    @property
    def rate(self) -> str:
        """``bit-stable 20/20 (recorded)``, ``intermittent 3/10 (live)``, ``pass 0/3, diverged 3/3 (cut)``."""
        return rate_text(self.passed, self.n, self.mode, diverged=self.diverged, bit_stable=self.bit_stable)

    def line(self) -> str:
        parts = [self.trace_id, f"{self.rate:<28}", f"[{self.low:.2f}, {self.high:.2f}]"]
        if self.label:
            parts.append(self.label)
        if self.not_live:
            parts.append("NOT LIVE: no live crossing was made")
        lines = ["  ".join(parts)]
        if self.first_divergence:
            lines.append(f"    first divergence: {self.first_divergence}")
        if self.first_failure:
            lines.append(f"    first failure: {self.first_failure}")
        if self.unwrapped:
            lines.append(
                f"    ran live, not wrapped for replay: {', '.join(self.unwrapped)} "
                "(wrap the tool with @tailcut.tool to serve it from the record)"
            )
        lines += [f"    refused before the tool ran, as in the record: {entry}" for entry in self.rejected]
        lines += [f"    not compared: {entry}" for entry in self.not_compared]
        return "\n".join(lines)


@dataclass
class ReplayReport:
    """What :func:`run_replay` did: every judged rerun, the traces it skipped, the canary."""

    corpus: Path
    mode: ReplayMode
    n: int
    runs: Mapping[str, CorpusRun]
    results: list[RerunResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    canary: CanaryResult | None = None
    interrupted: bool = False
    out: Path | None = None

    def traces(self) -> list[TraceSummary]:
        """One summary per trace replayed, in corpus order."""
        by_trace: dict[str, list[RerunResult]] = {}
        for result in self.results:
            by_trace.setdefault(result.trace_id, []).append(result)
        return [self._summary(trace_id, results) for trace_id, results in by_trace.items()]

    def _summary(self, trace_id: str, results: list[RerunResult]) -> TraceSummary:
        from tailcut.analysis.stats import wilson_interval

        n = len(results)
        passed = sum(r.passed for r in results)
        low, high = wilson_interval(passed, n)
        stable = (
            self.mode is ReplayMode.RECORDED
            and n >= 2
            and passed == n
            and len({r.rerun.fingerprint() for r in results}) == 1
        )
        first = next((r.rerun.first_divergence for r in results if r.rerun.divergences), None)
        unwrapped = tuple(dict.fromkeys(key for r in results for key in r.rerun.unwrapped))
        rejected = tuple(dict.fromkeys(entry for r in results for entry in r.rerun.rejected))
        not_compared = tuple(dict.fromkeys(entry for r in results for entry in r.rerun.not_compared))
        failure = next((_failure_reason(r) for r in results if r.status == "fail"), None)
        run = self.runs[trace_id]
        label = run.category or ("baseline" if run.baseline else "")
        return TraceSummary(
            trace_id=trace_id,
            mode=self.mode,
            passed=passed,
            n=n,
            bit_stable=stable,
            not_live=any(r.rerun.not_live for r in results),
            low=low,
            high=high,
            first_divergence=str(first) if first else None,
            label=label,
            diverged=sum(r.status == "diverged" for r in results),
            unwrapped=unwrapped,
            rejected=rejected,
            not_compared=not_compared,
            first_failure=failure,
        )

    @property
    def passed(self) -> bool:
        """True when at least one rerun ran and every rerun passed."""
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def nothing_replayed(self) -> bool:
        """No trace of the corpus could be replayed (all skipped, or none selected)."""
        return not self.results and not self.interrupted

    def summary_lines(self) -> list[str]:
        """The report as text: one rate per trace, then what was skipped, the canary and the file."""
        traces = self.traces()
        lines = [
            f"replay of {self.corpus}: {len(traces)} trace(s), {self.n} rerun(s) each, {self.mode.value} mode"
            " (rate, then its 95% Wilson interval)"
        ]
        lines += [f"  {summary.line()}" for summary in traces]
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} trace(s) that cannot be replayed:")
            lines += [f"  {trace_id}: {why}" for trace_id, why in self.skipped.items()]
        if self.nothing_replayed:
            lines.append("NOTHING REPLAYED: no trace of the corpus could be replayed")
        if self.canary is not None:
            lines.append(str(self.canary))
        if self.interrupted:
            lines.append(f"interrupted: kept the {len(self.results)} rerun(s) that finished")
        if self.out is not None:
            lines.append(f"results: {self.out} ({len(self.results)} rows)")
        return lines


def run_replay(
    corpus: Corpus | str | os.PathLike[str],
    agent: Hook | str,
    *,
    mode: ReplayMode | str = ReplayMode.RECORDED,
    live: Sequence[LiveSpec | str] = (),
    n: int = 1,
    reset: Hook | str | None = None,
    check: Check | str | None = None,
    traces: Sequence[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    verify: bool = True,
    canary: bool | None = None,
    on_divergence: str | None = None,
    match_on: MatchOn | None = None,
    normalize: Normalize | None = None,
    harness_revision: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay every replayable run of a corpus ``n`` times and judge each rerun.

    Parameters
    ----------
    corpus
        A :class:`Corpus`, or the path of one (refused unless its files match the manifest).
    agent
        The entry point, or its ``module:function``; called with the decoded run input as its single
        positional argument (a coroutine function runs on a fresh event loop). It should open
        ``tailcut.run`` as it did when recorded, so its outcome is compared; an agent whose root span
        another instrumentation opens need not: its crossings are numbered per rerun, and its return
        value is compared with the recorded output.
    mode
        ``recorded``, ``live`` or ``cut``.
    live
        Cut mode: boundaries that run live (``router:refund_guard``, ``tool:refund#2``).
    n
        Reruns per trace, ≥ 1.
    reset
        Called before every rerun (and before the canary's), with the run input if it takes an argument.
    check
        ``check(rerun) -> bool | (bool, message)``; default: the recorded outcome reproduces. An
        ``AssertionError`` it raises is a failure with the assertion's message.
    traces
        Replay only these trace ids.
    out
        Write the results (``replay_results`` schema) to this Parquet file, also when interrupted.
    verify
        Check the corpus files against the manifest.
    canary
        Run the canary first (default: in recorded mode only).
    on_divergence, match_on, normalize
        Passed to every :class:`ReplaySession`.
    harness_revision
        Recorded in the results; default the rerun's root span's, then ``TAILCUT_HARNESS_REVISION``
        or the git commit.
    on_progress
        Called with ``(done, total)`` reruns at the start and after each rerun.

    Returns
    -------
    ReplayReport
        Every judged rerun, the traces skipped as not replayable, the canary and whether a Ctrl-C
        stopped the replay (the reruns that finished are kept, and written to ``out``).

    Raises
    ------
    ReplayError
        Bad options, an unknown trace or live boundary, a hook that cannot be imported, a reset hook
        that fails (after writing the reruns that finished).
    CorpusError
        If the corpus is refused.
    """
    loaded = corpus if isinstance(corpus, Corpus) else load_corpus(corpus, verify=verify)
    replay_mode = ReplayMode.parse(mode)
    plan = _Plan(
        corpus=loaded,
        mode=replay_mode,
        live=check_live_options(replay_mode, live),
        agent=load_callable(agent, "--agent") if isinstance(agent, str) else agent,
        reset=load_callable(reset, "--reset") if isinstance(reset, str) else reset,
        check=load_callable(check, "--check") if isinstance(check, str) else check,
        on_divergence=on_divergence,
        match_on=match_on,
        normalize=normalize,
        harness_revision=harness_revision,
    )
    if n < 1:
        raise ReplayError(f"n must be at least 1 rerun per trace; got {n}")
    resolve_on_divergence(on_divergence, replay_mode)  # refuse bad options before anything runs
    MatchPolicy(match_on, normalize)
    plan.check_live_boundaries()
    selected = _select(loaded, traces)
    report = ReplayReport(corpus=loaded.path, mode=plan.mode, n=n, runs=loaded.runs)
    report.skipped = {
        r.trace_id: r.not_replayable_reason or "not replayable" for r in selected if not r.replayable
    }
    replayable = [r for r in selected if r.replayable]
    total = len(replayable) * n
    try:
        if (plan.mode is ReplayMode.RECORDED if canary is None else canary) and replayable:
            report.canary = plan.canary(replayable)
        if on_progress is not None:
            on_progress(0, total)
        for run in replayable:
            for index in range(1, n + 1):
                report.results.append(plan.rerun(run, index))
                if on_progress is not None:
                    on_progress(len(report.results), total)
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        if out is not None:
            report.out = write_results(report.results, loaded.runs, out)
    return report


def _select(corpus: Corpus, traces: Sequence[str] | None) -> list[CorpusRun]:
    if not traces:
        return list(corpus.runs.values())
    return [corpus.run(trace_id) for trace_id in dict.fromkeys(t.lower() for t in traces)]


@dataclass
class _Plan:
    """Everything every rerun of one replay shares."""

    corpus: Corpus
    mode: ReplayMode
    live: tuple[LiveSpec, ...]
    agent: Hook
    reset: Hook | None
    check: Check | None
    on_divergence: str | None
    match_on: MatchOn | None
    normalize: Normalize | None
    harness_revision: str | None

    def check_live_boundaries(self) -> None:
        """A ``--live`` boundary no envelope crosses is a typo, not a cut."""
        known = self.corpus.boundaries()
        for spec in self.live:
            if spec.boundary not in known:
                listed = ", ".join(sorted(known)) or "none"
                raise ReplayError(
                    f"live boundary {spec.boundary} is in no run of the corpus (it has: {listed})"
                )

    def rerun(
        self,
        run: CorpusRun,
        index: int,
        *,
        envelopes: Sequence[Envelope] | None = None,
        mode: ReplayMode | None = None,
    ) -> RerunResult:
        """Reset, replay ``run`` once under a fresh session, and judge it."""
        mode = mode or self.mode
        run_input = run.input
        self._reset(run, index, run_input)
        replay = ReplaySession(
            envelopes if envelopes is not None else self.corpus.envelopes(run.trace_id),
            trace_id=run.trace_id,
            mode=mode,
            live=self.live if mode is ReplayMode.CUT else (),
            on_divergence=self.on_divergence,
            match_on=self.match_on,
            normalize=self.normalize,
        )
        started_at = dt.datetime.now(dt.UTC)
        start = time.perf_counter()
        output: Any = None
        error: BaseException | None = None
        try:
            with replay.active():
                try:
                    output = call_agent(self.agent, run_input)
                except Exception as exc:
                    error = exc
        finally:
            replay.close()
        rerun = Rerun(
            trace_id=run.trace_id,
            mode=mode,
            index=index,
            input=run.input,
            output=output,
            error=error,
            crossings=tuple(replay.crossings),
            divergences=tuple(replay.divergences),
            outcome=replay.outcome,
            recorded_outcome=run.outcome,
            recorded_error_type=run.error_type,
            recorded_output=run.output,
            unwrapped=tuple(replay.unwrapped),
            rejected=tuple(replay.rejected),
            not_compared=tuple(replay.not_compared),
            live_counts=dict(replay.live_counts),
            served_counts=dict(replay.served_counts),
            stopped_by=replay.stopped_by,
            harness_revision=self.harness_revision
            or replay.harness_revision
            or resolve_harness_revision(None),
            started_at=started_at,
            duration_ms=(time.perf_counter() - start) * 1000.0,
        )
        return judge(rerun, self.check)

    def _reset(self, run: CorpusRun, index: int, run_input: Any) -> None:
        if self.reset is None:
            return
        try:
            if takes_argument(self.reset):
                self.reset(run_input)
            else:
                self.reset()
        except Exception as exc:
            raise ReplayError(
                f"reset hook failed before rerun {index} of trace {run.trace_id}: {type(exc).__name__}: {exc}"
            ) from None

    def canary(self, runs: Sequence[CorpusRun]) -> CanaryResult:
        """Corrupt a feeding response of the first run whose clean recorded replay passed, and replay it.

        A trace whose clean replay fails or diverges would make any corrupted replay look "caught", so
        it is passed over (and named in the result when no trace is left).
        """
        unclean: list[str] = []
        for run in runs:
            planned = plan_canary(run.trace_id, self.corpus.envelopes(run.trace_id))
            if planned is None:
                continue
            clean = self.rerun(run, 0, mode=ReplayMode.RECORDED)
            if not clean.passed:
                unclean.append(run.trace_id)
                continue
            corrupted = self.rerun(run, 0, envelopes=planned.envelopes, mode=ReplayMode.RECORDED)
            return judge_canary(planned, clean.rerun, corrupted.rerun)
        if unclean:
            return CanaryResult(
                None, f"canary: not run: no trace replayed cleanly to corrupt (tried {', '.join(unclean)})"
            )
        return CanaryResult(None, "canary: not run: no recorded response feeds a later boundary")


def _failure_reason(result: RerunResult) -> str:
    """``APIConnectionError: Connection error.`` for a rerun whose agent raised, else the check's message
    (first lines only: the terminal gets one line, the results file keeps everything)."""
    error = result.rerun.error
    if error is not None:
        message = _first_line(str(error))
        return f"{type(error).__name__}: {message}" if message else type(error).__name__
    return _first_line(result.check_message) or "the check failed"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
