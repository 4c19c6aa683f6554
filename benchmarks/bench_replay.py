"""Replay: the cost of a served crossing, bit-stability of recorded replay, a mutation study of six fixes.

Three measurements, in one run (after the Chronicle paper's evaluation, seed ``003_83223cc82ff438b9.txt``):

1. **Per-crossing cost.** A ``@tailcut.tool`` returning a 4 KB payload is recorded 2000 times (distinct
   arguments) into a data dir, exported as a corpus and replayed: the time per served crossing is
   compared with calling the undecorated function, and with the same crossing run live under a session.
2. **Bit-stability.** One run of every demo ticket kind is recorded under harness v1 (the fleet's agent on
   the real ``openai`` SDK against the scripted model server) and replayed 20 times in recorded mode
   while the server forbids requests: each trace's rate, and the model calls the replay made.
3. **Mutation study over six incidents.** For each of the six fixes of harness v2 (the guard, the
   router, the tool schema, the retry policy, the prompt, the returns retriever; one v1 incident each),
   mutants of the fix (removed, inverted, off by one, applied to the wrong case, and benign rewrites) are
   validated with ``tailcut validate`` (cut-point at the incident's finding's boundary, harness v1 as the
   baseline) and replayed with a baseline that stubs every boundary (recorded mode). Whether a mutant lets
   the recorded failure through is decided by running the incident's ticket live with it. A mutant is
   *caught* when the test fails it. The goal: cut-point validation catches every mutant that lets the
   recorded failure through and passes every other (every benign rewrite). Stubbing every boundary
   never runs a fix made at a boundary, so it catches only mutants of harness code that runs between
   boundaries (the retry policy).

Run: ``python benchmarks/bench_replay.py [--crossings N] [--rounds R] [--repeats 20]``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import tailcut
from tailcut import _config, replay
from tailcut.demo import fleet
from tailcut.demo import support_env as env
from tailcut.demo.harness import (
    HARNESSES,
    PROMPT_RULES_V1,
    PROMPT_RULES_V2,
    QUOTE_ORDER_RULE,
    Harness,
    retry_every_error,
    tool_definitions,
)
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
                fleet.reset_desk(ticket)
                env.DESK.outage_probability = 1.0  # the recorded timeout times out every time
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
#
# Each of the six fixes of harness v2 (tailcut.demo.harness) gets mutants: the fix removed, inverted, off by
# one, applied to the wrong case, other plausible slips, and benign rewrites that keep its behaviour. A
# mutant replaces that one component of v2. Whether it lets the recorded failure through is decided by
# running the incident's ticket live with it (every boundary live, the same check): the oracle. Cut-point
# validation (`tailcut validate` at the incident's finding's boundary, harness v1 as the baseline) must
# fail every mutant the oracle fails and pass every one it passes; the stub-every-boundary baseline
# (recorded mode: nothing the fix changed runs) is printed beside it.


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
    return _deny(amount) if order_id > LIMIT * 10 else dict(_ALLOW)


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


def _benign_guard(order_id: int, amount: float) -> dict[str, Any]:
    """v2's guard rewritten: same verdicts, different code."""
    within = not amount > LIMIT
    return dict(_ALLOW) if within else _deny(amount)


def _benign_guard_table(order_id: int, amount: float) -> dict[str, Any]:
    """v2's guard as a lookup: the first rule that matches decides."""
    rules = ((lambda a: a > LIMIT, False), (lambda a: True, True))
    allow = next(verdict for test, verdict in rules if test(amount))
    return dict(_ALLOW) if allow else _deny(amount)


