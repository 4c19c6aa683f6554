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

Recording costs the new content, not the transcript: the ledger also remembers the chains its trace
recorded (:class:`Chain`: a list's canonical text up to its closing ``]``, its length and last link). A
link depends only on the texts of the elements before it, so when a request's list is a recorded chain's
text followed by ``,`` (more elements) or ``]``, the chain's first elements are exactly those texts: their
pieces were sent, the link is taken as it is, and only the new elements are hashed. The test is one
comparison of texts, so a message changed in place since (any element's text differs) just starts a new
chain. Given the request value as well as its text, the split encodes the lists and parses back only the
skeleton and the new elements, not the whole text. Either way the result is byte for byte what
splitting from scratch gives.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import orjson

from tailcut import _config
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.errors import CanonicalEncodingError

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
_STR: Final = frozenset({str})

#: Chains remembered per ledger, list field and limit (interleaved transcripts of one run).
CHAINS_PER_FIELD: Final = 4
#: Characters of chain text remembered in the whole process (oldest ledger's chains out first), so
#: the per-trace states kept for crossings outside any run cannot pile up transcripts.
CHAIN_BUDGET: Final = 64 * 1024 * 1024


class Chain(NamedTuple):
    """A list field as recorded (its pieces at most ``limit`` bytes): its canonical text without the
    closing ``]``, its length and its last link."""

    field: str
    limit: int
    opening: str
    length: int
    link: str


class Split(NamedTuple):
    """A payload as recorded: its skeleton, its pieces (sha256 -> text, in first-use order), its chains.

    Split with a ledger, ``pieces`` leaves out those of the chain prefixes the ledger's trace carries.
    """

    skeleton: str
    pieces: dict[str, str]
    chains: tuple[Chain, ...] = ()


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

    def add(self, text: str, sha256: str | None = None) -> str:
        """Add ``text`` and return the hash whose placeholder stands for it (``sha256``, if the caller
        has it already, spares hashing the text again)."""
        if len(text) * 4 > self.limit:
            data = text.encode("utf-8")
            if len(data) > self.limit:
                return self._tree(data)
        return self._put(text, sha256)

    def _put(self, text: str, sha256: str | None = None) -> str:
        sha = sha256 or self.known.get(text)
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
    text: str,
    *,
    limit: int,
    structured: bool,
    known: dict[str, str] | None = None,
    ledger: PieceLedger | None = None,
    value: Any = None,
    sha256: str | None = None,
) -> Split | None:
    """The skeleton and pieces of a payload's canonical JSON, or None to record it as it is.

    ``structured`` (LLM requests) splits out the messages (and their long ``content`` strings), tools
    and instructions, as long as the skeleton expands back to exactly ``text`` (a number JSON parsers
    round, say, keeps the request whole). Otherwise a payload of at least :data:`MIN_PIECE` characters,
    or over ``limit`` bytes, becomes one piece; any piece over ``limit`` bytes is cut into chunks. A
    payload that already contains a placeholder token is left as it is (its text could not be told
    from a skeleton).
    ``known`` (text -> sha256) memoises the hashes of pieces seen before. With ``ledger`` a list that
    extends one of the ledger's chains is split from where that chain ends (see the module docstring),
    and ``value``, if it is the dict ``text`` is the canonical JSON of, spares parsing the whole text:
    only the skeleton and the new elements are parsed back (the result is the same). ``sha256``, the
    hash of ``text`` if the caller computed it, is the hash of a payload that becomes one piece.
    """
    if structured:
        fields = None
        if ledger is not None and type(value) is dict and _STR.issuperset(map(type, value)):
            pieces = _Pieces(limit, known)
            fields = _split_value(text, value, pieces, ledger)
        if fields is None:
            if TOKEN_START in text:
                return None
            pieces = _Pieces(limit, known)
            fields = _split_text(text, pieces, ledger)
        if fields is not None and len(fields[0]) <= limit:
            return Split(fields[0], pieces.pieces, fields[1])
    elif TOKEN_START in text:
        return None
    if len(text) < MIN_PIECE and len(text.encode("utf-8")) <= limit:
        return None
    pieces = _Pieces(limit, known)
    return Split(placeholder(pieces.add(text, sha256)), pieces.pieces)


class _Unstable(Exception):
    """A part of a request whose canonical JSON does not parse back to itself, or holds a placeholder."""


#: A request's skeleton and the chains of its lists.
_Fields = tuple[str, tuple[Chain, ...]]


