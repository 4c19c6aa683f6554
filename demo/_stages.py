"""Timed stages with progress bars, so every step of the demo shows what it does and what it cost."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table


@dataclass
class StageTimes:
    """Wall time of each stage, in the order they ran."""

    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def table(self) -> Table:
        table = Table(title="Stage timings", title_justify="left")
        table.add_column("stage")
        table.add_column("seconds", justify="right")
        table.add_column("share", justify="right")
        total = self.total or 1.0
        for name, seconds in self.seconds.items():
            table.add_row(name, f"{seconds:.1f}", f"{seconds / total:.0%}")
        table.add_row("total", f"{self.total:.1f}", "100%", style="bold")
        return table


class Stage:
    """One running stage: ``advance()`` its bar, ``total`` sets how many steps it has."""

    def __init__(self, progress: Progress, name: str, total: float | None) -> None:
        self._progress = progress
        self._task = progress.add_task(name, total=total)

    def advance(self, steps: float = 1.0) -> None:
        self._progress.advance(self._task, steps)

    def update(self, done: float, total: float) -> None:
        """``done`` of ``total`` steps (for work that reports its own progress)."""
        self._progress.update(self._task, completed=done, total=total)

    def done(self) -> None:
        task = self._progress.tasks[self._task]
        self._progress.update(self._task, total=task.total or 1, completed=task.total or 1)


class Stages:
    """Runs the demo's stages one after the other, each with a progress bar and a timing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.times = StageTimes()

    @contextlib.contextmanager
    def stage(self, name: str, total: float | None = None) -> Iterator[Stage]:
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        start = time.perf_counter()
        with progress:
            stage = Stage(progress, name, total)
            yield stage
            stage.done()
        self.times.seconds[name] = time.perf_counter() - start
