"""Coverage-guided fuzzing (atheris) of the collector's receiving side, for runs longer than the suite's.

Targets:

``otlp``
    Bodies through the collector's decoding: gzip/deflate, OTLP/JSON, and the lazy protobuf decoder,
    with ``ExportTraceServiceRequest.FromString`` as the oracle (accepted exactly when it accepts, with
    the same spans); raw inputs and edits of a valid request. Any other exception, or a
    disagreement, is a crash.
``json``
    Documents through the one OTLP/JSON reader (``tailcut.exporters.wire.otlp_json``) both ways it is
    used: whole (the collector) and with bad spans left out (``ingest --skip-bad``). A crash is an
    exception other than ``BadOtlpInput``, a message of more than one line, or a request the runtime
    refuses.
``http``
    Byte streams, cut into pieces the input chooses, into the OTLP/HTTP server's connection protocol
    (h11 underneath, the real receiver and limits above, decoding as in ``otlp``), in process. A
    crash is an exception escaping the protocol, a response that is not HTTP/1.1, or a connection
    left open in an error state.

Run (``pip install atheris``; the protobuf runtime is C without coverage feedback, so start from the
valid requests ``seeds`` writes)::

    python fuzz/fuzz_collector.py seeds corpus
    python fuzz/fuzz_collector.py otlp -max_total_time=300 corpus/otlp
    python fuzz/fuzz_collector.py json -max_total_time=300 corpus/json
    python fuzz/fuzz_collector.py http -max_total_time=300 corpus/http

The bounded, always-on part of the same campaign is ``tests/test_fuzz_otlp.py`` and
``tests/test_fuzz_http.py`` (hypothesis); every crash found here becomes a test there.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import sys
import zlib
from pathlib import Path

import atheris
import h11
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tailcut.collector._config import HttpReceiverConfig
from tailcut.collector._http import _Connection
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._otlp import OtlpError, decompress, json_to_protobuf
from tailcut.collector._receivers import IngestResult, OtlpHttpReceiver
from tailcut.exporters import BadOtlpInput
from tailcut.exporters.wire.otlp_json import json_request, loads

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for the shared oracle
from tests.otlp_oracle import oracle_facts, span_facts

LIMIT = 1 << 20


def check_decoding(body: bytes) -> list[tuple] | None:
    """The collector's verdict on a protobuf body, asserted against the oracle."""
    expected = oracle_facts(body)
    try:
        got = span_facts(body)
    except OtlpError as error:
        if error.http_status != 400 or expected is not None:
            raise AssertionError(f"refused a body the runtime accepts: {error.message}") from None
        return None
    if got != expected:
        raise AssertionError(f"decoded {got!r}, the runtime {expected!r}")
    return got


def _mutated(provider: atheris.FuzzedDataProvider) -> bytes:
    """A valid request with edits the input chooses (the runtime's C parser gives no coverage)."""
    body = bytearray(_VALID)
    for _ in range(provider.ConsumeIntInRange(1, 8)):
        position = provider.ConsumeIntInRange(0, max(len(body) - 1, 0))
        operation = provider.ConsumeIntInRange(0, 2)
        value = provider.ConsumeIntInRange(0, 255)
        if operation == 0 and body:
            body[position] = value
        elif operation == 1:
            body.insert(position, value)
        elif body:
            del body[position]
    return bytes(body)


