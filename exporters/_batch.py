"""Decoded spans in columns: what every input (SDK spans, OTLP protobuf, OTLP/JSON) becomes first.

Per-span fields are plain lists; attributes are one long table of (span, key, typed value) rows, so the
normaliser can pick columns out of them with array operations instead of a Python loop per attribute
(decoding a dozen attributes one by one costs more than writing the span to Parquet). The OTLP protobuf
decoder fills the attribute table straight from the wire bytes (:mod:`tailcut.exporters.wire.columns`); the
other inputs come as :class:`SpanRecord` objects through :meth:`DecodedSpans.from_records`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from tailcut import attributes as attr
from tailcut.canonical import canonical_json
from tailcut.exporters._errors import BadOtlpInput

# Attribute value types (``AttributeColumns.vtype``).
NONE: Final = 0
STR: Final = 1
BOOL: Final = 2
INT: Final = 3
FLOAT: Final = 4
OTHER: Final = 5  # arrays, key-value lists, bytes: kept as Python values in ``others``

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def value_text(value: Any) -> str | None:
    """An attribute value as the ``attributes`` map stores it: strings verbatim, the rest as JSON text."""
    if value is None or isinstance(value, str):
        return value
    return canonical_json(value)


class ResourceInfo(NamedTuple):
    """A decoded resource, shared by every span it produced (decode it once per ``ResourceSpans``)."""

    attributes: Mapping[str, Any]
    service_name: str | None

    @classmethod
    def of(cls, attributes: Mapping[str, Any]) -> ResourceInfo:
        name = attributes.get(attr.SERVICE_NAME)
        return cls(dict(attributes), name if isinstance(name, str) else None)


EMPTY_RESOURCE: Final = ResourceInfo({}, None)


class SpanEvent(NamedTuple):
    name: str
    time_ns: int
    attributes: Mapping[str, Any]


class SpanLink(NamedTuple):
    trace_id: str
    span_id: str
    attributes: Mapping[str, Any]


class SpanRecord(NamedTuple):
    """One span decoded to Python values (ids as lowercase hex, times as Unix nanoseconds)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    span_kind: str
    start_ns: int
    end_ns: int
    status_code: str
    status_message: str | None
    attributes: Mapping[str, Any]
    events: Sequence[SpanEvent]
    links: Sequence[SpanLink]
    resource: ResourceInfo
    scope_name: str | None


@dataclass
class AttributeColumns:
    """Every attribute of a batch as rows: ``span`` index, ``key`` and the value in the column of its type."""

    span: np.ndarray  # int32
    key: pa.Array  # string, or a dictionary of strings (the wire decoder's)
    vtype: np.ndarray  # int8, one of NONE..OTHER
    strs: pa.Array  # string (binary_view from the wire decoder); null unless vtype == STR
    ints: np.ndarray  # int64; the value when vtype is INT or BOOL
    floats: np.ndarray  # float64; the value when vtype is FLOAT
    others: dict[int, Any] = field(default_factory=dict)  # row -> value when vtype is OTHER

    def __len__(self) -> int:
        return len(self.vtype)

    @functools.cached_property
    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        return np.append(self.vtype, NONE), np.append(self.ints, 0)

    def vtype_at(self, rows: np.ndarray) -> np.ndarray:
        """Value types of ``rows``, NONE where a row is -1 (absent): -1 indexes the padding."""
        return self._padded[0][rows]

    def int_at(self, rows: np.ndarray) -> np.ndarray:
        """Integer values of ``rows``, 0 where a row is -1."""
        return self._padded[1][rows]

    def keys(self, rows: np.ndarray) -> pa.Array:
        """The keys of ``rows`` as a ``string`` array."""
        if pa.types.is_dictionary(self.key.type):
            return self.key.dictionary.take(self.key.indices.take(pa.array(rows)))
        return self.key.take(pa.array(rows))

    def texts(self, rows: np.ndarray) -> pa.Array:
        """The map text (see :func:`value_text`) of ``rows``, computed column-wise."""
        vtype = self.vtype[rows]
        parts = [take_strings(self.strs, np.where(vtype == STR, rows, -1))]
        is_int = vtype == INT
        if is_int.any():
            parts.append(pc.cast(pa.array(self.ints[rows], mask=~is_int), pa.string()))
        is_bool = vtype == BOOL
        if is_bool.any():
            parts.append(
                pa.array(np.where(self.ints[rows] != 0, "true", "false"), pa.string(), mask=~is_bool)
            )
        for code in (FLOAT, OTHER):
            at = np.flatnonzero(vtype == code)
            if not len(at):
                continue
            if code == FLOAT:
                # One orjson call for all floats: its text has no commas inside a number.
                values = orjson.dumps(self.floats[rows[at]].tolist()).decode()[1:-1].split(",")
            else:  # rows often share one decoded value (see _wire): its text is made once
                texts: dict[int, str | None] = {}
                values = []
                for r in rows[at].tolist():
                    value = self.others[r]
                    text = texts.get(id(value))
                    if text is None:
                        text = texts[id(value)] = value_text(value)
                    values.append(text)
            index = np.full(len(rows), -1, dtype=np.int64)
            index[at] = np.arange(len(at))
            parts.append(pa.array(values, pa.string()).take(pa.array(index, mask=index < 0)))
        return parts[0] if len(parts) == 1 else pc.coalesce(*parts)

    def values(self, rows: np.ndarray) -> list[Any]:
        """The Python values of ``rows``."""
        vtype = self.vtype[rows]
        strs = take_strings(self.strs, np.where(vtype == STR, rows, -1)).to_pylist()
        ints = self.ints[rows].tolist()
        floats = self.floats[rows].tolist()
        out: list[Any] = []
        for i, (t, row) in enumerate(zip(vtype.tolist(), rows.tolist(), strict=True)):
            if t == STR:
                out.append(strs[i])
            elif t == INT:
                out.append(ints[i])
            elif t == BOOL:
                out.append(ints[i] != 0)
            elif t == FLOAT:
                out.append(floats[i])
            elif t == OTHER:
                out.append(self.others[row])
            else:
                out.append(None)
        return out

    def subset(self, spans: np.ndarray) -> AttributeColumns:
        """The rows of the given spans, renumbered to their positions in ``spans``."""
        renumber = np.full(int(self.span.max(initial=-1)) + 1, -1, dtype=np.int64)
        renumber[spans] = np.arange(len(spans))
        rows = np.flatnonzero(renumber[self.span] >= 0) if len(self.span) else np.zeros(0, dtype=np.int64)
        return AttributeColumns(
            span=renumber[self.span[rows]].astype(np.int32),
            key=self.key.take(pa.array(rows)),
            vtype=self.vtype[rows],
            strs=take_strings(self.strs, rows),
            ints=self.ints[rows],
            floats=self.floats[rows],
            others={
                int(new): self.others[old] for new, old in enumerate(rows.tolist()) if old in self.others
            },
        )


