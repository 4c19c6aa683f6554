"""Decorators for the boundaries an auto-instrumentor cannot see: tools, retrievers, memory, routers,
embeddings and custom model clients; and for the agent and chain spans that give a run its shape.

Each decorator works on plain functions, coroutines, generators and async generators. A generator is one
span that stays open while it is consumed and ends when it is exhausted, closed early or fails; its
response is the list of items it yielded. A boundary's request is its arguments bound to parameter names
(defaults applied, ``self``/``cls`` left out), so ``f("x")`` and ``f(query="x")`` record the same request.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from opentelemetry.trace import SpanKind

from tailcut import attributes as attr
from tailcut._recorder import BoundarySpan, recordable, start_boundary, start_span
from tailcut._run_state import _ATTEMPT
from tailcut.canonical import sha256_hex

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Retry:
    """Retry policy for a decorated boundary: every attempt is its own recorded crossing.

    Parameters
    ----------
    attempts
        Total attempts, the first included (``attempts=3`` makes up to two retries).
    on
        Exception types that trigger a retry; anything else propagates at once.
    backoff
        Seconds to wait before the first retry; each later wait is ``multiplier`` times longer.
    """

    attempts: int = 3
    on: tuple[type[BaseException], ...] = (Exception,)
    backoff: float = 0.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry.attempts must be >= 1, got {self.attempts}")
        if self.backoff < 0:
            raise ValueError(f"Retry.backoff must be >= 0, got {self.backoff}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt``."""
        return self.backoff * self.multiplier ** (attempt - 1)


_SPAN_NAME_PREFIX = {
    "tool": "execute_tool",
    "retriever": "retrieval",
    "embedding": "embeddings",
    "memory": "memory",
    "router": "route",
    "llm": "chat",
    "agent": "invoke_agent",
}