def fuzz_otlp(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    mode = provider.ConsumeIntInRange(0, 4)
    if mode == 4:
        check_decoding(_mutated(provider))
        return
    body = provider.ConsumeBytes(provider.remaining_bytes())
    try:
        if mode == 1:
            body = bytes(decompress(body, "gzip", LIMIT))
        elif mode == 2:
            body = bytes(decompress(body, "deflate", LIMIT))
        elif mode == 3:
            body = json_to_protobuf(body)
    except OtlpError as error:
        if error.http_status not in (400, 413):
            raise
        return
    if len(body) > LIMIT:
        raise AssertionError("decompressed past the limit")
    if check_decoding(body) is None and mode == 3:
        raise AssertionError("OTLP/JSON converted into a body the runtime refuses")


def fuzz_json(data: bytes) -> None:
    try:
        document = loads(data, "input")
    except BadOtlpInput as error:
        _one_line(error)
        return
    problems: list[str] = []
    for on_bad_span in (None, problems.append):
        try:
            encoded = json_request(document, on_bad_span=on_bad_span)
        except BadOtlpInput as error:
            _one_line(error)
            continue
        ExportTraceServiceRequest.FromString(encoded)  # raises (a crash) if the runtime refuses it
    for problem in problems:
        _one_line(problem)


def _one_line(message: object) -> None:
    if "\n" in str(message):
        raise AssertionError(f"an error message of several lines: {message!r}")


class _Transport(asyncio.Transport):
    """Collects what the protocol writes."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            raise AssertionError("wrote after close")
        self.out += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _ingest(body: bytes | bytearray, transport: str) -> IngestResult:
    return IngestResult(len(check_decoding(bytes(body)) or ()))


_LOOP = asyncio.new_event_loop()
_RECEIVER = OtlpHttpReceiver(_ingest, CollectorMetrics(), HttpReceiverConfig(max_request_body_size=LIMIT))
_RECEIVER.server._loop = _LOOP  # timers are scheduled, never run: deadlines are the suite's business


def fuzz_http(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    pieces = provider.ConsumeIntListInRange(provider.ConsumeIntInRange(0, 8), 1, 4096)
    stream = provider.ConsumeBytes(provider.remaining_bytes())
    connection = _Connection(_RECEIVER.server)
    transport = _Transport()
    connection.connection_made(transport)
    offset = 0
    for size in [*pieces, len(stream)]:
        if transport.closed or offset >= len(stream):
            break
        connection.data_received(stream[offset : offset + size])
        offset += size
    if not transport.closed:
        connection.eof_received()
    connection.connection_lost(None)
    _LOOP._scheduled.clear()  # type: ignore[attr-defined]
    if transport.out and not transport.out.startswith(b"HTTP/1.1 "):
        raise AssertionError(f"not an HTTP/1.1 response: {bytes(transport.out[:60])!r}")
    if connection._h11.their_state is h11.ERROR and not transport.closed:
        raise AssertionError("a connection in an error state was left open")


TARGETS = {"otlp": fuzz_otlp, "json": fuzz_json, "http": fuzz_http}


def _request() -> ExportTraceServiceRequest:
    """A small valid request: three spans with attributes, an event each, one error."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index in range(3):
        item = scope.spans.add(trace_id=b"t" * 16, span_id=bytes([index + 1]) * 8, name=f"step-{index}")
        item.start_time_unix_nano, item.end_time_unix_nano = (
            1_700_000_000_000_000_000,
            1_700_000_000_100_000_000,
        )
        item.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 12
        item.events.add(name="event").attributes.add(key="k").value.string_value = "v"
        item.status.code = Status.STATUS_CODE_ERROR if index == 2 else Status.STATUS_CODE_UNSET
        item.kind = Span.SPAN_KIND_INTERNAL
    return request


_VALID = _request().SerializeToString()


def write_seeds(directory: Path) -> None:
    """Valid inputs for every target: OTLP protobuf (plain, gzip, deflate), OTLP/JSON, HTTP requests."""
    request = _request()
    body = request.SerializeToString()
    document = json_format.MessageToDict(request)
    for item in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        item["traceId"], item["spanId"] = (b"t" * 16).hex(), base64.b64decode(item["spanId"]).hex()
    otlp = {
        "protobuf": b"\x00" + body,
        "gzip": b"\x01" + gzip.compress(body),
        "deflate": b"\x02" + zlib.compress(body),
        "json": b"\x03" + json.dumps(document).encode(),
    }
    head = b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: application/x-protobuf\r\n"
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 64]), body[i : i + 64]) for i in range(0, len(body), 64)
    )
    http = {
        "length": head + b"Content-Length: %d\r\n\r\n" % len(body) + body,
        "chunked": head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-T: 1\r\n\r\n",
        "gzip": head
        + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(gzip.compress(body))
        + gzip.compress(body),
        "pipelined": (head + b"Content-Length: %d\r\n\r\n" % len(body) + body) * 2
        + b"GET /healthz HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n",
        "continue": head + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
    }
    targets = {
        "otlp": otlp,
        "json": {"request": otlp["json"][1:]},
        "http": {k: b"\x00" + v for k, v in http.items()},
    }
    for target, seeds in targets.items():
        (directory / target).mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (directory / target / name).write_bytes(data)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "seeds":
        write_seeds(Path(sys.argv[2]))
        return
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        raise SystemExit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer options] | seeds DIR")
    target = TARGETS[sys.argv.pop(1)]
    atheris.instrument_all()  # coverage feedback from every Python function loaded (h11, tailcut, ...)
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
