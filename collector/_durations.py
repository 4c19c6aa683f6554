"""Durations in the OpenTelemetry Collector's notation (Go's ``time.ParseDuration``): ``10s``, ``500ms``.

The Collector reads ``decision_wait: 10s`` with Go's parser, so tailcut accepts exactly that grammar:
one or more decimal numbers, each with an optional fraction and a unit (``ns``, ``us``/``µs``, ``ms``,
``s``, ``m``, ``h``), with an optional leading sign, or the bare ``0``.
"""

from __future__ import annotations

import re
from typing import Final

_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5 micro sign
    "μs": 1e-6,  # U+03BC Greek mu, also accepted by Go
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_TERM: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

#: Shown in error messages so a user sees what is accepted.
DURATION_FORMS: Final = "a duration such as 10s, 500ms, 1m or 1h30m"


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string.

    Parameters
    ----------
    text
        For example ``"10s"``, ``"500ms"``, ``"1.5m"``, ``"1h30m"`` or ``"0"``.

    Returns
    -------
    float
        The duration in seconds.

    Raises
    ------
    ValueError
        When ``text`` is not a Go duration (a bare number other than ``0`` is refused, as Go does).

    Examples
    --------
    >>> parse_duration("1m30s")
    90.0
    >>> parse_duration("250ms")
    0.25
    """
    body = text.strip()
    sign = 1.0
    if body and body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"not a duration: {text!r}")
    total = 0.0
    position = 0
    while position < len(body):
        match = _TERM.match(body, position)
        if match is None:
            raise ValueError(f"not a duration: {text!r}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return sign * total
