"""``tailcut.trace.anomaly_score``: how far a run's tokens, duration and span count lie above its peers.

For each (service, root span name) the collector keeps a running window of the last ``window`` traces
of the **baseline slice** (the uniform ``probabilistic`` sample, chosen by trace id alone), so the
reference describes ordinary traffic at its natural failure rate: the failures that the other policies
keep in bulk never enter it. Without a ``probabilistic`` policy every trace feeds the window.

A trace's score is the largest of three robust z-scores, one per measure::

    z = (x - median) / s,   s = max(1.4826 * MAD, (Q90 - median) / 1.2816, 0.1 * |median|, 1)

the same scale ``tailcut classify`` uses for its cost and structure rules (its ``min_relative_scale``
defaults to the same 0.1). For normal traffic the first two terms both estimate the standard deviation,
and the score is Iglewicz and Hoaglin's modified z-score (3.5 is their suggested outlier cut-off, used by
the default config). Agent traffic is seldom one tight mode, though: when most runs answer in one call
(identical span counts, near-identical tokens) the MAD is about 0 and every multi-call run would score
in the hundreds. The Q90 term measures the spread of the upper tail instead, so a trace must lie beyond
the reference's own ordinary variety to score high; the last two floors keep a constant reference from
turning a one-unit difference (a token, a millisecond, a span) into a huge score. The score is signed,
so a run below its peers on every measure scores below zero. No score is given (null) until the window
holds ``min_window`` traces. The medians and scales are recomputed each time another 5% of the window
has been replaced (sorting the window per trace would cost more than everything else the collector
does for it).
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Sequence

_MAD_TO_SIGMA = 1.4826
_Q90_TO_SIGMA = 1.2816  # the standard normal distribution's 90th percentile
#: The smallest scale, as a fraction of the median (``tailcut classify``'s ``min_relative_scale``).
MIN_RELATIVE_SCALE = 0.1


def robust_location_scale(values: Sequence[float]) -> tuple[float, float]:
    """``(median, scale)`` of ``values``, the scale by the rule in the module docstring."""
    ordered = sorted(values)
    median = _median(ordered)
    mad = _median(sorted(abs(value - median) for value in ordered))
    upper_spread = (_quantile(ordered, 0.9) - median) / _Q90_TO_SIGMA
    return median, max(_MAD_TO_SIGMA * mad, upper_spread, MIN_RELATIVE_SCALE * abs(median), 1.0)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile with linear interpolation (DuckDB's ``quantile_cont``)."""
    position = (len(ordered) - 1) * q
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _median(ordered: Sequence[float]) -> float:
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2.0


class _Window:
    __slots__ = ("references", "rows", "stale")

    def __init__(self, size: int) -> None:
        self.rows: collections.deque[tuple[float, ...]] = collections.deque(maxlen=size)
        self.references: list[tuple[float, float]] | None = None  # (median, scale) per measure, cached
        self.stale = 0  # traces added since ``references`` was computed


class AnomalyScorer:
    """Running per-(service, root name) windows and the score of a trace against its window.

    Parameters
    ----------
    window
        Baseline traces remembered per key.
    min_window
        Traces needed in a window before it scores anything.
    max_keys
        Keys remembered (least recently used forgotten first), bounding memory when root names vary.
    """

    def __init__(self, window: int = 200, min_window: int = 20, max_keys: int = 1000) -> None:
        if not 1 <= min_window <= window:
            raise ValueError("need 1 <= min_window <= window")
        self.window = window
        self.min_window = min_window
        self.max_keys = max_keys
        self._windows: collections.OrderedDict[Hashable, _Window] = collections.OrderedDict()

    def score(self, key: Hashable, values: Sequence[float]) -> float | None:
        """The trace's anomaly score against ``key``'s window, or None while the window is too small."""
        window = self._windows.get(key)
        if window is None or len(window.rows) < self.min_window:
            return None
        if window.references is None or window.stale * 20 >= len(window.rows):
            window.references = [robust_location_scale(column) for column in zip(*window.rows, strict=True)]
            window.stale = 0
        (tokens_median, tokens_scale), (duration_median, duration_scale), (spans_median, spans_scale) = (
            window.references
        )
        tokens, duration, spans = values
        return max(
            (tokens - tokens_median) / tokens_scale,
            (duration - duration_median) / duration_scale,
            (spans - spans_median) / spans_scale,
        )

    def observe(self, key: Hashable, values: Sequence[float]) -> None:
        """Add a baseline trace's measures to ``key``'s window."""
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(self.window)
            if len(self._windows) > self.max_keys:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(key)
        window.rows.append(tuple(float(value) for value in values))
        window.stale += 1
