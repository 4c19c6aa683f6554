"""Normalisation: golden spans of each convention, and the protobuf decoder against the Python one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from tailcut.canonical import sha256_hex
from tailcut.exporters import (
    BadOtlpInput,
    compute_signals,
    facts_from_otlp,
    facts_from_row,
    normalize_otlp,
    read_otlp_file,
)
from tailcut.exporters._batch import DecodedSpans, SpanRecord
from tailcut.exporters._normalize import normalize
from tailcut.exporters.wire.encode import any_value_message
from tests.otlp_oracle import json_records

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"


def rows(name: str) -> list[dict[str, Any]]:
    table = normalize(read_otlp_file(FIXTURES / name))
    table = table.set_column(7, "start_time", table.column("start_time_ns"))
    table = table.set_column(8, "end_time", table.column("end_time_ns"))
    out = table.to_pylist()
    for row in out:
        row["attributes"] = dict(row["attributes"])
    return out


def by_name(name: str) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in rows(name)}


def test_tailcut_sdk_spans_keep_their_payloads_verbatim() -> None:
    spans = rows("tailcut_sdk.json")
    assert [r["kind"] for r in spans] == ["root", "llm", "tool", "tool"]
    root, llm, failed, retried = spans
    assert llm["request"] == '{"messages":[{"content":"refund?","role":"user"}],"model":"gpt-4o"}'
    assert llm["request_sha256"] == sha256_hex(llm["request"])
    assert (llm["model"], llm["provider"], llm["operation"]) == ("gpt-4o", "openai", "chat")
    assert (llm["input_tokens"], llm["output_tokens"], llm["finish_reason"]) == (40, 12, "tool_calls")
    # promoted attributes left the map; the rest stayed, non-strings as JSON text
    assert "tailcut.request" not in llm["attributes"] and "gen_ai.usage.input_tokens" not in llm["attributes"]
    assert llm["attributes"]["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert llm["attributes"]["gen_ai.request.temperature"] == "0.2"
    assert (failed["status_code"], failed["error_type"], failed["response"]) == (
        "ERROR",
        "TimeoutError",
        None,
    )
    assert (retried["attempt"], retried["occurrence"], retried["seq"]) == (2, 2, 3)
    # gen_ai.tool.call.arguments repeats tailcut.request on tool spans: stored once
    assert "gen_ai.tool.call.arguments" not in retried["attributes"]
    assert "gen_ai.tool.call.result" not in retried["attributes"]
    assert root["attributes"]["tailcut.outcome"] == "fail"
    assert root["resource"] == [("service.name", "support-agent")]
    assert [e["name"] for e in failed["events"]] == ["exception"]


def test_genai_current_names_rebuild_request_and_response() -> None:
    first, tool, second = (r for r in rows("genai_current.json") if r["kind"] != "agent")
    request = json.loads(first["request"])
    assert request["model"] == "gpt-4o"
    assert request["messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    ]
    assert request["system_instructions"] == [{"type": "text", "content": "You are a weather bot"}]
    assert request["tools"][0]["name"] == "get_weather"
    assert first["request"] == orjson.dumps(request, option=orjson.OPT_SORT_KEYS).decode()  # canonical
    assert first["request_sha256"] == sha256_hex(first["request"])
    call = json.loads(first["response"])["messages"][0]["parts"][0]
    assert call == {
        "type": "tool_call",
        "id": "call_VSPygqKTWdrhaFErNvMV18Yl",
        "name": "get_weather",
        "arguments": {"location": "Paris"},
    }
    assert first["attributes"]["gen_ai.usage.cache_read.input_tokens"] == "32"
    assert "gen_ai.input.messages" not in first["attributes"]
    assert (tool["tool_name"], tool["tool_call_id"]) == ("get_weather", "call_VSPygqKTWdrhaFErNvMV18Yl")
    assert json.loads(tool["request"]) == {"location": "Paris"}
    assert json.loads(tool["response"]) == "rainy, 57F"  # not JSON: kept as a string
    assert (tool["boundary"], tool["occurrence"], tool["seq"]) == ("tool:get_weather", 1, 2)
    assert json.loads(second["request"])["messages"] == "[not json"  # unparsable JSON kept, never dropped
    assert (first["boundary"], second["boundary"], second["occurrence"]) == ("llm:openai.chat",) * 2 + (2,)


def test_genai_old_names_and_content_events() -> None:
    (llm,) = rows("genai_old.json")
    assert (llm["kind"], llm["provider"], llm["model"]) == ("llm", "openai", "gpt-3.5-turbo")
    assert (llm["input_tokens"], llm["output_tokens"]) == (30, 8)
    assert llm["operation"] == "chat"
    assert llm["finish_reason"] == "stop"
    assert llm["attributes"]["gen_ai.response.finish_reasons"] == '["stop","length"]'  # not all in the column
    assert json.loads(llm["request"])["messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "Say hi"}]}
    ]
    assert json.loads(llm["response"])["messages"][0]["parts"] == [{"type": "text", "content": "Hi!"}]


def test_openinference_kinds_messages_and_documents() -> None:
    spans = by_name("openinference.json")
    kinds = {name: row["kind"] for name, row in spans.items()}
    assert kinds == {
        "RunnableSequence": "chain",
        "AgentExecutor": "agent",
        "ChatOpenAI": "llm",
        "openai.chat": "other",  # an LLM span inside an LLM span: the same call, counted once
        "search_docs": "tool",
        "VectorStoreRetriever": "retriever",
        "CohereRerank": "retriever",
        "OpenAIEmbeddings": "embedding",
        "ContentGuard": "chain",
        "Relevance": "other",
    }
    llm = spans["ChatOpenAI"]
    assert (llm["model"], llm["provider"], llm["input_tokens"], llm["output_tokens"]) == (
        "gpt-4o-mini",
        "openai",
        25,
        9,
    )
    request = json.loads(llm["request"])
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["parameters"] == {"temperature": 0.1}
    assert request["tools"] == [{"type": "function", "function": {"name": "search_docs"}}]
    part = json.loads(llm["response"])["messages"][0]["parts"][0]
    assert part == {
        "type": "tool_call",
        "id": "call_abc123",
        "name": "search_docs",
        "arguments": {"query": "refund window"},
    }
    assert not any(k.startswith("llm.input_messages.") for k in llm["attributes"])
    assert llm["attributes"]["llm.token_count.prompt_details.cache_read"] == "5"
    assert llm["attributes"]["openinference.span.kind"] == "LLM"  # the original value is kept
    tool = spans["search_docs"]
    assert json.loads(tool["request"]) == {"query": "refund window"}
    assert tool["attributes"]["tool.parameters"] == '{"query": "string"}'
    documents = json.loads(spans["VectorStoreRetriever"]["response"])["documents"]
    assert [d["id"] for d in documents] == ["doc-1", "doc-2"]
    assert json.loads(spans["VectorStoreRetriever"]["request"]) == "refund window"  # text/plain: a string
    assert json.loads(spans["RunnableSequence"]["request"]) == {"question": "What is the refund window?"}
    assert spans["AgentExecutor"]["agent_name"] == "support"


def test_openllmetry_kinds_and_flattened_messages() -> None:
    spans = by_name("openllmetry.json")
    assert {n: r["kind"] for n, r in spans.items()} == {
        "joke_workflow.workflow": "chain",
        "joke_agent.agent": "agent",
        "openai.chat": "llm",
        "lookup_pun.tool": "tool",
        "format.task": "chain",
    }
    llm = spans["openai.chat"]
    assert (llm["input_tokens"], llm["output_tokens"], llm["finish_reason"]) == (20, 15, "tool_calls")
    request = json.loads(llm["request"])
    assert [m["parts"][0]["content"] for m in request["messages"]] == [
        "You are funny.",
        "Tell a joke about OpenTelemetry",
    ]
    assert request["tools"][0] == {
        "name": "lookup_pun",
        "description": None,
        "parameters": {"type": "object"},
    }
    message = json.loads(llm["response"])["messages"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["parts"] == [
        {"type": "tool_call", "id": "call_9", "name": "lookup_pun", "arguments": {"topic": "tracing"}}
    ]
    assert llm["attributes"]["gen_ai.usage.cache_read_input_tokens"] == "4"
    tool = spans["lookup_pun.tool"]
    assert tool["tool_name"] == "lookup_pun"
    assert json.loads(tool["request"]) == {"args": [], "kwargs": {"topic": "tracing"}}
    assert json.loads(tool["response"]) == "{not json"
    assert spans["joke_agent.agent"]["agent_name"] == "joke_agent"


def test_unknown_convention_falls_back_to_other_keeping_every_attribute() -> None:
    (span,) = rows("unknown.json")
    assert span["kind"] == "other"
    assert (span["operation"], span["request"], span["boundary"]) == (None, None, None)
    assert span["attributes"] == {
        "http.request.method": "GET",
        "url.path": "/orders",
        "http.response.status_code": "200",
        "custom.flags": "[true,false]",
        "custom.ratio": "0.5",
        "custom.payload": '{"looks": "like json"}',
    }
    assert span["span_kind"] == "SERVER"


def test_anthropic_sdk_span_inside_a_tailcut_llm_span_is_not_a_second_call() -> None:
    spans = by_name("anthropic_nested.json")
    inner = spans["anthropic.messages.create"]
    assert (inner["kind"], inner["provider"], inner["scope_name"]) == (
        "other",
        "anthropic",
        "com.anthropic.sdk.python",
    )
    facts = [facts_from_row(r) for r in rows("anthropic_nested.json")]
    assert compute_signals(facts).llm_calls == 1


# --- the protobuf decoder agrees with the Python one -----------------------------------------------------
def to_protobuf(records: list[SpanRecord]) -> list[ResourceSpans]:
    """The same spans as OTLP protobuf, one ResourceSpans per record's resource."""
    out: dict[int, ResourceSpans] = {}
    scopes: dict[tuple[int, str | None], Any] = {}
    for r in records:
        message = out.get(id(r.resource))
        if message is None:
            resource = Resource(
                attributes=[
                    KeyValue(key=k, value=any_value_message(v)) for k, v in r.resource.attributes.items()
                ]
            )
            message = out[id(r.resource)] = ResourceSpans(resource=resource)
        scope = scopes.get((id(r.resource), r.scope_name))
        if scope is None:
            scope = scopes[(id(r.resource), r.scope_name)] = message.scope_spans.add()
            scope.scope.name = r.scope_name or ""
        span = Span(
            trace_id=bytes.fromhex(r.trace_id),
            span_id=bytes.fromhex(r.span_id),
            parent_span_id=bytes.fromhex(r.parent_span_id) if r.parent_span_id else b"",
            name=r.name,
            kind=["INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"].index(r.span_kind) + 1,
            start_time_unix_nano=r.start_ns,
            end_time_unix_nano=r.end_ns,
            attributes=[KeyValue(key=k, value=any_value_message(v)) for k, v in r.attributes.items()],
            status=Status(code=["UNSET", "OK", "ERROR"].index(r.status_code), message=r.status_message or ""),
        )
        for e in r.events:
            span.events.add(
                name=e.name,
                time_unix_nano=e.time_ns,
                attributes=[KeyValue(key=k, value=any_value_message(v)) for k, v in e.attributes.items()],
            )
        scope.spans.append(span)
    return list(out.values())


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_protobuf_and_json_inputs_give_identical_rows_and_facts(fixture: str) -> None:
    records = json_records(json.loads((FIXTURES / fixture).read_text()))
    messages = to_protobuf(records)
    from_json = normalize(DecodedSpans.from_records(records))
    from_protobuf = normalize_otlp(messages)
    assert from_protobuf.equals(from_json)
    # facts read cheaply from protobuf agree with facts read from the stored rows
    table = from_json.set_column(7, "start_time", from_json.column("start_time_ns"))
    table = table.set_column(8, "end_time", table.column("end_time_ns"))
    stored = compute_signals(facts_from_row(r) for r in table.to_pylist())
    cheap = compute_signals(
        facts_from_otlp(s, m.resource.attributes[0].value.string_value)
        for m in messages
        for scope in m.scope_spans
        for s in scope.spans
    )
    assert cheap == stored


keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
scalars = (
    st.text(max_size=300)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, width=64)
    | st.lists(st.text(max_size=5) | st.integers(-5, 5), max_size=3)
    | st.none()
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(keys, scalars, max_size=8), min_size=1, max_size=6))
def test_wire_decoder_matches_python_decoder_on_any_attributes(attribute_sets: list[dict[str, Any]]) -> None:
    _wire_matches_python(attribute_sets)


def _wire_matches_python(attribute_sets: list[dict[str, Any]]) -> pa.Table:
    """The rows of spans with these attributes, checked to be the same through both decoders."""
    records = json_records(_document(len(attribute_sets)))
    records = [r._replace(attributes=a) for r, a in zip(records, attribute_sets, strict=True)]
    table = normalize_otlp(to_protobuf(records))
    assert table.equals(normalize(DecodedSpans.from_records(records)))
    return table


def _document(count: int) -> dict[str, Any]:
    """An OTLP/JSON document of ``count`` spans of one trace without attributes."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": "s"},
                        "spans": [
                            {
                                "traceId": "ab" * 16,
                                "spanId": f"{i + 1:016x}",
                                "name": f"span {i}",
                                "kind": 1,
                                "startTimeUnixNano": str(i),
                                "endTimeUnixNano": str(i + 5),
                                "attributes": [],
                            }
                            for i in range(count)
                        ],
                    }
                ],
            }
        ]
    }


def test_a_list_value_shared_by_spans_is_decoded_for_each_alike() -> None:
    """The wire decoder decodes a repeated list value once per batch; every span still gets its own."""
    shared = {"tailcut.sampling.policies": ["errors", "baseline"], "n": [1, 2]}
    attribute_sets = [shared, {"tailcut.sampling.policies": ["slow"]}, shared, {"n": []}]
    table = _wire_matches_python(attribute_sets)
    policies = [dict(m).get("tailcut.sampling.policies") for m in table.column("attributes").to_pylist()]
    assert policies == ['["errors","baseline"]', '["slow"]', '["errors","baseline"]', None]


def test_an_encoded_request_gives_the_same_rows_as_its_messages() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    records = json_records(json.loads((FIXTURES / "anthropic_nested.json").read_text()))
    messages = to_protobuf(records)
    encoded = ExportTraceServiceRequest(resource_spans=messages).SerializeToString()
    assert normalize_otlp(encoded).equals(normalize_otlp(messages))
    with pytest.raises(BadOtlpInput, match="not valid protobuf"):
        normalize_otlp(encoded[:-7])


# --- rows pinned to the previous implementation ----------------------------------------------------------
ROWS = Path(__file__).parent / "fixtures" / "normalized" / "every_fixture_in_one_batch.json"


def _plain(type_: pa.DataType) -> pa.DataType:
    """``type_`` with timestamps as int64 nanoseconds and JSON as its string storage (exact in JSON)."""
    if pa.types.is_timestamp(type_):
        return pa.int64()
    if isinstance(type_, pa.BaseExtensionType):
        return _plain(type_.storage_type)
    if pa.types.is_list(type_):
        return pa.list_(type_.value_field.with_type(_plain(type_.value_type)))
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_plain(f.type)) for f in type_])
    return type_


def plain_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Every value of ``table`` as JSON values (maps as ``[key, value]`` pairs), row by row."""
    plain = table.cast(pa.schema([f.with_type(_plain(f.type)) for f in table.schema]))
    return orjson.loads(orjson.dumps(plain.to_pylist()))


