"""Opening the write-ahead log, and replaying it into the processor after a crash or an I/O fault.

:func:`open_log` finds the collector's log (its configured directory, or the first free slot of the
data dir's, since several collectors may share a data dir). :func:`replay_log` reads every record
(:mod:`._journal`) in order and hands each to the processor's replay methods (:class:`ReplayTarget`),
with the logged wall-clock times moved onto this process's monotonic clock (the downtime has passed):
requests are ingested again, decisions re-applied as recorded (not re-evaluated), compacted traces
replace their earlier copies, closed rows are handed over. What a file named in a ``PUBLISHED`` record
already holds is not handed to the writer again (:meth:`~._commit.Committer.emit`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from tailcut.collector._commit import Committer
from tailcut.collector._config import CollectorConfig
from tailcut.collector._errors import CollectorError
from tailcut.collector._journal import (
    CLOSED,
    COMPACT,
    DECIDED,
    PUBLISHED,
    SPANS,
    LateEntry,
    Published,
    published,
    read_compact,
    read_decided,
    read_spans,
)
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._wal import WAL_SLOTS, WalBusy, WriteAheadLog, wal_directory
from tailcut.signals import TraceRow


class ReplayTarget(Protocol):
    """What the processor does with each logged record (times on its monotonic clock)."""

    def restore_decision(self, entry: LateEntry, decided_at: float) -> None:
        """A logged request's late spans followed a decision the log may no longer hold."""

    def replay_request(self, body: bytes, arrived: float) -> int:
        """Ingest a logged request again; the spans accepted."""

    def replay_decision(self, trace_id: bytes, span_count: int, row: TraceRow, decided_at: float) -> None:
        """Apply a logged decision to the trace, if it is still waiting."""

    def replay_compacted(self, trace_id: bytes, first_seen: float, body: bytes) -> None:
        """Replace a waiting trace's spans by the compacted copy of them."""

    def replay_closed(self, trace_id: bytes) -> None:
        """Hand over a decided trace's row, whose late-span window had closed."""


def open_log(config: CollectorConfig, metrics: CollectorMetrics) -> WriteAheadLog | None:
    """The collector's write-ahead log, opened (None when it is disabled or there is nowhere to keep it).

    Raises
    ------
    CollectorError
        When the log's directory cannot be used, or every slot of the data dir's log is in use.
    """
    settings = config.tailcut.wal
    parquet = config.parquet
    if not settings.enabled or (settings.directory is None and parquet is None):
        return None
    histogram = metrics.wal_fsync_seconds

    def log_in(directory: Path) -> WriteAheadLog:
        wal = WriteAheadLog(
            directory,
            fsync=settings.fsync,
            fsync_interval=settings.fsync_interval,
            max_bytes=settings.max_bytes,
            segment_bytes=settings.segment_bytes,
            observe_fsync=histogram.observe,
        )
        try:
            wal.open()
        except OSError as exc:
            raise CollectorError(
                f"cannot use the write-ahead log in {directory}: {exc.strerror or exc}"
            ) from None
        return wal

    if settings.directory is not None:
        return log_in(settings.directory)
    base = wal_directory(parquet.path)  # type: ignore[union-attr]
    for slot in range(WAL_SLOTS):  # several collectors may share a data dir: each takes the first free slot
        try:
            return log_in(base / str(slot))
        except WalBusy:
            continue
    raise CollectorError(f"all {WAL_SLOTS} write-ahead log slots in {base} are in use")


def replay_log(commits: Committer, target: ReplayTarget, data_dir: str | None) -> tuple[int, int]:
    """Replay every record of ``commits.wal`` into ``target``; ``(records, spans)`` replayed.

    ``data_dir`` is where ``PUBLISHED`` records name files (None: no Parquet output).
    """
    wal = commits.wal
    assert wal is not None
    names = [payload.decode() for _, kind, payload in wal.records() if kind == PUBLISHED]
    commits.published = published(data_dir, names) if data_dir is not None else Published(set(), set())
    wall, mono = time.time(), time.monotonic()

    def clock(at: float) -> float:
        """A logged wall-clock time on this process's monotonic clock (the downtime has passed)."""
        return mono - max(wall - at, 0.0)

    records = spans = 0
    commits.replaying = True
    try:
        for segment, kind, payload in wal.records():
            records += 1
            if kind == SPANS:
                arrived, late, body = read_spans(payload)
                for entry in late:
                    target.restore_decision(entry, clock(entry.decided_at))
                spans += target.replay_request(body, clock(arrived))
                commits.take_segment(segment)
            elif kind == DECIDED:
                trace_id, span_count, row = read_decided(payload)
                target.replay_decision(trace_id, span_count, row, clock(row["decided_at"] / 1e9))
            elif kind == COMPACT:
                trace_id, first_seen, body = read_compact(payload)
                target.replay_compacted(trace_id, clock(first_seen), body)
                commits.take_segment(segment)
            elif kind == CLOSED:
                target.replay_closed(payload)
            commits.touched.clear()  # late spans of a replayed decision: their holds have their segments
            commits.commit()
    finally:
        commits.replaying = False
        commits.published = None
    return records, spans
