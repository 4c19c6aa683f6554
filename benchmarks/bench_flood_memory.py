"""Peak memory of ``tailcut collect`` under a flood, against the bound the config promises.

A real ``tailcut collect`` process with a small buffer budget (``max_buffer_mib``), ``num_traces`` and
decision caches is flooded over loopback with (1) spans of about 2 KB whose roots never arrive, many
times the budget in all, then (2) one-span traces (each its own root). The collector must decide them
(evicting the oldest), write one ``traces`` row each, and stay within

    peak RSS <= idle RSS + 3 x max_buffer_mib + 150 MiB

where idle is the same process's resident set once it is warm, measured in the same run: it has received,
kept, written and classified one failed trace, so DuckDB and the classifier are paged in (their first use
adds some 70 MiB whatever the load: library code and first-call state, not the flood's data). The figure
printed is (peak - idle) / (3 x budget + 150 MiB): at most 1 meets the goal; the growth over the cold
process (ready, nothing received) is printed beside it.

Run::

    python benchmarks/bench_flood_memory.py                 # the issue's flood: 16 MiB, 16x, 150,000
    python benchmarks/bench_flood_memory.py --orphans 4 --one-span 20000 --budget-mib 4   # quicker
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

MIB = 1024 * 1024
#: What the bound allows besides the buffer: the interpreter, libraries, writer and findings state.
SLACK_MIB = 150


class FloodResult(NamedTuple):
    cold_mib: float
    idle_mib: float
    peak_mib: float
    budget_mib: float
    spans_sent: int
    traces_sent: int
    statuses: dict[int, int]
    traces_rows: int

    @property
    def bound_mib(self) -> float:
        return self.idle_mib + 3 * self.budget_mib + SLACK_MIB

    @property
    def ratio(self) -> float:
        """(peak - idle) / (3 x budget + slack): at most 1 within the bound."""
        return (self.peak_mib - self.idle_mib) / (3 * self.budget_mib + SLACK_MIB)


def _request(spans: list[Span]) -> bytes:
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="flood")))
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def _span(rng: random.Random, *, root: bool, payload: int) -> Span:
    start = 1_700_000_000_000_000_000 + rng.randrange(10**9)
    span = Span(
        trace_id=rng.randbytes(16),
        span_id=rng.randbytes(8),
        parent_span_id=b"" if root else rng.randbytes(8),
        name="tool:lookup" if not root else "run",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000,
    )
    if payload:
        span.attributes.append(KeyValue(key="tailcut.response", value=AnyValue(string_value="x" * payload)))
    return span


def flood_requests(orphan_bytes: int, one_span: int, seed: int = 0) -> Iterator[tuple[bytes, int, int]]:
    """(body, spans, new traces) of the flood: orphans of 2 KB in requests of 100, then one-span traces
    in requests of 500."""
    rng = random.Random(seed)
    sent = 0
    while sent < orphan_bytes:
        spans = [_span(rng, root=False, payload=2000) for _ in range(100)]
        body = _request(spans)
        sent += len(body)
        yield body, len(spans), len(spans)
    for first in range(0, one_span, 500):
        spans = [_span(rng, root=True, payload=0) for _ in range(min(500, one_span - first))]
        yield _request(spans), len(spans), len(spans)


def _config(directory: Path, budget_mib: float) -> Path:
    from tailcut.collector._config import default_config_text

    document = yaml.safe_load(default_config_text())
    protocols = document["receivers"]["otlp"]["protocols"]
    protocols["http"] = {"endpoint": "127.0.0.1:0"}
    protocols.pop("grpc", None)
    document["service"]["telemetry"]["metrics"]["address"] = "127.0.0.1:0"
    document["exporters"]["tailcut_parquet"]["path"] = str(directory / "data")
    block = document["processors"]["tail_sampling"]
    block.update(num_traces=5000, decision_wait="5s")
    block["decision_cache"] = {"sampled_cache_size": 10_000, "non_sampled_cache_size": 10_000}
    document["processors"]["tailcut"]["max_buffer_mib"] = budget_mib
    path = directory / "otel-config.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


class _PeakWatcher(threading.Thread):
    """Samples a process's resident set every 50 ms; the kernel's high-water mark backs it up."""

    def __init__(self, process: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.process = process
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return

    def high_water(self) -> int:
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return max(self.peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        return self.peak


def _failed_root(rng: random.Random) -> Span:
    """A one-span trace whose root failed: every policy set keeps it, so it is written and classified."""
    span = _span(rng, root=True, payload=0)
    span.status.code = span.status.STATUS_CODE_ERROR
    return span


def _wait_written(metrics: str, deadline: float = 60.0) -> None:
    """Poll the collector's Prometheus endpoint until it has written a batch of spans to its writer."""
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as response:
            text = response.read().decode()
        if any(line.startswith('tailcut_write_seconds_count{table="spans"}') for line in text.splitlines()):
            return
        time.sleep(0.1)
    raise AssertionError(f"the warm-up trace was not written within {deadline:.0f} s")


