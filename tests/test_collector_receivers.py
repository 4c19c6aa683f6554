"""OTLP/HTTP and OTLP/gRPC receivers: encodings, the specification's status codes, limits, self-metrics."""

from __future__ import annotations

import gzip
import json
import socket
import zlib

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.test_collector_helpers import (
    KEEP_ERRORS,
    export_request,
    post,
    rows,
    simple_trace,
    span,
    start_collector,
    trace_ids,
)

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def collector(tmp_path):
    collector = start_collector(tmp_path, policies=KEEP_ERRORS, http={"max_request_body_size": 200_000})
    yield collector
    collector.stop()


def status_of(body: bytes) -> status_pb2.Status:
    return status_pb2.Status.FromString(body)


def test_protobuf_export_is_accepted_and_written(collector, tmp_path):
    ids = trace_ids(3)
    body = export_request([s for i, t in enumerate(ids) for s in simple_trace(t, error=i == 0)])
    status, headers, payload = post(collector.ports.http, body)
    assert status == 200
    assert headers["content-type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(payload) == ExportTraceServiceResponse()
    assert collector.wait_idle(10)
    collector.stop()
    traces = rows(
        tmp_path / "data", "traces", "SELECT trace_id, kept, decision_reason FROM t ORDER BY trace_id"
    )
    expected = sorted((t.hex(), i == 0, "root_end") for i, t in enumerate(ids))
    assert [(r["trace_id"], r["kept"], r["decision_reason"]) for r in traces] == expected
    spans = rows(tmp_path / "data", "spans", "SELECT DISTINCT trace_id FROM t")
    assert [r["trace_id"] for r in spans] == [ids[0].hex()]


def otlp_json(spans) -> bytes:
    """OTLP/JSON as the specification writes it: lowerCamelCase keys, hex ids, integer enums."""
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(export_request(spans)))
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for item in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = __import__("base64").b64decode(item[key]).hex()
                item["unknownFieldFromTheFuture"] = 1
    return json.dumps(document).encode()


def test_json_export_is_accepted(collector, tmp_path):
    (trace_id,) = trace_ids(1, seed=4)
    status, headers, payload = post(
        collector.ports.http,
        otlp_json(simple_trace(trace_id, error=True)),
        {"Content-Type": "application/json"},
    )
    assert (status, headers["content-type"], json.loads(payload)) == (200, "application/json", {})
    collector.stop()
    assert rows(tmp_path / "data", "spans", "SELECT count(*) AS n, min(trace_id) AS t FROM t") == [
        {"n": 3, "t": trace_id.hex()}
    ]


def test_json_with_bad_ids_is_a_400_in_json(collector):
    document = json.loads(otlp_json(simple_trace(trace_ids(1)[0])))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "not-hex"
    status, headers, payload = post(
        collector.ports.http, json.dumps(document).encode(), {"Content-Type": "application/json"}
    )
    assert status == 400
    assert headers["content-type"] == "application/json"
    body = json.loads(payload)
    assert body["code"] == code_pb2.INVALID_ARGUMENT and "traceId 'not-hex' is not hex" in body["message"]


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
def test_compressed_bodies(collector, encoding, compress):
    body = compress(export_request(simple_trace(trace_ids(1)[0])))
    status, _, _ = post(collector.ports.http, body, {"Content-Encoding": encoding})
    assert status == 200
    assert collector.metrics.accepted_spans["http"] == 3


def test_spans_with_bad_ids_are_refused_in_a_partial_success(collector):
    good = simple_trace(trace_ids(1)[0])
    bad = span(b"\x00" * 16, b"\x01" * 8, name="zero trace id")
    status, _, payload = post(collector.ports.http, export_request([*good, bad]))
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(payload).partial_success
    assert partial.rejected_spans == 1
    assert "16-byte non-zero trace_id" in partial.error_message
    assert collector.metrics.refused_spans["http"] == 1


def test_malformed_body_is_400_and_the_collector_keeps_serving(collector):
    status, _, payload = post(collector.ports.http, b"\xff\xff\xff garbage")
    assert status == 400
    assert status_of(payload).code == code_pb2.INVALID_ARGUMENT
    assert "malformed protobuf body" in status_of(payload).message
    assert post(collector.ports.http, export_request(simple_trace(trace_ids(1)[0])))[0] == 200


def test_oversized_body_is_413_before_reading_it(collector):
    status, headers, payload = post(collector.ports.http, b"x" * 300_000)
    assert status == 413
    assert headers["connection"] == "close"
    assert "exceeds max_request_body_size (200000)" in status_of(payload).message


def test_gzip_bomb_is_413(collector):
    bomb = gzip.compress(b"\x00" * 50_000_000)
    assert len(bomb) < 200_000
    status, _, payload = post(collector.ports.http, bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    assert "after decompression" in status_of(payload).message
    assert post(collector.ports.http, export_request(simple_trace(trace_ids(1)[0])))[0] == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"Content-Type": "text/plain"}, 415), ({"Content-Encoding": "br"}, 415)],
)
def test_unsupported_media_is_415(collector, headers, status):
    assert post(collector.ports.http, export_request([]), headers)[0] == status


def test_unknown_path_and_method(collector):
    assert post(collector.ports.http, b"", path="/v1/metrics")[0] == 404
    status, headers, _ = post(collector.ports.http, b"", method="PUT")
    assert (status, headers["allow"]) == (405, "POST")


