"""Files that appear whole or not at all: temporary names, fsync, rename, and cleanup after a crash.

Readers glob ``*.parquet``. A file is written as ``.part-<uuid7>.<pid>.parquet.tmp`` (a dot name that no
``*.parquet`` glob matches), fsync'd, renamed to ``part-<uuid7>.parquet`` and the directory fsync'd, so a
reader sees either the whole file or nothing, even across a power cut. A writer killed mid-file leaves only
its temporary file, which the next writer to open the data dir removes once the process that owned it is
gone.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

TEMP_SUFFIX: Final = ".parquet.tmp"
_TEMP_NAME: Final = re.compile(r"^\.part-[0-9a-f-]{36}\.(\d+)\.parquet\.tmp$")
#: A temporary file this old is removed even if its pid now belongs to a live (reused) process.
STALE_AFTER_SECONDS: Final = 24 * 3600


def uuid7() -> uuid.UUID:
    """A version-7 UUID (RFC 9562): Unix milliseconds first, so file names sort by creation time."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0b10 << 62
    return uuid.UUID(int=value | rand & (2**62 - 1))


def part_names() -> tuple[str, str]:
    """``(temporary name, final name)`` of a new part file written by this process."""
    stem = f"part-{uuid7()}"
    return f".{stem}.{os.getpid()}{TEMP_SUFFIX}", f"{stem}.parquet"


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's) contents to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(temporary: Path, final: Path) -> None:
    """Make a finished temporary file visible under its final name, durably."""
    fsync_path(temporary)
    os.replace(temporary, final)
    fsync_path(final.parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stale_temporaries(root: Path) -> Iterator[Path]:
    """Temporary part files under ``root`` whose writer is gone (or that are over a day old)."""
    now = time.time()
    for path in root.glob(f"*/dt=*/.part-*{TEMP_SUFFIX}"):
        match = _TEMP_NAME.match(path.name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            old = now - path.stat().st_mtime > STALE_AFTER_SECONDS
        except FileNotFoundError:
            continue
        if pid != os.getpid() and (old or not _alive(pid)):
            yield path
