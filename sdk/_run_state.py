"""Per-run bookkeeping: occurrence and sequence numbers, and the run's trace signals.

A run's state lives in a context variable, so every boundary crossed inside ``tailcut.run(...)`` (in
this thread, in asyncio tasks it starts, and in threads started with context) numbers itself against the
same counters. Numbers are assigned when a crossing *starts*, in the order the agent issues calls, so
parallel tool calls whose completion order follows latency keep stable (boundary, occurrence) keys.
"""

from __future__ import annotations

import collections
import contextvars
import threading

from opentelemetry import trace

from tailcut._pieces import PieceLedger
from tailcut.signals import SignalCounter


class RunState:
    """Counters shared by every crossing of one run; safe to use from several threads."""

    __slots__ = ("_lock", "_occurrences", "_seq", "pieces", "prompt_version", "signals")

    def __init__(self, prompt_version: str | None = None) -> None:
        #: The run's prompt version(s), copied onto every llm span (``tailcut.prompt.version``).
        self.prompt_version = prompt_version
        self._lock = threading.Lock()
        self._occurrences: dict[str, int] = {}
        self._seq = 0
        #: The run's trace signals so far; the root span counts from the start.
        self.signals = SignalCounter()
        self.signals.add_span(0)
        #: The request pieces this run already sent in its trace.
        self.pieces = PieceLedger()

    def next_crossing(self, boundary: str, depth: int | None = None) -> tuple[int, int]:
        """Assign ``(occurrence, seq)`` to a crossing starting now; with ``depth``, count its span too.

        A replay that serves a crossing also takes the numbers of the crossings recorded inside it
        (which will not run), without a depth: no span is made for them.
        """
        with self._lock:
            occurrence = self._occurrences.get(boundary, 0) + 1
            self._occurrences[boundary] = occurrence
            self._seq += 1
            if depth is not None:
                self.signals.add_span(depth)
            return occurrence, self._seq

    def span_started(self, depth: int) -> None:
        with self._lock:
            self.signals.add_span(depth)

    def span_ended(
        self,
        kind: str,
        *,
        failed: bool,
        attempt: int = 1,
        boundary: str | None = None,
        request_sha256: str | None = None,
        tokens: int = 0,
        schema_violations: int = 0,
    ) -> None:
        """Fold one ended span into the signals (see :mod:`tailcut.signals` for the rules).

        ``tokens`` is the call's input plus output: the root records only the total.
        """
        first_tool_attempt = kind == "tool" and attempt == 1
        with self._lock:
            self.signals.add_outcome(
                kind,
                failed=failed,
                tool_key=(boundary or "", request_sha256) if first_tool_attempt else None,
                input_tokens=tokens,
                schema_violations=schema_violations,
            )


_RUN: contextvars.ContextVar[RunState | None] = contextvars.ContextVar("tailcut_run", default=None)
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("tailcut_depth", default=0)
_ATTEMPT: contextvars.ContextVar[int] = contextvars.ContextVar("tailcut_attempt", default=1)
_TOOL_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tailcut_tool_call_id", default=None
)

# Crossings outside any tailcut.run share numbering per trace (for agents whose root span another
# instrumentation made). Bounded, oldest first out.
_DETACHED_LIMIT = 1024
_detached: collections.OrderedDict[int, RunState] = collections.OrderedDict()
_detached_lock = threading.Lock()


def current_run_state() -> RunState:
    """The state of the run in progress, or a per-trace state when no ``tailcut.run`` is active."""
    state = _RUN.get()
    if state is not None:
        return state
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return RunState()  # a crossing with no parent starts its own trace
    with _detached_lock:
        state = _detached.get(span_context.trace_id)
        if state is None:
            state = _detached[span_context.trace_id] = RunState()
            if len(_detached) > _DETACHED_LIMIT:
                _detached.popitem(last=False)
        else:
            _detached.move_to_end(span_context.trace_id)
        return state
