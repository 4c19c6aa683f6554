"""Context propagation into threads, so boundaries crossed in worker threads join the run.

asyncio tasks inherit the context they were created in; threads do not. Agents often run parallel tool
calls on a thread pool, and without the context those spans would start new traces and miss the run's
numbering. ``tailcut.init()`` therefore makes ``threading.Thread.start`` and
``concurrent.futures.ThreadPoolExecutor.submit`` carry the caller's ``contextvars`` context (the
OpenTelemetry context, the run and any replay interceptor), as asyncio does for tasks.
Switch it off with ``tailcut.init(propagate_context_to_threads=False)``.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tailcut.instrumentation._patching import Patch, PatchSet


def _patch_thread_start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: threading.Thread) -> None:
        context = contextvars.copy_context()
        run = self.run

        def run_in_context() -> None:
            context.run(run)

        self.run = run_in_context  # type: ignore[method-assign]
        original(self)

    return start


def _patch_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def submit(
        self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ):
        return original(self, contextvars.copy_context().run, fn, *args, **kwargs)

    return submit


def _patches() -> Iterator[Patch]:
    yield Patch(threading.Thread, "start", _patch_thread_start)
    yield Patch(concurrent.futures.ThreadPoolExecutor, "submit", _patch_submit)


thread_context = PatchSet(_patches)
