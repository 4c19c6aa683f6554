"""Decode OTLP protobuf spans into columns straight from the wire bytes, all spans at once.

Walking spans through the protobuf runtime costs about a microsecond per attribute (a Python object for
every ``KeyValue`` and ``AnyValue``), more than writing the span to Parquet. So each ``ResourceSpans`` is
serialised once and the spans are located in the bytes (:func:`_scan`); then :func:`fields` parses every
span in lockstep with numpy, one protobuf field per step for all spans together, and the attributes
(``KeyValue`` with their ``AnyValue``) are read with array arithmetic. Strings become Arrow string views
pointing into the raw buffer, so long payloads are never copied into Python objects. Rare parts (events,
links, array and key-value-list values) are decoded by the protobuf runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from tailcut.exporters._batch import (
    BOOL,
    FLOAT,
    INT,
    NONE,
    OTHER,
    STR,
    AttributeColumns,
    DecodedSpans,
    ResourceInfo,
    SpanEvent,
    SpanLink,
    wire_text,
)
from tailcut.exporters._errors import BadOtlpInput
from tailcut.exporters.wire.values import key_values, python_value
from tailcut.exporters.wire.varint import read_varint

SPAN_KINDS: Final = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")  # 0 = unspecified
STATUS_CODES: Final = ("UNSET", "OK", "ERROR")
#: Byte -> its two lowercase hex digits, as the little-endian 16-bit word holding them.
_HEX_DIGITS: Final = np.array(
    [int.from_bytes(f"{b:02x}".encode(), "little") for b in range(256)], dtype="<u2"
)
_PADDING: Final = bytes(16)
_Message = TypeVar("_Message", bound=Message)
#: By wire type: the size of a fixed-size field, and whether protobuf defines the type (3 and 4, groups,
#: are obsolete and never used by OTLP).
_FIXED_SIZES: Final = np.array([0, 8, 0, 0, 0, 4, 0, 0], dtype=np.int64)
_KNOWN_WIRE_TYPES: Final = np.array([True, True, True, False, False, True, False, False])


def _view_masks() -> np.ndarray:
    """By string length (13: any longer), which of the 16 bytes read for its view are kept (one ``V16``
    item each): the inline bytes of a short string, the 4-byte prefix of a long one (see
    :func:`_string_views`)."""
    keep = np.zeros((14, 16), dtype=np.uint8)
    for size in range(13):
        keep[size, 4 : 4 + size] = 0xFF
    keep[13, 4:8] = 0xFF
    return keep.view("V16").ravel()


_VIEW_KEEP: Final = _view_masks()
#: By the first byte of an ``AnyValue``: the scalar it holds when that byte is the whole tag (string, bool,
#: int, double).
_TAG_TYPES: Final = np.full(256, OTHER, dtype=np.int8)
_TAG_TYPES[[0x0A, 0x10, 0x18, 0x21]] = [STR, BOOL, INT, FLOAT]


def _value_shapes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """By ``LV | tag << 8`` (a ``KeyValue``'s one-byte value length, and the ``AnyValue``'s tag): the type
    of the value when that length suits the tag, and the range the byte after the tag must be in (a
    string's length, the one byte of a small integer; an empty range: no fit). See
    :func:`_common_key_values`."""
    lv, tag = np.arange(1 << 16) & 0xFF, np.arange(1 << 16) >> 8
    vtype = np.full(1 << 16, OTHER, dtype=np.int8)
    low, high = np.ones(1 << 16, dtype=np.uint8), np.zeros(1 << 16, dtype=np.uint8)
    for shape, kind, first in (
        (lv == 0, NONE, (0, 0xFF)),
        ((tag == 0x0A) & (lv >= 2) & (lv < 0x80), STR, (lv - 2, lv - 2)),
        ((tag == 0x10) & (lv == 2), BOOL, (0, 0x7F)),
        ((tag == 0x18) & (lv == 2), INT, (0, 0x7F)),
        ((tag == 0x21) & (lv == 9), FLOAT, (0, 0xFF)),
    ):
        vtype[shape] = kind
        low[shape] = np.broadcast_to(first[0], shape.shape)[shape]
        high[shape] = np.broadcast_to(first[1], shape.shape)[shape]
    return vtype, low, high


_SHAPE_TYPES, _SHAPE_LOW, _SHAPE_HIGH = _value_shapes()
#: By ``LV | tag << 8``: whether the tag is a boolean's or an integer's (whose varint may be long).
_SHAPE_VARINTS: Final = np.isin(np.arange(1 << 16) >> 8, [0x10, 0x18])


class Fields(NamedTuple):
    """The fields found in a set of messages: field ``j`` is field ``number[j]`` of message ``owner[j]``."""

    owner: np.ndarray  # int64, index of the message
    number: np.ndarray  # int64, field number
    value: np.ndarray  # int64, the value of a varint field
    start: np.ndarray  # int64, where a length-delimited or fixed-size field's bytes start
    end: np.ndarray  # int64, and end

    def select(self, number: int, *, by_message: bool = False) -> Fields:
        """The fields numbered ``number``; with ``by_message``, each message's together (messages in index
        order, fields in wire order), as :func:`fields` leaves them step by step."""
        at = np.flatnonzero(self.number == number)
        if by_message:
            at = at[np.argsort(self.owner[at], kind="stable")]
        return Fields(*(column[at] for column in self))


def varints(data: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One varint at each position: ``(value, position after it, well formed)``.

    Values are int64 (a 10-byte varint of a negative int64 wraps to the right two's complement value).
    ``data`` must extend at least ``max_bytes`` past every position (the decoder pads its buffer).
    """
    byte = data[pos]
    value = (byte & 0x7F).astype(np.int64)
    after = pos + 1
    more = np.flatnonzero(byte & 0x80)
    for k in range(1, max_bytes):
        if not len(more):
            break
        byte = data[after[more]]
        value[more] |= (byte & 0x7F).astype(np.int64) << (7 * k)
        after[more] += 1
        more = more[(byte & 0x80) != 0]
    well_formed = np.ones(len(pos), dtype=bool)
    well_formed[more] = False
    return value, after, well_formed


