"""Traces waiting for their decision: spans as encoded bytes, in arrival order, with their deadlines.

A trace is due ``decision_wait`` after its first span arrived, or ``decision_wait_after_root_received``
after its root span arrived when that is sooner (and the grace is not 0). Both deadlines grow in the
order traces (or roots) arrive, so two FIFO orders replace a priority queue: the pending map itself,
oldest first, and a queue of root arrivals. The oldest trace is also the one memory bounds evict first.

Each span is kept as the bytes it arrived in (about its encoded size in memory) and the origin it came
under; what the signals and policies need of it is folded into its trace's
:class:`~tailcut.collector._signals.TraceTally` on arrival, and nothing else is decoded until a trace is
kept.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from tailcut.collector._signals import TraceTally


class Hold:
    """The write-ahead log segments holding a trace's (or a late batch's) spans, until they are published."""

    __slots__ = ("segments",)

    def __init__(self) -> None:
        self.segments: list[int] = []


class PendingTrace:
    """One trace in the buffer: its spans in arrival order and what was noted about it on the way."""

    __slots__ = (
        "datas",
        "first_seen",
        "hold",
        "nbytes",
        "origins",
        "root",
        "root_at",
        "root_index",
        "root_origin",
        "tally",
        "trace_id",
        "values",
    )

    def __init__(self, trace_id: bytes, now: float) -> None:
        self.trace_id = trace_id
        self.first_seen = now
        self.root_at: float | None = None
        #: The spans' bytes and the origin each arrived under, in arrival order.
        self.datas: list[bytes] = []
        self.origins: list[Any] = []
        self.tally = TraceTally()
        self.nbytes = 0
        #: Values of the attribute keys policies read, as found on the trace's spans.
        self.values: dict[str, list[Any]] = {}
        #: What the ``traces`` row takes from the (first) root span.
        self.root: Any = None
        #: Position of the first root span, and the origin of the last one (None without a root).
        self.root_index: int | None = None
        self.root_origin: Any = None
        self.hold = Hold()


class TraceBuffer:
    """Pending traces and when each is due.

    Parameters
    ----------
    decision_wait
        Seconds after a trace's first span before it is decided without its root.
    root_grace
        Seconds after the root span arrives before the trace is decided (0 disables).
    """

    def __init__(self, decision_wait: float, root_grace: float) -> None:
        self.decision_wait = decision_wait
        self.root_grace = root_grace
        self.pending: collections.OrderedDict[bytes, PendingTrace] = collections.OrderedDict()
        self._roots: collections.deque[tuple[float, bytes]] = collections.deque()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.pending)

    def get(self, trace_id: bytes) -> PendingTrace | None:
        return self.pending.get(trace_id)

    def create(self, trace_id: bytes, now: float) -> PendingTrace:
        trace = self.pending[trace_id] = PendingTrace(trace_id, now)
        return trace

    def add(self, trace: PendingTrace, data: bytes, origin: Any, is_root: bool, now: float) -> None:
        """Append one span to ``trace``; a first root span starts the root grace."""
        datas = trace.datas
        if is_root:
            trace.root_origin = origin
            if trace.root_at is None:
                trace.root_at = now
                trace.root_index = len(datas)
                if self.root_grace > 0:
                    self._roots.append((now + self.root_grace, trace.trace_id))
        datas.append(data)
        trace.origins.append(origin)
        size = len(data)
        trace.nbytes += size
        self.nbytes += size

    def remove(self, trace: PendingTrace) -> None:
        del self.pending[trace.trace_id]
        self.nbytes -= trace.nbytes

    def due(self, now: float) -> Iterator[tuple[PendingTrace, str]]:
        """Remove and yield each trace whose deadline has passed, with its ``decision_reason``."""
        roots = self._roots
        while roots and roots[0][0] <= now:
            _, trace_id = roots.popleft()
            trace = self.pending.get(trace_id)
            if trace is not None:
                self.remove(trace)
                yield trace, "root_end"
        pending = self.pending
        horizon = now - self.decision_wait
        while pending:
            trace = next(iter(pending.values()))
            if trace.first_seen > horizon:
                break
            self.remove(trace)
            yield trace, "root_end" if trace.root_at is not None else "idle"

    def pop_oldest(self) -> PendingTrace:
        """Remove and return the trace that arrived first (evicted under memory pressure)."""
        _, trace = self.pending.popitem(last=False)
        self.nbytes -= trace.nbytes
        return trace

    def pop_all(self) -> Iterator[PendingTrace]:
        """Remove and yield every pending trace, oldest first (shutdown)."""
        while self.pending:
            yield self.pop_oldest()
        self._roots.clear()
