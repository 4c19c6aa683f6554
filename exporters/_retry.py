"""The one retry policy of tailcut's OTLP senders, built on :mod:`tenacity`.

A send that fails in a way worth retrying raises :class:`RetryLater` (with the server's requested
delay, if it gave one); :func:`retrying` retries it with exponential backoff (``backoff``, doubled each
time, at most ``max_backoff``), waits longer when the server asked for longer (an HTTP ``Retry-After``
or a gRPC ``RetryInfo``), and gives up after ``max_attempts`` attempts, or at once when ``stopped`` is
set (a wait in progress ends too). Giving up re-raises the last :class:`RetryLater`.
"""

from __future__ import annotations

import threading

import tenacity


class RetryLater(Exception):
    """A retryable failure; ``delay`` is the delay in seconds the server asked for (None: no hint)."""

    def __init__(self, reason: str, delay: float | None = None) -> None:
        super().__init__(reason)
        self.delay = delay


def retrying(
    *,
    max_attempts: int,
    backoff: float,
    max_backoff: float,
    stopped: threading.Event,
) -> tenacity.Retrying:
    """A :class:`tenacity.Retrying` for :class:`RetryLater` with the policy in the module docstring.

    Examples
    --------
    >>> attempts = []
    >>> def send():
    ...     attempts.append(1)
    ...     if len(attempts) < 3:
    ...         raise RetryLater("busy", delay=0.0)
    >>> for attempt in retrying(max_attempts=5, backoff=0.0, max_backoff=0.0, stopped=threading.Event()):
    ...     with attempt:
    ...         send()
    >>> len(attempts)
    3
    """
    exponential = tenacity.wait_exponential(multiplier=backoff, max=max_backoff)

    def wait(state: tenacity.RetryCallState) -> float:
        assert state.outcome is not None
        error = state.outcome.exception()
        hint = error.delay if isinstance(error, RetryLater) else None
        return max(exponential(state), hint or 0.0)

    def stop(state: tenacity.RetryCallState) -> bool:
        return stopped.is_set() or state.attempt_number >= max_attempts

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(RetryLater),
        wait=wait,
        stop=stop,
        sleep=stopped.wait,
        reraise=True,
    )
