"""The OpenTelemetry face of tailcut's instrumentors, for ``opentelemetry-instrument``.

``opentelemetry-instrument python agent.py`` loads every ``opentelemetry_instrumentor`` entry point and
calls ``instrument()`` on it. tailcut registers one per SDK; instrumenting also turns tailcut recording
on through the global tracer provider (see :func:`tailcut._setup.enable`) when ``tailcut.init()`` was
not called, so an agent needs no code change. When ``opentelemetry-instrumentation`` is not installed
the classes keep the same ``instrument()``/``uninstrument()`` surface on their own.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

from tailcut.instrumentation._patching import PatchSet

try:
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
except ImportError:  # the instrumentation package is optional

    class BaseInstrumentor:  # type: ignore[no-redef]
        """Stand-in with the part of OpenTelemetry's ``BaseInstrumentor`` surface tailcut uses."""

        def instrument(self, **kwargs: Any) -> None:
            self._instrument(**kwargs)  # type: ignore[attr-defined]

        def uninstrument(self, **kwargs: Any) -> None:
            self._uninstrument(**kwargs)  # type: ignore[attr-defined]


class TailcutInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Applies one SDK's :class:`PatchSet` as an OpenTelemetry instrumentor."""

    #: The patches of the SDK.
    patch_set: ClassVar[PatchSet]
    #: Requirement strings of the SDK versions the patches were written for.
    dependencies: ClassVar[tuple[str, ...]]

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.dependencies

    def _instrument(self, **kwargs: Any) -> None:
        """Patch the SDK; start recording through ``tracer_provider`` (default: the global one)."""
        from tailcut._setup import enable

        enable(kwargs.get("tracer_provider"))
        self.patch_set.apply()

    def _uninstrument(self, **kwargs: Any) -> None:
        self.patch_set.restore()
