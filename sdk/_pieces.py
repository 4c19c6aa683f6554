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

#: The key of a placeholder object.
PIECE_KEY: Final = "$tailcut.piece"
#: How every placeholder's text begins (a request that already contains it is never split).
TOKEN_START: Final = '{"' + PIECE_KEY + '":"'
#: The request fields recorded as pieces (OpenAI Chat and Responses, Anthropic Messages).
SPLIT_FIELDS: Final = ("messages", "input", "tools", "system", "instructions")

#: Payloads (and message contents) at least this long are pieces of their own, so a tool result sent
#: back to the model as a message's content is stored and sent once.
MIN_PIECE: Final = 1024
#: The span attribute of each payload field; ``<attribute>.pieces`` carries its pieces.
PAYLOAD_ATTRIBUTES: Final = {
    "request": attr.REQUEST,
    "response": attr.RESPONSE,
    "events": attr.STREAM_EVENTS,
    "input": attr.RUN_INPUT,
    "output": attr.RUN_OUTPUT,
}
PIECES_SUFFIX: Final = ".pieces"
PIECED_SUFFIX: Final = ".pieced"

_TOKEN: Final = re.compile(r'\{"\$tailcut\.piece":"([0-9a-f]{64})"\}')


class Split(NamedTuple):
    """A payload as recorded: its skeleton and its pieces (sha256 -> text, in first-use order)."""

    skeleton: str
    pieces: dict[str, str]


def placeholder(sha256: str) -> str:
    """The canonical JSON token that stands for the piece with this hash."""
    return TOKEN_START + sha256 + '"}'


class _Pieces:
    """Collects pieces no longer than ``limit`` UTF-8 bytes; a longer text becomes a tree of chunks."""

    def __init__(self, limit: int, known: dict[str, str] | None = None) -> None:
        self.limit = max(limit, 4 * len(placeholder("0" * 64)))
        self.pieces: dict[str, str] = {}
        #: text -> sha256 of pieces seen before (a dict lookup is cheaper than hashing again)
        self.known = known if known is not None else {}

    def add(self, text: str) -> str:
        """Add ``text`` and return the hash whose placeholder stands for it."""
        if len(text) * 4 > self.limit:
            data = text.encode("utf-8")
            if len(data) > self.limit:
                return self._tree(data)
        return self._put(text)

    def _put(self, text: str) -> str:
        sha = self.known.get(text)
        if sha is None:
            sha = self.known[text] = sha256_hex(text)
        self.pieces.setdefault(sha, text)
        return sha

    def _tree(self, data: bytes) -> str:
        """Chunks of ``data`` cut at character boundaries, joined by nodes of concatenated placeholders."""
        level: list[str] = []
        start = 0
        while start < len(data):
            end = min(start + self.limit, len(data))
            while end < len(data) and data[end] & 0xC0 == 0x80:  # not inside a UTF-8 sequence
                end -= 1
            level.append(self._put(data[start:end].decode("utf-8")))
            start = end
        fan_out = self.limit // len(placeholder(level[0]))
        while len(level) > 1:
            level = [
                self._put("".join(placeholder(sha) for sha in level[i : i + fan_out]))
                for i in range(0, len(level), fan_out)
            ]
        return level[0]


def split_payload(
    text: str, *, limit: int, structured: bool, known: dict[str, str] | None = None
) -> Split | None:
    """The skeleton and pieces of a payload's canonical JSON, or None to record it as it is.

    ``structured`` (LLM requests) splits out the messages (and their long ``content`` strings), tools
    and instructions, as long as the skeleton expands back to exactly ``text`` (a number JSON parsers
    round, say, keeps the request whole). Otherwise a payload of at least :data:`MIN_PIECE` characters,
    or over ``limit`` bytes, becomes one piece; any piece over ``limit`` bytes is cut into chunks. A
    payload that already contains a placeholder token is left as it is (its text could not be told
    from a skeleton).
    ``known`` (text -> sha256) memoises the hashes of pieces seen before.
    """
    if TOKEN_START in text:
        return None
    if structured:
        pieces = _Pieces(limit, known)
        skeleton = _split_fields(text, pieces)
        if skeleton is not None and len(skeleton) <= limit:
            return Split(skeleton, pieces.pieces)
    if len(text) < MIN_PIECE and len(text.encode("utf-8")) <= limit:
        return None
    pieces = _Pieces(limit, known)
    return Split(placeholder(pieces.add(text)), pieces.pieces)


def _split_fields(text: str, pieces: _Pieces) -> str | None:
    """The skeleton of a request object, or None when it has no field to split or is not canonical.

    Canonical JSON is compositional (a nested value's text is its own canonical JSON), so when the
    parsed value encodes back to exactly ``text``, each piece's text is the substring it replaces and
    the skeleton expands back to ``text``.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or canonical_json(value) != text:
        return None
    found = False
    for key in SPLIT_FIELDS:
        item = value.get(key)
        if item is None or item == [] or item == "":
            continue
        found = True
        if isinstance(item, list):
            link = ""
            for element in item:
                content = element.get("content") if isinstance(element, dict) else None
                if isinstance(content, str) and len(content) >= MIN_PIECE:  # shared with a tool's result
                    element = {**element, "content": {PIECE_KEY: pieces.add(canonical_json(content))}}
                sha = pieces.add(canonical_json(element))
                link = sha if not link else pieces.add(placeholder(link) + "," + placeholder(sha))
            value[key] = [{PIECE_KEY: link}]
        else:
            value[key] = {PIECE_KEY: pieces.add(canonical_json(item))}
    return canonical_json(value) if found else None


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
    """The pieces a run already sent in its trace (thread-safe), and their hashes by text."""

    __slots__ = ("_lock", "_sent", "known")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: set[str] = set()
        #: text -> sha256 of every piece of the run so far
        self.known: dict[str, str] = {}

    def unsent(self, pieces: dict[str, str]) -> dict[str, str]:
        """The pieces of ``pieces`` not sent before, now marked as sent."""
        with self._lock:
            new = {sha: text for sha, text in pieces.items() if sha not in self._sent}
            self._sent.update(new)
        return new


def recorded_pieces(
    config: _config.Config, ledger: PieceLedger, kind: str, field: str, text: str
) -> tuple[str, dict[str, Any]] | None:
    """The skeleton to record for a payload and the span attributes carrying its new pieces.

    An LLM request is split into its messages, tools and instructions; any payload over the inline
    limit into chunks. None when the payload is recorded as it is. The pieces travel in
    ``<payload attribute>.pieces`` and the skeleton is marked by ``<payload attribute>.pieced``.
    """
    split = split_payload(text, limit=config.inline_limit, structured=kind == "llm" and field == "request")
    if split is None:
        return None
    name = PAYLOAD_ATTRIBUTES[field]
    attributes: dict[str, Any] = {name + PIECED_SUFFIX: True}
    new = ledger.unsent(split.pieces)
    if new:
        attributes[name + PIECES_SUFFIX] = list(new.values())
    return split.skeleton, attributes
