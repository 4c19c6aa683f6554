"""A trace's tally, folded in span by span on arrival, gives the signals a from-scratch computation gives.

The from-scratch side is :func:`tailcut.collector._signals.scratch_signals`: every span's record read
again from its bytes and :func:`tailcut.signals.trace_signals` / the writers' ``trace_cost`` over them.
Span sets are random: any arrival order, ids from a small pool (so two spans may share an id, a span may
be its own parent, parents may be missing or form a cycle), llm spans nested in llm spans, carriers,
failed spans, priced and unpriced models, first attempts and retries of tools. A write-ahead log replay
folds the same spans again in the logged order and must give the same tallies and the same decisions.
"""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tailcut.collector._config import parse_config
from tailcut.collector._facts import model_pricer
from tailcut.collector._metrics import CollectorMetrics
from tailcut.collector._processor import Processor
from tailcut.collector._signals import _walked_tree_shape, scratch_signals, tally_of, tree_shape
from tailcut.collector._sink import KeptSpans, Sink
from tailcut.exporters._pricing import default_pricing
from tailcut.exporters.wire.values import encode_string_value
from tests.test_collector_helpers import write_config
from tests.test_collector_signals import kv

COST = model_pricer()
MODELS = ["gpt-4o-mini", "gpt-4o", "no-such-model"]


@st.composite
def span_sets(draw: st.DrawFn, trace_id: bytes = bytes(range(1, 17))) -> list[Span]:
    count = draw(st.integers(1, 12))
    pool = [bytes([0, 0, 0, 0, 0, 0, 2, i + 1]) for i in range(count + 2)]
    ids = draw(st.permutations(pool))[:count]
    if count > 1 and draw(st.integers(0, 9)) == 0:
        ids[-1] = ids[0]  # two spans of one id
    spans = []
    for position, span_id in enumerate(ids):
        later = ids[position + 1 : position + 2] or [b""]  # a parent arriving after its child: chains
        parent = draw(st.sampled_from([b"", bytes([9] * 8), *later, *later, *pool]))
        kind = draw(st.sampled_from(["llm", "llm", "tool", "tailcut.carrier", "agent", "root", "other"]))
        attributes: dict[str, object] = {}
        if kind == "llm":
            attributes = {
                "tailcut.kind": "llm",
                "gen_ai.request.model": draw(st.sampled_from(MODELS)),
                "gen_ai.usage.input_tokens": draw(st.integers(0, 10**5)),
                "gen_ai.usage.output_tokens": draw(st.integers(0, 10**4)),
                "tailcut.schema_violations": draw(st.integers(0, 2)),
            }
        elif kind == "tool":
            attributes = {
                "tailcut.kind": "tool",
                "tailcut.boundary": draw(st.sampled_from(["tool:search", "tool:lookup"])),
                "tailcut.request.sha256": draw(st.sampled_from(["a", "b"])),
                "tailcut.attempt": draw(st.sampled_from([1, 1, 2])),
            }
        elif kind == "tailcut.carrier":
            attributes = {"tailcut.carrier": "llm.request"}
        elif kind != "other":
            attributes = {"tailcut.kind": kind}
        start = draw(st.integers(0, 10**12))
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name="span",
                start_time_unix_nano=start,
                end_time_unix_nano=start + draw(st.integers(0, 10**10)),
                trace_state=draw(st.sampled_from(["", "ot=th:8", "ot=th:c"])),
                attributes=[kv(key, value) for key, value in attributes.items()],
                status=Status(code=draw(st.sampled_from([0, 1, 2]))),
            )
        )
    return spans


@settings(max_examples=400, deadline=None)
@given(span_sets())
def test_the_tally_gives_the_signals_computed_from_scratch(spans):
    datas = [span.SerializeToString() for span in spans]
    tally = tally_of(datas)
    duplicate = tally.duplicate
    tally.duplicate = False  # the incremental path, even where the collector would not trust it
    incremental = tally.signals(datas, COST)
    scratch = scratch_signals(datas, tally, COST)
    if not duplicate:
        assert incremental == scratch
    else:  # the collector computes these from scratch
        tally.duplicate = True
        assert tally.signals(datas, COST) == scratch


