"""Shared by the analysis tests: real data dirs from the SDK and the demo fleet, and a tail-sampled copy.

Data dirs are written the way production writes them: spans through the OTel SDK into the embedded
``ParquetSpanExporter``, or the demo fleet (the real ``openai`` SDK against the scripted model server).
The fleet's data dir is built once per test session (:func:`fleet_data`). :func:`tail_sample` rewrites a
data dir the way the collector's design decides: every failing trace kept with π = 1, the rest kept
only when in a uniform slice decided from the trace id (π = p, ``baseline`` true), spans of dropped
traces deleted, and a ``traces`` row left for every trace.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tailcut import _config
from tailcut.exporters import DataDirWriter, ParquetSpanExporter, schema

FLEET_RUNS = 500
FLEET_SEED = 11


def record(data: Path, body: Callable[[], Any]) -> Any:
    """Run ``body`` with the SDK recording into ``data`` through the embedded exporter; returns its result."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(data, root_grace=0.0)))
    previous = _config.install(_config.Config(enabled=True, tracer=provider.get_tracer("analysis-tests")))
    try:
        return body()
    finally:
        _config.install(previous)
        provider.shutdown()


@dataclass(frozen=True)
class FleetData:
    """A fleet's data dir (every trace kept, π = 1) and its runs with ground truth."""

    path: Path
    runs: list[Any]

    def truth(self, category: str) -> set[str]:
        return {r.trace_id for r in self.runs if category in r.injected}

    @property
    def failing(self) -> set[str]:
        return {r.trace_id for r in self.runs if r.injected}


_FLEETS: dict[str, FleetData] = {}


def fleet_data(tmp_path_factory: Any) -> FleetData:
    """The demo fleet's data dir, run once per session (several test modules share it)."""
    if "fleet" in _FLEETS:
        return _FLEETS["fleet"]
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import tailcut
    from tailcut.demo.fleet import MODEL_URL_ENV, run_fleet
    from tailcut.demo.support_model import support_responder
    from tailcut.testing import ModelServer

    path = tmp_path_factory.mktemp("fleet") / "data"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(path, root_grace=0.0)))
    previous = _config.install(_config.Config(enabled=True, tracer=provider.get_tracer("fleet")))
    old_url = os.environ.get(MODEL_URL_ENV)
    try:
        server = ModelServer(responder=support_responder)
        with server:
            os.environ[MODEL_URL_ENV] = server.openai_base_url
            tailcut.instrument_openai()
            try:
                runs = run_fleet(FLEET_RUNS, workers=2, seed=FLEET_SEED)
            finally:
                tailcut.uninstrument_openai()
    finally:
        if old_url is None:
            os.environ.pop(MODEL_URL_ENV, None)
        else:
            os.environ[MODEL_URL_ENV] = old_url
        _config.install(previous)
        provider.shutdown()
    _FLEETS["fleet"] = FleetData(path, runs)
    return _FLEETS["fleet"]


def in_slice(trace_id: str, probability: float, salt: str = "") -> bool:
    """Uniform slice membership decided from the trace id alone (independent of failure)."""
    digest = hashlib.sha256(f"{salt}{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < probability * 2**64


def read_table(data: Path, table: str) -> pa.Table:
    return ds.dataset(
        data / table, format="parquet", partitioning="hive", schema=schema.TABLES[table]
    ).to_table()


def rewrite(
    source: Path,
    target: Path,
    decide: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    """Copy ``source`` to ``target``, each ``traces`` row updated by ``decide``; spans only of kept traces.

    ``decide`` gets a traces row and returns the columns to change (``kept``, ``baseline``, ...).
    """
    traces_table = read_table(source, "traces")
    for name in ("start_time", "end_time", "decided_at"):
        position = traces_table.schema.get_field_index(name)
        traces_table = traces_table.set_column(position, name, traces_table.column(name).cast(pa.int64()))
    traces = traces_table.to_pylist()
    rows = [{**row, **decide(row)} for row in traces]
    kept = [row["trace_id"] for row in rows if row["kept"]]
    spans = read_table(source, "spans")
    spans = spans.filter(pc.is_in(spans.column("trace_id"), pa.array(kept)))
    with DataDirWriter(target) as writer:
        writer.write_spans(spans)
        writer.write_traces(pa.Table.from_pylist(rows, schema=schema.TRACES))


def tail_sample(
    source: Path,
    target: Path,
    failing: Iterable[str],
    probability: float,
    member: Callable[[str], bool] | None = None,
    extra: Callable[[str], bool] | None = None,
) -> None:
    """The collector's decisions on ``source``: failing traces kept (π = 1), a uniform slice of the rest.

    ``member`` decides slice membership from the trace id (default: :func:`in_slice` at ``probability``);
    ``extra`` names further traces a deterministic policy keeps (π = 1, policy ``latency``).
    """
    failing = set(failing)
    member = member or (lambda trace_id: in_slice(trace_id, probability))
    extra = extra or (lambda trace_id: False)

    def decide(row: dict[str, Any]) -> dict[str, Any]:
        trace_id = row["trace_id"]
        in_baseline, fails, slow = member(trace_id), trace_id in failing, extra(trace_id)
        policies = (
            (["failures"] if fails else [])
            + (["latency"] if slow else [])
            + (["baseline"] if in_baseline else [])
        )
        return {
            "kept": fails or slow or in_baseline,
            "baseline": in_baseline,
            "inclusion_probability": 1.0 if fails or slow else probability,
            "policies": policies,
            "decision_reason": "root_end",
        }

    rewrite(source, target, decide)


def spans_table(spans: list[dict[str, Any]]) -> pa.Table:
    """A ``spans`` table from minimal dicts, tree columns computed by the writer's own tree layout.

    Each dict has ``trace_id``, ``span_id``, ``parent_span_id`` (None for a root), ``name``, ``kind``,
    ``start`` and ``end`` (ns), and any other ``spans`` column.
    """
    import numpy as np

    from tailcut.exporters._tree import tree_shape

    def word(text: str | None) -> int:
        return int(text, 16) if text else 0

    ids = np.array(
        [
            [
                word(s["trace_id"][:16]),
                word(s["trace_id"][16:]),
                word(s["span_id"]),
                word(s["parent_span_id"]),
            ]
            for s in spans
        ],
        dtype=np.uint64,
    )
    has_parent = np.array([s["parent_span_id"] is not None for s in spans])
    start = np.array([s["start"] for s in spans], dtype=np.int64)
    end = np.array([s["end"] for s in spans], dtype=np.int64)
    shape = tree_shape(ids, has_parent, start, end)
    rows = []
    for i in shape.order.tolist():
        given = {k: v for k, v in spans[i].items() if k not in ("start", "end")}
        rows.append(
            {
                "span_kind": "INTERNAL",
                "status_code": "UNSET",
                "start_time": int(start[i]),
                "end_time": int(end[i]),
                "duration_ms": (end[i] - start[i]) / 1e6,
                **given,
                "depth": int(shape.depth[i]),
                "child_count": int(shape.child_count[i]),
                "span_index": int(shape.span_index[i]),
                "subtree_end": int(shape.subtree_end[i]),
                "self_time_ms": float(shape.self_time_ms[i]),
                "is_orphan": bool(shape.is_orphan[i]),
            }
        )
    return pa.Table.from_pylist(rows, schema=schema.SPANS)
