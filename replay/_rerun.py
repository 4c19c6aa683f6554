"""One rerun of a recorded run, what a check function sees of it, and how it is judged.

What "passed" means depends on the mode, because each mode proves something different (seed
``000_665ba71824ebdc6b.txt``):

``recorded``
    The check passes **and** the rerun did not diverge from its record at all. The default check asks
    that the rerun reproduce the recorded outcome (``tailcut.outcome`` on the new root span equals the
    recorded one). Passing shows the record is complete and the agent follows it; it says nothing about
    whether the behaviour happens today.
``live``
    The check passes; by default, the recorded outcome happened again, for real. Divergences are not
    looked for. A live rerun that made no live crossing is flagged *not live*.
``cut``
    The check passes and no served boundary diverged. Give a check that judges the cut, e.g. "no unsafe
    refund went through, served or live"; the default only says whether the recorded outcome reproduced.

In every mode a rerun in which anything diverged from its record (a request, an extra or a missing
crossing, upstream or downstream of a live boundary) is ``diverged``, never a pass: the recorded
responses it was served answered other questions, so its outcome proves nothing about the record. Each
judged rerun is ``pass``, ``fail`` (the check said no) or ``diverged``.

The default check asks that the rerun end as the record did: it raises when the record raised, and its
``tailcut.outcome`` is the recorded one; where the record has no outcome (OpenInference, OpenLLMetry and
the GenAI conventions define none) but holds the run's output, the agent's return value must equal it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tailcut.canonical import canonical_json, sha256_hex
from tailcut.errors import CanonicalEncodingError
from tailcut.interceptor import exception_type_name
from tailcut.replay._divergence import DivergenceRecord
from tailcut.replay._modes import CrossingCounts, ReplayMode
from tailcut.replay._session import ReplayedCrossing


@dataclass(frozen=True)
class Rerun(CrossingCounts):
    """One rerun of a recorded run: what a check function judges.

    Attributes
    ----------
    trace_id : str
        The recorded run.
    mode : ReplayMode
    index : int
        1-based number of this rerun of the trace.
    input : Any
        The decoded run input the agent was called with.
    output : Any
        What the agent returned (None if it raised).
    error : BaseException or None
        What the agent raised.
    crossings : tuple of ReplayedCrossing
        Every boundary crossing in start order: boundary, occurrence, decoded ``request``, and whether it
        was ``served`` or ran ``live``.
    divergences : tuple of DivergenceRecord
        Every divergence, first first.
    outcome, recorded_outcome : str or None
        ``tailcut.outcome`` of the rerun's root span, and of the recorded run.
    recorded_error_type : str or None
        What the recorded run raised (its root span's ``error.type``), None when it did not raise.
    recorded_output : Any
        What the recorded run returned, where its convention records it (``output.value``, ...).
    unwrapped : tuple of str
        Third-party tool crossings the agent never asked for: its tool is not wrapped for replay, so it
        ran live (``tool:search#1 (openinference)``).
    rejected : tuple of str
        Third-party tool crossings the agent never asked for because the framework refused the call
        before its tool ran, as it did in the record (``tool:search#1 (openinference): 1 validation error
        for search ...``).
    not_compared : tuple of str
        Per boundary, what the live requests held that its third-party records do not (so it was not
        compared): ``llm:openai.chat: $.tool_choice (not in the records of smolagents under OpenInference)``.
    live_counts, served_counts : Mapping[str, int]
        Crossings per kind that ran live / were served.
    stopped_by : DivergenceRecord or None
        The divergence that stopped the run, if one did.
    harness_revision : str or None
        The harness revision the rerun ran under.
    started_at : datetime
    duration_ms : float
    """

    trace_id: str
    mode: ReplayMode
    index: int
    input: Any
    output: Any
    error: BaseException | None
    crossings: tuple[ReplayedCrossing, ...]
    divergences: tuple[DivergenceRecord, ...]
    outcome: str | None
    recorded_outcome: str | None
    recorded_error_type: str | None = None
    recorded_output: Any = None
    unwrapped: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    not_compared: tuple[str, ...] = ()
    live_counts: Mapping[str, int] = field(default_factory=dict)
    served_counts: Mapping[str, int] = field(default_factory=dict)
    stopped_by: DivergenceRecord | None = None
    harness_revision: str | None = None
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    duration_ms: float = 0.0

    @property
    def first_divergence(self) -> DivergenceRecord | None:
        return self.divergences[0] if self.divergences else None

    @property
    def error_text(self) -> str | None:
        """``error.type: message`` of what the agent raised, on one line."""
        if self.error is None:
            return None
        message = " ".join(str(self.error).split())
        return f"{exception_type_name(self.error)}: {message}" if message else exception_type_name(self.error)

    def fingerprint(self) -> str:
        """A hash of what a bit-stable replay repeats exactly: crossings, output, error and outcome.

        Crossings are compared as a multiset (numbering aside), so parallel calls that start in another
        order but are each served their own record do not count as a change.
        """
        crossings = sorted((canonical_json(list(c.identity())) for c in self.crossings), key=str)
        try:
            output = canonical_json(self.output)
        except CanonicalEncodingError:
            output = repr(self.output)
        return sha256_hex(canonical_json([crossings, output, self.error_text, self.outcome]))


#: A check function: judges a rerun, returning ``passed`` or ``(passed, message)``.
Check = Callable[[Rerun], "bool | tuple[bool, str]"]


def reproduces_outcome(rerun: Rerun) -> tuple[bool, str]:
    """The default check: the rerun ends as the recorded run did: it raises when the record raised,
    and its outcome is the recorded outcome."""
    raised, recorded_raised = rerun.error is not None, rerun.recorded_error_type is not None
    if raised != recorded_raised:
        if recorded_raised:
            return False, f"the record raised {rerun.recorded_error_type}; the rerun did not"
        return False, f"the rerun raised {type(rerun.error).__name__}; the record did not"
    if rerun.recorded_outcome is None and rerun.outcome is None and rerun.recorded_output is not None:
        if _same_value(rerun.output, rerun.recorded_output):
            return True, "output reproduced (the record has no outcome)"
        return False, "the output differs from the recorded output (the record has no outcome)"
    if rerun.outcome == rerun.recorded_outcome:
        return True, f"outcome {rerun.recorded_outcome or '(none)'} reproduced"
    return False, f"outcome {rerun.outcome or '(none)'}; the record says {rerun.recorded_outcome or '(none)'}"


def _same_value(output: Any, recorded: Any) -> bool:
    """Equal as JSON; a returned object that JSON cannot hold is compared by its text."""
    try:
        return canonical_json(output) == canonical_json(recorded)
    except CanonicalEncodingError:
        return str(output) == str(recorded)


def judge(rerun: Rerun, check: Check | None) -> RerunResult:
    """Judge ``rerun`` in its mode (see the module docstring): a rerun that diverged never passes."""
    if rerun.stopped_by is not None:
        return RerunResult(rerun, False, f"stopped at divergence: {rerun.stopped_by}", check_passed=None)
    passed, message = _run_check(check or reproduces_outcome, rerun)
    if rerun.divergences:
        return RerunResult(rerun, False, f"{message}; diverged: {rerun.divergences[0]}", check_passed=passed)
    return RerunResult(rerun, passed, message, check_passed=passed)


def _run_check(check: Check, rerun: Rerun) -> tuple[bool, str]:
    try:
        verdict = check(rerun)
    except AssertionError as exc:
        return False, " ".join(str(exc).split()) or "assertion failed"
    except Exception as exc:
        return False, f"check raised {exception_type_name(exc)}: {exc}"
    if isinstance(verdict, tuple):
        passed, message = verdict
        return bool(passed), str(message)
    return bool(verdict), "check passed" if verdict else "check failed"


RerunStatus = Literal["pass", "fail", "diverged"]


@dataclass(frozen=True)
class RerunResult:
    """A judged rerun: one row of the results file."""

    rerun: Rerun
    passed: bool
    check_message: str
    #: What the check said on its own (None when the rerun was stopped before it ended): a diverged
    #: cut-point rerun whose check passed shows the code under test did its part.
    check_passed: bool | None = None

    @property
    def status(self) -> RerunStatus:
        """``diverged`` when anything left the record, else ``pass`` or ``fail`` by the check."""
        if self.rerun.divergences or self.rerun.stopped_by is not None:
            return "diverged"
        return "pass" if self.passed else "fail"

    @property
    def trace_id(self) -> str:
        return self.rerun.trace_id
