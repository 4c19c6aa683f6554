"""The replay hook point: every instrumented boundary asks the active interceptor before it runs.

A boundary interceptor is a small protocol held in a context variable. When one is active, each
boundary crossing (a decorated tool, an auto-instrumented ``openai`` call, ...) first calls
:meth:`BoundaryInterceptor.on_boundary` with what it is about to send. The interceptor answers ``None``
(run live) or a :class:`Served` record (return the recorded response, or raise the recorded error,
without running). After the crossing it is told the outcome through :meth:`~BoundaryInterceptor.on_result`.
An interceptor may raise (``tailcut.Divergence``, say) to stop the agent at a boundary.

``tailcut.replay.session`` is the real interceptor; the SDK only defines the protocol, so a replay never
needs more than ``import tailcut`` in the agent.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from tailcut.errors import RecordedError


class Crossing(NamedTuple):
    """One boundary crossing, as known when it starts.

    ``request`` is the canonical JSON text of exactly what is being sent (after redaction), and
    ``request_sha256`` its hash; both are None when the request could not be encoded. (A named tuple:
    one is made per crossing, and it is several times cheaper to build than a frozen dataclass.)
    """

    kind: str
    boundary: str
    occurrence: int
    seq: int
    attempt: int
    name: str
    request: str | None
    request_sha256: str | None
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class Served:
    """A recorded outcome an interceptor serves in place of running the boundary.

    Exactly one of ``response`` (a decoded JSON value; ``response_json`` is its text) or ``error_type``
    is meaningful. ``stream_events`` holds a recorded stream's events, served one by one.
    """

    response: Any = None
    response_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    stream_events: list[Any] | None = None

    @property
    def is_error(self) -> bool:
        return self.error_type is not None

    def rebuild_error(self) -> BaseException:
        """The recorded exception: its original class when importable, else :class:`RecordedError`."""
        return rebuild_exception(self.error_type or "Exception", self.error_message or "")


@runtime_checkable
class BoundaryInterceptor(Protocol):
    """What a replay session implements to take over boundary crossings."""

    def on_boundary(self, crossing: Crossing) -> Served | None:
        """Called before the boundary runs: ``None`` runs it live, a :class:`Served` replaces it."""
        ...

    def on_result(
        self,
        crossing: Crossing,
        *,
        served: bool,
        response_json: str | None,
        response_sha256: str | None,
        error: BaseException | None,
    ) -> None:
        """Called after the crossing with its outcome (served from the record or run live)."""
        ...


_ACTIVE: contextvars.ContextVar[BoundaryInterceptor | None] = contextvars.ContextVar(
    "tailcut_boundary_interceptor", default=None
)


def active_interceptor() -> BoundaryInterceptor | None:
    """The interceptor active in the current context, if any."""
    return _ACTIVE.get()


@contextlib.contextmanager
def use_interceptor(interceptor: BoundaryInterceptor) -> Iterator[BoundaryInterceptor]:
    """Make ``interceptor`` active for the code inside the ``with`` block (and tasks it starts)."""
    token = _ACTIVE.set(interceptor)
    try:
        yield interceptor
    finally:
        _ACTIVE.reset(token)


def exception_type_name(exc: BaseException) -> str:
    """The ``error.type`` of an exception: its fully qualified class name (builtins unqualified)."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def rebuild_exception(error_type: str, message: str) -> BaseException:
    """Rebuild a recorded exception from its ``error.type`` and message, as faithfully as possible."""
    module_name, _, qualname = error_type.rpartition(".")
    try:
        target: Any = importlib.import_module(module_name or "builtins")
        for part in qualname.split("."):
            target = getattr(target, part)
        if isinstance(target, type) and issubclass(target, Exception):
            return target(message)
    except Exception:  # the class is gone or needs other constructor arguments
        pass
    return RecordedError(error_type, message)
