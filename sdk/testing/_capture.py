"""Record tailcut spans in memory, without an exporter or a collector.

Examples
--------
>>> import tailcut
>>> from tailcut.testing import capture_spans
>>> @tailcut.tool
... def add(a: int, b: int) -> int:
...     return a + b
>>> with capture_spans() as spans:
...     with tailcut.run("calc"):
...         add(1, b=2)
3
>>> [s.attributes["tailcut.boundary"] for s in spans.by_kind("tool")]
['tool:add']
>>> len(spans.trace_id)
32
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailcut import _config


class CapturedSpans(list[ReadableSpan]):
    """The finished spans of a :func:`capture_spans` block, oldest first, with lookup helpers."""

    def by_kind(self, kind: str) -> list[ReadableSpan]:
        """The spans of one ``tailcut.kind`` (``root``, ``llm``, ``tool``, ...), oldest first."""
        return [s for s in self if (s.attributes or {}).get("tailcut.kind") == kind]

    def root(self) -> ReadableSpan:
        """The one root span (a ``tailcut.run`` block); ``AssertionError`` when there is not exactly one."""
        roots = self.by_kind("root")
        if len(roots) != 1:
            raise AssertionError(f"expected one root span, found {len(roots)}")
        return roots[0]

    @property
    def trace_id(self) -> str:
        """The trace id of :meth:`root`, as 32 hex digits: how data dirs, corpora and the CLI name a run."""
        return format(self.root().context.trace_id, "032x")


@contextlib.contextmanager
def capture_spans(**config: Any) -> Iterator[CapturedSpans]:
    """Record every tailcut span made inside the block into a list (filled as spans end).

    Keyword arguments override :class:`tailcut._config.Config` fields for the block, e.g.
    ``capture_spans(inline_limit=1024, payload_store=PayloadStore(tmp_path))``. Without a payload
    store, a payload over the inline limit is recorded as lost (``tailcut.payload.error``).
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "tailcut-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = CapturedSpans()
    previous = _config.install(_config.Config(enabled=True, tracer=provider.get_tracer("tailcut"), **config))
    try:
        yield spans
    finally:
        _config.install(previous)
        provider.shutdown()
        spans.extend(exporter.get_finished_spans())
