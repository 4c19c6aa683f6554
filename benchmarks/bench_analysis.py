"""Benchmark: failure classification and span-tree macros over a 1M-span data dir.

Goal (issues 5 and 15): classifying 1M spans takes under 10x the time DuckDB takes to scan the spans table
once (``SELECT count(*), sum(duration_ms) FROM spans``), both measured here in the same run (classify: the
median of 7 runs in one session; one classification in a fresh DuckDB session is printed beside it). The
writer stores the per-trace features the classifier reads (``trace_features``, ``trace_checks``) as it writes
the spans, so the build includes computing them; the exhaustive classification below reads the spans.
Also times the tree macros and compares the nested-set descendant query with the recursive CTE on the same
data, and (issue 29) ``tailcut compare`` of the data dir's two halves in time (``compare_windows``: both
groups' census counts and samples from the stored census, and the six verdicts; the findings already made)
as a ratio to one scan of the ``traces`` table (``SELECT count(*), sum(duration_ms) FROM traces``), goal
≤ 5x; and, beside it, the first compare after new files landed, which computes and stores the census.

The data dir is generated directly as Arrow tables (no SDK in the loop) with the schema module and written
with ``DataDirWriter``: support-agent traces (root → agent → memory, retriever, LLM calls with tools, tool
calls with the enforced schema, a router) with payloads shaped like the OpenAI SDK's, a uniform 5%
baseline slice, and a few percent of each failure category. By default each template's traces are written
together, so the failing traces fill the last row groups; ``--interleave`` writes them in a random order
instead, as a collector writing in decision order would, so every row group mixes failures and clean
traffic.

The findings are checked row for row, twice: against the exhaustive classification of the same data
(``Thresholds(trust_recorded_counts=False, trust_trace_signals=False)``: every tool call re-validated,
every repeated call counted from the spans, none of the shortcuts taken), and, at the default size, against
:data:`FINDINGS_SHA256`, the digest of the findings the classifier gave on this data when the digest was
recorded (the same for ``--interleave``: the findings are sorted, so write order cannot change them).
Run::

    python benchmarks/bench_analysis.py              # ~1M spans
    python benchmarks/bench_analysis.py --interleave
    python benchmarks/bench_analysis.py --spans 100000
    python benchmarks/bench_analysis.py --late 100     # 100 traces with a late span: read from their spans
    python benchmarks/bench_analysis.py --keep DIR --only compare  # build DIR once, then time compare alone

With ``--only compare`` and ``--keep DIR``, a data dir already at ``DIR`` (from an earlier run) is reused
rather than rebuilt, and only the ``compare`` timing runs (the findings are made first if none are stored,
outside the timing), so a change to ``compare`` can be measured again in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailcut import attributes as attr
from tailcut.analysis import (
    CATEGORIES,
    Dataset,
    Thresholds,
    _census_file,
    _features_coverage,
    compare_windows,
)
from tailcut.analysis._features_worker import FeatureHook
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.exporters import DataDirWriter, schema

LOOKUP = {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}
SHIP_OLD = {"type": "object", "properties": {"order_id": {"type": "integer"}, "address": {"type": "string"}}}
SHIP_NEW = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}, "shipping_address": {"type": "object"}},
    "required": ["order_id", "shipping_address"],
    "additionalProperties": False,
}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
#: sha256 of the findings rows (:func:`findings_digest`) per ``--spans``, seed 7: what the classifier found
#: on this data when recorded (1,274 findings at 100k spans, 12,747 at 1M; recorded again when the reference
#: became a sub-slice of about 5,000 traces, which changed the cost_blowup evidence alone).
FINDINGS_SHA256 = {
    100_000: "2385496d024f8a04c18f51af3fd760cc231f5af5dba22c555beb4fde876edc42",
    1_000_000: "eebd4c8160bd0a56e9fbdb3468a65538b81f510541bd7563852b69723ff397af",
}


def tools(ship: dict) -> list[dict]:
    return [
        {"type": "function", "function": {"name": n, "parameters": s}}
        for n, s in (("lookup_order", LOOKUP), ("update_shipping", ship), ("search_kb", SEARCH))
    ]


TOOLS = {"new": tools(SHIP_NEW), "old": tools(SHIP_OLD)}
TOOLS_SHA = {k: sha256_hex(canonical_json(v)) for k, v in TOOLS.items()}
SCHEMA_TEXT = {
    n: canonical_json(s)
    for n, s in (("lookup_order", LOOKUP), ("update_shipping", SHIP_NEW), ("search_kb", SEARCH))
}


def call_response(name: str, arguments: dict) -> str:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return json.dumps(
        {
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
            "usage": {"prompt_tokens": 500, "completion_tokens": 20},
        }
    )


def text_response(text: str) -> str:
    return json.dumps(
        {
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ]
        }
    )


def request(variant: str, turn: int) -> str:
    messages = [
        {"role": "system", "content": "You are the support desk."},
        {"role": "user", "content": f"Ticket: where is my order? (turn {turn})"},
    ]
    return canonical_json({"model": "m", "messages": messages, "tools": TOOLS[variant]})


# A template is one trace shape in pre-order: (parent index, kind, name, tool, status, ms, tokens in/out,
# finish, attempt, request(order) -> str, response(order) -> str, extra attributes).
Span = tuple[
    int,
    str,
    str,
    str | None,
    str,
    float,
    int,
    int,
    str | None,
    int,
    Callable[[int], str] | None,
    Callable[[int], str] | None,
    dict[str, str],
]


def llm(
    parent: int,
    variant: str,
    turn: int,
    response: Callable[[int], str],
    tokens=(500, 20),
    finish="tool_calls",
    violations: int = 0,
) -> Span:
    extra = {attr.TOOLS_SHA256: TOOLS_SHA[variant], attr.SCHEMA_VIOLATIONS: str(violations)}
    text = request(variant, turn)
    return (
        parent,
        "llm",
        "chat m",
        None,
        "UNSET",
        300.0,
        tokens[0],
        tokens[1],
        finish,
        1,
        lambda o: text,
        response,
        extra,
    )


def tool(
    parent: int, name: str, arguments: Callable[[int], dict], status="UNSET", attempt=1, ms=20.0
) -> Span:
    extra = {attr.TOOL_SCHEMA: SCHEMA_TEXT[name], attr.TOOL_SCHEMA_SHA256: sha256_hex(SCHEMA_TEXT[name])}
    return (
        parent,
        "tool",
        f"execute_tool {name}",
        name,
        status,
        ms,
        0,
        0,
        None,
        attempt,
        lambda o: canonical_json(arguments(o)),
        lambda o: json.dumps({"ok": True}),
        extra,
    )


def base(extra_root: dict[str, str] | None = None, status: str = "UNSET") -> list[Span]:
    return [
        (-1, "root", "support-agent", None, status, 2000.0, 0, 0, None, 1, None, None, extra_root or {}),
        (0, "agent", "desk", None, status, 1900.0, 0, 0, None, 1, None, None, {}),
        (
            1,
            "memory",
            "memory history",
            None,
            "UNSET",
            5.0,
            0,
            0,
            None,
            1,
            lambda o: "{}",
            lambda o: "[]",
            {},
        ),
        (
            1,
            "retriever",
            "retrieval kb",
            None,
            "UNSET",
            15.0,
            0,
            0,
            None,
            1,
            lambda o: "{}",
            lambda o: json.dumps([{"id": "kb-1"}]),
            {},
        ),
    ]


def order(o: int) -> dict:
    return {"order_id": o}


def normal() -> list[Span]:
    spans = base({attr.OUTCOME: "pass", attr.OUTCOME_SCORE: "0.9"})
    for turn in range(3):
        spans.append(
            llm(1, "new", turn, lambda o, t=turn: call_response("lookup_order", {"order_id": 10 * o + t}))
        )
        spans.append(tool(1, "lookup_order", lambda o, t=turn: {"order_id": 10 * o + t}))
        spans.append(
            (
                1,
                "router",
                "route guard",
                None,
                "UNSET",
                1.0,
                0,
                0,
                None,
                1,
                lambda o: "{}",
                lambda o: "{}",
                {},
            )
        )
    spans.append(llm(1, "new", 3, lambda o: text_response("It has shipped."), finish="stop"))
    return spans


def error() -> list[Span]:
    spans = base({attr.OUTCOME: "fail"}, status="ERROR")
    spans.append(llm(1, "new", 0, lambda o: call_response("lookup_order", {"order_id": o})))
    for attempt in (1, 2, 3):
        spans.append(tool(1, "lookup_order", order, status="ERROR", attempt=attempt))
    return spans


def violation() -> list[Span]:
    spans = normal()
    spans[4] = llm(
        1, "new", 0, lambda o: call_response("lookup_order", {"order_id": f"ORD-{o}"}), violations=1
    )
    return spans


def drift() -> list[Span]:
    spans = base({attr.OUTCOME: "fail", attr.OUTCOME_SCORE: "0.1"})
    spans.append(
        llm(1, "old", 0, lambda o: call_response("update_shipping", {"order_id": o, "address": "1 Road"}))
    )
    for attempt in (1, 2, 3):
        spans.append(
            tool(1, "update_shipping", lambda o: {"order_id": o, "address": "1 Road"}, "ERROR", attempt)
        )
    spans.append(llm(1, "old", 1, lambda o: text_response("Sorry."), finish="stop"))
    return spans


def loop() -> list[Span]:
    spans = base({attr.OUTCOME: "pass", attr.OUTCOME_SCORE: "0.8"})
    for turn in range(5):
        spans.append(llm(1, "new", turn, lambda o: call_response("search_kb", {"query": "where"})))
        spans.append(tool(1, "search_kb", lambda o: {"query": "where"}))
    return spans


def blowup() -> list[Span]:
    spans = normal()
    spans[-1] = llm(1, "new", 3, lambda o: text_response("long " * 50), tokens=(30_000, 4_000), finish="stop")
    return spans


def silent() -> list[Span]:
    spans = normal()
    spans[0] = (*spans[0][:12], {attr.OUTCOME: "fail", attr.OUTCOME_SCORE: "0.2"})
    return spans


TEMPLATES: dict[str, tuple[float, Callable[[], list[Span]]]] = {
    "normal": (0.85, normal),
    "error": (0.025, error),
    "schema_violation": (0.025, violation),
    "schema_drift": (0.025, drift),
    "tool_loop": (0.025, loop),
    "cost_blowup": (0.025, blowup),
    "silent_degradation": (0.025, silent),
}


def tree_columns(parents: list[int]) -> tuple[list[int], list[int], list[int]]:
    """depth, child_count and subtree_end of a pre-order template."""
    depth, children, end = [], [0] * len(parents), list(range(len(parents)))
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
        if p >= 0:
            children[p] += 1
    for i in reversed(range(len(parents))):
        p = parents[i]
        if p >= 0:
            end[p] = max(end[p], end[i])
    return depth, children, end


def template_table(spans: list[Span], trace_ids: list[str], first: int, rng: np.random.Generator) -> pa.Table:
    """Rows of one template for many traces (ids, times and payloads vary per trace)."""
    parents = [s[0] for s in spans]
    depth, children, end = tree_columns(parents)
    n, k = len(trace_ids), len(spans)
    starts = (1_790_000_000 + np.arange(first, first + n) * 0.05) * 1e9
    base_ns = starts.astype(np.int64)
    jitter = rng.lognormal(0.0, 0.25, size=(n, k))
    columns: dict[str, list[Any]] = {name: [] for name in schema.SPANS.names}
    for t, trace_id in enumerate(trace_ids):
        o = first + t
        offset = 0
        for i, (
            parent,
            kind,
            name,
            tool_name,
            status,
            ms,
            tin,
            tout,
            finish,
            attempt,
            req,
            resp,
            extra,
        ) in enumerate(spans):
            duration = ms * jitter[t, i]
            start = int(base_ns[t] + offset)
            offset += int(duration * 1e5)
            columns["trace_id"].append(trace_id)
            columns["span_id"].append(f"{o % 2**32:08x}{i:08x}")
            columns["parent_span_id"].append(None if parent < 0 else f"{o % 2**32:08x}{parent:08x}")
            columns["name"].append(name)
            columns["kind"].append(kind)
            columns["span_kind"].append("CLIENT" if kind in ("llm", "tool") else "INTERNAL")
            columns["service_name"].append("support")
            columns["start_time"].append(start)
            columns["end_time"].append(start + int(duration * 1e6))
            columns["duration_ms"].append(duration)
            columns["status_code"].append(status)
            columns["status_message"].append(
                "Rejected: $.address is not an object"
                if status == "ERROR" and tool_name == "update_shipping"
                else ("TimeoutError: order backend timed out" if status == "ERROR" else None)
            )
            columns["error_type"].append(
                ("Rejected" if tool_name == "update_shipping" else "TimeoutError")
                if status == "ERROR"
                else None
            )
            columns["model"].append("m" if kind == "llm" else None)
            columns["provider"].append("openai" if kind == "llm" else None)
            columns["operation"].append(attr.OPERATION_FOR_KIND[kind])
            columns["input_tokens"].append(tin if kind == "llm" else None)
            columns["output_tokens"].append(tout if kind == "llm" else None)
            columns["finish_reason"].append(finish)
            columns["tool_name"].append(tool_name)
            columns["tool_call_id"].append("call_1" if tool_name else None)
            columns["agent_name"].append("support-agent" if kind == "root" else None)
            boundary = None if kind in ("root", "agent") else f"{kind}:{tool_name or name.split()[-1]}"
            columns["boundary"].append(boundary)
            columns["occurrence"].append(sum(1 for s in spans[: i + 1] if s[2] == name) if boundary else None)
            columns["seq"].append(i if boundary else None)
            columns["attempt"].append(attempt if boundary else None)
            request_text = req(o) if req else None
            columns["request"].append(request_text)
            columns["request_sha256"].append(sha256_hex(request_text) if request_text else None)
            response_text = resp(o) if resp else None
            columns["response"].append(response_text)
            columns["response_sha256"].append(None)
            columns["attributes"].append(list(extra.items()))
            columns["resource"].append([("service.name", "support")])
            columns["events"].append(None)
            columns["links"].append(None)
            columns["depth"].append(depth[i])
            columns["child_count"].append(children[i])
            columns["span_index"].append(i)
            columns["subtree_end"].append(end[i])
            columns["self_time_ms"].append(duration)
            columns["scope_name"].append("bench")
            columns["is_orphan"].append(False)
            columns["cost_usd"].append(None)
            for name in ("session_id", "user_id", "conversation_id"):
                columns[name].append(None)
    given = pa.Table.from_pydict(columns, schema=schema.nanosecond_fields("spans"))  # times in ns
    return schema.from_nanoseconds("spans", dict(zip(given.column_names, given.columns, strict=True)))


def traces_rows(table: pa.Table, category: str, baseline: np.ndarray, p: float) -> pa.Table:
    """One traces row per trace of a template's table (signals from its spans)."""
    import duckdb

    connection = duckdb.connect()
    connection.register("tbl", table)
    rows = connection.sql(
        """
        SELECT trace_id, any_value(service_name) AS service_name, 'support-agent' AS root_name,
               'support-agent' AS agent_name, min(start_time) AS start_time, max(end_time) AS end_time,
               min(start_time_ns) AS start_time_ns, max(end_time_ns) AS end_time_ns,
               (max(end_time_ns) - min(start_time_ns)) / 1e6 AS duration_ms,
               count(*)::INT AS span_count, count(*) FILTER (WHERE status_code = 'ERROR')::INT AS error_count,
               count(*) FILTER (WHERE status_code = 'ERROR')::INT AS error_spans,
               count(*) FILTER (WHERE kind = 'llm')::INT AS llm_calls,
               count(*) FILTER (WHERE kind = 'tool' AND attempt = 1)::INT AS tool_calls,
               coalesce(sum(input_tokens), 0)::BIGINT AS input_tokens,
               coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens, max(depth)::INT AS max_depth,
               any_value(attributes['tailcut.outcome']) FILTER (WHERE kind = 'root') AS outcome,
               TRY_CAST(any_value(attributes['tailcut.outcome.score']) FILTER (WHERE kind = 'root') AS DOUBLE)
                   AS outcome_score,
               bool_or(status_code = 'ERROR') FILTER (WHERE kind = 'root') AS root_failed
        FROM tbl GROUP BY trace_id ORDER BY trace_id
        """
    ).to_arrow_table()
    n = rows.num_rows
    failing = category != "normal"
    member = baseline[:n]
    extra = {
        "max_tool_repeat": pa.array([5 if category == "tool_loop" else 1] * n, pa.int32()),
        "schema_violations": pa.array([1 if category == "schema_violation" else 0] * n, pa.int32()),
        "anomaly_score": pa.array([None] * n, pa.float64()),
        "harness_revision": pa.array(["v1"] * n),
        "kept": pa.array([True] * n),
        "policies": pa.array(
            [(["failures"] if failing else []) + (["baseline"] if m else []) for m in member]
        ),
        "baseline": pa.array(member),
        "inclusion_probability": pa.array([1.0 if failing else p] * n),
        "head_probability": pa.array([1.0] * n),
        "decision_reason": pa.array(["root_end"] * n),
        "decided_at": rows.column("end_time"),
        "env_revision": pa.array(["e1"] * n),
        "prompt_version": pa.array(["p7"] * n),
        "has_root": pa.array([True] * n),
        "orphan_count": pa.array([0] * n, pa.int32()),
        "late_spans": pa.array([0] * n, pa.int32()),
        "cost_usd": pa.array([None] * n, pa.float64()),
        "session_id": pa.array([None] * n, pa.string()),
        "user_id": pa.array([None] * n, pa.string()),
        "conversation_id": pa.array([None] * n, pa.string()),
        "refused_calls": pa.array([0] * n, pa.int32()),
    }
    columns = {
        name: rows.column(name) if name in rows.column_names else extra[name] for name in schema.TRACES.names
    }
    return pa.Table.from_pydict(columns, schema=schema.TRACES)


