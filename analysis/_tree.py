"""One trace as a tree: what ``tailcut tree`` prints (indented and coloured) or writes as JSON.

The tree is rebuilt from ``parent_span_id`` (not from the nested-set columns), so a trace with late
spans or orphans still shows every span: orphans appear as extra roots after the real one. With
payloads, each span also shows what it sent (``request``) and received (``response``), offloaded ones
resolved from ``DATA/payloads``, abridged to :data:`ABRIDGED` characters unless asked in full.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rich.console import Console
    from rich.tree import Tree

    from tailcut.analysis._dataset import Dataset

_COLUMNS: Final = (
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_time",
    "duration_ms",
    "status_code",
    "status_message",
    "error_type",
    "model",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "tool_name",
    "boundary",
    "occurrence",
    "seq",
    "attempt",
    "depth",
    "span_index",
    "is_orphan",
)
#: Characters of a request or response shown per span unless the full payload is asked for.
ABRIDGED: Final = 200
_PAYLOADS: Final = ("request", "response")
_KIND_STYLES: Final = {
    "root": "bold magenta",
    "agent": "magenta",
    "llm": "cyan",
    "tool": "green",
    "retriever": "blue",
    "embedding": "blue",
    "memory": "yellow",
    "router": "bright_yellow",
}


@dataclass
class SpanNode:
    """One span and its children (by start time)."""

    span: dict[str, Any]
    children: list[SpanNode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        values = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in self.span.items()}
        return {**values, "children": [child.to_dict() for child in self.children]}

    def label(self) -> str:
        """One line: kind, name, boundary#occurrence, duration, tokens, status and the error's first line;
        then one line each for the request and response when they were loaded."""
        from rich.markup import escape

        line = self._headline()
        for name, arrow in zip(_PAYLOADS, ("→", "←"), strict=True):
            if self.span.get(name) is not None:
                line += f"\n[dim]{arrow} {name}:[/] {escape(self.span[name])}"
        return line

    def _headline(self) -> str:
        from rich.markup import escape

        s = self.span
        kind = s["kind"]
        parts = [f"[{_KIND_STYLES.get(kind, 'white')}]{kind}[/] [bold]{escape(s['name'])}[/]"]
        if s.get("boundary") and s.get("occurrence"):
            parts.append(f"[dim]{escape(s['boundary'])}#{s['occurrence']}[/]")
        if (s.get("attempt") or 1) > 1:
            parts.append(f"[dim]attempt {s['attempt']}[/]")
        parts.append(f"{s['duration_ms']:.1f} ms")
        if s.get("input_tokens") is not None or s.get("output_tokens") is not None:
            parts.append(f"tokens {s.get('input_tokens') or 0}→{s.get('output_tokens') or 0}")
        if s.get("finish_reason"):
            parts.append(f"[dim]{escape(s['finish_reason'])}[/]")
        if s["status_code"] == "ERROR":
            message = (s.get("status_message") or s.get("error_type") or "").splitlines()
            parts.append(f"[bold red]ERROR[/] [red]{escape(message[0][:120]) if message else ''}[/]")
        elif s["status_code"] == "OK":
            parts.append("[green]OK[/]")
        if s.get("is_orphan"):
            parts.append("[yellow](orphan: parent missing)[/]")
        return "  ".join(parts)


@dataclass
class SpanTree:
    """A trace's spans as a tree, with its ``traces`` row when there is one."""

    trace_id: str
    roots: list[SpanNode]
    trace: dict[str, Any] | None
    span_count: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the trace row (times as ISO 8601) and the nested spans."""
        trace = None
        if self.trace is not None:
            trace = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in self.trace.items()}
        return {"trace_id": self.trace_id, "trace": trace, "spans": [r.to_dict() for r in self.roots]}

    def rich_tree(self) -> Tree:
        """The tree as a ``rich.tree.Tree`` (header line: the trace and its sampling decision)."""
        from rich.tree import Tree

        header = f"[bold]trace {self.trace_id}[/]  {self.span_count} spans"
        if self.trace is not None:
            t = self.trace
            header += f"  outcome {t.get('outcome') or '-'}"
            if t.get("outcome_score") is not None:
                header += f" ({t['outcome_score']:.2f})"
            header += f"  kept π={t['inclusion_probability']:.3g}" if t.get("kept") else "  dropped"
            if t.get("baseline"):
                header += " [dim](baseline slice)[/]"
            if t.get("harness_revision"):
                header += f"  revision {t['harness_revision']}"
        tree = Tree(header)

        def add(parent: Tree, node: SpanNode) -> None:
            branch = parent.add(node.label())
            for child in node.children:
                add(branch, child)

        for root in self.roots:
            add(tree, root)
        if not self.roots and self.trace is not None:
            tree.add(self._no_spans())
        return tree

    def _no_spans(self) -> str:
        """Why a trace with a ``traces`` row has no spans here, and the decision that row records."""
        t = self.trace or {}
        policies = ", ".join(t.get("policies") or []) or "none"
        decision = (
            f"decision {t.get('decision_reason')}, policies matched: {policies}, "
            f"baseline slice: {'yes' if t.get('baseline') else 'no'}, π={t.get('inclusion_probability'):.3g}"
        )
        if not t.get("kept"):
            return (
                f"[yellow]dropped by sampling[/] ({decision}): only its traces row is kept, so its "
                f"{t.get('span_count')} spans were not written"
            )
        return f"[yellow]kept, but none of its spans are in this data dir[/] ({decision})"

    def render(self, console: Console) -> None:
        console.print(self.rich_tree())


def abridge(text: str, limit: int = ABRIDGED) -> str:
    """``text`` on one line, cut to ``limit`` characters with a note of how long it was.

    Examples
    --------
    >>> abridge('{"a":   1}')
    '{"a": 1}'
    >>> abridge("x" * 300, 10)
    'xxxxxxxxxx… (300 characters; --full shows all)'
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}… ({len(flat)} characters; --full shows all)"


