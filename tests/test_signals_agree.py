"""The three computations of the trace signals agree: the SDK's, the collector's and the writers'.

All three go through :mod:`tailcut.signals`; what differs is how each feeds it (the SDK one span at a
time as spans end, the collector from span bytes, the writers from decoded protobuf spans).
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut._run_state import RunState
from tailcut.exporters import compute_signals as writer_signals
from tailcut.exporters import facts_from_otlp
from tests.test_collector_signals import TAILCUT_SHAPES, collector_signals, traces


def attributes(span: Span) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = value.int_value if value.WhichOneof("value") == "int_value" else value.string_value
    return out


def sdk_signals(spans: list[Span]):
    """Replay a tailcut-only trace through the SDK's run state, parents first, as a process would."""
    by_id = {s.span_id: s for s in spans}
    depth: dict[bytes, int] = {}

    def depth_of(span: Span) -> int:
        if span.span_id not in depth:
            parent = by_id.get(span.parent_span_id)
            depth[span.span_id] = 0 if parent is None else depth_of(parent) + 1
        return depth[span.span_id]

    state = RunState()
    for span in sorted(spans, key=depth_of):
        if depth_of(span):
            state.span_started(depth_of(span))
    for span in spans:
        a = attributes(span)
        state.span_ended(
            str(a["tailcut.kind"]),
            failed=span.status.code == 2,
            attempt=int(a.get("tailcut.attempt", 1)),
            boundary=a.get("tailcut.boundary"),
            request_sha256=a.get("tailcut.request.sha256"),
            tokens=int(a.get("gen_ai.usage.input_tokens", 0)) + int(a.get("gen_ai.usage.output_tokens", 0)),
            schema_violations=int(a.get("tailcut.schema_violations", 0)),
        )
    return state.signals.result()


def key(signals) -> tuple[int, ...]:
    return (
        signals.span_count,
        signals.llm_calls,
        signals.tool_calls,
        signals.total_tokens,
        signals.max_tool_repeat,
        signals.schema_violations,
    )


@settings(max_examples=200, deadline=None)
@given(traces(TAILCUT_SHAPES, whole=True))
def test_sdk_collector_and_writers_agree_on_a_process_s_own_trace(spans):
    # The SDK sees a trace of its own process: a root, tailcut spans only, no missing parent, and no
    # model call inside another (that takes a second instrumentation).
    kinds = {s.span_id: attributes(s).get("tailcut.kind") for s in spans}
    assume(not any(kinds[s.span_id] == "llm" == kinds.get(s.parent_span_id) for s in spans))
    sdk = sdk_signals(spans)
    collector = collector_signals(spans)
    writers = writer_signals(facts_from_otlp(span, "svc") for span in spans)
    assert key(sdk) == key(writers)
    assert (sdk.errors, sdk.depth) == (writers.errors, writers.depth)
    assert (collector.error_count, collector.max_depth, collector.total_tokens) == (
        writers.errors,
        writers.depth,
        writers.total_tokens,
    )
