"""Per-crossing cost of recording a boundary: tailcut versus a bare OpenTelemetry span.

Goal (issue 2): a ``@tailcut.tool`` crossing costs at most 1.3x a bare OpenTelemetry SDK span that
carries the same 4 KB payload. Both run through the same TracerProvider and batch processor with an
exporter that discards, so the difference is tailcut's own work: binding arguments, canonical JSON,
redaction, two sha256 hashes and the boundary attributes. The bare span serialises the payload with
``json.dumps`` (recording a payload means serialising it). When the ``agent-chronicle`` package is
installed, its recorder's cost for the same call is measured too (Chronicle reports 23 us/crossing).

Run: ``python benchmarks/bench_sdk.py [--crossings N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import tailcut
from tailcut import _config
from tailcut.payloads import PayloadStore

PAYLOAD = [
    {"id": i, "title": f"Refund policy section {i}", "body": "lorem ipsum dolor " * 17} for i in range(12)
]


class DiscardExporter(SpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        return SpanExportResult.SUCCESS


def search_kb(query: str, k: int = 12) -> list[dict]:
    return PAYLOAD


def per_call_us(fn: Callable[[], None], crossings: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(crossings):
        fn()
    return (time.perf_counter() - start) / crossings * 1e6


def interleaved(contenders: dict[str, Callable[[], None]], crossings: int, rounds: int) -> dict[str, float]:
    """Median us per call of each contender, timed in alternation so machine drift hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            samples[name].append(per_call_us(fn, crossings))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--rounds", type=int, default=9, help="alternating batches per contender")
    args = parser.parse_args()

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter(), max_queue_size=1_000_000))
    tracer = provider.get_tracer("bench")
    _config.install(
        _config.Config(
            enabled=True, tracer=provider.get_tracer("tailcut"), payload_store=PayloadStore(".tailcut/bench")
        )
    )
    print(f"payload: {len(json.dumps(PAYLOAD))} bytes of JSON, {args.crossings} crossings per run")

    def bare() -> None:
        with tracer.start_as_current_span("execute_tool search_kb") as span:
            span.set_attribute("payload", json.dumps(search_kb("refund policy")))

    recorded = tailcut.tool(name="search_kb")(search_kb)

    def with_tailcut() -> None:
        recorded("refund policy")

    # The same attributes tailcut writes, precomputed: what the OTel SDK alone charges for the contract.
    contract = tailcut_attributes(recorded)

    def bare_with_contract() -> None:
        with tracer.start_as_current_span("execute_tool search_kb", attributes=contract):
            pass

    contenders = {
        "plain": lambda: search_kb("refund policy"),
        "bare": bare,
        "contract": bare_with_contract,
        "tailcut": with_tailcut,
    }
    chronicle = chronicle_recorder()
    if chronicle is not None:
        contenders["chronicle"] = chronicle
    with tailcut.run("bench"):
        us = interleaved(contenders, args.crossings, args.rounds)
    bare_us, tailcut_us = us["bare"], us["tailcut"]
    print(f"undecorated call              {us['plain']:8.2f} us")
    print(f"bare OTel span + 4 KB payload {bare_us:8.2f} us")
    print(f"same span, tailcut's {len(contract)} attrs {us['contract']:8.2f} us  (values precomputed)")
    print(f"@tailcut.tool crossing        {tailcut_us:8.2f} us")
    print(f"ratio tailcut / bare span     {tailcut_us / bare_us:8.2f}x   (goal <= 1.30x)")
    if chronicle is None:
        print("agent-chronicle not installed: pip install agent-chronicle to compare")
    else:
        chronicle_us = us["chronicle"]
        print(f"agent-chronicle crossing      {chronicle_us:8.2f} us")
        print(f"ratio tailcut / chronicle     {tailcut_us / chronicle_us:8.2f}x")
        print(f"ratio chronicle / bare span   {chronicle_us / bare_us:8.2f}x")
    provider.shutdown()


def tailcut_attributes(recorded: Callable[..., object]) -> dict[str, object]:
    """The attributes one recorded crossing carries."""
    from tailcut.testing import capture_spans

    with capture_spans() as spans, tailcut.run("probe"):
        recorded("refund policy")
    return dict(spans.by_kind("tool")[0].attributes or {})


def chronicle_recorder() -> Callable[[], None] | None:
    """Chronicle's recorder on the same call, writing envelopes to an in-memory sink (None if absent)."""
    try:
        import chronicle
        from chronicle.framework.context.recording_session import RecordingSession
        from chronicle.framework.context.session_context_utils import use_session
    except ImportError:
        return None

    class MemorySink:
        def __init__(self) -> None:
            self.items: list[object] = []

        def write_span(self, span: object) -> None:
            self.items.append(span)

        def write_envelope(self, envelope: object) -> None:
            self.items.append(envelope)

        def flush(self) -> None:
            self.items.clear()

    recorded = chronicle.boundary("search_kb", kind="tool")(search_kb)
    sink = MemorySink()
    session = RecordingSession(trace_id="0" * 31 + "1", span_id="0" * 15 + "1", service="bench", sink=sink)

    def call() -> None:
        with use_session(session):
            recorded("refund policy")
        if len(sink.items) > 10000:
            sink.flush()

    return call


if __name__ == "__main__":
    main()
