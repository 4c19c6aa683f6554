"""The replay session: the SDK's boundary interceptor, backed by one recorded run.

Each instrumented boundary asks the session what to do before it runs (``on_boundary``) and reports how
it went (``on_result``). What the session answers depends on the mode:

==========  ===========================================  ==============================================
mode        a boundary ...                               a divergence ...
==========  ===========================================  ==============================================
recorded    is served from its envelope; nothing runs    stops the run (``stop``, the default): it is
                                                         raised into the agent as ``tailcut.Divergence``;
                                                         or is listed and the recorded response served
                                                         anyway (``continue``). An extra boundary always
                                                         raises: there is nothing to serve, and a
                                                         recorded replay never runs anything live.
live        runs for real, and is counted                is not looked for (the world may have moved)
cut         listed in ``live`` runs the code under       is listed, and the recorded response served
            test; every other one is served              (``continue``, the default); an extra boundary
                                                         runs live. With ``stop``, a divergence *not*
                                                         downstream of a changed live crossing stops the
                                                         run; downstream ones never do.
==========  ===========================================  ==============================================

**Cut mode, downstream of a live boundary.** A live crossing whose result differs from its record (the
guard under test now says "deny" where the record says "allow") changes the trajectory: later requests
differ, recorded crossings are skipped, new ones appear. Those divergences are *expected*: each is
recorded with ``downstream_of`` naming the live crossing that explains it, the recorded response is still
served by (boundary, occurrence), and a crossing the record lacks runs live. A divergence before any
live crossing changed anything is *upstream*: the new code differs from the recorded harness elsewhere
too (a prompt or a tool schema), which a cut-point test tolerates but reports.

**Crossings other instrumentations recorded.** An ``llm`` envelope recorded by OpenInference,
OpenLLMetry or the GenAI instrumentor is served like tailcut's own (same boundary and occurrence); its
live request is compared in the form that convention records
(:mod:`tailcut.exporters.conventions.matching`); what of it no record holds is reported in
``not_compared``. An OpenInference tool record of a one-argument call (the bare value) is compared with
the live call's arguments keyed by that argument's name. A third-party reply is served as a stream of chunk
events when the agent streams (:mod:`tailcut.replay._chunks`: those conventions record the reply a stream
added up to). A third-party *tool* envelope is served only when the agent's tool is wrapped for replay
(``@tailcut.tool``); one never asked for ran live unwrapped, and is reported in ``unwrapped``, not as
a missing crossing: nothing can tell whether it ran. One whose record says the framework refused the call
before its tool ran (the arguments broke the tool's contract: an observation of ``tool_schema``, such as
LangChain's ``validation error for``) is reported in ``rejected`` instead: the record says the tool
never ran, and the rerun never asked for it.

Crossings made outside any ``tailcut.run`` (an agent whose root span another instrumentation opens) are
numbered per rerun: the session makes the block a trace of its own (a non-recording parent span), so
they share one run's numbering and no other's.

A served crossing whose envelope had crossings recorded *inside* it (``Envelope.parent_seq``) covers
them: they never happen when their parent is served, so they are not missing, and the run's numbering
skips them so later crossings keep their recorded (boundary, occurrence).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from tailcut import attributes as attr
from tailcut._run_state import current_run_state
from tailcut._threads import thread_context
from tailcut.canonical import loads
from tailcut.errors import Divergence, ReplayError
from tailcut.exporters.conventions.corpus import OPENINFERENCE
from tailcut.exporters.conventions.matching import Comparison, ToolArguments, tool_parameters
from tailcut.interceptor import Crossing, Served, exception_type_name, use_interceptor
from tailcut.replay._capture import RerunCapture
from tailcut.replay._cassette import Cassette, Lookup
from tailcut.replay._chunks import chat_chunks
from tailcut.replay._corpus import Envelope
from tailcut.replay._divergence import (
    DivergenceRecord,
    extra_divergence,
    missing_divergence,
    request_divergence,
)
from tailcut.replay._matching import LiveSpec, MatchOn, MatchPolicy, Normalize, parse_live
from tailcut.replay._modes import CrossingCounts, ReplayMode, resolve_on_divergence

CrossingStatus = Literal["served", "live", "stopped"]

#: llm boundary prefix -> the instrumentor that makes those calls boundaries.
_INSTRUMENTORS = {"llm:openai.": "openai", "llm:anthropic.": "anthropic"}


@dataclass(frozen=True, slots=True)
class ReplayedCrossing:
    """One boundary crossing of a rerun, as a check function sees it.

    ``status`` is ``served`` (from the record), ``live`` (ran for real) or ``stopped`` (a divergence was
    raised instead). ``recorded`` names the envelope it was matched to (``tool:refund#1``), if any.
    """

    kind: str
    boundary: str
    occurrence: int
    seq: int
    request_json: str | None
    request_sha256: str | None
    status: CrossingStatus
    recorded: str | None = None
    response_sha256: str | None = None
    error_type: str | None = None

    @property
    def served(self) -> bool:
        return self.status == "served"

    @property
    def live(self) -> bool:
        return self.status == "live"

    @property
    def request(self) -> Any:
        """The decoded request (what the boundary was sent)."""
        return loads(self.request_json) if self.request_json is not None else None

    def identity(self) -> tuple[Any, ...]:
        """What must not change between reruns for a replay to be bit-stable (numbering aside)."""
        return (self.boundary, self.request_sha256, self.status, self.response_sha256, self.error_type)


@dataclass(slots=True)
class _Slot:
    crossing: Crossing
    status: CrossingStatus
    envelope: Envelope | None
    response_sha256: str | None = None
    error_type: str | None = None

    def frozen(self) -> ReplayedCrossing:
        c = self.crossing
        return ReplayedCrossing(
            kind=c.kind,
            boundary=c.boundary,
            occurrence=c.occurrence,
            seq=c.seq,
            request_json=c.request,
            request_sha256=c.request_sha256,
            status=self.status,
            recorded=self.envelope.key if self.envelope is not None else None,
            response_sha256=self.response_sha256,
            error_type=self.error_type,
        )


class ReplaySession(CrossingCounts):
    """A replay of one recorded run; install it with :meth:`active` (or use :func:`session`).

    Parameters
    ----------
    envelopes
        The run's recorded crossings (``Corpus.envelopes(trace_id)``).
    trace_id
        The recorded run's trace id (for messages).
    mode
        ``recorded``, ``live`` or ``cut`` (see the module docstring).
    live
        Cut mode: the boundaries that run live, ``kind:name`` or ``kind:name#occurrence``.
    on_divergence
        ``stop`` or ``continue``; default ``stop`` in recorded mode and ``continue`` in cut mode.
    match_on
        Matcher names for every boundary, or a mapping of boundary name (``"*"`` for the rest) to
        matcher names; see :mod:`tailcut.replay._matching`.
    normalize
        ``normalize(boundary, request) -> request``, applied to the live and the recorded request
        before they are hashed and compared.
    """

    def __init__(
        self,
        envelopes: Sequence[Envelope],
        *,
        trace_id: str = "",
        mode: ReplayMode | str = ReplayMode.RECORDED,
        live: Sequence[LiveSpec | str] = (),
        on_divergence: str | None = None,
        match_on: MatchOn | None = None,
        normalize: Normalize | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.mode = ReplayMode.parse(mode)
        self.on_divergence = resolve_on_divergence(on_divergence, self.mode)
        self.live_specs = check_live_options(self.mode, live)
        self._comparisons = _comparisons(envelopes)
        self._envelopes = tuple(_as_compared(e, self._comparisons) for e in envelopes)
        self._policy = MatchPolicy(match_on, normalize)
        self._cassette = Cassette(self._envelopes, self._policy)
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._slot_of: dict[int, _Slot] = {}
        self._divergences: list[DivergenceRecord] = []
        self._unwrapped: list[Envelope] = []
        self._rejected: list[tuple[Envelope, str]] = []
        self._not_compared: dict[str, set[str]] = {}
        self._asked: Crossing | None = None  # the crossing on_boundary is deciding, as it was asked
        self._stopped: DivergenceRecord | None = None
        self._changed_by: str | None = None
        self._closed = False
        self._capture = RerunCapture()
        #: Crossings of each kind that ran live / were served from the record.
        self.live_counts: collections.Counter[str] = collections.Counter()
        self.served_counts: collections.Counter[str] = collections.Counter()

    # -- what a replay found ---------------------------------------------------------------------------------
    @property
    def crossings(self) -> list[ReplayedCrossing]:
        """Every crossing so far, in the order they started."""
        with self._lock:
            return sorted((slot.frozen() for slot in self._slots), key=lambda c: c.seq)

    @property
    def divergences(self) -> list[DivergenceRecord]:
        """Every divergence so far (missing crossings are added by :meth:`close`)."""
        with self._lock:
            return list(self._divergences)

    @property
    def unwrapped(self) -> list[str]:
        """Third-party tool crossings the agent never asked for (its tool is not wrapped: it ran live).

        Each is ``boundary#occurrence (convention)``; filled in by :meth:`close`.
        """
        with self._lock:
            return [f"{e.key} ({e.convention})" for e in self._unwrapped]

    @property
    def rejected(self) -> list[str]:
        """Third-party tool crossings never asked for whose record shows the framework refused the call
        before the tool ran (the rerun never asked for them either).

        Each is ``boundary#occurrence (convention): the record's error``; filled in by :meth:`close`.
        """
        with self._lock:
            return [f"{e.key} ({e.convention}): {quote}" for e, quote in self._rejected]

    @property
    def not_compared(self) -> list[str]:
        """What the live requests held that the third-party records do not, so it was not compared.

        One entry per boundary: ``llm:openai.chat: $.tool_choice (not in the records of smolagents under
        OpenInference)``.
        """
        with self._lock:
            return [
                f"{boundary}: {', '.join(sorted(paths))} "
                f"(not in the records of {self._comparisons[boundary].source})"
                for boundary, paths in sorted(self._not_compared.items())
                if paths
            ]

    @property
    def first_divergence(self) -> DivergenceRecord | None:
        with self._lock:
            return self._divergences[0] if self._divergences else None

    @property
    def stopped_by(self) -> DivergenceRecord | None:
        """The divergence that stopped the run (``on_divergence="stop"``), if one did."""
        return self._stopped

    @property
    def spans(self) -> list[ReadableSpan]:
        """The rerun's own spans, recorded in memory."""
        return self._capture.spans

    @property
    def outcome(self) -> str | None:
        """The rerun's outcome, as the agent set it on its root span (``tailcut.outcome``)."""
        return self._capture.root_attribute(attr.OUTCOME)

    @property
    def harness_revision(self) -> str | None:
        """The harness revision the rerun's root span records."""
        return self._capture.root_attribute(attr.HARNESS_REVISION)

    # -- installing it ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self) -> Iterator[ReplaySession]:
        """Install the session for the block: recording in memory, the interceptor, threads that carry it,
        and the ``openai``/``anthropic`` instrumentation the record's llm boundaries need.

        Recording is process-wide configuration, so run one session at a time; an agent that calls
        ``tailcut.init()`` should do so at import, not inside the entry point a replay calls.
        """
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._capture.recording())
            if thread_context.apply():
                stack.callback(thread_context.restore)
            for instrumentor in self._instrumentors():
                try:
                    applied = instrumentor.apply()
                except ImportError:  # a framework that is not installed: the agent cannot be using it
                    continue
                if applied:
                    stack.callback(instrumentor.restore)
            stack.enter_context(use_interceptor(self))
            stack.enter_context(_rerun_context())
            yield self

    def _instrumentors(self) -> list[Any]:
        names = {
            name
            for envelope in self._envelopes
            for prefix, name in _INSTRUMENTORS.items()
            if envelope.boundary.startswith(prefix)
        }
        if any(envelope.kind == "tool" for envelope in self._envelopes):
            # A framework's tools are served through its instrumentation (tailcut.instrumentation.FRAMEWORKS).
            from tailcut.instrumentation import FRAMEWORKS

            names.update(FRAMEWORKS.values())
        found = []
        for name in sorted(names):
            try:
                found.append(importlib.import_module(f"tailcut.instrumentation.{name}").INSTRUMENTOR)
            except ImportError:  # the SDK is not installed: the agent cannot be calling it either
                continue
        return found

    def close(self) -> None:
        """End the session: every recorded crossing never reached becomes a ``missing`` divergence."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.mode is not ReplayMode.LIVE and self._stopped is None:
                for envelope in self._cassette.unplayed():
                    if envelope.third_party and envelope.kind != "llm":
                        refusal = _refusal(envelope)
                        if refusal is None:
                            self._unwrapped.append(envelope)
                        else:
                            self._rejected.append((envelope, refusal))
                    else:
                        downstream = self._downstream()
                        self._divergences.append(missing_divergence(envelope, downstream_of=downstream))
        self._capture.close()

    # -- the interceptor protocol ----------------------------------------------------------------------------
    def on_boundary(self, crossing: Crossing) -> Served | None:
        """Serve ``crossing`` from the record, let it run live, or raise :class:`tailcut.Divergence`."""
        with self._lock:
            self._asked = crossing
            if self._stopped is not None:
                self._add_slot(crossing, "stopped", None)
                raise Divergence(f"replay stopped at its first divergence: {self._stopped}", self._stopped)
            if self.mode is ReplayMode.LIVE:
                self._add_slot(crossing, "live", None)
                self.live_counts[crossing.kind] += 1
                return None
            crossing = self._compared(crossing)
            lookup = self._cassette.find(
                crossing.boundary, crossing.occurrence, crossing.request, crossing.request_sha256
            )
            if self.mode is ReplayMode.CUT and any(
                spec.matches(crossing.boundary, crossing.occurrence) for spec in self.live_specs
            ):
                return self._run_live(crossing, lookup.match or lookup.fallback)
            if lookup.match is not None:
                return self._serve(crossing, lookup.match)
            return self._diverge(crossing, lookup)

    def on_result(
        self,
        crossing: Crossing,
        *,
        served: bool,
        response_json: str | None,
        response_sha256: str | None,
        error: BaseException | None,
    ) -> None:
        """Note how the crossing ended; a live crossing whose result left its record changes the path."""
        with self._lock:
            slot = self._slot_of.get(id(crossing))
            if slot is None:
                return
            slot.response_sha256 = response_sha256
            slot.error_type = exception_type_name(error) if error is not None else None
            if (
                slot.status == "live"
                and self.mode is ReplayMode.CUT
                and self._changed_by is None
                and not _same_result(slot.envelope, slot.error_type, response_sha256)
            ):
                self._changed_by = f"{crossing.boundary}#{crossing.occurrence}"

    # -- decisions (called with the lock held) ---------------------------------------------------------------
    def _compared(self, crossing: Crossing) -> Crossing:
        """``crossing`` with its request in the form its boundary's third-party records are compared in."""
        comparison = self._comparisons.get(crossing.boundary)
        if comparison is None:
            return crossing
        gaps = comparison.not_compared(crossing.request)
        if gaps:
            self._not_compared.setdefault(crossing.boundary, set()).update(gaps)
        request, sha256 = comparison.live(crossing.request)
        return crossing if sha256 is None else crossing._replace(request=request, request_sha256=sha256)

    def _add_slot(self, crossing: Crossing, status: CrossingStatus, envelope: Envelope | None) -> None:
        crossing = self._asked or crossing  # the slot keeps the request as the boundary sent it
        slot = _Slot(crossing, status, envelope)
        self._slots.append(slot)
        self._slot_of[id(crossing)] = slot

    def _serve(self, crossing: Crossing, envelope: Envelope) -> Served:
        self._cassette.play(envelope)
        covered = self._cassette.cover(envelope)
        if covered:
            run = current_run_state()
            for inner in covered:  # number the rest of the run as the record did
                run.next_crossing(inner.boundary)
        self._add_slot(crossing, "served", envelope)
        self.served_counts[crossing.kind] += 1
        served = envelope.served()
        if envelope.third_party and served.stream_events is None and _streams(self._asked or crossing):
            # other conventions record a stream as the reply it added up to: serve its events
            served = dataclasses.replace(served, stream_events=chat_chunks(served.response))
        return served

    def _run_live(self, crossing: Crossing, envelope: Envelope | None) -> None:
        if envelope is not None:
            self._cassette.play(envelope)
        elif self._changed_by is None:  # a live crossing the record lacks: the path has changed
            self._changed_by = f"{crossing.boundary}#{crossing.occurrence}"
        self._add_slot(crossing, "live", envelope)
        self.live_counts[crossing.kind] += 1

    def _downstream(self) -> str | None:
        return self._changed_by if self.mode is ReplayMode.CUT else None

    def _diverge(self, crossing: Crossing, lookup: Lookup) -> Served | None:
        downstream = self._downstream()
        stop = self.on_divergence == "stop" and downstream is None
        if lookup.fallback is not None:
            record = request_divergence(
                crossing, lookup.fallback, self._policy, downstream_of=downstream, served=not stop
            )
            self._divergences.append(record)
            if not stop:
                return self._serve(crossing, lookup.fallback)
        else:
            record = extra_divergence(
                crossing,
                lookup.closest,
                self._cassette.count(crossing.boundary),
                self._policy,
                downstream_of=downstream,
            )
            self._divergences.append(record)
            if self.mode is ReplayMode.CUT and not stop:
                return self._run_live(crossing, None)
        if stop:
            self._stopped = record
        self._add_slot(crossing, "stopped", None)
        raise Divergence(record.message, record)


