"""The decision caches (``decision_cache.sampled_cache_size`` / ``non_sampled_cache_size``): bounded LRUs.

They remember the decision for trace ids whose spans already left memory, so a span that arrives much
later follows its trace's decision instead of starting a new trace, as in the Collector. A size of 0
disables a cache (the Collector's default).
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

V = TypeVar("V")


class DecisionCache(Generic[V]):
    """A least-recently-used map of trace id to decision, holding at most ``size`` entries."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: collections.OrderedDict[bytes, V] = collections.OrderedDict()

    def put(self, trace_id: bytes, value: V) -> None:
        if self.size <= 0:
            return
        entries = self._entries
        entries[trace_id] = value
        entries.move_to_end(trace_id)
        if len(entries) > self.size:
            entries.popitem(last=False)

    def get(self, trace_id: bytes) -> V | None:
        entries = self._entries
        value = entries.get(trace_id)
        if value is not None:
            entries.move_to_end(trace_id)
        return value

    def __len__(self) -> int:
        return len(self._entries)