def every_fixture() -> list[SpanRecord]:
    """The spans of every convention fixture, as one batch (each fixture keeps its own resource)."""
    return [
        record
        for path in sorted(FIXTURES.glob("*.json"))
        for record in json_records(json.loads(path.read_text()))
    ]


def test_every_fixture_in_one_batch_gives_the_recorded_rows() -> None:
    """Both decoders give exactly the rows the previous (row-by-row checked) implementation gave.

    The recorded rows pin every column of a batch mixing all conventions, so an optimisation of the
    array paths cannot change a value unnoticed. After an intended change to the mapping, rewrite the
    file with ``plain_rows(normalize_otlp(to_protobuf(every_fixture())))`` and review its diff.
    """
    expected = json.loads(ROWS.read_text())
    records = every_fixture()
    assert len(expected) == len(records) == 28
    assert plain_rows(normalize_otlp(to_protobuf(records))) == expected
    assert plain_rows(normalize(DecodedSpans.from_records(records))) == expected


def test_a_repeated_attribute_key_keeps_its_last_value() -> None:
    """OTLP allows a key twice in one span (the Python SDK never sends it): the last value wins."""
    (record,) = json_records(json.loads((FIXTURES / "unknown.json").read_text()))
    (message,) = to_protobuf([record])
    span = message.scope_spans[0].spans[0]
    span.attributes.extend(
        [
            KeyValue(key="url.path", value=AnyValue(string_value="/later")),
            KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="m1")),
            KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="m2")),
        ]
    )
    (row,) = normalize_otlp([message]).to_pylist()
    assert dict(row["attributes"])["url.path"] == "/later"
    assert [k for k, _ in row["attributes"]].count("url.path") == 1
    assert row["model"] == "m2"


