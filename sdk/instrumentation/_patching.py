"""Patching as data: an instrumentor lists (object, attribute, replacement) triples, applied and undone
together, so instrumenting twice is a no-op and uninstrumenting restores exactly the originals."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_MARK = "__tailcut_original__"


@dataclass(frozen=True)
class Patch:
    """Replace ``getattr(owner, name)`` with ``make(original)``."""

    owner: Any
    name: str
    make: Callable[[Any], Any]


class PatchSet:
    """A group of patches applied and restored as one (thread-safe, idempotent)."""

    def __init__(self, patches: Callable[[], Iterable[Patch]]) -> None:
        self._patches = patches
        self._applied: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    @property
    def applied(self) -> bool:
        return bool(self._applied)

    def apply(self) -> bool:
        """Apply every patch; False (and no change) when already applied."""
        with self._lock:
            if self._applied:
                return False
            for patch in self._patches():
                original = patch.owner.__dict__.get(patch.name, getattr(patch.owner, patch.name))
                replacement = patch.make(original)
                try:
                    setattr(replacement, _MARK, original)
                except (AttributeError, TypeError):
                    pass
                setattr(patch.owner, patch.name, replacement)
                self._applied.append((patch.owner, patch.name, original))
            return True

    def restore(self) -> bool:
        """Put every original back; False when nothing was applied."""
        with self._lock:
            if not self._applied:
                return False
            for owner, name, original in reversed(self._applied):
                setattr(owner, name, original)
            self._applied.clear()
            return True
