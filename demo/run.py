"""``tailcut demo``: the whole pipeline on this machine, with failures injected at known rates.

Stages: a scripted model behind the real OpenAI API shape, the collector as a child process with the
repository's ``otel-config.yaml``, a fleet of instrumented support agents (real ``openai`` SDK) exporting
over OTLP, the tail-sampling decisions, the analysis report next to the injected true rates, a selected
replay corpus, its recorded replay (bit-stable, canary), the unsafe-refund incident replayed cut-point
under the faulty and the guarded revision, and the bias-aware comparison of the two revisions.
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
from tailcut.demo.model_server import ModelServer
from tailcut.demo.support_model import support_responder
from tailcut.errors import TailcutError

MARKER: Final = ".tailcut-demo"
DEFAULT_RUNS: Final = 2000


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
    def collector_log(self) -> Path:
        return self.root / "collector.log"

    def results(self, name: str) -> Path:
        return self.root / f"replay-{name}.parquet"


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


def run_fleet_stage(options: DemoOptions, paths: DemoPaths, stages: Stages, result: DemoResult) -> None:
    """Model server + collector + fleet, until every trace is decided and written."""
    with contextlib.ExitStack() as running:
        with stages.stage("start the scripted model and the collector"):
            server = running.enter_context(ModelServer(responder=support_responder))
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


def run_demo(options: DemoOptions, console: Console) -> DemoResult:
    """Run every stage of the demo; processes are cleaned up on success, failure and Ctrl-C."""
    paths = prepare_out(options.out)
    stages = Stages(console)
    result = DemoResult(paths)
    run_fleet_stage(options, paths, stages, result)
    if options.profile:
        console.print(stages.times.table())
    result.details["timings"] = stages.times
    return result
