"""Recording a rerun in memory: the SDK must record for a replay to number and judge it.

Occurrence numbers come from the run the SDK keeps while it records (``tailcut.run``), and the rerun's
outcome is what the agent writes on its root span. So a session turns recording on for its duration,
through its own in-memory tracer, keeping the redaction and capture settings in force (the live request
must be hashed exactly as at record time). The rerun's spans go nowhere else: a replay never writes into
the data it was exported from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailcut import _config
from tailcut import attributes as attr

#: Inline limit while replaying: every payload stays on its span (nothing is offloaded to a store).
_NO_OFFLOAD: Final = 1 << 62


class RerunCapture:
    """The spans of one rerun, recorded in memory."""

    def __init__(self) -> None:
        self._exporter = InMemorySpanExporter()
        self._provider = TracerProvider()
        self._provider.add_span_processor(SimpleSpanProcessor(self._exporter))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record every tailcut span made inside the block into this capture."""
        previous = _config.current()
        _config.install(
            previous.with_changes(
                enabled=True,
                tracer=self._provider.get_tracer("tailcut.replay"),
                payload_store=None,
                inline_limit=_NO_OFFLOAD,
            )
        )
        try:
            yield
        finally:
            _config.install(previous)

    @property
    def spans(self) -> list[ReadableSpan]:
        """The finished spans so far, oldest first."""
        return list(self._exporter.get_finished_spans())

    def root_attribute(self, name: str) -> Any:
        """An attribute of the rerun's root span (the first ``tailcut.run`` it opened), or None."""
        for span in self._exporter.get_finished_spans():
            attributes = span.attributes or {}
            if attributes.get(attr.KIND) == "root":
                return attributes.get(name)
        return None

    def close(self) -> None:
        self._provider.shutdown()
