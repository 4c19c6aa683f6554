"""A divergence: the point where a replayed run leaves its record, with what tells a reader why.

Three kinds, as in DESIGN.md section 6: ``request`` (a served boundary was sent something other than
what was recorded), ``extra`` (the run crossed a boundary the record does not have) and ``missing`` (a
recorded crossing was never reached by the time the run ended). In cut mode a divergence that follows a
live crossing whose result differed from its record is *downstream* of it: expected, since the code under
test changed the trajectory there, and named in ``downstream_of``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from tailcut.interceptor import Crossing
from tailcut.replay._corpus import Envelope
from tailcut.replay._diff import changed_paths, unified_diff
from tailcut.replay._matching import MatchPolicy

DivergenceKind = Literal["request", "extra", "missing"]


@dataclass(frozen=True)
class DivergenceRecord:
    """One divergence.

    Attributes
    ----------
    kind : {"request", "extra", "missing"}
    boundary, occurrence : str, int
        The crossing, as the rerun numbered it (as recorded, for ``missing``).
    seq : int or None
        The rerun's ``seq`` of the crossing (None for ``missing``).
    recorded_seq : int or None
        The ``seq`` of the closest recorded crossing (None when the record has none to compare).
    message : str
        One line saying what diverged and where.
    paths : tuple of str
        Where the two requests differ (``$.messages[3].content: "a" -> "b"``).
    diff : str
        A unified diff of the two requests as indented JSON.
    matchers_failed : tuple of str
        The matchers the closest record failed.
    downstream_of : str or None
        The live crossing (``router:refund_guard#1``) whose changed result explains this divergence.
    served : bool
        Whether the recorded response was served anyway.
    """

    kind: DivergenceKind
    boundary: str
    occurrence: int
    seq: int | None
    recorded_seq: int | None
    message: str
    paths: tuple[str, ...] = ()
    diff: str = ""
    matchers_failed: tuple[str, ...] = ()
    downstream_of: str | None = None
    served: bool = False

    @property
    def expected(self) -> bool:
        """True for a cut-mode divergence explained by a live crossing that changed the trajectory."""
        return self.downstream_of is not None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (the ``divergence`` column of replay results)."""
        data = asdict(self)
        data["paths"] = list(self.paths)
        data["matchers_failed"] = list(self.matchers_failed)
        return data

    def render(self) -> str:
        """The message followed by the diff, for a terminal."""
        return f"{self.message}\n{self.diff}" if self.diff else self.message

    def __str__(self) -> str:
        return self.message


def _suffix(downstream_of: str | None) -> str:
    return f" (downstream of live {downstream_of})" if downstream_of else ""


def request_divergence(
    crossing: Crossing,
    recorded: Envelope,
    policy: MatchPolicy,
    *,
    downstream_of: str | None,
    served: bool,
) -> DivergenceRecord:
    """The live request of ``crossing`` differs from the record's request at the same crossing."""
    before = policy.normalized(crossing.boundary, recorded.request)
    after = policy.normalized(crossing.boundary, crossing.request)
    paths = tuple(changed_paths(before, after))
    where = f"{crossing.boundary}#{crossing.occurrence} (seq {crossing.seq})"
    first = f": {paths[0]}" if paths else ""
    return DivergenceRecord(
        kind="request",
        boundary=crossing.boundary,
        occurrence=crossing.occurrence,
        seq=crossing.seq,
        recorded_seq=recorded.seq,
        message=f"request differs at {where}{first}{_suffix(downstream_of)}",
        paths=paths,
        diff=unified_diff(
            before,
            after,
            recorded_label=f"recorded {recorded.key} (seq {recorded.seq})",
            live_label=f"live {crossing.boundary}#{crossing.occurrence} (seq {crossing.seq})",
        ),
        matchers_failed=("request",),
        downstream_of=downstream_of,
        served=served,
    )


def extra_divergence(
    crossing: Crossing,
    closest: Envelope | None,
    recorded_count: int,
    policy: MatchPolicy,
    *,
    downstream_of: str | None,
) -> DivergenceRecord:
    """``crossing`` has no unplayed record to match (the record has ``recorded_count`` of its boundary)."""
    before = policy.normalized(crossing.boundary, closest.request) if closest else None
    after = policy.normalized(crossing.boundary, crossing.request)
    noun = "crossing" if recorded_count == 1 else "crossings"
    where = f"{crossing.boundary}#{crossing.occurrence} (seq {crossing.seq})"
    return DivergenceRecord(
        kind="extra",
        boundary=crossing.boundary,
        occurrence=crossing.occurrence,
        seq=crossing.seq,
        recorded_seq=closest.seq if closest else None,
        message=(
            f"extra boundary {where}: the record has {recorded_count} {noun} of {crossing.boundary}"
            f"{_suffix(downstream_of)}"
        ),
        paths=tuple(changed_paths(before, after)) if closest else (),
        diff=unified_diff(
            before,
            after,
            recorded_label=f"recorded {closest.key} (seq {closest.seq})" if closest else "recorded (none)",
            live_label=f"live {crossing.boundary}#{crossing.occurrence} (seq {crossing.seq})",
        ),
        matchers_failed=("occurrence",) if closest is None else ("occurrence", "request"),
        downstream_of=downstream_of,
    )


def missing_divergence(recorded: Envelope, *, downstream_of: str | None) -> DivergenceRecord:
    """``recorded`` was never reached by the time the rerun ended."""
    return DivergenceRecord(
        kind="missing",
        boundary=recorded.boundary,
        occurrence=recorded.occurrence,
        seq=None,
        recorded_seq=recorded.seq,
        message=(
            f"missing boundary {recorded.key} (recorded seq {recorded.seq}): the rerun never reached it"
            f"{_suffix(downstream_of)}"
        ),
        downstream_of=downstream_of,
    )
