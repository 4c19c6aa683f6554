"""Shared by the analysis tests: real data dirs from the SDK and the demo fleet, and a tail-sampled copy.

Data dirs are written the way production writes them: spans through the OTel SDK into the embedded
``ParquetSpanExporter`` (which computes no per-trace features), or the demo fleet (the real ``openai`` SDK
against the scripted model server).
The fleet's data dir is built once per test session (:func:`fleet_data`), then put on a scripted clock
(:func:`scripted_clock`) so that no duration a rule reads depends on how busy the host was.
:func:`tail_sample` rewrites a data dir the way the collector's design decides: every failing trace
kept with π = 1, the rest kept only when in a uniform slice decided from the trace id (π = p,
``baseline`` true), spans of dropped traces deleted, and a ``traces`` row left for every trace.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
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


def pipeline_writer(data: Path) -> DataDirWriter:
    """A writer of ``data`` with the classifier's per-trace features hooked in, as the collector and
    ``tailcut ingest`` write (the embedded exporter computes none)."""
    from tailcut.analysis._features_worker import FeatureHook

    return DataDirWriter(data, hooks=[FeatureHook()])


def record(data: Path, body: Callable[[], Any], *, features: bool = False) -> Any:
    """Run ``body`` with the SDK recording into ``data`` through the embedded exporter; returns its result.

    ``features``: with the classifier's per-trace features computed as the spans are written (as the
    collector and ``tailcut ingest`` do; the embedded exporter alone computes none).
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tailcut.analysis._features_worker import FeatureHook

    hooks = [FeatureHook()] if features else []
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(data, root_grace=0.0, hooks=hooks)))
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
    scripted_clock(path)
    _FLEETS["fleet"] = FleetData(path, runs)
    return _FLEETS["fleet"]


#: One tick of the scripted clock.
TICK_NS = 1_000_000


def scripted_clock(data: Path) -> None:
    """Re-time every trace of ``data`` on a scripted clock, in place: the k-th span start or end of a
    trace (in recorded order) happens k ticks after the trace's first start.

    Every order relation of the record (nesting, siblings one after another, which call came first)
    is kept, while each duration becomes a count of the steps inside it: the same whatever the host's
    speed. ``duration_ms``, ``self_time_ms`` and the ``traces`` times are recomputed to match.
    """
    import numpy as np

    spans = read_table(data, "spans").sort_by([("trace_id", "ascending"), ("span_index", "ascending")])
    traces = read_table(data, "traces")
    trace_ids = spans.column("trace_id").to_numpy(zero_copy_only=False)
    start = spans.column("start_time").cast(pa.int64()).to_numpy()
    end = spans.column("end_time").cast(pa.int64()).to_numpy()
    depth = spans.column("depth").to_numpy()
    parents = spans.column("parent_span_id").to_pylist()
    ids = spans.column("span_id").to_pylist()
    new_start, new_end = start.copy(), end.copy()
    bounds = np.flatnonzero(np.r_[True, trace_ids[1:] != trace_ids[:-1], True])
    for first, last in itertools.pairwise(bounds):
        rows = range(first, last)
        # ends before starts at a tie (no overlap is made up), inner spans' ends before outer ones
        events = sorted(
            [(start[i], 1, depth[i], i, 0) for i in rows] + [(end[i], 0, -depth[i], i, 1) for i in rows]
        )
        origin = start[first:last].min()
        for rank, (_, _, _, i, is_end) in enumerate(events):
            (new_end if is_end else new_start)[i] = origin + rank * TICK_NS
    duration = (new_end - new_start) / 1e6
    children: dict[tuple[str, str], list[int]] = {}
    for i, parent in enumerate(parents):
        if parent is not None:
            children.setdefault((trace_ids[i], parent), []).append(i)
    self_time = duration.copy()
    for i, span_id in enumerate(ids):
        covered, reach = 0, None
        for j in sorted(children.get((trace_ids[i], span_id), []), key=lambda j: new_start[j]):
            low, high = max(new_start[j], new_start[i]), min(new_end[j], new_end[i])
            if reach is not None:
                low = max(low, reach)
            if high > low:
                covered += high - low
            reach = high if reach is None else max(reach, high)
        self_time[i] = max(duration[i] - covered / 1e6, 0.0)
    for name, values in (
        ("start_time", pa.array(new_start).cast(schema.TIMESTAMP)),
        ("end_time", pa.array(new_end).cast(schema.TIMESTAMP)),
        ("duration_ms", pa.array(duration)),
        ("self_time_ms", pa.array(self_time)),
    ):
        spans = spans.set_column(spans.schema.get_field_index(name), name, values)
    span_times = {
        trace: (lo, hi)
        for trace, lo, hi in zip(
            *(
                spans.group_by("trace_id")
                .aggregate([("start_time", "min"), ("end_time", "max")])
                .column(c)
                .to_pylist()
                for c in ("trace_id", "start_time_min", "end_time_max")
            ),
            strict=True,
        )
    }
    trace_rows = traces.column("trace_id").to_pylist()
    starts = [span_times.get(t, (None, None))[0] for t in trace_rows]
    ends = [span_times.get(t, (None, None))[1] for t in trace_rows]
    for name, values in (("start_time", starts), ("end_time", ends)):
        traces = traces.set_column(
            traces.schema.get_field_index(name), name, pa.array(values, schema.TIMESTAMP)
        )
    durations = [
        (e - s).total_seconds() * 1000 if s is not None and e is not None else None
        for s, e in zip(starts, ends, strict=True)
    ]
    traces = traces.set_column(
        traces.schema.get_field_index("duration_ms"), "duration_ms", pa.array(durations, pa.float64())
    )
    for table in ("spans", "traces", "trace_features"):  # the features describe the spans as written
        for part in (data / table).glob("**/*.parquet"):
            part.unlink()
    with pipeline_writer(data) as writer:
        writer.write_spans(spans)
        writer.write_traces(traces)


