"""Failures inside tailcut never reach the agent: each is caught, counted and logged once.

Two kinds are told apart in :func:`tailcut.stats`:

* ``hook_errors``: a hook the user gave tailcut raised (the ``redact`` hook of ``tailcut.init``);
* ``internal_errors``: tailcut's own recording failed (a bug, or a span processor that raises).

Either way the crossing's function runs exactly once and returns its value (or raises its own
exception); only the recording is incomplete. The first failure of each kind at each place is logged
with its traceback, later ones are only counted.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from tailcut._config import counters
from tailcut.redaction import redact_text

F = TypeVar("F", bound=Callable[..., Any])


def internal_error(where: str, exc: BaseException) -> None:
    """Count and log (once per place and exception type) a failure of tailcut's own recording."""
    counters.add("internal_errors")
    counters.warn_once(
        f"internal:{where}:{type(exc).__qualname__}",
        "tailcut: recording failed in %s (%s: %s); the agent is unaffected, see tailcut.stats()",
        where,
        type(exc).__name__,
        exc,
        exc_info=exc,
    )


def hook_error(hook: str, exc: BaseException) -> None:
    """Count and log (once per hook and exception type) a user hook that raised.

    The log names where the hook raised, and its message with the default redaction applied but no
    traceback: a redaction hook's failure may well quote the secret it was given.
    """
    counters.add("hook_errors")
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    counters.warn_once(
        f"hook:{hook}:{type(exc).__qualname__}",
        "tailcut: the %s hook raised %s%s: %s; the payload is not recorded, the agent is unaffected",
        hook,
        type(exc).__name__,
        where,
        redact_text(str(exc)),
    )


def never_raises(where: str) -> Callable[[F], F]:
    """Decorate a recording step so that an exception in it is an :func:`internal_error`, and None.

    Only for steps whose None result means "nothing recorded": starting a span (None is "not
    recording") and finishing one.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                internal_error(where, exc)
                return None

        return guarded  # type: ignore[return-value]

    return decorate