def _router(table: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A ``router:triage`` that routes forms by ``table``."""
    return tailcut.router(name="triage")(lambda form: env.route_form(form, table))


_TOOLS_IN_ORDER = ("cancel_order", "exchange_item", "refund")


@tailcut.router(name="triage")
def _routes_off_by_one(form: dict[str, Any]) -> dict[str, Any]:
    index = {"cancel": 0, "exchange": 1}[form["action"]]
    return env.route_form(form, {form["action"]: _TOOLS_IN_ORDER[index + 1]})


@tailcut.router(name="triage")
def _routes_benign(form: dict[str, Any]) -> dict[str, Any]:
    tool = "exchange_item" if form.get("action") == "exchange" else "cancel_order"
    return env.route_form(form, {str(form.get("action")): tool})


def _tools(shipping: dict[str, Any], *, at: int = 3, base: dict[str, Any] | None = None) -> tuple[dict, ...]:
    """The tool list of a harness showing ``base`` (default: v2's schema) as update_shipping's parameters,
    then ``shipping`` as the parameters of the tool at index ``at`` (3 is update_shipping itself)."""
    tools = [json.loads(json.dumps(t)) for t in tool_definitions(base or env.SHIPPING_SCHEMA_V2)]
    tools[at]["function"]["parameters"] = shipping
    return tuple(tools)


def _shipping_as_string() -> dict[str, Any]:
    schema = json.loads(json.dumps(env.SHIPPING_SCHEMA_V2))
    schema["properties"]["shipping_address"] = {"type": "string"}
    return schema


def _shipping_reordered() -> dict[str, Any]:
    schema = json.loads(json.dumps(env.SHIPPING_SCHEMA_V2))
    schema["properties"] = dict(reversed(schema["properties"].items()))
    schema["description"] = "The shipping service's contract since the address became structured."
    return schema


def _retry_inverted(error: Exception, attempt: int) -> bool:
    return attempt < 3 and not isinstance(error, env.BackendTimeout)


def _retry_off_by_one(error: Exception, attempt: int) -> bool:
    return attempt < (3 if isinstance(error, env.BackendTimeout) else 2)


def _retry_wrong_case(error: Exception, attempt: int) -> bool:
    return attempt < 3 and not isinstance(error, env.ToolArgumentError)


def _retry_benign(error: Exception, attempt: int) -> bool:
    return isinstance(error, TimeoutError) and attempt <= 2


def _prompt(*rules: str) -> str:
    return " ".join(rules)


@tailcut.retriever(name="returns")
def _returns_inverted(rma: str) -> list[dict[str, Any]]:
    """The ledger, but only for returns the replica already has."""
    return env.returns_from_ledger.__wrapped__(rma) if env.returns_from_replica.__wrapped__(rma) else []


@tailcut.retriever(name="returns")
def _returns_off_by_one(rma: str) -> list[dict[str, Any]]:
    """The ledger's returns of ``rma`` but the newest."""
    return env.returns_from_ledger.__wrapped__(rma)[:-1]


@tailcut.retriever(name="returns")
def _returns_wrong_key(rma: str) -> list[dict[str, Any]]:
    """The ledger looked up by the order number instead of the RMA."""
    with env.DESK.lock:
        return [dict(r) for r in env.DESK.returns.values() if r["rma"] == rma.removeprefix("RMA-")]


@tailcut.retriever(name="returns")
def _returns_benign(rma: str) -> list[dict[str, Any]]:
    """The ledger, read through ``get`` rather than a scan."""
    with env.DESK.lock:
        found = env.DESK.returns.get(rma)
    return [dict(found)] if found is not None else []


#: Per fix (the incident kind whose failure it fixes, the harness component): name -> the component.
#: Names starting "benign" are rewrites that keep the fix's behaviour.
MUTANTS: dict[tuple[str, str], dict[str, Any]] = {
    ("refund_large", "guard"): {
        "fix removed (v1's crashing guard)": env.refund_guard_v1,
        "check removed": as_guard(_removed_check),
        "inverted condition": as_guard(_inverted),
        "off-by-one threshold (+1)": as_guard(_off_by_one),
        "wrong case (order id, not amount)": as_guard(_wrong_field),
        "wrong threshold (x10)": as_guard(_threshold_x10),
        ">= instead of >": as_guard(_greater_equal),
        "always allow": as_guard(_always_allow),
        "limit in cents": as_guard(_limit_in_cents),
        "string comparison": as_guard(_string_compare),
        "rounds to 10^4": as_guard(_rounds_away),
        "fails open on config": as_guard(_fail_open_config),
        "sign error": as_guard(_sign_error),
        "allow flag from condition": as_guard(_swapped_flag),
        "benign rewrite": as_guard(_benign_guard),
        "benign rule table": as_guard(_benign_guard_table),
    },
    ("exchange", "triage"): {
        "fix removed (v1's routes)": env.triage_v1,
        "inverted (routes swapped)": _router({"cancel": "exchange_item", "exchange": "cancel_order"}),
        "off by one (next tool in the list)": _routes_off_by_one,
        "wrong case (fix on the cancel route)": _router({"cancel": "exchange_item", "exchange": "refund"}),
        "benign rewrite": _routes_benign,
        "benign table order": _router(dict(reversed(list(env.ROUTES_V2.items())))),
    },
    ("address_change", "tools"): {
        "fix removed (v1's schema shown)": tool_definitions(env.SHIPPING_SCHEMA_V1),
        "inverted (new field, old type)": _tools(_shipping_as_string()),
        "off by one (schema on the next tool)": _tools(
            env.SHIPPING_SCHEMA_V2, at=4, base=env.SHIPPING_SCHEMA_V1
        ),
        "wrong case (new schema on refund)": _tools(
            env.SHIPPING_SCHEMA_V2, at=2, base=env.SHIPPING_SCHEMA_V1
        ),
        "benign rewrite (reordered, described)": _tools(_shipping_reordered()),
    },
    ("cancel_order", "retry"): {
        "fix removed (v1: retry everything)": retry_every_error,
        "inverted (retry only rejections)": _retry_inverted,
        "off by one (one retry of a rejection)": _retry_off_by_one,
        "wrong case (no retry of bad arguments)": _retry_wrong_case,
        "benign rewrite": _retry_benign,
    },
    ("warranty", "prompt"): {
        "fix removed (v1's prompt)": _prompt(*PROMPT_RULES_V1),
        "inverted (never quote it)": _prompt(
            *PROMPT_RULES_V1, "Never quote the order number in warranty answers."
        ),
        "off by one (first rule dropped)": _prompt(*PROMPT_RULES_V2[1:]),
        "wrong case (refund answers)": _prompt(
            *PROMPT_RULES_V1, "Quote the order number in every refund answer."
        ),
        "benign rewrite (rule first)": _prompt(QUOTE_ORDER_RULE, *PROMPT_RULES_V1),
        "benign rewrite (each, not every)": _prompt(
            *PROMPT_RULES_V1, "Quote the order number in each warranty answer."
        ),
    },
    ("return_status", "returns"): {
        "fix removed (v1: the replica)": env.returns_from_replica,
        "inverted (ledger only if replicated)": _returns_inverted,
        "off by one (newest entry dropped)": _returns_off_by_one,
        "wrong case (order number for the RMA)": _returns_wrong_key,
        "benign rewrite": _returns_benign,
    },
}


def harness_agent(harness: Harness) -> Callable[[Any], str]:
    return functools.partial(fleet.handle_ticket, harness=harness)


@dataclass(frozen=True)
class MutantRow:
    kind: str
    component: str
    name: str
    harmful: bool  # the live oracle: the incident's ticket, run live with the mutant, fails the check
    cut_verdict: str  # tailcut validate's verdict at the incident's finding's boundary
    stub_passed: bool  # the check on a recorded replay with every boundary stubbed

    @property
    def cut_caught(self) -> bool:
        return self.cut_verdict != "resolved"

    @property
    def stub_caught(self) -> bool:
        return not self.stub_passed

    @property
    def cut_right(self) -> bool:
        return self.cut_caught == self.harmful


def judge_mutant(
    data: Path, corpus: replay.Corpus, trace_id: str, kind: str, component: str, name: str, value: Any
) -> MutantRow:
    agent = harness_agent(dataclasses.replace(HARNESSES["v2"], **{component: value}))
    common = {
        "n": 1,
        "reset": fleet.reset_desk,
        "check": fleet.check_run,
        "traces": [trace_id],
        "canary": False,
    }
    live = replay.run_replay(corpus, agent, mode="live", **common).results[0]
    validation = replay.validate(
        data,
        agent=agent,
        baseline_agent=fleet.agent_v1,
        incidents=[trace_id],
        check=fleet.check_run,
        reset=fleet.reset_desk,
        n=1,
        golden_size=0,
    )
    stubbed = replay.run_replay(corpus, agent, mode="recorded", on_divergence="continue", **common).results[0]
    return MutantRow(
        kind, component, name, not live.check_passed, validation.verdict, bool(stubbed.check_passed)
    )


def _count(rows: list[MutantRow], attribute: str) -> str:
    return f"{sum(getattr(r, attribute) for r in rows)}/{len(rows)}"


def mutation_study(data: Path, corpus: replay.Corpus, kinds: dict[str, str]) -> None:
    reference = [
        judge_mutant(
            data, corpus, kinds[kind], kind, component, "v2 as is", getattr(HARNESSES["v2"], component)
        )
        for kind, component in MUTANTS
    ]
    rows = [
        judge_mutant(data, corpus, kinds[kind], kind, component, name, value)
        for (kind, component), mutants in MUTANTS.items()
        for name, value in mutants.items()
    ]
    yes = {True: "yes", False: "no"}
    print(
        "\n3. mutation study: each of v2's six fixes mutated, cut-point validation vs stubbing every boundary"
    )
    print(
        f"   {'incident (fix)':<24}{'mutant':<40}{'lets it through':<17}{'cut-point verdict':<30}"
        f"{'caught':<8}{'stub-all':<10}caught"
    )
    for row in [*reference, *rows]:
        stub = "pass" if row.stub_passed else "FAIL"
        print(
            f"   {row.kind + ' (' + row.component + ')':<24}{row.name:<40}{yes[row.harmful]:<17}"
            f"{row.cut_verdict:<30}{yes[row.cut_caught]:<8}{stub:<10}{yes[row.stub_caught]}"
        )
    print(f"\n   {'fix':<24}{'mutants that let it through, caught':<38}{'by stub-all':<13}others passed")
    groups = [(f"{kind} ({component})", [r for r in rows if r.kind == kind]) for kind, component in MUTANTS]
    for name, own in [*groups, ("all six", rows)]:
        harmful = [r for r in own if r.harmful]
        harmless = [r for r in own if not r.harmful]
        passed = sum(not r.cut_caught for r in harmless)
        print(
            f"   {name:<24}{_count(harmful, 'cut_caught'):<38}{_count(harmful, 'stub_caught'):<13}"
            f"{passed}/{len(harmless)}"
        )
    benign = [r for r in rows if r.name.startswith("benign")]
    passed = sum(not r.cut_caught for r in benign)
    print(f"   benign rewrites passed by cut-point validation: {passed}/{len(benign)}")
    print(
        "   (stub-all serves every boundary from the record, so a fix at a boundary never runs; the retry\n"
        "   policy is harness code between boundaries, which runs however much is stubbed)"
    )
    wrong = [r for r in [*reference, *rows] if not r.cut_right]
    if wrong:
        print("   GOAL MISSED: " + "; ".join(f"{r.kind}: {r.name}" for r in wrong))


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
        mutation_study(workdir / "fleet-data", corpus, kinds)


if __name__ == "__main__":
    main()
