"""The collector's error: every failure to start, write or stop, as one line a user can act on."""

from __future__ import annotations

from tailcut.errors import TailcutError


class CollectorError(TailcutError):
    """The collector could not start (an address in use, an unusable data dir), write, or stop cleanly."""
