"""Bad data and bad disks through real ``tailcut collect`` processes: refused whole, retried, recovered alone.

* A span whose fields decode but whose events do not is refused 400 whole; later traffic is written.
* A data dir that stops being writable mid-load: 503 with a retry delay meanwhile, nothing acknowledged
  lost, serving again without a restart once it is writable.
* A forward target that refuses connections, hangs, or answers a line that is not HTTP: the Parquet
  rows are written on time all the same; a healthy one (OTLP/HTTP or OTLP/gRPC) gets every kept span.
* One burst, then silence: the rows become readable within ``roll_age`` without more traffic.
* The log's metrics, and one log per collector.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.exporters.wire.varint import encode_varint
from tests.test_collector_helpers import (
    export_request,
    post,
    python_env,
    rows,
    span,
    start_collector,
    write_config,
)
from tests.test_collector_wal import COLLECT, POLICIES, CollectorProcess, Ledger, _traces, check


def _config(tmp_path: Path, roll_age: str = "300ms", **overrides) -> Path:
    config = write_config(tmp_path, policies=POLICIES, decision_wait="2s", **overrides)
    config.write_text(config.read_text().replace("roll_age: 60s", f"roll_age: {roll_age}"))
    return config


def _with_raw_span(data: bytes) -> bytes:
    """An export request holding one span given as raw bytes."""
    scope = b"\x12" + encode_varint(len(data)) + data
    resource = b"\x12" + encode_varint(len(scope)) + scope
    return b"\x0a" + encode_varint(len(resource)) + resource


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_a_span_with_undecodable_events_is_refused_whole_and_later_traffic_is_written(tmp_path):
    collector = CollectorProcess(_config(tmp_path, tailcut={"late_span_window": "0s"}))
    try:
        good = span(b"\x11" * 16, b"\x22" * 8, error=True, tailcut__kind="root")
        bad = good.SerializeToString() + b"\x5a\x03\xff\xff\xff"  # Span.events: a truncated Event
        other = span(b"\x11" * 16, b"\x33" * 8, b"\x22" * 8)
        request = ExportTraceServiceRequest.FromString(export_request([other]))
        body = _with_raw_span(bad) + request.SerializeToString()  # a good span in the same request
        status, _, answer = post(collector.http, body)
        assert status == 400
        assert "malformed protobuf body" in status_pb2.Status.FromString(answer).message
        ledger = Ledger()
        for spans in _traces(random.Random(5), 20):
            assert post(collector.http, export_request(spans))[0] == 200
            ledger.note(spans, "acked")
    finally:
        collector.stop()
    check(tmp_path / "data", ledger)
    stored = rows(tmp_path / "data", "traces", "SELECT trace_id FROM t")
    assert len(stored) == 20  # the refused request left nothing (its good span neither)


def test_a_span_only_the_writer_refuses_skips_its_trace_not_the_writer(tmp_path):
    collector = CollectorProcess(_config(tmp_path, tailcut={"late_span_window": "0s"}))
    try:
        # An unknown field encoded as a group: valid protobuf, but not something OTLP writes.
        odd = span(b"\x44" * 16, b"\x55" * 8, error=True).SerializeToString() + b"\x9b\x06\x9c\x06"
        assert post(collector.http, _with_raw_span(odd))[0] == 200
        time.sleep(0.5)
        ledger = Ledger()
        for spans in _traces(random.Random(6), 20):
            assert post(collector.http, export_request(spans))[0] == 200
            ledger.note(spans, "acked")
        time.sleep(3)
        assert _metric(collector.metrics, "tailcut_unwritable_spans_total") == 1
    finally:
        collector.stop()
    traces = rows(tmp_path / "data", "traces", "SELECT trace_id, kept FROM t")
    assert (
        len(traces) == 21 and {"44" * 16: True}.items() <= {t["trace_id"]: t["kept"] for t in traces}.items()
    )
    stored = rows(tmp_path / "data", "spans", "SELECT span_id FROM t")
    kept = {t["trace_id"] for t in traces if t["kept"]}
    assert sorted(s["span_id"] for s in stored) == sorted(
        span_id for span_id in ledger.acked if ledger.trace_of[span_id] in kept
    )


def _client(port: int, rng: random.Random, ledger: Ledger, answers: list[tuple[int, str]], stop) -> None:
    """Posts whole traces until ``stop``, retrying 503/429 as an OTLP exporter would."""
    while not stop.is_set():
        spans = _traces(rng, 1)[0]
        body = export_request(spans)
        for _ in range(120):
            try:
                status, headers, _ = post(port, body)
            except OSError:
                ledger.note(spans, "in_doubt")
                return
            answers.append((status, headers.get("retry-after", "")))
            if status == 200:
                ledger.note(spans, "acked")
                break
            assert status in (429, 503), status
            time.sleep(0.1)
        else:
            ledger.note(spans, "refused")


@contextlib.contextmanager
def _unwritable(data: Path) -> Iterator[None]:
    """The table directories replaced by regular files (works as root, unlike chmod), then restored."""
    moved = []
    for table in ("spans", "traces"):
        (data / table).rename(data / f"{table}.away")
        (data / table).write_text("not a directory")
        moved.append(table)
    try:
        yield
    finally:
        for table in moved:
            (data / table).unlink()
            (data / f"{table}.away").rename(data / table)


@pytest.mark.slow
def test_a_data_dir_that_becomes_unwritable_and_writable_again_loses_nothing(tmp_path):
    collector = CollectorProcess(_config(tmp_path))
    data = tmp_path / "data"
    ledger = Ledger()
    answers: list[tuple[int, str]] = []
    stop = threading.Event()
    try:
        threads = [
            threading.Thread(target=_client, args=(collector.http, random.Random(i), ledger, answers, stop))
            for i in range(3)
        ]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        with _unwritable(data):
            deadline = time.monotonic() + 30
            while not any(status == 503 for status, _ in answers) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
        restored = len(answers)
        deadline = time.monotonic() + 30  # serving again by itself: backoff of at most a few seconds
        while not any(status == 200 for status, _ in answers[restored:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(60)
        assert _metric(collector.metrics, "tailcut_io_faults_total") >= 1
    finally:
        stop.set()
        collector.stop()
    refusals = {answer for answer in answers if answer[0] != 200}
    assert refusals == {(503, "5")}, refusals  # unavailable with a retry delay, never overloaded
    assert any(status == 200 for status, _ in answers[restored:]), "not serving again after the fault"
    assert ledger.acked and not ledger.in_doubt and not ledger.refused
    check(data, ledger)


class _Target:
    """A TCP endpoint that refuses connections, hangs, or answers a line that is not HTTP."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        if behaviour == "refuses":
            self.listener.close()  # nothing listens on the port any more
            return
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(connection)
            if self.behaviour == "garbage":
                connection.recv(65536)
                connection.sendall(b"this is not HTTP\r\n")
                connection.close()

    def close(self) -> None:
        self.listener.close()
        for connection in self.connections:
            connection.close()


