"""The span tree of each trace: pre-order positions, nested-set bounds, depth, child count and self time.

Within a trace, spans are laid out in pre-order (children by start time, ties by span id), so a span's
descendants are exactly the spans with ``span_index < i <= subtree_end`` and analysis can find a subtree
with a range predicate instead of a recursive query. A span whose parent never arrived is an *orphan*: it is
kept, laid out as the root of its own subtree (depth 0) after the trace's real root, and flagged. A parent
cycle (corrupt input) is broken at its earliest span, which is then treated as an orphan. A span id that
occurs twice in a trace is a parent only through its first occurrence.

Everything is computed for a whole batch of traces with array operations (a Python walk per span would cost
more than writing the span): depths by pointer jumping, subtree sizes bottom-up and positions top-down one
depth level at a time, self time from the sorted children of each parent.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TreeShape(NamedTuple):
    """Tree columns for a batch of spans, indexed by the span's position in the batch."""

    #: Batch positions in storage order: traces by trace id, then pre-order within each trace.
    order: np.ndarray
    depth: np.ndarray
    child_count: np.ndarray
    span_index: np.ndarray
    subtree_end: np.ndarray
    self_time_ms: np.ndarray
    is_orphan: np.ndarray
    #: Batch position of each span's parent, -1 for roots and orphans.
    parent: np.ndarray
    #: Per span, the rank of its trace id among the batch's trace ids (traces sort by this).
    trace: np.ndarray


def _ranks(words: np.ndarray) -> np.ndarray:
    """Dense rank of each row of ``words`` in lexicographic order."""
    by_value = np.lexsort(words.T[::-1])
    ordered = words[by_value]
    new = np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]
    rank = np.empty(len(words), dtype=np.int64)
    rank[by_value] = np.cumsum(new) - 1
    return rank


def _parents(
    trace: np.ndarray, span_key: np.ndarray, parent_key: np.ndarray, has_parent: np.ndarray
) -> np.ndarray:
    """Batch position of each span's parent (the first span with that id in the trace), -1 if absent."""
    count = len(trace)
    unique_keys, rank = np.unique(span_key, return_inverse=True)
    key = trace.astype(np.int64) * count + rank
    by_key = np.argsort(key, kind="stable")  # equal keys (a repeated span id) in batch order
    sorted_key = key[by_key]
    found = np.searchsorted(unique_keys, parent_key)
    found = np.minimum(found, len(unique_keys) - 1)
    known = has_parent & (unique_keys[found] == parent_key)
    wanted = trace.astype(np.int64) * count + found
    at = np.minimum(np.searchsorted(sorted_key, wanted), count - 1)
    known &= sorted_key[at] == wanted
    parent = np.where(known, by_key[at], -1)
    parent[parent == np.arange(count)] = -1  # a span naming itself as parent is not its own child
    return parent


def _depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(depth, resolved)`` by pointer jumping; unresolved spans sit in (or under) a parent cycle."""
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    for _ in range(int(np.log2(max(len(parent), 2))) + 2):
        climbing = np.flatnonzero(up >= 0)
        if not len(climbing):
            break
        depth[climbing] += depth[up[climbing]]
        up[climbing] = up[up[climbing]]
    return depth, up < 0


def _group_offsets(group: np.ndarray, size: np.ndarray) -> np.ndarray:
    """For items sorted by ``group``, the sum of the sizes of the earlier items in the same group."""
    total = np.cumsum(size) - size
    first = np.r_[True, group[1:] != group[:-1]]
    return total - np.maximum.accumulate(np.where(first, total, 0))


def _self_time(start: np.ndarray, end: np.ndarray, parent: np.ndarray, by_parent: np.ndarray) -> np.ndarray:
    """Duration minus the union of the children's intervals clipped to the parent, in nanoseconds."""
    self_time = np.maximum(end - start, 0)
    kids = by_parent[parent[by_parent] >= 0]  # children, grouped by parent, each group by start time
    if not len(kids):
        return self_time
    owner = parent[kids]
    lo = np.maximum(start[kids], start[owner])
    hi = np.maximum(np.minimum(end[kids], end[owner]), lo)
    same = np.r_[False, owner[1:] == owner[:-1]]
    overlapping = np.unique(owner[same & (lo < np.r_[0, hi[:-1]])])
    simple = ~np.isin(owner, overlapping)
    covered = np.bincount(owner[simple], weights=(hi - lo)[simple], minlength=len(start)).astype(np.int64)
    first = np.searchsorted(owner, overlapping, side="left")
    last = np.searchsorted(owner, overlapping, side="right")
    for p, i, j in zip(overlapping.tolist(), first.tolist(), last.tolist(), strict=True):
        # Overlapping children (parallel calls): merge their intervals.
        reach, total = start[p], 0
        for a, b in zip(lo[i:j].tolist(), hi[i:j].tolist(), strict=True):
            if b > reach:
                total += b - max(a, reach)
                reach = b
        covered[p] = total
    return np.maximum(self_time - covered, 0)


def tree_shape(id_keys: np.ndarray, has_parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> TreeShape:
    """Compute the tree columns of every trace in a batch (each trace's spans should all be present).

    Parameters
    ----------
    id_keys
        Per span: trace id (two words), span id and parent span id as big-endian unsigned 64-bit numbers,
        so their order is the order of the ids' hex text (``DecodedSpans.id_keys``).
    has_parent
        Per span: whether it names a parent.
    start, end
        Per span: start and end time in nanoseconds (int64).
    """
    count = len(id_keys)
    trace = _ranks(id_keys[:, :2])
    span_key = id_keys[:, 2]
    parent = _parents(trace, span_key, id_keys[:, 3], has_parent)
    depth, resolved = _depths(parent)
    while not resolved.all():  # a parent cycle: cut it at its earliest span, which becomes an orphan
        stuck = np.flatnonzero(~resolved)
        earliest = stuck[np.lexsort((span_key[stuck], start[stuck], trace[stuck]))]
        first_of_trace = np.r_[True, trace[earliest][1:] != trace[earliest][:-1]]
        parent[earliest[first_of_trace]] = -1
        depth, resolved = _depths(parent)
    is_orphan = has_parent & (parent < 0)

    # Siblings in layout order: children by (parent, start, span id); the tops of a trace (its root, then
    # orphans) are the children of a virtual node per trace.
    top = parent < 0
    group = np.where(top, count + trace, parent)
    layout = np.lexsort((span_key, start, group * 2 + (is_orphan & top)))
    child_count = np.bincount(parent[~top], minlength=count).astype(np.int32)
    size = np.ones(count, dtype=np.int64)
    levels = [np.flatnonzero(depth == d) for d in range(int(depth.max(initial=0)) + 1)]
    for level in reversed(levels[1:]):
        size += np.bincount(parent[level], weights=size[level], minlength=count).astype(np.int64)
    offset = np.empty(count, dtype=np.int64)
    offset[layout] = _group_offsets(group[layout], size[layout])
    position = np.zeros(count, dtype=np.int64)
    position[levels[0]] = offset[levels[0]]
    for level in levels[1:]:
        position[level] = position[parent[level]] + 1 + offset[level]
    self_ns = _self_time(start, end, parent, layout)
    return TreeShape(
        order=np.argsort(trace * count + position),  # (positions are distinct within a trace)
        depth=depth.astype(np.int32),
        child_count=child_count,
        span_index=position.astype(np.int32),
        subtree_end=(position + size - 1).astype(np.int32),
        self_time_ms=self_ns / 1e6,
        is_orphan=is_orphan,
        parent=parent,
        trace=trace,
    )
