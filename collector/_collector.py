"""The collector as a Python object: start it, send it OTLP, stop it (deciding and writing everything).

All receiving, buffering and deciding happens on one asyncio event loop in a background thread (so no
locks are needed on the hot path); normalising kept spans and writing Parquet happen on a writer thread
(:mod:`tailcut.collector._sink`). ``tailcut collect`` is this object plus signal handling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Coroutine
from typing import Any, NamedTuple, TypeVar

from tailcut.collector._config import CollectorConfig, load_config
from tailcut.collector._errors import CollectorError
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._processor import Processor
from tailcut.collector._receivers import MetricsServer, OtlpGrpcReceiver, OtlpHttpReceiver
from tailcut.collector._sink import Sink

_logger = logging.getLogger("tailcut.collector")
T = TypeVar("T")
#: Seconds a request under way may take to finish once the collector stops.
CLOSE_GRACE = 2.0


class Ports(NamedTuple):
    """Ports the collector listens on (None when that endpoint is disabled)."""

    http: int | None
    grpc: int | None
    metrics: int | None


class Collector:
    """A tail-sampling OTLP collector running in this process.

    Parameters
    ----------
    config
        A config from :func:`load_config`; None uses the default ``otel-config.yaml``.

    Examples
    --------
    ::

        from tailcut.collector import Collector, load_config

        overrides = {"data": "data", "http": "127.0.0.1:0", "grpc": False, "metrics": "127.0.0.1:0"}
        config = load_config(None, overrides)
        with Collector(config) as collector:
            endpoint = f"http://127.0.0.1:{collector.ports.http}/v1/traces"
            ...  # agents export OTLP to endpoint
            collector.wait_idle()
        # stopped: every trace decided, every row written
    """

    def __init__(self, config: CollectorConfig | None = None) -> None:
        self.config = config if config is not None else load_config()
        self.metrics = CollectorMetrics()
        self.sink = Sink(self.config, self.metrics)
        self.processor = Processor(self.config, self.metrics, self.sink)
        self.ports = Ports(None, None, None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: OtlpHttpReceiver | None = None
        self._grpc: OtlpGrpcReceiver | None = None
        self._metrics_server: MetricsServer | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = False

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> Ports:
        """Start the receivers and the writer; return the bound ports.

        Raises
        ------
        CollectorError
            When an endpoint cannot be bound or the data dir cannot be used.
        """
        if self._thread is not None:
            raise CollectorError("collector already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="tailcut-collector", daemon=True)
        self._thread.start()
        ready.wait()
        try:
            self.sink.start()
            self.processor.start()
            self.ports = self._call(self._start_async())
        except BaseException:
            self._shutdown_loop()
            self.sink.abort()
            self.processor.close()
            raise
        return self.ports

    async def _start_async(self) -> Ports:
        config = self.config
        http_port = grpc_port = metrics_port = None
        if config.http is not None:
            self._http = OtlpHttpReceiver(self.processor.ingest, self.metrics, config.http)
            http_port = await _listen(
                self._http.server.start(config.http.host, config.http.port),
                "OTLP/HTTP",
                "--http",
                config.http.host,
                config.http.port,
            )
        if config.grpc is not None:
            self._grpc = OtlpGrpcReceiver(self.processor.ingest, self.metrics, config.grpc)
            grpc_port = await _listen(
                self._grpc.start(config.grpc.host, config.grpc.port),
                "OTLP/gRPC",
                "--grpc",
                config.grpc.host,
                config.grpc.port,
            )
        if config.metrics is not None:
            self._metrics_server = MetricsServer(self.metrics, self._unhealthy, config.metrics_security)
            metrics_port = await _listen(
                self._metrics_server.server.start(*config.metrics), "metrics", "--metrics", *config.metrics
            )
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        return Ports(http_port, grpc_port, metrics_port)

    def _unhealthy(self) -> str | None:
        """Why ``/healthz`` answers 503 now (None: healthy): stopping, or writes failing."""
        if self._stopping:
            return "shutting down"
        fault = self.sink.fault
        return None if fault is None else f"writing failed, retrying: {fault}"

    async def _tick_forever(self) -> None:
        interval = self.processor.tick_interval
        while True:
            await asyncio.sleep(interval)
            try:
                self.processor.tick(time.monotonic())
            except Exception:  # a bug in one round must not stop every later decision
                _logger.exception("tailcut collector: decision round failed")

    def stop(self, timeout: float = 120.0) -> None:
        """Stop accepting, decide every pending trace (``shutdown``), write everything, release the ports.

        Requests under way get :data:`CLOSE_GRACE` seconds to finish; connections still open then
        (clients that stall mid-request, whose requests were never acknowledged) are cut, so stopping
        never waits on a client. Safe to call twice. Raises :class:`CollectorError` if writing fails.
        """
        if self._thread is None or self._loop is None:
            return
        try:
            self._call(self._stop_async(), timeout)
        finally:
            self._shutdown_loop()
        try:
            self.sink.close(timeout)
        finally:
            self.processor.close()

    async def _stop_async(self) -> None:
        self._stopping = True
        if self._http is not None:
            await self._http.server.close(CLOSE_GRACE)
        if self._grpc is not None:
            await self._grpc.close(CLOSE_GRACE)
        if self._ticker is not None:
            self._ticker.cancel()
        self.processor.shutdown(time.monotonic())
        if self._metrics_server is not None:
            await self._metrics_server.server.close(CLOSE_GRACE)

    def _shutdown_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = self._thread = None

    def wait_idle(self, timeout: float = 60.0, *, quiet: float = 0.0) -> bool:
        """Wait until every trace received so far is decided and its kept spans are written.

        Parameters
        ----------
        timeout
            Longest wait in seconds.
        quiet
            Also require that no span arrived for this many seconds (lets in-flight exports land).

        Returns
        -------
        bool
            True when idle, False on timeout. Rows of recently decided traces stay open for
            ``late_span_window`` and are written by then or by :meth:`stop`.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._loop is None:
                return True
            pending, last_span = self._call(self._state())
            if pending == 0 and time.monotonic() - last_span >= quiet and self.sink.wait_written(0.05):
                return True
            time.sleep(0.02)
        return False

    async def _state(self) -> tuple[int, float]:
        return len(self.processor.buffer), self.processor.last_span_at

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _listen(starting: Coroutine[Any, Any, int], what: str, option: str, host: str, port: int) -> int:
    try:
        return await starting
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CollectorError(
            f"cannot listen on {host}:{port} for {what}: {reason}; "
            f"choose another address with {option} HOST:PORT"
        ) from None