def _split_text(text: str, pieces: _Pieces, ledger: PieceLedger | None) -> _Fields | None:
    """The skeleton of a request object and its chains, or None when it has no field to split or is not
    canonical.

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
    split = _split_request(value, pieces, ledger, parsed=True)
    return None if split is None else split[0]


def _split_value(text: str, value: dict[str, Any], pieces: _Pieces, ledger: PieceLedger) -> _Fields | None:
    """What :func:`_split_text` gives for ``text``, the canonical JSON of ``value``; None to split the text.

    The text parses back to itself exactly when every part does (the keys are strings, so distinct):
    the skeleton, each split field that is not a list, each new element (a chain's elements did when it
    was recorded), and each is checked. The parts are encoded again, so the skeleton filled with them
    must also be ``text`` exactly: a value that encodes differently the second time (a ``model_dump``
    that reads a clock, say) is split from its text.
    """
    try:
        split = _split_request(value, pieces, ledger, parsed=False)
    except (_Unstable, CanonicalEncodingError):
        return None
    if split is None or not _fills(split[0][0], split[1], text):
        return None
    return split[0]


def _fills(skeleton: str, fillings: dict[str, str], text: str) -> bool:
    """Whether ``skeleton`` with each placeholder replaced by ``fillings[sha256]`` is exactly ``text``."""
    position = start = 0
    for match in _TOKEN.finditer(skeleton):
        for part in (skeleton[start : match.start()], fillings[match.group(1)]):
            if not text.startswith(part, position):
                return False
            position += len(part)
        start = match.end()
    return text.startswith(skeleton[start:], position) and position + len(skeleton) - start == len(text)


def _reparsed(text: str, placeholders: int = 0) -> Any:
    """The value of ``text``, which must encode back to exactly ``text`` and hold no other placeholders."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _Unstable from None
    if text.count(TOKEN_START) != placeholders or canonical_json(value) != text:
        raise _Unstable
    return value


def _split_request(
    request: dict[str, Any], pieces: _Pieces, ledger: PieceLedger | None, *, parsed: bool
) -> tuple[_Fields, dict[str, str]] | None:
    """The skeleton and chains of ``request`` (parsed from its text, or else the value it encodes), and
    the text each of the skeleton's placeholders stands for (those of a value only).

    A value's parts are taken by their canonical text (:class:`_Unstable` when one does not parse back).
    """
    skeleton = dict(request)
    chains: list[Chain] = []
    fillings: dict[str, str] = {}
    replaced = 0
    for key in SPLIT_FIELDS:
        if key not in request:
            continue
        item = request[key]
        text = None if parsed else canonical_json(item)
        if (item is None or item == [] or item == "") if parsed else text in ("null", "[]", '""'):
            continue
        replaced += 1
        if isinstance(item, list) if parsed else text is not None and text[0] == "[":
            if not parsed and type(item) not in (list, tuple):
                raise _Unstable  # a set, say: its elements cannot be taken in order
            link, chain = _chain(key, item, pieces, ledger, parsed=parsed, text=text)
            skeleton[key] = [{PIECE_KEY: link}]
            if chain is not None:
                chains.append(chain)
            if text is not None:
                fillings[link] = text[1:-1]
        else:
            if text is None:
                text = canonical_json(item)
            else:
                _reparsed(text)
            sha = pieces.add(text)
            skeleton[key] = {PIECE_KEY: sha}
            fillings[sha] = text
    if not replaced:
        return None
    text = canonical_json(skeleton)
    if not parsed:
        _reparsed(text, replaced)
    return (text, tuple(chains)), fillings


def _chain(
    key: str,
    items: list[Any],
    pieces: _Pieces,
    ledger: PieceLedger | None,
    *,
    parsed: bool,
    text: str | None,
) -> tuple[str, Chain | None]:
    """The last link of the chain of ``items`` (whose canonical JSON is ``text``, if known) and, with
    ``ledger``, the chain to remember.

    The elements a chain of the ledger already covers are skipped: their pieces were sent. The others
    are taken as they are when ``parsed``, else parsed back from their canonical text, which must be
    where ``text`` has them.
    """
    if ledger is not None and text is None:
        text = canonical_json(items)
    known = ledger.chain(key, pieces.limit, text) if ledger is not None and text is not None else None
    start, link = (known.length, known.link) if known is not None else (0, "")
    position = len(known.opening) if known is not None else 0
    for element in items[start:]:
        if not parsed:
            element_text = canonical_json(element)
            separator = "," if position else "["
            if text is None or text[position] != separator or not text.startswith(element_text, position + 1):
                raise _Unstable
            position += 1 + len(element_text)
            element = _reparsed(element_text)
        sha = _element_piece(element, pieces)
        link = sha if not link else pieces.add(placeholder(link) + "," + placeholder(sha))
    if not parsed and (text is None or position != len(text) - 1):  # the list changed meanwhile
        raise _Unstable
    if ledger is None or text is None:
        return link, None
    return link, Chain(key, pieces.limit, text[:-1], len(items), link)


def _element_piece(element: Any, pieces: _Pieces) -> str:
    """The piece of one list element; a long ``content`` string is a piece of its own."""
    content = element.get("content") if isinstance(element, dict) else None
    if isinstance(content, str) and len(content) >= MIN_PIECE:  # shared with a tool's result
        element = {**element, "content": {PIECE_KEY: pieces.add(canonical_json(content))}}
    return pieces.add(canonical_json(element))


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


