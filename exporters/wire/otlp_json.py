"""OTLP/JSON into the encoded protobuf request: the one JSON reader of the collector and of ``ingest``.

OTLP/JSON is protobuf's JSON mapping with deviations (OTLP specification, "JSON Protobuf Encoding"):
trace and span ids are case-insensitive hex, not base64, in every message that has them (spans, links);
enums are integers; keys are lowerCamelCase; unknown fields must be ignored; 64-bit integers may be
decimal strings. The protobuf runtime's ``json_format`` does everything but the ids, so the ids are
turned into base64 first and ``json_format`` parses the rest, then the request is encoded: JSON and
protobuf input share one decoding path from there on (the collector's lazy decoder, the column decoder).
Being liberal in what it accepts, it also takes enum names and the original snake_case field names,
as ``json_format`` does.

Limits: nesting past :data:`MAX_DEPTH` messages (``json_format``'s recursion limit; the protobuf
runtime's own for binary input is the same) and JSON nested past orjson's 1024 levels are refused, each
with one :class:`~tailcut.exporters.BadOtlpInput`; the size of a request is the caller's to bound (the
collector refuses bodies over its limit after decompression). An id that is not hex of its size is
refused here, with where it is; a missing or all-zero one is valid JSON of an invalid span, refused per
span where binary input's are (the collector's partial success, the column decoder's ``on_bad_span``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut.exporters._errors import BadOtlpInput

#: Nesting depth (in messages) past which a document is refused: ``json_format``'s default.
MAX_DEPTH: Final = 100
#: Id fields and their sizes in bytes, by both the JSON name (lowerCamelCase) and the original name
#: (which ``json_format`` accepts too).
_RESOURCE_SPANS: Final = ("resourceSpans", "resource_spans")
_SCOPE_SPANS: Final = ("scopeSpans", "scope_spans")
_LINK_IDS: Final = {"traceId": 16, "trace_id": 16, "spanId": 8, "span_id": 8}
_SPAN_IDS: Final = {**_LINK_IDS, "parentSpanId": 8, "parent_span_id": 8}


def loads(text: bytes | bytearray | str, where: str) -> Any:
    """``text`` parsed as JSON, or :class:`BadOtlpInput` naming where it is malformed."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadOtlpInput(
            f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def json_request(
    document: Any, *, where: str = "input", on_bad_span: Callable[[str], None] | None = None
) -> bytes:
    """The OTLP/JSON ``ExportTraceServiceRequest`` (or ``TracesData``: the same shape) ``document`` as an
    encoded ``ExportTraceServiceRequest``.

    Parameters
    ----------
    document
        The parsed JSON object (``document`` itself is not modified).
    where
        Names the input in error messages (``"trace.json, line 3"``).
    on_bad_span
        Called with the problem of each span that is malformed (its ids, or a field ``json_format``
        refuses), which is then left out; when None, such a span raises.

    Raises
    ------
    BadOtlpInput
        If the document is not an OTLP/JSON object (or, without ``on_bad_span``, a span is malformed).
    """
    if not isinstance(document, Mapping):
        raise BadOtlpInput(f"{where}: not OTLP/JSON (expected an object with resourceSpans)")
    converted = _with_binary_ids(document, where, on_bad_span)
    request = ExportTraceServiceRequest()
    try:
        _parse(converted, request)
    except BadOtlpInput as exc:
        if on_bad_span is None:
            raise BadOtlpInput(f"{where}: {exc}") from None
        request = _span_by_span(converted, where, on_bad_span)
    return request.SerializeToString()


