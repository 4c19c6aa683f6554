"""Recording one LLM API call, shared by the ``openai`` and ``anthropic`` instrumentors.

A patched resource method (``Completions.create``, ``Messages.stream``, ...) runs the SDK's original
method on a copy of the resource whose ``_post`` records. So the SDK builds the request exactly as it
always does (validation, defaults, its own stream helpers), and tailcut sees the finished body at the
one point every call goes through, right before it is sent:

1. the request (body as sent, ``extra_body`` merged) starts an ``llm`` boundary span;
2. the replay interceptor, if any, is consulted before anything goes out;
3. the call runs live, or is served from the record by the SDK itself (see ``_serve``);
4. the response (or the stream, as it is read; or the error) is recorded with the GenAI attributes,
   token usage and tool-call schema violations.

What differs between provider APIs is an :class:`LLMApi`. Nothing here raises into the agent on
tailcut's account: a response tailcut cannot record is logged once, counted, and returned unchanged.
"""

from __future__ import annotations

import abc
import copy
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple

from opentelemetry.trace import SpanKind

from tailcut import _config
from tailcut import attributes as attr
from tailcut._recorder import BoundarySpan, start_boundary
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.instrumentation._patching import Patch
from tailcut.instrumentation._schemas import count_violations
from tailcut.instrumentation._serve import SseFraming, serve, serve_async
from tailcut.instrumentation._streams import StreamEnd, StreamRecorder
from tailcut.instrumentation._wire import freeze_iterators, response_body, sent_request, status_error_record
from tailcut.interceptor import Served, active_interceptor

#: Counted in ``tailcut.stats()`` when a call's response could not be recorded (the call is unaffected).
FAILURE_COUNTER = "llm_recording_failed"


class SdkTypes(NamedTuple):
    """The SDK classes the recording needs to recognise."""

    sentinels: tuple[type, ...]  # "not given" markers, never sent
    streams: tuple[type, ...]  # what a streaming call returns


