"""``tailcut collect`` stops on SIGTERM/SIGINT at any moment: during start-up, and while clients stall."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tailcut.collector import cli as collect_command
from tests.http_support import HEAD
from tests.test_collector_helpers import (
    KEEP_ERRORS,
    export_request,
    post,
    python_env,
    rows,
    simple_trace,
    trace_ids,
    write_config,
)

COLLECT = [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect"]


def spawn(config) -> subprocess.Popen:
    return subprocess.Popen(
        [*COLLECT, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_finishes_while_clients_stall_mid_request(tmp_path, signum):
    config = write_config(
        tmp_path,
        policies=KEEP_ERRORS,
        decision_wait="10m",
        decision_wait_after_root_received="10m",
        http={"read_header_timeout": "1h", "read_timeout": "1h", "idle_timeout": "1h"},
    )
    process = spawn(config)
    stalled: list[socket.socket] = []
    try:
        ready = json.loads(process.stdout.readline())
        port = int(ready["http"].rsplit(":", 1)[1])
        ids = trace_ids(8, seed=5)
        body = export_request([s for i, t in enumerate(ids) for s in simple_trace(t, error=i < 2)])
        assert post(port, body)[0] == 200
        for data in (
            b"",  # connected, nothing sent
            HEAD,  # mid-head
            HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body[:50],  # mid-body
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n10\r\nabc",  # mid-chunk
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",  # answered, then idle keep-alive
        ):
            connection = socket.create_connection(("127.0.0.1", port), timeout=30)
            connection.sendall(data)
            stalled.append(connection)
        grpc_port = int(ready["grpc"].rsplit(":", 1)[1])
        connection = socket.create_connection(("127.0.0.1", grpc_port), timeout=30)
        connection.sendall(b"PRI * HTTP/2.0\r\n")  # half an HTTP/2 preface
        stalled.append(connection)
        time.sleep(0.2)  # let the collector accept them all (nothing is asserted about time)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        for connection in stalled:
            connection.close()
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    stopped = json.loads(out.splitlines()[-1])
    assert (stopped["event"], stopped["traces"], stopped["kept"]) == ("stopped", 8, 2)
    traces = rows(tmp_path / "data", "traces", "SELECT trace_id, decision_reason FROM t")
    assert sorted(t["trace_id"] for t in traces) == sorted(t.hex() for t in ids)
    assert {t["decision_reason"] for t in traces} == {"shutdown"}


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: the SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the handler mask from /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4])
def test_a_signal_during_start_up_stops_the_collector_cleanly(tmp_path, signum, delay):
    """From the moment ``tailcut collect`` runs (its SIGTERM handler is the first thing it installs),
    SIGINT or SIGTERM stops it, whatever start-up step it is in: imports, binding, readiness.

    Earlier, while Python itself starts, a SIGINT is Python's: its ``site`` module even swallows a
    KeyboardInterrupt raised while it runs ``.pth`` files, and the process carries on.
    """
    process = spawn(write_config(tmp_path, policies=KEEP_ERRORS))
    try:
        while not catches(process.pid, signal.SIGTERM):
            assert process.poll() is None, process.communicate()
            time.sleep(0.002)
        time.sleep(delay)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "stopped"


def test_sigint_right_after_ready_stops_the_process(tmp_path):
    process = spawn(write_config(tmp_path, policies=KEEP_ERRORS))
    try:
        assert json.loads(process.stdout.readline())["event"] == "ready"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "stopped"


def waits_out_a_handler_at_every_line(wait, handler) -> bool:
    """Whether ``wait()`` returns when ``handler`` (a signal handler) runs at every line the waiting thread
    executes, as a signal may land between any two bytecodes of the main thread."""

    def everywhere(frame, event, arg):
        if event == "line":
            handler(signal.SIGTERM, frame)
        return everywhere

    def waiting() -> None:
        sys.settrace(everywhere)
        try:
            wait()
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=waiting, daemon=True)
    thread.start()
    thread.join(10)
    return not thread.is_alive()


def test_a_stop_signal_landing_inside_the_wait_for_it_ends_the_wait():
    """The wait for the stop survives its own signal handler. With a ``threading.Event`` it did not: the
    handler's ``set`` waited for the lock the interrupted ``Event.wait`` held, and ``tailcut collect``
    never stopped (the kill -9 test of the write-ahead log hung on its final SIGTERM once; under this
    test an ``Event`` stays blocked)."""
    stop = collect_command._StopRequest()
    assert waits_out_a_handler_at_every_line(stop.wait, stop.handle)
    assert stop.is_set()
