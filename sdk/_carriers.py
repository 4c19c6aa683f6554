"""Export requests of bounded size: batches split by bytes, a span too big for one request carried in pieces.

OpenTelemetry's batch processor batches up to 512 spans whatever their size, and a collector refuses a
request over its receive limit (the OpenTelemetry Collector's defaults: 4 MiB over gRPC, 20 MiB over
HTTP; ``tailcut collect``'s: 32 MiB for both), losing every span in it. :func:`export_bounded` sends a
batch as export calls whose encoded size stays under ``bound`` bytes, measured with
:func:`span_bytes` (an upper bound of the span's OTLP protobuf encoding, computed without encoding it).

A span that is bigger than the bound on its own is cut: its pieces (the ``<payload attribute>.pieces``
attributes of :mod:`tailcut._pieces`) leave it and travel in *carrier* spans of the same trace,
children of the span named :data:`~tailcut.attributes.CARRIER_SPAN_NAME` and marked
:data:`~tailcut.attributes.CARRIER`, each in an export call of its own, sent before the span so a
trace's pieces are there when the span that names them arrives. A piece that does not fit in one
carrier is cut into chunks (never inside a UTF-8 character, pieces being ``str``, nor inside a
placeholder token) that travel as ordinary pieces, and the piece itself travels in
:data:`~tailcut.attributes.CARRIER_CHUNKED` as its hash followed by the concatenation of its chunks'
placeholders: the text substitution of :func:`tailcut._pieces.expand` puts it back, and readers verify
it against its own hash. Readers store a carrier's pieces and nothing else of it.

Chunks are cut one carrier at a time, so the pieces of a large payload are not copied all at once.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind

from tailcut import attributes as attr
from tailcut._pieces import PAYLOAD_ATTRIBUTES, PIECES_SUFFIX, TOKEN_START, placeholder

MIB: Final = 1024 * 1024
#: Default bounds, safely below the OpenTelemetry Collector's default receive limits (gRPC: 4 MiB,
#: ``max_recv_msg_size_mib``; HTTP: 20 MiB, ``max_request_body_size``) and so below ``tailcut collect``'s.
DEFAULT_GRPC_BOUND: Final = 3 * MIB
DEFAULT_HTTP_BOUND: Final = 16 * MIB
#: The smallest bound accepted: a carrier must hold at least a few placeholders.
MIN_BOUND: Final = 4096
#: The span attributes that carry pieces.
PIECE_KEYS: Final = tuple(name + PIECES_SUFFIX for name in PAYLOAD_ATTRIBUTES.values())
#: Room left in a carrier for its own fields (ids, name, times, marker, attribute keys).
_CARRIER_ROOM: Final = 1024
#: A placeholder token (a chunk never ends inside one).
_TOKEN: Final = re.compile(re.escape(TOKEN_START) + r'[0-9a-f]{64}"\}')

Send = Callable[[Sequence[ReadableSpan]], SpanExportResult]


def default_bound(exporter: SpanExporter) -> int | None:
    """The default bound for an OTLP exporter's protocol; None (unbounded) for any other exporter."""
    module = type(exporter).__module__
    if module.startswith("opentelemetry.exporter.otlp.proto.grpc"):
        return DEFAULT_GRPC_BOUND
    if module.startswith("opentelemetry.exporter.otlp.proto.http"):
        return DEFAULT_HTTP_BOUND
    return None


