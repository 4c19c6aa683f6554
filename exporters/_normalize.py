"""Turn a batch of decoded spans into rows of the ``spans`` table, column by column.

The mapping (kinds, column sources, rebuilt payloads) is tabulated in
:mod:`tailcut.exporters.conventions.mapping`; this module applies it to a whole batch with array
operations. Spans that carry ``tailcut.kind`` (the SDK's own) take the array path only; spans from other
instrumentations also go through :func:`~tailcut.exporters.conventions.mapping.resolve_kind` and the payload
rebuild one by one, since their content is spread over many attributes. Tree columns come from
:mod:`._tree`; rows come out sorted by trace id, then ``span_index``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailcut import attributes as attr
from tailcut.exporters import schema
from tailcut.exporters._batch import INT, OTHER, STR, AttributeColumns, DecodedSpans, take_strings, value_text
from tailcut.exporters._pricing import _PER_TOKEN, default_pricing
from tailcut.exporters._signals import ID_KEYS
from tailcut.exporters._tree import TreeShape, tree_shape
from tailcut.exporters.conventions import names as n
from tailcut.exporters.conventions.mapping import (
    COLUMN_SOURCES,
    DUPLICATES,
    KIND_KEYS,
    REQUEST_TYPE_OPERATIONS,
    Source,
    resolve_kind,
    source_value,
    synthetic_boundary,
)
from tailcut.exporters.conventions.messages import CONTENT_EVENTS, is_content_key, rebuild
from tailcut.signals import NESTED_CALL_KIND, is_preparation_span

_KIND_CODE: Final = {kind: code for code, kind in enumerate(attr.KINDS)}
_KIND_NAMES: Final = pa.array(attr.KINDS, pa.string())
_NESTED: Final = _KIND_CODE[NESTED_CALL_KIND]
_OTHER_KIND: Final = _KIND_CODE["other"]
_DEFAULT_OPERATION: Final = np.array(
    [None if kind == "other" else attr.OPERATION_FOR_KIND[kind] for kind in attr.KINDS], dtype=object
)
_INT32_COLUMNS: Final = frozenset({"occurrence", "seq", "attempt"})
_STRING_COLUMNS: Final = (
    "provider",
    "model",
    "operation",
    "finish_reason",
    "tool_name",
    "tool_call_id",
    "agent_name",
    "error_type",
    "boundary",
    "request_sha256",
    "response_sha256",
)
_INTEGER_COLUMNS: Final = {
    "input_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    "occurrence": pa.int32(),
    "seq": pa.int32(),
    "attempt": pa.int32(),
}
#: Every key the array path reads.
_LOOKUP_KEYS: Final = frozenset(
    [*KIND_KEYS, n.LLM_REQUEST_TYPE, *DUPLICATES, *ID_KEYS.values()]
    + [s.key for sources in COLUMN_SOURCES.values() for s in sources]
)


class _Lookup:
    """Where each interesting key sits for each span: ``rows(key)[span]`` is an attribute row or -1.

    Only the keys present in the batch get a row in the table (tailcut's own spans carry few of the many
    fallback keys), so a caller can skip every absent key with :meth:`has`.
    """

    def __init__(self, a: AttributeColumns, count: int) -> None:
        encoded = pc.dictionary_encode(a.key)
        self.codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        names = encoded.dictionary.to_pylist()
        self._slot = {key: i for i, key in enumerate(k for k in names if k in _LOOKUP_KEYS)}
        slot_of_code = np.array([self._slot.get(name, -1) for name in names] + [-1], dtype=np.int64)
        slots = slot_of_code[self.codes]
        self._table = np.full((len(self._slot), count), -1, dtype=np.int64)
        hit = np.flatnonzero(slots >= 0)
        self._table[slots[hit], a.span[hit]] = hit  # a repeated key: the last row wins
        self._absent = np.full(count, -1, dtype=np.int64)
        self._absent.flags.writeable = False

    def has(self, key: str) -> bool:
        """Whether any span of the batch has attribute ``key``."""
        return key in self._slot

    def rows(self, key: str) -> np.ndarray:
        slot = self._slot.get(key)
        return self._absent if slot is None else self._table[slot]


class _Text:
    """A string column in storage order; Python-level edits (third-party spans) switch it to a list."""

    def __init__(self, array: pa.Array, position: np.ndarray) -> None:
        self.array = array
        self._position = position
        self._list: list[Any] | None = None

    def values(self) -> list[Any]:
        if self._list is None:
            self._list = self.array.to_pylist()
        return self._list

    def __getitem__(self, span: int) -> Any:
        return self.values()[self._position[span]]

    def __setitem__(self, span: int, value: Any) -> None:
        self.values()[self._position[span]] = value

    def finish(self) -> pa.Array:
        return self.array if self._list is None else pa.array(self._list, pa.string())


class _Columns:
    """Picks each column's value from its sources (in order) and records the attribute rows consumed."""

    def __init__(self, a: AttributeColumns, lookup: _Lookup, kind: np.ndarray, order: np.ndarray) -> None:
        self.a = a
        self.lookup = lookup
        self.kind = kind
        self.order = order
        self.position = np.empty(len(order), dtype=np.int64)
        self.position[order] = np.arange(len(order))
        self.consumed = np.zeros(len(a), dtype=bool)
        #: Row of an ``OTHER`` value a ``strs`` source accepted -> ``(the string it gives, whole)``.
        self._strings: dict[int, tuple[Any, bool]] = {}

    def _fits(self, rows: np.ndarray, source: Source, column: str) -> np.ndarray:
        a = self.a
        present = rows >= 0
        vtype = a.vtype_at(rows)
        if source.type == "int":
            ok = vtype == INT
            if column in _INT32_COLUMNS:
                ok &= (a.int_at(rows) >= -(2**31)) & (a.int_at(rows) < 2**31)
        else:
            ok = vtype == STR
            if source.type == "strs":  # also an array of strings (its first element is the value)
                for i in np.flatnonzero(present & (vtype == OTHER)).tolist():
                    row = int(rows[i])
                    picked = source_value(a.others[row], source)
                    ok[i] = picked[0] is not None
                    if ok[i]:
                        self._strings[row] = picked
        ok &= present
        if source.kind is not None:
            ok &= self.kind == _KIND_CODE[source.kind]
        return ok

    def rows(self, column: str) -> np.ndarray:
        """The attribute row each span's ``column`` comes from (-1: none); marks the rows consumed."""
        chosen = np.full(len(self.kind), -1, dtype=np.int64)
        for source in COLUMN_SOURCES[column]:
            if not self.lookup.has(source.key):
                continue
            rows = self.lookup.rows(source.key)
            take = (chosen < 0) & self._fits(rows, source, column)
            chosen[take] = rows[take]
        used = chosen[chosen >= 0]
        self.consumed[used] = True
        for row in used[self.a.vtype[used] == OTHER].tolist():
            # An array of strings gives its first element: consumed only when that is all of it.
            self.consumed[row] = self._strings[row][1]
        return chosen

    def texts(self, columns: Sequence[str]) -> dict[str, _Text]:
        """The columns' values in storage order, gathered together (one string gather and copy for all)."""
        count = len(self.order)
        rows = [self.rows(column) for column in columns]
        is_array = [self.a.vtype_at(r) == OTHER for r in rows]
        index = np.concatenate(
            [np.where(array, -1, r)[self.order] for r, array in zip(rows, is_array, strict=True)]
        )
        gathered = take_strings(self.a.strs, index)
        texts = {}
        for i, column in enumerate(columns):
            text = texts[column] = _Text(gathered.slice(i * count, count), self.position)
            for span in np.flatnonzero(is_array[i]).tolist():
                text[span] = self._strings[int(rows[i][span])][0]
        return texts

    def integers(self, column: str) -> np.ma.MaskedArray:
        rows = self.rows(column)
        return np.ma.masked_array(self.a.int_at(rows), mask=rows < 0)


