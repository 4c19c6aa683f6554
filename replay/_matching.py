"""How a live crossing is matched to its record: named matchers, a normalize hook, and ``--live`` specs.

Like VCR.py's ``match_on``, matching is a list of names, per boundary:

``boundary``
    Same boundary name (always required: it is the key of the record).
``occurrence``
    Same occurrence number (the n-th crossing of that boundary in the run).
``request``
    Same request: the sha256 of its canonical JSON, as the SDK computed it after redaction, or of the
    ``normalize`` hook's output when one is given (to strip timestamps or random ids). When the hashes
    differ, the two requests still match if they are equal as JSON *including strings that hold JSON*:
    the record keeps responses as canonical JSON, so a served dict comes back with its keys sorted, and
    an agent that ``json.dumps`` it into its next prompt sends the same data in another key order.

The default ``("boundary", "occurrence", "request")`` matches on the request first and prefers the same
occurrence, so parallel calls that start in another order than recorded still find their own envelopes.
Dropping ``request`` for a boundary matches it on boundary and occurrence only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tailcut import attributes as attr
from tailcut.canonical import canonical_json, loads, sha256_hex
from tailcut.errors import ReplayError

MATCHERS: Final = ("boundary", "occurrence", "request")
DEFAULT_MATCH_ON: Final = MATCHERS
#: ``normalize(boundary, decoded_request) -> request`` applied to both sides before hashing.
Normalize = Callable[[str, Any], Any]
MatchOn = Sequence[str] | Mapping[str, Sequence[str]]

_SPEC: Final = re.compile(r"^(?P<kind>[a-z_]+):(?P<name>[^#\s]+)(?:#(?P<occurrence>[1-9][0-9]*))?$")


@dataclass(frozen=True, slots=True)
class LiveSpec:
    """A boundary a cut-point replay runs live: ``router:refund_guard`` (every crossing) or
    ``tool:refund#2`` (the second crossing only)."""

    boundary: str
    occurrence: int | None = None

    def matches(self, boundary: str, occurrence: int) -> bool:
        return boundary == self.boundary and self.occurrence in (None, occurrence)

    def __str__(self) -> str:
        return self.boundary if self.occurrence is None else f"{self.boundary}#{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> LiveSpec:
        """Read ``kind:name`` or ``kind:name#occurrence``.

        Raises
        ------
        ReplayError
            If ``text`` is not of that form or names no boundary kind.
        """
        match = _SPEC.match(text.strip())
        if match is None or match["kind"] not in attr.BOUNDARY_KINDS:
            kinds = ", ".join(sorted(attr.BOUNDARY_KINDS))
            raise ReplayError(
                f"live boundary {text!r} must be kind:name or kind:name#occurrence, kind one of {kinds}"
            )
        occurrence = match["occurrence"]
        return cls(f"{match['kind']}:{match['name']}", int(occurrence) if occurrence else None)


def parse_live(specs: Iterable[LiveSpec | str]) -> tuple[LiveSpec, ...]:
    """Every ``--live`` spec, parsed."""
    return tuple(s if isinstance(s, LiveSpec) else LiveSpec.parse(s) for s in specs)


class MatchPolicy:
    """Which matchers apply to each boundary, and the request key a crossing is matched on."""

    def __init__(self, match_on: MatchOn | None = None, normalize: Normalize | None = None) -> None:
        if match_on is None:
            self._default, self._per_boundary = DEFAULT_MATCH_ON, {}
        elif isinstance(match_on, Mapping):
            table = {str(k): _checked(v, f"match_on[{k!r}]") for k, v in match_on.items()}
            self._default = table.pop("*", DEFAULT_MATCH_ON)
            self._per_boundary = table
        else:
            self._default, self._per_boundary = _checked(match_on, "match_on"), {}
        self._normalize = normalize
        self._cache: dict[tuple[str, str], str | None] = {}

    def matchers(self, boundary: str) -> tuple[str, ...]:
        return self._per_boundary.get(boundary, self._default)

    def on_request(self, boundary: str) -> bool:
        """Whether the request decides the match at this boundary (else boundary and occurrence do)."""
        return "request" in self.matchers(boundary)

    def request_key(self, boundary: str, request: str | None, sha256: str | None) -> str | None:
        """The recorded hash, or the hash of the normalized request when a hook is set (the fast key)."""
        if self._normalize is None or request is None:
            return sha256
        return self.loose_key(boundary, request, sha256)

    def loose_key(self, boundary: str, request: str | None, sha256: str | None) -> str | None:
        """The hash of the request as compared: normalized, with JSON held in strings decoded."""
        if request is None:
            return sha256
        cache_key = (boundary, sha256 or request)
        key = self._cache.get(cache_key)
        if key is None:
            key = sha256_hex(canonical_json(self.normalized(boundary, request)))
            self._cache[cache_key] = key
        return key

    def normalized(self, boundary: str, request: str | None) -> Any:
        """The decoded request as compared: after the normalize hook, with JSON in strings decoded."""
        if request is None:
            return None
        value = loads(request)
        if self._normalize is not None:
            value = self._normalize(boundary, value)
        return expand_embedded_json(value)


def expand_embedded_json(value: Any) -> Any:
    """``value`` with every string that holds a JSON object or array replaced by ``{"$json": decoded}``.

    Examples
    --------
    >>> expand_embedded_json({"content": '{"b": 1, "a": [2]}', "text": "{not json"})
    {'content': {'$json': {'b': 1, 'a': [2]}}, 'text': '{not json'}
    """
    if isinstance(value, dict):
        return {k: expand_embedded_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_embedded_json(v) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "[") and value[-1:] in ("}", "]"):
        try:
            decoded = loads(value)
        except ValueError:
            return value
        return {"$json": expand_embedded_json(decoded)}
    return value


def _checked(names: Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(names, str):
        names = (names,)
    unknown = [n for n in names if n not in MATCHERS]
    if unknown or "boundary" not in names or not ({"occurrence", "request"} & set(names)):
        raise ReplayError(
            f"{what} must name boundary and at least one of occurrence, request "
            f"(valid matchers: {', '.join(MATCHERS)}); got {list(names)!r}"
        )
    return tuple(names)