def _streams(crossing: Crossing) -> bool:
    """Whether an llm crossing's request asks for a stream (``"stream": true`` in the body)."""
    if crossing.kind != "llm" or crossing.request is None:
        return False
    request = loads(crossing.request)
    return isinstance(request, dict) and request.get("stream") is True


def _comparisons(envelopes: Sequence[Envelope]) -> dict[str, Comparison | ToolArguments]:
    """Boundary -> how its live requests are compared: llm boundaries another convention recorded, and
    tools OpenInference recorded (keyed by the parameters the run's model requests define)."""
    recorded: dict[str, tuple[str, list[str | None]]] = {}
    tools: dict[str, list[str | None]] = {}
    for envelope in envelopes:
        if envelope.third_party and envelope.kind == "llm":
            recorded.setdefault(envelope.boundary, (envelope.convention, []))[1].append(envelope.request)
        elif envelope.convention == OPENINFERENCE and envelope.kind == "tool":
            tools.setdefault(envelope.boundary, []).append(envelope.request)
    found: dict[str, Comparison | ToolArguments] = {
        boundary: Comparison(name, requests) for boundary, (name, requests) in recorded.items()
    }
    if tools:
        parameters = tool_parameters(e.request for e in envelopes if e.kind == "llm")
        for boundary, requests in tools.items():
            found[boundary] = ToolArguments(requests, parameters.get(boundary.partition(":")[2]))
    return found


