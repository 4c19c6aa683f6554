"""``tailcut demo``: the whole pipeline on this machine, with failures injected at known rates.

Stages: a scripted model behind the real OpenAI API shape, the collector as a child process with the
repository's ``otel-config.yaml``, a fleet of instrumented support agents (real ``openai`` SDK) exporting
over OTLP, the tail-sampling decisions, the analysis report next to the injected true rates, a selected
replay corpus, its recorded replay (bit-stable, canary), the unsafe-refund incident replayed cut-point
under the faulty and the guarded revision, the bias-aware comparison of the two revisions, and last
``tailcut validate`` of harness v2 against one incident of each of the six kinds v2 fixes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

import tailcut
from tailcut.demo import fleet
from tailcut.demo._collector_process import CollectorProcess
from tailcut.demo._stages import Stages
from tailcut.demo.support_model import support_responder
from tailcut.errors import TailcutError
from tailcut.testing import ModelServer

MARKER: Final = ".tailcut-demo"
DEFAULT_RUNS: Final = 2000
#: The replay corpus: at most this many incidents per category, plus this many baseline traces.
CORPUS_PER_CATEGORY: Final = 4
CORPUS_BASELINE: Final = 12
#: Reruns per trace of the recorded replay (bit-stability needs at least 2) and of the cut-point replay.
RECORDED_RERUNS: Final = 3
CUT_RERUNS: Final = 3
#: Golden traces ``tailcut validate`` draws from the baseline slice.
GOLDEN_SIZE: Final = 20


class DemoError(TailcutError):
    """The demo cannot run as asked (e.g. its output directory belongs to something else)."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``tailcut demo`` was asked to do."""

    runs: int = DEFAULT_RUNS
    workers: int = 4
    out: Path = Path("tailcut-demo")
    seed: int = 7
    profile: bool = False


