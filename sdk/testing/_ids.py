"""Deterministic, realistic-looking ids (``chatcmpl-…``, ``call_…``, ``resp_…``, ``msg_01…``).

An id is a hash of the server's seed, the request's canonical JSON and how many identical requests came
before it. A fleet (the demo's, or a test's) runs agents concurrently, so an arrival counter would hand out
different ids on every run; hashing the content gives each conversation the same ids whatever the thread
timing.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from tailcut.canonical import canonical_json

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class IdFactory:
    """Hands each request its own :class:`IdSource`, seeded by content and occurrence."""

    def __init__(self, seed: int | str) -> None:
        self._seed = str(seed)
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def for_request(self, api: str, body: Mapping[str, Any]) -> IdSource:
        """Return the id source of the next request with this ``api`` and ``body``."""
        content = hashlib.sha256(f"{self._seed}\0{api}\0{canonical_json(body)}".encode()).hexdigest()
        with self._lock:
            occurrence = self._seen[content]
            self._seen[content] += 1
        return IdSource(f"{content}:{occurrence}")

    def reset(self) -> None:
        """Forget every request seen, so the same requests get the same ids again."""
        with self._lock:
            self._seen.clear()


class IdSource:
    """The ids of one response: each call to :meth:`new` gives the next id of the sequence."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._count = 0

    def new(self, prefix: str, length: int, *, hex_digits: bool = False) -> str:
        """Return ``prefix`` followed by ``length`` base62 (at most 85) or hex (at most 64) characters."""
        self._count += 1
        digest = hashlib.sha256(f"{self._key}:{self._count}".encode()).digest()
        if hex_digits:
            return prefix + digest.hex()[:length]
        number = int.from_bytes(digest + hashlib.sha256(digest).digest(), "big")
        chars = []
        for _ in range(length):
            number, rest = divmod(number, 62)
            chars.append(_BASE62[rest])
        return prefix + "".join(chars)


def fingerprint(model: str) -> str:
    """A stable ``system_fingerprint`` for ``model`` (``fp_`` and ten hex digits), as OpenAI sends."""
    return "fp_" + hashlib.sha256(model.encode()).hexdigest()[:10]
