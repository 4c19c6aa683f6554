"""Shared by the openai and anthropic instrumentation tests: span readers and a record-serving interceptor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from tailcut import attributes as attr
from tailcut._pieces import expand
from tailcut.canonical import sha256_hex
from tailcut.interceptor import Crossing, Served


def whole(span: ReadableSpan, name: str) -> str:
    """A payload attribute's canonical text, its placeholders filled from the pieces the span carries."""
    pieces = {sha256_hex(text): text for text in span.attributes.get(name + ".pieces", ())}
    return expand(span.attributes[name], pieces.__getitem__)


def request_of(span: ReadableSpan) -> Any:
    return json.loads(whole(span, attr.REQUEST))


def response_of(span: ReadableSpan) -> Any:
    return json.loads(whole(span, attr.RESPONSE))


def events_of(span: ReadableSpan) -> list[Any]:
    return json.loads(whole(span, attr.STREAM_EVENTS))


def served_from(span: ReadableSpan) -> Served:
    """What a replay session serves for a recorded llm span: its response (or error) and stream events."""
    attributes = span.attributes
    response_json = whole(span, attr.RESPONSE) if attr.RESPONSE in attributes else None
    events = events_of(span) if attr.STREAM_EVENTS in attributes else None
    return Served(
        response=json.loads(response_json) if response_json is not None else None,
        response_json=response_json,
        error_type=attributes.get(attr.ERROR_TYPE),
        error_message=attributes.get(attr.ERROR_MESSAGE),
        stream_events=events,
    )


class ServeRecorded:
    """A minimal replay interceptor: serves each recorded (boundary, occurrence) it holds, logs the rest."""

    def __init__(self, recorded: list[ReadableSpan] | dict[tuple[str, int], Served]) -> None:
        if isinstance(recorded, dict):
            self.table = recorded
        else:
            self.table = {
                (s.attributes[attr.BOUNDARY], s.attributes[attr.OCCURRENCE]): served_from(s) for s in recorded
            }
        self.crossings: list[Crossing] = []
        self.results: list[tuple[str, bool, str | None, str | None]] = []

    def on_boundary(self, crossing: Crossing) -> Served | None:
        self.crossings.append(crossing)
        return self.table.get((crossing.boundary, crossing.occurrence))

    def on_result(self, crossing, *, served, response_json, response_sha256, error) -> None:
        self.results.append(
            (crossing.boundary, served, response_sha256, type(error).__name__ if error is not None else None)
        )


def run_python(
    code: str, *args: str, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (optionally under a launcher such as opentelemetry-instrument).

    The child sees no ``OTEL_*`` or ``TAILCUT_*`` variable of this process, only those of ``env``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TAILCUT_"))} | (env or {})
    return subprocess.run(
        [*launcher, sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