ids = st.binary(min_size=8, max_size=8).filter(any)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # trace
            ids,  # span id
            st.integers(-1, 12),  # parent: index into the spans (-1 or out of range: a root or an orphan)
            st.sampled_from(["root", "llm", "tool", "agent", None]),
            st.text(max_size=20),  # name
            st.integers(0, 2**62),  # start
            st.integers(0, 10**9),  # duration
            st.sampled_from(["UNSET", "OK", "ERROR"]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_wire_decoder_matches_python_decoder_on_any_span_tree(spans: list[tuple[Any, ...]]) -> None:
    """Ids, parents (orphans, self-parents, repeated span ids), kinds, times and statuses of any tree."""
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeSpans": [{"scope": {"name": "s"}, "spans": []}],
            }
        ]
    }
    out = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for trace, span_id, parent, kind, name, start, duration, status in spans:
        parent_id = spans[parent][1].hex() if 0 <= parent < len(spans) else None
        out.append(
            {
                "traceId": f"{trace + 1:032x}",
                "spanId": span_id.hex(),
                **({"parentSpanId": parent_id} if parent_id else {}),
                "name": name,
                "kind": 3,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + duration),
                "status": {"code": ["UNSET", "OK", "ERROR"].index(status), "message": name},
                "attributes": [{"key": "tailcut.kind", "value": {"stringValue": kind}}] if kind else [],
            }
        )
    records = json_records(document)
    assert normalize_otlp(to_protobuf(records)).equals(normalize(DecodedSpans.from_records(records)))


