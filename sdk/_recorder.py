"""The engine every instrumented boundary runs through.

A crossing is recorded in four steps, shared by the decorators, the context managers and the
``openai``/``anthropic`` instrumentors:

1. :func:`start_boundary` numbers the crossing (boundary, occurrence, seq), encodes the request as
   canonical JSON (redacted, hashed, offloaded when large), starts the span and asks the active
   :class:`~tailcut.interceptor.BoundaryInterceptor` whether to run live or serve a recorded outcome;
2. the caller runs the real call (or takes :attr:`BoundarySpan.served`) inside :meth:`BoundarySpan.active`;
3. :meth:`BoundarySpan.finish` (or :meth:`~BoundarySpan.fail`) records the response or the error;
4. :meth:`BoundarySpan.end` ends the span and folds it into the run's signals.

Nothing here raises into the agent on tailcut's account: a payload that cannot be encoded (or whose
``redact`` hook raised) is recorded as such on the span, logged once and counted; any other failure of
a recording step is caught by :mod:`tailcut._guard` (the step records nothing more); the agent's own
exceptions pass through unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tailcut import _config
from tailcut import attributes as attr
from tailcut._guard import hook_error, internal_error, never_raises
from tailcut._pieces import PieceLedger, recorded_pieces
from tailcut._run_state import _ATTEMPT, _DEPTH, _TOOL_CALL_ID, RunState, current_run_state
from tailcut.canonical import (
    NonStringKeyError,
    canonical_bytes,
    canonical_json,
    loads,
    sha256_hex,
    tagged_keys,
)
from tailcut.errors import CanonicalEncodingError, Divergence, RedactHookError
from tailcut.interceptor import Crossing, Served, active_interceptor, exception_type_name
from tailcut.payloads import PayloadStoreError, make_stub
from tailcut.redaction import redact_keys, redact_text

_logger = logging.getLogger("tailcut")

#: Attribute names of the two payload fields of a boundary span.
_FIELD_ATTRS = {
    "request": (attr.REQUEST, attr.REQUEST_SHA256, attr.REQUEST_BYTES),
    "response": (attr.RESPONSE, attr.RESPONSE_SHA256, attr.RESPONSE_BYTES),
    "events": (attr.STREAM_EVENTS, None, None),
    "input": (attr.RUN_INPUT, None, None),
    "output": (attr.RUN_OUTPUT, None, None),
    "initial_state": (attr.INITIAL_STATE, None, None),
}


class EncodedPayload:
    """A payload as recorded: inline text (None if not captured), hash, size, span attributes."""

    __slots__ = ("attributes", "inline", "sha256", "size", "text")

    def __init__(self, text: str, sha256: str, size: int, inline: str | None, attributes: dict[str, Any]):
        self.text = text
        self.sha256 = sha256
        self.size = size
        self.inline = inline
        self.attributes = attributes


def recordable(value: Any) -> tuple[Any, bytes]:
    """``(value as recorded, its canonical bytes)``: a dict with non-string keys is recorded tagged.

    The canonical form refuses such a dict (its keys would collide as JSON text); an agent's tool is
    free to take or return one, so it is recorded as :func:`~tailcut.canonical.tagged_keys` writes it
    rather than left unrecorded.

    Raises
    ------
    CanonicalEncodingError
        If ``value`` holds something else the canonical rules cannot encode.
    """
    try:
        return value, canonical_bytes(value)
    except NonStringKeyError:
        tagged = tagged_keys(value)
        return tagged, canonical_bytes(tagged)


def encode_payload(
    config: _config.Config,
    kind: str,
    field: str,
    value: Any,
    *,
    canonical: str | None = None,
    ledger: PieceLedger | None = None,
) -> EncodedPayload:
    """Canonicalise, redact, hash and (when over the inline limit) offload one payload.

    ``canonical`` skips encoding when the caller already holds the canonical text. With ``ledger`` (the
    run's), an LLM request, and any payload over the inline limit, is recorded as a skeleton plus the
    pieces its trace has not carried yet (:mod:`tailcut._pieces`); without it (or with
    ``self_contained``) a payload over the limit goes to the payload store.

    Raises
    ------
    CanonicalEncodingError
        If ``value`` cannot be encoded (:class:`~tailcut.errors.RedactHookError` when the ``redact``
        hook raised); the caller records that on the span.
    """
    source: Any = None  # a dict ``text`` is the canonical JSON of (spares the pieces parsing it)
    if canonical is None:
        try:
            if config.redact_defaults:
                value = redact_keys(value)
            value, raw = recordable(value)
        except CanonicalEncodingError:
            raise
        except Exception as exc:  # the value's own code raised while being walked (a __getattr__, ...)
            raise CanonicalEncodingError(f"{type(exc).__name__}: {exc}") from None
        text, source = raw.decode("utf-8"), value
    else:
        text, raw = canonical, b""
    if config.redact_defaults:
        redacted = redact_text(text)
        if redacted is not text:
            text, raw, source = redacted, b"", None
    if config.redact is not None:
        try:
            redacted_value = config.redact(loads(text), kind=kind, field=field)
        except Exception as exc:
            hook_error("redact", exc)
            # Only the type: the message of a failed redaction may quote the secret.
            raise RedactHookError(f"the redact hook raised {type(exc).__name__}") from None
        text, source = canonical_json(redacted_value), redacted_value
        raw = b""
    if not raw:
        raw = text.encode("utf-8")
    sha = sha256_hex(raw)
    size = len(raw)
    text_key, sha_key, size_key = _FIELD_ATTRS[field]
    attributes: dict[str, Any] = {}
    if sha_key is not None:
        attributes[sha_key] = sha
    inline: str | None = text
    if not config.captures(kind):
        inline = None
        attributes[attr.CONTENT_CAPTURED] = False
        if size_key is not None:  # the size is otherwise the inline text's length
            attributes[size_key] = size
    elif (
        ledger is not None
        and not config.self_contained
        and (pieced := recorded_pieces(config, ledger, kind, field, text, source, sha)) is not None
    ):
        inline = pieced[0]
        if size_key is not None:
            attributes[size_key] = size
        attributes.update(pieced[1])
    elif size > config.inline_limit:
        if size_key is not None:
            attributes[size_key] = size
        inline = canonical_json(make_stub(sha, size, text))
        attributes[attr.PAYLOAD_TRUNCATED] = True
        store = config.payload_store
        try:
            if store is None:
                raise PayloadStoreError("no payload store is configured")
            attributes[attr.PAYLOAD_REF] = [store.put(raw, sha)]
        except PayloadStoreError as exc:
            _config.counters.add("payloads_lost")
            _config.counters.warn_once("payload-store", "tailcut: payload not stored: %s", exc)
            attributes[attr.PAYLOAD_ERROR] = f"{field}: {exc}"
    if inline is not None:
        attributes[text_key] = inline
    return EncodedPayload(text, sha, size, inline, attributes)


def payload_unrecorded(owner: str, field: str, exc: CanonicalEncodingError) -> str:
    """Count (``payloads_unencodable``) and log once a payload that is not recorded; the span's note."""
    message = f"{owner}: {field} cannot be encoded: {exc}"
    _config.counters.add("payloads_unencodable")
    if not isinstance(exc, RedactHookError):  # that one was logged where the hook raised
        _config.counters.warn_once(f"encode:{owner}:{field}", "tailcut: %s", message)
    return message


class _Activation:
    """The context manager of :meth:`RecordedSpan.active` (a class: cheaper than a generator-based one)."""

    __slots__ = ("_depth_token", "_recorded", "_token")

    def __init__(self, recorded: RecordedSpan) -> None:
        self._recorded = recorded

    def __enter__(self) -> RecordedSpan:
        self._token = otel_context.attach(trace.set_span_in_context(self._recorded.span))
        self._depth_token = _DEPTH.set(self._recorded._depth)
        return self._recorded

    def __exit__(self, *exc: object) -> None:
        try:
            _DEPTH.reset(self._depth_token)
        except (ValueError, RuntimeError) as error:  # left in another context than it was entered in
            internal_error("leaving a span", error)
        otel_context.detach(self._token)  # logs its own failures


class RecordedSpan:
    """A span tailcut is recording: makes itself current, records failures, folds into the run."""

    __slots__ = ("_depth", "_ended", "_failed", "kind", "run", "span")

    def __init__(self, kind: str, span: trace.Span, run: RunState, depth: int) -> None:
        self.kind = kind
        self.span = span
        self.run = run
        self._depth = depth
        self._ended = False
        self._failed = False

    def active(self) -> _Activation:
        """Make the span current (so nested spans are its children) for the code inside a ``with``."""
        return _Activation(self)

    @never_raises("set_attributes")
    def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.span.set_attributes(attributes)

    @never_raises("recording a failure")
    def fail(self, exc: BaseException, *, error_type: str | None = None) -> None:
        """Record an exception raised inside this span, as OpenTelemetry records failures."""
        if self._failed:
            return
        self._failed = True
        self.span.record_exception(exc)
        self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.span.set_attributes(
            {attr.ERROR_TYPE: error_type or exception_type_name(exc), attr.ERROR_MESSAGE: str(exc)}
        )

    @never_raises("ending a span")
    def end(self) -> None:
        """End the span and fold it into the run's signals (idempotent)."""
        if self._ended:
            return
        self._ended = True
        try:
            self.span.end()
        finally:
            self._fold()

    def _fold(self) -> None:
        self.run.span_ended(self.kind, failed=self._failed)

    def __enter__(self) -> RecordedSpan:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and not isinstance(exc, GeneratorExit):
            self.fail(exc)
        self.end()


@never_raises("start_span")
def start_span(
    kind: str,
    name: str,
    *,
    span_name: str | None = None,
    span_kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
) -> RecordedSpan | None:
    """Begin a span that is not a boundary (agent, chain, other); None when tailcut is off (or failed)."""
    config = _config.current()
    if not config.enabled:
        return None
    run = current_run_state()
    depth = _DEPTH.get() + 1
    span_attributes: dict[str, Any] = {
        attr.KIND: kind,
        attr.GEN_AI_OPERATION_NAME: attr.OPERATION_FOR_KIND[kind],
    }
    if attributes:
        span_attributes.update(attributes)
    span = config.tracer.start_span(span_name or name, kind=span_kind, attributes=span_attributes)
    run.span_started(depth)
    return RecordedSpan(kind, span, run, depth)


class BoundarySpan(RecordedSpan):
    """One crossing in progress: its span, its numbering and what the interceptor decided."""

    __slots__ = (
        "_refs",
        "_result_told",
        "_schema_violations",
        "_tokens",
        "config",
        "crossing",
        "interceptor",
        "request",
        "response",
        "served",
    )

    def __init__(
        self,
        config: _config.Config,
        kind: str,
        span: trace.Span,
        crossing: Crossing,
        run: RunState,
        request: EncodedPayload | None,
        depth: int,
    ) -> None:
        super().__init__(kind, span, run, depth)
        self.config = config
        self.crossing = crossing
        self.request = request
        self.response: EncodedPayload | None = None
        self.interceptor = active_interceptor()
        self.served: Served | None = None
        self._result_told = False
        self._refs: list[str] = list(request.attributes.get(attr.PAYLOAD_REF, ())) if request else []
        self._tokens = 0
        self._schema_violations = 0

    def consult(self) -> Served | None:
        """Ask the active interceptor (if any) whether to serve this crossing; may raise Divergence."""
        if self.interceptor is None:
            return None
        try:
            served = self.interceptor.on_boundary(self.crossing)
        except Divergence as exc:
            self.fail(exc)
            raise
        if served is not None:
            self.served = served
            self.span.set_attribute(attr.REPLAYED, True)
        return served

    def served_value(self) -> Any:
        """The served response (already recorded on the span), or raise the served error."""
        served = self.served
        assert served is not None
        if served.is_error:
            exc = served.rebuild_error()
            self.fail(exc, error_type=served.error_type)
            raise exc
        self.finish(served.response, canonical=served.response_json)
        return served.response

    @never_raises("set_llm_usage")
    def set_llm_usage(self, input_tokens: int | None, output_tokens: int | None) -> None:
        """Record token usage (``gen_ai.usage.*``) and count it toward the run's total."""
        usage: dict[str, Any] = {}
        if input_tokens is not None:
            usage[attr.GEN_AI_USAGE_INPUT_TOKENS] = int(input_tokens)
        if output_tokens is not None:
            usage[attr.GEN_AI_USAGE_OUTPUT_TOKENS] = int(output_tokens)
        self._tokens = int(input_tokens or 0) + int(output_tokens or 0)
        self.span.set_attributes(usage)

    @never_raises("set_schema_violations")
    def set_schema_violations(self, count: int) -> None:
        self._schema_violations = count
        self.span.set_attribute(attr.SCHEMA_VIOLATIONS, count)

    @never_raises("finish")
    def finish(
        self,
        response: Any,
        *,
        canonical: str | None = None,
        field: str = "response",
        attributes: dict[str, Any] | None = None,
        tell_result: bool = True,
    ) -> EncodedPayload | None:
        """Record the boundary's response (or a stream's events with ``field="events"``).

        ``tell_result=False`` records a response that comes with a failure (an HTTP error's status and
        body): the interceptor then hears of both from the :meth:`fail` that follows.
        """
        encoded: EncodedPayload | None = None
        try:
            encoded = encode_payload(
                self.config, self.kind, field, response, canonical=canonical, ledger=self.run.pieces
            )
        except CanonicalEncodingError as exc:
            self._encoding_failed(field, exc)
        else:
            attributes_out = encoded.attributes
            refs = attributes_out.get(attr.PAYLOAD_REF)
            if refs:  # the span lists the reference of every payload it offloaded
                self._refs.extend(refs)
                attributes_out[attr.PAYLOAD_REF] = list(self._refs)
            if field == "response":
                self.response = encoded
                if self.kind == "tool" and encoded.inline is not None:
                    attributes_out[attr.GEN_AI_TOOL_CALL_RESULT] = encoded.inline
            if attributes:
                attributes_out.update(attributes)
            self.span.set_attributes(attributes_out)  # one call: the SDK takes its lock once
            attributes = None
        if attributes:
            self.span.set_attributes(attributes)
        if field == "response" and tell_result:
            self._tell_result(None)
        return encoded

    @never_raises("recording a failure")
    def fail(self, exc: BaseException, *, error_type: str | None = None) -> None:
        if self._failed:
            return
        super().fail(exc, error_type=error_type)
        self._tell_result(exc)

    def _tell_result(self, error: BaseException | None) -> None:
        if self.interceptor is None or self._result_told:
            return
        self._result_told = True
        response = self.response
        self.interceptor.on_result(
            self.crossing,
            served=self.served is not None,
            response_json=response.text if response else None,
            response_sha256=response.sha256 if response else None,
            error=error,
        )

    def _encoding_failed(self, field: str, exc: CanonicalEncodingError) -> None:
        self.span.set_attribute(attr.PAYLOAD_ERROR, payload_unrecorded(self.crossing.boundary, field, exc))

    def _fold(self) -> None:
        self.run.span_ended(
            self.kind,
            failed=self._failed,
            attempt=self.crossing.attempt,
            boundary=self.crossing.boundary,
            request_sha256=self.crossing.request_sha256,
            tokens=self._tokens,
            schema_violations=self._schema_violations,
        )


def boundary_name(kind: str, name: str) -> str:
    """The stable boundary name of DESIGN.md section 2, e.g. ``tool:search_kb``."""
    return f"{kind}:{name}"


@never_raises("start_boundary")
def start_boundary(
    kind: str,
    name: str,
    make_request: Callable[[], Any],
    *,
    boundary: str | None = None,
    span_name: str | None = None,
    span_kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    canonical_request: str | None = None,
) -> BoundarySpan | None:
    """Begin recording one boundary crossing; None when tailcut is off and no replay is active.

    None as well when the recording could not start (an internal error, counted and logged once): the
    caller then runs the call unrecorded.

    ``make_request`` builds the request value; it is called only when the crossing is recorded. The
    returned span is started but not yet current: run the call inside :meth:`BoundarySpan.active`,
    after :meth:`BoundarySpan.consult` has had the interceptor's say.
    """
    config = _config.current()
    if not config.enabled and active_interceptor() is None:
        return None
    boundary = boundary or boundary_name(kind, name)
    run = current_run_state()
    depth = _DEPTH.get() + 1
    occurrence, seq = run.next_crossing(boundary, depth)
    attempt = _ATTEMPT.get()
    span_attributes: dict[str, Any] = {
        attr.KIND: kind,
        attr.BOUNDARY: boundary,
        attr.OCCURRENCE: occurrence,
        attr.SEQ: seq,
        attr.ATTEMPT: attempt,
        attr.GEN_AI_OPERATION_NAME: attr.OPERATION_FOR_KIND[kind],
    }
    if attempt > 1:  # absent means no retry so far
        span_attributes[attr.RETRIES] = attempt - 1
    if kind == "llm" and run.prompt_version is not None:
        span_attributes[attr.PROMPT_VERSION] = run.prompt_version
    if attributes:
        span_attributes.update(attributes)
    encoded: EncodedPayload | None = None
    encode_error: CanonicalEncodingError | None = None
    try:
        request = None if canonical_request is not None else make_request()
        encoded = encode_payload(
            config, kind, "request", request, canonical=canonical_request, ledger=run.pieces
        )
        span_attributes.update(encoded.attributes)
    except CanonicalEncodingError as exc:
        encode_error = exc
    if kind == "tool":
        if encoded is not None and encoded.inline is not None:
            span_attributes[attr.GEN_AI_TOOL_CALL_ARGUMENTS] = encoded.inline
        call_id = _TOOL_CALL_ID.get()
        if call_id is not None:
            span_attributes[attr.GEN_AI_TOOL_CALL_ID] = call_id
    span = config.tracer.start_span(span_name or f"{kind} {name}", kind=span_kind, attributes=span_attributes)
    trace_id = span.get_span_context().trace_id
    crossing = Crossing(
        kind=kind,
        boundary=boundary,
        occurrence=occurrence,
        seq=seq,
        attempt=attempt,
        name=name,
        request=encoded.text if encoded else None,
        request_sha256=encoded.sha256 if encoded else None,
        trace_id=format(trace_id, "032x") if trace_id else None,
    )
    recorder = BoundarySpan(config, kind, span, crossing, run, encoded, depth)
    if encode_error is not None:
        recorder._encoding_failed("request", encode_error)
    return recorder
