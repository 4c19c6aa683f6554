"""The SDK never breaks the agent: a failing hook or a failing recording step is counted and logged once.

Every test calls an instrumented function that counts its own runs, under one fault, and checks that
it ran exactly once per call and returned its value, for each shape of instrumented code: a function,
a coroutine, a generator, an async generator, ``tailcut.boundary`` and ``tailcut.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tailcut
from tailcut import _config
from tailcut import attributes as attr


class Calls:
    """Counts the runs of the instrumented code."""

    def __init__(self) -> None:
        self.n = 0


class FailingProcessor(SpanProcessor):
    """A span processor that raises when a span starts or ends (like a buggy third-party one)."""

    def __init__(self, *, on_start: bool = False, on_end: bool = False) -> None:
        self.fail_start, self.fail_end = on_start, on_end

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.fail_start:
            raise RuntimeError("processor on_start is broken")

    def on_end(self, span: ReadableSpan) -> None:
        if self.fail_end:
            raise RuntimeError("processor on_end is broken")


class RaisingMapping(dict):
    """Capture settings whose lookup raises."""

    def get(self, *args: Any) -> Any:
        raise KeyError("capture settings are broken")


class BrokenModel:
    """A value whose own normalisation to JSON (pydantic's ``model_dump``) raises."""

    def model_dump(self, mode: str = "python") -> Any:
        raise RuntimeError("model_dump is broken")


class HostileProxy:
    """A value whose attribute lookup raises (a lazy proxy whose target is gone)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("the proxied object is gone")


def failing_redact(value: Any, *, kind: str, field: str) -> Any:
    raise ValueError("redact hook is broken: sk-secret-in-the-message-0123456789")


@contextlib.contextmanager
def recording(processor: SpanProcessor | None = None, **config: Any) -> Iterator[InMemorySpanExporter]:
    """Record into memory through a real provider, with an optional faulty processor in front."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    if processor is not None:
        provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = _config.install(_config.Config(enabled=True, tracer=provider.get_tracer("t"), **config))
    try:
        yield exporter
    finally:
        _config.install(previous)


# -- the shapes of instrumented code: each returns (what the agent got, the function's run count) --------


def calling(
    decorator: Callable[[Callable[..., Any]], Callable[..., Any]],
) -> Callable[[Any], tuple[Any, int]]:
    """The shape of a plain function under ``decorator``."""

    def call(argument: Any) -> tuple[Any, int]:
        calls = Calls()

        @decorator
        def function(x: Any) -> dict:
            calls.n += 1
            return {"ok": 1}

        return function(argument), calls.n

    return call


def call_async(argument: Any) -> tuple[Any, int]:
    calls = Calls()

    @tailcut.tool(name="async_tool")
    async def async_tool(x: Any) -> dict:
        calls.n += 1
        return {"ok": 1}

    return asyncio.run(async_tool(argument)), calls.n


def call_generator(argument: Any) -> tuple[Any, int]:
    calls = Calls()

    @tailcut.retriever(name="gen")
    def gen(x: Any) -> Iterator[int]:
        calls.n += 1
        yield 1
        yield 2

    return list(gen(argument)), calls.n


def call_async_generator(argument: Any) -> tuple[Any, int]:
    calls = Calls()

    @tailcut.retriever(name="agen")
    async def agen(x: Any) -> Any:
        calls.n += 1
        yield 1
        yield 2

    async def consume() -> list[int]:
        return [item async for item in agen(argument)]

    return asyncio.run(consume()), calls.n


def call_manual_boundary(argument: Any) -> tuple[Any, int]:
    calls = Calls()
    with tailcut.boundary("tool", "manual", request={"x": argument}) as b:
        calls.n += 1
        result = b.record({"ok": 1})
    return result, calls.n


def call_run(argument: Any) -> tuple[Any, int]:
    calls = Calls()
    with tailcut.run("agent", input={"x": argument}, initial_state={"x": argument}) as run:
        calls.n += 1
        run.set_output({"x": argument})
        result = {"ok": 1}
    return result, calls.n


SHAPES: dict[str, tuple[Callable[[Any], tuple[Any, int]], Any]] = {
    "function": (calling(tailcut.tool(name="sync_tool")), {"ok": 1}),
    "coroutine": (call_async, {"ok": 1}),
    "generator": (call_generator, [1, 2]),
    "async generator": (call_async_generator, [1, 2]),
    "tailcut.boundary": (call_manual_boundary, {"ok": 1}),
    "tailcut.run": (call_run, {"ok": 1}),
}
#: Spans without payloads: only faults of the span machinery reach them.
SPAN_SHAPES = {**SHAPES, "agent span": (calling(tailcut.agent(name="planner")), {"ok": 1})}


def _warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tailcut" and needle in r.getMessage()]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_raising_redact_hook_records_no_payload_and_the_code_runs_once(shape, caplog):
    call, expected = SHAPES[shape]
    before = tailcut.stats()
    with recording(redact=failing_redact) as exporter:
        for _ in range(3):
            assert call("secret-argument") == (expected, 1)
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        text = " ".join(str(v) for v in (span.attributes or {}).values())
        assert "secret-argument" not in text  # the unredacted payload never leaves
        assert "sk-secret-in-the-message" not in text
    noted = [s for s in spans if attr.PAYLOAD_ERROR in (s.attributes or {})]
    assert noted and all(
        "the redact hook raised ValueError" in s.attributes[attr.PAYLOAD_ERROR] for s in noted
    )
    after = tailcut.stats()
    assert after["hook_errors"] > before["hook_errors"]
    assert after["payloads_unencodable"] > before["payloads_unencodable"]
    assert len(_warnings(caplog, "the redact hook raised")) <= 1
    assert not any("sk-secret-in-the-message" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("value", "message"), [(BrokenModel, "model_dump is broken"), (HostileProxy, "is gone")]
)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_value_whose_normalisation_raises_is_noted_and_the_code_runs_once(shape, value, message):
    call, expected = SHAPES[shape]
    before = tailcut.stats()["payloads_unencodable"]
    with recording() as exporter:
        assert call(value()) == (expected, 1)
    noted = [
        s.attributes[attr.PAYLOAD_ERROR]
        for s in exporter.get_finished_spans()
        if attr.PAYLOAD_ERROR in (s.attributes or {})
    ]
    assert any(message in note for note in noted)
    assert tailcut.stats()["payloads_unencodable"] > before


FAULTS: dict[str, Callable[[], Any]] = {
    "capture settings raise": lambda: recording(capture_content=RaisingMapping()),
    "span processor raises at start": lambda: recording(FailingProcessor(on_start=True)),
    "span processor raises at end": lambda: recording(FailingProcessor(on_end=True)),
}


@pytest.mark.parametrize(
    ("shape", "fault"),
    # An agent span records no payload, so it never reads the capture settings.
    [(s, f) for f in FAULTS for s in SPAN_SHAPES if (s, f) != ("agent span", "capture settings raise")],
)
def test_an_internal_failure_is_counted_logged_once_and_the_code_runs_once(shape, fault, caplog):
    call, expected = SPAN_SHAPES[shape]
    before = tailcut.stats()["internal_errors"]
    with FAULTS[fault]():
        for _ in range(3):
            assert call({"q": 1}) == (expected, 1)
    assert tailcut.stats()["internal_errors"] > before
    messages = [r.getMessage() for r in caplog.records if r.name == "tailcut"]
    assert all(messages.count(m) == 1 for m in messages)  # never repeated (once per process)


def test_a_repeated_failure_is_logged_once_per_process_and_counted_every_time():
    """In a fresh process: five crossings under a broken processor, one log line, five counts."""
    done = subprocess.run(
        [sys.executable, "-c", REPEATED_FAULT],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TAILCUT_"))},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10", "5"]  # five right results, five counted failures
    assert done.stderr.count("tailcut: recording failed in ending a span") == 1


REPEATED_FAULT = """
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
import tailcut

class Broken(SpanProcessor):
    def on_end(self, span):
        raise RuntimeError("broken")

provider = TracerProvider()
provider.add_span_processor(Broken())
tailcut.init(tracer_provider=provider)

@tailcut.tool
def double(x):
    return 2 * x

print(sum(double(1) for _ in range(5)), tailcut.stats()["internal_errors"])
"""


def test_the_agents_own_exception_passes_through_unchanged_despite_a_fault():
    calls = Calls()

    @tailcut.tool(name="fails")
    def fails() -> None:
        calls.n += 1
        raise LookupError("the tool's own error")

    with recording(FailingProcessor(on_end=True)), pytest.raises(LookupError, match="the tool's own"):
        fails()
    assert calls.n == 1


def test_a_retried_tool_is_not_rerun_because_recording_failed():
    calls = Calls()

    @tailcut.tool(name="once", retry=tailcut.Retry(attempts=3))
    def once() -> int:
        calls.n += 1
        return 7

    with recording(FailingProcessor(on_end=True)):
        assert once() == 7
    assert calls.n == 1