def in_slice(trace_id: str, probability: float, salt: str = "") -> bool:
    """Uniform slice membership decided from the trace id alone (independent of failure)."""
    digest = hashlib.sha256(f"{salt}{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < probability * 2**64


def read_table(data: Path, table: str) -> pa.Table:
    return ds.dataset(
        data / table, format="parquet", partitioning="hive", schema=schema.TABLES[table]
    ).to_table()


def split_in_two(fleet: FleetData, target: Path, column: str, names: tuple[str, str]) -> Path:
    """The fleet's traffic as two alike groups (alternate tickets get ``names[0]`` and ``names[1]`` in
    ``column``): every failure kept, and half of each group's traffic in a 50% baseline slice."""
    ticket = {r.trace_id: r.ticket_id for r in fleet.runs}

    def decide(row: dict[str, Any]) -> dict[str, Any]:
        trace_id = row["trace_id"]
        fails, member = trace_id in fleet.failing, ticket[trace_id] % 4 in (0, 1)
        return {
            column: names[ticket[trace_id] % 2],
            "kept": fails or member,
            "baseline": member,
            "inclusion_probability": 1.0 if fails else 0.5,
            "policies": ["failures"] * fails + ["baseline"] * member,
            "decision_reason": "root_end",
        }

    rewrite(fleet.path, target, decide)
    return target


def copy_pieces(source: Path, target: Path) -> None:
    """Copy the request pieces of ``source`` into ``target`` (the spans' skeletons need them)."""
    if (source / "pieces").is_dir():
        shutil.copytree(source / "pieces", target / "pieces", dirs_exist_ok=True)


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
    with pipeline_writer(target) as writer:
        writer.write_spans(spans)
        writer.write_traces(pa.Table.from_pylist(rows, schema=schema.TRACES))
    copy_pieces(source, target)


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
    return schema.from_rows("spans", rows)
