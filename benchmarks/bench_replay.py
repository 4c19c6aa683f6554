"""Replay: the cost of a served crossing, bit-stability of recorded replay, and a guard mutation study.

Three measurements, in one run (after the Chronicle paper's evaluation, seed ``003_83223cc82ff438b9.txt``):

1. **Per-crossing cost.** A ``@tailcut.tool`` returning a 4 KB payload is recorded 2000 times (distinct
   arguments) into a data dir, exported as a corpus and replayed: the time per served crossing is
   compared with calling the undecorated function, and with the same crossing run live under a session.
2. **Bit-stability.** One run of every demo ticket kind is recorded under harness v1 (the fleet's agent on
   the real ``openai`` SDK against the scripted model server) and replayed 20 times in recorded mode
   while the server forbids requests: each trace's rate, and the model calls the replay made.
3. **Mutation study.** For the unsafe-refund incident (``refund_large`` under v1), mutants of the v2
   refund guard are replayed with cut-point replay (the guard live, every other boundary served) and
   with a baseline that stubs every boundary (recorded mode). A mutant is *caught* when the replay's
   verdict on it differs from its verdict on the correct guard. The goal: cut-point replay catches every
   mutant that lets the unsafe refund through.

Run: ``python benchmarks/bench_replay.py [--crossings N] [--rounds R] [--repeats 20]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import tailcut
from tailcut import _config, replay
from tailcut.demo import fleet
from tailcut.demo import support_env as env
from tailcut.demo.support_model import support_responder
from tailcut.exporters import ParquetSpanExporter, schema
from tailcut.exporters.corpus import Selection, write_corpus
from tailcut.testing import ModelServer

PAYLOAD = [
    {"id": i, "title": f"Refund policy section {i}", "body": "lorem ipsum dolor " * 17} for i in range(12)
]
LIMIT = env.REFUND_LIMIT


# -- recording into a corpus ---------------------------------------------------------------------------------


@contextlib.contextmanager
def recording_into(data: Path) -> Iterator[None]:
    """Record every tailcut span made in the block into the data dir, as an agent with tailcut does."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(data, root_grace=0.0)))
    previous = _config.install(_config.Config(enabled=True, tracer=provider.get_tracer("bench")))
    try:
        yield
    finally:
        _config.install(previous)
        provider.shutdown()


def corpus_of(data: Path, out: Path) -> tuple[replay.Corpus, list[str]]:
    """Every trace of the data dir as one corpus, oldest first."""
    traces = ds.dataset(data / "traces", format="parquet", partitioning="hive", schema=schema.TRACES)
    ids = traces.to_table(columns=["trace_id", "start_time"]).sort_by("start_time")["trace_id"].to_pylist()
    write_corpus(data, [Selection(trace_id, "benchmark") for trace_id in ids], out)
    return replay.load_corpus(out), ids


# -- 1. per-crossing cost ------------------------------------------------------------------------------------


def search_kb(query: str) -> list[dict[str, Any]]:
    return PAYLOAD


def crossing_cost(workdir: Path, crossings: int, rounds: int) -> None:
    recorded_tool = tailcut.tool(name="search_kb")(search_kb)
    queries = [f"refund policy {i}" for i in range(crossings)]

    def agent(_: Any) -> None:
        with tailcut.run("bench", input="crossings"):
            for query in queries:
                recorded_tool(query)

    with recording_into(workdir / "cost-data"):
        agent(None)
    corpus, (trace_id,) = corpus_of(workdir / "cost-data", workdir / "cost-corpus")
    envelopes = corpus.envelopes(trace_id)

    def plain() -> float:
        start = time.perf_counter()
        for query in queries:
            search_kb(query)
        return time.perf_counter() - start

    def under_session(mode: str) -> float:
        session = replay.ReplaySession(envelopes, trace_id=trace_id, mode=mode)
        with session.active():
            start = time.perf_counter()
            agent(None)
            elapsed = time.perf_counter() - start
        session.close()
        assert session.divergences == [] and session.served_crossings == (
            crossings if mode == "recorded" else 0
        )
        return elapsed

    samples: dict[str, list[float]] = {"plain": [], "served": [], "live": []}
    for _ in range(rounds):  # alternate, so machine drift hits every contender alike
        for name, timed in (
            ("plain", plain),
            ("served", lambda: under_session("recorded")),
            ("live", lambda: under_session("live")),
        ):
            gc.collect()
            samples[name].append(timed() / crossings * 1e6)
    us = {name: statistics.median(values) for name, values in samples.items()}
    print(f"\n1. per-crossing cost ({crossings} crossings of a tool returning 4 KB, median of {rounds})")
    print(f"   undecorated call                      {us['plain']:9.2f} us")
    print(f"   served from the record (recorded)     {us['served']:9.2f} us")
    print(f"   run live under a session (live)       {us['live']:9.2f} us")
    print(f"   ratio served / undecorated            {us['served'] / us['plain']:9.1f}x")
    print(f"   ratio served / live crossing          {us['served'] / us['live']:9.2f}x")


