"""The write-ahead log: numbered segment files of checksummed records, appended before a request is answered.

Layout: ``DIR/<segment number, 20 digits>.wal`` plus ``DIR/LOCK`` (held with ``flock`` so two collectors
never share a log). A record is ``length (u32) | crc32 (u32) | type (u8) | payload``, the checksum over
type and payload (zlib's CRC-32, computed by zlib-ng's vectorised code: the same values, several
times faster on request-sized records); reading a segment stops at its first short or damaged record
(the tail a crash or a full disk left), and the next segment is read from its start. What the records mean is
:mod:`tailcut.collector._journal`'s business; this module only appends, reads back, fsyncs and deletes.

Appends are one unbuffered ``write()`` each (several records at once when given together), so a record
is in the operating system's page cache when :meth:`WriteAheadLog.append` returns: that survives
``kill -9`` of the collector. Surviving a power cut needs ``fsync``, per :data:`FSYNC_MODES`:

* ``always``: every append is fsync'd before it returns; a power cut loses nothing acknowledged.
* ``interval`` (default): a background thread fsyncs every ``fsync_interval``; a power cut loses at most
  that much acknowledged data.
* ``never``: the kernel writes the pages back when it likes (Linux: within about 30 s by default); a
  power cut can lose that much.

Under every mode the log is also fsync'd when a segment is closed and before a Parquet file is
published (:meth:`WriteAheadLog.append` with ``sync``), so a published file's rows are never written
twice after a power cut.

Truncation: every segment has a reference count (traces whose spans it holds and that are not yet
published hold it); the oldest segments are deleted, in order, while their count is zero, so a record
about a trace (its decision, a published file) always outlives the spans it is about. The active
segment rolls over at ``segment_bytes``. Past ``max_bytes`` in all, :attr:`WriteAheadLog.full` is true
and the collector refuses new data with 429 until publishing lets segments go.

Any I/O error makes the log *failed*: later appends raise at once (nothing is written after a hole) until
:meth:`WriteAheadLog.open` starts a fresh segment after a recovery.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from zlib_ng.zlib_ng import crc32

from tailcut.collector._errors import CollectorError
from tailcut.exporters._location import is_remote

FSYNC_MODES: Final = ("always", "interval", "never")
#: Logs a data dir's default ``wal/`` holds side by side (``wal/0``, ``wal/1``, ...): one per collector
#: writing that data dir. A collector takes the first slot no running collector holds, so one that
#: restarts replays a log left by a collector that stopped (its own, or a crashed neighbour's).
WAL_SLOTS: Final = 64


class WalBusy(CollectorError):
    """Another running collector holds this write-ahead log."""


_HEADER: Final = struct.Struct("<IIB")
#: The checksum of each record type's byte, where a record's checksum starts.
_KIND_CRC: Final = tuple(crc32(bytes((kind,))) for kind in range(256))
#: Payload parts this large are handed to ``writev`` as they are; smaller ones are copied together.
_GATHER_MIN: Final = 16 * 1024
#: Buffers per ``writev`` (Linux allows 1024).
_MAX_BUFFERS: Final = 512
Buffer = bytes | bytearray | memoryview
#: A record's payload: bytes, or the byte strings it is made of, in order.
Payload = Buffer | Sequence[Buffer]
_SUFFIX: Final = ".wal"
_MAX_RECORD: Final = 1 << 31


class WalFailure(OSError):
    """The log cannot be written (disk full, directory gone): the collector answers 503 until it recovers."""


class WriteAheadLog:
    """Segmented, checksummed, reference-counted append-only log.

    Parameters
    ----------
    directory
        Where the segments live (created if missing).
    fsync
        One of :data:`FSYNC_MODES`.
    fsync_interval
        Seconds between background fsyncs (``interval`` mode).
    max_bytes
        Size of all segments past which :attr:`full` is true.
    segment_bytes
        Size at which the active segment rolls over (at most ``max_bytes / 8``).
    observe_fsync
        Called with each fsync's duration in seconds (from any thread).
    """

    def __init__(
        self,
        directory: Path,
        *,
        fsync: str = "interval",
        fsync_interval: float = 1.0,
        max_bytes: int = 1 << 30,
        segment_bytes: int = 16 << 20,
        observe_fsync: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}; got {fsync!r}")
        self.directory = directory
        self.fsync_mode = fsync
        self.fsync_interval = fsync_interval
        self.max_bytes = max_bytes
        #: At most an eighth of ``max_bytes``, so that truncation can free room before the log is full.
        self.segment_bytes = min(segment_bytes, max(max_bytes // 8, 4096))
        #: Called with each fsync's duration in seconds (from any thread).
        self.observe_fsync = observe_fsync
        #: segment number -> size in bytes, oldest first
        self.sizes: dict[int, int] = {}
        #: Bytes in all segments.
        self.nbytes = 0
        self._refs: dict[int, int] = {}
        self._lock = threading.Lock()  # the fd and sizes, between appends (loop/writer) and the fsync thread
        self._fd: int | None = None
        self._active = 0
        self._dirty = False
        self._lock_fd: int | None = None
        self.failure: OSError | None = None
        self._stop = threading.Event()
        self._fsync_thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------
    def open(self) -> None:
        """Take the directory's lock (first call) and start a new active segment after the existing ones.

        Raises
        ------
        CollectorError
            When another process holds the log.
        OSError
            When the directory cannot be used.
        """
        with self._lock:
            if self._lock_fd is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise WalBusy(
                        f"another collector is using the write-ahead log in {self.directory}"
                    ) from None
                self._lock_fd = fd
            self._close_fd()
            self.sizes = {number: path.stat().st_size for number, path in self._segments()}
            self._refs = dict.fromkeys(self.sizes, 0)  # the replay that follows takes its references
            self.nbytes = sum(self.sizes.values())
            self._start_segment(max(self.sizes, default=0) + 1)
            self.failure = None
        if self.fsync_mode == "interval" and self._fsync_thread is None:
            self._fsync_thread = threading.Thread(
                target=self._fsync_loop, name="tailcut-wal-fsync", daemon=True
            )
            self._fsync_thread.start()

    def close(self, *, remove: bool = False) -> None:
        """Stop the fsync thread, close the active segment; with ``remove`` delete every segment."""
        self._stop.set()
        if self._fsync_thread is not None:
            self._fsync_thread.join()
            self._fsync_thread = None
        with self._lock:
            if self._fd is not None and self.failure is None and not remove:
                self._fsync_locked()
            self._close_fd()
            if remove:
                for _, path in self._segments():
                    path.unlink(missing_ok=True)
                self.sizes.clear()
                self._refs.clear()
                self.nbytes = 0
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # --- reading ----------------------------------------------------------------------------------------
    def records(self) -> Iterator[tuple[int, int, bytes]]:
        """``(segment, type, payload)`` of every intact record of the segments before the active one."""
        for number, path in self._segments():
            if number >= self._active:
                break
            data = path.read_bytes()
            position = 0
            while position + _HEADER.size <= len(data):
                length, checksum, kind = _HEADER.unpack_from(data, position)
                start = position + _HEADER.size
                end = start + length
                if end > len(data) or crc32(data[start:end], _KIND_CRC[kind]) != checksum:
                    break
                yield number, kind, data[start:end]
                position = end

    # --- writing ----------------------------------------------------------------------------------------
    def append(self, records: Sequence[tuple[int, Payload]], *, sync: bool = False) -> int:
        """Write ``(type, payload)`` records in one ``write()``; return the segment they went to.

        A payload is bytes, or a sequence of byte strings making it up (written as they are, with
        ``writev``: a request body is not copied into a record first). ``sync`` forces an fsync whatever
        the mode (before a Parquet file is published).

        Raises
        ------
        WalFailure
            When the log failed now or earlier (then nothing more is written until :meth:`open`).
        """
        buffers: list[Buffer] = []
        small = bytearray()  # headers and small payloads, gathered into one buffer
        size = 0
        pack = _HEADER.pack
        for kind, payload in records:
            if type(payload) is bytes and len(payload) < _GATHER_MIN:  # most records: copied together
                length = len(payload)
                small += pack(length, crc32(payload, _KIND_CRC[kind]), kind)
                small += payload
                size += _HEADER.size + length
                continue
            parts = (payload,) if isinstance(payload, bytes | bytearray | memoryview) else payload
            length = sum(len(part) for part in parts)
            if length >= _MAX_RECORD:
                raise WalFailure(f"a write-ahead log record of {length} bytes is too large")
            checksum = _KIND_CRC[kind]
            for part in parts:
                checksum = crc32(part, checksum)
            small += pack(length, checksum, kind)
            for part in parts:
                if len(part) < _GATHER_MIN or len(buffers) >= _MAX_BUFFERS:
                    small += part
                else:
                    buffers += (bytes(small), part)
                    small = bytearray()
            size += _HEADER.size + length
        buffers.append(small)
        with self._lock:
            if self.failure is not None or self._fd is None:
                raise WalFailure(f"the write-ahead log is unavailable: {self.failure or 'closed'}")
            try:
                if self.sizes[self._active] >= self.segment_bytes:
                    self._fsync_locked()
                    self._close_fd()
                    self._start_segment(self._active + 1)
                written = os.writev(self._fd, buffers)
                if written < size:  # a short write: the rest, or an error
                    rest = b"".join(buffers)[written:]
                    while rest:
                        rest = rest[os.write(self._fd, rest) :]
                self.sizes[self._active] += size
                self.nbytes += size
                self._dirty = True
                if sync or self.fsync_mode == "always":
                    self._fsync_locked()
            except OSError as exc:
                self._fail(exc)
                raise WalFailure(f"cannot write the write-ahead log in {self.directory}: {exc}") from None
            return self._active

    def hold(self, segment: int) -> None:
        """One more unpublished trace has spans in ``segment``."""
        self._refs[segment] = self._refs.get(segment, 0) + 1

    def release(self, segments: Iterable[int] | Mapping[int, int]) -> None:
        """Drop references (a mapping: that many per segment); deleting old segments is :meth:`collect`."""
        refs = self._refs
        if isinstance(segments, Mapping):
            for segment, count in segments.items():
                refs[segment] -= count
        else:
            for segment in segments:
                refs[segment] -= 1

    def collect(self) -> None:
        """Delete the oldest segments, in order, while nothing references them (never the active one)."""
        with self._lock:
            for number in list(self.sizes):
                if number >= self._active or self._refs.get(number, 0) > 0:
                    return
                with contextlib.suppress(FileNotFoundError):
                    self._path(number).unlink()
                self.nbytes -= self.sizes.pop(number)
                self._refs.pop(number, None)

    @property
    def full(self) -> bool:
        return self.nbytes >= self.max_bytes

    def oldest_segment(self) -> int:
        return next(iter(self.sizes), self._active)

    # --- internals ----------------------------------------------------------------------------------------
    def _segments(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            stem = path.name[: -len(_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), path))
        return sorted(found)

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:020d}{_SUFFIX}"

    def _start_segment(self, number: int) -> None:
        self._fd = os.open(self._path(number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._active = number
        self.sizes[number] = size = os.fstat(self._fd).st_size
        self.nbytes += size
        self._refs.setdefault(number, 0)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # the new name itself survives a power cut
        finally:
            os.close(fd)

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _fail(self, exc: OSError) -> None:
        self.failure = exc
        self._close_fd()

    def _fsync_locked(self) -> None:
        if self._fd is None or not self._dirty:
            return
        started = time.perf_counter()
        os.fdatasync(self._fd)
        self._dirty = False
        self.observe_fsync(time.perf_counter() - started)

    def _fsync_loop(self) -> None:
        while not self._stop.wait(self.fsync_interval):
            with self._lock:
                try:
                    self._fsync_locked()
                except OSError as exc:
                    self._fail(exc)


def wal_directory(data_dir: str) -> Path:
    """Where the log lives when ``processors.tailcut.wal.dir`` is not set: ``wal`` inside a local data
    dir; for an object-store data dir (whose objects cannot be appended to) on local disk, under
    ``.tailcut/wal/<bucket>/<prefix>`` in the working directory. Each collector's log is a numbered
    slot below it (:data:`WAL_SLOTS`).

    >>> wal_directory("data").as_posix(), wal_directory("s3://bucket/team/data").as_posix()
    ('data/wal', '.tailcut/wal/bucket/team/data')
    """
    if is_remote(data_dir):
        rest = data_dir.partition("://")[2]
        return Path(".tailcut", "wal", *[part for part in rest.split("/") if part not in ("", ".", "..")])
    return Path(data_dir) / "wal"
