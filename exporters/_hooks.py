"""Post-write hooks: how the owner of a :class:`~._writer.DataDirWriter` wires work in after the writes.

Storage calls back, never up (DESIGN.md section 1): the writer knows nothing of what is computed from the
rows it writes. Whoever owns the writer (the collector, ``tailcut ingest``) passes :class:`WriterHook`
objects, such as the classifier's per-trace features or the findings refresh of ``tailcut.analysis``; the
agent's in-process exporter passes none, so it never runs DuckDB. A hook is shaped like OpenTelemetry's
``SpanProcessor``: a few callbacks with no-op defaults, each called on the thread that called the writer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.exporters._writer import DataDirWriter


@dataclass(frozen=True)
class Published:
    """A file that has just appeared in the data dir: its table and its path relative to the data dir."""

    table: str
    path: str


class WriterHook:
    """Work done after a data-dir writer's writes; subclasses override the callbacks they need.

    A hook may add rows of its own with :meth:`DataDirWriter.write_table` from any callback but
    :meth:`on_close`. An exception a hook raises is logged and never fails the write (the rows are stored
    whatever a hook does with them).
    """

    def on_write(self, writer: DataDirWriter, rows: Mapping[str, pa.Table]) -> None:
        """Rows just accepted, by table: ``spans`` (carrier spans left out) and their ``pieces`` for a
        :meth:`~DataDirWriter.write_spans`, ``traces`` for a :meth:`~DataDirWriter.write_traces`."""

    def before_flush(self, writer: DataDirWriter) -> None:
        """A flush or close is about to publish everything: rows a hook still owes go in now."""

    def on_publish(self, writer: DataDirWriter, files: Sequence[Published]) -> None:
        """Files were published since the last call (by a flush, or by a roll on size or age)."""

    def on_close(self, writer: DataDirWriter, *, aborted: bool) -> None:
        """The writer closed (``aborted``: without publishing, after an I/O error): release what the hook
        holds. The writer calls nothing of the hook after this."""