# -- 2. bit-stability of recorded replay ---------------------------------------------------------------------


def one_ticket_per_kind() -> list[dict[str, Any]]:
    chosen: dict[str, dict[str, Any]] = {}
    for ticket, _ in fleet.make_tickets(400, seed=11):
        chosen.setdefault(ticket["kind"], ticket)
    return [chosen[kind] for kind in fleet.TICKET_MIX]


def record_incidents(workdir: Path, server: ModelServer) -> tuple[replay.Corpus, dict[str, str]]:
    """One v1 run of every ticket kind, recorded live; returns the corpus and kind -> trace id."""
    tickets = one_ticket_per_kind()
    tailcut.instrument_openai()
    try:
        with recording_into(workdir / "fleet-data"):
            for ticket in tickets:
                env.DESK.reset(outage_probability=1.0)
                env.DESK.ensure_order(
                    ticket["order_id"], ticket["amount"], outage=ticket["kind"] == "timeout"
                )
                with contextlib.suppress(Exception):  # a run that fails is an incident like any other
                    fleet.agent_v1(ticket)
    finally:
        tailcut.uninstrument_openai()
    corpus, ids = corpus_of(workdir / "fleet-data", workdir / "fleet-corpus")
    print(f"   recorded {len(ids)} runs ({server.request_count} model calls)")
    return corpus, {ticket["kind"]: trace_id for ticket, trace_id in zip(tickets, ids, strict=True)}


def bit_stability(corpus: replay.Corpus, kinds: dict[str, str], server: ModelServer, repeats: int) -> None:
    before = server.request_count
    with server.forbid():
        report = replay.run_replay(corpus, fleet.agent_v1, n=repeats, reset=fleet.reset_desk)
    calls = server.request_count - before
    summaries = {s.trace_id: s for s in report.traces()}
    stable = sum(s.bit_stable for s in summaries.values())
    print(
        f"\n2. recorded replay of {len(kinds)} incidents x {repeats} (check: the recorded outcome reproduces)"
    )
    for kind, trace_id in kinds.items():
        summary = summaries[trace_id]
        print(f"   {kind:<15} {summary.rate:<30}{summary.first_divergence or ''}")
    print(f"   bit-stable traces                     {stable}/{len(kinds)}")
    if any(s.first_divergence and s.first_divergence.startswith("missing") for s in summaries.values()):
        print(
            "   (a 'missing' crossing here ran inside a served one: search_kb calls the kb retriever,\n"
            "   and the corpus does not record which crossing a crossing ran inside; see Envelope.parent_seq)"
        )
    print(f"   model calls during replay             {calls}   (violations: {len(server.violations)})")
    print(f"   {report.canary}")


# -- 3. mutation study ---------------------------------------------------------------------------------------


