"""Replay modes and what a session does at a divergence, as string enums with validating parsers.

The mode is part of every replay claim (a recorded replay passes by construction; only a live one shows
the behaviour still happens), so it travels with every result as one of three fixed strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Literal

from tailcut.errors import ReplayError

OnDivergence = Literal["stop", "continue"]
ON_DIVERGENCE: tuple[OnDivergence, ...] = ("stop", "continue")


class ReplayMode(StrEnum):
    """How a replay treats the boundaries of a recorded run.

    ``recorded``
        Every boundary is served from the record; nothing runs, no model is called.
    ``live``
        Every boundary runs for real; the session only counts the live crossings.
    ``cut``
        The chosen boundaries run the code under test live; the rest are served from the record.
    """

    RECORDED = "recorded"
    LIVE = "live"
    CUT = "cut"

    @classmethod
    def parse(cls, value: ReplayMode | str) -> ReplayMode:
        """The mode named by ``value`` (the enum or its string).

        Raises
        ------
        ReplayError
            If ``value`` names no mode; the message lists every valid value.
        """
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(mode.value for mode in cls)
            raise ReplayError(f"unknown replay mode {value!r}; expected one of {valid}") from None


def resolve_on_divergence(value: str | None, mode: ReplayMode) -> OnDivergence:
    """``value``, or the mode's default: ``stop`` when everything is served, ``continue`` in cut mode.

    A cut-point replay runs changed code against the record, so requests it sends to served boundaries
    may differ by design (a new prompt or tool schema); it reports them and keeps serving.
    """
    if value is None:
        return "continue" if mode is ReplayMode.CUT else "stop"
    if value not in ON_DIVERGENCE:
        raise ReplayError(f"on_divergence must be one of {', '.join(ON_DIVERGENCE)}; got {value!r}")
    return value  # type: ignore[return-value]


class CrossingCounts:
    """How many of a rerun's crossings ran live and how many were served, and what that says of it.

    Mixed into the live session and its result, which both hold ``mode`` and the per-kind counts.
    """

    mode: ReplayMode
    live_counts: Mapping[str, int]
    served_counts: Mapping[str, int]

    @property
    def live_crossings(self) -> int:
        return sum(self.live_counts.values())

    @property
    def served_crossings(self) -> int:
        return sum(self.served_counts.values())

    @property
    def not_live(self) -> bool:
        """A live rerun that made no live crossing was not live at all."""
        return self.mode is ReplayMode.LIVE and self.live_crossings == 0
