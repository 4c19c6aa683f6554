"""Where ``tailcut collect`` puts its JSON event lines (``--events``): never among the human lines a
person reads at a terminal, always where a supervisor asked for them."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_collector_helpers import python_env

COLLECT = [sys.executable, "-m", "tailcut", "collect", "--http", "127.0.0.1:0", "--no-grpc"]
COLLECT += ["--metrics", "127.0.0.1:0"]


def _wait_for(path: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)


def test_events_go_to_the_file_asked_for_and_nothing_json_reaches_stdout(tmp_path):
    events = tmp_path / "events.jsonl"
    process = subprocess.Popen(
        [*COLLECT, "--data", str(tmp_path / "data"), "--events", str(events)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    _wait_for(events, '"ready"')
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out == ""
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert [record["event"] for record in records] == ["ready", "stopped"]
    assert records[0]["data"] == str(tmp_path / "data") and records[1]["traces"] == 0
    assert "tailcut collect: receiving OTLP/HTTP" in err and "{" not in err


def test_at_a_terminal_stdout_gets_no_json_by_default(tmp_path):
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*COLLECT, "--data", str(tmp_path / "data")],
        stdout=follower,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    os.close(follower)
    deadline = time.monotonic() + 60
    err = ""
    while "receiving" not in err:  # the human "receiving ..." line says it is ready
        assert time.monotonic() < deadline and process.poll() is None
        err += process.stderr.readline()
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=60)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower side is closed: everything was read
            break
        if not chunk:
            break
        terminal += chunk
    os.close(leader)
    assert process.returncode == 0, rest
    assert b"{" not in terminal, terminal