class _ThirdParty:
    """The spans without a valid ``tailcut.kind``, with their attributes as Python dicts."""

    def __init__(self, a: AttributeColumns, spans: np.ndarray) -> None:
        self.attributes: dict[int, dict[str, Any]] = {int(s): {} for s in spans.tolist()}
        self.row_of: dict[int, dict[str, int]] = {int(s): {} for s in spans.tolist()}
        if not len(spans):
            return
        rows = np.flatnonzero(np.isin(a.span, spans))
        keys = a.key.take(pa.array(rows)).to_pylist()
        for span, key, value, row in zip(
            a.span[rows].tolist(), keys, a.values(rows), rows.tolist(), strict=True
        ):
            self.attributes[span][key] = value
            self.row_of[span][key] = row


def _kinds(
    a: AttributeColumns, lookup: _Lookup, tree: TreeShape
) -> tuple[np.ndarray, _ThirdParty, np.ndarray]:
    """``(kind codes, third-party spans, rows of valid tailcut.kind attributes)``."""
    rows = lookup.rows(attr.KIND)
    text = take_strings(a.strs, np.where(a.vtype_at(rows) == STR, rows, -1))
    kind = np.asarray(
        pc.index_in(text, value_set=pa.array(attr.KINDS)).fill_null(-1).to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    valid_rows = rows[kind >= 0]
    foreign = _ThirdParty(a, np.flatnonzero(kind < 0))
    for span, attributes in foreign.attributes.items():
        kind[span] = _KIND_CODE[resolve_kind(attributes)]
    parent_kind = np.where(tree.parent >= 0, kind[np.maximum(tree.parent, 0)], -1)
    kind[(kind == _NESTED) & (parent_kind == _NESTED)] = _OTHER_KIND  # see tailcut.signals.is_nested_call
    return kind, foreign, valid_rows


def _exception_type(events: Sequence[Any]) -> str | None:
    for event in events:
        if event.name == n.EXCEPTION_EVENT and isinstance(event.attributes.get(n.EXCEPTION_TYPE), str):
            return event.attributes[n.EXCEPTION_TYPE]
    return None


def _fill_defaults(
    batch: DecodedSpans, lookup: _Lookup, kind: np.ndarray, order: np.ndarray, text: dict[str, _Text]
) -> None:
    """``operation`` from ``llm.request.type`` or the kind; ``error_type`` from an exception event."""
    operation = text["operation"]
    if operation.array.null_count:
        request_types = lookup_strs(batch, lookup, n.LLM_REQUEST_TYPE, order).to_pylist()
        mapped = pa.array([REQUEST_TYPE_OPERATIONS.get(t) for t in request_types], pa.string())
        defaults = pa.array(_DEFAULT_OPERATION[kind[order]], pa.string())
        operation.array = pc.coalesce(operation.array, mapped, defaults)
    error_type = text["error_type"]
    for span, events in batch.events.items():
        if error_type[span] is None:
            error_type[span] = _exception_type(events)


def lookup_strs(batch: DecodedSpans, lookup: _Lookup, key: str, order: np.ndarray) -> pa.Array:
    """In storage order, each span's string value of attribute ``key`` (null when absent or not a string)."""
    a = batch.attributes
    rows = lookup.rows(key)
    return take_strings(a.strs, np.where(a.vtype_at(rows) == STR, rows, -1)[order])


def _third_party(
    batch: DecodedSpans,
    trace: np.ndarray,
    foreign: _ThirdParty,
    kind: np.ndarray,
    text: dict[str, _Text],
    numbers: dict[str, np.ma.MaskedArray],
    consumed: np.ndarray,
) -> None:
    """Rebuild payloads and synthesise boundaries for spans from other instrumentations."""
    if not foreign.attributes:
        return
    column = text
    names = batch.name.to_pylist()
    numbered: list[int] = []
    for span, attributes in foreign.attributes.items():
        kind_name = attr.KINDS[kind[span]]
        events = batch.events.get(span, ())
        if kind_name != "other" and (
            any(is_content_key(k) for k in attributes) or any(e.name in CONTENT_EVENTS for e in events)
        ):
            rebuilt = rebuild(kind_name, attributes, events, column["model"][span])
            row_of = foreign.row_of[span]
            consumed[[row_of[k] for k in rebuilt.consumed]] = True
            for field, value, sha in (
                ("request", rebuilt.request, rebuilt.request_sha256),
                ("response", rebuilt.response, rebuilt.response_sha256),
            ):
                if column[field][span] is None and value is not None:
                    column[field][span] = value
                    column[f"{field}_sha256"][span] = column[f"{field}_sha256"][span] or sha
            if column["finish_reason"][span] is None:
                column["finish_reason"][span] = rebuilt.finish_reason
        # A span that only prepares the request its sibling sends (LlamaIndex's
        # ``_prepare_chat_with_tools``) crosses nothing: no boundary, one crossing per request.
        if column["boundary"][span] is None and not is_preparation_span(kind_name, names[span]):
            boundary = synthetic_boundary(
                kind_name,
                names[span],
                tool_name=column["tool_name"][span],
                provider=column["provider"][span],
                operation=column["operation"][span],
            )
            if boundary is not None:
                column["boundary"][span] = boundary
                numbered.append(span)
    _number_crossings(batch, trace, numbered, column["boundary"], numbers)


def _number_crossings(
    batch: DecodedSpans,
    trace: np.ndarray,
    spans: list[int],
    boundary: _Text,
    numbers: dict[str, np.ma.MaskedArray],
) -> None:
    """Give synthesised boundary crossings occurrence and seq numbers, per trace in start-time order.

    Numbering continues after any tailcut-recorded crossings of the same trace.
    """
    if not spans:
        return
    occurrence, seq = numbers["occurrence"], numbers["seq"]
    span_ids = batch.span_id.to_pylist()
    todo_by_trace: dict[int, list[int]] = {}
    for span in spans:
        todo_by_trace.setdefault(int(trace[span]), []).append(span)
    for code, todo in todo_by_trace.items():
        known = [i for i in np.flatnonzero(trace == code).tolist() if not np.ma.is_masked(seq[i])]
        next_seq = max((int(seq[i]) for i in known), default=0)
        counts: dict[str, int] = {}
        for i in known:
            if not np.ma.is_masked(occurrence[i]):
                counts[boundary[i]] = max(counts.get(boundary[i], 0), int(occurrence[i]))
        for span in sorted(todo, key=lambda i: (int(batch.start_ns[i]), span_ids[i])):
            next_seq += 1
            counts[boundary[span]] = counts.get(boundary[span], 0) + 1
            seq[span] = next_seq
            occurrence[span] = counts[boundary[span]]


def _last_per_key(span: np.ndarray, code: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``rows`` without repeated (span, key) pairs, keeping the last (the OpenTelemetry SDK's semantics)."""
    if not len(rows):
        return rows
    pair = span.astype(np.int64) * (int(code.max()) + 1) + code
    ordered = np.sort(pair)  # (sorting is many times faster than np.unique's hashing here)
    if not (ordered[1:] == ordered[:-1]).any():
        return rows
    _, last_from_end = np.unique(pair[::-1], return_index=True)
    return np.sort(rows[len(rows) - 1 - last_from_end])


def _attribute_column(a: AttributeColumns, kept: np.ndarray, count: int, order: np.ndarray) -> pa.Array:
    """The ``attributes`` map in storage order, from the kept rows (grouped by span, in batch order)."""
    owner = a.span[kept]
    per_span = np.bincount(owner, minlength=count)
    first = np.concatenate([[0], np.cumsum(per_span)])[:-1]
    sizes = per_span[order]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = kept[np.repeat(first[order] - offsets[:-1], sizes) + np.arange(offsets[-1])]
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), a.keys(rows), a.texts(rows), type=schema.STRING_MAP
    )


def _resource_column(batch: DecodedSpans, order: np.ndarray) -> pa.Array:
    keys: list[str] = []
    texts: list[str | None] = []
    owner: list[int] = []
    for i, resource in enumerate(batch.resources):
        keys.extend(resource.attributes)
        texts.extend(value_text(v) for v in resource.attributes.values())
        owner.extend([i] * len(resource.attributes))
    entries = np.array(owner, dtype=np.int64)
    per_resource = np.bincount(entries, minlength=len(batch.resources))
    first = np.concatenate([[0], np.cumsum(per_resource)])[:-1]
    index = batch.resource_index[order]
    sizes = per_resource[index]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.repeat(first[index] - offsets[:-1], sizes) + np.arange(offsets[-1])
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()).take(pa.array(flat)),
        pa.array(texts, pa.string()).take(pa.array(flat)),
        type=schema.STRING_MAP,
    )


