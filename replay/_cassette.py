"""The recorded envelopes of one run plus what has been played from them (VCR.py's cassette).

Lookup is by boundary; among the unplayed envelopes of that boundary the request decides (when the
boundary matches on it) and the same occurrence is preferred. That is what keeps parallel calls honest:
their occurrences are numbered as they *start*, so threads that start in another order than recorded get
other occurrence numbers, but each still finds the envelope holding its own request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tailcut.replay._corpus import Envelope
from tailcut.replay._matching import MatchPolicy


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the cassette found for a crossing.

    ``match`` is the envelope to play; without one, ``fallback`` is the unplayed envelope at the same
    occurrence (what a session serves when it keeps going past a request mismatch) and ``closest`` the
    record a diff compares with.
    """

    match: Envelope | None
    fallback: Envelope | None = None
    closest: Envelope | None = None


class Cassette:
    """Envelopes of one recorded run, each played at most once. Not thread-safe: the session locks."""

    def __init__(self, envelopes: Iterable[Envelope], policy: MatchPolicy) -> None:
        self._envelopes = sorted(envelopes, key=lambda e: e.seq)
        self._policy = policy
        self._played = [False] * len(self._envelopes)
        self._index = {id(e): i for i, e in enumerate(self._envelopes)}
        self._by_boundary: dict[str, list[int]] = {}
        self._by_occurrence: dict[tuple[str, int], int] = {}
        self._by_request: dict[tuple[str, str | None], list[int]] = {}
        self._children: dict[int, list[int]] = {}
        for i, e in enumerate(self._envelopes):
            self._by_boundary.setdefault(e.boundary, []).append(i)
            self._by_occurrence.setdefault((e.boundary, e.occurrence), i)
            if policy.on_request(e.boundary):
                key = policy.request_key(e.boundary, e.request, e.request_sha256)
                self._by_request.setdefault((e.boundary, key), []).append(i)
            if e.parent_seq is not None:
                self._children.setdefault(e.parent_seq, []).append(i)

    def count(self, boundary: str) -> int:
        """How many crossings of ``boundary`` the record has."""
        return len(self._by_boundary.get(boundary, ()))

    def find(self, boundary: str, occurrence: int, request: str | None, request_sha256: str | None) -> Lookup:
        """The unplayed envelope this crossing plays, and the closest record for a diff."""
        same_occurrence = self._by_occurrence.get((boundary, occurrence))
        if same_occurrence is not None and self._played[same_occurrence]:
            same_occurrence = None
        if self._policy.on_request(boundary):
            key = self._policy.request_key(boundary, request, request_sha256)
            same_request = self._by_request.get((boundary, key), ())
            if same_occurrence in same_request:
                return Lookup(self._envelopes[same_occurrence])
            chosen = next((i for i in same_request if not self._played[i]), None)
            if chosen is None:
                chosen = self._loose_match(boundary, same_occurrence, request, request_sha256)
            if chosen is not None:
                return Lookup(self._envelopes[chosen])
        elif same_occurrence is not None:
            return Lookup(self._envelopes[same_occurrence])
        fallback = self._envelopes[same_occurrence] if same_occurrence is not None else None
        return Lookup(None, fallback, self._closest(boundary, occurrence, same_occurrence))

    def _loose_match(
        self, boundary: str, same_occurrence: int | None, request: str | None, request_sha256: str | None
    ) -> int | None:
        """An unplayed envelope whose request is equal as JSON, also inside strings (the slow path)."""
        key = self._policy.loose_key(boundary, request, request_sha256)
        candidates = [] if same_occurrence is None else [same_occurrence]
        candidates += [i for i in self._by_boundary.get(boundary, []) if not self._played[i]]
        for i in candidates:
            envelope = self._envelopes[i]
            if self._policy.loose_key(boundary, envelope.request, envelope.request_sha256) == key:
                return i
        return None

    def _closest(self, boundary: str, occurrence: int, same_occurrence: int | None) -> Envelope | None:
        """The record a diff compares with: same occurrence, else the first unplayed, else any."""
        if same_occurrence is not None:
            return self._envelopes[same_occurrence]
        indices = self._by_boundary.get(boundary, [])
        unplayed = next((i for i in indices if not self._played[i]), None)
        if unplayed is not None:
            return self._envelopes[unplayed]
        played = self._by_occurrence.get((boundary, occurrence))
        if played is not None:
            return self._envelopes[played]
        return self._envelopes[indices[-1]] if indices else None

    def play(self, envelope: Envelope) -> None:
        self._played[self._index[id(envelope)]] = True

    def cover(self, envelope: Envelope) -> list[Envelope]:
        """Mark the crossings recorded inside ``envelope`` as played (it is served, so they never happen).

        Returns them in ``seq`` order, so the session can number the rerun's later crossings as recorded.
        """
        covered: list[Envelope] = []
        stack = list(reversed(self._children.get(envelope.seq, [])))
        while stack:
            i = stack.pop()
            if not self._played[i]:
                self._played[i] = True
                covered.append(self._envelopes[i])
            stack.extend(reversed(self._children.get(self._envelopes[i].seq, [])))
        return sorted(covered, key=lambda e: e.seq)

    def unplayed(self) -> list[Envelope]:
        """The recorded crossings nothing has played yet, in ``seq`` order."""
        return [e for i, e in enumerate(self._envelopes) if not self._played[i]]
