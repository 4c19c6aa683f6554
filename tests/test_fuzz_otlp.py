"""Property tests of OTLP decoding: the lazy decoder against the protobuf runtime, OTLP/JSON and gzip.

``ExportTraceServiceRequest.FromString`` is the oracle: a body the collector accepts must be one it
accepts, with the same spans, and every body it refuses must be refused with 400 (never another error).
The longer, coverage-guided campaign over the same targets is ``fuzz/fuzz_collector.py`` (atheris).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import zlib

import pytest
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
from tailcut.exporters import BadOtlpInput
from tailcut.exporters.wire.otlp_json import MAX_DEPTH, json_request, loads
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


# --- the one OTLP/JSON reader (tailcut.exporters.wire.otlp_json), used by the collector and ingest ------
def otlp_json_document(body: bytes, *, upper: bool = False) -> dict:
    """A request as OTLP/JSON: protobuf's JSON mapping with hex span and link ids (OTLP specification)."""
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for item in scope_spans.get("spans", []):
                for holder in [item, *item.get("links", [])]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            text = base64.b64decode(holder[key]).hex()
                            holder[key] = text.upper() if upper else text
    return document


def read_json(document, where="input", on_bad_span=None):
    """``(request, None)`` when the JSON reader reads ``document``, ``(None, message)`` when it refuses it
    with BadOtlpInput."""
    try:
        encoded = json_request(document, where=where, on_bad_span=on_bad_span)
    except BadOtlpInput as exc:
        return None, str(exc)
    return ExportTraceServiceRequest.FromString(encoded), None


@st.composite
def well_formed_requests(draw) -> bytes:
    """A valid request whose ids have their OTLP sizes (so its OTLP/JSON form is valid too), with links."""
    message = ExportTraceServiceRequest.FromString(draw(requests()))
    for resource_spans in message.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for item in scope_spans.spans:
                item.trace_id = draw(st.binary(min_size=16, max_size=16))
                item.span_id = draw(st.binary(min_size=8, max_size=8))
                item.parent_span_id = draw(st.sampled_from([b"", *[bytes([n]) * 8 for n in range(1, 4)]]))
                item.kind = draw(st.integers(0, 5))
                for _ in range(draw(st.integers(0, 2))):
                    item.links.add(trace_id=bytes(range(16)), span_id=bytes(range(8)), trace_state="x=1")
    return message.SerializeToString()


@FAST
@given(well_formed_requests(), st.booleans())
def test_otlp_json_reads_back_as_the_protobuf_request_it_came_from(body, upper):
    """Differential: the JSON reader gives the very request protobuf's own JSON printer started from,
    hex ids in either case (the specification makes them case-insensitive)."""
    document = otlp_json_document(body, upper=upper)
    assert ExportTraceServiceRequest.FromString(
        json_request(document)
    ) == ExportTraceServiceRequest.FromString(body)


def test_otlp_json_quirks_enum_names_and_numbers_string_integers_and_unknown_fields():
    span_json = {
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "eee19b7ec3c1b174",
        "name": "x",
        "kind": "SPAN_KIND_CLIENT",
        "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": 1544712661000000000,
        "status": {"code": 2},
        "attributes": [
            {"key": "n", "value": {"intValue": "42"}},
            {"key": "d", "value": {"doubleValue": "NaN"}},
        ],
        "someFutureField": {"nested": True},
    }
    request = ExportTraceServiceRequest.FromString(
        json_request({"resourceSpans": [{"scopeSpans": [{"spans": [span_json]}]}], "future": 1})
    )
    (item,) = request.resource_spans[0].scope_spans[0].spans
    assert item.trace_id.hex() == "5b8efff798038103d269b633813fc60c" and item.kind == 3
    assert item.start_time_unix_nano == 1544712660000000000 and item.status.code == 2
    assert item.attributes[0].value.int_value == 42 and math.isnan(item.attributes[1].value.double_value)