def fields(data: np.ndarray, start: np.ndarray, end: np.ndarray, what: str) -> Fields:
    """Parse the top-level fields of every message ``data[start[i]:end[i]]``, all messages in lockstep.

    Fields come out step by step (every message's first field, then every second field, ...); use
    ``select(number, by_message=True)`` to list each message's fields together.

    Raises
    ------
    BadOtlpInput
        If a message is not valid protobuf (``what`` names the message type in the error).
    """
    found: list[tuple[np.ndarray, ...]] = []
    owner = np.flatnonzero(start < end)
    pos = start[owner]
    limit = end[owner]
    while len(owner):
        tag, pos, ok = varints(data, pos, 5)
        number = tag >> 3
        wire = tag & 7
        value = np.zeros(len(owner), dtype=np.int64)
        field_start = pos
        field_end = pos + _FIXED_SIZES[wire]
        if (is_varint := wire == 0).any():
            at = _selection(is_varint)
            value[at], field_end[at], good = varints(data, pos[at], 10)
            ok[at] &= good
        if (is_bytes := wire == 2).any():
            at = _selection(is_bytes)
            field_start = pos.copy()
            length, field_start[at], good = varints(data, pos[at], 5)
            field_end[at] = field_start[at] + length
            ok[at] &= good
        ok &= _KNOWN_WIRE_TYPES[wire] & (number > 0) & (field_end <= limit)
        if not ok.all():
            bad = int(np.argmin(ok))
            raise BadOtlpInput(
                f"{what} {int(owner[bad])} is not valid protobuf (malformed field at byte {int(pos[bad])})"
            )
        found.append((owner, number, value, field_start, field_end))
        more = field_end < limit
        owner, pos, limit = owner[more], field_end[more], limit[more]
    if not found:
        empty = np.zeros(0, dtype=np.int64)
        return Fields(empty, empty, empty, empty, empty)
    return Fields(*(np.concatenate(column) for column in zip(*found, strict=True)))


def _selection(mask: np.ndarray) -> slice | np.ndarray:
    """Where ``mask`` holds, to index with: everywhere (the usual step) is the free ``slice(None)``."""
    return slice(None) if mask.all() else np.flatnonzero(mask)


