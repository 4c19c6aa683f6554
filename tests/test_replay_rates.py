"""The wording of a replay result: rate, denominator and mode, diverged reruns never among the passes."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.errors import TailcutError
from tailcut.replay import rate_text, rate_word


@pytest.mark.parametrize(
    ("successes", "n", "word"),
    [
        (10, 10, "always"),
        (1, 1, "always"),
        (0, 10, "never"),
        (3, 10, "intermittent"),
        (9, 10, "intermittent"),
    ],
)
def test_rate_word(successes: int, n: int, word: str) -> None:
    assert rate_word(successes, n) == word


class _Mode(enum.StrEnum):
    LIVE = "live"


def test_rate_text_names_rate_denominator_and_mode() -> None:
    assert rate_text(3, 10, "live") == "intermittent 3/10 (live)"
    assert rate_text(10, 10, "recorded") == "always 10/10 (recorded)"
    assert rate_text(0, 5, _Mode.LIVE) == "never 0/5 (live)"
    assert rate_text(5, 5, "recorded", bit_stable=True) == "bit-stable 5/5 (recorded)"


@given(st.integers(1, 50).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_a_diverged_rerun_is_never_worded_as_a_pass(counts) -> None:
    n, diverged = counts
    text = rate_text(n - diverged if diverged == 0 else 0, n, "cut", diverged=diverged)
    assert (f"diverged {diverged}/{n}" in text) == (diverged > 0)
    assert not (diverged and text.startswith(("always", "bit-stable")))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rate_word(0, 0), "n must be a whole number ≥ 1"),
        (lambda: rate_word(4, 3), r"successes \(4\) exceed runs \(3\)"),
        (lambda: rate_text(2, 3, "cut", diverged=2), r"passed \(2\) and diverged \(2\) exceed runs \(3\)"),
        (lambda: rate_text(3, 10, "replayed"), "expected one of recorded, live, cut"),
    ],
)
def test_bad_counts_or_mode_raise_one_clear_error(call, message: str) -> None:
    with pytest.raises(TailcutError, match=message) as raised:
        call()
    assert "\n" not in str(raised.value)