def _nested_array(depth: int) -> dict:
    value: dict = {"stringValue": "leaf"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


def _one_span(value: dict) -> dict:
    item = {"traceId": "01" * 16, "spanId": "02" * 8, "attributes": [{"key": "k", "value": value}]}
    return {"resourceSpans": [{"scopeSpans": [{"spans": [item]}]}]}


def test_nesting_past_the_limit_is_one_bad_input_error_not_a_crash():
    assert json_request(_one_span(_nested_array(40)))
    with pytest.raises(BadOtlpInput, match=r"^input: not valid OTLP/JSON: .*deep") as deep:
        json_request(_one_span(_nested_array(MAX_DEPTH)))
    assert "\n" not in str(deep.value)
    with pytest.raises(BadOtlpInput, match="invalid JSON"):
        loads(b"[" * 5000 + b"]" * 5000, "input")
    refused, _ = outcome(json_to_protobuf, json.dumps(_one_span(_nested_array(MAX_DEPTH))).encode())
    assert refused == 400


def test_a_bad_span_is_left_out_and_named_the_others_kept():
    good = _one_span({"intValue": "7"})["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    bad_value = {**good, "spanId": "03" * 8, "attributes": [{"key": "k", "value": {"intValue": "seven"}}]}
    bad_id = {**good, "spanId": "xyz"}
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [good, bad_value, bad_id]}]}]}
    with pytest.raises(
        BadOtlpInput, match=r"^f: resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[2\]: spanId 'xyz'"
    ):
        json_request(document, where="f")
    problems: list[str] = []
    request = ExportTraceServiceRequest.FromString(
        json_request(document, where="f", on_bad_span=problems.append)
    )
    assert [s.span_id.hex() for s in request.resource_spans[0].scope_spans[0].spans] == ["02" * 8]
    assert problems[0].startswith("f: resourceSpans[0].scopeSpans[0].spans[2]: spanId 'xyz' is not hex")
    assert problems[1].startswith("f: resourceSpans[0].scopeSpans[0].spans[1]: not valid OTLP/JSON")
    assert len(problems) == 2


@FAST
@given(json_values, st.booleans())
def test_any_json_is_read_or_refused_with_bad_input_never_a_crash(document, skip_bad):
    """Whatever the document, the reader returns a request the protobuf runtime parses, or raises
    BadOtlpInput with a one-line message; with ``on_bad_span`` the problems it reports are one line each."""
    problems: list[str] = []
    request, refused = read_json(document, on_bad_span=problems.append if skip_bad else None)
    assert (request is None) != (refused is None)
    assert all("\n" not in message for message in [*problems, refused or ""])


@FAST
@given(well_formed_requests(), st.data())
def test_mutated_otlp_json_documents_are_read_or_refused_never_a_crash(body, data):
    """Values swapped for other JSON anywhere in a valid document: a request or BadOtlpInput."""
    document = otlp_json_document(body)

    def mutate(node):
        if data.draw(st.integers(0, 9)) == 0:
            return data.draw(json_values)
        if isinstance(node, dict):
            return {key: mutate(value) for key, value in node.items()}
        if isinstance(node, list):
            return [mutate(value) for value in node]
        return node

    mutated = mutate(document)
    for on_bad_span in (None, lambda _: None):
        request, refused = read_json(mutated, on_bad_span=on_bad_span)
        assert (request is None) != (refused is None) and "\n" not in (refused or "")


def test_skipping_bad_spans_never_drops_a_malformed_frame_silently():
    """With ``on_bad_span``, only spans are left out: a malformed resource or scope still refuses the
    document (it is one bad record), so nothing vanishes without a problem reported."""
    problems: list[str] = []
    for frame in ({"scopeSpans": "x"}, {"resource": 3, "scopeSpans": []}, {"scopeSpans": [{"scope": 1}]}):
        request, refused = read_json({"resourceSpans": [frame]}, on_bad_span=problems.append)
        assert request is None and refused.startswith("input: not valid OTLP/JSON: "), frame
    assert problems == []
