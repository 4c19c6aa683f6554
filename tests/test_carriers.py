"""Byte-bounded export: encoded sizes, chunk cutting, carriers, accounting and forwarding.

Sizes are checked against the real OTLP protobuf encoder, spans come from the real OpenTelemetry SDK,
and the forwarding test runs a real collector between a real OTLP exporter and a real OTLP receiver.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status, StatusCode

import tailcut
from tailcut import attributes as attr
from tailcut._carriers import (
    DEFAULT_GRPC_BOUND,
    DEFAULT_HTTP_BOUND,
    PIECE_KEYS,
    carriers,
    cut,
    export_bounded,
    span_bytes,
    without_pieces,
)
from tailcut._pieces import TOKEN_START, expand, placeholder
from tailcut._processor import RecordingSpanProcessor
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.signals import SpanSignals, trace_signals
from tests.loop_agent import numbered

TOKEN = re.compile(re.escape(TOKEN_START) + '[0-9a-f]{64}"}')
texts = st.text(st.characters(codec="utf-8"), max_size=300)
values = (
    texts
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.lists(texts, max_size=5)
    | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5)
)


class Recording(SpanExporter):
    """Keeps each export call's spans and its size as the OTLP encoder encodes it."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.calls: list[list[ReadableSpan]] = []
        self.sizes: list[int] = []
        self.fail = fail

    def export(self, spans):
        self.calls.append(list(spans))
        self.sizes.append(encode_spans(spans).ByteSize())
        return SpanExportResult.FAILURE if len(self.calls) - 1 in self.fail else SpanExportResult.SUCCESS


def make_spans(*specs: dict) -> list[ReadableSpan]:
    """Ended SDK spans, each with the given attributes, children of one root (the last span)."""
    kept = Recording()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("test", "1.0")
    with tracer.start_as_current_span("root"):
        for attributes in specs:
            with tracer.start_as_current_span("child", attributes=attributes):
                pass
    return [span for call in kept.calls for span in call]


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=40),
    st.dictionaries(st.text(max_size=30), values, max_size=8),
    st.lists(st.tuples(st.text(max_size=20), st.dictionaries(st.text(max_size=10), values, max_size=3))),
    st.text(max_size=50),
)
def test_span_bytes_is_a_close_upper_bound_of_the_encoded_size(name, attributes, events, description):
    provider = TracerProvider()
    kept = Recording()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("linked") as other:
        pass
    with tracer.start_as_current_span(
        name, attributes=attributes, links=[Link(other.get_span_context())]
    ) as s:
        for event, event_attributes in events:
            s.add_event(event, event_attributes)
        s.set_status(Status(StatusCode.ERROR, description))
    span = kept.calls[-1][0]
    actual = encode_spans([span]).resource_spans[0].scope_spans[0].spans[0].ByteSize()
    estimate = span_bytes(span)
    assert actual <= estimate <= actual + 64 + 16 * (len(attributes) + len(events))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        texts | st.builds(lambda: placeholder(sha256_hex(str(id(object()))))),
        max_size=30,
    ),
    st.integers(100, 400),
)
def test_chunks_join_to_the_text_and_never_cut_a_placeholder(parts, limit):
    text = "".join(parts)
    chunks = list(cut(text, limit))
    assert "".join(chunks) == text
    assert all(chunks) and all(len(chunk.encode()) <= limit for chunk in chunks)
    assert sum(len(TOKEN.findall(chunk)) for chunk in chunks) == len(TOKEN.findall(text))


def pieces_of(spans: list[ReadableSpan]) -> dict[str, str]:
    """The pieces the spans carry, by hash, chunked ones in their chunked form."""
    found = {}
    for span in spans:
        for key in PIECE_KEYS:
            for text in span.attributes.get(key, ()):
                found[sha256_hex(text)] = text
        for item in span.attributes.get(attr.CARRIER_CHUNKED, ()):
            found[item[:64]] = item[64:]
    return found


def big_span(pieces: list[str]) -> ReadableSpan:
    skeleton = "[" + ",".join(placeholder(sha256_hex(p)) for p in pieces) + "]"
    (span, _root) = make_spans({attr.RESPONSE: skeleton, attr.RESPONSE + ".pieces": pieces})
    return span


