"""Per-trace features computed beside a data-dir writer, on a thread of their own: a post-write hook.

:class:`FeatureHook` is what the owners of a pipeline writer (the collector, ``tailcut ingest``) pass to
:class:`~tailcut.exporters.DataDirWriter` (see :mod:`tailcut.exporters._hooks`): it hands each batch of spans
written to a :class:`FeatureWorker`, which computes their ``trace_features`` and ``trace_checks`` rows
(:func:`._features_compute.trace_features`, DuckDB) while the writer's caller goes on, and writes the finished
rows back through the writer, all of them before each flush publishes, so the features land with their spans.
The agent's in-process exporter passes no hook: it never runs DuckDB.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from tailcut.analysis._features_compute import Session, trace_features
from tailcut.exporters._hooks import WriterHook

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.exporters._writer import DataDirWriter

_logger = logging.getLogger("tailcut.analysis")


class FeatureHook(WriterHook):
    """Computes the features of the spans a writer writes and writes them through it (see the module doc).

    Examples
    --------
    ::

        with DataDirWriter("data", hooks=[FeatureHook()]) as writer:
            writer.write_spans(spans)  # trace_features/ and trace_checks/ are published with spans/
    """

    def __init__(self) -> None:
        self._worker = FeatureWorker()

    def on_write(self, writer: DataDirWriter, rows: Mapping[str, pa.Table]) -> None:
        spans = rows.get("spans")
        if spans is not None and spans.num_rows:
            self._worker.submit(spans, rows["pieces"])
        self._take(writer)

    def before_flush(self, writer: DataDirWriter) -> None:
        self._worker.wait()
        self._take(writer)

    def on_close(self, writer: DataDirWriter, *, aborted: bool) -> None:
        self._worker.stop()

    def _take(self, writer: DataDirWriter) -> None:
        for features, checks in self._worker.finished():
            writer.write_table("trace_features", features)
            writer.write_table("trace_checks", checks)


class FeatureWorker:
    """Computes :func:`trace_features` of the batches a writer hands over, on a thread of its own.

    DuckDB releases the GIL while it runs, so the features of some batches are computed while the writer's
    caller goes on normalising the next. Batches are gathered until they hold ``chunk_rows`` spans, no
    batch came for ``linger`` seconds, or :meth:`wait` asks for them, and their features computed at once
    (each computation costs tens of milliseconds whatever its size; a trace whose spans came in several
    gathered batches gets one row). At most ``pending`` batches wait to be gathered (:meth:`submit` blocks
    beyond that); the finished tables are taken back with :meth:`finished`, after :meth:`wait` when every
    one is needed (before a flush). The worker never touches the writer, so it cannot deadlock with it.
    """

    def __init__(self, *, pending: int = 2, chunk_rows: int = 30_000, linger: float = 1.0) -> None:
        self._jobs: queue.Queue[tuple[pa.Table, pa.Table] | str] = queue.Queue(maxsize=pending)
        self._chunk_rows = chunk_rows
        self._linger = linger
        self._lock = threading.Lock()
        self._done: list[tuple[pa.Table, pa.Table]] = []
        self._session: Session | None = None
        self._thread = threading.Thread(target=self._run, name="tailcut-trace-features", daemon=True)
        self._thread.start()

    def submit(self, spans: pa.Table, pieces: pa.Table) -> None:
        """Queue a batch's ``spans`` rows and their ``pieces``."""
        self._jobs.put((spans, pieces))

    def wait(self) -> None:
        """Return once every batch submitted so far is computed."""
        self._jobs.put(_NOW)
        self._jobs.join()

    def finished(self) -> list[tuple[pa.Table, pa.Table]]:
        """The ``(trace_features, trace_checks)`` tables computed since the last call."""
        with self._lock:
            done, self._done = self._done, []
        return done

    def stop(self) -> None:
        """Finish the queued batches and end the thread."""
        self._jobs.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        gathered: list[tuple[pa.Table, pa.Table]] = []
        while True:
            try:
                job = self._jobs.get(timeout=self._linger if gathered else None)
            except queue.Empty:
                self._compute(gathered)  # nothing came for a while: no reason to hold them
                gathered = []
                continue
            if isinstance(job, tuple):
                gathered.append(job)
                if sum(spans.num_rows for spans, _ in gathered) < self._chunk_rows:
                    self._jobs.task_done()  # a later _NOW (see wait) is done only once they are
                    continue
            try:
                self._compute(gathered)
                gathered = []
            finally:
                self._jobs.task_done()
            if job == _STOP:
                if self._session is not None and not self._session.broken:
                    self._session.close()
                return

    def _compute(self, gathered: list[tuple[pa.Table, pa.Table]]) -> None:
        if not gathered:
            return
        import pyarrow as pa

        try:
            spans = pa.concat_tables([s for s, _ in gathered])
            pieces = pa.concat_tables([p for _, p in gathered])
            if self._session is None or self._session.broken:
                self._session = Session()
        except Exception as exc:  # the spans are written: only their features are lost
            _logger.warning("trace features not computed for %d batches: %r", len(gathered), exc)
            return
        tables = trace_features(spans, pieces, self._session)  # never raises: a failure is logged
        if tables is not None:
            with self._lock:
                self._done.append(tables)


_NOW: Final = "now"
"""Asks the worker to compute the batches gathered so far."""
_STOP: Final = "stop"
"""Asks the worker to compute the batches gathered so far and end."""
