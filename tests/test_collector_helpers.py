"""Helpers for the collector tests (no tests here): configs, OTLP spans and requests, HTTP, Parquet."""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tailcut.collector import Collector, load_config
from tailcut.collector._config import default_config_text

KEEP_ERRORS = [
    {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
    {"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 0}},
]


def write_config(
    directory: Path,
    *,
    policies: list[dict[str, Any]] | None = None,
    tailcut: Mapping[str, Any] | None = None,
    http: Mapping[str, Any] | None = None,
    grpc: Mapping[str, Any] | None = None,
    parquet: Mapping[str, Any] | None = None,
    **tail_sampling: Any,
) -> Path:
    """A config file based on the default one: loopback port 0 everywhere, short waits, given overrides."""
    document = yaml.safe_load(default_config_text())
    protocols = document["receivers"]["otlp"]["protocols"]
    protocols["http"] = {"endpoint": "127.0.0.1:0", **(http or {})}
    protocols["grpc"] = {"endpoint": "127.0.0.1:0", **(grpc or {})}
    document["service"]["telemetry"]["metrics"]["address"] = "127.0.0.1:0"
    document["exporters"]["tailcut_parquet"].update({"path": str(directory / "data"), **(parquet or {})})
    block = document["processors"]["tail_sampling"]
    block.update(decision_wait="5s", decision_wait_after_root_received="100ms")
    block.update(tail_sampling)
    if policies is not None:
        block["policies"] = policies
    document["processors"]["tailcut"].update({"late_span_window": "200ms", **(tailcut or {})})
    path = directory / "otel-config.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def start_collector(directory: Path, **config: Any) -> Collector:
    collector = Collector(load_config(write_config(directory, **config)))
    collector.start()
    return collector


def start_forwarding_collector(directory: Path, endpoint: str, **config: Any) -> Collector:
    """A started collector keeping every trace and forwarding it to the OTLP/HTTP receiver at ``endpoint``."""
    path = write_config(directory, policies=[{"name": "all", "type": "always_sample"}], **config)
    document = yaml.safe_load(path.read_text())
    document["exporters"]["otlphttp"] = {"endpoint": endpoint}
    document["service"]["pipelines"]["traces"]["exporters"].append("otlphttp")
    path.write_text(yaml.safe_dump(document))
    collector = Collector(load_config(path))
    collector.start()
    return collector


def attribute(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def span(
    trace_id: bytes,
    span_id: bytes,
    parent: bytes = b"",
    *,
    name: str = "span",
    error: bool = False,
    start_ns: int = 1_700_000_000_000_000_000,
    duration_ns: int = 1_000_000,
    **attributes: Any,
) -> Span:
    """An OTLP span; keyword attributes use ``__`` for dots (``tailcut__kind="root"``)."""
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + duration_ns,
        attributes=[attribute(key.replace("__", "."), value) for key, value in attributes.items()],
        status=Status(code=Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_UNSET),
    )


def simple_trace(trace_id: bytes, *, error: bool = False, children: int = 2) -> list[Span]:
    """A root with ``children`` llm spans; the root comes last, as SDKs export it."""
    root_id = trace_id[:8]
    spans = [
        span(trace_id, bytes([i + 1]) + root_id[1:], root_id, name="llm", tailcut__kind="llm")
        for i in range(children)
    ]
    spans.append(span(trace_id, root_id, name="run", error=error, tailcut__kind="root"))
    return spans


def export_request(spans: Iterable[Span], service: str = "svc") -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(attribute("service.name", service))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def post(
    port: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    path: str = "/v1/traces",
    method: str = "POST",
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            method, path, body=body, headers={"Content-Type": "application/x-protobuf", **(headers or {})}
        )
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def rows(data_dir: Path, table: str, query: str = "SELECT * FROM t") -> list[dict[str, Any]]:
    """Rows of a data-dir table through DuckDB (``t`` in ``query``); empty when nothing was written."""
    files = list((data_dir / table).glob("dt=*/*.parquet"))
    if not files:
        return []
    connection = duckdb.connect()
    files_glob = f"{data_dir / table}/dt=*/*.parquet"
    connection.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{files_glob}', union_by_name=true)")
    result = connection.execute(query)
    names = [column[0] for column in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def trace_ids(count: int, seed: int = 0) -> list[bytes]:
    import random

    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(count)]


def python_env() -> dict[str, str]:
    """The environment for a subprocess, without OTEL_/TAILCUT_ settings of the test run."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TAILCUT_"))}