def _payload(text: str | None, location: str, *, full: bool) -> str | None:
    """A stored request/response as shown: offloaded payloads resolved (local data dirs), abridged."""
    if text is None:
        return None
    from tailcut.analysis._source import is_remote
    from tailcut.exporters._payloads import data_dir_store, resolve_payload
    from tailcut.payloads import PayloadStoreError

    if not is_remote(location):
        try:
            text = resolve_payload(text, [data_dir_store(location)])
        except PayloadStoreError as exc:
            text = f"(offloaded payload not readable: {exc})"
    return text if full else abridge(text)


def load_tree(
    dataset: Dataset, trace_id: str, *, payloads: bool = False, full: bool = False
) -> SpanTree | None:
    """The tree of ``trace_id``; None when the data dir has neither its spans nor its ``traces`` row.

    A trace sampling dropped has a row and no spans: its tree has no roots and says so.

    ``payloads`` adds each span's ``request`` and ``response`` (abridged unless ``full``).
    """
    from tailcut.analysis._output import to_rows

    columns = [*_COLUMNS, *(f"{name}::VARCHAR AS {name}" for name in _PAYLOADS if payloads)]
    spans = to_rows(
        dataset.sql_arrow(
            f"SELECT {', '.join(columns)} FROM spans WHERE trace_id = ? "
            "ORDER BY start_time, span_index, span_id",
            params=[trace_id],
        )
    )
    traces = dataset.sql_arrow("SELECT * EXCLUDE (dt) FROM traces WHERE trace_id = ?", params=[trace_id])
    trace = to_rows(traces)[0] if traces.num_rows else None
    if not spans:
        return None if trace is None else SpanTree(trace_id, [], trace, 0)
    for span in spans if payloads else ():
        for name in _PAYLOADS:
            span[name] = _payload(span[name], dataset.location, full=full)
    nodes = {}
    for span in spans:
        nodes.setdefault(span["span_id"], SpanNode(span))
    roots = []
    for span in spans:
        node = nodes[span["span_id"]]
        if node.span is not span:
            continue  # a duplicate span id: the first one holds the children
        parent = nodes.get(span["parent_span_id"]) if span["parent_span_id"] else None
        if parent is None or parent is node or span.get("is_orphan"):
            roots.append(node)
        else:
            parent.children.append(node)
    roots.sort(key=lambda n: (n.span.get("is_orphan") or False, n.span["parent_span_id"] is not None))
    return SpanTree(trace_id, roots, trace, len(spans))