def build(path: Path, spans_wanted: int, seed: int = 7, *, interleave: bool = False) -> tuple[int, int]:
    """Write about ``spans_wanted`` kept spans: failures plus a 5% baseline slice of clean traffic.

    With ``interleave``, the traces are written in a random order (8,000 at a time) instead of template by
    template.
    """
    rng = np.random.default_rng(seed)
    p = 0.05
    sizes = {name: len(make()) for name, (_, make) in TEMPLATES.items()}
    mean_size = sum(share * sizes[name] for name, (share, _) in TEMPLATES.items())
    traces = int(spans_wanted / mean_size)
    counts = {name: max(1, round(share * traces)) for name, (share, _) in TEMPLATES.items()}
    first = 0
    total_spans = 0
    held: list[pa.Table] = []
    with DataDirWriter(path, hooks=[FeatureHook()]) as writer:  # as the collector and ingest write
        for name, (_, make) in TEMPLATES.items():
            template = make()
            done = 0
            while done < counts[name]:
                n = min(2_000, counts[name] - done)
                ids = [f"{rng.integers(2**63):016x}{first + i:016x}" for i in range(n)]
                table = template_table(template, ids, first, rng)
                baseline = rng.random(n) < (1.0 if name == "normal" else p)
                writer.write_traces(traces_rows(table, name, baseline, p))
                if interleave:
                    held.append(table)
                else:
                    writer.write_spans(table)
                total_spans += table.num_rows
                first += n
                done += n
        if interleave:
            write_interleaved(writer, pa.concat_tables(held), rng)
    return first, total_spans


