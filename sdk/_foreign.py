"""Counting the exports of a pipeline tailcut does not own, so :func:`tailcut.stats` is true there too.

Under ``opentelemetry-instrument`` (or when an application configured OpenTelemetry itself), the
tracer provider, its span processors and their exporters belong to someone else: tailcut only records
through them. To still report what was exported, each exporter of the provider's span processors gets
its ``export`` wrapped by a :class:`~tailcut._processor.CountingExporter`; the processors and
exporters are otherwise untouched. The OpenTelemetry SDK has no public way to list a provider's
processors, so this reads its ``_active_span_processor``; when that is not there (another SDK
version), tailcut says once that it cannot count, instead of reporting zero as if nothing flowed.

When the provider is still OpenTelemetry's proxy (the application sets its own after the
instrumentors loaded), :class:`DeferredTracer` records through the proxy and counts the provider's
exports from the first span after the application set it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from tailcut import _config
from tailcut._processor import CountingExporter, RecordingSpanProcessor


def count_exports(provider: TracerProvider) -> int:
    """Make :func:`tailcut.stats` count what ``provider``'s span processors export; how many it wraps."""
    processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", None)
    if processors is None:
        _config.counters.warn_once(
            "foreign-count",
            "tailcut: cannot see this TracerProvider's span processors; "
            "tailcut.stats() does not count the spans they export",
        )
        return 0
    wrapped = 0
    for exporter in _exporters(processors):
        if not isinstance(getattr(exporter.export, "__self__", None), CountingExporter):
            exporter.export = CountingExporter(exporter).export  # type: ignore[method-assign]
            wrapped += 1
    return wrapped


def _exporters(processors: tuple[SpanProcessor, ...]) -> Iterator[SpanExporter]:
    for processor in processors:
        if isinstance(processor, RecordingSpanProcessor):
            continue  # tailcut's own: counted already
        exporter = getattr(processor, "span_exporter", None)  # batch and simple processors
        if isinstance(exporter, SpanExporter):
            yield exporter


class DeferredTracer(trace.Tracer):
    """The tracer of a process whose provider is not set yet: counts its exports once it is."""

    def __init__(self, name: str, version: str) -> None:
        self._name, self._version = name, version
        self._proxy = trace.get_tracer(name, version)
        self._real: trace.Tracer | None = None

    def _tracer(self) -> trace.Tracer:
        if self._real is not None:
            return self._real
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            return self._proxy
        count_exports(provider)
        self._real = provider.get_tracer(self._name, self._version)
        current = _config.current()
        if current.tracer is self:  # later crossings go straight to the real tracer
            _config.install(current.with_changes(tracer=self._real))
        return self._real

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer().start_as_current_span(*args, **kwargs)
