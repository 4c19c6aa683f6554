"""The write-ahead log through real ``tailcut collect`` processes: ``kill -9`` at any moment loses nothing.

Bookkeeping is per span: a span is *acknowledged* when its request got 200 / OK, *refused* when it got a
definite error status, and *in doubt* when the connection broke (the collector may have logged it just
before it died: it may or may not be stored, like any at-least-once receiver). The checks:

* every acknowledged span is counted in its trace's ``traces`` row, and every kept trace's counted spans
  are all stored;
* no trace has two rows; no span appears that was refused or never sent.

Also here: a trace that waits long does not pin the log (compaction), a full log answers 429 and
loses nothing, a clean stop empties the log, and the ``processors.tailcut.wal`` settings.
"""

from __future__ import annotations

import collections
import contextlib
import json
import random
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.collector import load_config
from tailcut.collector._wal import WriteAheadLog
from tailcut.errors import ConfigError
from tests.test_collector_helpers import (
    export_request,
    post,
    python_env,
    rows,
    span,
    write_config,
)

COLLECT = [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect"]
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
POLICIES = [
    {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
    {"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 30}},
]


@dataclass
class Ledger:
    """What every client sent and what it was told, by span id (hex) and trace id (hex)."""

    trace_of: dict[str, str] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    in_doubt: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, spans: list, outcome: str) -> None:
        with self.lock:
            for span in spans:
                span_id = span.span_id.hex()
                self.trace_of[span_id] = span.trace_id.hex()
                getattr(self, outcome).add(span_id)


class CollectorProcess:
    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [*COLLECT, "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=python_env(),
        )
        ready = json.loads(self.process.stdout.readline())
        self.http = int(ready["http"].rsplit(":", 1)[1])
        self.grpc = ready["grpc"]
        self.metrics = int(ready["metrics"].rsplit(":", 1)[1])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.process.stdout.close()
        self.process.stderr.close()

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=120)
        assert self.process.returncode == 0, err
        return err


def _traces(rng: random.Random, count: int) -> list[list]:
    """Traces of 1-4 llm children and a root (last); each is sent as two requests (children, then root)."""
    out = []
    for _ in range(count):
        trace_id = rng.randbytes(16)
        root_id = rng.randbytes(8)
        children = [
            span(trace_id, rng.randbytes(8), root_id, name="llm", tailcut__kind="llm")
            for _ in range(rng.randint(1, 4))
        ]
        root = span(trace_id, root_id, name="run", error=rng.random() < 0.2, tailcut__kind="root")
        out.append([*children, root])
    return out


def _http_client(port: int, traces: list[list], ledger: Ledger, stop: threading.Event) -> None:
    for spans in traces:
        for part in (spans[:-1], spans[-1:]):
            if stop.is_set():
                return
            try:
                status = post(port, export_request(part))[0]
            except OSError:
                ledger.note(part, "in_doubt")
                return
            ledger.note(part, "acked" if status == 200 else "refused")
            if status != 200:
                return


def _grpc_client(target: str, traces: list[list], ledger: Ledger, stop: threading.Event) -> None:
    channel = grpc.insecure_channel(target)
    call = channel.unary_unary(_EXPORT, request_serializer=None, response_deserializer=None)
    try:
        for spans in traces:
            for part in (spans[:-1], spans[-1:]):
                if stop.is_set():
                    return
                try:
                    call(export_request(part), timeout=10)
                except grpc.RpcError as exc:
                    # UNAVAILABLE here is the connection breaking (or never made): in doubt.
                    code = exc.code() if isinstance(exc, grpc.Call) else None
                    broken = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, None)
                    ledger.note(part, "in_doubt" if broken else "refused")
                    return
                ledger.note(part, "acked")
    finally:
        channel.close()


