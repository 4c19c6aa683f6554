"""OTLP wire details: lazy decoding of export requests, body encodings, and the responses the spec defines.

Lazy decoding
-------------
Turning every attribute of every span into Python objects costs several times more than parsing the
request, and only kept traces (a small fraction) ever need that. So requests are decoded with two
message types built here that are wire-compatible with OTLP's but declare less:

* :data:`FramedRequest` mirrors ``ExportTraceServiceRequest`` down to the scope level but declares the
  resource, the scope and each span as ``bytes``: parsing it only frames the request, and each span
  comes out as its own encoded bytes, which is what the buffer keeps (no re-encoding, no parsed objects);
* :data:`SpanFacts` reads one span's bytes declaring just the fields the collector needs, and its
  ``attributes`` as ``map<string, bytes>`` (a ``KeyValue`` list is wire-identical to a map entry), so
  looking up a key is a C hash lookup that returns the value's encoded ``AnyValue``;
* :data:`FactsRequest` frames a request like :data:`FramedRequest` with each span a :data:`SpanFacts`,
  so one parse per request gives every span's facts (:func:`request_spans` pairs them with the bytes).

Spans a trace keeps are later parsed for real with ``opentelemetry.proto``'s ``Span``.

Responses (OTLP specification, "OTLP/HTTP Response" and "Failures")
--------------------------------------------------------------------
Success is 200 with an ``ExportTraceServiceResponse`` in the request's encoding; spans refused
individually (invalid ids) are reported in ``partial_success``. Failures carry a ``google.rpc.Status``:
400 for bad data (not retryable), 413 for a body over the limit, 415 for an unsupported content type
or encoding, and 429 with ``Retry-After`` when the collector is full (retryable). Over gRPC the same
overload is ``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` detail.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Final

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tailcut.exporters._errors import BadOtlpInput
from tailcut.exporters.wire.otlp_json import json_request, loads

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

_FIELD = descriptor_pb2.FieldDescriptorProto


class OtlpError(Exception):
    """A request the collector refuses: the HTTP status, the gRPC code and a one-line reason."""

    def __init__(
        self, http_status: int, grpc_code: int, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.grpc_code = grpc_code
        self.message = message
        self.retry_after = retry_after


def bad_request(message: str) -> OtlpError:
    return OtlpError(400, code_pb2.INVALID_ARGUMENT, message)


def too_large(message: str) -> OtlpError:
    return OtlpError(413, code_pb2.INVALID_ARGUMENT, message)


def unauthenticated() -> OtlpError:
    return OtlpError(
        401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token in the authorization header"
    )


def overloaded(message: str, retry_after: float = 1.0) -> OtlpError:
    return OtlpError(429, code_pb2.RESOURCE_EXHAUSTED, message, retry_after)


# --- lazy message types ---------------------------------------------------------------------------------
def _build_lazy_types() -> tuple[type[Message], type[Message], type[Message], type[Message]]:
    file = descriptor_pb2.FileDescriptorProto(
        name="tailcut/collector/lazy_otlp.proto", package="tailcut.collector.lazy", syntax="proto3"
    )
    optional, repeated = _FIELD.LABEL_OPTIONAL, _FIELD.LABEL_REPEATED

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> descriptor_pb2.DescriptorProto:
        proto = file.message_type.add(name=name)
        for field_name, number, type_, label, type_name in fields:
            field = proto.field.add(name=field_name, number=number, type=type_, label=label)
            if type_name:
                field.type_name = type_name
        return proto

    span = message(
        "Span",
        [
            ("trace_id", 1, _FIELD.TYPE_BYTES, optional, ""),
            ("span_id", 2, _FIELD.TYPE_BYTES, optional, ""),
            ("trace_state", 3, _FIELD.TYPE_BYTES, optional, ""),  # W3C tracestate: head sampling
            ("parent_span_id", 4, _FIELD.TYPE_BYTES, optional, ""),
            ("name", 5, _FIELD.TYPE_BYTES, optional, ""),
            ("start_time_unix_nano", 7, _FIELD.TYPE_FIXED64, optional, ""),
            ("end_time_unix_nano", 8, _FIELD.TYPE_FIXED64, optional, ""),
            ("attributes", 9, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.Span.AttributesEntry"),
            ("events", 11, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.Event"),
            ("status", 15, _FIELD.TYPE_MESSAGE, optional, ".tailcut.collector.lazy.Status"),
        ],
    )
    entry = span.nested_type.add(name="AttributesEntry")
    entry.field.add(name="key", number=1, type=_FIELD.TYPE_STRING, label=optional)
    entry.field.add(name="value", number=2, type=_FIELD.TYPE_BYTES, label=optional)
    entry.options.map_entry = True
    # The status message, an event's name (whether a span carries an ``exception`` event:
    # tailcut.signals.is_failed) and its attributes (an exception's type and message): what a failure text
    # reads. All as bytes, keys too: no UTF-8 check can fail a parse, and only spans with events read them.
    raw, pairs = _FIELD.TYPE_BYTES, (_FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.RawKeyValue")
    message("Status", [("message", 2, raw, optional, ""), ("code", 3, _FIELD.TYPE_INT32, optional, "")])
    message("Event", [("name", 2, raw, optional, ""), ("attributes", 3, *pairs)])
    message("RawKeyValue", [("key", 1, raw, optional, ""), ("value", 2, raw, optional, "")])
    # Only a span's trace_state (the writer restates it on slice-only spans): no attribute map is built.
    message("SpanTraceState", [("trace_state", 3, _FIELD.TYPE_BYTES, optional, "")])
    message(
        "ScopeSpans",
        [("scope", 1, _FIELD.TYPE_BYTES, optional, ""), ("spans", 2, _FIELD.TYPE_BYTES, repeated, "")],
    )
    message(
        "ResourceSpans",
        [
            ("resource", 1, _FIELD.TYPE_BYTES, optional, ""),
            ("scope_spans", 2, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.ScopeSpans"),
        ],
    )
    message(
        "Request",
        [("resource_spans", 1, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.ResourceSpans")],
    )
    # The same framing with each span read as a ``Span`` above: one parse gives every span's facts.
    message(
        "FactsScopeSpans",
        [("spans", 2, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.Span")],
    )
    message(
        "FactsResourceSpans",
        [("scope_spans", 2, _FIELD.TYPE_MESSAGE, repeated, ".tailcut.collector.lazy.FactsScopeSpans")],
    )
    message(
        "FactsRequest",
        [
            (
                "resource_spans",
                1,
                _FIELD.TYPE_MESSAGE,
                repeated,
                ".tailcut.collector.lazy.FactsResourceSpans",
            )
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    classes = message_factory.GetMessageClassesForFiles([file.name], pool)
    return (
        classes["tailcut.collector.lazy.Request"],
        classes["tailcut.collector.lazy.Span"],
        classes["tailcut.collector.lazy.FactsRequest"],
        classes["tailcut.collector.lazy.SpanTraceState"],
    )


#: ``ExportTraceServiceRequest`` framed down to per-span ``bytes`` (see the module docstring);
#: ``FactsRequest`` frames it the same way with every span a :data:`SpanFacts` (all facts in one parse);
#: ``SpanTraceState`` reads a span's ``trace_state`` alone.
FramedRequest, SpanFacts, FactsRequest, SpanTraceState = _build_lazy_types()


# --- request bodies -----------------------------------------------------------------------------------------
def content_kind(content_type: str) -> str:
    """``PROTOBUF`` or ``JSON`` for a ``Content-Type`` header value, else raise 415."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if media == JSON:
        return JSON
    raise OtlpError(
        415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Type {content_type!r}; use {PROTOBUF} or {JSON}"
    )


