"""Replay sessions over decorated tools: serving from the record, divergences, matching, concurrency.

Every test records real runs through the embedded Parquet exporter, writes a corpus with the corpus
writer, and replays from the files.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

import tailcut
from tailcut import replay
from tailcut.replay import DivergenceRecord
from tests.replay_support import record_corpus

CALLS: list[str] = []
STAMPS = itertools.count(1_700_000_000)


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict:
    CALLS.append("lookup")
    return {"order_id": order_id, "amount": 120.0}


@tailcut.tool(name="refund")
def refund(order_id: int, amount: float) -> dict:
    CALLS.append("refund")
    return {"order_id": order_id, "refunded": amount}


@tailcut.tool(name="notify")
def notify(order_id: int) -> dict:
    CALLS.append("notify")
    return {"sent": True}


@tailcut.tool(name="stamp")
def stamp(event: str, at: int, request_id: str) -> dict:
    CALLS.append("stamp")
    return {"event": event, "logged": True}


def shop(order: dict, *, delta: float = 0.0, extra: bool = False, skip_refund: bool = False) -> dict:
    with tailcut.run("shop", input=order) as run:
        found = lookup(order["order_id"])
        done = {} if skip_refund else refund(found["order_id"], found["amount"] + delta)
        if extra:
            notify(order["order_id"])
        run.set_outcome("pass")
        return done


def stamped(order: dict, *, event: str = "refund") -> dict:
    """Sends a fresh timestamp and request id with every call, as real clients do."""
    with tailcut.run("stamped", input=order):
        return stamp(event, at=next(STAMPS), request_id=f"req-{next(STAMPS)}")


@pytest.fixture(autouse=True)
def _clear_calls():
    CALLS.clear()


@pytest.fixture
def shop_corpus(tmp_path):
    corpus, (trace_id,) = record_corpus(tmp_path, [lambda: shop({"order_id": 7})])
    CALLS.clear()
    return replay.load_corpus(corpus), trace_id


# -- recorded mode -------------------------------------------------------------------------------------------


def test_recorded_replay_serves_every_boundary_without_running_it(shop_corpus):
    corpus, trace_id = shop_corpus
    with replay.session(corpus, trace_id) as session:
        output = shop({"order_id": 7})

    assert output == {"order_id": 7, "refunded": 120.0}
    assert CALLS == []
    assert [(c.boundary, c.occurrence, c.request, c.status) for c in session.crossings] == [
        ("tool:lookup", 1, {"order_id": 7}, "served"),
        ("tool:refund", 1, {"amount": 120.0, "order_id": 7}, "served"),
    ]
    assert session.divergences == []
    assert (dict(session.served_counts), session.live_crossings) == ({"tool": 2}, 0)
    assert session.outcome == "pass"


def test_a_changed_argument_is_the_first_divergence_with_a_readable_diff(shop_corpus):
    corpus, trace_id = shop_corpus
    with pytest.raises(tailcut.Divergence) as raised, replay.session(corpus, trace_id):
        shop({"order_id": 7}, delta=1.0)

    record = raised.value.details
    assert isinstance(record, DivergenceRecord)
    assert (record.kind, record.boundary, record.occurrence, record.seq) == ("request", "tool:refund", 1, 2)
    assert record.paths == ("$.amount: 120.0 -> 121.0",)
    assert str(record) == "request differs at tool:refund#1 (seq 2): $.amount: 120.0 -> 121.0"
    assert '-  "amount": 120.0,' in record.diff and '+  "amount": 121.0,' in record.diff
    assert CALLS == []  # stopped before the refund could run


def test_continue_serves_the_recorded_response_and_keeps_every_divergence(shop_corpus):
    corpus, trace_id = shop_corpus
    with replay.session(corpus, trace_id, on_divergence="continue") as session:
        output = shop({"order_id": 7}, delta=1.0)

    assert output == {"order_id": 7, "refunded": 120.0}  # the record, not a live refund
    assert CALLS == []
    (record,) = session.divergences
    assert (record.kind, record.served) == ("request", True)


def test_an_extra_boundary_is_a_divergence(shop_corpus):
    corpus, trace_id = shop_corpus
    with pytest.raises(tailcut.Divergence) as raised, replay.session(corpus, trace_id):
        shop({"order_id": 7}, extra=True)

    assert (
        str(raised.value) == "extra boundary tool:notify#1 (seq 3): the record has 0 crossings of tool:notify"
    )
    assert CALLS == []


def test_a_recorded_boundary_never_reached_is_a_divergence_when_the_session_ends(shop_corpus):
    corpus, trace_id = shop_corpus
    missing = r"^missing boundary tool:refund#1 \(recorded seq 2\)"
    with pytest.raises(tailcut.Divergence, match=missing), replay.session(corpus, trace_id):
        shop({"order_id": 7}, skip_refund=True)

    with replay.session(corpus, trace_id, on_divergence="continue") as session:
        shop({"order_id": 7}, skip_refund=True)
    assert [(d.kind, d.boundary, d.recorded_seq) for d in session.divergences] == [
        ("missing", "tool:refund", 2)
    ]


def test_after_a_stop_every_later_boundary_is_refused(shop_corpus):
    corpus, trace_id = shop_corpus

    def swallowing(order):
        with tailcut.run("shop", input=order):
            try:
                refund(1, 1.0)  # the record starts with a lookup: diverges
            except tailcut.Divergence:
                pass
            return lookup(order["order_id"])

    stopped = "replay stopped at its first divergence"
    with pytest.raises(tailcut.Divergence, match=stopped), replay.session(corpus, trace_id):
        swallowing({"order_id": 7})
    assert CALLS == []


# -- relaxed matching and the normalize hook -----------------------------------------------------------------


@pytest.fixture
def stamped_corpus(tmp_path):
    corpus, (trace_id,) = record_corpus(tmp_path, [lambda: stamped({"order_id": 7})])
    CALLS.clear()
    return replay.load_corpus(corpus), trace_id


def test_requests_with_fresh_timestamps_diverge_under_the_default_matchers(stamped_corpus):
    corpus, trace_id = stamped_corpus
    with pytest.raises(tailcut.Divergence) as raised, replay.session(corpus, trace_id):
        stamped({"order_id": 7})
    assert [p.split(":")[0] for p in raised.value.details.paths] == ["$.at", "$.request_id"]


def test_match_on_boundary_and_occurrence_ignores_the_request(stamped_corpus):
    corpus, trace_id = stamped_corpus
    relaxed = {"tool:stamp": ("boundary", "occurrence")}
    with replay.session(corpus, trace_id, match_on=relaxed) as session:
        assert stamped({"order_id": 7}, event="anything") == {"event": "refund", "logged": True}
    assert session.divergences == [] and CALLS == []


def test_normalize_strips_volatile_fields_but_still_sees_real_changes(stamped_corpus):
    corpus, trace_id = stamped_corpus

    def strip_volatile(boundary, request):
        return {k: v for k, v in request.items() if k not in ("at", "request_id")}

    with replay.session(corpus, trace_id, normalize=strip_volatile) as session:
        stamped({"order_id": 7})
    assert session.divergences == []

    with (
        pytest.raises(tailcut.Divergence) as raised,
        replay.session(corpus, trace_id, normalize=strip_volatile),
    ):
        stamped({"order_id": 7}, event="cancel")
    assert raised.value.details.paths == ('$.event: "refund" -> "cancel"',)


@pytest.mark.parametrize(
    "match_on", [("occurrence", "request"), ("boundary", "hash"), {"tool:stamp": ("boundary",)}]
)
def test_bad_matchers_are_refused_naming_the_valid_ones(stamped_corpus, match_on):
    corpus, trace_id = stamped_corpus
    valid = "valid matchers: boundary, occurrence, request"
    with (
        pytest.raises(tailcut.TailcutError, match=valid),
        replay.session(corpus, trace_id, match_on=match_on),
    ):
        pass


# -- parallel calls whose start order changes ----------------------------------------------------------------


@tailcut.tool(name="fetch")
def fetch(item: str) -> dict:
    time.sleep(LATENCY[item])  # recorded latency: completion order follows it
    return {"item": item, "price": len(item) * 10}


@tailcut.tool(name="total")
def total(prices: list) -> int:
    return sum(prices)


@tailcut.tool(name="afetch")
async def afetch(item: str) -> dict:
    await asyncio.sleep(LATENCY[item])
    return {"item": item, "price": len(item) * 10}


ITEMS = ("a", "bb", "ccc")
LATENCY = {"a": 0.0, "bb": 0.0, "ccc": 0.0}
START_DELAY = {"a": 0.0, "bb": 0.0, "ccc": 0.0}


def parallel_threads(items: list) -> int:
    def worker(item):
        time.sleep(START_DELAY[item])
        return fetch(item)

    with tailcut.run("parallel", input=items):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = list(pool.map(worker, items))
        return total([r["price"] for r in results])


async def parallel_tasks(items: list) -> int:
    async def worker(item):
        await asyncio.sleep(START_DELAY[item])
        return await afetch(item)

    async with tailcut.run("parallel", input=items):
        results = await asyncio.gather(*(worker(i) for i in items))
        return await asyncio.to_thread(total, [r["price"] for r in results])


def _shuffle(monkeypatch, start: tuple[float, ...], latency: tuple[float, ...]) -> None:
    """Set when each call starts and how long it takes (the order threads start and finish in)."""
    for item, delay, seconds in zip(ITEMS, start, latency, strict=True):
        monkeypatch.setitem(START_DELAY, item, delay)
        monkeypatch.setitem(LATENCY, item, seconds)


@pytest.mark.parametrize(
    ("agent", "boundary", "gap"),
    [
        (lambda items: parallel_threads(items), "tool:fetch", 0.2),
        (lambda items: asyncio.run(parallel_tasks(items)), "tool:afetch", 0.01),
    ],
    ids=["threads", "asyncio"],
)
def test_parallel_calls_started_in_another_order_each_get_their_own_record(
    tmp_path, monkeypatch, agent, boundary, gap
):
    _shuffle(monkeypatch, start=(0.0, gap, 2 * gap), latency=(2 * gap, 0.0, gap))  # starts a, bb, ccc
    corpus, (trace_id,) = record_corpus(tmp_path, [lambda: agent(list(ITEMS))])
    _shuffle(monkeypatch, start=(2 * gap, gap, 0.0), latency=(0.0, 0.0, 0.0))  # starts ccc, bb, a

    with replay.session(corpus, trace_id) as session:
        assert agent(list(ITEMS)) == 60

    assert session.divergences == []
    served = {
        c.request["item"]: (c.occurrence, c.recorded) for c in session.crossings if c.boundary == boundary
    }
    assert served == {"ccc": (1, f"{boundary}#3"), "bb": (2, f"{boundary}#2"), "a": (3, f"{boundary}#1")}


# -- crossings recorded inside a served crossing -------------------------------------------------------------


@tailcut.retriever(name="kb")
def kb(query: str) -> list:
    CALLS.append("kb")
    return [f"article about {query}"]


@tailcut.tool(name="search")
def search(query: str) -> list:
    CALLS.append("search")
    return kb(query)  # a boundary inside a boundary


def researcher(question: dict) -> list:
    with tailcut.run("researcher", input=question):
        first = kb("refunds")
        found = search("shipping")
        return [*first, *found, *kb("returns")]


def test_serving_a_crossing_covers_the_crossings_recorded_inside_it(tmp_path):
    corpus, (trace_id,) = record_corpus(tmp_path, [lambda: researcher({"q": 1})])
    # The corpus records which crossing each ran inside: the retriever call made inside search.
    envelopes = replay.load_corpus(corpus).envelopes(trace_id)
    nesting = {(e.boundary, e.occurrence): e.parent_seq for e in envelopes}
    assert nesting == {
        ("retriever:kb", 1): None,
        ("tool:search", 1): None,
        ("retriever:kb", 2): 2,  # inside tool:search (seq 2)
        ("retriever:kb", 3): None,
    }
    CALLS.clear()
    with replay.session(corpus, trace_id) as session:
        output = researcher({"q": 1})

    assert CALLS == [] and session.divergences == []
    assert output == ["article about refunds", "article about shipping", "article about returns"]
    assert [(c.boundary, c.occurrence, c.seq, c.recorded) for c in session.crossings] == [
        ("retriever:kb", 1, 1, "retriever:kb#1"),
        ("tool:search", 1, 2, "tool:search#1"),
        ("retriever:kb", 3, 4, "retriever:kb#3"),  # numbered as recorded: kb#2 ran inside search
    ]


def test_crossings_outside_any_run_are_numbered_per_session_even_under_the_callers_span(shop_corpus):
    """An agent whose root span another instrumentation opens never calls tailcut.run: each session of it
    still counts its own crossings from 1, also when two sessions run under one span of the caller."""
    corpus, trace_id = shop_corpus
    provider = TracerProvider()
    with provider.get_tracer("caller").start_as_current_span("test"):
        for _ in range(2):
            with replay.session(corpus, trace_id) as session:
                refund(lookup(7)["order_id"], 120.0)
            assert [(c.boundary, c.occurrence, c.status) for c in session.crossings] == [
                ("tool:lookup", 1, "served"),
                ("tool:refund", 1, "served"),
            ]
            assert session.divergences == []
    provider.shutdown()