class _Chains:
    """The chains ledgers recorded lately, within :data:`CHAIN_BUDGET` characters (thread-safe).

    Process-wide, by ledger serial (never reused, as an ``id()`` could be by a ledger that never sent
    those pieces), then by (field, limit): at most :data:`CHAINS_PER_FIELD` of each. Over the budget the
    chains of the ledger that recorded least recently go first; a ledger's go when it does.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._size = 0
        self._ledgers: collections.OrderedDict[int, dict[tuple[str, int], list[Chain]]] = (
            collections.OrderedDict()
        )

    def longest_prefix(self, serial: int, field: str, limit: int, text: str) -> Chain | None:
        """The longest chain whose elements begin the list whose canonical text is ``text``."""
        with self._lock:
            candidates = list(self._ledgers.get(serial, {}).get((field, limit), ()))
        best: Chain | None = None
        for chain in candidates:
            end = len(chain.opening)
            longer = best is None or chain.length > best.length
            if longer and text[end : end + 1] in (",", "]") and text.startswith(chain.opening):
                best = chain
        return best

    def remember(self, serial: int, chain: Chain) -> None:
        """Keep ``chain`` (in place of those it extends), dropping the oldest ledgers' over budget."""
        if len(chain.opening) > self._budget:
            return
        with self._lock:
            chains = self._ledgers.setdefault(serial, {})
            self._ledgers.move_to_end(serial)
            kept = [chain]
            for other in chains.get((chain.field, chain.limit), ()):
                if len(kept) < CHAINS_PER_FIELD and not chain.opening.startswith(other.opening):
                    kept.append(other)
                else:
                    self._size -= len(other.opening)
            chains[(chain.field, chain.limit)] = kept
            self._size += len(chain.opening)
            while self._size > self._budget:
                self._drop(next(iter(self._ledgers)))

    def forget(self, serial: int) -> None:
        """Drop the chains of a ledger that is gone."""
        with self._lock:
            self._drop(serial)

    def _drop(self, serial: int) -> None:
        for chains in self._ledgers.pop(serial, {}).values():
            self._size -= sum(len(chain.opening) for chain in chains)


_CHAINS = _Chains(CHAIN_BUDGET)
_SERIALS = itertools.count()


class PieceLedger:
    """The pieces a run already sent in its trace (thread-safe), their hashes by text, and its chains."""

    __slots__ = ("__weakref__", "_lock", "_remembers", "_sent", "known", "serial")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: set[str] = set()
        #: text -> sha256 of every piece of the run so far
        self.known: dict[str, str] = {}
        #: This ledger's number in the process (the key of its chains).
        self.serial = next(_SERIALS)
        self._remembers = False

    def unsent(self, pieces: dict[str, str], chains: tuple[Chain, ...] = ()) -> dict[str, str]:
        """The pieces of ``pieces`` not sent before, now marked as sent; then ``chains`` are remembered
        (whose pieces are now all sent)."""
        with self._lock:
            new = {sha: text for sha, text in pieces.items() if sha not in self._sent}
            self._sent.update(new)
            first = bool(chains) and not self._remembers
            self._remembers = self._remembers or bool(chains)
        if first:  # the ledger's chains go with it
            weakref.finalize(self, _CHAINS.forget, self.serial)
        for chain in chains:
            _CHAINS.remember(self.serial, chain)
        return new

    def chain(self, field: str, limit: int, text: str) -> Chain | None:
        """The longest chain this ledger remembers for ``field`` that begins the list ``text`` encodes."""
        return _CHAINS.longest_prefix(self.serial, field, limit, text)


def recorded_pieces(
    config: _config.Config,
    ledger: PieceLedger,
    kind: str,
    field: str,
    text: str,
    value: Any = None,
    sha256: str | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """The skeleton to record for a payload and the span attributes carrying its new pieces.

    An LLM request is split into its messages, tools and instructions; any payload over the inline
    limit into chunks. None when the payload is recorded as it is. The pieces travel in
    ``<payload attribute>.pieces`` and the skeleton is marked by ``<payload attribute>.pieced``.
    ``value``, if given, is the object ``text`` is the canonical JSON of, and ``sha256`` its hash (see
    :func:`split_payload`).
    """
    split = split_payload(
        text,
        limit=config.inline_limit,
        structured=kind == "llm" and field == "request",
        ledger=ledger,
        value=value,
        sha256=sha256,
    )
    if split is None:
        return None
    name = PAYLOAD_ATTRIBUTES[field]
    attributes: dict[str, Any] = {name + PIECED_SUFFIX: True}
    new = ledger.unsent(split.pieces, split.chains)
    if new:
        attributes[name + PIECES_SUFFIX] = list(new.values())
    return split.skeleton, attributes
