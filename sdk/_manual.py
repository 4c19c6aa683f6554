"""Context managers for code that decorators do not fit: a boundary recorded by hand, and plain spans."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tailcut import attributes as attr
from tailcut._recorder import BoundarySpan, start_boundary, start_span


class BoundaryHandle:
    """What ``with tailcut.boundary(...) as b`` gives: serve from the record, or record the live result.

    Examples
    --------
    ::

        with tailcut.boundary("tool", "lookup_order", request={"order_id": 7}) as b:
            order = b.response if b.served else b.record(db.get_order(7))
    """

    __slots__ = ("_boundary", "_recorded")

    def __init__(self, boundary: BoundarySpan | None) -> None:
        self._boundary = boundary
        self._recorded = False

    @property
    def served(self) -> bool:
        """True when a replay serves this crossing: use :attr:`response` instead of running it."""
        return self._boundary is not None and self._boundary.served is not None

    @property
    def response(self) -> Any:
        """The recorded response (or the recorded error, raised) when :attr:`served`."""
        if self._boundary is None or self._boundary.served is None:
            raise RuntimeError("this crossing is live: nothing is served; call record() with the result")
        self._recorded = True
        return self._boundary.served_value()

    def record(self, response: Any) -> Any:
        """Record the live response and return it unchanged."""
        if self._boundary is not None and not self._recorded:
            self._recorded = True
            self._boundary.finish(response)
        return response

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        if self._boundary is not None:
            self._boundary.set_attributes(attributes)


@contextlib.contextmanager
def boundary(
    kind: str, name: str, request: Any = None, *, attributes: dict[str, Any] | None = None
) -> Iterator[BoundaryHandle]:
    """Record one boundary crossing by hand (a replay can serve it, as for a decorated function).

    Parameters
    ----------
    kind
        One of the boundary kinds: ``llm``, ``tool``, ``retriever``, ``embedding``, ``memory``, ``router``.
    name
        The boundary's stable name; the boundary is ``<kind>:<name>``.
    request
        Exactly what is being sent (canonicalised and hashed).
    attributes
        Extra span attributes.
    """
    if kind not in attr.BOUNDARY_KINDS:
        raise ValueError(f"kind must be one of {', '.join(sorted(attr.BOUNDARY_KINDS))}; got {kind!r}")
    recorder = start_boundary(kind, name, lambda: request, attributes=attributes)
    handle = BoundaryHandle(recorder)
    if recorder is None:
        yield handle
        return
    with recorder:
        recorder.consult()
        with recorder.active():
            yield handle
        if not handle._recorded:
            handle.record(None)


@contextlib.contextmanager
def span(kind: str, name: str, *, attributes: dict[str, Any] | None = None) -> Iterator[None]:
    """A span that is not a boundary (``agent``, ``chain``, ``other``), giving the run its shape."""
    if kind in attr.BOUNDARY_KINDS or kind not in attr.KINDS or kind == "root":
        raise ValueError(f"tailcut.span() takes agent, chain or other (use tailcut.boundary for {kind!r})")
    recorded = start_span(kind, name, attributes=attributes)
    if recorded is None:
        yield
        return
    with recorded, recorded.active():
        yield
