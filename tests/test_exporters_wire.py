"""The wire decoder's attribute readers against each other and against the protobuf runtime.

Attributes are encoded by hand here, not by the runtime: lengths and integers as non-minimal varints, fields
in either order, repeated or missing, unknown fields, values of every type and truncated messages, so the
readers meet layouts the runtime never writes but a client may send.
"""

from __future__ import annotations

import contextlib
import math
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut.exporters._batch import BOOL, FLOAT, INT, STR
from tailcut.exporters._errors import BadOtlpInput
from tailcut.exporters.wire.columns import _any_key_values, _common_key_values, _scan, decode_resource_spans
from tailcut.exporters.wire.values import any_int, python_value
from tailcut.exporters.wire.varint import encode_varint, read_varint


def _varint(value: int, extra: int) -> bytes:
    """``value`` as a varint padded with up to ``extra`` redundant bytes (at most 10 bytes: still valid)."""
    encoded = bytearray(encode_varint(value & (2**64 - 1)))
    extra = min(extra, 10 - len(encoded))
    if extra:
        encoded[-1] |= 0x80
        encoded += b"\x80" * (extra - 1) + b"\x00"
    return bytes(encoded)


@st.composite
def _field(draw: st.DrawFn, number: int, payload: bytes) -> bytes:
    return (
        _varint(number << 3 | 2, 0) + _varint(len(payload), draw(st.sampled_from([0, 0, 0, 1, 2]))) + payload
    )


@st.composite
def encoded_any_value(draw: st.DrawFn) -> bytes:
    """An encoded ``AnyValue``: any scalar, bytes, an array, or empty."""
    padding = draw(st.sampled_from([0, 0, 1]))
    kind = draw(st.sampled_from(["str", "int", "bool", "double", "bytes", "array", "empty"]))
    if kind == "str":
        return draw(_field(1, draw(st.text(max_size=200)).encode()))
    if kind == "int":
        return b"\x18" + _varint(draw(st.integers(-(2**63), 2**63 - 1)), padding)
    if kind == "bool":
        return b"\x10" + _varint(draw(st.integers(0, 1)), padding)
    if kind == "double":
        return b"\x21" + struct.pack("<d", draw(st.floats(allow_nan=False)))
    if kind == "bytes":
        return draw(_field(7, draw(st.binary(max_size=20))))
    if kind == "array":
        return draw(_field(5, draw(_field(1, draw(_field(1, b"x"))))))
    return b""


@st.composite
def key_value(draw: st.DrawFn) -> bytes:
    """An encoded ``KeyValue`` the runtime accepts, in common or unusual layouts."""
    key = draw(_field(1, draw(st.text(max_size=150)).encode()))
    value = draw(_field(2, draw(encoded_any_value())))
    layout = draw(st.sampled_from(["key value", "key value", "value key", "key", "key key value"]))
    parts = {"key": key, "value": value}
    encoded = b"".join(parts[p] for p in layout.split())
    if draw(st.booleans()):
        encoded += draw(_field(15, b"unknown"))
    return encoded