@dataclass
class DemoPaths:
    """Where the demo writes everything, under ``--out``."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def truth(self) -> Path:
        return self.root / "truth.parquet"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def incident(self) -> Path:
        return self.root / "incident-corpus"

    @property
    def collector_log(self) -> Path:
        return self.root / "collector.log"

    def results(self, name: str) -> Path:
        return self.root / f"replay-{name}.parquet"

    @property
    def validation(self) -> Path:
        return self.root / "validate.parquet"


@dataclass
class DemoResult:
    """What the demo produced, for the summary and for tests."""

    paths: DemoPaths
    runs: list[fleet.FleetRun] = field(default_factory=list)
    collector: Mapping[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def prepare_out(out: Path) -> DemoPaths:
    """An empty output directory: create it, or clear one a previous demo made (never anything else)."""
    if out.exists():
        if not (out / MARKER).exists():
            if any(out.iterdir()):
                raise DemoError(
                    f"--out {out} exists and was not made by tailcut demo; choose another directory"
                )
        else:
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by tailcut demo; the next demo run may delete this directory\n")
    return DemoPaths(out)


def truth_rates(runs: Sequence[fleet.FleetRun]) -> dict[str, float]:
    """The injected rate of each failure category over all runs (the ground truth)."""
    return {c: sum(c in r.injected for r in runs) / len(runs) for c in fleet.CATEGORIES}


def write_truth(runs: Sequence[fleet.FleetRun], path: Path) -> None:
    table = pa.table(
        {
            "trace_id": [r.trace_id for r in runs],
            "ticket_id": [r.ticket_id for r in runs],
            "kind": [r.kind for r in runs],
            "harness_revision": [r.revision for r in runs],
            "injected": [sorted(r.injected) for r in runs],
            "failed": [r.failed for r in runs],
        }
    )
    pq.write_table(table, path)


def run_fleet_stage(
    options: DemoOptions, paths: DemoPaths, stages: Stages, result: DemoResult, server: ModelServer
) -> None:
    """Collector + fleet, until every trace is decided and written."""
    with contextlib.ExitStack() as running:
        with stages.stage("start the collector"):
            collector = running.enter_context(CollectorProcess(paths.data, paths.collector_log))
        os.environ[fleet.MODEL_URL_ENV] = server.openai_base_url
        tailcut.init(
            service_name="support-agent",
            endpoint=collector.endpoint,
            payload_dir=str(paths.data / "payloads"),
        )
        tailcut.instrument_openai()
        try:
            with stages.stage(f"run {options.runs} agent runs", total=options.runs) as bar:
                result.runs = fleet.run_fleet(
                    options.runs, workers=options.workers, seed=options.seed, on_done=lambda _: bar.advance()
                )
            with stages.stage("wait for the collector's decisions"):
                tailcut.force_flush()
                collector.wait_decided(len(result.runs))
        finally:
            tailcut.shutdown()
            tailcut.uninstrument_openai()
            collector.stop()
        result.collector = collector.summary
    write_truth(result.runs, paths.truth)


def analyse_stage(options: DemoOptions, paths: DemoPaths, stages: Stages, result: DemoResult) -> Any:
    """Classify the kept traces and print the report next to the injected true rates."""
    from tailcut.analysis import Dataset, build_report

    with stages.stage("classify failures and estimate their rates"):
        dataset = Dataset(paths.data)
        findings = dataset.classify()
        report = build_report(dataset, truth=truth_rates(result.runs))
        report.write_html(paths.report)
    report.render_terminal(stages.console)
    result.details["findings"] = findings
    result.details["report"] = report
    return dataset


def select_stage(
    dataset: Any, options: DemoOptions, paths: DemoPaths, stages: Stages, result: DemoResult
) -> None:
    """A replay corpus: a few incidents of every category plus a baseline sample."""
    from tailcut.analysis import select_corpus

    with stages.stage("select a replay corpus"):
        selection = select_corpus(
            dataset,
            paths.corpus,
            baseline=CORPUS_BASELINE,
            per_category=CORPUS_PER_CATEGORY,
            seed=options.seed,
        )
    result.details["selection"] = selection
    stages.console.print(
        f"corpus: {selection.incidents} incidents ({CORPUS_PER_CATEGORY} at most per category) and "
        f"{selection.baseline} baseline traces -> {paths.corpus}"
    )


def replay_recorded_stage(paths: DemoPaths, stages: Stages, result: DemoResult) -> None:
    """Replay the corpus from the record, each run with its own harness revision's agent."""
    from tailcut.replay import load_corpus, run_replay

    corpus = load_corpus(paths.corpus)
    by_revision: dict[str, list[str]] = {}
    for run in corpus.runs.values():
        if run.replayable:
            by_revision.setdefault(run.harness_revision or "v1", []).append(run.trace_id)
    reports = {}
    total = sum(len(ids) for ids in by_revision.values()) * RECORDED_RERUNS
    with stages.stage(f"replay the corpus from the record ({RECORDED_RERUNS}x each)", total=total) as bar:
        for revision, trace_ids in sorted(by_revision.items()):
            reports[revision] = run_replay(
                corpus,
                fleet.agent_v1 if revision == "v1" else fleet.agent_v2,
                mode="recorded",
                n=RECORDED_RERUNS,
                reset=fleet.reset_desk,
                traces=trace_ids,
                out=paths.results(f"recorded-{revision}"),
                canary=True,
                on_progress=lambda done, _total: bar.advance(),
            )
    result.details["recorded"] = reports
    traces = [t for report in reports.values() for t in report.traces()]
    stable = sum(t.bit_stable for t in traces)
    canaries = [r.canary for r in reports.values() if r.canary is not None]
    caught = sum(bool(c.caught) for c in canaries)
    verdict = (
        "caught" if caught == len(canaries) else "[bold red]NOT caught: the replay is not following the trace"
    )
    skipped = sum(len(report.skipped) for report in reports.values())
    if skipped:
        stages.console.print(f"{skipped} corpus traces are not replayable (see the corpus manifest)")
    stages.console.print(
        f"recorded replay: {stable}/{len(traces)} traces bit-stable over {RECORDED_RERUNS} reruns; "
        f"canary (one corrupted response per revision): {verdict} ({caught}/{len(canaries)})"
    )


def cut_point_stage(paths: DemoPaths, stages: Stages, result: DemoResult) -> None:
    """The unsafe-refund incident, with the refund guard run live under v1 (faulty) and v2 (guarded)."""
    from tailcut.exporters.corpus import Selection, write_corpus
    from tailcut.replay import run_replay

    incident = next(
        (r for r in result.runs if r.kind == "refund_large" and r.revision == "v1" and r.trace_id), None
    )
    if incident is None:
        stages.console.print("no unsafe-refund incident under v1 in this run; skipping the cut-point replay")
        return
    with stages.stage("cut-point replay of the unsafe refund (guard live)", total=2 * CUT_RERUNS) as bar:
        write_corpus(
            paths.data,
            [
                Selection(
                    incident.trace_id, "incident: unsafe refund above the limit", ("silent_degradation",)
                )
            ],
            paths.incident,
        )
        verdicts = {}
        for name, agent in (("v1", fleet.agent_v1), ("v2", fleet.agent_v2)):
            verdicts[name] = run_replay(
                paths.incident,
                agent,
                mode="cut",
                live=["router:refund_guard"],
                n=CUT_RERUNS,
                reset=fleet.reset_desk,
                check=fleet.check_run,
                out=paths.results(f"cut-{name}"),
                on_progress=lambda done, _total: bar.advance(),
            )
    result.details["cut"] = verdicts
    for name, report in verdicts.items():
        (trace,) = report.traces()
        checked = all(r.check_passed for r in report.results)
        word = "passes" if report.passed else "fails"
        if not report.passed and checked:
            word = "check passes, the path diverged after the cut"
        stages.console.print(f"cut-point, harness {name}: {word}: {trace.rate}")


