"""The SDK's runtime configuration: what every boundary crossing reads on its hot path.

``tailcut.init()`` fills it once; :func:`tailcut.testing.capture_spans` swaps it for the duration of a
test. Until then recording is off and decorators cost one attribute read.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace

from tailcut import attributes as attr
from tailcut.environment import DEFAULT_INLINE_LIMIT
from tailcut.payloads import PayloadStore

_logger = logging.getLogger("tailcut")


@dataclass(frozen=True)
class Config:
    """Immutable settings of the recording SDK (replaced as a whole, never mutated)."""

    enabled: bool = False
    tracer: trace.Tracer = field(default_factory=lambda: trace.NoOpTracer())
    redact: Callable[..., Any] | None = None
    redact_defaults: bool = True
    capture_content: Mapping[str, bool] = field(default_factory=dict)
    inline_limit: int = DEFAULT_INLINE_LIMIT
    payload_store: PayloadStore | None = None
    #: Record LLM requests whole instead of as a skeleton plus pieces (for a backend that is not tailcut).
    self_contained: bool = False
    harness_revision: str | None = None
    env_revision: str | None = None

    def captures(self, kind: str) -> bool:
        """Whether payload content is recorded for this kind (hashes and sizes always are)."""
        return self.capture_content.get(kind, self.capture_content.get("*", True))

    def with_changes(self, **changes: Any) -> Config:
        return replace(self, **changes)


_current = Config()
_lock = threading.Lock()


def current() -> Config:
    return _current


def install(config: Config) -> Config:
    """Make ``config`` current and return the previous one."""
    global _current
    with _lock:
        previous, _current = _current, config
    return previous


def normalize_capture_content(value: bool | Mapping[str, bool] | None, default: bool) -> dict[str, bool]:
    """``capture_content`` as a kind -> bool table (``"*"`` is the fallback for unlisted kinds)."""
    if value is None:
        return {"*": default}
    if isinstance(value, bool):
        return {"*": value}
    table = {"*": default}
    for kind, on in value.items():
        if kind != "*" and kind not in attr.KINDS:
            raise ValueError(
                f"capture_content: unknown kind {kind!r}; expected one of {', '.join(attr.KINDS)}"
            )
        table[kind] = bool(on)
    return table


class Counters:
    """Process-wide counts of what the SDK could not record, so no loss is silent.

    Read them with :func:`tailcut.stats`. A child process forked after ``tailcut.init()`` starts from
    zero: its counts are its own.
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            # A lock held by another thread at fork time would stay held in the child forever.
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._warned: set[str] = set()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def get(self, name: str) -> int:
        return self._counts.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def warn_once(self, key: str, message: str, *args: Any, exc_info: BaseException | None = None) -> None:
        """Log ``message`` the first time ``key`` is seen (failures inside tailcut are logged once)."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        _logger.warning(message, *args, exc_info=exc_info)


counters = Counters()
