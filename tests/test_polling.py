"""The shared wait of the process tests: returns what the condition returned, fails naming what it awaited."""

from __future__ import annotations

import pytest

from tests.polling import wait_until


def test_returns_the_first_true_result_as_soon_as_it_holds():
    calls = iter([0, [], None, "ready", "never reached"])
    assert wait_until(lambda: next(calls), "the third call", interval=0) == "ready"
    assert next(calls) == "never reached"  # no call after the condition held


def test_a_condition_that_never_holds_fails_naming_what_was_awaited():
    checks = []
    with pytest.raises(AssertionError, match=r"^gave up waiting for the rows after 0 s$"):
        wait_until(lambda: checks.append(1), "the rows", timeout=0)
    assert checks == [1]  # checked once even with no time to wait