@pytest.mark.parametrize("behaviour", ["refuses", "hangs", "garbage"])
def test_a_broken_forward_target_never_holds_up_the_parquet_rows(tmp_path, behaviour):
    target = _Target(behaviour)
    config = _config(tmp_path, roll_age="500ms", tailcut={"late_span_window": "0s"})
    text = config.read_text()
    text = text.replace(
        "exporters:\n  tailcut_parquet:",
        f"exporters:\n  otlphttp/down:\n    endpoint: http://127.0.0.1:{target.port}\n    timeout: 1s\n"
        "  tailcut_parquet:",
    ).replace(
        "exporters:\n      - tailcut_parquet", "exporters:\n      - tailcut_parquet\n      - otlphttp/down"
    )
    config.write_text(text)
    assert "otlphttp/down\n" in text
    collector = CollectorProcess(config)
    ledger = Ledger()
    try:
        for spans in _traces(random.Random(11), 30):
            spans[-1].status.code = 2  # every trace kept: every batch goes to the forwarder
            assert post(collector.http, export_request(spans))[0] == 200
            ledger.note(spans, "acked")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(rows(tmp_path / "data", "traces")) < 30:
            time.sleep(0.1)  # rows are published while the forwarder is still retrying
        assert len(rows(tmp_path / "data", "traces")) == 30
        spans = _traces(random.Random(12), 1)[0]
        assert post(collector.http, export_request(spans))[0] == 200  # still accepting
        ledger.note(spans, "acked")
    finally:
        collector.stop()
        target.close()
    check(tmp_path / "data", ledger)


