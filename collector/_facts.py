"""The few facts of a span that trace signals and policies need, read from its encoded bytes.

This is the collector's hot path: it runs on every span, kept or not. A span is parsed with the lazy
:data:`~tailcut.collector._otlp.SpanFacts` type (attributes as a C-level map of encoded values) and only
the keys below are looked up; values are compared or decoded from their raw ``AnyValue`` bytes. Kinds
follow :func:`tailcut.exporters.conventions.mapping.resolve_kind` (called only for spans without
``tailcut.kind``), and token counts the same fallbacks as the ``input_tokens``/``output_tokens``
columns, so the signals agree with the stored rows. A third-party tool span's arguments are the one
exception to reading raw bytes: they are decoded and rebuilt as the writers rebuild them (its identity for
repeated calls must be theirs), which costs a tool span of another instrumentation a few microseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from hashlib import blake2b
from typing import Any, Final, NamedTuple

from tailcut import attributes as attr
from tailcut.exporters._pricing import _PER_TOKEN, Pricing, default_pricing
from tailcut.exporters.conventions import names as names
from tailcut.exporters.conventions.mapping import COLUMN_SOURCES, KIND_KEYS, resolve_kind
from tailcut.exporters.conventions.messages import tool_request_sha256, written_payloads
from tailcut.exporters.conventions.observations import (
    EVENT_TEXT_KEYS,
    RESULT_KINDS,
    RULES,
    ObservationRule,
    failure_text,
    reported_category,
)
from tailcut.exporters.wire.values import any_int, any_value, encode_string_value
from tailcut.signals import NO_RUN, RUN_KEYS, RunFacts, is_preparation_span, run_facts, trace_cost

ERROR_STATUS: Final = 2
#: Kinds by the encoded ``AnyValue`` of their ``tailcut.kind``.
KIND_BY_RAW: Final = {encode_string_value(kind): kind for kind in attr.KINDS}
_INPUT_TOKEN_KEYS: Final = tuple(source.key for source in COLUMN_SOURCES["input_tokens"])
_OUTPUT_TOKEN_KEYS: Final = tuple(source.key for source in COLUMN_SOURCES["output_tokens"])
_MODEL_KEYS: Final = tuple(source.key for source in COLUMN_SOURCES["model"])
#: Model prices a pricer remembers by encoded name (bounded: a client can send any number of names).
_MAX_MODEL_NAMES: Final = 1024
_UNSEEN: Final = object()
#: What a third-party tool span's arguments are rebuilt from (the writers' ``request``; with the MIME type
#: that says whether ``input.value`` is JSON).
_TOOL_REQUEST_KEYS: Final = (
    attr.GEN_AI_TOOL_CALL_ARGUMENTS,
    names.OI_TOOL_CALL_ARGUMENTS,
    names.OI_INPUT_VALUE,
    names.OI_INPUT_MIME_TYPE,
    names.TRACELOOP_ENTITY_INPUT,
)
_TOOL_NAME_KEYS: Final = (
    attr.BOUNDARY,
    attr.GEN_AI_TOOL_NAME,
    names.OI_TOOL_NAME,
    names.TRACELOOP_ENTITY_NAME,
)
_AGENT_NAME_KEYS: Final = (attr.GEN_AI_AGENT_NAME, names.OI_AGENT_NAME)
_AGENT_SPAN_NAME_KEYS: Final = (*_AGENT_NAME_KEYS, names.TRACELOOP_ENTITY_NAME)
_RUN_KEYS: Final = tuple(RUN_KEYS.values())
_TOOL_HASH: Final = blake2b(digest_size=16)
_new = tuple.__new__
_KIND: Final = attr.KIND
_INPUT_TOKENS: Final = attr.GEN_AI_USAGE_INPUT_TOKENS
_OUTPUT_TOKENS: Final = attr.GEN_AI_USAGE_OUTPUT_TOKENS
_SCHEMA_VIOLATIONS: Final = attr.SCHEMA_VIOLATIONS
_ATTEMPT: Final = attr.ATTEMPT
_INT_TAG: Final = b"\x18"  # AnyValue.int_value
_FIRST_ATTEMPT: Final = b"\x18\x01"  # an attempt of 1, as encoders write it
_MODEL: Final = _MODEL_KEYS[0]
_TOOL_NAME: Final = _TOOL_NAME_KEYS[0]
_TOOL_ARGUMENTS: Final = attr.REQUEST_SHA256  # tailcut's own tool spans: the request hash


class SpanRecord(NamedTuple):
    """What the signals need of one span, read from its bytes (the first eleven fields are those of
    :class:`tailcut.signals.SpanSignals`, so records feed :func:`tailcut.signals.trace_signals` as they are).

    A tuple of plain values (created with ``tuple.__new__``): the garbage collector stops tracking it, so
    the records a trace keeps (of its llm spans, :class:`~tailcut.collector._signals.TraceTally`) cost it
    nothing.
    """

    span_id: bytes
    parent_span_id: bytes  # b"" for a root
    kind: str
    failed: bool
    tool_key: bytes | None  # (tool, arguments) identity of a tool's first attempt
    input_tokens: int
    output_tokens: int
    schema_violations: int
    preparation: bool  # an llm span that only prepares a request (tailcut.signals.is_preparation_span)
    raised: bool  # it carries an ``exception`` event (tailcut.signals.is_failed)
    reported: str | None  # what its failure text reports (tailcut.signals.SpanSignals)
    model: bytes | None  # an llm span's model (its encoded ``AnyValue``), priced when the trace is decided


class RootFacts(NamedTuple):
    """What the ``traces`` row takes from the root span."""

    name: str
    run: RunFacts
    agent_name: str | None  # the root's own (gen_ai.agent.name or OpenInference's)
    failed: bool  # its status is ERROR


def _first(attributes: Any, keys: tuple[str, ...]) -> bytes | None:
    for key in keys:
        raw = attributes.get(key)
        if raw is not None:
            return raw
    return None


def span_kind(attributes: Any) -> str:
    """The tailcut kind of a span from its raw attribute map (``tailcut.kind`` first, then conventions).

    A carrier (``tailcut.carrier``) is :data:`~tailcut.attributes.CARRIER_KIND`, which the signals skip.
    """
    kind = KIND_BY_RAW.get(attributes.get(attr.KIND))  # type: ignore[arg-type]
    if kind is not None:
        return kind
    if attr.CARRIER in attributes:
        return attr.CARRIER_KIND
    return resolve_kind({key: any_value(attributes[key]) for key in KIND_KEYS if key in attributes})


def span_record(
    span: Any, attributes: Any, span_id: bytes, parent: bytes, rules: Sequence[ObservationRule] = RULES
) -> SpanRecord:
    """The record of a span parsed with the lazy ``SpanFacts`` type.

    ``attributes`` is ``span.attributes`` (read once by the caller: each read builds a new map view);
    ``rules`` are the observation rules its failure text is read with (:func:`reported`).
    """
    kind = KIND_BY_RAW.get(attributes.get(_KIND))  # type: ignore[arg-type]
    if kind is None:
        kind = span_kind(attributes)
    failed = span.status.code == ERROR_STATUS
    if kind == "llm":
        return llm_record(span, span_id, parent, failed, attributes, rules)
    key = tool_key(span, attributes) if kind == "tool" else None
    thrown = raised(span)
    said = reported(span, attributes, kind, failed or thrown, rules)
    return _new(SpanRecord, (span_id, parent, kind, failed, key, 0, 0, 0, False, thrown, said, None))


def llm_record(
    span: Any,
    span_id: bytes,
    parent: bytes,
    failed: bool,
    attributes: Any,
    rules: Sequence[ObservationRule] = RULES,
) -> SpanRecord:
    """The record of an ``llm`` span: its token counts, schema violations, whether it only prepares a
    request (by its name) and model.

    Each value is looked up under its usual key first, then under every key it may have.
    """
    get = attributes.get
    raw = get(_INPUT_TOKENS)
    input_tokens = any_int(raw if raw is not None else _first(attributes, _INPUT_TOKEN_KEYS))
    raw = get(_OUTPUT_TOKENS)
    output_tokens = any_int(raw if raw is not None else _first(attributes, _OUTPUT_TOKEN_KEYS))
    raw = get(_SCHEMA_VIOLATIONS)
    violations = 0 if raw is None else any_int(raw)
    model = get(_MODEL)
    if model is None:
        model = _first(attributes, _MODEL_KEYS)
    prepares = is_preparation_span("llm", span.name)
    record = (span_id, parent, "llm", failed, None, input_tokens, output_tokens, violations, prepares)
    thrown = raised(span)
    return _new(
        SpanRecord, (*record, thrown, reported(span, attributes, "llm", failed or thrown, rules), model)
    )


_EXCEPTION: Final = b"exception"


def raised(span: Any) -> bool:
    """Whether a span parsed with the lazy ``SpanFacts`` type carries an ``exception`` event."""
    events = span.events
    return bool(events) and any(event.name == _EXCEPTION for event in events)


#: The event attributes a failure text reads, by their encoded keys.
_EVENT_TEXT_KEYS: Final = {key.encode(): key for key in EVENT_TEXT_KEYS}
#: The attributes a span's result may be read from, and what marks a LangChain message's tool-call parse
#: errors in one (searched in the raw bytes before anything is decoded; see ``INVALID_TOOL_CALLS``).
_OUTPUT_KEYS: Final = (
    attr.RESPONSE,
    attr.GEN_AI_TOOL_CALL_RESULT,
    names.OI_OUTPUT_VALUE,
    names.TRACELOOP_ENTITY_OUTPUT,
)
_INVALID_CALLS_MARK: Final = b"invalid_tool_calls"


def _text(raw: bytes) -> str | None:
    value = any_value(raw)
    return None if value is None else value if type(value) is str else str(value)


_OWN_PAYLOAD_KEYS: Final = (_KIND, attr.RESPONSE, attr.REQUEST)


def _payloads(attributes: Any, kind: str) -> tuple[str | None, str | None]:
    """A span's ``response`` and ``request`` columns (:func:`written_payloads`); a tailcut span has only
    its own payload attributes decoded, another instrumentation's span every attribute."""
    keys = _OWN_PAYLOAD_KEYS if _KIND in attributes else attributes
    return written_payloads(kind, {key: any_value(attributes[key]) for key in keys if key in attributes})


