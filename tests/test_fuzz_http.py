"""Property tests of the OTLP/HTTP receiver over raw sockets: random framing, pipelining, hostile bodies.

Whatever arrives, the collector answers with well-formed responses or closes the connection, never
acknowledges what it did not accept, and still answers ``/healthz`` afterwards.
"""

from __future__ import annotations

import gzip

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.http_support import exchange, healthy, statuses
from tests.test_collector_helpers import KEEP_ERRORS, export_request, simple_trace, start_collector, trace_ids
from tests.test_fuzz_otlp import mutated, oracle_facts

SOCKETS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BODY = export_request(simple_trace(trace_ids(1, seed=41)[0]))


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    collector = start_collector(
        tmp_path_factory.mktemp("fuzz-http"),
        policies=KEEP_ERRORS,
        http={"max_request_body_size": 100_000, "read_header_timeout": "2s", "read_timeout": "3s"},
        decision_wait="10m",
    )
    yield collector
    collector.stop()


header_names = st.sampled_from(
    [
        b"Host",
        b"Content-Length",
        b"Transfer-Encoding",
        b"Content-Type",
        b"Content-Encoding",
        b"Connection",
        b"Expect",
        b"X-Any",
        b"Host ",
        b"",
        b"Bad\x00Name",
        b"content-length",
    ]
)
header_values = st.one_of(
    st.sampled_from(
        [
            b"chunked",
            b"gzip, chunked",
            b"chunked, chunked",
            b"0",
            b"5",
            b"-1",
            b"0x5",
            b"close",
            b"keep-alive",
            b"100-continue",
            b"application/x-protobuf",
            b"gzip",
            b"1" * 30,
        ]
    ),
    st.binary(max_size=12),
)


@st.composite
def raw_requests(draw) -> bytes:
    """A request built from plausible and hostile parts: request line, headers, a body or chunks."""
    method = draw(st.sampled_from([b"POST", b"GET", b"PUT", b"P OST", b""]))
    target = draw(st.sampled_from([b"/v1/traces", b"/healthz", b"*", b"/v1/traces?x=1", b"", b"/\xff"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1"]))
    lines = [method + b" " + target + b" " + version]
    for name, value in draw(st.lists(st.tuples(header_names, header_values), max_size=6)):
        lines.append(name + b": " + value)
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if draw(st.booleans()):
        sizes = draw(
            st.lists(
                st.sampled_from([b"0", b"5", b"-5", b"0x5", b"ffffffffffffffffff", b"5;ext=1", b" 5", b"g"]),
                max_size=3,
            )
        )
        body = b"".join(size + b"\r\nabcde" + draw(st.sampled_from([b"\r\n", b"", b"XX"])) for size in sizes)
        body += draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nTrailer: x\r\n\r\n", b"", b"0\r\n"]))
    else:
        body = draw(st.binary(max_size=40))
    return head + body


@SOCKETS
@given(st.lists(raw_requests(), min_size=1, max_size=3), st.integers(1, 64))
def test_random_framing_gets_answers_or_a_close(collector, requests, piece):
    data = b"".join(requests)
    before = collector.metrics.accepted_spans["http"]
    received = exchange(collector.ports.http, [data[i : i + piece] for i in range(0, len(data), piece)])
    assert all(100 <= status < 600 for status in statuses(received))
    assert collector.metrics.accepted_spans["http"] == before  # none of these carries a valid span
    assert healthy(collector.ports.http)


@SOCKETS
@given(mutated(), st.booleans(), st.integers(1, 5))
def test_hostile_otlp_bodies_are_accepted_exactly_when_valid(collector, body, compress, copies):
    """Pipelined, optionally gzip-compressed, randomly damaged bodies: 200 iff the protobuf runtime agrees."""
    payload = gzip.compress(body) if compress else body
    encoding = b"Content-Encoding: gzip\r\n" if compress else b""
    request = (
        b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: application/x-protobuf\r\n%s"
        b"Content-Length: %d\r\n\r\n" % (encoding, len(payload))
    ) + payload
    last = b"GET /healthz HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n"
    received = exchange(collector.ports.http, request * copies + last)
    expected = 200 if oracle_facts(body) is not None else 400
    assert statuses(received) == [expected] * copies + [200]


def test_a_malformed_span_is_refused_and_later_requests_are_written(tmp_path):
    collector = start_collector(tmp_path, policies=KEEP_ERRORS)
    try:
        bad = bytes.fromhex("0a09120712055a031201ff")  # an event name that is not UTF-8
        request = b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: application/x-protobuf\r\n"
        received = exchange(collector.ports.http, request + b"Content-Length: %d\r\n\r\n" % len(bad) + bad)
        assert statuses(received) == [400] and b"bad UTF-8" in received
        good = export_request(simple_trace(trace_ids(1, seed=42)[0], error=True))
        closing = request + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(good)
        assert statuses(exchange(collector.ports.http, closing + good)) == [200]
        assert collector.wait_idle(10)
    finally:
        collector.stop()
    assert collector.processor.summary()["spans_written"] == 3