def _as_compared(envelope: Envelope, comparisons: dict[str, Comparison | ToolArguments]) -> Envelope:
    comparison = comparisons.get(envelope.boundary)
    if comparison is None:
        return envelope
    request, sha256 = comparison.recorded(envelope.request)
    if sha256 is None:
        return envelope
    return dataclasses.replace(envelope, request=request, request_sha256=sha256)


@contextlib.contextmanager
def _rerun_context() -> Iterator[None]:
    """A trace of its own for the block, so crossings outside a ``tailcut.run`` share one rerun's numbering
    (even when the caller's span is current: two sessions under it must not share a count)."""
    context = trace.SpanContext(
        random.getrandbits(128) or 1,
        random.getrandbits(64) or 1,
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),  # a parent-based sampler records children
    )
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(context)))
    try:
        yield
    finally:
        otel_context.detach(token)


def check_live_options(mode: ReplayMode, live: Sequence[LiveSpec | str]) -> tuple[LiveSpec, ...]:
    """The parsed live boundaries, which cut mode needs and the other modes must not have.

    Raises
    ------
    ReplayError
        If they do not fit the mode, or one is not ``kind:name[#occurrence]``.
    """
    specs = parse_live(live)
    if mode is ReplayMode.CUT and not specs:
        raise ReplayError("cut mode needs at least one live boundary, e.g. --live router:refund_guard")
    if mode is not ReplayMode.CUT and specs:
        raise ReplayError(f"live boundaries are for cut mode only; this replay is {mode.value}")
    return specs


