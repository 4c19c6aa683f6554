"""Collector throughput and memory, against the cost of merely parsing the same OTLP requests.

One run measures, with the same pre-encoded OTLP/HTTP requests (agent-like spans of about 12
attributes, 10% of them carrying a 2-4 KB payload) posted over loopback by a separate client process:

(a) the bound: a receiver that only parses each body with ``ParseFromString`` and discards it (same HTTP
    server code as the collector; ``--compare-http`` adds other servers), in spans per receiver
    CPU-second;
(b) ``tailcut collect`` end to end (receive, buffer, signals, policies, Parquet) at about a 10% keep
    rate, in spans per collector CPU-second (user + system time of the collector process, read with
    psutil, from the first request until every trace is decided and written), with the write-ahead log
    on (its default: fsync policy ``interval``); then once more without it, which gives the log's share
    of the cost, and the log's fsync latency percentiles (from ``tailcut_wal_fsync_seconds``);
(c) peak memory per buffered span: the collector's resident-set growth while holding every span
    undecided, divided by the spans' OTLP-encoded size.

Goals: (b) >= 0.3 x (a); (c) <= 2.

Run::

    python benchmarks/bench_collector.py            # about two minutes on 2 cores
    python benchmarks/bench_collector.py --compare-http   # also the parse-only bound under uvicorn
                                                          # (httptools), hypercorn, aiohttp and
                                                          # http.server (why the collector runs h11
                                                          # under its own asyncio protocol)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

# --- workload -----------------------------------------------------------------------------------------------


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        any_value = AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = AnyValue(int_value=value)
    elif isinstance(value, float):
        any_value = AnyValue(double_value=value)
    else:
        any_value = AnyValue(string_value=str(value))
    return KeyValue(key=key, value=any_value)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def agent_trace(rnd: random.Random, start_ns: int, *, failed: bool, spans: int = 10) -> list[Span]:
    """One agent run: a root, then alternating llm and tool calls (about 12 attributes each)."""
    trace_id = rnd.randbytes(16)
    root_id = rnd.randbytes(8)
    out: list[Span] = []
    t = start_ns
    for seq in range(1, spans):
        span_id = rnd.randbytes(8)
        duration = rnd.randint(5, 400) * 1_000_000
        if seq % 2:
            request = json.dumps(
                {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"step {seq}"}]}
            )
            if rnd.random() < 0.1:
                request = json.dumps(
                    {
                        "model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": "x" * rnd.randint(2000, 4000)}],
                    }
                )
            attributes = [
                ("tailcut.kind", "llm"),
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.provider.name", "openai"),
                ("gen_ai.request.model", "gpt-4o-mini"),
                ("gen_ai.usage.input_tokens", rnd.randint(200, 3000)),
                ("gen_ai.usage.output_tokens", rnd.randint(20, 600)),
                ("tailcut.boundary", "llm:openai.chat"),
                ("tailcut.occurrence", (seq + 1) // 2),
                ("tailcut.seq", seq),
                ("tailcut.request", request),
                ("tailcut.request.sha256", _sha(request)),
                ("gen_ai.response.id", "chatcmpl-" + rnd.randbytes(6).hex()),
            ]
            name = "chat gpt-4o-mini"
        else:
            arguments = json.dumps({"query": f"order {rnd.randint(1, 10**6)}"})
            attributes = [
                ("tailcut.kind", "tool"),
                ("gen_ai.operation.name", "execute_tool"),
                ("gen_ai.tool.name", "search_kb"),
                ("gen_ai.tool.call.id", "call_" + rnd.randbytes(6).hex()),
                ("gen_ai.tool.call.arguments", arguments),
                ("tailcut.boundary", "tool:search_kb"),
                ("tailcut.occurrence", seq // 2),
                ("tailcut.seq", seq),
                ("tailcut.request.sha256", _sha(arguments)),
                ("tailcut.response", json.dumps({"hits": [rnd.randint(1, 99) for _ in range(5)]})),
                ("tailcut.response.sha256", _sha(str(seq))),
                ("tailcut.attempt", 1),
            ]
            name = "execute_tool search_kb"
        out.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=root_id,
                name=name,
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=t,
                end_time_unix_nano=t + duration,
                attributes=[_kv(k, v) for k, v in attributes],
                status=Status(
                    code=Status.STATUS_CODE_ERROR if failed and seq == spans - 1 else Status.STATUS_CODE_UNSET
                ),
            )
        )
        t += duration
    root_attributes = [
        ("tailcut.kind", "root"),
        ("gen_ai.operation.name", "invoke_workflow"),
        ("tailcut.harness.revision", "abc123"),
        ("tailcut.env.revision", "env-7"),
        ("tailcut.run.input", json.dumps({"ticket": rnd.randint(1, 10**6)})),
        ("tailcut.outcome", "fail" if failed else "pass"),
        ("tailcut.outcome.score", 0.2 if failed else 0.9),
        ("tailcut.prompt.version", "v7"),
        ("gen_ai.agent.name", "support-agent"),
        ("tailcut.trace.llm_calls", spans // 2),
        ("tailcut.trace.tool_calls", spans // 2 - 1),
        ("tailcut.trace.errors", int(failed)),
    ]
    out.append(
        Span(
            trace_id=trace_id,
            span_id=root_id,
            name="support-agent",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start_ns,
            end_time_unix_nano=t,
            attributes=[_kv(k, v) for k, v in root_attributes],
            status=Status(code=Status.STATUS_CODE_ERROR if failed else Status.STATUS_CODE_UNSET),
        )
    )
    return out


def build_requests(
    traces: int, spans_per_request: int, failure_rate: float, seed: int = 7
) -> tuple[list[bytes], int, int]:
    """Encoded requests (each trace's spans in order, root last, batched like an SDK exporter).

    Returns the bodies, the span count and the summed encoded size of the spans.
    """
    rnd = random.Random(seed)
    now = time.time_ns()
    spans: list[Span] = []
    for index in range(traces):
        spans.extend(agent_trace(rnd, now + index * 1_000_000, failed=rnd.random() < failure_rate))
    bodies = []
    for start in range(0, len(spans), spans_per_request):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(
            [_kv("service.name", "support-agent"), _kv("host.name", "bench")]
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "tailcut"
        scope_spans.spans.extend(spans[start : start + spans_per_request])
        bodies.append(request.SerializeToString())
    return bodies, len(spans), sum(span.ByteSize() for span in spans)


# --- processes ----------------------------------------------------------------------------------------------

_PARSE_ONLY = textwrap.dedent(
    """
    import asyncio, sys
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest, ExportTraceServiceResponse)
    OK = ExportTraceServiceResponse().SerializeToString()
    kind = sys.argv[1]

    def parse(body):
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)

    async def asgi(scope, receive, send):
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        parse(bytes(body))
        headers = [(b"content-type", b"application/x-protobuf"), (b"content-length", b"%d" % len(OK))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": OK})

    def listening():
        import socket
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        print(sock.getsockname()[1], flush=True)
        return sock

    if kind == "tailcut":
        from tailcut.collector._http import HttpServer, Limits, Response

        def handle(request):
            parse(request.body)
            return Response(200, OK, content_type="application/x-protobuf")

        async def main():
            server = HttpServer({"/v1/traces": {"POST": handle}}, limits=Limits(max_body=1 << 30))
            print(await server.start("127.0.0.1", 0), flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
    elif kind == "uvicorn":
        import uvicorn

        config = uvicorn.Config(asgi, http="httptools", lifespan="off", access_log=False, log_level="warning")
        asyncio.run(uvicorn.Server(config).serve(sockets=[listening()]))
    elif kind == "hypercorn":
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        sock = listening()
        config.bind = [f"fd://{sock.fileno()}"]
        config.accesslog = config.errorlog = None
        asyncio.run(serve(asgi, config, mode="asgi"))
    elif kind == "aiohttp":
        from aiohttp import web

        async def handle(request):
            parse(await request.read())
            return web.Response(body=OK, content_type="application/x-protobuf")

        async def main():
            runner = web.ServerRunner(web.Server(handle, access_log=None))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            print(site._server.sockets[0].getsockname()[1], flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
    else:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                parse(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(OK)))
                self.end_headers()
                self.wfile.write(OK)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
    """
)


@contextlib.contextmanager
def parse_only_receiver(kind: str) -> Iterator[tuple[psutil.Process, int]]:
    process = subprocess.Popen([sys.executable, "-c", _PARSE_ONLY, kind], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())  # type: ignore[union-attr]
        yield psutil.Process(process.pid), port
    finally:
        process.terminate()
        process.wait(10)


_CONFIG = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
        max_request_body_size: 268435456
processors:
  tailcut:
    late_span_window: {late}
    wal: {{enabled: {wal}}}
  tail_sampling:
    decision_wait: {wait}
    decision_wait_after_root_received: {grace}
    num_traces: 1000000
    decision_cache:
      sampled_cache_size: 100000
      non_sampled_cache_size: 200000
    policies:
      - name: errors
        type: status_code
        status_code: {{status_codes: [ERROR]}}
      - name: schema-violations
        type: numeric_attribute
        numeric_attribute: {{key: tailcut.trace.schema_violations, min_value: 1}}
      - name: tool-loops
        type: numeric_attribute
        numeric_attribute: {{key: tailcut.trace.max_tool_repeat, min_value: 3}}
      - name: anomalies
        type: numeric_attribute
        numeric_attribute: {{key: tailcut.trace.anomaly_score, min_value: 3.5}}
      - {{name: slow, type: latency, latency: {{threshold_ms: 120000}}}}
      - name: bad-outcome
        type: string_attribute
        string_attribute: {{key: tailcut.outcome, values: [fail]}}
      - {{name: baseline, type: probabilistic, probabilistic: {{sampling_percentage: 5}}}}
exporters:
  tailcut_parquet:
    path: {data}
service:
  telemetry:
    metrics:
      address: 127.0.0.1:0
  pipelines:
    traces:
      receivers: [otlp]
      processors: [tailcut, tail_sampling]
      exporters: [tailcut_parquet]
"""


@contextlib.contextmanager
def collector(
    workdir: Path, *, wait: str, grace: str, late: str, wal: bool = True
) -> Iterator[tuple[psutil.Process, int, int]]:
    data = workdir / "data"
    config = workdir / "otel-config.yaml"
    config.write_text(
        _CONFIG.format(wait=wait, grace=grace, late=late, data=data, wal="true" if wal else "false")
    )
    process = subprocess.Popen(
        [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        ready = json.loads(process.stdout.readline())  # type: ignore[union-attr]
        http_port = int(ready["http"].rsplit(":", 1)[1])
        metrics_port = int(ready["metrics"].rsplit(":", 1)[1])
        yield psutil.Process(process.pid), http_port, metrics_port
    finally:
        process.terminate()
        process.wait(120)


def post_all(port: int, bodies: list[bytes], connections: int = 4) -> None:
    """POST every body (protobuf) over ``connections`` keep-alive connections from a client process."""
    script = textwrap.dedent(
        """
        import http.client, sys, threading
        port, connections, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
        data = open(path, "rb").read()
        bodies, offset = [], 0
        while offset < len(data):
            size = int.from_bytes(data[offset:offset + 4], "little")
            bodies.append(data[offset + 4:offset + 4 + size])
            offset += 4 + size
        def worker(k):
            connection = http.client.HTTPConnection("127.0.0.1", port)
            for i in range(k, len(bodies), connections):
                while True:
                    connection.request("POST", "/v1/traces", body=bodies[i],
                                       headers={"Content-Type": "application/x-protobuf"})
                    response = connection.getresponse()
                    response.read()
                    if response.status == 200:
                        break
                    assert response.status == 429, response.status
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        """
    )
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as handle:
        for body in bodies:
            handle.write(len(body).to_bytes(4, "little") + body)
    try:
        subprocess.run([sys.executable, "-c", script, str(port), str(connections), handle.name], check=True)
    finally:
        os.unlink(handle.name)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def scrape(port: int) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = values.get(name, 0.0) + float(value)
    return values


def metric(values: dict[str, float], prefix: str) -> float:
    return sum(value for name, value in values.items() if name.split("{", 1)[0] == prefix)


# --- measurements -------------------------------------------------------------------------------------------


def bound(kind: str, bodies: list[bytes], spans: int) -> float:
    with parse_only_receiver(kind) as (process, port):
        post_all(port, bodies[: max(1, len(bodies) // 10)])  # warm up
        before = cpu_seconds(process)
        post_all(port, bodies)
        return spans / (cpu_seconds(process) - before)


#: Seconds between scrapes while waiting for the last rows: each scrape costs the collector about a
#: millisecond of CPU, so polling much faster would bill the benchmark's own watching to the collector.
_POLL = 0.2


class EndToEnd(NamedTuple):
    rate: float  # spans per collector CPU-second
    keep: float  # kept traces / traces
    written: int  # spans written
    fsync: dict[float, float]  # the write-ahead log's fsync histogram: upper bound (s) -> cumulative count


def end_to_end(bodies: list[bytes], spans: int, traces: int, *, wal: bool = True) -> EndToEnd:
    """Spans per collector CPU-second, the keep rate, the spans written and the log's fsync latencies."""
    with (
        tempfile.TemporaryDirectory() as workdir,
        collector(Path(workdir), wait="60s", grace="200ms", late="100ms", wal=wal) as (
            process,
            port,
            metrics_port,
        ),
    ):
        before = cpu_seconds(process)
        post_all(port, bodies)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            values = scrape(metrics_port)
            decided = metric(values, "tailcut_decisions_total")
            written = metric(values, "tailcut_rows_written_total")
            if decided >= traces and metric(values, "tailcut_write_backlog_bytes") == 0 and written > 0:
                spans_rows = values.get('tailcut_rows_written_total{table="spans"}', 0.0)
                trace_rows = values.get('tailcut_rows_written_total{table="traces"}', 0.0)
                if trace_rows >= traces:
                    break
            time.sleep(_POLL)
        else:
            raise RuntimeError("the collector did not decide and write every trace in time")
        used = cpu_seconds(process) - before
        kept = metric({k: v for k, v in values.items() if 'kept="true"' in k}, "tailcut_decisions_total")
        prefix = 'tailcut_wal_fsync_seconds_bucket{le="'
        fsync = {
            float(name[len(prefix) : -2]): value for name, value in values.items() if name.startswith(prefix)
        }
        return EndToEnd(spans / used, kept / traces, int(spans_rows), fsync)


def quantile(histogram: dict[float, float], q: float) -> float:
    """The ``q`` quantile of a cumulative histogram, interpolated within its bucket (as Prometheus does)."""
    bounds = sorted(histogram)
    total = histogram[bounds[-1]]
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = histogram[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def memory_ratio(bodies: list[bytes], span_bytes: int) -> tuple[float, int]:
    """Peak RSS growth per encoded span byte while every span waits for its decision."""
    with (
        tempfile.TemporaryDirectory() as workdir,
        collector(Path(workdir), wait="10m", grace="0s", late="1s") as (
            process,
            port,
            metrics_port,
        ),
    ):
        time.sleep(0.5)
        baseline = process.memory_info().rss
        post_all(port, bodies)
        values = scrape(metrics_port)
        buffered = metric(values, "tailcut_buffer_bytes")
        assert buffered == span_bytes, "every span should still be waiting for its decision"
        return (peak_rss(process) - baseline) / span_bytes, int(buffered)


def peak_rss(process: psutil.Process) -> int:
    """The process's peak resident set size (``VmHWM`` on Linux; the current size elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return process.memory_info().rss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=20_000, help="agent runs of 10 spans each")
    parser.add_argument(
        "--spans-per-request", type=int, default=512, help="the OTel SDK's default batch size"
    )
    parser.add_argument(
        "--compare-http",
        action="store_true",
        help="also measure the bound under uvicorn (httptools), hypercorn, aiohttp and http.server",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs of (a) and (b); the best of each counts")
    args = parser.parse_args()
    bodies, spans, span_bytes = build_requests(args.traces, args.spans_per_request, failure_rate=0.05)
    print(
        f"workload: {args.traces} traces, {spans} spans in {len(bodies)} requests of "
        f"{args.spans_per_request}, {span_bytes / spans:.0f} encoded bytes per span"
    )
    bound_rate = max(bound("tailcut", bodies, spans) for _ in range(args.repeat))
    print(f"(a) parse-only receiver:       {bound_rate:12,.0f} spans per CPU-second")
    if args.compare_http:
        for kind in ("uvicorn", "hypercorn", "aiohttp", "stdlib"):
            rate = max(bound(kind, bodies, spans) for _ in range(args.repeat))
            print(
                f"    same, under {kind:9}         {rate:12,.0f} spans per CPU-second "
                f"({rate / bound_rate:.2f}x)"
            )
    best = max((end_to_end(bodies, spans, args.traces) for _ in range(args.repeat)), key=lambda r: r.rate)
    rate = best.rate
    print(
        f"(b) tailcut collect end to end: {rate:12,.0f} spans per CPU-second "
        f"(keep rate {best.keep:.1%}, {best.written} spans written)"
    )
    unlogged = max(end_to_end(bodies, spans, args.traces, wal=False).rate for _ in range(args.repeat))
    fsyncs = best.fsync.get(float("inf"), 0.0)
    print(
        f"    same without the write-ahead log: {unlogged:12,.0f} spans per CPU-second: the log's share "
        f"of the cost {1 - rate / unlogged:.0%} (runs here vary by about 5%; bench_wal.py times ingest alone)"
    )
    print(
        f"    write-ahead log fsyncs (policy interval): {fsyncs:.0f}, latency p50 "
        f"{quantile(best.fsync, 0.5) * 1000:.2f} ms, p90 {quantile(best.fsync, 0.9) * 1000:.2f} ms, "
        f"p99 {quantile(best.fsync, 0.99) * 1000:.2f} ms (from the histogram's buckets)"
    )
    ratio, buffered = memory_ratio(bodies, span_bytes)
    print(
        f"(c) peak memory per buffered span: {ratio:.2f}x its encoded size ({buffered:,} span bytes buffered)"
    )
    print(f"ratio (b)/(a) = {rate / bound_rate:.2f}   (goal >= 0.30)")
    print(f"ratio (c)     = {ratio:.2f}   (goal <= 2.00)")


if __name__ == "__main__":
    main()