def test_spans_with_all_zero_or_missing_ids_are_bad_spans() -> None:
    (record,) = json_records(json.loads((FIXTURES / "unknown.json").read_text()))
    (message,) = to_protobuf([record])
    spans = message.scope_spans[0].spans
    spans.add()  # no field at all
    spans.add().CopyFrom(spans[0])
    spans[2].trace_id = bytes(16)
    problems: list[str] = []
    table = normalize_otlp([message], on_bad_span=problems.append)
    assert table.column("span_id").to_pylist() == [record.span_id]
    assert [p.split(":")[0] for p in problems] == ["span 1", "span 2"]
    with pytest.raises(BadOtlpInput, match="span 1: trace_id must be 16"):
        normalize_otlp([message])


@pytest.mark.parametrize(
    ("encoded", "what"),
    [
        (b"\x0a\x05\x0a\x03\xff\xff\xff", "a resource"),  # ResourceSpans{resource: corrupt}
        (b"\x0a\x07\x12\x05\x0a\x03\xff\xff\xff", "a scope"),  # ResourceSpans{ScopeSpans{scope: corrupt}}
    ],
)
def test_a_corrupt_resource_or_scope_in_request_bytes_is_bad_input(encoded: bytes, what: str) -> None:
    with pytest.raises(BadOtlpInput, match=f"^{what} is not valid protobuf"):
        normalize_otlp(encoded)


def test_a_string_finish_reason_the_array_readers_leave_to_the_runtime_is_read_whole() -> None:
    """An attribute the array readers cannot place (here: an unknown field after its value) is decoded
    by the protobuf runtime; a plain string there still fills ``finish_reason`` whole, not by its first
    character, and leaves the map, as it does from the Python decoder."""
    (record,) = json_records(_document(1))
    record = record._replace(attributes={"tailcut.kind": "llm", "gen_ai.response.finish_reasons": "stop"})
    (message,) = to_protobuf([record])
    span = message.scope_spans[0].spans[0]
    unusual = KeyValue.FromString(span.attributes[1].SerializeToString() + b"\x7a\x01x")  # + field 15
    del span.attributes[1]
    span.attributes.append(unusual)
    table = normalize_otlp([message])
    assert table.column("finish_reason").to_pylist() == ["stop"]
    assert table.equals(normalize(DecodedSpans.from_records([record])))
