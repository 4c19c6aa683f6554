"""``tailcut.run``: the root span of one agent run, and what a replay needs to start it again.

The root records the run's input, harness and environment revisions, prompt versions, initial state and
outcome, and, when it ends, the trace signals this process computed (``tailcut.trace.*``), which the
standard ``numeric_attribute`` policy of any OpenTelemetry Collector can sample on. A value that cannot
be recorded is noted on the root (``tailcut.payload.error``) and a failure of the recording itself is
counted and logged once: the run's code inside the block runs the same either way.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import subprocess
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from tailcut import _config
from tailcut import attributes as attr
from tailcut._guard import internal_error, never_raises
from tailcut._recorder import RecordedSpan, encode_payload, payload_unrecorded, recordable, start_span
from tailcut._run_state import _ATTEMPT, _DEPTH, _RUN, _TOOL_CALL_ID, RunState
from tailcut.environment import TAILCUT_ENV_REVISION, TAILCUT_HARNESS_REVISION, get_str
from tailcut.errors import CanonicalEncodingError
from tailcut.interceptor import exception_type_name

_logger = logging.getLogger("tailcut")

Outcome = Literal["pass", "fail", "unknown"]


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The git commit of the working tree the agent runs in (``-dirty`` when it has local changes)."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = done.stdout.strip()
    return revision if done.returncode == 0 and revision else None


def resolve_harness_revision(explicit: str | None) -> str | None:
    """Argument, then ``tailcut.init(harness_revision=)``, then the env var, then the git commit."""
    return (
        explicit or _config.current().harness_revision or get_str(TAILCUT_HARNESS_REVISION) or git_revision()
    )


def _json_attribute(value: Any) -> str:
    """A run-level value as the JSON text recorded on the root (strings stay as they are)."""
    return value if isinstance(value, str) else recordable(value)[1].decode("utf-8")


class Run:
    """One agent run, recorded as the root span of a trace: ``with tailcut.run(...) as run``.

    A context manager, sync (``with``) or async (``async with``).

    Parameters
    ----------
    name
        The run's name (the root span's name), e.g. the agent's name.
    input
        What the run was asked to do; a replay calls the agent with it again (``tailcut.run.input``).
    prompt_version
        The prompt version(s) in use: a string, or a mapping of prompt name to version.
    harness_revision
        The harness revision; default ``tailcut.init(harness_revision=)``, then
        ``TAILCUT_HARNESS_REVISION``, then the git commit of the working tree.
    env_revision
        The revision of the environment the tools act on (``TAILCUT_ENV_REVISION``).
    initial_state
        A reference to, or hash of, what the tools read at start (so a replay can restore it).
    agent_name
        ``gen_ai.agent.name`` of the root (default: ``name``).
    attributes
        Extra attributes for the root span.

    Examples
    --------
    The run is the root of the trace; each ``@tailcut.tool`` call inside it is a child span
    (:func:`tailcut.testing.capture_spans` stands in for :func:`tailcut.init` here):

    >>> import tailcut
    >>> from tailcut.testing import capture_spans
    >>> @tailcut.tool
    ... def lookup(ticket: int) -> dict:
    ...     return {"ticket": ticket, "status": "refunded"}
    >>> with capture_spans() as spans:
    ...     with tailcut.run("support-agent", input={"ticket": 42}, prompt_version="v7") as run:
    ...         answer = lookup(42)
    ...         run.set_output(answer)
    ...         run.set_outcome("pass", score=0.92)
    >>> root = spans.root()
    >>> root.name, root.attributes["tailcut.run.input"], root.attributes["tailcut.outcome"]
    ('support-agent', '{"ticket":42}', 'pass')
    >>> root.attributes["tailcut.outcome.score"], root.attributes["tailcut.trace.tool_calls"]
    (0.92, 1)
    >>> [span.parent.span_id == root.context.span_id for span in spans.by_kind("tool")]
    [True]
    """

    def __init__(
        self,
        name: str,
        *,
        input: Any = None,
        prompt_version: str | Mapping[str, str] | None = None,
        harness_revision: str | None = None,
        env_revision: str | None = None,
        initial_state: Any = None,
        agent_name: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self._input = input
        self._prompt_version = prompt_version
        self._harness_revision = harness_revision
        self._env_revision = env_revision
        self._initial_state = initial_state
        self._agent_name = agent_name or name
        self._attributes = dict(attributes or {})
        self.outcome: str | None = None
        self.outcome_score: float | None = None
        self._payload_errors: list[str] = []
        self.state = RunState(self._json_or_note("prompt_version", prompt_version))
        self._span: trace.Span | None = None
        self._nested: RecordedSpan | None = None
        self._nested_active: contextlib.AbstractContextManager[Any] | None = None
        self._tokens: list[tuple[str, Any]] = []

    # -- the public surface ------------------------------------------------------------------------------
    @property
    def trace_id(self) -> str | None:
        """The run's trace id as 32 hex characters (None when tailcut is off)."""
        span = self._span or (self._nested.span if self._nested else None)
        if span is None:
            return None
        ctx = span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else None

    def set_outcome(self, outcome: Outcome, score: float | None = None) -> None:
        """Record how the run went: ``pass``, ``fail`` or ``unknown``, and an optional score."""
        if outcome not in attr.OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(attr.OUTCOMES)}; got {outcome!r}")
        self.outcome = outcome
        self.outcome_score = None if score is None else float(score)
        span = self._root_span()
        if span is not None:
            span.set_attribute(attr.OUTCOME, outcome)
            if score is not None:
                span.set_attribute(attr.OUTCOME_SCORE, float(score))

    def set_output(self, value: Any) -> None:
        """Record the run's final answer (``tailcut.run.output``)."""
        self._set_payload("output", value)

    def set_attribute(self, key: str, value: Any) -> None:
        span = self._root_span()
        if span is not None:
            span.set_attribute(key, value)

    def retry(
        self,
        attempts: int = 3,
        *,
        on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        backoff: float = 0.0,
    ) -> Iterator[Attempt]:
        """Retry a block, recording each boundary crossed inside it with its attempt number.

        Examples
        --------
        ::

            for attempt in run.retry(3, on=TimeoutError):
                with attempt:
                    result = search_kb("refund policy")
        """
        return retry(attempts, on=on, backoff=backoff)

    # -- entering and leaving ------------------------------------------------------------------------------
    def _root_span(self) -> trace.Span | None:
        return self._span or (self._nested.span if self._nested else None)

    def _json_or_note(self, field: str, value: Any) -> str | None:
        """``value`` as the JSON text of a root attribute; None (and a noted error) if it has none."""
        if value is None:
            return None
        try:
            return _json_attribute(value)
        except CanonicalEncodingError as exc:
            self._payload_errors.append(payload_unrecorded(f"run {self.name!r}", field, exc))
            return None

    @never_raises("recording a run's payload")
    def _set_payload(self, field: Literal["input", "output", "initial_state"], value: Any) -> None:
        span = self._root_span()
        if span is None:
            return
        try:
            encoded = encode_payload(_config.current(), "root", field, value)
        except CanonicalEncodingError as exc:
            span.set_attribute(attr.PAYLOAD_ERROR, payload_unrecorded(f"run {self.name!r}", field, exc))
            return
        span.set_attributes(encoded.attributes)

    def _start_attributes(self) -> dict[str, Any]:
        config = _config.current()
        attributes: dict[str, Any] = {
            attr.KIND: "root",
            attr.GEN_AI_OPERATION_NAME: attr.OPERATION_FOR_KIND["root"],
            attr.GEN_AI_AGENT_NAME: self._agent_name,
        }
        harness = resolve_harness_revision(self._harness_revision)
        if harness:
            attributes[attr.HARNESS_REVISION] = harness
        env = self._env_revision or config.env_revision or get_str(TAILCUT_ENV_REVISION)
        if env:
            attributes[attr.ENV_REVISION] = env
        if self.state.prompt_version is not None:
            attributes[attr.PROMPT_VERSION] = self.state.prompt_version
        if isinstance(self._initial_state, str):  # a reference, recorded as it is
            attributes[attr.INITIAL_STATE] = self._initial_state
        if self._payload_errors:
            attributes[attr.PAYLOAD_ERROR] = "; ".join(self._payload_errors)
        attributes.update(self._attributes)
        return attributes

    def __enter__(self) -> Run:
        config = _config.current()
        if not config.enabled:
            return self
        try:
            self._begin(config)
        except Exception as exc:  # the run goes on unrecorded
            internal_error("tailcut.run", exc)
        return self

    def _begin(self, config: _config.Config) -> None:
        if _RUN.get() is not None:
            # A run inside a run is a nested agent of the outer run: same trace, same counters.
            self._nested = start_span(
                "agent",
                self._agent_name,
                span_name=f"invoke_agent {self._agent_name}",
                attributes={attr.GEN_AI_AGENT_NAME: self._agent_name},
            )
            if self._nested is not None:
                self._nested_active = self._nested.active()
                self._nested_active.__enter__()
            return
        # Everything that can fail comes before the context is changed, so a failure changes nothing.
        self._span = config.tracer.start_span(self.name, attributes=self._start_attributes())
        self._tokens = [
            ("otel", otel_context.attach(trace.set_span_in_context(self._span))),
            ("run", _RUN.set(self.state)),
            ("depth", _DEPTH.set(0)),
        ]
        if self._input is not None:
            self._set_payload("input", self._input)
        if self._initial_state is not None and not isinstance(self._initial_state, str):
            self._set_payload("initial_state", self._initial_state)  # redacted like any payload

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._nested is not None:
            if self._nested_active is not None:
                self._nested_active.__exit__(exc_type, exc, tb)
            self._nested.__exit__(exc_type, exc, tb)
            return
        span = self._span
        if span is None:
            return
        for kind, token in reversed(self._tokens):
            if kind == "otel":
                otel_context.detach(token)  # logs its own failures
                continue
            try:
                (_RUN if kind == "run" else _DEPTH).reset(token)
            except (ValueError, RuntimeError) as error:  # left in another context than it was entered in
                internal_error("leaving tailcut.run", error)
        self._tokens.clear()
        self._end_root(span, exc)

    @never_raises("ending tailcut.run")
    def _end_root(self, span: trace.Span, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, GeneratorExit | KeyboardInterrupt):
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.set_attribute(attr.ERROR_TYPE, exception_type_name(exc))
            self.state.signals.errors += 1
        span.set_attributes(self.state.signals.as_attributes())
        span.end()

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)


