"""The content-addressed payload store: where payloads above the inline limit go.

A span attribute must stay small, but a recorded payload must never be silently cut: a replay needs it
whole. Payloads over the inline limit are stored under their sha256 (the same hash the span records as
``tailcut.request.sha256`` / ``tailcut.response.sha256``), and the span carries a reference
(``sha256:<hex>``) plus an inline JSON stub. Reading verifies the hash, so a damaged store is detected,
never served. The SDK writes the store; the exporters and the corpus writer read it.

Layout: ``<root>/sha256/<first two hex chars>/<hex>.json``, each file written to a temporary name and
renamed into place (:mod:`tailcut._atomic`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Final

from tailcut._atomic import replacing
from tailcut.errors import TailcutError

REF_PREFIX: Final = "sha256:"
#: The key that marks an inline stub standing in for an offloaded payload.
STUB_KEY: Final = "$tailcut.payload"
PREVIEW_CHARS: Final = 256


class PayloadStoreError(TailcutError):
    """The payload store cannot store or return a payload."""


class PayloadMissing(PayloadStoreError, KeyError):
    """The payload store has no payload under that reference."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PayloadCorrupt(PayloadStoreError):
    """A stored payload's bytes no longer match its hash."""


def make_ref(sha256: str) -> str:
    """The reference a span carries for a payload with this hash."""
    return REF_PREFIX + sha256


def parse_ref(ref: str) -> str:
    """The sha256 hex of a reference; raises :class:`PayloadStoreError` if it is not one."""
    if not ref.startswith(REF_PREFIX) or len(ref) != len(REF_PREFIX) + 64:
        raise PayloadStoreError(f"not a payload reference: {ref!r}")
    digest = ref[len(REF_PREFIX) :]
    try:
        int(digest, 16)
    except ValueError:
        raise PayloadStoreError(f"not a payload reference: {ref!r}") from None
    return digest.lower()


def make_stub(sha256: str, size: int, text: str) -> dict[str, Any]:
    """The inline JSON that replaces an offloaded payload: its reference, size and a short preview."""
    return {STUB_KEY: {"ref": make_ref(sha256), "bytes": size, "preview": text[:PREVIEW_CHARS]}}


def stub_ref(value: Any) -> str | None:
    """The reference inside an inline stub, or None when ``value`` is not a stub."""
    if isinstance(value, dict) and len(value) == 1 and STUB_KEY in value:
        inner = value[STUB_KEY]
        if isinstance(inner, dict) and isinstance(inner.get("ref"), str):
            return inner["ref"]
    return None


def _holds(path: Path, size: int) -> bool:
    """Whether ``path`` already holds a payload of ``size`` bytes (under its hash, so the same one)."""
    try:
        return path.stat().st_size == size
    except OSError:
        return False


class PayloadStore:
    """A local directory of payloads addressed by their sha256.

    Parameters
    ----------
    root
        The store's directory; created on first write.
    max_bytes
        Optional budget for the whole store; a write that would exceed it raises
        :class:`PayloadStoreError` (the SDK then marks the span's payload as lost, never cuts it silently).
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._used: int | None = None

    def path_for(self, ref_or_sha: str) -> Path:
        digest = parse_ref(ref_or_sha) if ref_or_sha.startswith(REF_PREFIX) else ref_or_sha.lower()
        return self.root / "sha256" / digest[:2] / f"{digest}.json"

    def has(self, ref: str) -> bool:
        return self.path_for(ref).exists()

    def put(self, data: bytes, sha256: str | None = None) -> str:
        """Store ``data`` and return its reference. Storing the same bytes twice is a no-op."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        path = self.path_for(digest)
        if _holds(path, len(data)):
            return make_ref(digest)
        if self.max_bytes is not None:
            if self._used is None:
                self._used = (
                    sum(p.stat().st_size for p in self.root.rglob("*.json")) if self.root.exists() else 0
                )
            if self._used + len(data) > self.max_bytes:
                raise PayloadStoreError(
                    f"payload store {self.root} is full ({self._used} of {self.max_bytes} bytes used)"
                )
        try:
            # Not flushed to disk: a payload a power cut lost is reported missing or damaged on reading
            # (and rewritten by the next put), and an fsync would cost the agent's thread milliseconds.
            with replacing(path, durable=False) as temporary:
                temporary.write_bytes(data)
        except OSError as exc:
            raise PayloadStoreError(
                f"cannot write to payload store {self.root}: {exc.strerror or exc}"
            ) from None
        if self._used is not None:
            self._used += len(data)
        return make_ref(digest)

    def get(self, ref: str) -> bytes:
        """The payload's bytes, verified against its hash."""
        digest = parse_ref(ref) if ref.startswith(REF_PREFIX) else ref.lower()
        path = self.path_for(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise PayloadMissing(f"payload {make_ref(digest)} is not in the store at {self.root}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise PayloadCorrupt(f"payload {make_ref(digest)} in {self.root} does not match its hash")
        return data

    def get_text(self, ref: str) -> str:
        return self.get(ref).decode("utf-8")