def compare_stage(dataset: Any, stages: Stages, result: DemoResult) -> None:
    """The bias-aware comparison of the two harness revisions."""
    from tailcut.analysis import compare_by

    with stages.stage("compare harness v1 with v2"):
        comparison = compare_by(dataset, "harness_revision", "v1", "v2")
    comparison.render_terminal(stages.console)
    result.details["compare"] = comparison


def validate_stage(options: DemoOptions, paths: DemoPaths, stages: Stages, result: DemoResult) -> None:
    """``tailcut validate`` of harness v2 against the first v1 incident of each kind v2 fixes."""
    from tailcut.replay import validate

    first: dict[str, str] = {}
    for run in result.runs:
        if run.revision == "v1" and run.kind in fleet.INCIDENT_KINDS and run.trace_id:
            first.setdefault(run.kind, run.trace_id)
    missing = [kind for kind in fleet.INCIDENT_KINDS if kind not in first]
    if missing:
        stages.console.print(f"no v1 incident of {', '.join(missing)} in this run; validating the others")
    if not first:
        return
    incidents = [first[kind] for kind in fleet.INCIDENT_KINDS if kind in first]
    with stages.stage(f"validate harness v2 against {len(incidents)} incidents") as bar:
        validation = validate(
            paths.data,
            agent=fleet.agent_v2,
            baseline_agent=fleet.agent_v1,
            incidents=incidents,
            check=fleet.check_run,
            reset=fleet.reset_desk,
            n=CUT_RERUNS,
            golden_size=GOLDEN_SIZE,
            seed=options.seed,
            out=paths.validation,
            on_estimate=lambda estimate: stages.console.print(str(estimate), highlight=False),
            on_progress=bar.update,
        )
    from tailcut.replay._validation_output import summary_lines

    stages.console.print(
        "incidents: " + ", ".join(f"{kind} {trace_id}" for kind, trace_id in first.items()), soft_wrap=True
    )
    for line in summary_lines(validation):
        stages.console.print(line, highlight=False, soft_wrap=True)
    result.details["validation"] = validation


def run_demo(options: DemoOptions, console: Console) -> DemoResult:
    """Run every stage of the demo; processes are cleaned up on success, failure and Ctrl-C."""
    paths = prepare_out(options.out)
    stages = Stages(console)
    result = DemoResult(paths)
    server = ModelServer(responder=support_responder)
    with server:
        run_fleet_stage(options, paths, stages, result, server)
        dataset = analyse_stage(options, paths, stages, result)
        try:
            select_stage(dataset, options, paths, stages, result)
            with server.forbid():  # from here on, a model call would be a replay bug
                replay_recorded_stage(paths, stages, result)
                cut_point_stage(paths, stages, result)
            result.details["model_calls_during_replay"] = len(server.violations)
            compare_stage(dataset, stages, result)
        finally:
            dataset.close()
        console.print(f"model calls made by the replays: {result.details['model_calls_during_replay']}")
        validate_stage(options, paths, stages, result)
    if options.profile:
        console.print(stages.times.table())
    result.details["timings"] = stages.times
    print_summary(paths, result, console)
    return result


def print_summary(paths: DemoPaths, result: DemoResult, console: Console) -> None:
    """Where everything was written and what to try next."""
    seen = result.collector.get("traces", len(result.runs))
    kept = result.collector.get("kept", "?")
    example = next(
        (r.trace_id for r in result.runs if r.kind == "address_change" and r.revision == "v1"), None
    )
    lines = [
        f"[bold]tailcut demo[/bold]: {seen} runs, {kept} traces kept, everything under {paths.root}/",
        f"  data dir     {paths.data}/  (spans/, traces/, payloads/)",
        f"  report       {paths.report}",
        f"  corpus       {paths.corpus}/",
        f"  replays      {paths.root}/replay-*.parquet, {paths.validation}",
        f"  ground truth {paths.truth}",
        "try next:",
        '  tailcut sql "SELECT decision_reason, kept, count(*) FROM traces GROUP BY ALL" \\',
        f"      --data {paths.data}",
        f"  tailcut classify --data {paths.data}",
    ]
    if example:
        lines.append(f"  tailcut tree {example} --data {paths.data}")
    lines += [
        f"  tailcut replay {paths.incident} --mode cut \\",
        "      --agent tailcut.demo.fleet:agent_v2 --live router:refund_guard -n 3 \\",
        "      --check tailcut.demo.fleet:check_run --reset tailcut.demo.fleet:reset_desk",
        f"  tailcut ui --data {paths.data} --results {paths.validation}",
        f"  python -m webbrowser {Path(paths.report).resolve().as_uri()}   # the report, in any OS's browser",
    ]
    console.print("\n".join(lines), soft_wrap=True)  # commands stay whole, to copy and paste