def reported(
    span: Any, attributes: Any, kind: str, failed: bool, rules: Sequence[ObservationRule] = RULES
) -> str | None:
    """What a span's failure text reports (``reported_category`` of its ``failure_text``, both of
    :mod:`tailcut.exporters.conventions.observations`): its status message, its events' exception types
    and messages, and the start of a boundary's result, or another span's LangChain tool-call parse
    errors. ``failed``: status ERROR or an ``exception`` event. A span with none of these costs a few
    lookups; a boundary's result is decoded and searched once (RE2, the union of the rules)."""
    message = span.status.message
    events = span.events
    if kind in RESULT_KINDS or _carries_invalid_calls(attributes):
        response, request = _payloads(attributes, kind)
    elif not message and not events:
        return None
    else:
        response = request = None
    said = [
        (
            event.name.decode("utf-8", "replace"),
            {key: _text(pair.value) for pair in event.attributes if (key := _EVENT_TEXT_KEYS.get(pair.key))},
        )
        for event in events
    ]
    text = failure_text(kind, message.decode("utf-8", "replace") if message else None, said, response)
    return reported_category(kind, failed=failed, text=text, request=request, rules=rules)


def _carries_invalid_calls(attributes: Any) -> bool:
    """Whether a result attribute may hold a LangChain message's tool-call parse errors (raw bytes)."""
    get = attributes.get
    for key in _OUTPUT_KEYS:
        raw = get(key)
        if raw is not None and _INVALID_CALLS_MARK in raw:
            return True
    return False


