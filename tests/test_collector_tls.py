"""TLS, mutual TLS and bearer-token authentication on both receivers and the metrics endpoint.

Certificates are made in the test; clients are the real OTLP exporters (HTTP and gRPC) and raw sockets.
Without the right token: HTTP 401 / gRPC ``UNAUTHENTICATED``, and nothing is buffered.
"""

from __future__ import annotations

import ssl

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailcut.collector import Collector, load_config
from tests.http_support import HEAD, exchange, healthy, statuses
from tests.test_collector_helpers import KEEP_ERRORS, export_request, simple_trace, trace_ids
from tests.tls_support import TOKEN, make_pki, secured_config

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
BODY = export_request(simple_trace(trace_ids(1, seed=31)[0]))


@pytest.fixture(autouse=True)
def _no_ca_bundle_override(monkeypatch):
    """requests lets these variables override a session's CA file, which the HTTP exporter relies on."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def started(directory, pki, **options) -> Collector:
    collector = Collector(load_config(secured_config(directory, pki, policies=KEEP_ERRORS, **options)))
    collector.start()
    return collector


@pytest.fixture(scope="module")
def collector(tmp_path_factory, pki):
    collector = started(tmp_path_factory.mktemp("tls"), pki, metrics=True, decision_wait="10m")
    yield collector
    collector.stop()


@pytest.fixture(scope="module")
def mutual(tmp_path_factory, pki):
    collector = started(tmp_path_factory.mktemp("mtls"), pki, mutual=True, decision_wait="10m")
    yield collector
    collector.stop()


def spans(count: int = 3):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tls-test")
    with tracer.start_as_current_span("run"):
        for index in range(count - 1):
            with tracer.start_as_current_span(f"step-{index}"):
                pass
    provider.shutdown()
    return memory.get_finished_spans()


def client_context(pki, *, certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if certificate:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


def http_exporter(collector, pki, token: str | None, *, timeout: float = 10, **options) -> HttpExporter:
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    return HttpExporter(
        endpoint=f"https://127.0.0.1:{collector.ports.http}/v1/traces",
        certificate_file=str(pki.ca),
        headers=headers,
        timeout=timeout,
        **options,
    )


def grpc_exporter(
    collector, pki, token: str | None, *, certificate: bool = False, timeout: float = 10
) -> GrpcExporter:
    credentials = grpc.ssl_channel_credentials(
        pki.ca.read_bytes(),
        pki.client_key.read_bytes() if certificate else None,
        pki.client_cert.read_bytes() if certificate else None,
    )
    return GrpcExporter(
        endpoint=f"127.0.0.1:{collector.ports.grpc}",
        credentials=credentials,
        headers={"authorization": f"Bearer {token}"} if token is not None else None,
        timeout=timeout,
    )


def accepted(collector) -> int:
    return collector.metrics.accepted_spans["http"] + collector.metrics.accepted_spans["grpc"]


@pytest.mark.parametrize("make", [http_exporter, grpc_exporter], ids=["http", "grpc"])
def test_exporters_through_tls_with_the_token_are_accepted(collector, pki, make):
    before = accepted(collector)
    exporter = make(collector, pki, TOKEN)
    try:
        assert exporter.export(spans()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert accepted(collector) == before + 3


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", ""], ids=["none", "wrong", "longer", "empty"])
@pytest.mark.parametrize("make", [http_exporter, grpc_exporter], ids=["http", "grpc"])
def test_exporters_without_the_right_token_are_refused(collector, pki, make, token):
    before = accepted(collector)
    transport = "http" if make is http_exporter else "grpc"
    refused = collector.metrics.requests[transport, "unauthenticated"]
    exporter = make(collector, pki, token)
    try:
        assert exporter.export(spans()) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
    assert accepted(collector) == before
    assert collector.metrics.requests[transport, "unauthenticated"] == refused + 1


def test_grpc_answers_unauthenticated(collector, pki):
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{collector.ports.grpc}", credentials) as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            call(BODY, timeout=10, metadata=[("authorization", "Bearer wrong")])
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert call(BODY, timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")]) is not None


def test_raw_https_without_a_token_is_401_before_the_body_is_read(collector, pki):
    before = accepted(collector)
    # The declared body never comes: the refusal is decided on the head.
    data = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY)
    received = exchange(collector.ports.http, data, context=client_context(pki))
    assert statuses(received) == [401]
    assert b"www-authenticate: Bearer" in received.lower().replace(b"bearer", b"Bearer")
    assert accepted(collector) == before
    authorized = HEAD + b"Authorization: Bearer %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (
        TOKEN.encode(),
        len(BODY),
    )
    assert statuses(exchange(collector.ports.http, authorized + BODY, context=client_context(pki))) == [200]
    assert healthy(collector.ports.http, client_context(pki))  # /healthz needs no token


def test_plain_http_to_a_tls_port_gets_no_answer(collector):
    data = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert statuses(exchange(collector.ports.http, data)) == []


def test_a_client_that_does_not_trust_the_server_fails_the_handshake(collector, pki):
    context = ssl.create_default_context(cafile=str(pki.other_ca))
    with pytest.raises(ssl.SSLCertVerificationError):
        exchange(collector.ports.http, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", context=context)


def test_metrics_endpoint_takes_tls_and_auth(collector, pki):
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n"
    context = client_context(pki)
    assert statuses(exchange(collector.ports.metrics, request % b"", context=context)) == [401]
    authorized = request % b"Authorization: Bearer %s\r\n" % TOKEN.encode()
    received = exchange(collector.ports.metrics, authorized, context=context)
    assert statuses(received) == [200] and b"otelcol_receiver_accepted_spans_total" in received
    assert healthy(collector.ports.metrics, context)


@pytest.mark.parametrize("make", [http_exporter, grpc_exporter], ids=["http", "grpc"])
def test_mutual_tls_needs_a_client_certificate(mutual, pki, make):
    before = accepted(mutual)
    without = make(mutual, pki, TOKEN, timeout=1)  # the exporters retry a failed handshake until then
    try:
        assert without.export(spans()) is SpanExportResult.FAILURE
    finally:
        without.shutdown()
    assert accepted(mutual) == before
    if make is http_exporter:
        options = {"client_certificate_file": str(pki.client_cert), "client_key_file": str(pki.client_key)}
        exporter = http_exporter(mutual, pki, TOKEN, **options)
    else:
        exporter = grpc_exporter(mutual, pki, TOKEN, certificate=True)
    try:
        assert exporter.export(spans()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert accepted(mutual) == before + 3


def test_raw_mutual_tls(mutual, pki):
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    try:  # TLS 1.3 reports the missing certificate on the first read, TLS 1.2 in the handshake
        received = exchange(mutual.ports.http, request, context=client_context(pki))
    except ssl.SSLError:
        received = b""
    assert statuses(received) == []
    assert healthy(mutual.ports.http, client_context(pki, certificate=True))
