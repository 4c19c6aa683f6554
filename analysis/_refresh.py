"""Bring a data dir's ``findings/`` up to date when new files land, so other engines never read stale ones.

:func:`refresh` is what ``tailcut ingest`` runs once its files are written; :class:`FindingsRefresher` is
what the collector pokes after each publish: one background thread that recomputes the findings at most
once every ``interval`` seconds (pokes that arrive meanwhile are merged into the next run), so receiving
and deciding never wait for a classification. A failed refresh is logged and counted, never raised: the
findings are refreshed on read anyway (:meth:`tailcut.analysis.Dataset.ensure_findings`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from tailcut.exporters._hooks import Published, WriterHook
from tailcut.exporters._location import is_remote

if TYPE_CHECKING:
    from tailcut.exporters._writer import DataDirWriter

_logger = logging.getLogger("tailcut.analysis")
#: Default shortest time between two refreshes of one data dir, in seconds.
DEFAULT_INTERVAL: Final = 5.0
#: DuckDB's memory limit in the collector's background refresh, which also runs on one thread: a refresh
#: spills beyond it rather than growing past the memory a collector's config promises
#: (``benchmarks/bench_flood_memory.py``: at shutdown, two unbounded threads added about 25 MiB).
BACKGROUND_MEMORY_LIMIT: Final = "128MB"


def refresh(location: str, *, threads: int | None = None, memory_limit: str | None = None) -> bool:
    """Recompute ``location``'s ``findings/`` (the findings and the census ``compare`` reads,
    :mod:`._census_file`) if its source key is stale; True if the stored findings are current.

    ``threads`` and ``memory_limit`` are the DuckDB session's (see :class:`~tailcut.analysis.Dataset`).
    A remote data dir keeps no findings file (False). Raises what classifying raises (a
    :class:`~tailcut.errors.TailcutError` for an unreadable data dir).
    """
    from tailcut.analysis import _census_file, _findings
    from tailcut.analysis._dataset import Dataset

    if is_remote(location):
        return False
    with Dataset(location, threads=threads, memory_limit=memory_limit) as data:
        data.ensure_findings(default=True)
        _census_file.current(data)  # so the next `tailcut compare` reads it
        return _findings.stored_key(data.location) == _findings.source_key(data)


class FindingsRefresher(WriterHook):
    """Refreshes one data dir's findings on a background thread after :meth:`poke`, debounced.

    As a writer's hook it is poked whenever files are published, and closed with the writer (an aborted
    writer does not wait for a pending refresh).

    Parameters
    ----------
    location
        The local data dir.
    interval
        Shortest time in seconds between the starts of two refreshes.

    Attributes
    ----------
    refreshes : int
        Refreshes that finished.
    failures : int
        Refreshes that raised (each logged once, at warning level).
    """

    def __init__(self, location: str, *, interval: float = DEFAULT_INTERVAL) -> None:
        if interval < 0:
            raise ValueError(f"interval must be ≥ 0, got {interval}")
        self.location = location
        self.interval = interval
        self.refreshes = 0
        self.failures = 0
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="tailcut-findings", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask for a refresh (returns at once; several pokes before it runs make one refresh)."""
        with self._idle:
            self._wanted.set()

    def on_publish(self, writer: DataDirWriter, files: Sequence[Published]) -> None:
        self.poke()

    def on_close(self, writer: DataDirWriter, *, aborted: bool) -> None:
        self.close(0 if aborted else 30.0)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no refresh is pending or running; False if ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy or self._wanted.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Run a pending refresh (waiting at most ``timeout`` seconds), then stop the thread."""
        self.wait_idle(timeout)
        self._stopping.set()
        self._wanted.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        last = float("-inf")
        while True:
            self._wanted.wait()
            if self._stopping.is_set():
                return
            pause = last + self.interval - time.monotonic()
            if pause > 0 and self._stopping.wait(pause):
                return
            with self._idle:
                self._wanted.clear()
                self._busy = True
            last = time.monotonic()
            try:
                refresh(self.location, threads=1, memory_limit=BACKGROUND_MEMORY_LIMIT)
                self.refreshes += 1
            except Exception as exc:  # never fatal: the findings are refreshed on read as well
                self.failures += 1
                _logger.warning("refreshing the findings of %s failed: %s", self.location, exc)
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
