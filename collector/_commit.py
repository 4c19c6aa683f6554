"""Log first, then hand over: what a request or a decision round leaves, written ahead and passed on.

The processor (:mod:`._processor`) buffers and decides; everything it wants written goes through the
:class:`Committer`. During a request or a round, log records (:mod:`._journal`) and writer submissions
(kept spans, ``traces`` rows) accumulate; :meth:`Committer.commit` appends the records to the
write-ahead log in one write, and only then submits the items to the writer, so nothing reaches a
Parquet file that a crash could make the log forget.

Log segments are held by what still needs them: every trace waiting in the buffer holds the segments
its spans were logged in (its :class:`~._buffer.Hold`), and a handed-over item keeps holding them until
the writer has published it (:meth:`Committer.release_published`). A trace that waits long pins the
oldest segment and everything after it, so when the log passes half its budget the waiting traces in
the oldest segment are copied into a fresh one (:meth:`Committer.compact`) and the segment can go.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable
from typing import Any, Final

from tailcut.collector._buffer import Hold, PendingTrace, TraceBuffer
from tailcut.collector._journal import Published, compact_record
from tailcut.collector._sink import KeptSpans, RawSpan, Sink
from tailcut.collector._wal import Payload, WalFailure, WriteAheadLog
from tailcut.signals import TraceRow

#: Holds released together (see ``Committer.releases``).
RELEASE_BATCH: Final = 1024
#: Waiting traces looked at per decision round for compaction (:meth:`Committer.compact`).
COMPACT_SCAN: Final = 10_000


class Committer:
    """The write-ahead log's side of the processor: records and submissions, held and released segments.

    Parameters
    ----------
    sink
        The writer that receives kept spans and ``traces`` rows.
    on_fault
        Called with the error when the log cannot be written (the collector is then faulted).
    """

    def __init__(self, sink: Sink, on_fault: Callable[[BaseException], None]) -> None:
        self.sink = sink
        self.on_fault = on_fault
        #: The write-ahead log, once the processor opened it.
        self.wal: WriteAheadLog | None = None
        #: Set while the log is replayed: nothing is logged again.
        self.replaying = False
        self.reset()

    def reset(self) -> None:
        """Forget what is in progress (at construction, and before a replay after an I/O error)."""
        #: Records and writer submissions of the request or round in progress (see :meth:`commit`).
        self.records: list[tuple[int, Payload]] = []
        self.outbox: list[tuple[KeptSpans | TraceRow, Hold | None]] = []
        #: Holds whose spans the request in progress added (they take its log segment).
        self.touched: dict[Any, Hold] = {}
        #: [highest writer sequence number, segment -> references, holds] of batches of holds, each
        #: released once the writer published that far (batched: one entry per trace would cost memory).
        self.releases: collections.deque[list[Any]] = collections.deque()
        #: What a replay found already published (only while replaying).
        self.published: Published | None = None

    def record(self, record: tuple[int, Payload]) -> None:
        """Log ``record`` with the request or round in progress (not while replaying, nor without a log)."""
        if self.wal is not None and not self.replaying:
            self.records.append(record)

    def emit(self, item: KeptSpans | TraceRow, hold: Hold | None) -> None:
        """Hand ``item`` to the writer once the records before it are logged (:meth:`commit`).

        While replaying, what a published file already holds is not handed over again (its hold is let go).
        """
        done = self.published
        if done is not None and (
            done.has_batch(item.trace_id, item.index_base)
            if isinstance(item, KeptSpans)
            else item["trace_id"] in done.rows
        ):
            if hold is not None and self.wal is not None:
                self.wal.release(hold.segments)
                hold.segments = []
            return
        self.outbox.append((item, hold))

    def commit(self, request: tuple[int, Payload] | None = None) -> None:
        """Log the records of the request or round just processed, then hand its items to the writer.

        Raises
        ------
        WalFailure
            When the log cannot be written (``on_fault`` was called; nothing is handed over).
        """
        wal = self.wal
        if wal is not None and not self.replaying:
            records = self.records if request is None else [request, *self.records]
            self.records = []
            if records:
                try:
                    segment = wal.append(records)
                except WalFailure as exc:
                    self.outbox.clear()
                    self.touched.clear()
                    self.on_fault(exc)
                    raise
                self.take_segment(segment)
        outbox = self.outbox
        if not outbox:
            return
        releases = self.releases
        first = self.sink.submit([item for item, _ in outbox])
        for seq, (_, hold) in enumerate(outbox, first):
            if hold is not None and hold.segments:
                if not releases or releases[-1][2] >= RELEASE_BATCH:
                    releases.append([seq, {}, 0])
                batch = releases[-1]
                batch[0] = seq
                references = batch[1]
                for segment in hold.segments:
                    references[segment] = references.get(segment, 0) + 1
                batch[2] += 1
        self.outbox.clear()

    def take_segment(self, segment: int) -> None:
        """The holds the request in progress touched take ``segment`` (where its records went)."""
        wal = self.wal
        if wal is not None:
            for hold in self.touched.values():
                segments = hold.segments
                if not segments or segments[-1] != segment:
                    segments.append(segment)
                    wal.hold(segment)
        self.touched.clear()

    def release_published(self, buffer: TraceBuffer) -> None:
        """Let go of log segments whose traces the writer has published; compact past half the budget.

        Raises
        ------
        WalFailure
            When compaction cannot write the log.
        """
        wal = self.wal
        releases = self.releases
        published_seq = self.sink.published_seq
        while releases and releases[0][0] <= published_seq:
            references = releases.popleft()[1]
            if wal is not None:
                wal.release(references)
        if wal is not None:
            wal.collect()
            if wal.nbytes > wal.max_bytes // 2:
                self.sink.request_flush()
                self.compact(buffer)

    def compact(self, buffer: TraceBuffer) -> None:
        """Copy the waiting traces that hold the log's oldest segment into a new one, and let it go.

        Only worth it when they are a small part of it (then most of what the segment pins is dead);
        the oldest traces come first in the buffer, and at most :data:`COMPACT_SCAN` are looked at.
        """
        wal = self.wal
        assert wal is not None
        oldest = wal.oldest_segment()
        victims = [
            trace
            for trace in itertools.islice(buffer.pending.values(), COMPACT_SCAN)
            if trace.hold.segments and trace.hold.segments[0] == oldest
        ]
        if not victims or sum(trace.nbytes for trace in victims) > wal.sizes.get(oldest, 0) // 2:
            return
        offset = time.time() - time.monotonic()
        segment = wal.append(
            [compact_record(trace.trace_id, trace.first_seen + offset, raw_spans(trace)) for trace in victims]
        )
        for trace in victims:
            wal.release(trace.hold.segments)
            trace.hold.segments = [segment]
            wal.hold(segment)


def raw_spans(trace: PendingTrace) -> list[RawSpan]:
    """A pending trace's spans as the writer and the log take them (bytes and origin)."""
    return [RawSpan(data, origin) for data, origin in zip(trace.datas, trace.origins, strict=True)]