#: The view of an empty string (what a null slot holds).
_EMPTY_VIEW: Final = np.zeros(1, dtype="V16")


def wire_text(views: pa.Array) -> pa.Array:
    """Strings read from the wire (a ``binary_view`` array) as a ``string`` array, checked to be UTF-8.

    Raises
    ------
    BadOtlpInput
        If one is not UTF-8 (the protobuf runtime rejects such a string field too).
    """
    try:
        # Through ``binary``: a copy, then a check in place; faster than the direct cast, which does both
        # at once (pyarrow 26).
        return views.cast(pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        raise BadOtlpInput("a string field of a span is not valid UTF-8") from None


def take_strings(array: pa.Array, index: np.ndarray) -> pa.Array:
    """``array[index]`` as a ``string`` array, null where ``index`` is -1.

    A ``binary_view`` array (what the wire decoder makes) is gathered view by view with numpy, so the
    long values it points at are copied once, by the final cast (:func:`wire_text`), not by every
    selection.
    """
    if not len(array) or not (index >= 0).any():
        return pa.nulls(len(index), pa.string())
    if array.type == pa.binary_view():
        buffers = array.buffers()
        # A view is 16 opaque bytes: gathered as one numpy "V16" item each (much faster than 4 ints).
        views = np.frombuffer(buffers[1], dtype="V16")[array.offset : array.offset + len(array)]
        at = np.maximum(index, 0)
        valid = index >= 0
        if array.null_count:  # read the validity bits of the picked views only
            bit = array.offset + at
            byte = np.frombuffer(buffers[0], dtype=np.uint8)[bit >> 3]
            valid &= ((byte >> (bit & 7).astype(np.uint8)) & 1).astype(bool)
        picked = views[at]
        np.putmask(picked, ~valid, _EMPTY_VIEW)
        null_count = int(len(index) - np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
        gathered = pa.Array.from_buffers(
            pa.binary_view(),
            len(index),
            [validity, pa.py_buffer(picked), *buffers[2:]],
            null_count=null_count,
        )
        return wire_text(gathered)
    return array.take(pa.array(index, mask=index < 0))


class _AttributeBuilder:
    """Collects attribute rows from Python values (the SDK and OTLP/JSON paths)."""

    def __init__(self) -> None:
        self.span: list[int] = []
        self.key: list[str] = []
        self.vtype: list[int] = []
        self.strs: list[str | None] = []
        self.ints: list[int] = []
        self.floats: list[float] = []
        self.others: dict[int, Any] = {}

    def add(self, span: int, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            row = len(self.key)
            self.span.append(span)
            self.key.append(key)
            text, integer, number = None, 0, 0.0
            if isinstance(value, str):
                vtype, text = STR, value
            elif isinstance(value, bool):
                vtype, integer = BOOL, int(value)
            elif isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
                vtype, integer = INT, value
            elif isinstance(value, float):
                vtype, number = FLOAT, value
            elif value is None:
                vtype = NONE
            else:
                vtype = OTHER
                self.others[row] = list(value) if isinstance(value, tuple) else value
            self.vtype.append(vtype)
            self.strs.append(text)
            self.ints.append(integer)
            self.floats.append(number)

    def build(self) -> AttributeColumns:
        return AttributeColumns(
            span=np.array(self.span, dtype=np.int32),
            key=pa.array(self.key, pa.string()),
            vtype=np.array(self.vtype, dtype=np.int8),
            strs=pa.array(self.strs, pa.string()),
            ints=np.array(self.ints, dtype=np.int64),
            floats=np.array(self.floats, dtype=np.float64),
            others=self.others,
        )


@dataclass
class DecodedSpans:
    """A batch of spans in columns (see the module docstring); index ``i`` is the ``i``-th span."""

    trace_id: pa.Array  # string, 32 lowercase hex digits
    span_id: pa.Array  # string, 16 lowercase hex digits
    parent_span_id: pa.Array  # string, null for a root
    name: pa.Array
    span_kind: pa.Array
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray
    status_code: pa.Array
    status_message: pa.Array
    #: The distinct resources of the batch, and per span the index of its resource.
    resources: list[ResourceInfo]
    resource_index: np.ndarray
    scope_name: pa.Array
    #: Events and links of the spans that have any (most have none).
    events: dict[int, Sequence[SpanEvent]]
    links: dict[int, Sequence[SpanLink]]
    attributes: AttributeColumns
    #: The ids as numbers, one row per span: trace id (two big-endian words), span id, parent id (0: none).
    id_keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.uint64))

    def __len__(self) -> int:
        return len(self.span_id)

    def subset(self, spans: np.ndarray) -> DecodedSpans:
        """The given spans only (in that order)."""
        take = pa.array(spans, pa.int64())
        new_index = {int(old): new for new, old in enumerate(spans.tolist())}
        return DecodedSpans(
            trace_id=self.trace_id.take(take),
            span_id=self.span_id.take(take),
            parent_span_id=self.parent_span_id.take(take),
            name=self.name.take(take),
            span_kind=self.span_kind.take(take),
            start_ns=self.start_ns[spans],
            end_ns=self.end_ns[spans],
            status_code=self.status_code.take(take),
            status_message=self.status_message.take(take),
            resources=self.resources,
            resource_index=self.resource_index[spans],
            scope_name=self.scope_name.take(take),
            events={new_index[i]: e for i, e in self.events.items() if i in new_index},
            links={new_index[i]: x for i, x in self.links.items() if i in new_index},
            attributes=self.attributes.subset(spans),
            id_keys=self.id_keys[spans],
        )

    @classmethod
    def from_records(cls, records: Iterable[SpanRecord]) -> DecodedSpans:
        """Columns from decoded span records."""
        records = list(records)
        builder = _AttributeBuilder()
        resources: list[ResourceInfo] = []
        index_of: dict[int, int] = {}
        resource_index = np.empty(len(records), dtype=np.int64)
        for i, record in enumerate(records):
            builder.add(i, record.attributes)
            k = index_of.get(id(record.resource))
            if k is None:
                k = index_of[id(record.resource)] = len(resources)
                resources.append(record.resource)
            resource_index[i] = k

        def strings(values: Iterable[str | None]) -> pa.Array:
            return pa.array(list(values), pa.string())

        trace_id = strings(r.trace_id for r in records)
        span_id = strings(r.span_id for r in records)
        parent_span_id = strings(r.parent_span_id for r in records)
        return cls(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_span_id,
            name=strings(r.name for r in records),
            span_kind=strings(r.span_kind for r in records),
            start_ns=np.array([r.start_ns for r in records], dtype=np.int64),
            end_ns=np.array([r.end_ns for r in records], dtype=np.int64),
            status_code=strings(r.status_code for r in records),
            status_message=strings(r.status_message for r in records),
            resources=resources,
            resource_index=resource_index,
            scope_name=strings(r.scope_name for r in records),
            events={i: tuple(r.events) for i, r in enumerate(records) if r.events},
            links={i: tuple(r.links) for i, r in enumerate(records) if r.links},
            attributes=builder.build(),
            id_keys=np.column_stack(
                [hex_words(trace_id, 32), hex_words(span_id, 16), hex_words(parent_span_id, 16)]
            ),
        )


_NIBBLE: Final = np.full(256, 255, dtype=np.uint8)
_NIBBLE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)


def hex_words(ids: pa.Array, digits: int) -> np.ndarray:
    """Lowercase hex ids as rows of unsigned 64-bit words, big-endian (numeric order is the text's order).

    Null ids read as zero. Raises ValueError for an id that is not ``digits`` lowercase hex digits.
    """
    ids = ids.cast(pa.string()).fill_null("0" * digits)
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset : ids.offset + len(ids) + 1]
    if not (np.diff(offsets) == digits).all():
        raise ValueError(f"ids must be {digits} hex digits")
    text = np.frombuffer(ids.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(
        -1, digits
    )
    nibbles = _NIBBLE[text]
    if (nibbles > 15).any():
        raise ValueError(f"ids must be {digits} lowercase hex digits")
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return packed.view(">u8").astype(np.uint64).reshape(len(ids), digits // 16)