def _settled_rss(process: psutil.Process, *, window: float = 1.0, deadline: float = 30.0) -> int:
    """The resident set once it has moved by under 1 MiB for ``window`` seconds (threads started, work
    done), polled every 50 ms; the last sample if it has not settled within ``deadline`` seconds."""
    samples: list[tuple[float, int]] = []
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        now, rss = time.monotonic(), process.memory_info().rss
        samples = [(t, r) for t, r in samples if t >= now - window] + [(now, rss)]
        span = samples[-1][0] - samples[0][0]
        if span >= window * 0.9 and max(r for _, r in samples) - min(r for _, r in samples) < MIB:
            return rss
        time.sleep(0.05)
    return samples[-1][1]


def _post(connection: http.client.HTTPConnection, body: bytes) -> int:
    connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
    response = connection.getresponse()
    response.read()
    return response.status


def run_flood(budget_mib: float, orphan_multiple: float, one_span: int, directory: Path) -> FloodResult:
    """Start ``tailcut collect``, flood it, stop it, and return what it held at most."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tailcut", "collect", "--config", str(_config(directory, budget_mib))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        ready: dict[str, Any] = json.loads(process.stdout.readline())
        port = int(ready["http"].rsplit(":", 1)[1])
        watched = psutil.Process(process.pid)
        cold = _settled_rss(watched)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        status = _post(connection, _request([_failed_root(random.Random(1))]))
        assert status == 200, f"the warm-up trace was answered {status}"
        _wait_written(ready["metrics"])  # decided after decision_wait, then handed to the writer
        idle = _settled_rss(watched, window=2.5)  # the feature worker waits a second for more batches
        watcher = _PeakWatcher(watched)
        watcher.start()
        statuses: dict[int, int] = {200: 1}
        spans = traces = 1
        for body, count, new in flood_requests(int(orphan_multiple * budget_mib * MIB), one_span):
            status = _post(connection, body)
            while status in (429, 503):  # back off as an exporter does, then send again
                statuses[status] = statuses.get(status, 0) + 1
                time.sleep(0.05)
                status = _post(connection, body)
            statuses[status] = statuses.get(status, 0) + 1
            spans += count
            traces += new
        connection.close()
        process.send_signal(15)
        _, err = process.communicate(timeout=300)
        watcher.stop.set()
        assert process.returncode == 0, err
        peak = watcher.high_water()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    import pyarrow.dataset as ds

    rows = ds.dataset(str(directory / "data" / "traces"), format="parquet", partitioning="hive").count_rows()
    return FloodResult(cold / MIB, idle / MIB, peak / MIB, budget_mib, spans, traces, statuses, rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-mib", type=float, default=16.0, help="max_buffer_mib (default 16)")
    parser.add_argument(
        "--orphans", type=float, default=16.0, help="orphan bytes as a multiple of the budget (default 16)"
    )
    parser.add_argument("--one-span", type=int, default=150_000, help="one-span traces after the orphans")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tailcut-flood-") as tmp:
        result = run_flood(args.budget_mib, args.orphans, args.one_span, Path(tmp))
    print(
        f"flood: {result.spans_sent:,} spans, {result.traces_sent:,} traces sent "
        f"(answers {result.statuses}); {result.traces_rows:,} traces rows written"
    )
    print(
        f"RSS idle {result.idle_mib:.0f} MiB, peak {result.peak_mib:.0f} MiB; bound "
        f"{result.bound_mib:.0f} MiB (idle + 3 x {result.budget_mib:g} + {SLACK_MIB})"
    )
    print(f"growth / allowed growth: {result.ratio:.2f} (goal <= 1)")
    cold = (result.peak_mib - result.cold_mib) / (3 * result.budget_mib + SLACK_MIB)
    print(f"over the cold process (RSS {result.cold_mib:.0f} MiB, nothing received yet): {cold:.2f}")


if __name__ == "__main__":
    main()
