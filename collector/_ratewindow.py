"""Kept/seen counts of a rate-limited policy over a sliding window, for inclusion probabilities.

A rate limit keeps a trace depending on what else arrived in the same second, so the probability that a
trace like this one is kept is not known in advance; DESIGN.md section 3 takes the observed kept/seen
ratio of the policy's recent window. The window is the last ``seconds`` whole seconds, the current one
included, so the ratio moves with the load rather than with one noisy second.
"""

from __future__ import annotations

import collections


class AcceptanceWindow:
    """Counts of traces a policy saw and accepted, per whole second, over the last ``seconds`` seconds.

    Parameters
    ----------
    seconds
        Width of the sliding window.
    """

    __slots__ = ("_buckets", "_kept", "_seconds", "_seen")

    def __init__(self, seconds: int = 10) -> None:
        self._seconds = seconds
        self._buckets: collections.deque[list[int]] = collections.deque()  # [second, seen, kept]
        self._seen = 0
        self._kept = 0

    def record(self, second: int, accepted: bool) -> float:
        """Count one evaluated trace and return the window's kept/seen ratio including it."""
        buckets = self._buckets
        while buckets and buckets[0][0] <= second - self._seconds:
            _, seen, kept = buckets.popleft()
            self._seen -= seen
            self._kept -= kept
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
        bucket = buckets[-1]
        bucket[1] += 1
        self._seen += 1
        if accepted:
            bucket[2] += 1
            self._kept += 1
        return self._kept / self._seen

    def ratio(self) -> float:
        """The current kept/seen ratio (1 before anything was seen), without counting a trace."""
        return self._kept / self._seen if self._seen else 1.0