def test_one_burst_then_silence_is_readable_within_roll_age(tmp_path):
    collector = CollectorProcess(_config(tmp_path, roll_age="1s", tailcut={"late_span_window": "100ms"}))
    ledger = Ledger()
    try:
        for spans in _traces(random.Random(13), 50):
            assert post(collector.http, export_request(spans))[0] == 200
            ledger.note(spans, "acked")
        deadline = time.monotonic() + 20  # roll_age plus a margin generous for a loaded machine
        while time.monotonic() < deadline and len(rows(tmp_path / "data", "traces")) < 50:
            time.sleep(0.1)
        assert len(rows(tmp_path / "data", "traces")) == 50, "rows not published without new traffic"
        while time.monotonic() < deadline and _metric(
            collector.metrics, "tailcut_oldest_unpublished_row_age_seconds"
        ):
            time.sleep(0.1)
        assert _metric(collector.metrics, "tailcut_oldest_unpublished_row_age_seconds") == 0
        check(tmp_path / "data", ledger)  # everything readable before the stop
    finally:
        collector.stop()


def test_metrics_show_the_log(tmp_path):
    collector = CollectorProcess(_config(tmp_path, tailcut={"wal": {"fsync": "always"}}))
    try:
        for spans in _traces(random.Random(14), 5):
            assert post(collector.http, export_request(spans[:-1]))[0] == 200
        assert _metric(collector.metrics, "tailcut_wal_bytes") > 0
        assert _metric(collector.metrics, "tailcut_wal_fsync_seconds_count") >= 5
        collector.kill()
        collector = CollectorProcess(_config(tmp_path))
        assert _metric(collector.metrics, "tailcut_wal_replays_total") == 1
        assert _metric(collector.metrics, "tailcut_wal_replayed_spans_total") > 0
    finally:
        collector.stop()


def test_a_second_collector_on_the_same_log_fails_in_one_line(tmp_path):
    # An explicit `wal.dir` is one log; by default each collector of a data dir takes its own slot.
    first = CollectorProcess(_config(tmp_path, tailcut={"wal": {"dir": str(tmp_path / "log")}}))
    try:
        result = subprocess.run(
            [*COLLECT, "--config", str(tmp_path / "otel-config.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
            env=python_env(),
        )
    finally:
        first.stop()
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: another collector is using the write-ahead log in {tmp_path / 'log'}"
    )


@pytest.mark.parametrize("kind", ["otlphttp", "otlp"])
def test_a_healthy_forward_target_gets_every_kept_span(tmp_path, kind):
    (tmp_path / "target").mkdir()
    target = start_collector(tmp_path / "target", policies=[{"name": "all", "type": "always_sample"}])
    if kind == "otlphttp":
        block = f"  otlphttp/next:\n    endpoint: http://127.0.0.1:{target.ports.http}\n"
    else:
        block = f"  otlp/next:\n    endpoint: 127.0.0.1:{target.ports.grpc}\n    tls:\n      insecure: true\n"
    config = _config(tmp_path, tailcut={"late_span_window": "0s"})
    text = config.read_text().replace(
        "exporters:\n  tailcut_parquet:", f"exporters:\n{block}  tailcut_parquet:"
    )
    config.write_text(
        text.replace(
            "exporters:\n      - tailcut_parquet", f"exporters:\n      - tailcut_parquet\n      - {kind}/next"
        )
    )
    collector = CollectorProcess(config)
    ledger = Ledger()
    try:
        for spans in _traces(random.Random(15), 20):
            assert post(collector.http, export_request(spans))[0] == 200
            ledger.note(spans, "acked")
    finally:
        collector.stop()
        target.stop()
    kept = {row["trace_id"] for row in rows(tmp_path / "data", "traces", "SELECT trace_id FROM t WHERE kept")}
    expected = sorted(span_id for span_id in ledger.acked if ledger.trace_of[span_id] in kept)
    assert kept and sorted(r["span_id"] for r in rows(tmp_path / "target" / "data", "spans")) == expected