_POLICIES = [
    {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
    {
        "name": "tool-loops",
        "type": "numeric_attribute",
        "numeric_attribute": {"key": "tailcut.trace.max_tool_repeat", "min_value": 2},
    },
    {"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 30}},
]


def _processor(directory: Path) -> tuple[Processor, Sink]:
    """A processor on the data dir (and log) in ``directory``; a second one replays what the first left."""
    path = write_config(
        directory,
        policies=_POLICIES,
        tailcut={"late_span_window": "0s"},
        decision_wait="1h",
        decision_wait_after_root_received="0s",
    )
    config = parse_config(path.read_text())
    metrics = CollectorMetrics()
    sink = Sink(config, metrics)
    processor = Processor(config, metrics, sink)
    processor.start()  # opens the log and replays what it holds
    return processor, sink


def _rows(processor: Processor, sink: Sink, now: float) -> list[dict]:
    processor.shutdown(now)
    items = []
    while not sink._queue.empty():
        items.extend(item for _, item in sink._queue.get_nowait())
    return [{**item, "decided_at": 0} for item in items if not isinstance(item, KeptSpans)]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(span_sets(trace_id=bytes([1] * 16)), min_size=1, max_size=1),
    st.lists(span_sets(trace_id=bytes([2] * 16)), min_size=1, max_size=1),
    st.randoms(use_true_random=False),
)
def test_a_replayed_log_folds_the_same_tallies_and_decides_alike(tmp_path_factory, first, second, rnd):
    spans = [*first[0], *second[0]]
    rnd.shuffle(spans)
    cuts = sorted(rnd.sample(range(1, len(spans)), min(3, len(spans) - 1)))
    directory = tmp_path_factory.mktemp("tally")
    live, live_sink = _processor(directory)
    for start, end in zip([0, *cuts], [*cuts, len(spans)], strict=True):
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.extend(spans[start:end])
        live.ingest(request.SerializeToString(), "http")
    live.wal.close()  # as after kill -9: the log holds every acknowledged request
    live.wal = live.sink.wal = None
    replayed, replayed_sink = _processor(directory)
    assert list(replayed.buffer.pending) == list(live.buffer.pending)
    for trace_id, trace in live.buffer.pending.items():
        again = replayed.buffer.pending[trace_id]
        assert again.datas == trace.datas
        assert again.tally.signals(again.datas, COST) == trace.tally.signals(trace.datas, COST)
        assert again.root_index == trace.root_index
        assert again.tally.head_threshold == trace.tally.head_threshold
    now = time.monotonic()
    assert _rows(replayed, replayed_sink, now) == _rows(live, live_sink, now)
    replayed.wal.close()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([*MODELS, "openai/gpt-4o-mini", "GPT-4O-2024-08-06", ""]),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
)
def test_a_model_call_is_priced_as_the_writers_price_it(model, input_tokens, output_tokens):
    pricing = default_pricing()
    raw = encode_string_value(model)
    expected = pricing.cost(model, input_tokens, output_tokens)
    assert model_pricer(pricing)(raw, input_tokens, output_tokens) == expected
    cost = model_pricer(pricing)
    cost(raw, 1, 1)
    assert cost(raw, input_tokens, output_tokens) == expected  # remembered price, same figure


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.sampled_from([None, *range(8), 99])),
        max_size=10,
        unique_by=lambda pair: pair[0],
    )
)
def test_the_one_pass_tree_shape_is_the_walked_one(links):
    """Span id -> parent id maps of any shape (roots, orphans, own parents, chains, cycles)."""
    parents = {bytes([i]) * 8: b"" if parent is None else bytes([parent]) * 8 for i, parent in links}
    assert tree_shape(parents) == _walked_tree_shape(parents)
