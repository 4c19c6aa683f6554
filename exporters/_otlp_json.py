"""OTLP/JSON (the protobuf JSON mapping OTLP specifies) as decoded span records.

The encoding differs from generic protobuf JSON in ways that matter here: trace and span ids are hex
strings (not base64), enums are integers, keys are lowerCamelCase, 64-bit integers may be strings. This is
the format of an OTLP/HTTP JSON request body and of each line the OpenTelemetry Collector's ``file``
exporter writes. Enum names (``"SPAN_KIND_CLIENT"``) are accepted too.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from tailcut.exporters._batch import ResourceInfo, SpanEvent, SpanLink, SpanRecord
from tailcut.exporters._errors import BadOtlpInput
from tailcut.exporters.wire.columns import SPAN_KINDS, STATUS_CODES

_KIND_NAMES: Final = {f"SPAN_KIND_{name}": name for name in SPAN_KINDS[1:]} | {
    "SPAN_KIND_UNSPECIFIED": "INTERNAL"
}
_STATUS_NAMES: Final = {f"STATUS_CODE_{name}": name for name in STATUS_CODES}
_SPECIAL_FLOATS: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _any_value(value: Any, where: str) -> Any:
    if not isinstance(value, Mapping):
        raise BadOtlpInput(f"{where}: an attribute value must be an object, got {type(value).__name__}")
    if not value:
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise BadOtlpInput(f"{where}: intValue {value['intValue']!r} is not an integer") from None
    if "doubleValue" in value:
        raw = value["doubleValue"]
        try:
            return _SPECIAL_FLOATS[raw] if isinstance(raw, str) and raw in _SPECIAL_FLOATS else float(raw)
        except (TypeError, ValueError):
            raise BadOtlpInput(f"{where}: doubleValue {raw!r} is not a number") from None
    if "arrayValue" in value:
        return [_any_value(v, where) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values", []), where)
    if "bytesValue" in value:
        try:
            raw = base64.b64decode(value["bytesValue"], validate=True)
        except (binascii.Error, TypeError):
            raise BadOtlpInput(f"{where}: bytesValue is not base64") from None
        return {"$bytes": base64.b64encode(raw).decode("ascii")}
    raise BadOtlpInput(f"{where}: unknown attribute value {sorted(value)}")


def attributes(items: Any, where: str) -> dict[str, Any]:
    """A JSON ``KeyValue`` list as a dict (a repeated key keeps its last value)."""
    if not isinstance(items, list):
        raise BadOtlpInput(f"{where}: attributes must be a list")
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise BadOtlpInput(f"{where}: an attribute needs a string key")
        out[item["key"]] = _any_value(item.get("value", {}), f"{where}, attribute {item['key']!r}")
    return out


def _hex_id(value: Any, digits: int, what: str, where: str, *, optional: bool = False) -> str | None:
    if optional and value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) != digits:
        raise BadOtlpInput(f"{where}: {what} must be {digits} hex digits, got {value!r}")
    text = value.lower()
    try:
        int(text, 16)
    except ValueError:
        raise BadOtlpInput(f"{where}: {what} must be {digits} hex digits, got {value!r}") from None
    if not optional and int(text, 16) == 0:
        raise BadOtlpInput(f"{where}: {what} must not be all zeros")
    return text


def _nanos(value: Any, what: str, where: str) -> int:
    try:
        result = int(value if value not in (None, "") else 0)
    except (TypeError, ValueError):
        raise BadOtlpInput(f"{where}: {what} {value!r} is not an integer") from None
    if result < 0:
        raise BadOtlpInput(f"{where}: {what} must not be negative")
    return result


def _enum(
    value: Any, names: Mapping[str, str], values: tuple[str, ...], default: str, what: str, where: str
) -> str:
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return values[value] if 0 <= value < len(values) else default
    if isinstance(value, str) and value in names:
        return names[value]
    raise BadOtlpInput(f"{where}: unknown {what} {value!r}")


def _span(span: Any, resource: ResourceInfo, scope_name: str | None, where: str) -> SpanRecord:
    if not isinstance(span, Mapping):
        raise BadOtlpInput(f"{where}: a span must be an object")
    trace_id = _hex_id(span.get("traceId"), 32, "traceId", where)
    span_id = _hex_id(span.get("spanId"), 16, "spanId", where)
    assert trace_id is not None and span_id is not None
    status = span.get("status") or {}
    start = _nanos(span.get("startTimeUnixNano"), "startTimeUnixNano", where)
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(span.get("parentSpanId"), 16, "parentSpanId", where, optional=True),
        name=str(span.get("name", "")),
        span_kind=_enum(span.get("kind"), _KIND_NAMES, SPAN_KINDS, "INTERNAL", "span kind", where),
        start_ns=start,
        end_ns=_nanos(span.get("endTimeUnixNano"), "endTimeUnixNano", where) or start,
        status_code=_enum(status.get("code"), _STATUS_NAMES, STATUS_CODES, "UNSET", "status code", where),
        status_message=status.get("message") or None,
        attributes=attributes(span.get("attributes", []), where),
        events=[
            SpanEvent(
                str(e.get("name", "")),
                _nanos(e.get("timeUnixNano"), "timeUnixNano", where),
                attributes(e.get("attributes", []), where),
            )
            for e in span.get("events", [])
        ],
        links=[
            SpanLink(
                _hex_id(x.get("traceId"), 32, "link traceId", where) or "",
                _hex_id(x.get("spanId"), 16, "link spanId", where) or "",
                attributes(x.get("attributes", []), where),
            )
            for x in span.get("links", [])
        ],
        resource=resource,
        scope_name=((span_scope := scope_name) and str(span_scope)) or None,
    )


def json_records(
    document: Any, *, where: str = "input", on_bad_span: Callable[[str], None] | None = None
) -> list[SpanRecord]:
    """The spans of one OTLP/JSON ``ExportTraceServiceRequest`` (or ``TracesData``) object.

    Parameters
    ----------
    document
        The parsed JSON object.
    where
        Names the input in error messages (e.g. ``"trace.json, line 3"``).
    on_bad_span
        Called with the problem of each malformed span, which is skipped; when None, it raises.

    Raises
    ------
    BadOtlpInput
        If the document is not OTLP/JSON (or, without ``on_bad_span``, a span is malformed).
    """
    if not isinstance(document, Mapping) or not isinstance(document.get("resourceSpans"), list):
        raise BadOtlpInput(f"{where}: not OTLP/JSON (expected an object with a resourceSpans list)")
    records: list[SpanRecord] = []
    for i, resource_spans in enumerate(document["resourceSpans"]):
        if not isinstance(resource_spans, Mapping):
            raise BadOtlpInput(f"{where}: resourceSpans[{i}] must be an object")
        resource = ResourceInfo.of(
            attributes((resource_spans.get("resource") or {}).get("attributes", []), where)
        )
        for scope_spans in resource_spans.get("scopeSpans", []):
            scope_name = (scope_spans.get("scope") or {}).get("name") or None
            for span in scope_spans.get("spans", []):
                try:
                    records.append(_span(span, resource, scope_name, where))
                except BadOtlpInput as exc:
                    if on_bad_span is None:
                        raise
                    on_bad_span(str(exc))
    return records