def _words(data: np.ndarray, dtype: str) -> np.ndarray:
    """``data`` as overlapping little-endian words: ``_words(data, "<u8")[i]`` is bytes ``i..i+7``."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((len(data) - size + 1,), dtype=dtype, buffer=data, strides=(1,))


def _string_views(
    buffer: pa.Buffer, data: np.ndarray, start: np.ndarray, end: np.ndarray, valid: np.ndarray
) -> pa.Array:
    """Arrow ``binary_view`` values pointing at ``data[start:end]`` (null where not ``valid``); they
    become strings through :func:`~tailcut.exporters._batch.wire_text`, which checks them.

    A view is 16 bytes: the length (4, little-endian), then either the string itself zero padded (up to
    12 bytes) or its first 4 bytes, the buffer index (0) and the offset. Each view is read whole as the 16
    bytes from 4 before its start, the bytes that are not the string's masked off, and the length (and a
    long string's offset) written over the rest. ``data`` must extend 12 bytes past every start, and every
    valid string start at byte 4 or later (an OTLP string is nested in at least two messages).
    """
    count = len(start)
    null_count = int(count - np.count_nonzero(valid))
    if null_count:
        length, at = np.where(valid, end - start, 0), np.where(valid, start - 4, 0)
    else:
        length, at = end - start, start - 4
    views = np.ndarray((len(data) - 15,), dtype="V16", buffer=data, strides=(1,))[at]
    views.view("<u8")[:] &= _VIEW_KEEP[np.minimum(length, 13)].view("<u8")
    halves = views.view("<u4").reshape(count, 4)
    halves[:, 0] = length
    np.copyto(halves[:, 3], start, casting="unsafe", where=length > 12)
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary_view(), count, [validity, pa.py_buffer(views), buffer], null_count=null_count
    )


def _hex(ids: np.ndarray, valid: np.ndarray) -> pa.Array:
    """Ids given as rows of big-endian words (see :func:`_id_keys`) as lowercase hex strings.

    Null where not ``valid``. Each byte becomes its two hex digits with one table lookup.
    """
    size = ids.shape[1] * 8
    text = _HEX_DIGITS[ids.astype(">u8").view(np.uint8)]
    offsets = np.arange(0, 2 * size * (len(ids) + 1), 2 * size, dtype=np.int32)
    null_count = int(len(ids) - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.string(), len(ids), [validity, pa.py_buffer(offsets), pa.py_buffer(text)], null_count=null_count
    )


class _KeyValues(NamedTuple):
    """Where the parts of a set of encoded ``KeyValue`` messages are, and their scalar values."""

    ok: np.ndarray  # bool: the key is well formed (where not, the row is left to the protobuf runtime)
    key_start: np.ndarray  # int64
    key_end: np.ndarray  # int64
    vtype: np.ndarray  # int8, NONE..OTHER (OTHER: left to the protobuf runtime)
    str_start: np.ndarray  # int64, where a string value starts (it ends with the message)
    ints: np.ndarray  # int64, the value of an INT or BOOL
    floats: np.ndarray  # float64, the value of a FLOAT


def _common_key_values(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, _KeyValues]:
    """``(fits, parts)``: the messages laid out as nearly every attribute is, read with two words each.

    That layout is ``0a LK key 12 LV value`` with a one-byte key length and either a one-byte value
    length, the value empty, a string of fewer than 128 bytes, an integer or boolean, or a double; or a
    two-byte value length and a string (a payload: ``12 LV LV 0a SL [SL] text``, one more word read).
    ``parts`` holds where ``fits``.
    """
    words = _words(data, "<u4")
    head = words[start]  # 0a LK, then the key
    key_start = start + 2
    key_end = key_start + ((head >> 8) & 0xFF)
    keyed = ((head & 0x80FF) == 0x0A) & (key_end + 2 <= end)
    body = words[np.where(keyed, key_end, start)]  # 12 LV, then the AnyValue's tag and first byte
    value_start = key_end + 2
    framed = keyed & ((body & 0x80FF) == 0x12) & (value_start + ((body >> 8) & 0xFF) == end)
    shape = (body >> 8) & 0xFFFF  # LV | tag << 8
    first = body >> 24
    vtype = _SHAPE_TYPES[shape]
    fits = framed & (first >= _SHAPE_LOW[shape]) & (first <= _SHAPE_HIGH[shape])
    ints = np.where((vtype == INT) | (vtype == BOOL), first.astype(np.int64), 0)
    long_ints = np.flatnonzero(framed & (first >= 0x80) & _SHAPE_VARINTS[shape])
    if len(long_ints):  # an integer of 128 or more (token counts): a varint of several bytes
        number, after, good = varints(data, value_start[long_ints] + 1, 10)
        good &= after == end[long_ints]
        at = long_ints[good]
        fits[at] = True
        vtype[at] = _TAG_TYPES[shape[at] >> 8]
        ints[at] = number[good]
    str_start = value_start + 2
    long = np.flatnonzero(keyed & ((body & 0xFF8080FF) == 0x0A008012))  # 12, two-byte LV, then 0a
    if len(long):
        value_length = ((body[long] >> 8) & 0x7F) | ((body[long] >> 9) & 0x3F80)
        text = _words(data, "<u2")[key_end[long] + 4]  # the string's length, one or two bytes
        one_byte = (text & 0x80) == 0
        text_length = np.where(one_byte, text & 0xFF, (text & 0x7F) | ((text >> 1) & 0x3F80))
        header = np.where(one_byte, 2, 3)  # the tag and the length
        good = (
            (one_byte | ((text & 0x8000) == 0))
            & (key_end[long] + 3 + value_length == end[long])
            & (value_length == header + text_length)
        )
        at = long[good]
        fits[at] = True
        vtype[at] = STR
        str_start[at] = key_end[at] + 3 + header[good]
    is_float = np.flatnonzero(fits & (vtype == FLOAT))
    floats = np.zeros(len(start), dtype=np.float64)
    floats[is_float] = _words(data, "<f8")[value_start[is_float] + 1]
    return fits, _KeyValues(fits, key_start, key_end, vtype, str_start, ints, floats)


def _any_key_values(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> _KeyValues:
    """The parts of ``KeyValue`` messages in any valid layout the arrays can read (any varint lengths)."""
    count = len(start)
    ok = (end > start) & (data[start] == 0x0A)
    key_length, key_start, good = varints(data, start + 1, 3)
    ok &= good & (key_start + key_length <= end)
    key_end = np.minimum(key_start + key_length, end)  # a key running past its message is not read
    has_value = key_end < end
    value_length, value_start, good = varints(data, key_end + 1, 5)
    ok &= ~has_value | ((data[key_end] == 0x12) & good & (value_start + value_length == end))
    present = has_value & (value_length > 0)
    tag = np.where(ok & present, data[value_start], 0)

    vtype = np.full(count, OTHER, dtype=np.int8)
    vtype[ok & ~present] = NONE
    str_start = np.zeros(count, dtype=np.int64)
    candidates = np.flatnonzero(tag == 0x0A)
    length, after, good = varints(data, value_start[candidates] + 1, 5)
    fits = good & (after + length == end[candidates])
    vtype[candidates[fits]] = STR
    str_start[candidates[fits]] = after[fits]
    ints = np.zeros(count, dtype=np.int64)
    candidates = np.flatnonzero((tag == 0x18) | (tag == 0x10))
    number, after, good = varints(data, value_start[candidates] + 1, 10)
    fits = good & (after == end[candidates])
    vtype[candidates[fits]] = np.where(tag[candidates[fits]] == 0x18, INT, BOOL)
    ints[candidates[fits]] = number[fits]
    floats = np.zeros(count, dtype=np.float64)
    candidates = np.flatnonzero((tag == 0x21) & (value_start + 9 == end))
    vtype[candidates] = FLOAT
    floats[candidates] = _words(data, "<f8")[value_start[candidates] + 1]
    return _KeyValues(ok, key_start, key_end, vtype, str_start, ints, floats)


def _attributes(buffer: pa.Buffer, data: np.ndarray, kv: Fields) -> AttributeColumns:
    """Columns of the ``KeyValue`` messages at ``kv`` (span field 9, grouped by span).

    The runtime writes a ``KeyValue`` as key then value, and an ``AnyValue`` as one tagged field; that
    layout is read with array arithmetic and checked, first in its common form (short key and value,
    :func:`_common_key_values`), then, for the rows that do not fit, in general (:func:`_any_key_values`).
    Rows neither fits (arrays, key-value lists, bytes, any other valid encoding) are parsed by the
    protobuf runtime.
    """
    start, end = kv.start, kv.end
    fits, parts = _common_key_values(data, start, end)
    rest = np.flatnonzero(~fits)
    if len(rest):
        for column, general in zip(parts, _any_key_values(data, start[rest], end[rest]), strict=True):
            column[rest] = general
    ok, key_start, key_end, vtype, str_start, ints, floats = parts

    # Keys repeat: encoded to a dictionary as views, only the distinct ones are made (and checked) strings.
    views = pc.dictionary_encode(_string_views(buffer, data, key_start, key_end, ok))
    keys = pa.DictionaryArray.from_arrays(views.indices, wire_text(views.dictionary))
    strs = _string_views(buffer, data, str_start, end, vtype == STR)
    others: dict[int, Any] = {}
    slow = np.flatnonzero(vtype == OTHER)
    if len(slow):
        dictionary = keys.dictionary.to_pylist()
        codes = {key: code for code, key in enumerate(dictionary)}
        valid = keys.indices.is_valid().to_numpy(zero_copy_only=False).copy()
        indices = keys.indices.fill_null(0).to_numpy(zero_copy_only=False).copy()
        #: Encoded ``KeyValue`` -> (key, value): the same array (a trace's sampling policies, say) recurs
        #: on many spans, and is decoded once (the rows then share the value, which nothing modifies).
        decoded: dict[bytes, tuple[str, Any]] = {}
        for row, s, e in zip(slow.tolist(), start[slow].tolist(), end[slow].tolist(), strict=True):
            raw = data[s:e].tobytes()
            found = decoded.get(raw)
            if found is None:
                try:
                    parsed = KeyValue.FromString(raw)
                except DecodeError as exc:
                    raise BadOtlpInput(
                        f"attribute of span {int(kv.owner[row])} is not valid protobuf: {exc}"
                    ) from None
                found = decoded[raw] = (parsed.key, python_value(parsed.value))
            code = codes.get(found[0])
            if code is None:
                code = codes[found[0]] = len(dictionary)
                dictionary.append(found[0])
            indices[row], others[row] = code, found[1]
            valid[row] = True
            if found[1] is None:
                vtype[row] = NONE
        keys = pa.DictionaryArray.from_arrays(
            pa.array(indices, pa.int32(), mask=~valid), pa.array(dictionary, pa.string())
        )
    return AttributeColumns(
        span=kv.owner.astype(np.int32),
        key=keys,
        vtype=vtype,
        strs=strs,
        ints=ints,
        floats=floats,
        others=others,
    )


def _status(buffer: pa.Buffer, data: np.ndarray, status: Fields, count: int) -> tuple[pa.Array, pa.Array]:
    """Status codes and messages (spans without a status field are ``UNSET``)."""
    code = np.zeros(count, dtype=np.int64)
    message_start = np.zeros(count, dtype=np.int64)
    message_end = np.zeros(count, dtype=np.int64)
    if len(status.owner):
        parts = fields(data, status.start, status.end, "status")
        owner = status.owner[parts.owner]
        is_code = parts.number == 3
        code[owner[is_code]] = parts.value[is_code]
        is_message = parts.number == 2
        message_start[owner[is_message]] = parts.start[is_message]
        message_end[owner[is_message]] = parts.end[is_message]
    codes = pa.array(STATUS_CODES, pa.string()).take(pa.array(np.where((code >= 0) & (code < 3), code, 0)))
    messages = _string_views(buffer, data, message_start, message_end, message_end > message_start)
    return codes, wire_text(messages)


def _rare(data: np.ndarray, found: Fields, parse: Callable[[bytes], Any]) -> dict[int, list[Any]]:
    """Per span that has any, its parsed repeated sub-messages (events, links)."""
    out: dict[int, list[Any]] = {}
    for owner, s, e in zip(found.owner.tolist(), found.start.tolist(), found.end.tolist(), strict=True):
        out.setdefault(owner, []).append(parse(data[s:e].tobytes()))
    return out


def _parse(message: type[_Message], raw: bytes, what: str) -> _Message:
    """``raw`` parsed as ``message`` by the protobuf runtime (the parts too rare to decode with arrays)."""
    try:
        return message.FromString(raw)
    except DecodeError as exc:
        raise BadOtlpInput(f"{what} is not valid protobuf: {exc}") from None


def _event(raw: bytes) -> SpanEvent:
    event = _parse(Span.Event, raw, "a span event")
    return SpanEvent(event.name, event.time_unix_nano, key_values(event.attributes))


def _link(raw: bytes) -> SpanLink:
    link = _parse(Span.Link, raw, "a span link")
    return SpanLink(link.trace_id.hex(), link.span_id.hex(), key_values(link.attributes))


def _scan(data: bytes, start: int, end: int, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(field numbers, starts, ends)`` of the length-delimited fields of one message, in order.

    Used for the few containers with many fields (a ``ScopeSpans`` holds thousands of spans), where the
    lockstep walk of :func:`fields` would take one step per span. The loop runs once per field, so it
    does the least it can: a one-byte tag of a length-delimited field (every field of these messages, in
    practice) is checked in place and only its length is read; any other field is read in full.
    """
    found: list[int] = []  # number, start and end of each length-delimited field, flat
    add = found.append
    pos = start
    try:
        while pos < end:
            tag = data[pos]
            if tag & 0x87 == 2:  # a one-byte tag of a length-delimited field
                length, field_start = read_varint(data, pos + 1)
            else:  # a long tag, or another wire type
                tag, pos = read_varint(data, pos)
                wire = tag & 7
                if wire == 0:
                    pos = read_varint(data, pos)[1]
                    continue
                if wire in (1, 5):
                    pos += 8 if wire == 1 else 4
                    continue
                if wire != 2:
                    raise BadOtlpInput(f"{what} is not valid protobuf (wire type {wire} at byte {pos})")
                length, field_start = read_varint(data, pos)
            pos = field_start + length
            add(tag >> 3)
            add(field_start)
            add(pos)
    except IndexError:
        raise BadOtlpInput(f"{what} is not valid protobuf (truncated)") from None
    if pos != end:
        raise BadOtlpInput(f"{what} is not valid protobuf (a field runs past its end)")
    number, field_start, field_end = np.array(found, dtype=np.int64).reshape(-1, 3).T
    return number, field_start, field_end