#: ``tailcut.run(name, ...)``: the root span of one run (the class itself; see :class:`Run`).
run = Run


class Attempt:
    """One attempt of a :func:`retry` loop; use it as a context manager around the attempt's work."""

    def __init__(self, number: int, loop: _RetryLoop) -> None:
        self.number = number
        self._loop = loop
        self._token: Any = None

    def __enter__(self) -> Attempt:
        self._token = _ATTEMPT.set(self.number)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        _ATTEMPT.reset(self._token)
        if exc is None:
            self._loop.done = True
            return False
        if isinstance(exc, self._loop.on) and self.number < self._loop.attempts:
            self._loop.last_error = exc
            return True  # swallow: the loop makes the next attempt
        return False

    async def __aenter__(self) -> Attempt:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


class _RetryLoop:
    def __init__(self, attempts: int, on: tuple[type[BaseException], ...], backoff: float) -> None:
        self.attempts, self.on, self.backoff = attempts, on, backoff
        self.done = False
        self.last_error: BaseException | None = None


def retry(
    attempts: int = 3,
    *,
    on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    backoff: float = 0.0,
) -> Iterator[Attempt]:
    """Retry a block up to ``attempts`` times; boundaries inside record ``tailcut.attempt``.

    A failure of a type in ``on`` before the last attempt is swallowed and the next attempt starts
    (after ``backoff`` seconds, doubling); the last attempt's failure propagates.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    loop = _RetryLoop(attempts, on if isinstance(on, tuple) else (on,), backoff)
    for number in range(1, attempts + 1):
        yield Attempt(number, loop)
        if loop.done:
            return
        if backoff:
            time.sleep(backoff * 2 ** (number - 1))


@contextlib.contextmanager
def tool_call_id(call_id: str) -> Iterator[None]:
    """Attach the model's tool-call id to the tool crossing made inside the block.

    Examples
    --------
    ::

        for call in message.tool_calls:
            with tailcut.tool_call_id(call.id):
                TOOLS[call.function.name](**json.loads(call.function.arguments))
    """
    token = _TOOL_CALL_ID.set(call_id)
    try:
        yield
    finally:
        _TOOL_CALL_ID.reset(token)
