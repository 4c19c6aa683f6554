"""``tailcut collect``: run the tail-sampling collector until SIGTERM or SIGINT.

The command parses options, builds the config with :func:`tailcut.collector.load_config` and runs a
:class:`tailcut.collector.Collector`. Human-readable progress goes to stderr. Machine events are JSON
lines, one when the collector is ready (the bound endpoints, for a parent process that asked for port 0)
and one when it stopped (what it decided and wrote); ``--events`` says where they go (by default stdout
when it is not a terminal, so a supervisor reading a pipe gets them and a person at a terminal reads only
the human lines).
"""

from __future__ import annotations

import contextlib
import gc
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Final, TextIO

import click

from tailcut.errors import TailcutError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Collector config in the OpenTelemetry Collector's shape "
    "(default: the otel-config.yaml shipped with tailcut).",
)
@click.option("--check", is_flag=True, help="Validate the config, print what it sets up, and exit.")
@click.option(
    "--data",
    type=click.Path(file_okay=False),
    default=None,
    help="Data dir for Parquet, a path or s3://bucket/prefix (overrides exporters.tailcut_parquet.path).",
)
@click.option(
    "--http",
    metavar="HOST:PORT",
    default=None,
    help="OTLP/HTTP endpoint (default 127.0.0.1:4318; port 0 picks one).",
)
@click.option(
    "--grpc",
    metavar="HOST:PORT",
    default=None,
    help="OTLP/gRPC endpoint (default 127.0.0.1:4317; port 0 picks one).",
)
@click.option("--no-grpc", is_flag=True, help="Do not receive OTLP/gRPC.")
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    default=None,
    help="Prometheus /metrics and /healthz endpoint (default 127.0.0.1:8888).",
)
@click.option(
    "--events",
    metavar="TARGET",
    default="auto",
    show_default=True,
    help="Where the JSON event lines (ready, stopped) go: stdout, stderr, none, or a file path "
    "(appended); auto is stdout when stdout is not a terminal, else none.",
)
def collect(
    config_path: str | None,
    check: bool,
    data: str | None,
    http: str | None,
    grpc: str | None,
    no_grpc: bool,
    metrics: str | None,
    events: str,
) -> None:
    """Receive OTLP, keep every failed and anomalous trace plus a uniform baseline, write Parquet.

    Every trace gets a row in the `traces` table, kept or dropped, with the policies that matched and
    its inclusion probability; kept traces' spans go to `spans`. SIGTERM or SIGINT decides every
    pending trace, writes everything and exits 0, also when it arrives during start-up. Python API:
    tailcut.collector.Collector.
    """
    if no_grpc and grpc is not None:
        raise click.UsageError("--grpc and --no-grpc contradict each other")
    stop = _StopRequest()
    # First of all, so that SIGINT or SIGTERM at any moment of start-up stops the command (it would
    # otherwise land in an import or in start() and be lost or turn into a traceback).
    previous = {sig: signal.signal(sig, stop.handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with _event_stream(events) as emit:
            overrides = {"data": data, "http": http, "metrics": metrics, "grpc": grpc}
            _run(config_path, check, overrides, no_grpc, stop, emit)
    except OSError as exc:
        raise click.ClickException(f"--events {events}: cannot write there ({exc.strerror or exc})") from None
    except TailcutError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(
    config_path: str | None,
    check: bool,
    overrides: dict[str, Any],
    no_grpc: bool,
    stop: _StopRequest,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """Start, wait for a stop signal, stop; a signal before the collector is ready stops it as well."""
    from tailcut.collector import Collector, load_config

    if no_grpc:
        overrides["grpc"] = False
    config = load_config(config_path, overrides)
    if check:
        click.echo(describe_config(config))
        return
    collector = Collector(config)
    _tune_gc()
    if not stop.is_set():
        ports = collector.start()
        if not stop.is_set():
            _announce(config, ports, emit)
        stop.wait()
        click.echo("tailcut collect: stopping: deciding pending traces and writing everything", err=True)
        collector.stop()
    summary = collector.processor.summary()
    emit({"event": "stopped", **summary})
    click.echo(
        f"tailcut collect: stopped: {summary['traces']} traces decided, {summary['kept']} kept, "
        f"{summary['spans_written']} spans written",
        err=True,
    )


def _tune_gc() -> None:
    """Collect garbage less often in this process: the buffer holds many small long-lived objects.

    Objects created so far (imports, config) are frozen out of collection, and the youngest
    generation is collected every 50,000 allocations instead of 700; buffered spans are acyclic, so
    this changes when memory is scanned, not what is freed. Only the command does this: an
    in-process :class:`Collector` leaves the host program's settings alone.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


class _StopRequest:
    """Whether SIGTERM or SIGINT has arrived: a flag the signal handler sets, and the main thread polls.

    Not a :class:`threading.Event`. A Python signal handler runs in the main thread between two of its
    bytecodes, and the main thread is the one waiting for the stop: inside ``Event.wait`` it holds the
    event's lock, and an ``Event.set`` in the handler then waits for that lock, held by its own thread,
    forever (the process no longer stops; cpython#126434 is the same trap in ``multiprocessing``). Setting
    an attribute takes no lock.
    """

    #: How often the main thread looks at the flag: the longest a stop waits to begin.
    POLL_SECONDS: Final = 0.1

    def __init__(self) -> None:
        self._requested = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: the stop is requested."""
        self._requested = True

    def is_set(self) -> bool:
        return self._requested

    def wait(self) -> None:
        """Return once the stop was requested."""
        while not self._requested:
            time.sleep(self.POLL_SECONDS)


@contextlib.contextmanager
def _event_stream(target: str) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A function writing one JSON event line (flushed) to ``target`` (see ``--events``)."""
    if target == "auto":
        target = "none" if sys.stdout.isatty() else "stdout"
    if target == "none":
        yield lambda record: None
        return
    with contextlib.ExitStack() as stack:
        if target in ("stdout", "stderr"):
            stream: TextIO = getattr(sys, target)
        else:
            stream = stack.enter_context(open(target, "a", encoding="utf-8"))

        def emit(record: dict[str, Any]) -> None:
            stream.write(json.dumps(record) + "\n")
            stream.flush()

        yield emit


def _announce(config: Any, ports: Any, emit: Callable[[dict[str, Any]], None]) -> None:
    endpoints = {
        "http": f"{config.http.host}:{ports.http}" if ports.http is not None else None,
        "grpc": f"{config.grpc.host}:{ports.grpc}" if ports.grpc is not None else None,
        "metrics": f"{config.metrics[0]}:{ports.metrics}" if ports.metrics is not None else None,
    }
    data = str(config.parquet.path) if config.parquet is not None else None
    emit({"event": "ready", **endpoints, "data": data})
    parts = []
    if endpoints["http"]:
        parts.append(f"OTLP/HTTP on http://{endpoints['http']}/v1/traces")
    if endpoints["grpc"]:
        parts.append(f"OTLP/gRPC on {endpoints['grpc']}")
    if endpoints["metrics"]:
        parts.append(f"metrics on http://{endpoints['metrics']}/metrics")
    click.echo(f"tailcut collect: receiving {', '.join(parts)}; writing to {data}", err=True)


def describe_config(config: Any) -> str:
    """What a validated config sets up, for ``--check``."""
    lines = [f"config OK: {config.source}"]
    receivers = []
    if config.http is not None:
        receivers.append(f"otlp/http {config.http.host}:{config.http.port}{_secured(config.http.security)}")
    if config.grpc is not None:
        receivers.append(f"otlp/grpc {config.grpc.host}:{config.grpc.port}{_secured(config.grpc.security)}")
    lines.append("receivers: " + ", ".join(receivers))
    ts = config.tail_sampling
    timing = f"{ts.decision_wait:g}s after the first span"
    if ts.decision_wait_after_root_received > 0:
        timing = f"{ts.decision_wait_after_root_received:g}s after the root span, else {timing}"
    overflow = "refuse new data" if ts.block_on_overflow else "decide the oldest early"
    lines.append(f"decisions: {timing}; at most {ts.num_traces} traces pending, then {overflow}")
    lines.append("policies:")
    for policy in ts.build_policies():
        lines.append(f"  {policy.name} ({policy.type_name}): {policy.description}")
    exporters = []
    if config.parquet is not None:
        exporters.append(f"tailcut_parquet -> {config.parquet.path}")
    exporters.extend(f"{forwarder.name} -> {forwarder.endpoint}" for forwarder in config.forwarders)
    lines.append("exporters: " + ", ".join(exporters))
    if config.metrics is not None:
        lines.append(f"metrics: {config.metrics[0]}:{config.metrics[1]}{_secured(config.metrics_security)}")
    return "\n".join(lines)


def _secured(security: Any) -> str:
    """`` (mutual TLS, auth: bearertokenauth)`` for an endpoint's security settings, or nothing."""
    parts = []
    if security.tls is not None:
        parts.append("mutual TLS" if security.tls.client_ca_file is not None else "TLS")
    if security.auth is not None:
        parts.append(f"auth: {security.auth.name}")
    return f" ({', '.join(parts)})" if parts else ""
