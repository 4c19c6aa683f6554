"""Traces with planted failure categories, fed to the real collector over OTLP/HTTP (for the census tests).

Each trace is a root (``tailcut.kind`` root, its harness revision as the group, ``tailcut.outcome``), one
``llm`` call and one tool call (three identical ones for a ``tool_loop``). A failure category is planted
so that the collector's ``traces`` row and ``classify``'s findings both see it:

* ``error``: the root span's status is ERROR;
* ``silent_degradation``: the run ends without a failed span but its outcome is ``fail``;
* ``tool_loop``: the same tool called three times with the same arguments;
* ``slow``: the run lasts longer than the latency policy's threshold (not a category).
"""

from __future__ import annotations

import http.client
import json
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut.demo._collector_process import CollectorProcess
from tests.test_collector_helpers import export_request, span, write_config

#: A day in 2026, the traces' clock (they are decided by arrival, not by their timestamps).
EPOCH_NS = 1_795_000_000_000_000_000
#: The latency policy's threshold (ms): a slow run lasts 1,700 ms, the others about 1,000.
SLOW_MS = 1500
PLANTED = ("error", "silent_degradation", "tool_loop")


def policies(baseline_percent: float) -> list[dict[str, Any]]:
    """The simulated deployment's policies: errors, latency and a uniform baseline slice."""
    return [
        {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
        {"name": "slow", "type": "latency", "latency": {"threshold_ms": SLOW_MS}},
        {
            "name": "baseline",
            "type": "probabilistic",
            "probabilistic": {"sampling_percentage": baseline_percent, "hash_salt": "census"},
        },
    ]


@dataclass(frozen=True)
class Run:
    """One planted trace: its group (harness revision) and what it shows."""

    group: str
    error: bool = False
    silent_degradation: bool = False
    tool_loop: bool = False
    slow: bool = False

    def shape(self) -> Shape:
        calls = ((0, 1),) * 3 if self.tool_loop else ((1, 1),)
        outcome = "fail" if self.silent_degradation else "pass"
        return Shape(self.group, root_failed=self.error, outcome=outcome, tools=calls, slow=self.slow)


@dataclass(frozen=True)
class Shape:
    """Any trace of the census tests: the root's status and outcome, the llm calls' output tokens and the
    tool calls as (arguments number, attempt); arguments number 1 is unique to the trace."""

    group: str
    root_failed: bool = False
    outcome: str | None = "pass"
    score: float | None = None
    llm_tokens: tuple[int, ...] = (40,)
    tools: tuple[tuple[int, int], ...] = ((1, 1),)
    failed_tool: int | None = None
    slow: bool = False
    #: A tool call (its number) whose result is ``report``: a failure a framework reports in a payload.
    reporting_tool: int | None = None
    report: str = ""


def spans_of(run: Run | Shape, trace_id: bytes, start_ns: int, rng: random.Random) -> list[Span]:
    """The OTLP spans of ``run`` (root last, as SDKs export it)."""
    shape = run.shape() if isinstance(run, Run) else run
    root_id = trace_id[:8]
    duration_ms = 1700 if shape.slow else rng.randint(950, 1050)

    def child(number: int, name: str, offset_ms: int, **attributes: Any) -> Span:
        """A 5 ms child of the root, ``offset_ms`` after it starts."""
        start = start_ns + offset_ms * 1_000_000
        span_id = bytes([number]) + root_id[1:]
        duration = 5_000_000
        return span(trace_id, span_id, root_id, name=name, start_ns=start, duration_ns=duration, **attributes)

    spans = [
        child(
            0x80 + i,
            "chat",
            1 + 10 * i,
            tailcut__kind="llm",
            tailcut__boundary="llm:openai.chat",
            gen_ai__usage__input_tokens=120,
            gen_ai__usage__output_tokens=tokens,
        )
        for i, tokens in enumerate(shape.llm_tokens)
    ]
    for i, (arguments, attempt) in enumerate(shape.tools):
        retry = {"tailcut__attempt": attempt} if attempt > 1 else {}
        spans.append(
            child(
                2 + i,
                "execute_tool search",
                300 + 10 * i,
                error=shape.failed_tool == i,
                **({"tailcut__response": json.dumps(shape.report)} if shape.reporting_tool == i else {}),
                tailcut__kind="tool",
                tailcut__boundary="tool:search",
                gen_ai__tool__name="search",
                tailcut__request__sha256=f"args-{trace_id.hex()}" if arguments == 1 else f"args-{arguments}",
                **retry,
            )
        )
    root: dict[str, Any] = {"tailcut__kind": "root", "tailcut__harness__revision": shape.group}
    if shape.outcome is not None:
        root["tailcut__outcome"] = shape.outcome
    if shape.score is not None:
        root["tailcut__outcome__score"] = shape.score
    spans.append(
        span(
            trace_id,
            root_id,
            name="support-run",
            error=shape.root_failed,
            start_ns=start_ns,
            duration_ns=duration_ms * 1_000_000,
            **root,
        )
    )
    return spans


def feed(
    directory: Path,
    runs: Sequence[Run | Shape],
    *,
    baseline_percent: float = 10.0,
    seed: int = 0,
    tracestate: str = "",
    tailcut: Mapping[str, Any] | None = None,
) -> Path:
    """Send ``runs`` to ``tailcut collect`` (a child process, over loopback HTTP), wait until it decided
    every trace, stop it (SIGTERM: flush) and return the data dir.

    Requests carry 200 traces each; the collector decides each trace when its root arrives (plus its
    grace) and writes every trace's row and the kept traces' spans. ``tracestate`` goes on every span
    (``ot=th:8``: a head sampler upstream passed half the traffic on); ``tailcut`` sets keys of the
    config's ``processors.tailcut`` block.
    """
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, policies=policies(baseline_percent), tailcut=tailcut)
    data = directory / "data"
    with CollectorProcess(data, directory / "collect.log", config=config) as collector:
        port = int(collector.endpoint.rsplit(":", 1)[1])
        for batch in _batches(runs, 200):
            spans: list[Span] = []
            for index, run in batch:
                start = EPOCH_NS + index * 2_000_000_000
                spans.extend(spans_of(run, rng.randbytes(16), start, rng))
            if tracestate:
                for each in spans:
                    each.trace_state = tracestate
            _send(port, export_request(spans, service="support-agent"))
        collector.wait_decided(len(runs), timeout=600)
    return data