def tool_key(span: Any, attributes: Any) -> bytes | None:
    """The (tool, arguments) identity of a ``tool`` span's first attempt; None for a retry.

    The arguments are tailcut's request hash; for a span another instrumentation wrote, the hash of the
    arguments as the writers rebuild them (:func:`tailcut.exporters.conventions.messages.tool_request_sha256`,
    canonical JSON without a framework's per-call envelope), so the collector counts the repeated calls
    the stored ``request_sha256`` groups. A non-integer ``tailcut.attempt`` counts as absent.
    """
    get = attributes.get
    attempt = get(_ATTEMPT)
    if attempt is None or attempt == _FIRST_ATTEMPT or attempt[:1] != _INT_TAG or any_int(attempt) == 1:
        tool = get(_TOOL_NAME)
        if tool is None:
            tool = _first(attributes, _TOOL_NAME_KEYS)
        arguments = get(_TOOL_ARGUMENTS)
        if arguments is None and _KIND not in attributes:  # as the writers: tailcut's spans are not rebuilt
            arguments = _rebuilt_arguments(attributes)
        tool = tool or span.name
        arguments = arguments or b""
        # Hashed so that a tool with large arguments costs the buffer 16 bytes, not a second copy
        # (a copy of an empty hash: cheaper than parsing blake2b's keyword arguments for each span).
        digest = _TOOL_HASH.copy()
        digest.update(len(tool).to_bytes(4, "little") + tool + arguments)
        return digest.digest()
    return None