def _same_result(recorded: Envelope | None, error_type: str | None, response_sha256: str | None) -> bool:
    """Whether a live crossing ended as its record did: the same error class, or the same response."""
    if recorded is None or recorded.error_type != error_type:
        return False
    return error_type is not None or recorded.response_sha256 == response_sha256


@contextlib.contextmanager
def session(
    corpus: Any,
    trace_id: str | None = None,
    *,
    mode: ReplayMode | str = ReplayMode.RECORDED,
    live: Sequence[LiveSpec | str] = (),
    on_divergence: str | None = None,
    match_on: MatchOn | None = None,
    normalize: Normalize | None = None,
    verify: bool = True,
) -> Iterator[ReplaySession]:
    """Replay one recorded run around the code inside the block.

    Every instrumented boundary crossed in the block (in this thread, asyncio tasks it starts and
    threads it starts) is served from the record, run live, or stopped, by ``mode``. When the block ends,
    recorded crossings never reached become ``missing`` divergences; with ``on_divergence="stop"`` the
    first unexpected divergence is raised as :class:`tailcut.Divergence` when the block ends (if the
    agent swallowed it when it was raised at the boundary).

    Parameters
    ----------
    corpus
        A :class:`~tailcut.replay.Corpus` or the path of one (verified on load unless ``verify=False``).
    trace_id
        The run to replay; may be omitted when the corpus holds one run.
    mode, live, on_divergence, match_on, normalize
        See :class:`ReplaySession`.
    verify
        Check the corpus files against the manifest when loading from a path.

    Yields
    ------
    ReplaySession
        The session: its crossings, divergences, live and served counts, and the rerun's outcome.

    Raises
    ------
    ReplayError
        If the trace is not in the corpus or cannot be replayed, or the options do not fit the mode.
    CorpusError
        If the corpus is refused.

    Examples
    --------
    ::

        from tailcut import replay

        with replay.session("corpus", trace_id, mode="cut", live=["router:refund_guard"]) as s:
            agent(ticket)
        print(s.live_counts, s.first_divergence)
    """
    from tailcut.replay._corpus import Corpus, load_corpus

    loaded = corpus if isinstance(corpus, Corpus) else load_corpus(corpus, verify=verify)
    if trace_id is None:
        if len(loaded.runs) != 1:
            raise ReplayError(f"the corpus at {loaded.path} holds {len(loaded.runs)} runs: name a trace_id")
        trace_id = next(iter(loaded.runs))
    run = loaded.run(trace_id)
    if not run.replayable:
        raise ReplayError(f"trace {run.trace_id} cannot be replayed: {run.not_replayable_reason}")
    replay = ReplaySession(
        loaded.envelopes(run.trace_id),
        trace_id=run.trace_id,
        mode=mode,
        live=live,
        on_divergence=on_divergence,
        match_on=match_on,
        normalize=normalize,
    )
    try:
        with replay.active():
            yield replay
    finally:
        replay.close()
    if replay.on_divergence == "stop":
        unexpected = next((d for d in replay.divergences if not d.expected), None)
        if unexpected is not None:  # e.g. missing, or raised into an agent that swallowed it
            raise Divergence(unexpected.message, unexpected)


def _refusal(envelope: Envelope) -> str | None:
    """The quoted error of a recorded tool call the framework refused before the tool ran (its arguments
    broke the tool's contract, as :mod:`tailcut.exporters.conventions.observations` reads it), else None."""
    from tailcut.exporters.conventions.observations import observe

    seen = observe(envelope.error_message)
    if seen is None or seen.rule.category != "schema_violation" or seen.rule.layer != "tool_schema":
        return None
    return seen.quote