class LLMApi(abc.ABC):
    """One provider API (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages).

    Every method reads decoded JSON (the request as sent, the provider's response body) and must
    tolerate missing or odd fields: a served record or an early-closed stream may lack some.
    """

    #: ``gen_ai.provider.name``.
    provider: ClassVar[str]
    #: The boundary's name: the span's ``tailcut.boundary`` is ``llm:<name>``.
    name: ClassVar[str]
    #: Request body field -> ``gen_ai.request.*`` attribute it is recorded as.
    request_fields: ClassVar[Mapping[str, str]]
    #: How the provider frames stream events (used to serve a recorded stream).
    framing: ClassVar[SseFraming]

    @abc.abstractmethod
    def sdk(self) -> SdkTypes:
        """The SDK's classes (imported on first use)."""

    @abc.abstractmethod
    def response_attributes(self, response: Any) -> dict[str, Any]:
        """``gen_ai.response.*`` and ``gen_ai.usage.*`` attributes of a response body."""

    @abc.abstractmethod
    def tool_schemas(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Tool name -> JSON Schema of its arguments, for the tools the request defines."""

    @abc.abstractmethod
    def tool_calls(self, response: Any) -> list[tuple[str, Any]]:
        """``(tool name, arguments)`` of every tool call in a response body."""

    @abc.abstractmethod
    def reassemble(self, events: list[Any]) -> dict[str, Any]:
        """The response body a non-streaming call would have returned, rebuilt from stream events."""

    def request_attributes(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """``gen_ai.request.*`` attributes of the request as sent."""
        attributes: dict[str, Any] = {}
        for key, name in self.request_fields.items():
            value = attribute_value(request.get(key))
            if value is None:
                continue
            if name == attr.GEN_AI_REQUEST_STOP_SEQUENCES and isinstance(value, str):
                value = [value]
            attributes.setdefault(name, value)
        return attributes


def attribute_value(value: Any) -> Any:
    """``value`` if a span attribute can hold it (a primitive or a list of strings), else None."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    return None


def compact(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` without the values a span attribute cannot hold (None, objects, empty lists)."""
    return {name: value for name, value in attributes.items() if attribute_value(value) is not None}


def listed(value: Any) -> Iterable[Any]:
    """``value`` if it is a list, else nothing (a missing or malformed field)."""
    return value if isinstance(value, list) else ()


def field(value: Any, *path: str | int) -> Any:
    """``value[path[0]][path[1]]...``, or None where the path does not exist."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                return None
        elif not isinstance(value, Mapping):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
    return value


def recording_patch(owner: type, name: str, api: LLMApi) -> Patch:
    """The patch of one resource method (``owner.name``) that records its calls as ``api``."""
    return Patch(owner, name, lambda original: _recording_method(original, api))


def _recording_method(original: Callable[..., Any], api: LLMApi) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def async_method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await original(_recording_view(self, api), *args, **kwargs)

        return async_method

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(_recording_view(self, api), *args, **kwargs)

    return method


def _recording_view(resource: Any, api: LLMApi) -> Any:
    """``resource`` itself when nothing records, else a copy whose ``_post`` records the call."""
    if not _config.current().enabled and active_interceptor() is None:
        return resource
    view = copy.copy(resource)
    post, client = resource._post, resource._client
    if inspect.iscoroutinefunction(post):
        view._post = _async_recording_post(post, client, api)
    else:
        view._post = _recording_post(post, client, api)
    return view


def _recording_post(post: Callable[..., Any], client: Any, api: LLMApi) -> Callable[..., Any]:
    def recording_post(path: str, **call: Any) -> Any:
        llm_call = LLMCall.start(api, call)
        if llm_call is None:
            return post(path, **call)
        served = llm_call.consult()
        try:
            with llm_call.boundary.active():
                if served is None:
                    result = post(path, **call)
                else:
                    result = serve(client, served, api.framing, path, call)
        except BaseException as exc:
            llm_call.failed(exc)
            raise
        return llm_call.completed(result)

    return recording_post


def _async_recording_post(post: Callable[..., Any], client: Any, api: LLMApi) -> Callable[..., Any]:
    async def recording_post(path: str, **call: Any) -> Any:
        llm_call = LLMCall.start(api, call)
        if llm_call is None:
            return await post(path, **call)
        served = llm_call.consult()
        try:
            with llm_call.boundary.active():
                if served is None:
                    result = await post(path, **call)
                else:
                    result = await serve_async(client, served, api.framing, path, call)
        except BaseException as exc:
            llm_call.failed(exc)
            raise
        return llm_call.completed(result)

    return recording_post


class LLMCall:
    """One call being recorded: its boundary span, the request as sent, and what a replay served."""

    __slots__ = ("api", "boundary", "request", "served")

    def __init__(self, api: LLMApi, boundary: BoundarySpan, request: dict[str, Any]) -> None:
        self.api = api
        self.boundary = boundary
        self.request = request
        self.served: Served | None = None

    @classmethod
    def start(cls, api: LLMApi, call: dict[str, Any]) -> LLMCall | None:
        """Start the span of the ``post`` about to be made with keyword arguments ``call``.

        One-shot iterators in the body are read into lists (in ``call``, so the SDK sends them too).
        None when nothing records, or when the request cannot be read (logged, the call goes on).
        """
        try:
            body = call["body"] = freeze_iterators(call.get("body"))
            request = sent_request(body, call.get("options") or {}, api.sdk().sentinels)
            attributes = {attr.GEN_AI_PROVIDER_NAME: api.provider, **api.request_attributes(request)}
            tools = request.get("tools")
            if tools:
                attributes[attr.TOOLS_SHA256] = sha256_hex(canonical_json(tools))
        except Exception as exc:
            recording_failed(api, "request", exc)
            return None
        model = request.get("model")
        boundary = start_boundary(
            "llm",
            api.name,
            lambda: request,
            span_name=f"chat {model}" if isinstance(model, str) and model else "chat",
            span_kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return None if boundary is None else cls(api, boundary, request)

    def consult(self) -> Served | None:
        """Ask the replay interceptor; a divergence it raises ends the span and reaches the agent."""
        try:
            self.served = self.boundary.consult()
        except BaseException:
            self.boundary.end()
            raise
        return self.served

    def completed(self, result: Any) -> Any:
        """Record what the call returned and hand it back unchanged; a stream is recorded as it is read."""
        try:
            if isinstance(result, self.api.sdk().streams):
                StreamRecorder(self).attach(result)
                return result
            served = self.served
            if served is not None:
                self.boundary.finish(served.response, canonical=served.response_json)
                self._record_outcome(served.response)
            else:
                response = response_body(result)
                self.boundary.finish(response)
                self._record_outcome(response)
        except Exception as exc:
            recording_failed(self.api, "response", exc)
        self.boundary.end()
        return result

    def failed(self, exc: BaseException) -> None:
        """Record the call's failure; an HTTP error's status, body and retry headers become its response."""
        served = self.served
        try:
            if served is not None and served.response is not None:
                self.boundary.finish(served.response, canonical=served.response_json, tell_result=False)
            else:
                record = status_error_record(exc)
                if record is not None:
                    self.boundary.finish(record, tell_result=False)
        except Exception as failure:
            recording_failed(self.api, "error response", failure)
        self.boundary.fail(exc, error_type=served.error_type if served is not None else None)
        self.boundary.end()

    def stream_ended(self, end: StreamEnd, events: list[Any], error: BaseException | None) -> None:
        """Record a stream that ended: its events, the reply they make up, how it ended; end the span."""
        served = self.served
        try:
            if served is not None:
                events = served.stream_events or []
                response, canonical = served.response, served.response_json
            else:
                response, canonical = self.api.reassemble(events), None
            self.boundary.finish(events, field="events")
            self.boundary.finish(
                response,
                canonical=canonical,
                attributes={attr.STREAM: True, attr.STREAM_END: end},
                tell_result=error is None,
            )
            self._record_outcome(response)
        except Exception as exc:
            recording_failed(self.api, "stream", exc)
        if error is not None:
            self.boundary.fail(error)
        self.boundary.end()

    def _record_outcome(self, response: Any) -> None:
        attributes = self.api.response_attributes(response)
        input_tokens = attributes.pop(attr.GEN_AI_USAGE_INPUT_TOKENS, None)
        output_tokens = attributes.pop(attr.GEN_AI_USAGE_OUTPUT_TOKENS, None)
        self.boundary.set_attributes(attributes)
        if input_tokens is not None or output_tokens is not None:
            self.boundary.set_llm_usage(input_tokens, output_tokens)
        schemas = self.api.tool_schemas(self.request)
        if schemas:
            self.boundary.set_schema_violations(count_violations(schemas, self.api.tool_calls(response)))


def recording_failed(api: LLMApi, what: str, exc: BaseException) -> None:
    """Log (once per API and step) and count a failure of tailcut's own; the agent is not affected."""
    _config.counters.add(FAILURE_COUNTER)
    _config.counters.warn_once(
        f"llm:{api.name}:{what}",
        "tailcut: could not record the %s of an llm:%s call: %s: %s",
        what,
        api.name,
        type(exc).__name__,
        exc,
    )