def write_interleaved(writer: DataDirWriter, spans: pa.Table, rng: np.random.Generator) -> None:
    """Write ``spans`` trace by trace in a random order, 8,000 traces per write."""
    trace_ids = pc.unique(spans["trace_id"]).to_numpy(zero_copy_only=False)
    order = rng.permutation(len(trace_ids))
    for start in range(0, len(order), 8_000):
        chunk = pa.array(trace_ids[order[start : start + 8_000]])
        writer.write_spans(spans.filter(pc.is_in(spans["trace_id"], value_set=chunk)))


def add_late_spans(path: Path, count: int, rng: np.random.Generator) -> None:
    """Write one late span for each of ``count`` random traces, together in a later batch: a copy of the
    trace's first tool span under a new span id, last in its tree (sharing the last span's ``span_index``,
    inside the agent span's nested set). Each such trace then has two features rows (a collector writing a
    span that came after its trace's decision does the same), so the classifier reads those traces from
    their spans and the others from their features."""
    import pyarrow.dataset as ds

    source = ds.dataset(path / "spans", format="parquet", partitioning="hive", schema=schema.SPANS)
    ids = pc.unique(source.to_table(columns=["trace_id"])["trace_id"]).to_numpy(zero_copy_only=False)
    chosen = pa.array(rng.choice(ids, size=min(count, len(ids)), replace=False))
    spans = source.to_table(filter=pc.field("trace_id").isin(chosen))
    last = spans.group_by("trace_id").aggregate([("span_index", "max")])
    tools = spans.filter(pc.equal(spans["kind"], "tool"))
    rows = tools.take(pc.index_in(chosen, value_set=tools["trace_id"]))  # each trace's first tool span
    ends = last["span_index_max"].take(pc.index_in(rows["trace_id"], value_set=last["trace_id"]))
    rows = rows.set_column(
        rows.schema.get_field_index("span_id"),
        "span_id",
        pa.array([f"ffff{i:012x}" for i in range(len(rows))]),
    )
    for name in ("span_index", "subtree_end"):
        rows = rows.set_column(rows.schema.get_field_index(name), name, ends.cast(pa.int32()))
    with DataDirWriter(path, hooks=[FeatureHook()]) as writer:  # as the collector and ingest write
        writer.write_spans(rows)