def _buffer(messages: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The messages in one buffer padded as the decoder pads its own, and where each one is."""
    sizes = np.array([len(m) for m in messages], dtype=np.int64)
    end = 8 + np.cumsum(sizes)
    data = np.frombuffer(bytes(8) + b"".join(messages) + bytes(16), dtype=np.uint8)
    return data, end - sizes, end


@settings(max_examples=200, deadline=None)
@given(st.lists(key_value() | st.binary(max_size=40), min_size=1, max_size=30))
def test_the_common_layout_reads_what_the_general_reader_reads(messages: list[bytes]) -> None:
    """Wherever the two-word reader says a message fits, the general reader finds exactly the same."""
    data, start, end = _buffer(messages)
    fits, common = _common_key_values(data, start, end)
    general = _any_key_values(data, start, end)
    assert general.ok[fits].all()
    for name in ("key_start", "key_end", "vtype"):
        assert np.array_equal(getattr(common, name)[fits], getattr(general, name)[fits]), name
    vtype = general.vtype
    for name, types in (("str_start", [STR]), ("ints", [INT, BOOL]), ("floats", [FLOAT])):
        at = fits & np.isin(vtype, types)
        assert np.array_equal(getattr(common, name)[at], getattr(general, name)[at]), name


def _request(span: bytes) -> bytes:
    """An encoded ``ExportTraceServiceRequest`` holding one span (encoded by hand)."""
    for number in (2, 2, 1):  # Span in ScopeSpans in ResourceSpans in the request
        span = _varint(number << 3 | 2, 0) + _varint(len(span), 0) + span
    return span


@settings(max_examples=150, deadline=None)
@given(st.lists(key_value(), max_size=12))
def test_attributes_decode_as_the_protobuf_runtime_decodes_them(attributes: list[bytes]) -> None:
    """Every attribute of a span, however encoded, comes out as the runtime parses it."""
    head = b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8 + b"\x2a\x01s"
    span = head + b"".join(b"\x4a" + _varint(len(a), 0) + a for a in attributes)
    expected = [(kv.key, kv.value) for kv in Span.FromString(span).attributes]
    decoded = decode_resource_spans(_request(span)).attributes
    rows = np.arange(len(decoded))
    got = list(zip(decoded.key.to_pylist(), decoded.values(rows), strict=True))
    assert got == [(key, python_value(value)) for key, value in expected]


@pytest.mark.parametrize(
    "broken",
    [
        b"\x0a\x03key\x12\x05\x0a\x07abc",  # the string claims 7 bytes, the value holds 3
        b"\x00\x7f",  # not a key, and a length far past the end of the request
        b"\x0a\x7f",  # a key far longer than the request
    ],
)
def test_a_truncated_attribute_is_bad_input(broken: bytes) -> None:
    head = b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8
    span = head + b"\x4a" + _varint(len(broken), 0) + broken
    with pytest.raises(BadOtlpInput, match="attribute of span 0 is not valid protobuf"):
        decode_resource_spans(_request(span))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(key_value(), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_a_corrupted_request_is_decoded_or_bad_input_never_a_crash(
    attributes: list[bytes], flips: list[tuple[int, int]], cut: int
) -> None:
    """Any byte of a request overwritten, and the request cut short: rows, or :class:`BadOtlpInput`."""
    head = b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8 + b"\x2a\x01s\x39" + bytes(8)
    span = head + b"".join(b"\x4a" + _varint(len(a), 0) + a for a in attributes)
    request = bytearray(_request(span) * 2)
    for at, byte in flips:
        request[at % len(request)] = byte
    with contextlib.suppress(BadOtlpInput):
        decode_resource_spans(bytes(request[: len(request) - cut % len(request)]))


def test_payload_strings_and_long_integers_take_the_common_layout() -> None:
    """The runtime's own encoding of a payload (two-byte lengths) and of a token count (a varint of two or
    more bytes) is read by the two-word reader, with the values the general reader finds."""
    values = [AnyValue(string_value="x" * n) for n in (125, 126, 127, 300, 16_000)]
    values += [AnyValue(int_value=n) for n in (127, 128, 3000, -1, 2**63 - 1)] + [AnyValue(bool_value=True)]
    messages = [KeyValue(key="tailcut.request", value=v).SerializeToString() for v in values]
    data, start, end = _buffer(messages)
    fits, common = _common_key_values(data, start, end)
    general = _any_key_values(data, start, end)
    assert fits.all()
    for name in ("key_start", "key_end", "vtype", "ints"):
        assert np.array_equal(getattr(common, name), getattr(general, name)), name
    strings = general.vtype == STR
    assert strings.sum() == 5
    assert np.array_equal(common.str_start[strings], general.str_start[strings])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 9), st.binary(max_size=3))
def test_a_varint_reads_back_however_padded(value: int, extra: int, after: bytes) -> None:
    """The one reader gives the value and the position after it, for minimal and padded encodings."""
    encoded = _varint(value, extra)
    assert read_varint(b"\x07" + encoded + after, 1) == (value, 1 + len(encoded))
    assert AnyValue.FromString(b"\x18" + encoded).int_value == value - (value >= 2**63) * 2**64


def test_a_varint_cut_short_raises_index_error() -> None:
    with pytest.raises(IndexError):
        read_varint(encode_varint(300)[:1], 0)


@settings(max_examples=300, deadline=None)
@given(encoded_any_value())
@example(b"\x21" + struct.pack("<d", math.inf))
@example(b"\x21" + struct.pack("<d", math.nan))
def test_an_integer_attribute_reads_as_the_runtime_reads_it(raw: bytes) -> None:
    """``any_int``: integers exactly (the small-value table and the varint reader agree), finite doubles
    truncated, anything else (NaN and infinities too) 0."""
    value = AnyValue.FromString(raw)
    kind = value.WhichOneof("value")
    expected = {"int_value": value.int_value, "double_value": None}.get(kind, 0)
    if kind == "double_value":
        expected = int(value.double_value) if math.isfinite(value.double_value) else 0
    assert any_int(raw) == expected


@st.composite
def _any_field(draw: st.DrawFn) -> tuple[bytes, tuple[int, bytes] | None]:
    """One encoded field of any wire type (tags and lengths possibly padded), and ``(number, payload)``
    when it is length-delimited."""
    number = draw(st.integers(1, 2**29 - 1) | st.integers(1, 15))
    wire = draw(st.sampled_from([0, 1, 2, 5]))
    tag = _varint(number << 3 | wire, draw(st.sampled_from([0, 0, 1])))
    if wire == 0:
        return tag + _varint(draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 2))), None
    if wire in (1, 5):
        return tag + bytes(8 if wire == 1 else 4), None
    payload = draw(st.binary(max_size=300))
    return tag + _varint(len(payload), draw(st.sampled_from([0, 0, 1, 3]))) + payload, (number, payload)


@settings(max_examples=200, deadline=None)
@given(st.lists(_any_field(), max_size=20), st.binary(max_size=4))
def test_the_framing_scan_finds_every_length_delimited_field(
    fields: list[tuple[bytes, tuple[int, bytes] | None]], around: bytes
) -> None:
    """``_scan`` (how the decoder finds the spans of a ``ScopeSpans``) lists the length-delimited fields
    of a message in order, whatever their tags, lengths and the other fields between them."""
    message = b"".join(encoded for encoded, _ in fields)
    data = around + message + around
    number, start, end = _scan(data, len(around), len(around) + len(message), "a message")
    found = [(n, data[s:e]) for n, s, e in zip(number.tolist(), start.tolist(), end.tolist(), strict=True)]
    assert found == [wanted for _, wanted in fields if wanted is not None]


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_the_framing_scan_refuses_a_field_cut_short_or_of_an_unknown_wire_type(cut: int) -> None:
    message = b"\x12\x05hello" + b"\x12" + _varint(300, 0) + b"x" * 300
    with pytest.raises(BadOtlpInput, match="not valid protobuf"):
        _scan(message, 0, len(message) - cut, "a message")
    with pytest.raises(BadOtlpInput, match="wire type 3"):
        _scan(b"\x0b\x00", 0, 2, "a message")