def _parse(document: Mapping[str, Any], message: Any) -> None:
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True, max_recursion_depth=MAX_DEPTH)
    except (json_format.ParseError, RecursionError) as exc:
        raise BadOtlpInput(f"not valid OTLP/JSON: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _span_by_span(document: Mapping[str, Any], where: str, on_bad_span: Callable[[str], None]) -> Any:
    """The request parsed one span at a time (after the whole failed), leaving out each span that
    ``json_format`` refuses; raises if the rest of the document (what holds the spans) is malformed."""
    spans: dict[tuple[int, int], list[Any]] = {}

    def without_spans(i: int, j: int, scope_spans: Any) -> Any:
        if isinstance(scope_spans, Mapping) and isinstance(scope_spans.get("spans"), list):
            spans[i, j] = scope_spans["spans"]
            return {key: value for key, value in scope_spans.items() if key != "spans"}
        return scope_spans

    frame = _each(
        document,
        _RESOURCE_SPANS,
        lambda i, resource_spans: _each(
            resource_spans, _SCOPE_SPANS, lambda j, scope_spans: without_spans(i, j, scope_spans)
        ),
    )
    request = ExportTraceServiceRequest()
    try:
        _parse(frame, request)
    except BadOtlpInput as exc:
        raise BadOtlpInput(f"{where}: {exc}") from None
    for (i, j), items in spans.items():
        kept = request.resource_spans[i].scope_spans[j].spans
        for k, item in enumerate(items):
            parsed = Span()
            try:
                if not isinstance(item, Mapping):
                    raise BadOtlpInput("a span must be an object")
                _parse(item, parsed)
            except BadOtlpInput as exc:
                on_bad_span(f"{where}: resourceSpans[{i}].scopeSpans[{j}].spans[{k}]: {exc}")
                continue
            kept.append(parsed)
    return request


def _with_binary_ids(
    document: Mapping[str, Any], where: str, on_bad_span: Callable[[str], None] | None
) -> dict[str, Any]:
    """A copy of ``document`` whose span and link ids are base64, as ``json_format`` reads ``bytes``.

    Only the containers on the way to an id are copied. A span with a bad id is left out and reported to
    ``on_bad_span``, or raises without it.
    """

    def span(path: str, item: Any) -> Any:
        try:
            return _span_ids(item)
        except BadOtlpInput as exc:
            problem = f"{where}: {path}: {exc}"
            if on_bad_span is None:
                raise BadOtlpInput(problem) from None
            on_bad_span(problem)
            return _LEFT_OUT

    return _each(
        document,
        _RESOURCE_SPANS,
        lambda i, resource_spans: _each(
            resource_spans,
            _SCOPE_SPANS,
            lambda j, scope_spans: _each(
                scope_spans,
                ("spans",),
                lambda k, item: span(f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]", item),
            ),
        ),
    )


_LEFT_OUT: Final = object()


def _each(container: Any, keys: tuple[str, ...], convert: Callable[[int, Any], Any]) -> Any:
    """``container`` copied with every item of its lists under ``keys`` converted (those converted to
    ``_LEFT_OUT`` left out); anything not an object is returned as it is, for ``json_format`` to judge."""
    if not isinstance(container, Mapping):
        return container
    out = dict(container)
    for key in keys:
        items = container.get(key)
        if isinstance(items, list):
            converted = (convert(n, item) for n, item in enumerate(items))
            out[key] = [item for item in converted if item is not _LEFT_OUT]
    return out


def _span_ids(span: Any) -> Any:
    """``span`` (and its links) with base64 ids; anything not an object is left for ``json_format``."""
    if not isinstance(span, Mapping):
        return span
    converted = _ids(span, _SPAN_IDS, "")
    links = span.get("links")
    if isinstance(links, list):
        converted["links"] = [
            _ids(link, _LINK_IDS, "link ") if isinstance(link, Mapping) else link for link in links
        ]
    return converted


def _ids(item: Mapping[str, Any], fields: Mapping[str, int], what: str) -> dict[str, Any]:
    out = dict(item)
    for key, size in fields.items():
        value = item.get(key)
        if value is None or value == "":
            continue  # absent or empty: refused (or, for a parent, accepted) where ids are checked
        if not isinstance(value, str):
            raise BadOtlpInput(f"{what}{key} {value!r} is not hex")
        try:
            raw = binascii.unhexlify(value)
        except (binascii.Error, ValueError):
            raise BadOtlpInput(f"{what}{key} {value!r} is not hex") from None
        if len(raw) != size:
            raise BadOtlpInput(f"{what}{key} {value!r} is not {size} bytes of hex")
        out[key] = base64.b64encode(raw).decode("ascii")
    return out
