"""The replay hook point: an active interceptor can serve a boundary or let it run live."""

from __future__ import annotations

import asyncio

import pytest

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.interceptor import Crossing, Served, use_interceptor
from tailcut.testing import capture_spans

CALLS: list[str] = []


@tailcut.tool(name="refund")
def refund(order_id: int, amount: float) -> dict:
    CALLS.append("refund")
    return {"refunded": amount}


@tailcut.tool(name="lookup")
async def lookup(order_id: int) -> dict:
    CALLS.append("lookup")
    return {"order": order_id}


@tailcut.tool(name="pages")
def pages(n: int):
    CALLS.append("pages")
    yield from range(n)


class Recorder:
    """A minimal interceptor: serves what is in its table, runs the rest live, and logs everything."""

    def __init__(self, table=None, divergent=()):
        self.table = table or {}
        self.divergent = set(divergent)
        self.crossings: list[Crossing] = []
        self.results: list[tuple] = []

    def on_boundary(self, crossing):
        self.crossings.append(crossing)
        if crossing.boundary in self.divergent:
            raise tailcut.Divergence(f"{crossing.boundary}: request differs")
        return self.table.get((crossing.boundary, crossing.occurrence))

    def on_result(self, crossing, *, served, response_json, response_sha256, error):
        self.results.append(
            (crossing.boundary, served, response_json, type(error).__name__ if error else None)
        )


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def test_served_boundaries_do_not_run():
    recorded = {"refunded": 999.0}
    interceptor = Recorder({("tool:refund", 1): Served(recorded, canonical_json(recorded))})
    with capture_spans() as spans, tailcut.run("replay"), use_interceptor(interceptor):
        assert refund(7, 10.0) == {"refunded": 999.0}  # served from the record
        assert refund(7, 10.0) == {"refunded": 10.0}  # occurrence 2 is not recorded: live
    assert CALLS == ["refund"]
    assert [c.request_sha256 for c in interceptor.crossings] == [
        sha256_hex('{"amount":10.0,"order_id":7}')
    ] * 2
    assert interceptor.results == [
        ("tool:refund", True, '{"refunded":999.0}', None),
        ("tool:refund", False, '{"refunded":10.0}', None),
    ]
    served_span, live_span = spans.by_kind("tool")
    assert served_span.attributes[attr.REPLAYED] is True
    assert attr.REPLAYED not in live_span.attributes


def test_served_error_is_raised_as_its_original_class():
    interceptor = Recorder(
        {("tool:refund", 1): Served(error_type="TimeoutError", error_message="gateway timeout")}
    )
    with (
        capture_spans() as spans,
        tailcut.run("replay"),
        use_interceptor(interceptor),
        pytest.raises(TimeoutError),
    ):
        refund(1, 1.0)
    assert CALLS == []
    assert spans.by_kind("tool")[0].attributes[attr.ERROR_TYPE] == "TimeoutError"


def test_unknown_error_class_becomes_recorded_error():
    interceptor = Recorder({("tool:refund", 1): Served(error_type="gone.module.Oops", error_message="x")})
    with (
        tailcut.run("replay"),
        use_interceptor(interceptor),
        pytest.raises(tailcut.RecordedError, match=r"gone\.module\.Oops"),
    ):
        refund(1, 1.0)


def test_divergence_is_raised_into_the_agent_and_recorded():
    interceptor = Recorder(divergent={"tool:refund"})
    with (
        capture_spans() as spans,
        tailcut.run("replay"),
        use_interceptor(interceptor),
        pytest.raises(tailcut.Divergence),
    ):
        refund(1, 1.0)
    assert CALLS == []
    assert spans.by_kind("tool")[0].status.status_code.name == "ERROR"


def test_async_and_generator_boundaries_are_served():
    interceptor = Recorder(
        {
            ("tool:lookup", 1): Served({"order": "recorded"}, '{"order":"recorded"}'),
            ("tool:pages", 1): Served([10, 20], "[10,20]"),
        }
    )

    async def main():
        return await lookup(1)

    with tailcut.run("replay"), use_interceptor(interceptor):
        assert asyncio.run(main()) == {"order": "recorded"}
        assert list(pages(5)) == [10, 20]
    assert CALLS == []


def test_interceptor_works_without_init():
    interceptor = Recorder({("tool:refund", 1): Served({"refunded": 1}, '{"refunded":1}')})
    with use_interceptor(interceptor):
        assert refund(1, 1.0) == {"refunded": 1}
    assert CALLS == []
    assert interceptor.crossings[0].request == '{"amount":1.0,"order_id":1}'


def test_decode_hook_rebuilds_types():
    class Order(dict):
        pass

    @tailcut.tool(name="typed", decode=lambda v: Order(v))
    def typed():
        return Order(a=1)

    interceptor = Recorder({("tool:typed", 1): Served({"a": 2}, '{"a":2}')})
    with use_interceptor(interceptor):
        result = typed()
    assert isinstance(result, Order) and result == {"a": 2}


def test_manual_boundary_can_be_served():
    interceptor = Recorder({("tool:db", 1): Served({"row": 1}, '{"row":1}')})
    with (
        tailcut.run("replay"),
        use_interceptor(interceptor),
        tailcut.boundary("tool", "db", request={"id": 1}) as b,
    ):
        assert b.served
        assert b.response == {"row": 1}
