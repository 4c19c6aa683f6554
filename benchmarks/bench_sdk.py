"""Per-crossing cost of recording a boundary: tailcut versus a bare OpenTelemetry span.

Goal (issue 2): a ``@tailcut.tool`` crossing costs at most 1.3x a bare OpenTelemetry SDK span that
carries the same 4 KB payload. Both run through the same TracerProvider and batch processor with an
exporter that discards, so the difference is tailcut's own work: binding arguments, canonical JSON,
redaction, two sha256 hashes and the boundary attributes. The bare span serialises the payload with
``json.dumps`` (recording a payload means serialising it). When the ``agent-chronicle`` package is
installed, its recorder's cost for the same call is measured too (Chronicle reports 23 us/crossing).

The canonical form (issue 26: keys sorted by UTF-16 code units, non-string keys refused) is timed
against the one before it, kept below as ``canonical_bytes_before`` (its fast path, which every payload
here takes), on the same payload as ASCII, with accented letters and with emoji in its values.
``--profile`` runs the crossing under cProfile and prints where its time goes, by part.

Run: ``python benchmarks/bench_sdk.py [--crossings N] [--rounds R] [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import time
from collections.abc import Callable

import orjson
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import tailcut
from tailcut import _config
from tailcut.canonical import _encode_extra, canonical_bytes
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


def interleaved(
    contenders: dict[str, Callable[[], None]],
    crossings: int,
    rounds: int,
    summary: Callable[[list[float]], float] = statistics.median,
) -> dict[str, float]:
    """Median (or ``summary``) us per call of each contender, timed in alternation so machine drift
    hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            samples[name].append(per_call_us(fn, crossings))
    return {name: summary(values) for name, values in samples.items()}


#: The options of the canonical form before issue 26 (non-string keys written as their str()).
_BEFORE_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_NON_STR_KEYS
    | orjson.OPT_SERIALIZE_NUMPY
    | orjson.OPT_PASSTHROUGH_DATACLASS
)


def canonical_bytes_before(value: object) -> bytes:
    """The canonical form before issue 26, as its fast path wrote it (the baseline)."""
    return orjson.dumps(value, default=_encode_extra, option=_BEFORE_OPTIONS)


def compare_canonical(crossings: int, rounds: int) -> None:
    """Time the canonical form against the one before it, on three variants of the payload."""
    variants = {
        "ASCII": PAYLOAD,
        "accented": [dict(p, body=p["body"] + "é") for p in PAYLOAD],
        "emoji values": [dict(p, body=p["body"] + "\U0001f600") for p in PAYLOAD],
        "emoji+fullwidth": [dict(p, body=p["body"] + "\U0001f600\uff01") for p in PAYLOAD],
    }
    for name, value in variants.items():
        assert json.loads(canonical_bytes(value)) == json.loads(canonical_bytes_before(value))
        us = interleaved(  # the fastest of many short batches: a few microseconds drown in a busy machine
            {"before": lambda v=value: canonical_bytes_before(v), "now": lambda v=value: canonical_bytes(v)},
            max(crossings // 10, 50),
            rounds * 5,
            min,
        )
        print(
            f"canonical JSON, {name:15s} before {us['before']:6.2f} us  now {us['now']:6.2f} us"
            f"  ratio {us['now'] / us['before']:5.2f}x"
        )


#: Where a profiled function belongs, by the file it is in (first match wins).
_PARTS = (
    ("canonical JSON", "canonical.py"),
    ("redaction", "redaction.py"),
    ("pieces", "_pieces.py"),
    ("recorder, decorators", "sdk/_"),
    ("OpenTelemetry SDK", "opentelemetry"),
)


def profile_crossing(call: Callable[[], None], crossings: int) -> None:
    """Run ``call`` under cProfile and print each part's own time, then the costliest functions."""
    profiler = cProfile.Profile()
    with tailcut.run("profile"):
        profiler.enable()
        for _ in range(crossings):
            call()
        profiler.disable()
    stats = pstats.Stats(profiler)
    parts: dict[str, float] = {}
    total = 0.0
    for (filename, _line, _name), (_calls, _primitive, own, _cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        part = next((label for label, marker in _PARTS if marker in filename), "other (hashlib, builtins)")
        parts[part] = parts.get(part, 0.0) + own
        total += own
    print(f"profile of {crossings} crossings (cProfile inflates small functions; shares, not us):")
    for part, own in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"  {part:28s} {own / total:6.1%}")
    stats.sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--rounds", type=int, default=9, help="alternating batches per contender")
    parser.add_argument("--profile", action="store_true", help="also profile the crossing")
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
    compare_canonical(args.crossings, args.rounds)
    if args.profile:
        profile_crossing(with_tailcut, args.crossings)
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