def _nested_column(
    items: dict[int, Sequence[Any]], position: np.ndarray, row: Any, type_: pa.DataType
) -> pa.Array:
    """Events or links in storage order; most spans have none, so only those that do are converted."""
    values: list[Any] = [None] * len(position)
    for span, entries in items.items():
        values[position[span]] = [row(entry) for entry in entries]
    return pa.array(values, type_)


def _event(event: Any) -> dict[str, Any]:
    return {
        "name": event.name,
        "time": event.time_ns // 1000,  # microseconds, the unit of schema.TIMESTAMP
        "attributes": [(k, value_text(v)) for k, v in event.attributes.items()],
    }


def _link(link: Any) -> dict[str, Any]:
    return {
        "trace_id": link.trace_id,
        "span_id": link.span_id,
        "attributes": [(k, value_text(v)) for k, v in link.attributes.items()],
    }


def _cost_column(data: dict[str, pa.Array]) -> pa.Array:
    """``cost_usd`` of each span: priced from its model and tokens on ``llm`` spans, null elsewhere.

    Each distinct model is priced once; the arithmetic is :meth:`Pricing.cost`'s, done on arrays.
    """
    models = pc.dictionary_encode(
        pc.if_else(pc.equal(data["kind"], "llm"), data["model"], pa.scalar(None, pa.string()))
    )
    pricing = default_pricing()
    prices = [pricing.price(model) for model in models.dictionary.to_pylist()]
    table = np.array([p or (0.0, 0.0) for p in prices] + [(0.0, 0.0)], dtype=np.float64)
    code = models.indices.fill_null(len(prices)).to_numpy(zero_copy_only=False)
    priced = np.array([p is not None for p in prices] + [False], dtype=bool)[code]
    tokens = [
        data[name].fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        for name in ("input_tokens", "output_tokens")
    ]
    cost = (tokens[0] * table[code, 0] + tokens[1] * table[code, 1]) * _PER_TOKEN
    return pa.array(cost, pa.float64(), mask=~priced)


