"""What the agent-framework instrumentors share: a framework's run as a ``tailcut.run``, its tools as
``tool`` boundaries recorded and served exactly like ``@tailcut.tool``.

A framework calls its tools and runs through its own machinery; each instrumentor patches the one
method where that machinery reaches the user's function (or starts a run) and hands the call to
:func:`tool_call` / :func:`run_call` (or their async twins). The model calls underneath are the
``openai``/``anthropic`` boundaries, recorded by those instrumentors, children of the run span.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from tailcut import _config
from tailcut import attributes as attr
from tailcut._decorators import _BoundarySpec
from tailcut._run import Run
from tailcut._run_state import _TOOL_CALL_ID
from tailcut.interceptor import active_interceptor

T = TypeVar("T")

#: The framework whose run wrapper is running in this context (its nested runs are not runs again).
_IN_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("tailcut_framework_run", default=None)
#: Attribute on a root span: which framework ran the run.
FRAMEWORK_ATTRIBUTE = "tailcut.framework"


def recording() -> bool:
    """Whether a crossing now would be recorded or served (tailcut on, or a replay active)."""
    return _config.current().enabled or active_interceptor() is not None


def is_tailcut_boundary(fn: Any) -> bool:
    """Whether ``fn`` is already a tailcut boundary (``@tailcut.tool``): the framework's wrapper then
    leaves it to record itself, so no crossing is recorded twice."""
    return getattr(fn, "__tailcut_boundary__", None) is not None or hasattr(
        getattr(fn, "__func__", None), "__tailcut_boundary__"
    )


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: pydantic models dumped, tuples as lists, other objects as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(mode="json", exclude_none=True))
        except Exception:  # a model that cannot dump itself is recorded as its text
            pass
    return str(value)


class _NamedArgumentsSpec(_BoundarySpec):
    """A tool known only by its arguments as a mapping (the framework parsed the model's JSON): the
    request is that mapping."""

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return kwargs


def _arguments(**arguments: Any) -> None:
    """The signature of a tool that takes its arguments by name."""


@functools.lru_cache(maxsize=1024)
def _spec(fn: Callable[..., Any] | None, name: str, exclude: frozenset[str]) -> _BoundarySpec:
    kind = _BoundarySpec if fn is not None else _NamedArgumentsSpec
    return kind(
        fn or _arguments, "tool", name, exclude=exclude, decode=None, attributes={attr.GEN_AI_TOOL_NAME: name}
    )


class ToolCrossing:
    """One call of a framework tool: its request is ``args``/``kwargs`` bound to ``signature_of``'s
    parameters (as ``@tailcut.tool`` binds them; without one, ``kwargs`` as they are), its result what
    ``call`` returns."""

    def __init__(
        self,
        name: str,
        signature_of: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        exclude: frozenset[str] = frozenset(),
        call_id: str | None = None,
    ) -> None:
        self.spec = _spec(signature_of, name, exclude)
        self.args, self.kwargs, self.call_id = args, kwargs, call_id

    def _begin(self) -> Any:
        token = _TOOL_CALL_ID.set(self.call_id) if self.call_id else None
        try:
            return self.spec.start(self.args, self.kwargs)
        finally:
            if token is not None:
                _TOOL_CALL_ID.reset(token)

    def run(self, call: Callable[[], T]) -> T:
        """Record (or serve) the crossing around ``call``, the framework's own call of the tool."""
        boundary = self._begin()
        if boundary is None:
            return call()
        with boundary:
            if boundary.consult() is not None:
                return self.spec.served(boundary)
            with boundary.active():
                result = call()
            boundary.finish(result)
            return result

    async def run_async(self, call: Callable[[], Awaitable[T]]) -> T:
        """The asynchronous twin of :meth:`run`."""
        boundary = self._begin()
        if boundary is None:
            return await call()
        with boundary:
            if boundary.consult() is not None:
                return self.spec.served(boundary)
            with boundary.active():
                result = await call()
            boundary.finish(result)
            return result


def opens_run(framework: str) -> bool:
    """Whether a run of ``framework`` starting now is a run (not one inside a run of the same framework)."""
    return _IN_RUN.get() != framework and recording()


def enter_run(framework: str, name: str, run_input: Any) -> Run:
    """Enter a run of ``framework`` in the current context, for a framework whose run outlives the call
    that starts it: the caller exits the returned run later, in the same context."""
    _IN_RUN.set(framework)
    return Run(name, input=jsonable(run_input), attributes={FRAMEWORK_ATTRIBUTE: framework}).__enter__()


def _same(value: Any) -> Any:
    return value


def run_call(
    framework: str,
    name: str,
    run_input: Any,
    call: Callable[[], T],
    output: Callable[[T], Any] = _same,
) -> T:
    """Run ``call`` (the framework's run of ``run_input``) as a ``tailcut.run`` with its input and output.

    ``output`` picks the run's output from what ``call`` returns (the final answer, not the framework's
    whole result object). Inside another run it is that run's nested agent; inside a run of the same
    framework (a run method that calls another, a subgraph) it is nothing more.
    """
    if not opens_run(framework):
        return call()
    token = _IN_RUN.set(framework)
    try:
        with Run(name, input=jsonable(run_input), attributes={FRAMEWORK_ATTRIBUTE: framework}) as run:
            result = call()
            run.set_output(jsonable(output(result)))
            return result
    finally:
        _IN_RUN.reset(token)


async def run_call_async(
    framework: str,
    name: str,
    run_input: Any,
    call: Callable[[], Awaitable[T]],
    output: Callable[[T], Any] = _same,
) -> T:
    """The asynchronous twin of :func:`run_call`."""
    if not opens_run(framework):
        return await call()
    token = _IN_RUN.set(framework)
    try:
        async with Run(name, input=jsonable(run_input), attributes={FRAMEWORK_ATTRIBUTE: framework}) as run:
            result = await call()
            run.set_output(jsonable(output(result)))
            return result
    finally:
        _IN_RUN.reset(token)