class _BoundarySpec:
    """What a decorated boundary needs on every call, computed once at decoration time."""

    def __init__(
        self,
        fn: Callable[..., Any],
        kind: str,
        name: str,
        *,
        exclude: Iterable[str],
        decode: Callable[[Any], Any] | None,
        attributes: dict[str, Any],
    ) -> None:
        self.kind = kind
        self.name = name
        self.decode = decode
        self.span_name = f"{_SPAN_NAME_PREFIX.get(kind, kind)} {name}"
        self.attributes = attributes
        self.signature = inspect.signature(fn)
        parameters = list(self.signature.parameters.values())
        skip = set(exclude)
        if parameters and parameters[0].name in ("self", "cls"):
            skip.add(parameters[0].name)
        self.skip = frozenset(skip)
        # Fast path for the common signature (named parameters only): zip instead of Signature.bind.
        simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters)
        self._names = tuple(p.name for p in parameters) if simple else None
        self._defaults = {p.name: p.default for p in parameters if p.default is not p.empty}

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        names = self._names
        if names is not None and len(args) <= len(names) and not kwargs.keys() - names:
            arguments = dict(self._defaults)
            arguments.update(zip(names, args, strict=False))
            arguments.update(kwargs)
        else:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:  # the call itself will fail; record what was passed (by name, when it was)
                return dict(kwargs) if not args else {"args": list(args), "kwargs": kwargs}
            bound.apply_defaults()
            arguments = bound.arguments
        if self.skip:
            return {k: v for k, v in arguments.items() if k not in self.skip}
        return arguments

    def start(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundarySpan | None:
        return start_boundary(
            self.kind,
            self.name,
            lambda: self.request(args, kwargs),
            span_name=self.span_name,
            span_kind=SpanKind.CLIENT if self.kind in ("llm", "embedding") else SpanKind.INTERNAL,
            attributes=self.attributes,
        )

    def served(self, boundary: BoundarySpan) -> Any:
        value = boundary.served_value()
        return self.decode(value) if self.decode is not None else value


def _wrap_boundary(fn: Callable[..., Any], spec: _BoundarySpec, retry: Retry | None) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(fn):
        _no_retry_for_streams(retry, fn)
        return _wrap_async_gen(fn, spec)
    if inspect.isgeneratorfunction(fn):
        _no_retry_for_streams(retry, fn)
        return _wrap_gen(fn, spec)
    if inspect.iscoroutinefunction(fn):
        return _with_async_retry(_wrap_async(fn, spec), retry)
    return _with_retry(_wrap_sync(fn, spec), retry)


def _no_retry_for_streams(retry: Retry | None, fn: Callable[..., Any]) -> None:
    if retry is not None:
        raise ValueError(
            f"{fn.__qualname__}: retry= is not supported on generators (a stream cannot be re-read)"
        )


def _wrap_sync(fn: Callable[..., Any], spec: _BoundarySpec) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        boundary = spec.start(args, kwargs)
        if boundary is None:
            return fn(*args, **kwargs)
        with boundary:
            if boundary.consult() is not None:
                return spec.served(boundary)
            with boundary.active():
                result = fn(*args, **kwargs)
            boundary.finish(result)
            return result

    return wrapper


def _wrap_async(fn: Callable[..., Any], spec: _BoundarySpec) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        boundary = spec.start(args, kwargs)
        if boundary is None:
            return await fn(*args, **kwargs)
        with boundary:
            if boundary.consult() is not None:
                return spec.served(boundary)
            with boundary.active():
                result = await fn(*args, **kwargs)
            boundary.finish(result)
            return result

    return wrapper


def _stream_attributes(end: str) -> dict[str, Any]:
    return {attr.STREAM: True, attr.STREAM_END: end}


def _wrap_gen(fn: Callable[..., Any], spec: _BoundarySpec) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        boundary = spec.start(args, kwargs)
        if boundary is None:
            return (yield from fn(*args, **kwargs))
        with boundary:
            if boundary.consult() is not None:
                for item in spec.served(boundary):
                    yield item
                return None
            items: list[Any] = []
            end = "error"
            with boundary.active():
                gen = fn(*args, **kwargs)
            try:
                to_send: Any = None
                to_throw: BaseException | None = None
                while True:
                    with boundary.active():
                        try:
                            item = gen.throw(to_throw) if to_throw is not None else gen.send(to_send)
                        except StopIteration as stop:
                            end = "exhausted"
                            return stop.value
                    items.append(item)
                    to_send, to_throw = None, None
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        end = "closed"
                        gen.close()
                        raise
                    except BaseException as exc:  # thrown in by the consumer: forward it
                        to_throw = exc
            finally:
                boundary.finish(items, attributes=_stream_attributes(end))

    return wrapper


def _wrap_async_gen(fn: Callable[..., Any], spec: _BoundarySpec) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        boundary = spec.start(args, kwargs)
        if boundary is None:
            async for item in fn(*args, **kwargs):
                yield item
            return
        with boundary:
            if boundary.consult() is not None:
                for item in spec.served(boundary):
                    yield item
                return
            items: list[Any] = []
            end = "error"
            with boundary.active():
                agen = fn(*args, **kwargs)
            try:
                to_send: Any = None
                to_throw: BaseException | None = None
                while True:
                    with boundary.active():
                        try:
                            if to_throw is not None:
                                item = await agen.athrow(to_throw)
                            else:
                                item = await agen.asend(to_send)
                        except StopAsyncIteration:
                            end = "exhausted"
                            return
                    items.append(item)
                    to_send, to_throw = None, None
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        end = "closed"
                        await agen.aclose()
                        raise
                    except BaseException as exc:
                        to_throw = exc
            finally:
                boundary.finish(items, attributes=_stream_attributes(end))

    return wrapper


def _with_retry(call: Callable[..., Any], retry: Retry | None) -> Callable[..., Any]:
    if retry is None:
        return call

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, retry.attempts + 1):
            token = _ATTEMPT.set(attempt)
            try:
                return call(*args, **kwargs)
            except retry.on:
                if attempt == retry.attempts:
                    raise
            finally:
                _ATTEMPT.reset(token)
            time.sleep(retry.delay(attempt))
        raise AssertionError("unreachable")

    return wrapper


def _with_async_retry(call: Callable[..., Any], retry: Retry | None) -> Callable[..., Any]:
    if retry is None:
        return call

    @functools.wraps(call)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, retry.attempts + 1):
            token = _ATTEMPT.set(attempt)
            try:
                return await call(*args, **kwargs)
            except retry.on:
                if attempt == retry.attempts:
                    raise
            finally:
                _ATTEMPT.reset(token)
            import asyncio  # only async retries need it; keeps `import tailcut` light

            await asyncio.sleep(retry.delay(attempt))
        raise AssertionError("unreachable")

    return wrapper


