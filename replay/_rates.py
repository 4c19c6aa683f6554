"""How a replay result is worded: a rate with its denominator and its mode, never a bare "reproduced".

One home for the wording, so ``tailcut replay``, its JSON and the viewer say the same thing. A rerun that
left the record (a divergence) is counted apart from the passes in every mode.

Examples
--------
>>> rate_text(3, 10, "live")
'intermittent 3/10 (live)'
>>> rate_text(0, 3, "cut", diverged=3)
'pass 0/3, diverged 3/3 (cut)'
>>> rate_text(20, 20, "recorded", bit_stable=True)
'bit-stable 20/20 (recorded)'
"""

from __future__ import annotations

from typing import Literal

from tailcut.errors import ReplayError
from tailcut.replay._modes import ReplayMode

RateWord = Literal["always", "never", "intermittent"]


class RateInputError(ReplayError, ValueError):
    """A rate was asked for with counts that cannot describe reruns."""


def rate_word(successes: int, n: int) -> RateWord:
    """The word for how often a behaviour reproduced: ``always``, ``never`` or ``intermittent``.

    A rate needs at least one run: with none there is nothing to call "never".

    >>> rate_word(3, 10), rate_word(10, 10), rate_word(0, 10)
    ('intermittent', 'always', 'never')
    """
    for name, value, minimum in (("n", n, 1), ("successes", successes, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise RateInputError(f"{name} must be a whole number ≥ {minimum}, got {value!r}")
    if successes > n:
        raise RateInputError(f"successes ({successes}) exceed runs ({n})")
    if successes == n:
        return "always"
    return "never" if successes == 0 else "intermittent"


def rate_text(
    passed: int, n: int, mode: ReplayMode | str, *, diverged: int = 0, bit_stable: bool = False
) -> str:
    """The rate line of one trace's reruns: passes of ``n``, diverged reruns apart, and the mode.

    Raises
    ------
    ReplayError
        If ``mode`` names no replay mode (the message lists the valid ones) or the counts do not add up.
    """
    mode_name = ReplayMode.parse(mode).value
    word = rate_word(passed, n)
    if diverged:
        if passed + diverged > n:
            raise RateInputError(f"passed ({passed}) and diverged ({diverged}) exceed runs ({n})")
        return f"pass {passed}/{n}, diverged {diverged}/{n} ({mode_name})"
    return f"{'bit-stable' if bit_stable else word} {passed}/{n} ({mode_name})"