def _load(collector: CollectorProcess, rng: random.Random, ledger: Ledger) -> list[threading.Thread]:
    stop = threading.Event()
    threads = [
        threading.Thread(target=_http_client, args=(collector.http, _traces(rng, 60), ledger, stop))
        for _ in range(3)
    ] + [
        threading.Thread(target=_grpc_client, args=(collector.grpc, _traces(rng, 60), ledger, stop))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    return threads


def check(data: Path, ledger: Ledger) -> collections.Counter[str]:
    """The invariants of the module docstring; returns the count of each kind of trace seen."""
    traces = rows(data, "traces", "SELECT trace_id, kept, span_count, late_spans FROM t")
    stored = rows(data, "spans", "SELECT trace_id, span_id FROM t")
    by_trace = collections.Counter(row["trace_id"] for row in traces)
    assert [t for t, n in by_trace.items() if n > 1] == [], "a trace has two rows"
    row_of = {row["trace_id"]: row for row in traces}
    sent = ledger.acked | ledger.in_doubt
    stored_ids = [row["span_id"] for row in stored]
    assert len(stored_ids) == len(set(stored_ids)), "a span was stored twice"
    assert set(stored_ids) <= sent, "a span that was refused or never sent was stored"
    assert set(row_of) <= {ledger.trace_of[s] for s in sent}, "a row for a trace nobody sent"
    acked_per_trace = collections.Counter(ledger.trace_of[s] for s in ledger.acked)
    sent_per_trace = collections.Counter(ledger.trace_of[s] for s in sent)
    stored_per_trace = collections.Counter(row["trace_id"] for row in stored)
    kinds: collections.Counter[str] = collections.Counter()
    for trace_id, acked in acked_per_trace.items():
        assert trace_id in row_of, f"trace {trace_id}: {acked} acknowledged spans, no row"
        row = row_of[trace_id]
        counted = row["span_count"] + row["late_spans"]
        assert acked <= counted <= sent_per_trace[trace_id], (trace_id, acked, counted)
        if row["kept"]:
            assert stored_per_trace[trace_id] == counted, (
                f"kept trace {trace_id}: counted spans not all stored"
            )
        else:
            assert stored_per_trace[trace_id] == 0
        kinds["kept" if row["kept"] else "dropped"] += 1
        kinds["partial" if acked < sent_per_trace[trace_id] else "whole"] += 1
    return kinds


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_acknowledged_span(tmp_path):
    config = write_config(
        tmp_path,
        policies=POLICIES,
        decision_wait="1500ms",
        tailcut={"late_span_window": "150ms", "wal": {"segment_size_mib": 0.03}},
    )
    text = config.read_text().replace("roll_age: 60s", "roll_age: 200ms")
    config.write_text(text)
    rng = random.Random(20240601)
    ledger = Ledger()
    for _ in range(20):
        collector = CollectorProcess(config)
        threads = _load(collector, rng, ledger)
        time.sleep(rng.uniform(0.05, 0.8))
        collector.kill()
        for thread in threads:
            thread.join(60)
    final = CollectorProcess(config)
    time.sleep(2.0)  # the replayed traces without their root are decided after decision_wait
    final.stop()
    kinds = check(tmp_path / "data", ledger)
    # The scenario exercised what it claims: both outcomes, and traces cut by a kill.
    assert kinds["kept"] and kinds["dropped"] and kinds["partial"], kinds
    assert len(ledger.acked) > 1000
    assert sorted(p.name for p in (tmp_path / "data" / "wal" / "0").iterdir()) == ["LOCK"]  # emptied


def test_a_clean_stop_empties_the_log_and_a_restart_writes_nothing_twice(tmp_path):
    config = write_config(tmp_path, policies=POLICIES, decision_wait="10m")
    ledger = Ledger()
    collector = CollectorProcess(config)
    traces = _traces(random.Random(3), 30)
    for spans in traces:
        assert post(collector.http, export_request(spans[:-1]))[0] == 200
        ledger.note(spans[:-1], "acked")
    collector.kill()  # every trace still waits for its root: all in the log only
    collector = CollectorProcess(config)
    for spans in traces:
        assert post(collector.http, export_request(spans[-1:]))[0] == 200
        ledger.note(spans[-1:], "acked")
    collector.stop()
    with contextlib.suppress(StopIteration):
        next((tmp_path / "data" / "wal").glob("*/*.wal"))
        pytest.fail("a clean stop left log segments behind")
    CollectorProcess(config).stop()  # nothing to replay: nothing written twice
    kinds = check(tmp_path / "data", ledger)
    assert kinds["whole"] == 30


def _wal_bytes(data: Path) -> int:
    return sum(path.stat().st_size for path in (data / "wal").glob("*/*.wal"))


@pytest.mark.slow
def test_a_trace_that_waits_long_does_not_pin_the_log_and_survives_a_crash(tmp_path):
    """Compaction: the log stays bounded while one trace waits for its decision_wait, a kill loses nothing."""
    config = write_config(
        tmp_path,
        policies=POLICIES,
        decision_wait="10m",
        tailcut={"late_span_window": "0s", "wal": {"max_size_mib": 1, "segment_size_mib": 0.03}},
    )
    config.write_text(config.read_text().replace("roll_age: 60s", "roll_age: 200ms"))
    rng = random.Random(21)
    ledger = Ledger()
    collector = CollectorProcess(config)
    waiting = _traces(rng, 1)[0][:-1]  # its root never comes: it waits for decision_wait
    assert post(collector.http, export_request(waiting))[0] == 200
    ledger.note(waiting, "acked")
    sent = 0
    while sent < 3 * 1024 * 1024:  # three times the log's bound, in complete traces decided at once
        spans = _traces(rng, 1)[0]
        body = export_request(spans)
        deadline = time.monotonic() + 15  # a busy writer may fill the log for a moment, not for good
        while (status := post(collector.http, body)[0]) == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200, "the log stayed full: the waiting trace pins it"
        ledger.note(spans, "acked")
        sent += len(body)
    assert _wal_bytes(tmp_path / "data") < 1024 * 1024
    collector.kill()
    collector = CollectorProcess(config)
    time.sleep(1.0)
    collector.stop()  # decides the waiting trace (`shutdown`) from its compacted copy
    check(tmp_path / "data", ledger)
    reasons = rows(
        tmp_path / "data",
        "traces",
        f"SELECT span_count FROM t WHERE trace_id = '{waiting[0].trace_id.hex()}'",
    )
    assert reasons == [{"span_count": len(waiting)}]


def test_a_full_log_answers_429_and_loses_nothing(tmp_path):
    config = write_config(
        tmp_path, policies=POLICIES, decision_wait="10m", tailcut={"wal": {"max_size_mib": 1}}
    )
    rng = random.Random(22)
    ledger = Ledger()
    collector = CollectorProcess(config)
    try:
        for _ in range(2000):  # traces of 16 KB that all wait: the log holds them all
            trace_id = rng.randbytes(16)
            spans = [span(trace_id, rng.randbytes(8), b"\x01" * 8, payload="x" * 4000) for _ in range(4)]
            status, headers, _ = post(collector.http, export_request(spans))
            if status == 429:
                assert headers["retry-after"] == "1"
                ledger.note(spans, "refused")
                break
            assert status == 200
            ledger.note(spans, "acked")
        else:
            pytest.fail("the log never filled")
    finally:
        collector.stop()
    check(tmp_path / "data", ledger)


@pytest.mark.parametrize(
    ("wal", "message"),
    [
        (
            {"fsync": "sometimes"},
            'processors.tailcut.wal.fsync: expected one of always, interval, never, got "sometimes"',
        ),
        ({"max_size_mib": 0}, "processors.tailcut.wal.max_size_mib: expected a number >= 1, got 0"),
        ({"size": 1}, "processors.tailcut.wal.size: unknown key"),
    ],
)
def test_a_bad_wal_setting_fails_in_one_line(tmp_path, wal, message):
    config = write_config(tmp_path, tailcut={"wal": wal})
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    assert str(raised.value).startswith(message), str(raised.value)


def test_wal_settings_and_their_defaults(tmp_path):
    default = load_config(write_config(tmp_path)).tailcut.wal
    assert (default.enabled, default.directory, default.fsync, default.fsync_interval) == (
        True,
        None,
        "interval",
        1.0,
    )
    set_ = load_config(
        write_config(
            tmp_path, tailcut={"wal": {"dir": "elsewhere", "fsync": "always", "fsync_interval": "250ms"}}
        )
    ).tailcut.wal
    assert (set_.directory, set_.fsync, set_.fsync_interval) == (Path("elsewhere"), "always", 0.25)


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.tuples(st.integers(1, 5), st.binary(max_size=300)), min_size=1, max_size=20),
    cut=st.integers(min_value=0),
    flip=st.one_of(st.none(), st.integers(min_value=0)),
)
def test_a_torn_or_damaged_log_reads_back_an_intact_prefix(tmp_path_factory, records, cut, flip):
    """What a crash (a torn tail) or a bad sector leaves: the records before the damage, nothing else."""
    directory = tmp_path_factory.mktemp("wal")
    wal = WriteAheadLog(directory, fsync="never")
    wal.open()
    for record in records:
        wal.append([record])
    wal.close()
    (segment,) = directory.glob("*.wal")
    data = bytearray(segment.read_bytes())
    del data[cut % (len(data) + 1) :]
    if flip is not None and data:
        data[flip % len(data)] ^= 0x40
    segment.write_bytes(bytes(data))
    reader = WriteAheadLog(directory)
    reader.open()
    try:
        found = [(kind, payload) for _, kind, payload in reader.records()]
    finally:
        reader.close()
    assert found == records[: len(found)]