def _send(port: int, body: bytes, deadline_s: float = 600.0) -> None:
    """POST one request until the collector accepts it: a 429 or 503 (backpressure, a write retried) is
    sent again after its Retry-After, as an OTLP exporter does; the deadline bounds the whole."""
    deadline = time.monotonic() + deadline_s
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=deadline_s)
        try:
            connection.request(
                "POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"}
            )
            response = connection.getresponse()
            status, answer = response.status, response.read()
            retry = float(response.getheader("Retry-After") or 1)
        finally:
            connection.close()
        if status == 200:
            return
        assert status in (429, 503) and time.monotonic() < deadline, (status, answer)
        time.sleep(min(retry, 5.0))


def _batches(runs: Sequence[Run | Shape], size: int) -> Iterator[list[tuple[int, Run | Shape]]]:
    numbered = list(enumerate(runs))
    for start in range(0, len(numbered), size):
        yield numbered[start : start + size]


def draw(group: str, n: int, rates: dict[str, float], rng: random.Random, **always: bool) -> list[Run]:
    """``n`` runs of ``group``, each category planted independently at its rate (at most one failure per
    run: error first, then silent degradation, so their rates are exact); ``always`` sets a field of every
    run that shows ``silent_degradation`` (e.g. ``slow=True``)."""
    runs = []
    for _ in range(n):
        error = rng.random() < rates.get("error", 0.0)
        silent = not error and rng.random() < rates.get("silent_degradation", 0.0) / (
            1 - rates.get("error", 0.0)
        )
        loop = rng.random() < rates.get("tool_loop", 0.0)
        extra = always if silent else {}
        slow = extra.get("slow", False) or (not silent and rng.random() < rates.get("slow", 0.0))
        runs.append(Run(group, error=error, silent_degradation=silent, tool_loop=loop, slow=slow))
    return runs


def truth(runs: Iterable[Run], category: str) -> int:
    """How many of ``runs`` show ``category``."""
    return sum(getattr(run, category) for run in runs)


def viewer_compare(data: Path, first: str = "v1", second: str = "v2") -> Any:
    """The viewer's ``/compare`` page of ``harness_revision`` ``first`` → ``second`` (the response)."""
    from starlette.testclient import TestClient

    from tailcut.ui import Viewer, create_app

    viewer = Viewer(data)
    try:
        return TestClient(create_app(viewer)).get(
            "/compare", params={"by": "harness_revision", "a": first, "b": second}
        )
    finally:
        viewer.close()
