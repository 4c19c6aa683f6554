"""Readable differences between a recorded request and a live one.

Two views, because each answers a different question: key paths (``$.messages[3].content``) say *where*
the requests part, a unified diff of indented JSON shows *what* changed in context.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Final

#: Changed paths a divergence lists at most (a list this long may have left some out).
MAX_PATHS: Final = 12
_MAX_DIFF_LINES: Final = 80
_MAX_VALUE_CHARS: Final = 60
_MISSING: Final = object()


def changed_paths(recorded: Any, live: Any, *, limit: int = MAX_PATHS) -> list[str]:
    """Where two JSON values differ, as ``path: recorded -> live`` lines (at most ``limit``).

    Examples
    --------
    >>> changed_paths({"a": 1, "b": [1, 2]}, {"a": 2, "b": [1]})
    ['$.a: 1 -> 2', '$.b[1]: 2 -> (absent)']
    """
    found: list[str] = []
    _walk(recorded, live, "$", found, limit)
    return found


def _walk(recorded: Any, live: Any, path: str, found: list[str], limit: int) -> None:
    if len(found) >= limit:
        return
    if isinstance(recorded, dict) and isinstance(live, dict):
        for key in sorted(set(recorded) | set(live), key=str):
            step = f"{path}.{key}" if str(key).isidentifier() else f"{path}[{json.dumps(key)}]"
            _walk(recorded.get(key, _MISSING), live.get(key, _MISSING), step, found, limit)
        return
    if isinstance(recorded, list) and isinstance(live, list):
        for i in range(max(len(recorded), len(live))):
            before = recorded[i] if i < len(recorded) else _MISSING
            after = live[i] if i < len(live) else _MISSING
            _walk(before, after, f"{path}[{i}]", found, limit)
        return
    if isinstance(recorded, str) and isinstance(live, str) and recorded != live:
        start = _first_difference(recorded, live)
        found.append(f"{path}: {_excerpt(recorded, start)} -> {_excerpt(live, start)}")
    elif recorded != live or type(recorded) is not type(live):
        found.append(f"{path}: {_short(recorded)} -> {_short(live)}")


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _excerpt(text: str, at: int) -> str:
    """The part of a long string around position ``at`` (where two strings start to differ)."""
    start = max(0, at - _MAX_VALUE_CHARS // 3)
    piece = text[start : start + _MAX_VALUE_CHARS]
    quoted = json.dumps(piece, ensure_ascii=False)[1:-1]
    return f'"{"…" if start else ""}{quoted}{"…" if start + _MAX_VALUE_CHARS < len(text) else ""}"'


def _short(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


def unified_diff(recorded: Any, live: Any, *, recorded_label: str, live_label: str) -> str:
    """A unified diff of the two values as indented, key-sorted JSON (cut after a screenful)."""
    lines = list(
        difflib.unified_diff(
            _indented(recorded),
            _indented(live),
            fromfile=recorded_label,
            tofile=live_label,
            lineterm="",
            n=2,
        )
    )
    if len(lines) > _MAX_DIFF_LINES:
        lines = [*lines[:_MAX_DIFF_LINES], f"... ({len(lines) - _MAX_DIFF_LINES} more diff lines)"]
    return "\n".join(lines)


def _indented(value: Any) -> list[str]:
    if value is None:
        return []
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