#: Parts at or over the size the log hands to ``writev`` unjoined (16 KiB).
_LARGE_PART = st.builds(
    lambda size, byte: bytes([byte]) * size, st.integers(16_384, 40_000), st.integers(0, 255)
)


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.integers(1, 5),
                st.lists(st.one_of(st.binary(max_size=200), _LARGE_PART)),
            ),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_records_given_in_parts_read_back_whole(tmp_path_factory, batches):
    """A payload given as parts (a request body is not copied into its record) is one record on disk,
    with zlib's CRC-32 over the type and the whole payload."""
    directory = tmp_path_factory.mktemp("wal")
    wal = WriteAheadLog(directory, fsync="never")
    wal.open()
    for batch in batches:
        wal.append([(kind, parts) for kind, parts in batch])
    wal.close()
    (segment,) = directory.glob("*.wal")
    data = segment.read_bytes()
    expected = [(kind, b"".join(parts)) for batch in batches for kind, parts in batch]
    position = 0
    for kind, payload in expected:
        length, checksum, found_kind = struct.unpack_from("<IIB", data, position)
        assert (length, found_kind) == (len(payload), kind)
        assert checksum == zlib.crc32(payload, zlib.crc32(bytes((kind,))))
        position += 9 + length
    assert position == len(data)
    reader = WriteAheadLog(directory)
    reader.open()
    try:
        assert [(kind, payload) for _, kind, payload in reader.records()] == expected
    finally:
        reader.close()