def test_a_span_over_the_bound_sends_its_pieces_first_in_carriers_of_its_trace():
    pieces = [numbered(f"piece {i}", "é text", 30_000) for i in range(12)] + ["a small one"]
    span = big_span(pieces)
    exporter = Recording()
    bound = 100_000
    assert span_bytes(span) > bound
    exported, failed = export_bounded([span], bound, exporter.export, oversize=pytest.fail)
    assert (exported, failed) == (1, 0)
    assert max(exporter.sizes) <= bound
    *carried, last = exporter.calls
    assert [s.name for s in last] == ["child"] and all(len(call) == 1 for call in carried)
    for (carrier,) in carried:
        assert carrier.name == attr.CARRIER_SPAN_NAME and carrier.attributes[attr.CARRIER] is True
        assert carrier.parent.span_id == span.context.span_id
        assert carrier.context.trace_id == span.context.trace_id
        assert carrier.start_time == carrier.end_time == span.end_time
    assert not any(key in last[0].attributes for key in PIECE_KEYS)
    found = pieces_of([s for call in carried for s in call])
    whole = expand(span.attributes[attr.RESPONSE], found.__getitem__)
    assert whole == "[" + ",".join(pieces) + "]"


def test_a_piece_bigger_than_a_carrier_is_chunked_and_expands_back():
    piece = numbered("line", "ünïcode " + placeholder("1" * 64), 400_000)
    span = big_span([piece])
    exporter = Recording()
    assert export_bounded([span], 50_000, exporter.export, oversize=pytest.fail) == (1, 0)
    assert max(exporter.sizes) <= 50_000
    carried = [s for call in exporter.calls[:-1] for s in call]
    (chunked,) = [item for s in carried for item in s.attributes.get(attr.CARRIER_CHUNKED, ())]
    assert chunked[:64] == sha256_hex(piece) and re.fullmatch(f"(?:{TOKEN.pattern})+", chunked[64:])
    found = pieces_of(carried)
    found["1" * 64] = "ONE"
    assert (
        expand(span.attributes[attr.RESPONSE], found.__getitem__)
        == "[" + piece.replace(placeholder("1" * 64), "ONE") + "]"
    )


def test_a_batch_is_split_by_bytes_and_small_spans_go_as_they_are():
    spans = make_spans(*({"data": numbered(str(i), "x", 20_000)} for i in range(20)))
    exporter = Recording()
    assert export_bounded(spans, 100_000, exporter.export, oversize=pytest.fail) == (21, 0)
    assert max(exporter.sizes) <= 100_000 and len(exporter.calls) > 4
    assert [s for call in exporter.calls for s in call] == spans  # the very spans, in order


def test_a_span_whose_carriers_failed_is_not_sent_and_counts_as_failed():
    span = big_span([numbered(str(i), "x", 30_000) for i in range(8)])
    (small,) = make_spans({"a": 1})[:1]
    exporter = Recording(fail=frozenset({1}))
    assert export_bounded([span, small], 100_000, exporter.export, oversize=pytest.fail) == (1, 1)
    sent = [s for call in exporter.calls for s in call]
    assert span not in sent and small in sent
    assert not any(s.name == "child" and s.context.span_id == span.context.span_id for s in sent)


def test_a_span_too_big_without_its_pieces_is_sent_alone_and_reported():
    (span, _) = make_spans({"whole": "x" * 200_000})
    exporter = Recording()
    told = []
    assert export_bounded([span], 100_000, exporter.export, oversize=told.append) == (1, 0)
    assert told and told[0] > 100_000 and exporter.calls == [[span]]


def test_stats_count_the_users_spans_not_the_carriers():
    exporter = Recording()
    processor = RecordingSpanProcessor(exporter, max_export_bytes=50_000, schedule_delay_millis=10)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    before = tailcut.stats()
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"), tracer.start_as_current_span("big") as span:
        span.set_attribute(attr.RESPONSE + ".pieces", [numbered(str(i), "x", 20_000) for i in range(10)])
    provider.shutdown()
    after = tailcut.stats()
    assert len(exporter.calls) > 3 and max(exporter.sizes) <= 50_000
    assert after["spans_exported"] - before["spans_exported"] == 2
    assert after["spans_dropped"] == before["spans_dropped"]