def findings_digest(findings: Any) -> str:
    """sha256 of the findings rows in their order, every column (floats as their shortest repr)."""
    rows = findings.rows()
    return sha256_hex(json.dumps([list(row) for row in rows], default=repr, separators=(",", ":")))


def timed(action: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Median wall time of ``repeat`` runs, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def time_compare(data: Dataset) -> None:
    """``compare`` of the first and second half of the traces in time, against one scan of ``traces``."""
    import datetime as dt

    scan, _ = timed(
        lambda: data.connection.execute("SELECT count(*), sum(duration_ms) FROM traces").fetchall(), 5
    )
    first, last = data.connection.execute("SELECT min(start_time), max(start_time) FROM traces").fetchone()
    middle = first + (last - first) / 2
    windows = ((first, middle), (middle, last + dt.timedelta(seconds=1)))

    def cold() -> Any:  # the first compare after new files landed: it computes and stores the census
        _census_file.path(data.location).unlink(missing_ok=True)
        return compare_windows(data, *windows)

    first, _ = timed(cold, 3)
    compared, comparison = timed(lambda: compare_windows(data, *windows), 7)
    ratio = compared / scan
    print(f"scan traces once (count, sum(duration_ms)): {scan * 1000:8.1f} ms")
    print(f"compare, census computed and stored first:  {first * 1000:8.1f} ms  ({first / scan:.1f} x)")
    print(f"compare two halves in time:                 {compared * 1000:8.1f} ms")
    census = ", ".join(comparison.census_record()["categories"]) or "none"
    print(f"  census categories: {census}; verdicts: {sorted(comparison.labels())}")
    verdict = "met" if ratio <= 5 else "NOT met"
    print(f"compare / scan traces:                      {ratio:8.1f} x   (goal <= 5 x: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans to generate (default 1M)")
    parser.add_argument("--keep", type=Path, help="write the data dir here (default: a temporary dir)")
    parser.add_argument(
        "--interleave", action="store_true", help="write the traces in random order, not template by template"
    )
    parser.add_argument(
        "--late",
        type=int,
        default=0,
        help="then write a late span for this many traces (they are read from their spans; default 0)",
    )
    parser.add_argument(
        "--only",
        choices=["compare"],
        help="run only this timing (with --keep DIR: reuse the data dir there if it has traces)",
    )
    options = parser.parse_args()
    if (
        options.only == "compare"
        and options.keep is not None
        and any(options.keep.glob("traces/**/*.parquet"))
    ):
        with Dataset(options.keep) as data:
            print(f"reusing the data dir at {options.keep}")
            data.ensure_findings()
            time_compare(data)
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = options.keep or Path(scratch) / "data"
        start = time.perf_counter()
        traces, spans = build(path, options.spans, interleave=options.interleave)
        if options.late:
            add_late_spans(path, options.late, np.random.default_rng(11))
            spans += options.late
        print(f"built {spans:,} spans in {traces:,} traces in {time.perf_counter() - start:.1f} s at {path}")
        data = Dataset(path)
        if options.only == "compare":
            data.ensure_findings()
            time_compare(data)
            return
        scan, _ = timed(
            lambda: data.connection.execute("SELECT count(*), sum(duration_ms) FROM spans").fetchall(), 5
        )
        coverage = _features_coverage.usable(data, Thresholds())
        _features_coverage.drop(data)
        described = "none" if coverage is None else f"all but {coverage.uncovered:,}"
        print(f"traces the written features describe: {described}")
        classify, findings = timed(data.classify, 7)
        with Dataset(path) as fresh:  # a new DuckDB session: no Parquet footer parsed yet
            first, _ = timed(fresh.classify, 1)
        ratio = classify / scan
        print(f"scan once (count, sum(duration_ms)): {scan * 1000:8.1f} ms")
        print(f"classify all kept traces:            {classify * 1000:8.1f} ms  ({len(findings):,} findings)")
        print(f"  one in a fresh DuckDB session:     {first * 1000:8.1f} ms")
        verdict = "met" if ratio < 10 else "NOT met"
        print(f"classify / scan:                     {ratio:8.1f} x   (goal < 10 x: {verdict})")
        counts = findings.group_by("category").len().sort("category")
        print("findings by category:", dict(counts.iter_rows()))
        assert set(findings["category"]) == set(CATEGORIES), "every injected category must be found"
        exhaustive = data.classify(
            thresholds=Thresholds(trust_recorded_counts=False, trust_trace_signals=False)
        )
        assert findings.equals(exhaustive), "the shortcuts changed a finding"
        digest = findings_digest(findings)
        expected = None if options.late else FINDINGS_SHA256.get(options.spans)
        print(f"findings sha256: {digest} (exhaustive classification: identical rows)")
        if expected is not None:
            assert digest == expected, f"findings differ from the recorded ones ({expected})"
            print("findings identical to the recorded ones")

        with Dataset(path) as gate:  # as `tailcut compare` runs: a new session, the stored default findings
            gate.ensure_findings()
            time_compare(gate)

        anchors = "SELECT trace_id, span_id, span_index, subtree_end FROM spans WHERE kind = 'agent'"
        nested_sql = (
            f"WITH a AS ({anchors}) SELECT count(*) FROM a JOIN spans d ON d.trace_id = a.trace_id "
            "AND d.span_index > a.span_index AND d.span_index <= a.subtree_end"
        )
        recursive_sql = (
            f"WITH RECURSIVE walk(trace_id, span_id, level) AS (SELECT trace_id, span_id, 0 FROM ({anchors}) "
            "UNION ALL SELECT s.trace_id, s.span_id, w.level + 1 FROM spans s JOIN walk w "
            "ON s.trace_id = w.trace_id AND s.parent_span_id = w.span_id) "
            "SELECT count(*) FROM walk WHERE level > 0"
        )
        nested, n_rows = timed(lambda: data.connection.execute(nested_sql).fetchall()[0][0])
        recursive, r_rows = timed(lambda: data.connection.execute(recursive_sql).fetchall()[0][0])
        assert n_rows == r_rows, (n_rows, r_rows)
        print(f"descendants of every agent span, nested set:   {nested * 1000:8.1f} ms ({n_rows:,} rows)")
        print(f"descendants of every agent span, recursive CTE: {recursive * 1000:8.1f} ms")
        print(f"recursive / nested:                              {recursive / nested:8.1f} x")
        sample = data.sql(
            "SELECT trace_id, span_id FROM spans WHERE kind = 'agent' USING SAMPLE 50 ROWS (reservoir, 1)"
        ).rows()
        for macro in ("descendants", "descendants_recursive", "ancestors", "span_path"):
            per_call, _ = timed(
                lambda m=macro: [
                    data.connection.execute(f"SELECT count(*) FROM {m}(?, ?)", list(r)).fetchall()
                    for r in sample
                ],
                1,
            )
            print(f"{macro}(trace, span) macro, per call:       {per_call / len(sample) * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
