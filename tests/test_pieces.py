"""Requests as skeleton plus pieces: exact round trips, once-per-trace sending, storage and reading."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tailcut
from tailcut import _config
from tailcut import attributes as attr
from tailcut._pieces import PieceLedger, expand, placeholder, split_payload
from tailcut.analysis import Dataset
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.exporters import ParquetSpanExporter
from tailcut.exporters._pieces import PieceError, PieceReader, take_pieces
from tailcut.exporters.corpus import Selection, write_corpus
from tailcut.testing import capture_spans
from tests.loop_agent import SYSTEM

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
requests = st.fixed_dictionaries(
    {"model": st.text(max_size=10)},
    optional={
        "messages": st.lists(json_values, max_size=6),
        "tools": st.lists(json_values, max_size=3),
        "system": json_values,
        "instructions": st.text(),
        "input": json_values,
    },
)


@settings(max_examples=150, deadline=None)
@given(requests, st.sampled_from([340, 1000, 65536]))
def test_skeleton_and_pieces_expand_to_the_exact_canonical_bytes(request, limit):
    text = canonical_json(request)
    split = split_payload(text, limit=limit, structured=True)
    if split is None:
        assert (len(text) < 1024 and len(text.encode()) <= limit) or '{"$tailcut.piece":"' in text
        return
    assert expand(split.skeleton, split.pieces.__getitem__) == text
    assert len(split.skeleton) <= limit
    assert all(len(piece.encode()) <= max(limit, 340) for piece in split.pieces.values())
    assert all(sha256_hex(piece) == sha for sha, piece in split.pieces.items())


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=3000), st.sampled_from([340, 500]))
def test_any_text_over_the_limit_is_cut_at_character_boundaries(body, limit):
    text = canonical_json(body)
    split = split_payload(text, limit=limit, structured=False)
    if len(text) < 1024 and len(text.encode()) <= limit:
        assert split is None
    else:
        assert split is not None and expand(split.skeleton, split.pieces.__getitem__) == text


def test_a_growing_transcript_adds_a_constant_number_of_pieces_per_step():
    ledger = PieceLedger()
    messages = [{"role": "system", "content": SYSTEM}]
    new_per_step, skeletons = [], set()
    for step in range(30):
        messages.append({"role": "user", "content": f"tool result {step} " * 100})
        split = split_payload(
            canonical_json({"model": "m", "messages": messages}), limit=65536, structured=True
        )
        assert split is not None
        skeletons.add(len(split.skeleton))
        new_per_step.append(len(ledger.unsent(split.pieces)))
    # long contents are pieces of their own: per new message its content, the message and one chain link
    assert new_per_step[0] == 5 and set(new_per_step[1:]) == {3}
    assert len(skeletons) == 1


def test_a_request_that_already_holds_a_placeholder_is_recorded_whole():
    text = canonical_json({"messages": [{"$tailcut.piece": "0" * 64}]})
    assert split_payload(text, limit=65536, structured=True) is None


def test_take_pieces_moves_them_out_of_the_attributes_map():
    spans = pa.table(
        {
            "trace_id": ["a", "a", "b"],
            "attributes": pa.array(
                [
                    [("tailcut.request.pieces", json.dumps(["x", "y"])), ("k", "v")],
                    [("tailcut.response.pieces", json.dumps(["x"]))],
                    [("tailcut.request.pieces", "not json"), ("k2", "v2")],
                ],
                pa.map_(pa.string(), pa.string()),
            ),
        }
    )
    stripped, pieces = take_pieces(spans)
    assert stripped.column("attributes").to_pylist() == [
        [("k", "v")],
        [],
        [("tailcut.request.pieces", "not json"), ("k2", "v2")],
    ]
    assert pieces.to_pylist() == [
        {"trace_id": "a", "sha256": sha256_hex("x"), "text": "x"},
        {"trace_id": "a", "sha256": sha256_hex("y"), "text": "y"},
    ]


def test_each_message_is_sent_once_per_trace_and_self_contained_sends_it_whole(server, oai):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    tailcut.instrument_openai()
    try:
        with capture_spans() as spans, tailcut.run("r"):
            for step in range(3):
                oai.chat.completions.create(model="m", messages=messages)
                messages.append({"role": "assistant", "content": f"ok {step}"})
        with capture_spans(self_contained=True) as whole, tailcut.run("r"):
            oai.chat.completions.create(model="m", messages=messages)
    finally:
        tailcut.uninstrument_openai()
    sent = [list(s.attributes.get("tailcut.request.pieces", ())) for s in spans.by_kind("llm")]
    assert [len(p) for p in sent] == [4, 2, 2]  # system (content, message), user, link; message, link
    assert SYSTEM in canonical_json(sent[0]) and not any(SYSTEM in canonical_json(p) for p in sent[1:])
    pieces = {sha256_hex(t): t for p in sent for t in p}
    for span, request in zip(spans.by_kind("llm"), server.requests[:3], strict=True):
        assert span.attributes[attr.REQUEST_PIECED] is True
        full = expand(span.attributes[attr.REQUEST], pieces.__getitem__)
        assert full == canonical_json(request.body)
        assert span.attributes[attr.REQUEST_SHA256] == sha256_hex(full)
    (span,) = whole.by_kind("llm")
    assert span.attributes[attr.REQUEST] == canonical_json(server.requests[-1].body)
    assert attr.REQUEST_PIECED not in span.attributes


def test_embedded_mode_stores_pieces_in_the_data_dir_and_reads_them_back(tmp_path: Path, server, oai):
    data = tmp_path / "data"
    exporter = ParquetSpanExporter(data, root_grace=0.0)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = _config.install(
        _config.Config(enabled=True, tracer=provider.get_tracer("t"), inline_limit=4096)
    )
    tailcut.instrument_openai()
    big = "y" * 50_000  # over the inline limit: cut into chunk pieces, no payload store needed
    try:
        with tailcut.run("embedded") as run:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": big}]
            for _ in range(5):
                oai.chat.completions.create(model="m", messages=messages)
                messages.append({"role": "user", "content": "more " * 200})
            trace_id = format(run._root_span().get_span_context().trace_id, "032x")
    finally:
        tailcut.uninstrument_openai()
        _config.install(previous)
        provider.shutdown()
    assert not (data / "payloads").exists()
    with Dataset(data) as dataset:
        rows = dataset.sql(
            "SELECT request::VARCHAR AS t, request_sha256 AS s FROM llm_calls ORDER BY seq"
        ).rows()
        stored = dataset.sql(
            "SELECT sum(length(text)) AS n FROM read_parquet(?)", params=[f"{data}/pieces/**/*.parquet"]
        ).item()
    assert [sha for _, sha in rows] == [sha256_hex(canonical_json(r.body)) for r in server.requests]
    assert all(sha256_hex(text) == sha for text, sha in rows)
    unique = len(SYSTEM) + len(big) + 4 * len(canonical_json({"role": "user", "content": "more " * 200}))
    assert stored < 1.2 * unique < sum(len(text) for text, _ in rows) / 2
    with Dataset(data) as dataset:  # the polars frames put the pieces back as the view does
        frame = dataset.spans(columns=["kind", "seq", "request"]).filter(kind="llm").sort("seq")
    assert frame["request"].to_list() == [text for text, _ in rows]

    for path in (data / "pieces").rglob("*.parquet"):
        path.unlink()
    summary = write_corpus(data, [Selection(trace_id, "test")], tmp_path / "corpus")
    assert "boundary llm:openai.chat, request: piece sha256:" in summary.not_replayable[trace_id]
    assert "is missing" in summary.not_replayable[trace_id]


def test_the_reader_names_a_missing_piece_and_passes_whole_payloads_through(tmp_path: Path):
    reader = PieceReader(tmp_path)
    with pytest.raises(PieceError, match=r"trace t, boundary b, request: piece sha256:0{64} is missing"):
        reader.payload(placeholder("0" * 64), trace_id="t", boundary="b", sha256=None)
    assert reader.payload('{"a":1}', trace_id="t", boundary="b", sha256=None) == '{"a":1}'


def forward_tool_loop(tmp_path: Path, oai, results: list[str], *, export=None, inline_limit=None, **config):
    """Run an agent through the SDK into a collector that keeps every trace and forwards it: an LLM call,
    then for each of ``results`` a tool call returning it and another LLM call. The spans forwarded.

    ``export`` builds the span processor for the collector's URL (default: a simple OTLP/HTTP one).
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tests.otlp_sink import OtlpSink
    from tests.test_collector_helpers import start_forwarding_collector

    with OtlpSink() as sink:
        collector = start_forwarding_collector(tmp_path, sink.endpoint, **config)
        provider = TracerProvider()
        url = f"http://127.0.0.1:{collector.ports.http}/v1/traces"
        processor = export(url) if export else SimpleSpanProcessor(OTLPSpanExporter(endpoint=url))
        provider.add_span_processor(processor)
        limit = {} if inline_limit is None else {"inline_limit": inline_limit}
        recording = _config.Config(enabled=True, tracer=provider.get_tracer("t"), **limit)
        previous = _config.install(recording)
        tailcut.instrument_openai()
        lookup = tailcut.tool(name="lookup")(lambda step: results[step])
        try:
            with tailcut.run("forwarded"):
                messages = [{"role": "system", "content": SYSTEM}]
                oai.chat.completions.create(model="m", messages=messages)
                for step in range(len(results)):
                    messages.append({"role": "user", "content": lookup(step)})
                    oai.chat.completions.create(model="m", messages=messages)
        finally:
            tailcut.uninstrument_openai()
            _config.install(previous)
            provider.shutdown()
            assert collector.wait_idle(30)
            collector.stop()
    return [span for _, span in sink.spans]


def test_collect_forwards_spans_with_full_content(tmp_path: Path, server, oai):
    forwarded = forward_tool_loop(tmp_path, oai, [f"result {step} " * 200 for step in range(3)])
    attributes = [{kv.key: kv.value for kv in span.attributes} for span in forwarded]
    llm = [a for a in attributes if a["tailcut.kind"].string_value == "llm"]
    assert [a[attr.REQUEST].string_value for a in llm] == [canonical_json(r.body) for r in server.requests]
    tools = [a for a in attributes if a["tailcut.kind"].string_value == "tool"]
    assert [json.loads(a[attr.GEN_AI_TOOL_CALL_RESULT].string_value) for a in tools] == [
        f"result {step} " * 200 for step in range(3)
    ]
    assert not any(key.endswith((".pieces", ".pieced")) for a in attributes for key in a)
