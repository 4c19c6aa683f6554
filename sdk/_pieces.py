"""LLM requests as content-addressed pieces: each distinct message stored and sent once per trace.

An agent resends its whole transcript at every step, so recording each request whole costs O(steps²).
Instead the request's canonical JSON is recorded as a *skeleton* in which the messages (``messages``,
``input``), the tool definitions (``tools``), and the system instructions (``system``,
``instructions``) are replaced by placeholders, the exact canonical JSON token
``{"$tailcut.piece":"<sha256>"}``. Each placeholder stands where the piece's text stood, so putting the
texts back is a pure text substitution that gives the canonical bytes exactly: the request's
``tailcut.request.sha256`` is unchanged and verifiable.

A list field becomes a chain, so a skeleton stays the same small size however long the transcript: the
list ``[m1, ..., mn]`` is recorded as ``[P(Cn)]``, where ``C1`` is ``m1``'s piece and ``Ck`` is the piece
whose text is ``P(Ck-1),P(mk)`` (``P(x)`` being the placeholder of ``x``). A transcript that grows by one
message per step therefore adds two small pieces per step: the message and one chain link.

Pieces are texts, addressed by the sha256 of their UTF-8 bytes. The run remembers which pieces it already
sent in its trace (:class:`PieceLedger`): a span carries only the pieces no earlier span of the trace
carried, in ``tailcut.pieces``; ones over the inline limit go to the payload store and are referenced in
``tailcut.payload.ref`` like any offloaded payload. Readers put requests back with :func:`expand`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import orjson

from tailcut import _config
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.payloads import PayloadStoreError

#: The key of a placeholder object.
PIECE_KEY: Final = "$tailcut.piece"
#: How every placeholder's text begins (a request that already contains it is never split).
TOKEN_START: Final = '{"' + PIECE_KEY + '":"'
#: The request fields recorded as pieces (OpenAI Chat and Responses, Anthropic Messages).
SPLIT_FIELDS: Final = ("messages", "input", "tools", "system", "instructions")

_TOKEN: Final = re.compile(r'\{"\$tailcut\.piece":"([0-9a-f]{64})"\}')


class Split(NamedTuple):
    """A request as recorded: its skeleton and its pieces (sha256 -> text, in first-use order)."""

    skeleton: str
    pieces: dict[str, str]


def placeholder(sha256: str) -> str:
    """The canonical JSON token that stands for the piece with this hash."""
    return TOKEN_START + sha256 + '"}'


def _add(pieces: dict[str, str], text: str) -> str:
    sha = sha256_hex(text)
    pieces.setdefault(sha, text)
    return sha


def split_request(text: str) -> Split | None:
    """The skeleton and pieces of a request's canonical JSON, or None when it has nothing to split.

    A request that already contains a placeholder token is left whole (its text could not be told from a
    skeleton), and so is one whose skeleton would not expand back to exactly ``text``.
    """
    if TOKEN_START in text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    pieces: dict[str, str] = {}
    for key in SPLIT_FIELDS:
        item = value.get(key)
        if item is None or item == [] or item == "":
            continue
        if isinstance(item, list):
            link = ""
            for element in item:
                sha = _add(pieces, canonical_json(element))
                link = sha if not link else _add(pieces, placeholder(link) + "," + placeholder(sha))
            value[key] = [{PIECE_KEY: link}]
        else:
            value[key] = {PIECE_KEY: _add(pieces, canonical_json(item))}
    if not pieces:
        return None
    skeleton = canonical_json(value)
    if expand(skeleton, pieces.__getitem__) != text:  # not canonical as given: record it whole
        return None
    return Split(skeleton, pieces)


def expand(text: str, lookup: Callable[[str], str]) -> str:
    """``text`` with every placeholder replaced, recursively, by the text ``lookup(sha256)`` returns.

    ``lookup`` raises when it has no (or no intact) piece; that error propagates. Pieces are addressed by
    their own hash, so no piece can contain itself: expansion always ends.
    """
    if TOKEN_START not in text:
        return text
    parts: list[str] = []
    stack: list[tuple[str, int]] = [(text, 0)]
    while stack:
        current, position = stack.pop()
        match = _TOKEN.search(current, position)
        if match is None:
            parts.append(current[position:])
            continue
        parts.append(current[position : match.start()])
        stack.append((current, match.end()))
        stack.append((lookup(match.group(1)), 0))
    return "".join(parts)


class PieceLedger:
    """The pieces a run already sent in its trace (thread-safe)."""

    __slots__ = ("_lock", "_sent")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: set[str] = set()

    def unsent(self, pieces: dict[str, str]) -> dict[str, str]:
        """The pieces of ``pieces`` not sent before, now marked as sent."""
        with self._lock:
            new = {sha: text for sha, text in pieces.items() if sha not in self._sent}
            self._sent.update(new)
        return new


def pieced_request(
    config: _config.Config, ledger: PieceLedger, text: str
) -> tuple[str, dict[str, Any]] | None:
    """The skeleton to record for an LLM request and the span attributes carrying its new pieces.

    None when the request is recorded whole: it has nothing to split, or its skeleton alone is over the
    inline limit (it is then offloaded whole, as any large payload).
    """
    split = split_request(text)
    if split is None or len(split.skeleton) > config.inline_limit:
        return None
    attributes: dict[str, Any] = {attr.REQUEST_PIECED: True}
    inline: list[str] = []
    refs: list[str] = []
    for sha, piece in ledger.unsent(split.pieces).items():
        data = piece.encode("utf-8") if len(piece) * 4 > config.inline_limit else b""
        if len(data) <= config.inline_limit:
            inline.append(piece)
            continue
        try:
            if config.payload_store is None:
                raise PayloadStoreError("no payload store is configured")
            refs.append(config.payload_store.put(data, sha))
        except PayloadStoreError as exc:
            _config.counters.add("payloads_lost")
            _config.counters.warn_once("payload-store", "tailcut: payload not stored: %s", exc)
            attributes[attr.PAYLOAD_ERROR] = f"request piece sha256:{sha}: {exc}"
    if inline:
        attributes[attr.PIECES] = inline
    if refs:
        attributes[attr.PAYLOAD_REF] = refs
    return split.skeleton, attributes
