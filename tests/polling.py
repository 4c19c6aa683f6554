"""Waiting for a condition with a deadline, instead of sleeping and hoping (no tests here).

A test that sleeps a fixed time and then asserts races the machine: on a loaded runner the sleep is too
short and the test fails; on an idle one it wastes the rest. :func:`wait_until` polls instead, returns as
soon as the condition holds, and fails with what it waited for once the deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, *, timeout: float = 30.0, interval: float = 0.02) -> T:
    """Call ``condition`` until it returns something true, and return that.

    Parameters
    ----------
    condition
        Checked at once, then every ``interval`` seconds.
    what
        What is awaited, for the failure message (``"the 21 traces rows"``).
    timeout
        Seconds after which the wait fails: generous, since a passing test never waits that long.

    Raises
    ------
    AssertionError
        If ``condition`` is still false after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(interval)