def test_chunked_body_keep_alive_and_expect_continue(collector):
    body = export_request(simple_trace(trace_ids(1, seed=9)[0]))
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100]) for i in range(0, len(body), 100)
    )
    first = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"
    )
    second = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    with socket.create_connection(("127.0.0.1", collector.ports.http), timeout=10) as connection:
        connection.sendall(first + second)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert b"HTTP/1.1 100 Continue" in received
    assert collector.metrics.accepted_spans["http"] == 6


def test_overload_answers_429_with_retry_after(tmp_path):
    collector = start_collector(
        tmp_path,
        policies=KEEP_ERRORS,
        num_traces=2,
        block_on_overflow=True,
        decision_wait="1m",
        decision_wait_after_root_received="0s",
    )
    try:
        ids = trace_ids(3)
        assert post(collector.ports.http, export_request(simple_trace(ids[0])[:1]))[0] == 200
        assert post(collector.ports.http, export_request(simple_trace(ids[1])[:1]))[0] == 200
        status, headers, payload = post(collector.ports.http, export_request(simple_trace(ids[2])))
        assert (status, headers["retry-after"]) == (429, "1")
        refused = status_of(payload)
        assert refused.code == code_pb2.RESOURCE_EXHAUSTED
        retry = error_details_pb2.RetryInfo()
        assert refused.details[0].Unpack(retry) and retry.retry_delay.seconds == 1
        assert collector.metrics.requests["http", "overloaded"] == 1
    finally:
        collector.stop()
    traces = rows(tmp_path / "data", "traces", "SELECT decision_reason FROM t")
    assert sorted(r["decision_reason"] for r in traces) == [
        "shutdown",
        "shutdown",
    ]  # nothing of the refused one


def grpc_call(port: int):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return channel, channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)


def test_grpc_export_and_invalid_argument(collector):
    channel, call = grpc_call(collector.ports.grpc)
    with channel:
        response = call(export_request(simple_trace(trace_ids(1)[0])), timeout=10)
        assert ExportTraceServiceResponse.FromString(response) == ExportTraceServiceResponse()
        with pytest.raises(grpc.RpcError) as raised:
            call(b"\xff\xff\xff", timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        response = call(export_request([span(b"\x00" * 16, b"\x01" * 8)]), timeout=10)
        assert ExportTraceServiceResponse.FromString(response).partial_success.rejected_spans == 1
    assert collector.metrics.accepted_spans["grpc"] == 3


def test_grpc_overload_is_resource_exhausted_with_retry_info(tmp_path):
    collector = start_collector(
        tmp_path, policies=KEEP_ERRORS, num_traces=1, block_on_overflow=True, decision_wait="1m"
    )
    try:
        channel, call = grpc_call(collector.ports.grpc)
        with channel:
            call(export_request(simple_trace(trace_ids(1)[0])[:1]), timeout=10)
            with pytest.raises(grpc.RpcError) as raised:
                call(export_request(simple_trace(trace_ids(2)[1])), timeout=10)
    finally:
        collector.stop()
    error = raised.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = status_pb2.Status.FromString(dict(error.trailing_metadata())["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert details.code == code_pb2.RESOURCE_EXHAUSTED and details.details[0].Unpack(retry)
    assert retry.retry_delay.seconds == 1


def test_metrics_and_health_endpoints(collector):
    post(collector.ports.http, export_request(simple_trace(trace_ids(1)[0], error=True)))
    assert collector.wait_idle(10)
    status, headers, payload = post(collector.ports.metrics, b"", path="/metrics", method="GET")
    text = payload.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'otelcol_receiver_accepted_spans_total{receiver="otlp",transport="http"} 3.0' in text
    assert "otelcol_processor_tail_sampling_new_trace_id_received_total 1.0" in text
    assert (
        "otelcol_processor_tail_sampling_count_traces_sampled_total"
        '{decision="sampled",policy="errors",sampled="true"} 1.0' in text
    )
    assert 'tailcut_decisions_total{kept="true",reason="root_end"} 1.0' in text
    assert "otelcol_processor_tail_sampling_sampling_traces_on_memory 0.0" in text
    assert post(collector.ports.metrics, b"", path="/healthz", method="GET")[:1] == (200,)


def test_block_on_overflow_refuses_a_request_past_the_byte_budget_instead_of_evicting(tmp_path):
    """A request that would take the buffer past ``max_buffer_mib`` is refused (429) before it is
    acknowledged; nothing acknowledged is evicted to make room (the README's promise)."""
    collector = start_collector(
        tmp_path,
        policies=KEEP_ERRORS,
        tailcut={"max_buffer_mib": 0.05},  # 52 KB: a few dozen 2 KB spans
        block_on_overflow=True,
        decision_wait="1m",
    )
    budget = collector.processor.max_bytes
    answers = []
    try:
        for trace_id in trace_ids(60):
            root = span(trace_id, b"\x01" * 8, b"\x02" * 8, payload="x" * 2000)  # its root never arrives
            answers.append(post(collector.ports.http, export_request([root]))[0])
            assert collector.processor.buffer.nbytes <= budget
        evicted = collector.metrics.evicted
    finally:
        collector.stop()
    assert set(answers) == {200, 429} and answers.index(429) == answers.count(200)  # refused once full
    assert evicted == 0
    stored = rows(tmp_path / "data", "traces", "SELECT decision_reason FROM t")
    reasons = [row["decision_reason"] for row in stored]
    assert len(reasons) == answers.count(200) and "evicted" not in reasons