def otlp_exporter(protocol: str) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(endpoint="http://127.0.0.1:9")


def test_the_default_bound_follows_the_protocol_and_the_variable_overrides_it(monkeypatch, caplog):
    def bound(exporter: SpanExporter) -> int | None:
        processor = RecordingSpanProcessor(exporter)
        try:
            return processor._counting.max_export_bytes
        finally:
            processor.shutdown(timeout=0)

    monkeypatch.delenv("TAILCUT_MAX_EXPORT_BYTES", raising=False)
    assert bound(otlp_exporter("grpc")) == DEFAULT_GRPC_BOUND == 3 * 1024 * 1024
    assert bound(otlp_exporter("http/protobuf")) == DEFAULT_HTTP_BOUND == 16 * 1024 * 1024
    assert bound(Recording()) is None  # an exporter with no receive limit exports each batch whole
    monkeypatch.setenv("TAILCUT_MAX_EXPORT_BYTES", "1000000")
    assert bound(otlp_exporter("grpc")) == bound(otlp_exporter("http/protobuf")) == 1_000_000
    assert bound(Recording()) is None  # no carriers ever reach an embedded exporter
    monkeypatch.setenv("TAILCUT_MAX_EXPORT_BYTES", "12")
    with caplog.at_level(logging.WARNING, "tailcut"):
        assert bound(otlp_exporter("grpc")) == DEFAULT_GRPC_BOUND
    assert "ignoring TAILCUT_MAX_EXPORT_BYTES='12'" in caplog.text
    with pytest.raises(ValueError, match="max_export_bytes must be at least 4096"):
        RecordingSpanProcessor(Recording(), max_export_bytes=100)


def test_carriers_count_in_no_signal():
    spans = [
        SpanSignals("r", None, "root"),
        SpanSignals("t", "r", "tool", tool_key="k"),
        SpanSignals("c1", "t", attr.CARRIER_KIND, failed=True),
        SpanSignals("c2", "t", attr.CARRIER_KIND),
    ]
    assert trace_signals(spans) == trace_signals(spans[:2])


def test_carriers_of_one_span_fit_one_request_each():
    span = big_span([numbered(str(i), "x", 10_000) for i in range(40)])
    sizes = [encode_spans([c]).ByteSize() for c in carriers(span, 60_000)]
    assert len(sizes) > 5 and max(sizes) <= 60_000


def test_collect_forwards_whole_spans_and_no_carriers(tmp_path: Path, server, oai):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from tailcut.analysis import Dataset
    from tests.test_pieces import forward_tool_loop

    result = numbered("row", "a tool's long answer", 60_000)
    # A 1 MiB inline limit: the tool result is one piece, chunked to cross in 8 KiB requests.
    forwarded = forward_tool_loop(
        tmp_path,
        oai,
        [result, result],
        export=lambda url: RecordingSpanProcessor(OTLPSpanExporter(endpoint=url), max_export_bytes=8192),
        inline_limit=1 << 20,
        decision_wait="600s",
    )
    assert attr.CARRIER_SPAN_NAME not in [span.name for span in forwarded]
    attributes = [{kv.key: kv.value for kv in span.attributes} for span in forwarded]
    llm = [a for a in attributes if a["tailcut.kind"].string_value == "llm"]
    sent = [canonical_json(r.body) for r in server.requests]
    assert [a[attr.REQUEST].string_value for a in llm] == sent
    tools = [a for a in attributes if a["tailcut.kind"].string_value == "tool"]
    assert [json.loads(a[attr.GEN_AI_TOOL_CALL_RESULT].string_value) for a in tools] == [result, result]
    assert not any(key.startswith(attr.CARRIER) for a in attributes for key in a)
    with Dataset(tmp_path / "data") as dataset:
        stored = dataset.sql("SELECT request::VARCHAR FROM llm_calls ORDER BY seq").to_series().to_list()
        (count,) = dataset.sql("SELECT span_count FROM traces").to_series().to_list()
    assert stored == sent and count == len(forwarded) == 6