def decompress(body: bytes | bytearray, encoding: str, limit: int) -> bytes | bytearray:
    """The body after ``Content-Encoding`` (gzip, deflate or none), refused with 413 past ``limit`` bytes."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return body
    if name in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif name == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise OtlpError(
            415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Encoding {encoding!r}; use gzip"
        )
    parts: list[bytes] = []
    size = 0
    data = bytes(body)
    try:
        while data:  # gzip allows several members back to back
            inflater = zlib.decompressobj(wbits)
            chunk = inflater.decompress(data, limit - size + 1)
            size += len(chunk)
            if size > limit or inflater.unconsumed_tail:
                raise too_large(f"request body exceeds {limit} bytes after decompression")
            if not inflater.eof:
                raise bad_request(f"truncated {name} body")
            parts.append(chunk)
            data = inflater.unused_data
    except zlib.error as exc:
        raise bad_request(f"malformed {name} body: {exc}") from None
    return b"".join(parts)


def json_to_protobuf(body: bytes | bytearray) -> bytes:
    """An OTLP/JSON request re-encoded as protobuf (by :mod:`tailcut.exporters.wire.otlp_json`, the one
    JSON reader), so both encodings share one ingest path; a malformed one raises 400."""
    try:
        return json_request(loads(body, "JSON body"), where="OTLP/JSON body")
    except BadOtlpInput as exc:
        raise bad_request(f"malformed {exc}") from None


_VALIDATE = trace_service_pb2.ExportTraceServiceRequest.FromString


def parse_framed(body: bytes | bytearray) -> Message:
    """Frame a protobuf request (see :data:`FramedRequest`) once it is valid as a whole, or raise 400.

    The lazy types declare only part of OTLP, so on their own they would accept a span whose other
    fields (events, links, attribute values, UTF-8 of strings) are malformed, and the writer would
    fail on it after the request was acknowledged. The protobuf runtime parses the request with the
    real ``ExportTraceServiceRequest`` first (about 1 µs per span) and is the judge: a body is
    accepted exactly when it accepts it (``tests/test_fuzz_otlp.py`` holds the two to that).
    """
    try:
        _VALIDATE(body)
        return FramedRequest.FromString(body)
    except DecodeError as exc:
        raise bad_request(f"malformed protobuf body: {exc}") from None


def request_spans(
    body: bytes | bytearray,
) -> Iterator[tuple[bytes, bytes, Iterator[tuple[bytes, Message]]]]:
    """Each ``ScopeSpans`` of a request as its encoded resource and scope and its spans as
    ``(encoded span, its SpanFacts)``, once :func:`parse_framed` accepted the request as a whole.

    The facts of all spans come from one parse (:data:`FactsRequest`), not one parse per span.

    Raises
    ------
    OtlpError
        400 for a malformed body.
    """
    framed = parse_framed(body)
    facts = FactsRequest.FromString(body)
    for resource_spans, resource_facts in zip(framed.resource_spans, facts.resource_spans, strict=True):
        resource = resource_spans.resource
        for scope_spans, scope_facts in zip(
            resource_spans.scope_spans, resource_facts.scope_spans, strict=True
        ):
            yield resource, scope_spans.scope, zip(scope_spans.spans, scope_facts.spans, strict=True)


# --- responses ----------------------------------------------------------------------------------------------
def export_response(kind: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse``, with ``partial_success`` when spans were refused."""
    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == JSON:
        return json_format.MessageToJson(response, indent=None).encode()
    return response.SerializeToString()


def status_message(code: int, message: str, retry_after: float | None = None) -> status_pb2.Status:
    """A ``google.rpc.Status``, with a ``RetryInfo`` detail when a retry delay is given."""
    status = status_pb2.Status(code=code, message=message)
    if retry_after is not None:
        status.details.add().Pack(retry_info(retry_after))
    return status


def retry_info(seconds: float) -> error_details_pb2.RetryInfo:
    whole = int(seconds)
    return error_details_pb2.RetryInfo(
        retry_delay=Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))
    )


def status_body(kind: str, error: OtlpError) -> bytes:
    status = status_message(error.grpc_code, error.message, error.retry_after)
    if kind == JSON:
        return json_format.MessageToJson(status, indent=None).encode()
    return status.SerializeToString()
