"""What a long agent loop costs to record: bytes stored, bytes sent, collector memory, SDK time.

A loop agent (system prompt, one 3 KB tool result per step, the whole transcript resent at every step)
runs 10, 40 and 160 steps through the real SDK (openai instrumented, OTLP/HTTP exporter, tailcut's batch
processor) to a real collector (receivers on loopback, tail sampling, Parquet), once as tailcut records
by default (requests as skeleton plus pieces) and once ``self_contained`` (every request whole: how
tailcut recorded before, the baseline), in the same run. Figures are ratios to the run's unique message
content (each distinct message of the final transcript, plus the last reply, counted once):

* stored: bytes the run adds to the data dir (``spans``, ``pieces``, ``payloads``; for the baseline also
  the agent-local payload store it needs) (goal <= 1.5x);
* sent: OTLP request bytes the exporter posted (goal <= 2x);
* memory: the collector's peak buffered span bytes while the trace waits for its decision (goal <= 2x);
* write-time: the spans file if the full requests were written instead of skeletons (the alternative to
  putting them back in the ``spans`` view);
* crossing: the SDK's own time per LLM call (request and response recording) at the last step over the
  first (medians of three calls), as wall time and as the agent thread's CPU time: the collector runs in
  this process, so wall time also counts the waits for the GIL while it handles earlier spans.

Run: ``python benchmarks/bench_payloads.py [--steps 10 40 160]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider

import tailcut
from tailcut import _config
from tailcut._processor import RecordingSpanProcessor
from tailcut.analysis import Dataset
from tailcut.canonical import canonical_json
from tailcut.collector import Collector, load_config
from tailcut.instrumentation import _llm
from tailcut.payloads import PayloadStore
from tailcut.testing import ModelServer, ScriptedReply

SYSTEM = "You are a careful support agent. Check every fact with a tool before you answer. " * 24
_CONFIG = """
receivers:
  otlp:
    protocols:
      http: {{endpoint: 127.0.0.1:0}}
processors:
  tailcut: {{late_span_window: 200ms}}
  tail_sampling:
    decision_wait: 10m
    decision_wait_after_root_received: 200ms
    policies:
      - {{name: all, type: always_sample}}
exporters:
  tailcut_parquet: {{path: {data}}}
service:
  telemetry: {{metrics: {{address: 127.0.0.1:0}}}}
  pipelines:
    traces: {{receivers: [otlp], processors: [tailcut, tail_sampling], exporters: [tailcut_parquet]}}
"""


class CountingSession(requests.Session):
    """A requests session that adds up the bytes of every body it posts."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def request(
        self, method: Any, url: Any, *args: Any, data: Any = None, **kwargs: Any
    ) -> requests.Response:  # type: ignore[override]
        self.sent += len(data or b"")
        return super().request(method, url, *args, data=data, **kwargs)


class CrossingTimer:
    """Times the SDK's own work per LLM call: ``LLMCall.start`` plus ``LLMCall.completed``."""

    def __init__(self) -> None:
        self.per_call: list[float] = []
        self.cpu_per_call: list[float] = []
        self._start = _llm.LLMCall.start
        self._completed = _llm.LLMCall.completed

    def __enter__(self) -> CrossingTimer:
        timer, start, completed = self, self._start, self._completed

        def timed_start(cls: Any, api: Any, call: Any) -> Any:
            began, cpu = time.perf_counter(), time.thread_time()
            result = start.__func__(cls, api, call)  # type: ignore[attr-defined]
            timer.per_call.append(time.perf_counter() - began)
            timer.cpu_per_call.append(time.thread_time() - cpu)
            return result

        def timed_completed(self: Any, result: Any) -> Any:
            began, cpu = time.perf_counter(), time.thread_time()
            out = completed(self, result)
            timer.per_call[-1] += time.perf_counter() - began
            timer.cpu_per_call[-1] += time.thread_time() - cpu
            return out

        _llm.LLMCall.start = classmethod(timed_start)  # type: ignore[method-assign,assignment]
        _llm.LLMCall.completed = timed_completed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        _llm.LLMCall.start = self._start  # type: ignore[method-assign]
        _llm.LLMCall.completed = self._completed  # type: ignore[method-assign]


WORDS = [
    f"{a}{b}"
    for a in ("re", "con", "pro", "de", "in", "ex", "sub", "trans")
    for b in (
        "fund",
        "order",
        "ship",
        "bill",
        "track",
        "part",
        "claim",
        "note",
        "form",
        "line",
        "sum",
        "date",
    )
]


def tool_result(step: int) -> str:
    """3 KB of text that compresses about as well as prose (seeded word salad), distinct per step."""
    rng = random.Random(step)
    text = f"[record {step}] " + " ".join(f"{rng.choice(WORDS)}-{rng.randrange(10**6)}" for _ in range(300))
    return text[:3000]


