"""Storage throughput: OTLP protobuf spans to Parquet on disk, against pyarrow writing the same rows.

Measures rows per second from spans in memory through normalisation, tree columns and the data-dir
writer (zstd, row groups of 100k, atomic files) to Parquet on disk, from two inputs: encoded
``ExportTraceServiceRequest`` bytes (what the collector hands its writer: it buffers spans as the bytes
they arrived in) and ``ResourceSpans`` protobuf objects, already parsed (what a program using
``normalize_otlp`` on messages holds). In the same run, ``pyarrow.parquet.write_table`` writes the very
same rows from ready-made Arrow arrays with the same settings: the floor of what the file format costs.
Goal: at least 0.4x the floor's speed (judged on the collector's input), for the writer alone: it computes
nothing from what it writes. The same run also measures the writer with the classifier's per-trace
features hooked in (what the collector and ``tailcut ingest`` run, and what every writer, the agent's
in-process exporter included, ran before the features became a post-write hook; issue 26). Rounds
alternate between the measurements and the best of each counts, so a busy machine slows all alike. On a
machine shared with other work the CPU seconds (every thread of the process) are printed beside: their
ratio does not depend on how much of the machine the run got.

The spans are realistic tailcut spans: runs of 20 spans (a root, then alternating ``llm`` and ``tool``
crossings), about 12 attributes each, 10% of crossings carrying 2-4 KB payloads.

Usage::

    python benchmarks/bench_storage.py            # 200k spans
    python benchmarks/bench_storage.py --spans 20000 --rounds 2
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from tailcut.exporters import DataDirWriter, normalize_otlp
from tailcut.exporters.wire.varint import encode_varint

WORDS = [
    "refund",
    "policy",
    "order",
    "shipping",
    "account",
    "invoice",
    "customer",
    "agent",
    "search",
    "result",
    "weather",
    "paris",
    "tool",
    "call",
    "error",
    "retry",
    "model",
    "answer",
    "question",
    "ticket",
    "priority",
    "status",
    "open",
    "closed",
    "billing",
    "the",
    "a",
    "of",
]
SPANS_PER_TRACE = 20
#: Spans per ResourceSpans message (whole traces), as one export request might carry them.
MESSAGE_SPANS = 5000
#: ResourceSpans messages per normalise-and-write call (10k spans).
BATCH_MESSAGES = 2
#: One normalisation call's input: an encoded request, or parsed ``ResourceSpans`` messages.
Batch = bytes | list[ResourceSpans]


def _field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def _attribute(key: str, value: str | int | float) -> bytes:
    """One encoded ``Span.attributes`` entry (field 9)."""
    if isinstance(value, str):
        any_value = _field(1, value.encode())
    elif isinstance(value, int):
        any_value = b"\x18" + encode_varint(value & (2**64 - 1))
    else:
        any_value = b"\x21" + struct.pack("<d", value)
    return _field(9, _field(1, key.encode()) + _field(2, any_value))


def _text(rnd: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        words.append(rnd.choice(WORDS))
        length += len(words[-1]) + 1
    return " ".join(words)


def _span(
    trace_id: bytes, span_id: bytes, parent: bytes, name: str, kind: int, start: int, end: int
) -> bytes:
    head = (
        _field(1, trace_id)
        + _field(2, span_id)
        + (_field(4, parent) if parent else b"")
        + _field(5, name.encode())
    )
    return (
        head
        + b"\x30"
        + encode_varint(kind)
        + b"\x39"
        + struct.pack("<Q", start)
        + b"\x41"
        + struct.pack("<Q", end)
    )


def make_request(spans: int, seed: int) -> bytes:
    """An encoded ``ExportTraceServiceRequest`` of ``spans`` tailcut spans in whole traces."""
    rnd = random.Random(seed)
    encoded = []
    t0 = 1_767_225_600_000_000_000
    for first in range(0, spans, SPANS_PER_TRACE):
        trace_id, root = rnd.randbytes(16), rnd.randbytes(8)
        start = t0 + rnd.randrange(10**12)
        count = min(SPANS_PER_TRACE, spans - first)
        root_attributes = {
            "tailcut.kind": "root",
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.agent.name": "support-agent",
            "tailcut.harness.revision": "3f9c2a1",
            "tailcut.outcome": rnd.choice(["pass", "fail"]),
            "tailcut.run.input": f'{{"ticket":{rnd.randrange(10**6)}}}',
            "tailcut.trace.llm_calls": count // 2,
            "tailcut.trace.tool_calls": count // 2,
            "tailcut.trace.errors": 0,
            "tailcut.trace.total_tokens": rnd.randrange(10**5),
            "tailcut.trace.max_tool_repeat": 1,
            "tailcut.trace.depth": 1,
        }
        body = b"".join(_attribute(k, v) for k, v in root_attributes.items())
        encoded.append(
            _span(trace_id, root, b"", "support-agent", 1, start, start + count * 20_000_000) + body
        )
        for i in range(1, count):
            begin = start + i * 20_000_000
            big = rnd.random() < 0.10
            request = (
                f'{{"query":"{_text(rnd, rnd.randrange(2000, 4000) if big else rnd.randrange(20, 200))}"}}'
            )
            response = (
                f'{{"result":"{_text(rnd, rnd.randrange(2000, 4000) if big else rnd.randrange(20, 200))}"}}'
            )
            common = {
                "tailcut.occurrence": i // 2 + 1,
                "tailcut.seq": i,
                "tailcut.attempt": 1,
                "tailcut.request": request,
                "tailcut.request.sha256": hashlib.sha256(request.encode()).hexdigest(),
                "tailcut.response": response,
                "tailcut.response.sha256": hashlib.sha256(response.encode()).hexdigest(),
            }
            if i % 2:
                name, kind = "execute_tool search_kb", 1
                attributes = {
                    "tailcut.kind": "tool",
                    "tailcut.boundary": "tool:search_kb",
                    **common,
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search_kb",
                    "tailcut.retries": 0,
                }
            else:
                name, kind = "chat gpt-4o", 3
                attributes = {
                    "tailcut.kind": "llm",
                    "tailcut.boundary": "llm:openai.chat",
                    **common,
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": rnd.randrange(100, 3000),
                    "gen_ai.usage.output_tokens": rnd.randrange(10, 500),
                    "gen_ai.request.temperature": 0.2,
                }
            body = b"".join(_attribute(k, v) for k, v in attributes.items())
            encoded.append(
                _span(trace_id, rnd.randbytes(8), root, name, kind, begin, begin + 15_000_000) + body
            )
    service = _field(1, b"service.name") + _field(2, _field(1, b"support-agent"))  # KeyValue
    resource = _field(1, _field(1, service))  # ResourceSpans.resource = Resource{attributes}
    request = b""
    for first in range(0, len(encoded), MESSAGE_SPANS):
        spans_field = b"".join(_field(2, s) for s in encoded[first : first + MESSAGE_SPANS])
        scope_spans = _field(1, _field(1, b"tailcut")) + spans_field  # ScopeSpans{scope, spans}
        request += _field(1, resource + _field(2, scope_spans))  # ExportTraceServiceRequest.resource_spans
    return request


class Took(NamedTuple):
    """Wall-clock and CPU seconds (every thread of the process) of one measurement."""

    wall: float
    cpu: float


def _clock() -> Took:
    return Took(time.perf_counter(), time.process_time())


def _since(start: Took) -> Took:
    now = _clock()
    return Took(now.wall - start.wall, now.cpu - start.cpu)


def run_ours(
    batches: list[Batch], data: Path, *, keep: bool, features: bool = False
) -> tuple[Took, list[pa.Table]]:
    """Seconds to write the batches' spans to ``data``, and the rows written when ``keep`` asks for them.

    Rows are kept only for the floor's table (first round): a writer's caller drops each batch once it
    is written, and holding 200k rows (with their payloads) would make the round measure the allocation of
    memory the harness keeps, not the pipeline. ``features``: with the per-trace features hook.
    """
    tables = []
    hooks = []
    if features:
        from tailcut.analysis._features_worker import FeatureHook

        hooks.append(FeatureHook())
    started = _clock()
    with DataDirWriter(data, hooks=hooks) as writer:
        for batch in batches:
            table = normalize_otlp(batch)
            writer.write_spans(table)
            if keep:
                tables.append(table)
    return _since(started), tables


def run_floor(table: pa.Table, path: Path) -> Took:
    started = _clock()
    pq.write_table(table, path, compression="zstd", row_group_size=100_000)
    return _since(started)


def _rounded(seconds: list[float]) -> list[float]:
    return [round(s, 3) for s in seconds]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=200_000, help="spans to write (default 200000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (best counts)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.spans < SPANS_PER_TRACE:
        parser.error(f"--spans must be at least {SPANS_PER_TRACE}")

    print(f"generating {args.spans} spans ...", flush=True)
    request = ExportTraceServiceRequest.FromString(make_request(args.spans, args.seed))
    messages = list(request.resource_spans)
    as_messages: list[Batch] = [
        messages[first : first + BATCH_MESSAGES] for first in range(0, len(messages), BATCH_MESSAGES)
    ]
    as_bytes: list[Batch] = [
        ExportTraceServiceRequest(resource_spans=batch).SerializeToString() for batch in as_messages
    ]
    took: dict[str, list[Took]] = {"bytes": [], "messages": [], "features": [], "floor": []}
    table = None
    for _ in range(args.rounds):
        scratch = Path(tempfile.mkdtemp(prefix="bench-storage-"))
        try:
            measured, tables = run_ours(as_bytes, scratch / "data", keep=table is None)
            took["bytes"].append(measured)
            if table is None:
                table = pa.concat_tables(tables).combine_chunks()
            del tables
            took["messages"].append(run_ours(as_messages, scratch / "messages", keep=False)[0])
            took["features"].append(run_ours(as_bytes, scratch / "features", keep=False, features=True)[0])
            took["floor"].append(run_floor(table, scratch / "floor.parquet"))
        finally:
            shutil.rmtree(scratch)
    assert table is not None and table.num_rows == args.spans
    seconds = {name: [t.wall for t in values] for name, values in took.items()}
    best = {name: min(values) for name, values in seconds.items()}
    cpu = {name: min(t.cpu for t in values) for name, values in took.items()}
    labels = {
        "bytes": "ours, from request bytes (the collector's input)",
        "messages": "ours, from parsed ResourceSpans messages",
        "features": "ours, from request bytes, features hooked in",
        "floor": "floor, pyarrow writing ready Arrow arrays",
    }
    for name, label in labels.items():
        print(
            f"{label:50} {args.spans / best[name]:>9,.0f} rows/s  "
            f"({best[name]:.3f} s; rounds {_rounded(seconds[name])}; best CPU {cpu[name]:.3f} s)"
        )
    for name in ("bytes", "messages"):
        ratio = best["floor"] / best[name]
        verdict = "met" if ratio >= 0.4 else "NOT met"
        print(
            f"ratio, {name:8}: {ratio:.2f}x the floor's speed (goal >= 0.40x): {verdict}; "
            f"in CPU seconds {cpu['floor'] / cpu[name]:.2f}x"
        )
    print(
        f"ratio, features: {best['floor'] / best['features']:.2f}x the floor's speed, in CPU seconds "
        f"{cpu['floor'] / cpu['features']:.2f}x (the writer with the features hooked in, as every writer "
        "ran before issue 26; no goal)"
    )


if __name__ == "__main__":
    main()