def test_the_writer_stores_the_carriers_pieces_and_no_row_even_when_they_come_alone(tmp_path: Path):
    import pyarrow.parquet as pq

    from tailcut.exporters import DataDirWriter
    from tailcut.exporters._pieces import PieceReader
    from tailcut.exporters._spans import normalize_sdk

    pieces = [numbered(str(i), "x", 10_000) for i in range(30)]
    skeleton = "[" + ",".join(placeholder(sha256_hex(p)) for p in pieces) + "]"
    span, root = make_spans({attr.RESPONSE: skeleton, attr.RESPONSE + ".pieces": pieces})
    carried = list(carriers(span, 60_000))
    assert len(carried) > 3
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(normalize_sdk([root, without_pieces(span), *carried[:2]]))
        writer.write_spans(normalize_sdk(carried[2:]))  # a late request of carriers only
    rows = pq.read_table(tmp_path / "spans").to_pylist()
    assert [(r["name"], r["span_index"], r["subtree_end"], r["child_count"]) for r in rows] == [
        ("root", 0, 1, 1),
        ("child", 1, 1, 0),
    ]
    trace_id = rows[0]["trace_id"]
    whole = PieceReader(tmp_path).payload(skeleton, trace_id=trace_id, boundary="b", sha256=None)
    assert whole == "[" + ",".join(pieces) + "]"


def test_an_embedded_exporter_and_ingest_absorb_carriers_too(tmp_path: Path):
    from tailcut.analysis import Dataset
    from tailcut.exporters import ParquetSpanExporter, ingest

    pieces = [canonical_json(numbered(str(i), "x", 10_000)) for i in range(30)]  # a JSON list
    skeleton = "[" + ",".join(placeholder(sha256_hex(p)) for p in pieces) + "]"
    written = Recording()
    exporter = ParquetSpanExporter(tmp_path / "embedded", root_grace=0)
    processor = RecordingSpanProcessor(exporter, max_export_bytes=60_000, schedule_delay_millis=10)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(written))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"), tracer.start_as_current_span("child") as span:
        span.set_attributes({attr.RESPONSE: skeleton, attr.RESPONSE + ".pieces": pieces})
        span.set_attribute(attr.RESPONSE_PIECED, True)
        span.set_attribute(attr.KIND, "tool")
    provider.shutdown()
    child, root = [s for call in written.calls for s in call]
    sent = list(carriers(child, 60_000))
    request = encode_spans([root, without_pieces(child), *sent]).SerializeToString()
    (tmp_path / "spans.pb").write_bytes(request)
    report = ingest([tmp_path / "spans.pb"], tmp_path / "ingested")
    assert report.spans == 2
    for data in (tmp_path / "embedded", tmp_path / "ingested"):
        with Dataset(data) as dataset:
            assert dataset.sql("SELECT span_count FROM traces").rows() == [(2,)]
            (response,) = dataset.sql("SELECT response::VARCHAR FROM spans WHERE kind = 'tool'").rows()[0]
        assert response == "[" + ",".join(pieces) + "]"


def test_a_chunked_piece_that_names_itself_or_lies_is_refused(tmp_path: Path):
    from tailcut.exporters import DataDirWriter
    from tailcut.exporters._pieces import PieceError, PieceReader
    from tailcut.exporters._spans import normalize_sdk

    chunk = "a chunk"
    whole = sha256_hex(chunk + chunk)
    liar = sha256_hex("something else")
    forms = [
        whole + placeholder(sha256_hex(chunk)) * 2,
        liar + placeholder(sha256_hex(chunk)),
    ]
    forms.append(sha256_hex("itself") + placeholder(sha256_hex("itself")))
    (span, root) = make_spans({attr.RESPONSE + ".pieces": [chunk], attr.CARRIER_CHUNKED: forms})
    with DataDirWriter(tmp_path) as writer:
        writer.write_spans(normalize_sdk([root, span]))
    reader = PieceReader(tmp_path)
    trace_id = format(root.context.trace_id, "032x")

    def read(sha: str) -> str:
        return reader.payload(placeholder(sha), trace_id=trace_id, boundary="b", sha256=None)

    assert read(whole) == chunk + chunk
    for bad in (liar, sha256_hex("itself")):
        with pytest.raises(PieceError, match=f"piece sha256:{bad} is damaged"):
            read(bad)