def _rebuilt_arguments(attributes: Any) -> bytes | None:
    """The sha256 (ASCII) of a third-party tool span's arguments as the writers rebuild them, or None."""
    values = {key: any_value(attributes[key]) for key in _TOOL_REQUEST_KEYS if key in attributes}
    if not values:
        return None
    sha = tool_request_sha256(values)
    return None if sha is None else sha.encode()


def model_pricer(pricing: Pricing | None = None) -> Callable[[bytes | None, int, int], float | None]:
    """USD of one model call from its encoded model name and token counts, at ``pricing`` (default:
    :func:`~tailcut.exporters._pricing.default_pricing`); None for an unpriced or absent model.

    Prices are looked up once per encoded name (at most :data:`_MAX_MODEL_NAMES` remembered: names come
    from the traffic); the cost is :meth:`~tailcut.exporters._pricing.Pricing.cost`'s formula.
    """
    if pricing is None:
        pricing = default_pricing()
    prices: dict[bytes, tuple[float, float] | None] = {}

    def cost(raw: bytes | None, input_tokens: int, output_tokens: int) -> float | None:
        if raw is None:
            return None
        found = prices.get(raw, _UNSEEN)
        if found is _UNSEEN:
            if len(prices) >= _MAX_MODEL_NAMES:
                prices.clear()
            value = any_value(raw)
            found = prices[raw] = pricing.price(value if type(value) is str else None)
        if found is None:
            return None
        return (input_tokens * found[0] + output_tokens * found[1]) * _PER_TOKEN  # type: ignore[index]

    return cost


def trace_cost_usd(records: Sequence[SpanRecord], pricing: Pricing | None = None) -> float | None:
    """A trace's ``cost_usd`` from its span records (as :func:`tailcut.signals.trace_cost`),
    at ``pricing`` (default: :func:`~tailcut.exporters._pricing.default_pricing`)."""
    cost = model_pricer(pricing)
    return trace_cost(records, lambda record: cost(record.model, record.input_tokens, record.output_tokens))


def root_facts(span: Any, attributes: Any) -> RootFacts:
    """The root span's name, run and agent, as the ``traces`` row copies them (``attributes``: its map)."""
    get = attributes.get
    values: dict[str, Any] = {}
    for key in _RUN_KEYS:
        raw = get(key)
        if raw is not None:
            values[key] = any_value(raw)
    run = run_facts(values) if values else NO_RUN
    raw = _first(attributes, _AGENT_NAME_KEYS)
    agent = any_value(raw) if raw is not None else None
    name = span.name.decode("utf-8", "replace")
    agent = agent if type(agent) is str and agent else None
    return _new(RootFacts, (name, run, agent, span.status.code == ERROR_STATUS))


def agent_name(attributes: Any) -> str | None:
    """The agent name an ``agent`` span declares, if any (``attributes``: the span's map)."""
    raw = _first(attributes, _AGENT_SPAN_NAME_KEYS)
    value = any_value(raw) if raw is not None else None
    return value if isinstance(value, str) else None
