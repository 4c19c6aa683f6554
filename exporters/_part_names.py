"""Names of a data dir's part files: ``part-<uuid7>.parquet``, sorting by when they were created.

Each file is written under a temporary name beside it and renamed into place by :mod:`tailcut._atomic`.
"""

from __future__ import annotations

import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """A version-7 UUID (RFC 9562): Unix milliseconds first, so file names sort by creation time."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0b10 << 62
    return uuid.UUID(int=value | rand & (2**62 - 1))


def part_name() -> str:
    """The final name of a new part file (never the same twice)."""
    return f"part-{uuid7()}.parquet"
