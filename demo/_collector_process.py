"""``tailcut collect`` as a child process of the demo: started on free ports, waited on, always stopped.

The demo runs the collector in its own process, as production does, so the agents' process and the
collector each have a core. The child announces its bound ports as one JSON line on stdout; the demo
polls its Prometheus endpoint until every trace it sent has been decided, then stops it with SIGTERM
(which decides anything pending and flushes), and kills it if it does not exit in time.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from tailcut.errors import TailcutError


class DemoProcessError(TailcutError):
    """A process the demo started did not behave (did not start, or did not stop)."""


def _metric_total(text: str, name: str) -> float:
    """Sum of every sample of one metric in Prometheus text format."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class CollectorProcess:
    """A ``tailcut collect`` child process writing to ``data_dir``.

    Parameters
    ----------
    data_dir
        Where the collector writes Parquet.
    log
        Where the child's stderr goes (the demo keeps it in its output directory).
    """

    def __init__(self, data_dir: Path, log: Path, *, config: Path | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log
        self.config = config
        self.http: str | None = None
        self.metrics: str | None = None
        self.summary: dict[str, Any] = {}
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def endpoint(self) -> str:
        """The OTLP/HTTP base URL agents export to."""
        if self.http is None:
            raise DemoProcessError("the collector is not running")
        return f"http://{self.http}"

    def start(self, timeout: float = 60.0) -> CollectorProcess:
        command = [sys.executable, "-m", "tailcut", "collect", "--data", str(self.data_dir)]
        command += ["--http", "127.0.0.1:0", "--no-grpc", "--metrics", "127.0.0.1:0"]
        if self.config is not None:
            command += ["--config", str(self.config)]
        self._log = self.log_path.open("w", encoding="utf-8")
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self._process.stdout is not None
        deadline = time.monotonic() + timeout
        line = self._process.stdout.readline()
        if not line or time.monotonic() > deadline:
            self.stop()
            raise DemoProcessError(f"tailcut collect did not start; see {self.log_path}")
        ready = json.loads(line)
        self.http, self.metrics = ready["http"], ready["metrics"]
        return self

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as response:
            return _metric_total(response.read().decode("utf-8"), name)

    def wait_decided(self, traces: int, timeout: float = 120.0) -> None:
        """Wait until the collector has decided ``traces`` traces (roots end + the decision grace)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            decided = self.metric("tailcut_decisions_total")
            pending = self.metric("otelcol_processor_tail_sampling_sampling_traces_on_memory")
            if decided >= traces and pending == 0:
                return
            time.sleep(0.25)
        raise DemoProcessError(f"the collector decided {decided:.0f} of {traces} traces in {timeout:.0f} s")

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (decide pending traces, flush, exit), then kill if it hangs. Safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                out, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise DemoProcessError(
                    f"tailcut collect did not stop within {timeout:.0f} s; killed"
                ) from None
            for line in (out or "").splitlines():
                record = json.loads(line)
                if record.get("event") == "stopped":
                    self.summary = record
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> CollectorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