def _split(
    resource_spans: Iterable[ResourceSpans] | bytes,
) -> tuple[bytes, np.ndarray, np.ndarray, list[ResourceInfo], np.ndarray, pa.Array]:
    """Find every span in the encoded messages (serialising them first unless given encoded).

    Returns the bytes (padded), each span's start and end offset, the distinct resources, each span's
    resource index and each span's scope name.
    """
    # One copy into a padded buffer: the padding lets every varint and string-view read run past the
    # last span unchecked.
    if isinstance(resource_spans, bytes | bytearray | memoryview):
        data = b"".join((resource_spans, _PADDING))
        size = len(data) - len(_PADDING)
        number, field_start, field_end = _scan(data, 0, size, "the OTLP request")
        messages = list(zip(field_start[number == 1].tolist(), field_end[number == 1].tolist(), strict=True))
    else:
        encoded = [m.SerializeToString() for m in resource_spans]
        ends = np.cumsum([len(m) for m in encoded], dtype=np.int64).tolist()
        messages = list(zip([0, *ends[:-1]], ends, strict=True))
        encoded.append(_PADDING)
        data = b"".join(encoded)
    span_starts: list[np.ndarray] = []
    span_ends: list[np.ndarray] = []
    resources: list[ResourceInfo] = []
    per_resource: list[int] = []
    scope_names: list[str | None] = []
    per_scope: list[int] = []
    for message_start, message_end in messages:
        attributes: dict[str, Any] = {}
        spans = 0
        outer = _scan(data, message_start, message_end, "a ResourceSpans message")
        for number, s, e in zip(*(column.tolist() for column in outer), strict=True):
            if number == 1:
                attributes = key_values(_parse(Resource, data[s:e], "a resource").attributes)
            elif number == 2:
                inner, field_start, field_end = _scan(data, s, e, "a ScopeSpans message")
                scope_name = None
                is_scope = inner == 1
                for a, b in zip(field_start[is_scope].tolist(), field_end[is_scope].tolist(), strict=True):
                    scope_name = _parse(InstrumentationScope, data[a:b], "a scope").name or None
                is_span = inner == 2
                span_starts.append(field_start[is_span])
                span_ends.append(field_end[is_span])
                scope_names.append(scope_name)
                per_scope.append(len(span_starts[-1]))
                spans += per_scope[-1]
        resources.append(ResourceInfo.of(attributes))
        per_resource.append(spans)
    scopes = pa.array(scope_names, pa.string()).take(
        pa.array(np.repeat(np.arange(len(per_scope)), per_scope))
    )
    empty = np.zeros(0, dtype=np.int64)
    return (
        data,
        np.concatenate([empty, *span_starts]),
        np.concatenate([empty, *span_ends]),
        resources,
        np.repeat(np.arange(len(resources)), per_resource),
        scopes,
    )