def _make_boundary_decorator(kind: str) -> Callable[..., Any]:
    def decorator_factory(
        name: str | Callable[..., Any] | None = None,
        *,
        retry: Retry | None = None,
        decode: Callable[[Any], Any] | None = None,
        exclude: Iterable[str] = (),
        schema: dict[str, Any] | None = None,
        description: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> Any:
        if callable(name):  # used bare: @tailcut.tool
            return decorator_factory()(name)

        def decorate(fn: F) -> F:
            boundary_label = name or fn.__name__
            extra: dict[str, Any] = dict(attributes or {})
            if kind == "tool":
                extra[attr.GEN_AI_TOOL_NAME] = boundary_label
                if description:
                    extra[attr.GEN_AI_TOOL_DESCRIPTION] = description
                if schema is not None:
                    schema_json = recordable(schema)[1].decode("utf-8")  # an int-keyed one is tagged
                    extra[attr.TOOL_SCHEMA] = schema_json
                    extra[attr.TOOL_SCHEMA_SHA256] = sha256_hex(schema_json)
            elif kind == "retriever":
                extra[attr.GEN_AI_DATA_SOURCE_ID] = boundary_label
            spec = _BoundarySpec(fn, kind, boundary_label, exclude=exclude, decode=decode, attributes=extra)
            wrapped = _wrap_boundary(fn, spec, retry)
            wrapped.__tailcut_boundary__ = f"{kind}:{boundary_label}"  # type: ignore[attr-defined]
            return wrapped  # type: ignore[return-value]

        return decorate

    decorator_factory.__name__ = kind
    decorator_factory.__doc__ = f"""Record each call of the decorated function as a ``{kind}`` boundary span.

    Parameters
    ----------
    name
        The boundary's stable name (default: the function's name); the boundary is ``{kind}:<name>``.
    retry
        A :class:`Retry` policy; every attempt is recorded as its own crossing with ``tailcut.attempt``.
    decode
        Turns a recorded (JSON) response back into the function's return type when a replay serves it.
    exclude
        Parameter names left out of the recorded request (client handles, callbacks).
    schema
        The tool's JSON Schema, hashed into ``tailcut.tool.schema.sha256`` to detect schema drift.
    description
        The tool's description (``gen_ai.tool.description``).
    attributes
        Extra span attributes set on every call.
    """
    return decorator_factory


tool = _make_boundary_decorator("tool")
retriever = _make_boundary_decorator("retriever")
embedding = _make_boundary_decorator("embedding")
memory = _make_boundary_decorator("memory")
router = _make_boundary_decorator("router")
llm = _make_boundary_decorator("llm")


@overload
def agent(name: Callable[..., Any]) -> Callable[..., Any]: ...
@overload
def agent(name: str | None = None, *, kind: str = "agent") -> Callable[[F], F]: ...
def agent(name: str | Callable[..., Any] | None = None, *, kind: str = "agent") -> Any:
    """Record each call of the decorated function as an ``agent`` span (``invoke_agent <name>``).

    Agent and chain spans are not boundaries: they record no payload, only the shape of the run, so a
    nested agent's boundaries hang under it in the span tree.
    """
    if callable(name):
        return agent(kind=kind)(name)

    def decorate(fn: F) -> F:
        label = name or fn.__name__
        span_name = f"{_SPAN_NAME_PREFIX.get(kind, kind)} {label}" if kind == "agent" else label
        extra = {attr.GEN_AI_AGENT_NAME: label} if kind == "agent" else {}

        def begin() -> Any:
            return start_span(kind, label, span_name=span_name, attributes=extra)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                span = begin()
                if span is None:
                    return await fn(*args, **kwargs)
                with span, span.active():
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            span = begin()
            if span is None:
                return fn(*args, **kwargs)
            with span, span.active():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def chain(name: str | Callable[..., Any] | None = None) -> Any:
    """Record each call of the decorated function as a ``chain`` span (a named step of the workflow)."""
    return agent(name, kind="chain")