def loop_agent(client: openai.OpenAI, steps: int) -> list[dict[str, Any]]:
    """The loop; returns the final transcript (with the last reply)."""

    @tailcut.tool(name="lookup")
    def lookup(step: int) -> str:
        return tool_result(step)

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Why was order 42 refunded twice?"},
    ]
    with tailcut.run("loop-agent", input={"steps": steps}):
        for step in range(steps):
            completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
            if step < steps - 1:
                messages.append({"role": "user", "content": lookup(step)})
    return messages


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def measure(steps: int, *, self_contained: bool, workdir: Path) -> dict[str, float]:
    data = workdir / "data"
    config = workdir / "otel-config.yaml"
    config.write_text(_CONFIG.format(data=data))
    collector = Collector(load_config(config))
    collector.start()
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.002):
            peak[0] = max(peak[0], collector.processor.buffer.nbytes)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    session = CountingSession()
    exporter = OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{collector.ports.http}/v1/traces", session=session
    )
    provider = TracerProvider()
    provider.add_span_processor(RecordingSpanProcessor(exporter))
    local = PayloadStore(workdir / "agent-payloads")
    previous = _config.install(
        _config.Config(
            enabled=True,
            tracer=provider.get_tracer("bench"),
            payload_store=local,
            self_contained=self_contained,
        )
    )
    server = ModelServer(clock=lambda: 1_700_000_000.0)
    try:
        with server, CrossingTimer() as timer:
            server.enqueue(
                *(ScriptedReply(text=f"Step {i}: checking the next record.") for i in range(steps))
            )
            with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
                transcript = loop_agent(client, steps)
        provider.force_flush()
        collector.wait_idle(60, quiet=0.5)
    finally:
        _config.install(previous)
        provider.shutdown()
        sampling.set()
        sampler.join()
        collector.stop()
    unique = sum(len(canonical_json(m).encode()) for m in {canonical_json(m): m for m in transcript}.values())
    stored = dir_bytes(data / "spans") + dir_bytes(data / "pieces") + dir_bytes(data / "payloads")
    stored += dir_bytes(local.root)
    write_time = write_time_bytes(data, workdir / "whole.parquet")
    first = statistics.median(timer.per_call[:3])
    last = statistics.median(timer.per_call[-3:])
    first_cpu = statistics.median(timer.cpu_per_call[:3])
    last_cpu = statistics.median(timer.cpu_per_call[-3:])
    return {
        "unique": unique,
        "stored": stored / unique,
        "sent": session.sent / unique,
        "memory": peak[0] / unique,
        "write_time": write_time / unique,
        "crossing": last / first,
        "first_ms": first * 1000,
        "last_ms": last * 1000,
        "cpu": last_cpu / first_cpu,
        "cpu_first_ms": first_cpu * 1000,
        "cpu_last_ms": last_cpu * 1000,
    }


def write_time_bytes(data: Path, out: Path) -> int:
    """Bytes of the spans files if every request were written whole (zstd, as the writer does)."""
    table = ds.dataset(data / "spans", format="parquet", partitioning="hive").to_table()
    with Dataset(data) as dataset:
        whole = dataset.sql_arrow("SELECT request FROM spans ORDER BY trace_id, span_index").column("request")
    table = table.sort_by([("trace_id", "ascending"), ("span_index", "ascending")])
    table = table.set_column(table.schema.get_field_index("request"), "request", whole)
    pq.write_table(table, out, compression="zstd")
    return out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 40, 160])
    args = parser.parse_args()
    tailcut.instrument_openai()
    print(
        f"{'steps':>5} {'mode':>14} {'unique':>9} {'stored':>7} {'sent':>7} {'memory':>7} "
        f"{'write-time':>10} {'crossing last/first (ms)':>26} {'cpu (ms)':>14}"
    )
    for steps in args.steps:
        for self_contained in (True, False):
            with tempfile.TemporaryDirectory(prefix="tailcut-bench-payloads-") as tmp:
                r = measure(steps, self_contained=self_contained, workdir=Path(tmp))
            mode = "whole (before)" if self_contained else "pieces"
            print(
                f"{steps:>5} {mode:>14} {r['unique'] / 1024:>7.0f}KB {r['stored']:>6.2f}x {r['sent']:>6.2f}x "
                f"{r['memory']:>6.2f}x {r['write_time']:>9.2f}x "
                f"{r['crossing']:>8.2f}x ({r['first_ms']:.2f} -> {r['last_ms']:.2f}) "
                f"{r['cpu']:>6.2f}x ({r['cpu_first_ms']:.2f} -> {r['cpu_last_ms']:.2f})"
            )
    print("goals for pieces: stored <= 1.5x, sent <= 2x, memory <= 2x of the unique message content")


if __name__ == "__main__":
    main()
