"""Property tests of OTLP decoding: the lazy decoder against the protobuf runtime, OTLP/JSON and gzip.

``ExportTraceServiceRequest.FromString`` is the oracle: a body the collector accepts must be one it
accepts, with the same spans, and every body it refuses must be refused with 400 (never another error).
The longer, coverage-guided campaign over the same targets is ``fuzz/fuzz_collector.py`` (atheris).
"""

from __future__ import annotations

import gzip
import json
import zlib

from google.protobuf import json_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.collector._otlp import (
    JSON,
    OtlpError,
    content_kind,
    decompress,
    json_to_protobuf,
)
from tests.otlp_oracle import oracle_facts, span_facts
from tests.test_collector_helpers import attribute, export_request, span

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ids = st.binary(min_size=0, max_size=17)
values = st.one_of(
    st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans()
)


@st.composite
def requests(draw) -> bytes:
    """A valid ``ExportTraceServiceRequest`` with a few random spans."""
    spans = []
    for _ in range(draw(st.integers(0, 4))):
        item = span(
            draw(ids),
            draw(ids),
            draw(ids),
            name=draw(st.text(max_size=12)),
            error=draw(st.booleans()),
            start_ns=draw(st.integers(0, 2**63)),
            duration_ns=draw(st.integers(0, 2**32)),
        )
        item.attributes.extend(
            attribute(key, value)
            for key, value in draw(st.dictionaries(st.text(max_size=8), values, max_size=4)).items()
        )
        for _ in range(draw(st.integers(0, 2))):
            item.events.add(name=draw(st.text(max_size=6)), time_unix_nano=draw(st.integers(0, 2**63)))
        spans.append(item)
    return export_request(spans, service=draw(st.text(max_size=8)))


@st.composite
def mutated(draw, bodies=requests()) -> bytes:
    """A valid request with a few bytes flipped, inserted or deleted."""
    body = bytearray(draw(bodies))
    for _ in range(draw(st.integers(1, 4))):
        if not body:
            break
        position = draw(st.integers(0, len(body) - 1))
        operation = draw(st.sampled_from(["flip", "insert", "delete"]))
        if operation == "flip":
            body[position] = draw(st.integers(0, 255))
        elif operation == "insert":
            body.insert(position, draw(st.integers(0, 255)))
        else:
            del body[position]
    return bytes(body)


def outcome(function, *args):
    """``(None, value)`` when ``function`` returns, ``(http_status, None)`` when it refuses with OtlpError."""
    try:
        return None, function(*args)
    except OtlpError as error:
        return error.http_status, None


@FAST
@given(st.one_of(mutated(), requests(), st.binary(max_size=200)))
# Found by this test: a span event whose name is not UTF-8 was accepted (the lazy type skips events).
@example(bytes.fromhex("0a09120712055a031201ff"))
# A span name that is not UTF-8 (the lazy type reads the name as bytes).
@example(bytes.fromhex("0a0a120812062a04ffffffff"))
def test_lazy_decoder_agrees_with_the_protobuf_runtime(body):
    expected = oracle_facts(body)
    refused, facts = outcome(span_facts, body)
    if refused is not None:
        assert (refused, expected) == (400, None), "refused a body the protobuf runtime accepts"
    else:
        assert expected is not None, "accepted a body the protobuf runtime refuses"
        assert facts == expected


def otlp_json(body: bytes) -> bytes:
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for item in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = __import__("base64").b64decode(item[key]).hex()
    return json.dumps(document).encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "resourceSpans",
                    "scopeSpans",
                    "spans",
                    "traceId",
                    "spanId",
                    "name",
                    "attributes",
                    "key",
                    "value",
                    "stringValue",
                    "x",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@FAST
@given(st.one_of(json_values.map(lambda value: json.dumps(value).encode()), st.binary(max_size=100)))
def test_otlp_json_is_converted_or_refused_with_400(body):
    refused, converted = outcome(json_to_protobuf, body)
    assert refused == 400 or oracle_facts(converted) is not None


@FAST
@given(requests(), st.data())
def test_mutated_otlp_json_is_converted_or_refused_with_400(body, data):
    text = bytearray(otlp_json(body))
    for _ in range(data.draw(st.integers(0, 3))):
        position = data.draw(st.integers(0, len(text) - 1))
        text[position] = data.draw(st.sampled_from(b'{}[]",:0aZ\\ '))
    refused, converted = outcome(json_to_protobuf, bytes(text))
    assert refused == 400 or oracle_facts(converted) is not None
    assert content_kind("application/json; charset=utf-8") == JSON


LIMIT = 4096


@FAST
@given(st.binary(max_size=3000), st.sampled_from(["gzip", "deflate"]), st.data())
def test_compressed_bodies_decompress_exactly_or_are_refused(payload, encoding, data):
    compressed = bytearray(gzip.compress(payload) if encoding == "gzip" else zlib.compress(payload))
    damaged = data.draw(st.booleans())
    if damaged:
        position = data.draw(st.integers(0, len(compressed) - 1))
        compressed[position] ^= data.draw(st.integers(1, 255))
    refused, out = outcome(decompress, bytes(compressed), encoding, LIMIT)
    if refused is not None:
        assert refused in (400, 413) and (damaged or len(payload) > LIMIT)
    else:
        assert len(out) <= LIMIT
        assert damaged or out == payload


@FAST
@given(st.binary(max_size=300))
def test_random_bytes_as_gzip_never_escape_as_other_errors(body):
    refused, out = outcome(decompress, b"\x1f\x8b\x08\x00" + body, "gzip", LIMIT)
    assert refused in (400, 413) or len(out) <= LIMIT
