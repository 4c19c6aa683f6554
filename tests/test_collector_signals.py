"""The collector's trace signals, read lazily from span bytes, and the random span trees the tests of the
signals use (``tests/test_signals.py`` checks that every path gives the same ``traces`` row)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tailcut.collector._facts import model_pricer, root_facts
from tailcut.collector._otlp import SpanFacts
from tailcut.collector._signals import tally_of
from tailcut.exporters.wire.values import any_value
from tailcut.signals import RunFacts
from tests.test_exporters_wire import encoded_any_value

TRACE_ID = bytes(range(1, 17))
#: Tool arguments: the first two the same call serialised two ways (identical calls, whatever the spacing).
ARGUMENTS = ['{"q":"refund"}', '{"q": "refund"}', '{"q":"order 7"}', '{"id":3}']
#: Failure texts (status messages, exception messages, tool results): errors, refusals of the model's output
#: and clean texts; ``None``: none recorded.
TEXTS = [
    None,
    "boom",
    "HTTP Error 429: Too Many Requests",
    "1 validation error for SearchArgs",
    "Unknown tool web_search, should be one of: search",
    "in stock: 4",
]
#: Where each tool shape records its result.
RESULT_KEYS = {
    "tailcut_tool": "tailcut.response",
    "oi_tool": "output.value",
    "genai_tool": "gen_ai.tool.call.result",
    "oll_tool": "traceloop.entity.output",
}
#: Two priced models and one with no price.
MODELS = ["gpt-4o-mini", "gpt-4o", "no-such-model"]
SHAPES = [
    "tailcut_llm",
    "tailcut_tool",
    "tailcut_agent",
    "tailcut_chain",
    "oi_llm",
    "oi_llm_preparation",
    "oi_tool",
    "genai_tool",
    "oll_tool",
    "other",
]


def kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def langchain_input(arguments: str, call_id: str) -> str:
    """OpenLLMetry's LangChain tool input: the arguments in a callback envelope naming the call's id."""
    envelope = {
        "input_str": repr(json.loads(arguments)),
        "inputs": json.loads(arguments),
        "kwargs": {"tool_call_id": call_id, "name": None},
        "metadata": {"langgraph_step": call_id},
    }
    return json.dumps(envelope)


def attributes_for(shape: str, draw: st.DrawFn) -> dict[str, object]:
    tokens = st.integers(0, 5000)
    if shape == "tailcut_llm":
        out = {
            "tailcut.kind": "llm",
            "gen_ai.usage.input_tokens": draw(tokens),
            "gen_ai.usage.output_tokens": draw(tokens),
            "tailcut.schema_violations": draw(st.integers(0, 2)),
        }
        model = draw(st.sampled_from([None, *MODELS]))
        if model is not None:
            out["gen_ai.request.model"] = model
        return out
    if shape == "tailcut_tool":
        tool = draw(st.sampled_from(["search", "lookup"]))
        arguments = draw(st.sampled_from(ARGUMENTS))
        out: dict[str, object] = {
            "tailcut.kind": "tool",
            "tailcut.boundary": f"tool:{tool}",
            "tailcut.request.sha256": f"sha-{tool}-{arguments}",
        }
        attempt = draw(st.sampled_from([None, 1, 2]))
        if attempt is not None:
            out["tailcut.attempt"] = attempt
        return out
    if shape == "tailcut_agent":
        out = {"tailcut.kind": "agent"}
        agent = draw(st.sampled_from([None, "planner", "writer"]))
        if agent is not None:
            out["gen_ai.agent.name"] = agent
        return out
    if shape == "tailcut_chain":
        return {"tailcut.kind": "chain"}
    if shape in ("oi_llm", "oi_llm_preparation"):  # the second named as it is in span_name()
        return {
            "openinference.span.kind": "LLM",
            "llm.token_count.prompt": draw(tokens),
            "llm.token_count.completion": draw(tokens),
        }
    if shape == "oi_tool":
        return {
            "openinference.span.kind": "TOOL",
            "tool.name": draw(st.sampled_from(["search", "lookup"])),
            "tool_call.function.arguments": draw(st.sampled_from(ARGUMENTS)),
        }
    if shape == "oll_tool":
        return {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": draw(st.sampled_from(["search", "lookup"])),
            "traceloop.entity.input": langchain_input(
                draw(st.sampled_from(ARGUMENTS)), f"call_{draw(st.integers(0, 99))}"
            ),
        }
    if shape == "genai_tool":
        return {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": draw(st.sampled_from(["search", "lookup"])),
            "gen_ai.tool.call.arguments": draw(st.sampled_from(ARGUMENTS)),
        }
    return {"http.method": "GET"}


#: Span events: an exception (a failure when on a boundary, whatever the status) and another one.
EVENTS = ["exception", "agent.step_recovery"]

TAILCUT_SHAPES = [shape for shape in SHAPES if shape.startswith("tailcut_")]


def root_attributes(draw: st.DrawFn) -> dict[str, object]:
    """A run's root: its outcome, and maybe a score, a revision, ids and an agent name."""
    out: dict[str, object] = {
        "tailcut.kind": "root",
        "tailcut.outcome": draw(st.sampled_from(["pass", "fail"])),
    }
    optional = {
        "tailcut.outcome.score": st.sampled_from([0.25, 1]),
        "tailcut.harness.revision": st.just("h1"),
        "tailcut.env.revision": st.just("e2"),
        "tailcut.prompt.version": st.just("v3"),
        "session.id": st.just("s-1"),
        "user.id": st.just("u-1"),
        "gen_ai.conversation.id": st.just("c-1"),
        "gen_ai.agent.name": st.just("support"),
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            out[key] = draw(values)
    return out


def span_name(shape: str, index: int) -> str:
    """A span's name: LlamaIndex's preparation span under OpenInference is named by what it does."""
    return "OpenAI._prepare_chat_with_tools" if shape == "oi_llm_preparation" else f"span {index}"


@st.composite
def traces(draw: st.DrawFn, shapes: list[str] = SHAPES, *, whole: bool = False) -> list[Span]:
    """Random traces; ``whole`` ones have a root and no missing parent, as one process records them.

    Spans may carry failure texts: a failed span's status message, an exception's type and message, a
    framework step's message, a tool's result."""
    count = draw(st.integers(1, 14))
    ids = [bytes([0, 0, 0, 0, 0, 0, 1, i + 1]) for i in range(count)]
    has_root = whole or draw(st.booleans())
    spans = []
    attributes: dict[str, object]
    for i in range(count):
        shape = "root"
        if i == 0 and has_root:
            parent = b""
            attributes = root_attributes(draw)
        else:
            choice = draw(st.integers(0 if whole else -1, i - 1)) if i else -1
            parent = ids[choice] if choice >= 0 else bytes([9] * 8)  # -1: a parent that never arrives
            shape = draw(st.sampled_from(shapes))
            attributes = attributes_for(shape, draw)
            result = draw(st.sampled_from(TEXTS)) if shape in RESULT_KEYS else None
            if result is not None:
                attributes[RESULT_KEYS[shape]] = json.dumps(result) if shape == "tailcut_tool" else result
        start = draw(st.integers(0, 10**9))
        code = draw(st.sampled_from([0, 1, 2]))
        message = draw(st.sampled_from(TEXTS)) if code == 2 else None  # the SDK keeps ERROR's alone
        spans.append(
            Span(
                trace_id=TRACE_ID,
                span_id=ids[i],
                parent_span_id=parent,
                name=span_name(shape, i),
                start_time_unix_nano=start,
                end_time_unix_nano=start + draw(st.integers(0, 10**9)),
                attributes=[kv(k, v) for k, v in attributes.items()],
                status=Status(code=code, message=message or ""),
                events=[
                    Span.Event(
                        name=name, attributes=[kv(k, v) for k, v in event_attributes(name, draw).items()]
                    )
                    for name in draw(st.lists(st.sampled_from(EVENTS), max_size=2))
                ],
            )
        )
    order = draw(st.permutations(range(count)))
    return [spans[i] for i in order]


def event_attributes(name: str, draw: st.DrawFn) -> dict[str, object]:
    """An exception's type and maybe its message, or a framework step's message."""
    text = draw(st.sampled_from(TEXTS))
    if name == "exception":
        return {"exception.type": "ToolError", **({"exception.message": text} if text else {})}
    return {"message": text} if text else {}


def collector_signals(spans: list[Span]):
    datas = [span.SerializeToString() for span in spans]
    return tally_of(datas).signals(datas, model_pricer())


def test_nested_model_call_counts_once():
    outer = Span(
        trace_id=TRACE_ID,
        span_id=b"\x01" * 8,
        name="llm",
        attributes=[kv("tailcut.kind", "llm"), kv("gen_ai.usage.input_tokens", 10)],
        status=Status(code=2),
    )
    inner = Span(
        trace_id=TRACE_ID,
        span_id=b"\x02" * 8,
        parent_span_id=b"\x01" * 8,
        name="anthropic",
        attributes=[kv("gen_ai.provider.name", "anthropic"), kv("gen_ai.usage.input_tokens", 10)],
        status=Status(code=2),
    )
    signals = collector_signals([inner, outer])
    assert (signals.llm_calls, signals.input_tokens, signals.errors, signals.depth) == (1, 10, 2, 1)


def llamaindex_request() -> list[Span]:
    """One model request as LlamaIndex records it under OpenInference: a preparation span (no tokens, it
    failed here) and the call, siblings under the agent's step, both ``LLM``."""

    def span(
        i: int, name: str, kind: str, *attributes: KeyValue, parent: int | None = 1, code: int = 0
    ) -> Span:
        return Span(
            trace_id=TRACE_ID,
            span_id=bytes([i]) * 8,
            parent_span_id=bytes([parent]) * 8 if parent else b"",
            name=name,
            start_time_unix_nano=i,
            end_time_unix_nano=10 + i,
            attributes=[kv("openinference.span.kind", kind), *attributes],
            status=Status(code=code),
        )

    tokens = (kv("llm.token_count.prompt", 30), kv("llm.token_count.completion", 5))
    return [
        span(1, "FunctionAgent.run", "AGENT", parent=None),
        span(2, "OpenAI._prepare_chat_with_tools", "LLM", kv("llm.model_name", "gpt-4o-mini"), code=2),
        span(3, "OpenAI.astream_chat", "LLM", kv("llm.model_name", "gpt-4o-mini"), *tokens),
    ]


def test_a_preparation_span_is_no_model_call():
    signals = collector_signals(llamaindex_request())
    assert (signals.llm_calls, signals.input_tokens, signals.errors, signals.span_count) == (1, 30, 1, 3)
    assert signals.cost_usd is not None and signals.cost_usd > 0


def test_tool_loop_counts_identical_first_attempts_only():
    def tool(i: int, arguments: str, attempt: int) -> Span:
        return Span(
            trace_id=TRACE_ID,
            span_id=bytes([i]) * 8,
            name="execute_tool search",
            attributes=[
                kv("tailcut.kind", "tool"),
                kv("tailcut.boundary", "tool:search"),
                kv("tailcut.request.sha256", arguments),
                kv("tailcut.attempt", attempt),
            ],
        )

    spans = [tool(1, "a", 1), tool(2, "a", 2), tool(3, "a", 1), tool(4, "b", 1), tool(5, "a", 1)]
    signals = collector_signals(spans)
    assert (signals.tool_calls, signals.max_tool_repeat) == (4, 3)


def test_root_facts_carry_the_run():
    root = Span(
        trace_id=TRACE_ID,
        span_id=b"\x01" * 8,
        name="support-agent",
        attributes=[
            kv("tailcut.kind", "root"),
            kv("tailcut.outcome", "fail"),
            kv("tailcut.harness.revision", "h7"),
            kv("gen_ai.agent.name", "support"),
            KeyValue(key="tailcut.outcome.score", value=AnyValue(double_value=0.25)),
        ],
    )
    span = SpanFacts.FromString(root.SerializeToString())
    facts = root_facts(span, span.attributes)
    assert facts == (
        "support-agent",
        RunFacts(outcome="fail", outcome_score=0.25, harness_revision="h7"),
        "support",
        False,
    )


def test_identical_third_party_calls_are_one_call_however_recorded():
    """The same arguments, spaced differently or in OpenLLMetry's LangChain envelope with a new call id each
    time, are one repeated call (the writers' rebuilt arguments: what the classifier groups)."""

    def tool(i: int, *attributes: KeyValue) -> Span:
        return Span(
            trace_id=TRACE_ID, span_id=bytes([i]) * 8, name="execute_tool search", attributes=list(attributes)
        )

    spans = [
        tool(
            i,
            kv("traceloop.span.kind", "tool"),
            kv("traceloop.entity.name", "search"),
            kv("traceloop.entity.input", langchain_input(arguments, f"call_{i}")),
        )
        for i, arguments in enumerate(ARGUMENTS[:2] * 2, start=1)
    ]
    spans.append(
        tool(
            9,
            kv("openinference.span.kind", "TOOL"),
            kv("tool.name", "search"),
            kv("tool_call.function.arguments", ARGUMENTS[1]),
        )
    )
    signals = collector_signals(spans)
    assert (signals.tool_calls, signals.max_tool_repeat) == (5, 5)


@settings(max_examples=300, deadline=None)
@given(encoded_any_value())
def test_an_attribute_value_decodes_as_the_protobuf_runtime_decodes_it(raw):
    """Short and long strings, small and large integers, with minimal or padded varints."""
    value = AnyValue.FromString(raw)
    kind = value.WhichOneof("value")
    expected = (
        getattr(value, kind) if kind in ("string_value", "int_value", "double_value", "bool_value") else None
    )
    assert any_value(raw) == expected