def normalize(batch: DecodedSpans) -> pa.Table:
    """Rows of the ``spans`` table (:data:`~tailcut.exporters.schema.SPANS`) for a batch of spans.

    Each trace's spans should all be in the batch (a span whose parent is missing becomes an orphan).
    """
    count = len(batch)
    if count == 0:
        return schema.SPANS.empty_table()
    a = batch.attributes
    has_parent = batch.parent_span_id.is_valid().to_numpy(zero_copy_only=False)
    tree = tree_shape(batch.id_keys, has_parent, batch.start_ns, batch.end_ns)
    lookup = _Lookup(a, count)
    kind, foreign, kind_rows = _kinds(a, lookup, tree)
    order = tree.order
    columns = _Columns(a, lookup, kind, order)
    columns.consumed[kind_rows] = True
    text = columns.texts((*_STRING_COLUMNS, "request", "response"))
    numbers = {name: columns.integers(name) for name in _INTEGER_COLUMNS}
    for (
        key,
        payload,
    ) in DUPLICATES.items():  # tailcut's tool spans repeat their payloads in gen_ai.tool.call.*
        rows = lookup.rows(key)[order]
        duplicate = pc.equal(lookup_strs(batch, lookup, key, order), text[payload].array).fill_null(False)
        columns.consumed[rows[duplicate.to_numpy(zero_copy_only=False)]] = True
    _fill_defaults(batch, lookup, kind, order, text)
    _third_party(batch, tree.trace, foreign, kind, text, numbers, columns.consumed)

    kept = np.flatnonzero(~columns.consumed)
    kept = _last_per_key(a.span[kept], lookup.codes[kept], kept)
    take = pa.array(order)
    start, end = batch.start_ns, batch.end_ns
    services = pa.array([r.service_name for r in batch.resources], pa.string())
    data: dict[str, pa.Array] = {
        "trace_id": batch.trace_id.take(take),
        "span_id": batch.span_id.take(take),
        "parent_span_id": batch.parent_span_id.take(take),
        "name": batch.name.take(take),
        "kind": _KIND_NAMES.take(pa.array(kind[order])),
        "span_kind": batch.span_kind.take(take),
        "service_name": services.take(pa.array(batch.resource_index[order])),
        "start_time": pa.array(start[order]),
        "end_time": pa.array(end[order]),
        "duration_ms": pa.array((end - start)[order] / 1e6),
        "status_code": batch.status_code.take(take),
        "status_message": batch.status_message.take(take),
        "attributes": _attribute_column(a, kept, count, order),
        "resource": _resource_column(batch, order),
        "events": _nested_column(batch.events, columns.position, _event, pa.list_(schema.EVENT)),
        "links": _nested_column(batch.links, columns.position, _link, pa.list_(schema.LINK)),
        "depth": pa.array(tree.depth[order]),
        "child_count": pa.array(tree.child_count[order]),
        "span_index": pa.array(tree.span_index[order]),
        "subtree_end": pa.array(tree.subtree_end[order]),
        "self_time_ms": pa.array(tree.self_time_ms[order]),
        "scope_name": batch.scope_name.take(take),
        "is_orphan": pa.array(tree.is_orphan[order]),
    }
    for name in _STRING_COLUMNS:
        data[name] = text[name].finish()
    for name in ("request", "response"):
        data[name] = pa.ExtensionArray.from_storage(schema.JSON, text[name].finish())
    for name, type_ in _INTEGER_COLUMNS.items():
        values = numbers[name]
        data[name] = pa.array(values.data[order], type_, mask=np.ma.getmaskarray(values)[order])
    data["cost_usd"] = _cost_column(data)
    for name, key in ID_KEYS.items():
        data[name] = lookup_strs(batch, lookup, key, order)
    return schema.from_nanoseconds("spans", data)
