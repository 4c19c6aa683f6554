"""Request pieces in a data dir: written beside the spans, put back into requests on read.

The SDK records an LLM request as a skeleton plus the pieces (messages, tools, instructions) its trace
had not carried yet (``tailcut._pieces``). On write, :func:`take_pieces` moves each span's
``tailcut.pieces`` attribute out of the ``attributes`` map into ``pieces`` rows (``trace_id``, ``sha256``,
``text``), one per distinct piece of the trace, under ``DATA/pieces/dt=.../``; the ``request`` column
keeps the skeleton. A span too big for one export request sent its pieces in carrier spans
(``tailcut._carriers``): :func:`drop_carriers` removes their rows once their pieces are taken, renumbering
the trace's ``span_index``/``subtree_end`` and its ``child_count`` as if they had never been there. A
piece too big for one carrier is stored *chunked*: its row's text is the concatenation of its chunks'
placeholders, and it is verified against its hash through the chunks' texts.

:class:`PieceReader` puts a request back together from a trace's pieces (pieces over the inline limit
come from the data dir's payload store), verifying every piece against its hash and the result against
``request_sha256``: a missing or damaged piece is a :class:`PieceError` naming the trace, the boundary
and the hash, never a shorter request.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tailcut import attributes as attr
from tailcut._pieces import PAYLOAD_ATTRIBUTES, PIECES_SUFFIX, TOKEN_START, expand
from tailcut.errors import TailcutError
from tailcut.exporters._location import Location, location
from tailcut.exporters.schema import PIECES
from tailcut.payloads import PayloadStore, PayloadStoreError

PIECES_DIR: Final = "pieces"
#: The attributes that carry pieces (``tailcut.request.pieces``, ...).
_PIECES_KEYS: Final = pa.array(
    [*(name + PIECES_SUFFIX for name in PAYLOAD_ATTRIBUTES.values()), attr.CARRIER_CHUNKED]
)
#: A chunked piece's text: nothing but placeholders.
_CHUNKS: Final = re.compile("(?:" + re.escape(TOKEN_START) + '[0-9a-f]{64}"\\})+')
_CHUNK_SHA: Final = re.compile("[0-9a-f]{64}")
#: Traces whose pieces a reader keeps in memory.
_CACHED_TRACES: Final = 64


class PieceError(TailcutError):
    """A recorded request cannot be put back together: a piece is missing or damaged."""


def take_pieces(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``table`` without its ``tailcut.pieces`` attributes, and the ``pieces`` rows they carried.

    Pieces are deduplicated per trace; a value that is not a JSON list of strings is left in place. A
    chunked piece (``tailcut.carrier.chunked``: its hash, then its text) keeps the hash it came with.
    """
    attributes = table.column("attributes").combine_chunks()
    keys = attributes.keys
    mask = pc.is_in(keys, value_set=_PIECES_KEYS).to_numpy(zero_copy_only=False)
    if not mask.any():
        return table, PIECES.empty_table()
    entries = np.flatnonzero(mask)
    offsets = attributes.offsets.to_numpy()
    offsets = offsets - offsets[0]
    entry_rows = np.repeat(np.arange(len(attributes)), np.diff(offsets))
    rows = entry_rows[entries]
    trace_ids = table.column("trace_id").combine_chunks()
    items = attributes.items
    out_trace: list[str] = []
    out_sha: list[str] = []
    out_text: list[str] = []
    seen: set[tuple[str, str]] = set()
    for entry, row in zip(entries.tolist(), rows.tolist(), strict=True):
        try:
            texts = orjson.loads(items[entry].as_py() or "")
        except orjson.JSONDecodeError:
            mask[entry] = False
            continue
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            mask[entry] = False
            continue
        trace_id = trace_ids[row].as_py()
        chunked = keys[entry].as_py() == attr.CARRIER_CHUNKED
        for text in texts:
            if chunked:
                sha, text = text[:64], text[64:]
                if not _CHUNK_SHA.fullmatch(sha):
                    continue
            else:
                sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if (trace_id, sha) not in seen:
                seen.add((trace_id, sha))
                out_trace.append(trace_id)
                out_sha.append(sha)
                out_text.append(text)
    pieces = pa.table([out_trace, out_sha, pa.array(out_text, pa.large_string())], schema=PIECES)
    if not mask.any():
        return table, pieces
    keep = pa.array(~mask)
    kept_per_row = np.bincount(entry_rows[~mask], minlength=len(attributes))
    new_offsets = np.concatenate([[0], np.cumsum(kept_per_row)]).astype(np.int32)
    stripped = pa.MapArray.from_arrays(
        pa.array(new_offsets),
        keys.filter(keep),
        items.filter(keep),
        type=attributes.type,
        mask=attributes.is_null(),
    )
    position = table.schema.get_field_index("attributes")
    return table.set_column(position, table.schema.field(position), stripped), pieces