# --- encoded sizes ------------------------------------------------------------------------------------
def _varint(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _field(n: int) -> int:
    """A length-delimited field of ``n`` bytes (every field number involved is below 16: a 1-byte tag)."""
    return 1 + _varint(n) + n


def utf8_len(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (without encoding an ASCII text)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _value(value: Any) -> int:
    """The encoded size of an ``AnyValue`` holding ``value`` (its content, without its own prefix)."""
    if isinstance(value, str):
        return _field(utf8_len(value))
    if isinstance(value, bool):
        return 2
    if isinstance(value, int):
        return 1 + _varint(value % (1 << 64))  # int64, two's complement
    if isinstance(value, float) or value is None:
        return 9
    if isinstance(value, bytes | bytearray):
        return _field(len(value))
    if isinstance(value, Mapping):
        return _field(sum(_field(_key_value(k, v)) for k, v in value.items()))
    return _field(sum(_field(_value(item)) for item in value))


def _key_value(key: str, value: Any) -> int:
    return _field(utf8_len(key)) + _field(_value(value))


def attributes_bytes(attributes: Mapping[str, Any] | None) -> int:
    """The encoded size of an attribute map (its repeated ``KeyValue`` fields)."""
    if not attributes:
        return 0
    return sum(_field(_key_value(key, value)) for key, value in attributes.items())


def _trace_state(context: SpanContext | None) -> int:
    if context is None or not context.trace_state:
        return 0
    return _field(sum(len(key) + len(value) + 2 for key, value in context.trace_state.items()))


def span_bytes(span: ReadableSpan) -> int:
    """An upper bound of the span's encoded size in an export request (its ``Span`` field)."""
    size = 18 + 10 + 10 + 6 + 2 + 9 + 9 + 3 * 6  # ids, flags, kind, times, dropped counts
    size += _trace_state(span.context) + _field(utf8_len(span.name)) + attributes_bytes(span.attributes)
    for event in span.events:
        size += _field(9 + _field(utf8_len(event.name)) + attributes_bytes(event.attributes) + 6)
    for link in span.links:
        size += _field(18 + 10 + _trace_state(link.context) + attributes_bytes(link.attributes) + 12)
    description = span.status.description if span.status is not None else None
    size += _field(_field(utf8_len(description or "")) + 2)
    return _field(size)


def group_bytes(span: ReadableSpan) -> int:
    """An upper bound of what a request spends on the resource and scope a span comes under."""
    size = 64 + (attributes_bytes(span.resource.attributes) if span.resource is not None else 0)
    size += utf8_len(span.resource.schema_url or "") if span.resource is not None else 0
    scope = span.instrumentation_scope
    if scope is not None:
        size += utf8_len(scope.name or "") + utf8_len(scope.version or "") + utf8_len(scope.schema_url or "")
        size += attributes_bytes(scope.attributes)
    return size


def _group_key(span: ReadableSpan) -> tuple[int, int]:
    return id(span.resource), id(span.instrumentation_scope)


# --- cutting ------------------------------------------------------------------------------------------
def cut(text: str, limit: int) -> Iterator[str]:
    """``text`` in consecutive chunks of at most ``limit`` UTF-8 bytes, none ending inside a placeholder.

    ``limit`` must exceed a placeholder's length (84 bytes), so every chunk makes progress.
    """
    tokens = [(match.start(), match.end()) for match in _TOKEN.finditer(text)]
    starts = [start for start, _ in tokens]
    ascii_text = text.isascii()
    start, length = 0, len(text)
    while start < length:
        end = min(start + limit, length)
        if not ascii_text:
            size = len(text[start:end].encode("utf-8", "surrogatepass"))
            while size > limit:
                end = start + max(1, (end - start) * limit // size)
                size = len(text[start:end].encode("utf-8", "surrogatepass"))
        inside = bisect.bisect_left(starts, end) - 1
        if inside >= 0 and tokens[inside][0] < end < tokens[inside][1]:
            end = tokens[inside][0] if tokens[inside][0] > start else tokens[inside][1]
        yield text[start:end]
        start = end


def _items(span: ReadableSpan, room: int) -> Iterator[tuple[str, str, int]]:
    """The span's pieces as ``(attribute, text, size)``, a piece over ``room`` bytes as its chunks
    followed by its chunked form."""
    for key in PIECE_KEYS:
        texts = span.attributes.get(key) if span.attributes else None
        if not texts:
            continue
        for text in texts:
            size = _field(_field(utf8_len(text)))
            if size <= room:
                yield key, text, size
                continue
            whole = hashlib.sha256()
            tokens = []
            for chunk in cut(text, room - 16):
                data = chunk.encode("utf-8", "surrogatepass")
                whole.update(data)
                tokens.append(placeholder(hashlib.sha256(data).hexdigest()))
                yield key, chunk, _field(_field(len(data)))
            chunked = whole.hexdigest() + "".join(tokens)
            yield attr.CARRIER_CHUNKED, chunked, _field(_field(len(chunked)))


def _carrier(span: ReadableSpan, carried: dict[str, list[str]]) -> ReadableSpan:
    context = span.get_span_context()
    time = span.end_time if span.end_time is not None else span.start_time
    return ReadableSpan(
        name=attr.CARRIER_SPAN_NAME,
        context=SpanContext(
            context.trace_id,
            random.getrandbits(64) or 1,
            is_remote=False,
            trace_flags=context.trace_flags,
            trace_state=context.trace_state,
        ),
        parent=context,
        resource=span.resource,
        attributes={attr.CARRIER: True, **{key: tuple(texts) for key, texts in carried.items()}},
        kind=SpanKind.INTERNAL,
        start_time=time,
        end_time=time,  # zero length: the carrying span's self time is unchanged
        instrumentation_scope=span.instrumentation_scope,
    )


def carriers(span: ReadableSpan, bound: int) -> Iterator[ReadableSpan]:
    """Carrier spans for all of ``span``'s pieces, each alone under ``bound`` bytes in a request."""
    room = bound - group_bytes(span) - _CARRIER_ROOM
    carried: dict[str, list[str]] = {}
    used = 0
    for key, text, size in _items(span, room):
        if carried and used + size > room:
            yield _carrier(span, carried)
            carried, used = {}, 0
        carried.setdefault(key, []).append(text)
        used += size
    if carried:
        yield _carrier(span, carried)


def without_pieces(span: ReadableSpan) -> ReadableSpan:
    """``span`` with its piece attributes removed (they travel in its carriers)."""
    attributes = {key: value for key, value in (span.attributes or {}).items() if key not in PIECE_KEYS}
    return ReadableSpan(
        name=span.name,
        context=span.get_span_context(),
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def has_pieces(span: ReadableSpan) -> bool:
    return bool(span.attributes) and any(span.attributes.get(key) for key in PIECE_KEYS)


# --- exporting ----------------------------------------------------------------------------------------
def export_bounded(
    spans: Sequence[ReadableSpan], bound: int, send: Send, *, oversize: Callable[[int], None]
) -> tuple[int, int]:
    """Send ``spans`` through ``send`` in requests of at most ``bound`` bytes; ``(exported, failed)``.

    Counts are of ``spans`` (carriers are not counted): a span is exported when its request and all its
    carriers' requests succeeded; a span whose carriers failed is not sent. ``oversize(n)`` is told of
    a span that stays over the bound without its pieces (it is sent on its own).
    """
    exported = failed = 0
    batch: list[ReadableSpan] = []
    groups: set[tuple[int, int]] = set()  # the resource and scope groups of the batch
    group_cost: dict[tuple[int, int], int] = {}
    used = 0

    def flush() -> None:
        nonlocal exported, failed, used
        if batch:
            if send(batch) == SpanExportResult.SUCCESS:
                exported += len(batch)
            else:
                failed += len(batch)
        batch.clear()
        groups.clear()
        used = 0

    for span in spans:
        group = _group_key(span)
        group_size = group_cost.get(group)
        if group_size is None:
            group_size = group_cost[group] = group_bytes(span)
        size = span_bytes(span)
        if size + group_size > bound and has_pieces(span):
            if not all(send([carrier]) == SpanExportResult.SUCCESS for carrier in carriers(span, bound)):
                failed += 1
                continue
            span = without_pieces(span)
            size = span_bytes(span)
        if batch and used + size + (0 if group in groups else group_size) > bound:
            flush()
        cost = size + (0 if group in groups else group_size)
        if cost > bound:
            oversize(size)
        batch.append(span)
        groups.add(group)
        used += cost
    flush()
    return exported, failed
