"""Offloaded payloads: copy them into the data dir's store, and resolve an inline stub to the full text.

A payload over the SDK's inline limit is stored under its sha256 in a payload store and the span keeps a
small JSON stub in its place (``tailcut.payloads``). Rows keep that stub; the writers copy the payloads a
span references (``tailcut.payload.ref``) from the stores they were given into ``DATA/payloads``, so a data
dir is self-contained, and :func:`resolve_payload` turns a stub back into the payload, verifying its hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import orjson
import pyarrow as pa

from tailcut import attributes as attr
from tailcut.exporters._location import is_remote
from tailcut.payloads import STUB_KEY, PayloadMissing, PayloadStore, PayloadStoreError, stub_ref

PAYLOADS_DIR: Final = "payloads"
_STUB_START: Final = '{"' + STUB_KEY + '"'


def data_dir_store(data_dir: str | Path) -> PayloadStore | None:
    """The payload store inside a data dir (``DATA/payloads``); None for an ``s3://`` data dir (a payload
    store is a local directory)."""
    if is_remote(data_dir):
        return None
    return PayloadStore(Path(data_dir) / PAYLOADS_DIR)


def resolve_payload(text: str, stores: Sequence[PayloadStore]) -> str:
    """The full payload for a stored ``request``/``response`` text: the text itself unless it is a stub.

    Parameters
    ----------
    text
        A ``request`` or ``response`` value as stored in a row.
    stores
        Payload stores to look in, in order (e.g. :func:`data_dir_store` first).

    Returns
    -------
    str
        The payload's canonical JSON text.

    Raises
    ------
    PayloadMissing
        If no store has the referenced payload.
    PayloadCorrupt
        If a store's copy does not match its hash.

    Examples
    --------
    >>> resolve_payload('{"query":"refunds"}', [])
    '{"query":"refunds"}'
    """
    if not text.startswith(_STUB_START):
        return text
    ref = stub_ref(orjson.loads(text))
    if ref is None:
        return text
    for store in stores:
        if store.has(ref):
            return store.get_text(ref)
    where = ", ".join(str(store.root) for store in stores) or "no stores given"
    raise PayloadMissing(f"payload {ref} is in none of the payload stores ({where})")


def referenced_payloads(table: pa.Table) -> set[str]:
    """Every payload reference (``sha256:<hex>``) the rows of a ``spans`` table carry."""
    refs: set[str] = set()
    attributes = table.column("attributes").combine_chunks()
    keys = attributes.keys.to_pylist()
    items = attributes.items.to_pylist()
    for key, value in zip(keys, items, strict=True):
        if key == attr.PAYLOAD_REF and value:
            parsed = orjson.loads(value) if value.startswith("[") else [value]
            refs.update(ref for ref in parsed if isinstance(ref, str))
    return refs


def copy_payloads(table: pa.Table, sources: Sequence[PayloadStore], target: PayloadStore | None) -> int:
    """Copy the payloads ``table`` references from ``sources`` into ``target``; return how many are missing.

    Each copy is verified against its hash on the way (a corrupt source copy counts as missing). Without a
    target (a remote data dir) every referenced payload is missing from the data dir.
    """
    if target is None:
        return len(referenced_payloads(table))
    missing = 0
    for ref in referenced_payloads(table):
        if target.has(ref):
            continue
        for source in sources:
            try:
                target.put(source.get(ref), ref.split(":", 1)[1])
                break
            except PayloadStoreError:  # not there, or a corrupt copy: try the next store
                continue
        else:
            missing += 1
    return missing