def decode_resource_spans(
    resource_spans: Iterable[ResourceSpans] | bytes, *, on_bad_span: Callable[[str], None] | None = None
) -> DecodedSpans:
    """Decode ``ResourceSpans`` messages into one column batch.

    Parameters
    ----------
    resource_spans
        Protobuf ``ResourceSpans`` (from an ``ExportTraceServiceRequest`` or ``TracesData``), or an encoded
        ``ExportTraceServiceRequest``/``TracesData`` (cheaper: nothing to serialise).
    on_bad_span
        Called with a description of each span whose ids are malformed, which is then skipped; when None,
        such a span raises :class:`BadOtlpInput`.

    Raises
    ------
    BadOtlpInput
        If a span is not valid protobuf, or (without ``on_bad_span``) has malformed ids.
    """
    joined, span_start, span_end, resources, resource_index, scopes = _split(resource_spans)
    count = len(span_start)
    buffer = pa.py_buffer(joined)
    data = np.frombuffer(buffer, dtype=np.uint8)
    found = fields(data, span_start, span_end, "span")
    # Where each singular field of each span is (Span's field numbers are 1..16): one scatter for all,
    # leaving out the attributes (field 9, repeated, most of the fields; read by ``select``).
    singular = np.flatnonzero((found.number <= 16) & (found.number != 9))
    at_field = np.full((count, 17), -1, dtype=np.int64)
    at_field.reshape(-1)[found.owner[singular] * 17 + found.number[singular]] = singular

    def single(number: int, column: np.ndarray) -> np.ndarray:
        """Per span, ``column`` (of ``found``) for its field ``number``; 0 where the span has none."""
        at = at_field[:, number]
        if not len(column):  # no span has any field
            return np.zeros(count, dtype=np.int64)
        return np.where(at >= 0, column[at], 0)  # (-1 reads the last entry, discarded)

    trace_start, trace_end = single(1, found.start), single(1, found.end)
    span_start, span_end = single(2, found.start), single(2, found.end)
    parent_start = single(4, found.start)
    parent_length = single(4, found.end) - parent_start
    has_parent = parent_length == 8
    ids = _id_keys(data, trace_start, span_start, np.where(has_parent, parent_start, -1))
    good = (
        (trace_end - trace_start == 16)
        & (span_end - span_start == 8)
        & (has_parent | (parent_length == 0))
        & ((ids[:, 0] | ids[:, 1]) != 0)
        & (ids[:, 2] != 0)
    )
    if not good.all():
        problems = [
            f"span {i}: trace_id must be 16 and span_id 8 non-zero bytes, parent_span_id empty or 8 bytes"
            for i in np.flatnonzero(~good).tolist()
        ]
        if on_bad_span is None:
            raise BadOtlpInput(problems[0])
        for problem in problems:
            on_bad_span(problem)
    kind = single(6, found.value)
    kinds = pa.array(SPAN_KINDS, pa.string()).take(pa.array(np.where(kind < len(SPAN_KINDS), kind, 0)))
    times = [np.where(at_field[:, n] >= 0, _words(data, "<i8")[single(n, found.start)], 0) for n in (7, 8)]
    status_codes, status_messages = _status(buffer, data, found.select(15), count)
    decoded = DecodedSpans(
        trace_id=_hex(ids[:, :2], np.ones(count, dtype=bool)),
        span_id=_hex(ids[:, 2:3], np.ones(count, dtype=bool)),
        parent_span_id=_hex(ids[:, 3:], has_parent),
        name=wire_text(
            _string_views(
                buffer, data, single(5, found.start), single(5, found.end), np.ones(count, dtype=bool)
            )
        ),
        span_kind=kinds,
        start_ns=times[0],
        end_ns=times[1],
        status_code=status_codes,
        status_message=status_messages,
        resources=resources,
        resource_index=resource_index,
        scope_name=scopes,
        events=_rare(data, found.select(11), _event),
        links=_rare(data, found.select(13), _link),
        attributes=_attributes(buffer, data, found.select(9, by_message=True)),
        id_keys=ids,
    )
    return decoded if good.all() else decoded.subset(np.flatnonzero(good))


def _id_keys(data: np.ndarray, trace: np.ndarray, span: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """The ids as big-endian numbers (see ``DecodedSpans.id_keys``); ``parent`` is -1 for none.

    Read once, they also give the hex ids and the all-zero checks.
    """
    words = _words(data, ">u8")
    parent_key = np.where(parent >= 0, words[np.maximum(parent, 0)], 0).astype(np.uint64)
    return np.column_stack([words[trace], words[trace + 8], words[span], parent_key]).astype(np.uint64)
