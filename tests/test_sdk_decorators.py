"""Decorators, context managers and tailcut.run: kinds, nesting, numbering, streams, errors, retries."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import threading

import pytest

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import sha256_hex
from tailcut.testing import capture_spans


def _attrs(span):
    return dict(span.attributes or {})


def _boundaries(spans, kind=None):
    return sorted(
        (
            s
            for s in spans
            if attr.BOUNDARY in (s.attributes or {}) and (kind is None or s.attributes[attr.KIND] == kind)
        ),
        key=lambda s: s.attributes[attr.SEQ],
    )


@tailcut.tool(name="search_kb", schema={"type": "object", "properties": {"query": {"type": "string"}}})
def search_kb(query: str, k: int = 2) -> list[dict]:
    return [{"id": i, "query": query} for i in range(k)]


def test_request_is_arguments_bound_to_parameter_names():
    with capture_spans() as spans, tailcut.run("agent"):
        search_kb("x")
        search_kb(query="x")
        search_kb("x", 2)
    first, second, third = _boundaries(spans, "tool")
    assert first.attributes[attr.REQUEST] == '{"k":2,"query":"x"}'
    assert {s.attributes[attr.REQUEST_SHA256] for s in (first, second, third)} == {
        sha256_hex('{"k":2,"query":"x"}')
    }
    assert first.attributes[attr.RESPONSE] == '[{"id":0,"query":"x"},{"id":1,"query":"x"}]'
    assert first.attributes[attr.RESPONSE_SHA256] == sha256_hex(first.attributes[attr.RESPONSE])


def test_a_call_that_does_not_bind_is_recorded_as_passed_by_name_when_it_was():
    """A model that adds an argument the tool lacks: the call raises, and its request is what the model
    asked for by name (so a replay and the classifier read the arguments), positional ones kept apart."""
    with capture_spans() as spans, tailcut.run("agent"):
        with pytest.raises(TypeError):
            search_kb(query="x", units="kelvin")
        with pytest.raises(TypeError):
            search_kb("x", 2, 3)
    by_name, positional = _boundaries(spans, "tool")
    assert json.loads(by_name.attributes[attr.REQUEST]) == {"query": "x", "units": "kelvin"}
    assert json.loads(positional.attributes[attr.REQUEST]) == {"args": ["x", 2, 3], "kwargs": {}}


def test_boundary_attributes_follow_the_contract():
    with capture_spans() as spans, tailcut.run("agent"):
        search_kb("refunds")
    (span,) = _boundaries(spans, "tool")
    a = _attrs(span)
    assert span.name == "execute_tool search_kb"
    assert a[attr.KIND] == "tool"
    assert a[attr.BOUNDARY] == "tool:search_kb"
    assert a[attr.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert a[attr.GEN_AI_TOOL_NAME] == "search_kb"
    assert a[attr.GEN_AI_TOOL_CALL_ARGUMENTS] == a[attr.REQUEST]
    assert a[attr.GEN_AI_TOOL_CALL_RESULT] == a[attr.RESPONSE]
    assert a[attr.TOOL_SCHEMA_SHA256] == sha256_hex(
        '{"properties":{"query":{"type":"string"}},"type":"object"}'
    )
    assert (a[attr.OCCURRENCE], a[attr.SEQ], a[attr.ATTEMPT]) == (1, 1, 1)
    assert attr.RETRIES not in a  # absent on a first attempt


def test_occurrence_counts_per_boundary_and_seq_counts_per_run():
    @tailcut.retriever(name="kb")
    def fetch(q):
        return [q]

    with capture_spans() as spans:
        with tailcut.run("a"):
            search_kb("1")
            fetch("1")
            search_kb("2")
        with tailcut.run("b"):
            search_kb("3")
    rows = [
        (s.attributes[attr.BOUNDARY], s.attributes[attr.OCCURRENCE], s.attributes[attr.SEQ])
        for s in spans
        if attr.BOUNDARY in s.attributes
    ]
    assert rows == [
        ("tool:search_kb", 1, 1),
        ("retriever:kb", 1, 2),
        ("tool:search_kb", 2, 3),
        ("tool:search_kb", 1, 1),
    ]


def test_nesting_kinds_and_root_signals():
    @tailcut.agent(name="planner")
    def planner():
        search_kb("a")
        search_kb("a")
        search_kb("a")
        return "plan"

    @tailcut.chain
    def step():
        return planner()

    with (
        capture_spans() as spans,
        tailcut.run("support", input={"ticket": 42}, prompt_version="v7", harness_revision="rev1") as run,
    ):
        step()
        run.set_outcome("fail", score=0.25)
    root = spans.root()
    chain = next(s for s in spans if s.attributes[attr.KIND] == "chain")
    agent = next(s for s in spans if s.attributes[attr.KIND] == "agent")
    tools = _boundaries(spans, "tool")
    assert chain.parent.span_id == root.context.span_id
    assert agent.parent.span_id == chain.context.span_id
    assert all(t.parent.span_id == agent.context.span_id for t in tools)
    assert agent.name == "invoke_agent planner"
    a = _attrs(root)
    assert a[attr.RUN_INPUT] == '{"ticket":42}'
    assert a[attr.PROMPT_VERSION] == "v7"
    assert a[attr.HARNESS_REVISION] == "rev1"
    assert (a[attr.OUTCOME], a[attr.OUTCOME_SCORE]) == ("fail", 0.25)
    assert a[attr.TRACE_TOOL_CALLS] == 3
    assert a[attr.TRACE_MAX_TOOL_REPEAT] == 3
    assert a[attr.TRACE_DEPTH] == 3
    assert a[attr.TRACE_SPAN_COUNT] == 6
    assert run.trace_id == format(root.context.trace_id, "032x")


def test_harness_revision_from_environment(monkeypatch):
    monkeypatch.setenv("TAILCUT_HARNESS_REVISION", "from-env")
    with capture_spans() as spans, tailcut.run("agent"):
        pass
    assert spans.root().attributes[attr.HARNESS_REVISION] == "from-env"


def test_async_functions_and_tasks_share_the_run():
    @tailcut.tool
    async def lookup(order_id: int) -> dict:
        await asyncio.sleep(0.01 * (3 - order_id))
        return {"order": order_id}

    async def main():
        async with tailcut.run("async-agent"):
            return await asyncio.gather(*(asyncio.create_task(lookup(i)) for i in range(3)))

    with capture_spans() as spans:
        assert asyncio.run(main()) == [{"order": 0}, {"order": 1}, {"order": 2}]
    root = spans.root()
    tools = _boundaries(spans, "tool")
    # occurrences follow the order the calls were issued, not the order they completed
    assert [(json.loads(t.attributes[attr.REQUEST]), t.attributes[attr.OCCURRENCE]) for t in tools] == [
        ({"order_id": i}, i + 1) for i in range(3)
    ]
    assert {t.context.trace_id for t in tools} == {root.context.trace_id}
    assert root.attributes[attr.TRACE_TOOL_CALLS] == 3


def test_threads_and_thread_pools_join_the_run():
    tailcut._threads.thread_context.apply()
    try:
        with capture_spans() as spans, tailcut.run("threaded"):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                list(pool.map(search_kb, ["a", "b"]))
            worker = threading.Thread(target=search_kb, args=("c",))
            worker.start()
            worker.join()
    finally:
        tailcut._threads.thread_context.restore()
    root = spans.root()
    tools = _boundaries(spans, "tool")
    assert len(tools) == 3
    assert all(t.context.trace_id == root.context.trace_id for t in tools)
    assert sorted(t.attributes[attr.OCCURRENCE] for t in tools) == [1, 2, 3]


def test_generator_is_one_span_until_exhausted_or_closed():
    @tailcut.tool
    def pages(n):
        yield from range(n)

    with capture_spans() as spans, tailcut.run("streams"):
        assert list(pages(3)) == [0, 1, 2]
        stream = pages(10)
        next(stream)
        next(stream)
        stream.close()
    done, closed = _boundaries(spans, "tool")
    assert (done.attributes[attr.RESPONSE], done.attributes[attr.STREAM_END]) == ("[0,1,2]", "exhausted")
    assert (closed.attributes[attr.RESPONSE], closed.attributes[attr.STREAM_END]) == ("[0,1]", "closed")
    assert closed.end_time is not None


def test_generator_failure_records_items_and_error():
    @tailcut.tool
    def broken():
        yield 1
        raise RuntimeError("disk gone")

    with capture_spans() as spans, tailcut.run("streams"), pytest.raises(RuntimeError, match="disk gone"):
        list(broken())
    (span,) = _boundaries(spans, "tool")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes[attr.RESPONSE] == "[1]"
    assert span.attributes[attr.STREAM_END] == "error"


def test_async_generator_closed_early():
    @tailcut.tool
    async def ticks(n):
        for i in range(n):
            yield i

    async def main():
        async with tailcut.run("async-stream"):
            agen = ticks(5)
            assert await agen.__anext__() == 0
            await agen.aclose()
            return [i async for i in ticks(2)]

    with capture_spans() as spans:
        assert asyncio.run(main()) == [0, 1]
    closed, done = _boundaries(spans, "tool")
    assert (closed.attributes[attr.RESPONSE], closed.attributes[attr.STREAM_END]) == ("[0]", "closed")
    assert (done.attributes[attr.RESPONSE], done.attributes[attr.STREAM_END]) == ("[0,1]", "exhausted")


def test_agent_exception_passes_through_unchanged_and_is_recorded():
    class PaymentDeclined(Exception):
        pass

    error = PaymentDeclined("card 4242 declined")

    @tailcut.tool
    def charge(amount):
        raise error

    with capture_spans() as spans, pytest.raises(PaymentDeclined) as caught, tailcut.run("pay"):
        charge(10)
    assert caught.value is error
    (span,) = _boundaries(spans, "tool")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes[attr.ERROR_TYPE].endswith("PaymentDeclined")
    assert [e.name for e in span.events] == ["exception"]
    root = spans.root()
    assert root.status.status_code.name == "ERROR"
    assert root.attributes[attr.TRACE_ERRORS] == 2  # the tool and the run


def test_decorator_retry_records_every_attempt_and_counts_one_call():
    calls = {"n": 0}

    @tailcut.tool(retry=tailcut.Retry(attempts=3, on=(TimeoutError,)))
    def flaky(q):
        calls["n"] += 1
        if calls["n"] < 3:
            raise TimeoutError("upstream timed out")
        return "ok"

    with capture_spans() as spans, tailcut.run("retries"):
        assert flaky("x") == "ok"
    attempts = _boundaries(spans, "tool")
    assert [(s.attributes[attr.ATTEMPT], s.attributes.get(attr.RETRIES, 0)) for s in attempts] == [
        (1, 0),
        (2, 1),
        (3, 2),
    ]
    assert [s.status.status_code.name for s in attempts] == ["ERROR", "ERROR", "UNSET"]
    root = spans.root().attributes
    assert (root[attr.TRACE_TOOL_CALLS], root[attr.TRACE_ERRORS], root[attr.TRACE_MAX_TOOL_REPEAT]) == (
        1,
        2,
        1,
    )


def test_retry_gives_up_with_the_last_error():
    @tailcut.tool(retry=tailcut.Retry(attempts=2, on=(TimeoutError,)))
    def always_slow():
        raise TimeoutError("still slow")

    with capture_spans() as spans, tailcut.run("retries"), pytest.raises(TimeoutError):
        always_slow()
    assert len(_boundaries(spans, "tool")) == 2


def test_explicit_retry_helper():
    outcomes = iter([TimeoutError("t1"), None])

    @tailcut.tool
    def fetch():
        failure = next(outcomes)
        if failure:
            raise failure
        return 1

    with capture_spans() as spans, tailcut.run("retries") as run:
        for attempt in run.retry(3, on=TimeoutError):
            with attempt:
                fetch()
    assert [s.attributes[attr.ATTEMPT] for s in _boundaries(spans, "tool")] == [1, 2]


def test_unencodable_payload_is_recorded_not_raised(caplog):
    class Opaque:
        pass

    @tailcut.tool
    def make():
        return Opaque()

    with capture_spans() as spans, tailcut.run("enc"):
        result = make()
    assert isinstance(result, Opaque)
    (span,) = _boundaries(spans, "tool")
    assert "tool:make: response cannot be encoded" in span.attributes[attr.PAYLOAD_ERROR]
    assert attr.RESPONSE not in span.attributes


def test_methods_leave_self_out_and_exclude_drops_handles():
    class Client:
        @tailcut.tool(exclude=("session",))
        def get(self, key: str, session=None):
            return key.upper()

    with capture_spans() as spans, tailcut.run("m"):
        Client().get("k", session=object())
    (span,) = _boundaries(spans, "tool")
    assert span.attributes[attr.REQUEST] == '{"key":"k"}'


def test_non_json_values_follow_documented_rules():
    @dataclasses.dataclass
    class Doc:
        id: int
        body: bytes

    @tailcut.retriever
    def docs(q):
        return [Doc(1, b"\x01")]

    with capture_spans() as spans, tailcut.run("r"):
        docs("q")
    (span,) = _boundaries(spans, "retriever")
    assert span.attributes[attr.RESPONSE] == '[{"body":{"$bytes":"AQ=="},"id":1}]'


def test_manual_boundary_and_nested_run():
    with capture_spans() as spans, tailcut.run("outer"):
        with tailcut.boundary("tool", "lookup_order", request={"order_id": 7}) as b:
            assert not b.served
            b.record({"status": "shipped"})
        with tailcut.run("inner-agent"):
            search_kb("q")
    tools = _boundaries(spans, "tool")
    assert tools[0].attributes[attr.RESPONSE] == '{"status":"shipped"}'
    inner = next(s for s in spans if s.attributes[attr.KIND] == "agent")
    assert inner.name == "invoke_agent inner-agent"
    assert tools[1].parent.span_id == inner.context.span_id
    assert len(spans.by_kind("root")) == 1


def test_decorators_cost_nothing_without_init():
    # no capture, no init: the function runs and nothing is recorded
    assert search_kb("q", 1) == [{"id": 0, "query": "q"}]
    with tailcut.run("off") as run:
        assert run.trace_id is None


def test_tool_call_id_is_attached():
    with capture_spans() as spans, tailcut.run("ids"), tailcut.tool_call_id("call_123"):
        search_kb("q")
    (span,) = _boundaries(spans, "tool")
    assert span.attributes[attr.GEN_AI_TOOL_CALL_ID] == "call_123"


def test_llm_spans_carry_the_runs_prompt_version():
    @tailcut.llm(name="custom-client")
    def complete(prompt: str) -> dict:
        return {"text": prompt.upper()}

    with capture_spans() as spans, tailcut.run("p", prompt_version={"system": "v3", "tools": "v2"}):
        complete("hi")
        search_kb("q")
    (llm_span,) = _boundaries(spans, "llm")
    assert llm_span.attributes[attr.PROMPT_VERSION] == '{"system":"v3","tools":"v2"}'
    assert attr.PROMPT_VERSION not in _boundaries(spans, "tool")[0].attributes