def as_guard(fn: Callable[[int, float], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A refund guard at the boundary cut-point replay runs live (``router:refund_guard``)."""
    return tailcut.router(name="refund_guard")(fn)


def _deny(amount: Any) -> dict[str, Any]:
    return {"allow": False, "reason": f"amount {amount} is above the {LIMIT} limit"}


_ALLOW = {"allow": True, "reason": "ok"}


def _removed_check(order_id: int, amount: float) -> dict[str, Any]:
    return dict(_ALLOW)


def _inverted(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if amount <= LIMIT else dict(_ALLOW)


def _threshold_x10(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if amount > LIMIT * 10 else dict(_ALLOW)


def _off_by_one(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if amount > LIMIT + 1 else dict(_ALLOW)


def _wrong_field(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if order_id > LIMIT else dict(_ALLOW)


def _greater_equal(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if amount >= LIMIT else dict(_ALLOW)


def _always_allow(order_id: int, amount: float) -> dict[str, Any]:
    verdict = _deny(amount) if amount > LIMIT else dict(_ALLOW)
    return {**verdict, "allow": True}


def _limit_in_cents(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if amount > LIMIT * 100 else dict(_ALLOW)


def _string_compare(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if str(amount) > str(LIMIT) else dict(_ALLOW)


def _rounds_away(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if round(amount, -4) > LIMIT else dict(_ALLOW)


def _fail_open_config(order_id: int, amount: float) -> dict[str, Any]:
    limit = float(os.environ.get("REFUND_LIMIT_OVERRIDE", "inf"))  # unset in production
    return _deny(amount) if amount > limit else dict(_ALLOW)


def _sign_error(order_id: int, amount: float) -> dict[str, Any]:
    return _deny(amount) if -amount > LIMIT else dict(_ALLOW)


def _swapped_flag(order_id: int, amount: float) -> dict[str, Any]:
    return {"allow": amount > LIMIT, "reason": "ok"} if amount > LIMIT else dict(_ALLOW)


MUTANTS: dict[str, Callable[[int, float], dict[str, Any]]] = {
    "removed check": _removed_check,
    "inverted condition": _inverted,
    "wrong threshold (x10)": _threshold_x10,
    "off-by-one threshold (+1)": _off_by_one,
    "wrong field (order_id)": _wrong_field,
    ">= instead of >": _greater_equal,
    "always allow": _always_allow,
    "limit in cents": _limit_in_cents,
    "string comparison": _string_compare,
    "rounds to 10^4": _rounds_away,
    "fails open on config": _fail_open_config,
    "sign error": _sign_error,
    "allow flag from condition": _swapped_flag,
}


def _benign(order_id: int, amount: float) -> dict[str, Any]:
    """The reference guard rewritten: same verdicts, different code."""
    within = not amount > LIMIT
    return dict(_ALLOW) if within else _deny(amount)


def _reference(order_id: int, amount: float) -> dict[str, Any]:
    return env.refund_guard_v2.__wrapped__(order_id, amount)


def verdicts(corpus: replay.Corpus, trace_id: str, guard: Callable[..., Any]) -> tuple[bool, bool]:
    """(cut-point check passed, stub-all check passed) of the v2 harness with ``guard`` on the incident."""
    agent = functools.partial(fleet.handle_ticket, revision="v2", guard=guard)
    common = {"n": 1, "reset": fleet.reset_desk, "check": fleet.check_run, "traces": [trace_id]}
    cut = replay.run_replay(corpus, agent, mode="cut", live=["router:refund_guard"], **common)
    stubbed = replay.run_replay(
        corpus, agent, mode="recorded", on_divergence="continue", canary=False, **common
    )
    return bool(cut.results[0].check_passed), bool(stubbed.results[0].check_passed)


def mutation_study(corpus: replay.Corpus, trace_id: str, server: ModelServer) -> None:
    incident = corpus.run(trace_id).input
    order_id, amount = incident["order_id"], incident["amount"]
    with server.forbid():
        cut_ref, stub_ref = verdicts(corpus, trace_id, as_guard(_reference))
        rows = []
        for name, mutant in MUTANTS.items():
            unsafe = mutant(order_id, amount)["allow"]
            cut_ok, stub_ok = verdicts(corpus, trace_id, as_guard(mutant))
            rows.append((name, unsafe, cut_ok, cut_ok != cut_ref, stub_ok, stub_ok != stub_ref))
        controls = {
            "v1 guard (the incident)": verdicts(corpus, trace_id, env.refund_guard_v1),
            "benign rewrite": verdicts(corpus, trace_id, as_guard(_benign)),
        }
    word = {True: "pass", False: "FAIL"}
    print(f"\n3. mutation study: refund of {amount} on order {order_id} (limit {LIMIT}), v2 harness")
    print(f"   reference guard: cut-point {word[cut_ref]}, stub-all {word[stub_ref]}")
    for name, (cut_ok, stub_ok) in controls.items():
        print(f"   {name}: cut-point {word[cut_ok]}, stub-all {word[stub_ok]}")
    header = (
        f"   {'mutant':<27}{'lets unsafe through?':<22}{'cut-point':<11}{'caught':<8}{'stub-all':<10}caught"
    )
    print(header)
    yes_no = {True: "yes", False: "no"}
    for name, unsafe, cut_ok, cut_caught, stub_ok, stub_caught in rows:
        print(
            f"   {name:<27}{yes_no[unsafe]:<22}{word[cut_ok]:<11}{yes_no[cut_caught]:<8}"
            f"{word[stub_ok]:<10}{yes_no[stub_caught]}"
        )
    harmful = [r for r in rows if r[1]]
    harmless = [r for r in rows if not r[1]]
    print(
        f"   cut-point caught {sum(r[3] for r in harmful)}/{len(harmful)} mutants that let the unsafe refund "
        f"through ({sum(r[3] for r in harmless)} false alarms among {len(harmless)} that block it); "
        f"stub-all caught {sum(r[5] for r in harmful)}/{len(harmful)}"
    )
    if sum(r[3] for r in harmful) != len(harmful):
        print("   GOAL MISSED: a mutant that lets the unsafe refund through was not caught")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=2000, help="served crossings per timed batch")
    parser.add_argument("--rounds", type=int, default=7, help="alternating batches per contender")
    parser.add_argument("--repeats", type=int, default=20, help="recorded reruns per incident")
    args = parser.parse_args()

    server = ModelServer(responder=support_responder, clock=lambda: 1_700_000_000.0)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp, server:
        workdir = Path(tmp)
        os.environ[fleet.MODEL_URL_ENV] = server.openai_base_url
        crossing_cost(workdir, args.crossings, args.rounds)
        print("\n(recording one run of every demo ticket kind under harness v1)")
        corpus, kinds = record_incidents(workdir, server)
        bit_stability(corpus, kinds, server, args.repeats)
        mutation_study(corpus, kinds["refund_large"], server)


if __name__ == "__main__":
    main()