class PieceReader:
    """Puts recorded requests back together from a data dir's pieces (thread-safe).

    Parameters
    ----------
    data_dir
        The data dir, local or on object storage (``DATA/pieces`` is read, and a local one's
        ``DATA/payloads`` for pieces recorded before they were cut into chunks).
    stores
        Further payload stores (after ``DATA/payloads``).
    """

    def __init__(
        self, data_dir: str | os.PathLike[str] | Location, stores: Sequence[PayloadStore] = ()
    ) -> None:
        self.location = data_dir if isinstance(data_dir, Location) else location(data_dir)
        own = [] if self.location.remote else [PayloadStore(self.location.local_path() / "payloads")]
        self.stores = [*own, *stores]
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()
        self._dataset: ds.Dataset | None = None

    def payload(
        self, text: str, *, trace_id: str, boundary: str | None, sha256: str | None, field: str = "request"
    ) -> str:
        """The full canonical payload behind a recorded value (the value itself if it is whole).

        Raises
        ------
        PieceError
            If a piece is missing or does not match its hash, or the result does not match ``sha256``.
        """
        if TOKEN_START not in text:
            return text
        pieces = self._pieces(trace_id)
        where = f"trace {trace_id}, boundary {boundary or '?'}, {field}"

        verified: set[str] = set()

        def lookup(sha: str, *, chunked: bool = True) -> str:
            piece = pieces.get(sha)
            if piece is None:
                return self._stored(sha, where)
            if sha not in verified:
                if hashlib.sha256(piece.encode("utf-8")).hexdigest() != sha and not (
                    chunked and _joins(piece, sha, functools.partial(lookup, chunked=False))
                ):
                    raise PieceError(f"{where}: piece sha256:{sha} is damaged (does not match its hash)")
                verified.add(sha)
            return piece

        full = expand(text, lookup)
        if sha256 and hashlib.sha256(full.encode("utf-8")).hexdigest() != sha256:
            raise PieceError(f"{where}: the text put back from its pieces does not match sha256:{sha256}")
        return full

    def _stored(self, sha: str, where: str) -> str:
        for store in self.stores:
            if not store.has(sha):
                continue
            try:
                return store.get_text(sha)
            except PayloadStoreError:
                raise PieceError(
                    f"{where}: piece sha256:{sha} is damaged (does not match its hash)"
                ) from None
        raise PieceError(f"{where}: piece sha256:{sha} is missing from {self.location}")

    def _pieces(self, trace_id: str) -> dict[str, str]:
        with self._lock:
            cached = self._cache.get(trace_id)
            if cached is not None:
                self._cache.move_to_end(trace_id)
                return cached
            if self._dataset is None:
                files = self.location.files(PIECES_DIR)
                if files:
                    self._dataset = ds.dataset(
                        files, filesystem=self.location.filesystem, format="parquet", schema=PIECES
                    )
            pieces: dict[str, str] = {}
            if self._dataset is not None:
                table = self._dataset.to_table(
                    columns=["sha256", "text"], filter=ds.field("trace_id") == trace_id
                )
                pieces = dict(
                    zip(table.column("sha256").to_pylist(), table.column("text").to_pylist(), strict=True)
                )
            self._cache[trace_id] = pieces
            if len(self._cache) > _CACHED_TRACES:
                self._cache.popitem(last=False)
            return pieces


def _joins(piece: str, sha: str, intact: Callable[[str], str]) -> bool:
    """Whether ``piece`` is the chunked form of the piece ``sha``: placeholders of chunks whose texts
    (each checked against its own hash by ``intact``: chunks are never chunked) join into a text with
    that hash."""
    if not _CHUNKS.fullmatch(piece):
        return False
    whole = hashlib.sha256()
    for chunk in _CHUNK_SHA.findall(piece):
        whole.update(intact(chunk).encode("utf-8"))
    return whole.hexdigest() == sha


def drop_carriers(table: pa.Table) -> tuple[pa.Table, np.ndarray | None]:
    """``spans`` rows without the carriers' (their pieces already taken), the trees renumbered, and
    which rows were kept (None: all of them).

    In each trace, ``span_index`` and ``subtree_end`` close the gaps the carriers leave, and a span's
    ``child_count`` no longer counts its carriers: the rows are those the trace would have without them.
    """
    attributes = table.column("attributes").combine_chunks()
    marked = pc.equal(attributes.keys, attr.CARRIER).to_numpy(zero_copy_only=False)
    if not marked.any():
        return table, None
    offsets = attributes.offsets.to_numpy()
    offsets = offsets - offsets[0]
    entry_rows = np.repeat(np.arange(len(attributes)), np.diff(offsets))
    carrier = np.zeros(len(attributes), dtype=bool)
    carrier[entry_rows[marked]] = True
    trace_ids = np.asarray(table.column("trace_id").to_pylist(), dtype=object)
    _, trace = np.unique(trace_ids, return_inverse=True)
    index = table.column("span_index").to_numpy().astype(np.int64)
    end = table.column("subtree_end").to_numpy().astype(np.int64)
    base = trace.astype(np.int64) << 32
    gaps = np.sort(base[carrier] + index[carrier])
    first = np.searchsorted(gaps, base, "left")
    new_index = index - (np.searchsorted(gaps, base + index, "left") - first)
    new_end = end - (np.searchsorted(gaps, base + end, "right") - first)
    parents = table.column("parent_span_id").filter(pa.array(carrier)).to_pylist()
    carried = collections.Counter(zip(trace_ids[carrier].tolist(), parents, strict=True))
    span_ids = table.column("span_id").to_pylist()
    children = table.column("child_count").to_numpy().astype(np.int64)
    for row in np.flatnonzero(~carrier).tolist():
        children[row] -= carried.get((trace_ids[row], span_ids[row]), 0)
    for name, values in (("span_index", new_index), ("subtree_end", new_end), ("child_count", children)):
        position = table.schema.get_field_index(name)
        table = table.set_column(position, table.schema.field(position), pa.array(values, pa.int32()))
    return table.filter(pa.array(~carrier)), ~carrier


def piece_days(pieces: pa.Table, spans: pa.Table, span_days: np.ndarray) -> np.ndarray:
    """Per piece row, the day partition of its trace's spans (written in the same call)."""
    day_of = dict(zip(spans.column("trace_id").to_pylist(), span_days.tolist(), strict=True))
    return np.array([day_of[trace_id] for trace_id in pieces.column("trace_id").to_pylist()], dtype=np.int64)
