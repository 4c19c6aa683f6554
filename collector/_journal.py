"""What the collector writes to its write-ahead log, and reading it back after a crash.

Five record types, enough to rebuild the processor's state exactly (the replay itself is
:meth:`tailcut.collector._processor.Processor.recover`):

* ``SPANS``: one accepted request, as its encoded body, with its arrival time (wall clock) and, for each
  trace of the request that was already decided, that decision (:class:`LateEntry`): the log may have
  lost the trace's own records by then, and its spans must still follow the decision.
* ``DECIDED``: a trace's decision with its ``traces`` row and how many of its spans it covered (spans
  after those are late spans).
* ``CLOSED``: the trace's row left its late-span window (it was handed to the writer).
* ``COMPACT``: every span so far of a trace still waiting for its decision, with when it was first
  seen. It replaces the trace's earlier records, so a trace that waits long (``decision_wait``) does
  not keep the log's oldest segments, and everything after them, from being deleted.
* ``PUBLISHED``: a Parquet file is about to appear under this name (written, and fsync'd, before the
  rename). After a crash, a named file that exists holds rows that must not be written twice.

Records of one request are written together, after the request was processed and before it is
answered; a decision made by a decision round is written when it is made.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from tailcut.collector._decide import TraceDecision
from tailcut.collector._errors import CollectorError
from tailcut.exporters._location import location
from tailcut.exporters.wire.encode import request_of
from tailcut.signals import TRACES_COLUMNS, TraceRow, complete_row

SPANS: Final = 1
DECIDED: Final = 2
CLOSED: Final = 3
PUBLISHED: Final = 4
COMPACT: Final = 5
_SECONDS: Final = struct.Struct("<d")
_SPANS_HEAD: Final = struct.Struct("<dI")


class LateEntry(NamedTuple):
    """The decision a request's late spans followed (kept traces: where their ``span_index`` continued)."""

    trace_id: bytes
    decided_at: float  # wall clock, seconds
    index_base: int
    decision: TraceDecision | None  # None: dropped


def spans_record(
    wall: float, late: Iterable[LateEntry], body: bytes | bytearray
) -> tuple[int, tuple[bytes, bytes | bytearray]]:
    """A ``SPANS`` record; its payload is the head and the body as they are (not copied together)."""
    entries = [
        [
            entry.trace_id.hex(),
            entry.decided_at,
            entry.index_base,
            None
            if entry.decision is None
            else [
                list(entry.decision.policies),
                entry.decision.baseline,
                entry.decision.inclusion_probability,
            ],
        ]
        for entry in late
    ]
    encoded = orjson.dumps(entries) if entries else b""
    return SPANS, (_SPANS_HEAD.pack(wall, len(encoded)) + encoded, body)


def read_spans(payload: bytes) -> tuple[float, list[LateEntry], bytes]:
    """``(arrival wall time, late entries, body)`` of a ``SPANS`` record."""
    wall, size = _SPANS_HEAD.unpack_from(payload)
    start = _SPANS_HEAD.size
    late = []
    if size:
        for trace_id, decided_at, index_base, decision in orjson.loads(payload[start : start + size]):
            late.append(
                LateEntry(
                    bytes.fromhex(trace_id),
                    decided_at,
                    index_base,
                    None if decision is None else TraceDecision(True, tuple(decision[0]), *decision[1:]),
                )
            )
    return wall, late, payload[start + size :]


def decided_record(trace_id: bytes, span_count: int, row: TraceRow) -> tuple[int, bytes]:
    """A ``DECIDED`` record: the row's values in the order of :data:`tailcut.signals.TRACES_COLUMNS`
    (every row is built in it; names would add a few hundred bytes per trace to the log)."""
    return DECIDED, trace_id + orjson.dumps([span_count, list(row.values())])


def read_decided(payload: bytes) -> tuple[bytes, int, TraceRow]:
    """``(trace id, spans covered, row)`` of a ``DECIDED`` record, the row with today's columns.

    Columns are only ever appended to :data:`tailcut.signals.TRACES_COLUMNS`, so a log written by an
    older version holds a prefix of them (the rest take their defaults); a row recorded by name is
    read as it is.
    """
    span_count, fields = orjson.loads(payload[16:])
    if isinstance(fields, list):
        fields = dict(zip(TRACES_COLUMNS, fields, strict=False))
    return payload[:16], span_count, complete_row(fields)


def decision_of(row: TraceRow) -> TraceDecision:
    """The decision a ``traces`` row records (``slice_only`` is not in the row: a decision replayed from
    the log forwards its spans with their upstream ``tracestate`` as received)."""
    return TraceDecision(
        row["kept"],
        tuple(row["policies"]),
        row["baseline"],
        row["inclusion_probability"],
        row["head_probability"],
    )


def closed_record(trace_id: bytes) -> tuple[int, bytes]:
    return CLOSED, trace_id


def compact_record(trace_id: bytes, first_seen: float, spans: Sequence[Any]) -> tuple[int, bytes]:
    """``first_seen`` in wall-clock seconds; ``spans`` anything with ``data`` and ``origin``."""
    return COMPACT, trace_id + _SECONDS.pack(first_seen) + request_of(spans)


def read_compact(payload: bytes) -> tuple[bytes, float, bytes]:
    """``(trace id, first seen, request body)`` of a ``COMPACT`` record."""
    return payload[:16], _SECONDS.unpack_from(payload, 16)[0], payload[16 + _SECONDS.size :]


def published_record(relative: str) -> tuple[int, bytes]:
    return PUBLISHED, relative.encode()


class Published(NamedTuple):
    """What the files named in ``PUBLISHED`` records hold (those that exist: the rename happened)."""

    rows: set[str]  # trace ids (hex) with a ``traces`` row
    spans: set[tuple[str, int]]  # (trace id, span_index) of ``spans`` rows

    def has_batch(self, trace_id: bytes, index_base: int) -> bool:
        """Whether a batch of spans starting at ``index_base`` was published (batches go whole to a file)."""
        return (trace_id.hex(), index_base) in self.spans


def published(data_dir: str, names: Iterable[str]) -> Published:
    """Read back the trace ids (and span positions) of the published files among ``names`` (those of
    ``traces/`` and ``spans/``; the other tables, derived from the spans, are skipped).

    ``data_dir`` is a local path or an ``s3://`` URL: a remote data dir is read where it is.

    Raises
    ------
    CollectorError
        When such a file cannot be read (then it is unknown what must not be written again).
    """
    import pyarrow.fs as pafs

    place = location(data_dir)
    filesystem = place.filesystem
    found = Published(set(), set())
    for name in names:
        path = f"{place.path}/{name}"
        try:
            if filesystem.get_file_info(path).type != pafs.FileType.File:
                continue
            if name.startswith("traces/"):
                table = pq.read_table(path, columns=["trace_id"], filesystem=filesystem)
                found.rows.update(table.column("trace_id").to_pylist())
                continue
            if not name.startswith("spans/"):
                continue  # pieces, trace features: derived from the spans, they say nothing of what to skip
            table = pq.read_table(path, columns=["trace_id", "span_index"], filesystem=filesystem)
        except (OSError, pa.ArrowException) as exc:
            raise CollectorError(
                f"cannot read {place.child(name)}, named in the write-ahead log: {exc}"
            ) from None
        found.spans.update(
            zip(table.column("trace_id").to_pylist(), table.column("span_index").to_pylist(), strict=True)
        )
    return found
