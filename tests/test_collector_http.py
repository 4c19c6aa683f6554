"""The OTLP/HTTP server's framing through raw sockets: RFC 9112's rejections, limits, deadlines, pipelining.

After every hostile exchange the collector must still answer ``/healthz`` (nothing hangs the loop) and
must have buffered nothing from the refused request.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from tailcut.collector._http import HttpServer, Limits, text_response
from tests.http_support import HEAD, exchange, healthy, statuses
from tests.polling import wait_until
from tests.test_collector_helpers import KEEP_ERRORS, export_request, simple_trace, start_collector, trace_ids

BODY = export_request(simple_trace(trace_ids(1, seed=21)[0]))


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    collector = start_collector(
        tmp_path_factory.mktemp("http"),
        policies=KEEP_ERRORS,
        http={"max_request_body_size": 200_000, "read_header_timeout": "1s", "read_timeout": "2s"},
        decision_wait="10m",
    )
    yield collector
    collector.stop()


def chunked(body: bytes, size: int = 100) -> bytes:
    return b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)
    )


# Each case must be refused with this status and the connection closed, buffering nothing.
HOSTILE = {
    "negative chunk size": (HEAD + b"Transfer-Encoding: chunked\r\n\r\n-6\r\nabcdef\r\n0\r\n\r\n", 400),
    "0x chunk size": (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x6\r\nabcdef\r\n0\r\n\r\n", 400),
    "chunk data without CRLF": (HEAD + b"Transfer-Encoding: chunked\r\n\r\n6\r\nabcdefXX0\r\n\r\n", 400),
    "Transfer-Encoding with Content-Length": (
        HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + chunked(BODY) + b"0\r\n\r\n",
        400,
    ),
    "chunked not last": (
        HEAD + b"Transfer-Encoding: chunked, gzip\r\n\r\n" + chunked(BODY) + b"0\r\n\r\n",
        400,
    ),
    "two transfer codings": (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400),
    "endless chunk-size line": (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 200_000, 400),
    "endless chunk extension": (HEAD + b"Transfer-Encoding: chunked\r\n\r\n1;" + b"x" * 200_000, 400),
    "head too large": (HEAD + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    "header flood": (HEAD + b"".join(b"X-%d: 1\r\n" % i for i in range(500)) + b"\r\n", 431),
    "bad request line": (b"POST /v1/traces HTTP/9.9 extra\r\nHost: x\r\n\r\n", 400),
    "header without colon": (HEAD + b"Content-Length 5\r\n\r\nabcde", 400),
    "space before colon": (HEAD + b"Content-Length : 5\r\n\r\nabcde", 400),
    "negative Content-Length": (HEAD + b"Content-Length: -1\r\n\r\n", 400),
    "conflicting Content-Length": (HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400),
    "missing Host": (b"POST /v1/traces HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400),
    "no body framing": (HEAD + b"\r\n", 411),
    "declared body over the limit": (HEAD + b"Content-Length: 300000\r\n\r\n", 413),
    "chunked body over the limit": (
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + (b"ffff\r\n" + b"a" * 0xFFFF + b"\r\n") * 4,
        413,
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_framing_is_refused_and_closed(collector, case):
    data, expected = HOSTILE[case]
    before = collector.metrics.accepted_spans["http"]
    received = exchange(collector.ports.http, data)
    assert statuses(received) == [expected], received[:300]
    assert b"connection: close" in received.lower()
    assert collector.metrics.accepted_spans["http"] == before
    assert healthy(collector.ports.http)


def test_trailers_are_read_and_ignored(collector):
    data = HEAD + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked(BODY)
    received = exchange(collector.ports.http, data + b"0\r\nX-Checksum: abc\r\n\r\n")
    assert statuses(received) == [200]


def test_pipelined_requests_are_answered_in_order(collector):
    before = collector.metrics.accepted_spans["http"]
    one = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    garbage = HEAD + b"Content-Length: 3\r\n\r\n\xff\xff\xff"
    last = HEAD + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY
    received = exchange(collector.ports.http, one * 5 + garbage + one * 3 + last)
    assert statuses(received) == [200] * 5 + [400] + [200] * 4
    assert collector.metrics.accepted_spans["http"] == before + 9 * 3


def test_a_byte_a_second_head_cannot_extend_the_deadline(collector):
    """read_header_timeout (1s) counts from the first byte: trickling the head gets 408, then close."""
    head = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY)
    received = exchange(collector.ports.http, [head[i : i + 1] for i in range(len(head))], pause=0.05)
    assert statuses(received) == [408]
    assert healthy(collector.ports.http)


def test_a_trickled_body_cannot_extend_the_request_deadline(collector):
    """read_timeout (2s) bounds the whole request, however steadily its body arrives."""
    before = collector.metrics.accepted_spans["http"]
    head = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY)
    pieces = [head] + [BODY[i : i + 4] for i in range(0, len(BODY), 4)]
    received = exchange(collector.ports.http, pieces, pause=0.1)
    assert statuses(received) == [408]
    assert collector.metrics.accepted_spans["http"] == before


def test_a_client_that_closes_mid_request_leaves_nothing(collector):
    before = collector.metrics.accepted_spans["http"]
    with socket.create_connection(("127.0.0.1", collector.ports.http), timeout=10) as connection:
        connection.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
    assert healthy(collector.ports.http)
    assert collector.metrics.accepted_spans["http"] == before


def test_http_1_0_closes_after_the_response(collector):
    data = b"GET /healthz HTTP/1.0\r\n\r\n"
    assert statuses(exchange(collector.ports.http, data)) == [200]


def serve(server: HttpServer):
    """Run ``server`` on a loop in a thread; yield its port, then close it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    return loop, thread, port


def stop(server: HttpServer, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    asyncio.run_coroutine_threadsafe(server.close(0.5), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_connections_beyond_the_bound_get_503():
    server = HttpServer(
        {"/healthz": {"GET": lambda request: text_response(200, "ok")}},
        limits=Limits(max_body=0, max_connections=2),
    )
    loop, thread, port = serve(server)
    try:
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        try:
            assert healthy(port) is False
            assert statuses(exchange(port, b"")) == [503]
        finally:
            for connection in held:
                connection.close()
        assert healthy(port)  # the bound counts open connections only
    finally:
        stop(server, loop, thread)


def test_close_cuts_connections_that_stall_mid_request():
    server = HttpServer(
        {"/healthz": {"GET": lambda request: text_response(200, "ok")}},
        limits=Limits(max_body=1000, header_timeout=3600, request_timeout=3600, idle_timeout=3600),
    )
    loop, thread, port = serve(server)
    stalled = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    stalled[0].sendall(b"POST /x HTTP/1.1\r\nHost: x\r\n")  # mid-head
    stalled[1].sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")  # mid-body
    # stalled[2] is an idle keep-alive connection
    try:
        wait_until(
            lambda: len(server.connections) >= 3 and sum(c.idle() for c in list(server.connections)) <= 1,
            "the three connections, two of them mid-request",
        )
        stop(server, loop, thread)
        for connection in stalled:  # closed by the server (the stalled ones cut), no response
            try:
                assert connection.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        for connection in stalled:
            connection.close()
