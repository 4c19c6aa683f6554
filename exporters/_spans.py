"""The normalisation entry points: spans from any source in, ``spans`` table rows out."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.trace import ReadableSpan

from tailcut.exporters._normalize import normalize
from tailcut.exporters._sdk import decode_sdk_spans
from tailcut.exporters.wire.columns import decode_resource_spans


def normalize_otlp(
    resource_spans: Iterable[ResourceSpans] | bytes, *, on_bad_span: Callable[[str], None] | None = None
) -> pa.Table:
    """``spans`` rows for OTLP protobuf spans (e.g. ``request.resource_spans`` of an export request).

    Pass whole traces: tree columns are computed per trace over the spans given (a span whose parent is
    not among them is an orphan). Rows come sorted by trace id, then ``span_index``.

    Parameters
    ----------
    resource_spans
        Protobuf ``ResourceSpans`` messages, or an encoded ``ExportTraceServiceRequest``/``TracesData``
        (faster when the caller holds the bytes anyway: nothing is parsed or serialised twice).
    on_bad_span
        Called with the problem of each span with malformed ids, which is skipped (default: raise).

    Returns
    -------
    pyarrow.Table
        With the :data:`~tailcut.exporters.schema.SPANS` schema.

    Raises
    ------
    BadOtlpInput
        If a span is not valid protobuf, or (without ``on_bad_span``) has malformed ids.

    See Also
    --------
    normalize_sdk : the same for spans of the OpenTelemetry SDK.
    """
    return normalize(decode_resource_spans(resource_spans, on_bad_span=on_bad_span))


def normalize_sdk(spans: Iterable[ReadableSpan]) -> pa.Table:
    """``spans`` rows for OpenTelemetry SDK spans (what a ``SpanExporter`` receives).

    See Also
    --------
    normalize_otlp : the same for OTLP protobuf spans, with the same rules.
    """
    return normalize(decode_sdk_spans(spans))
