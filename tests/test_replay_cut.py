"""Cut-point replay of the demo's unsafe-refund incident: the guard runs live, the rest is served.

A ``refund_large`` ticket is recorded under harness v1 (the fleet's agent on the real ``openai`` SDK,
against the scripted model server), written into a corpus, and replayed with ``router:refund_guard``
live: v1's guard crashes on the amount, the harness fails open, the recorded unsafe refund goes
through and the check fails; v2's guard blocks
it and the check passes, and so does an equivalent rewrite of the guard, but the blocked refund changes
the path after the guard (served boundaries diverge), so those reruns count as diverged, never as passed.
No model call is made.
"""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

import tailcut
from tailcut import replay
from tailcut.cli import cli
from tailcut.demo import fleet
from tailcut.demo import support_env as env
from tailcut.demo.harness import HARNESSES
from tailcut.demo.support_model import support_responder
from tailcut.testing import ModelServer
from tests.replay_support import record_corpus

TICKET = {
    "ticket_id": 4,
    "kind": "refund_large",
    "customer": "c-12",
    "order_id": 1004,
    "amount": 1250.0,
    "text": "Please refund my order.",
}
GUARD = ["router:refund_guard"]


@tailcut.router(name="refund_guard")
def equivalent_guard(order_id: int, amount: float) -> dict:
    """v2's guard, rewritten: same verdicts, different code."""
    within = not amount > env.REFUND_LIMIT
    reason = "ok" if within else f"amount {amount} is above the {env.REFUND_LIMIT} limit"
    return {"allow": within, "reason": reason}


BENIGN = dataclasses.replace(HARNESSES["v1"], guard=equivalent_guard)


def agent_benign(ticket: dict) -> str:
    """Harness v1 with v2's guard rewritten."""
    return fleet.handle_ticket(ticket, BENIGN)


@pytest.fixture(scope="module")
def server():
    model_server = ModelServer(responder=support_responder, clock=lambda: 1_700_000_000.0)
    with model_server:
        yield model_server


@pytest.fixture(scope="module")
def incident(server, tmp_path_factory):
    """The v1 run of a large refund, recorded live: the unsafe refund went through."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(fleet.MODEL_URL_ENV, server.openai_base_url)
        assert tailcut.instrument_openai() is True
        try:
            fleet.reset_desk(TICKET)
            corpus, (trace_id,) = record_corpus(
                tmp_path_factory.mktemp("incident"), [lambda: fleet.agent_v1(TICKET)]
            )
        finally:
            tailcut.uninstrument_openai()
    assert env.DESK.refunds == [{"order_id": 1004, "amount": 1250.0}]
    return replay.load_corpus(corpus), trace_id


def cut(corpus, agent, n=2):
    return replay.run_replay(
        corpus, agent, mode="cut", live=GUARD, n=n, reset=fleet.reset_desk, check=fleet.check_run
    )


def test_the_incident_is_recorded_with_its_guard_crossing(incident):
    corpus, trace_id = incident
    assert corpus.run(trace_id).outcome == "fail"
    assert [e.key for e in corpus.envelopes(trace_id)] == [
        "memory:customer_history#1",
        "retriever:kb#1",
        "llm:openai.chat#1",
        "tool:lookup_order#1",
        "llm:openai.chat#2",
        "router:refund_guard#1",
        "tool:refund#1",
        "llm:openai.chat#3",
    ]


def test_the_faulty_guard_lets_the_recorded_unsafe_refund_through(incident, server):
    corpus, _ = incident
    with server.forbid():
        report = cut(corpus, fleet.agent_v1)

    assert server.violations == []
    assert [s.rate for s in report.traces()] == ["never 0/2 (cut)"]
    for result in report.results:
        assert result.check_message == "unsafe refund of 1250.0 went through (served from the record)"
        assert (result.rerun.live_counts, result.rerun.served_crossings) == ({"router": 1}, 7)
        assert result.rerun.divergences == ()  # the live guard answered as recorded: nothing changed
    assert env.DESK.refunds == []  # the refund was served, never executed


def test_the_guarded_revision_blocks_it(incident, server):
    corpus, _ = incident
    with server.forbid():
        report = cut(corpus, fleet.agent_v2)

    assert server.violations == []
    assert [s.rate for s in report.traces()] == ["pass 0/2, diverged 2/2 (cut)"]
    assert [r.status for r in report.results] == ["diverged", "diverged"]
    rerun = report.results[0].rerun
    message = report.results[0].check_message
    assert message.startswith("no unsafe refund") and "; diverged: request differs" in message
    assert "tool:refund" not in [c.boundary for c in rerun.crossings]
    upstream = [d for d in rerun.divergences if not d.expected]
    downstream = [(d.kind, d.boundary, d.downstream_of) for d in rerun.divergences if d.expected]
    # v2 also changed the prompt and the shipping tool's schema: every model request differs before the
    # cut (reported)
    assert {d.boundary for d in upstream} == {"llm:openai.chat"}
    changed = ("$.messages[0].content", "$.tools[3].function.parameters")
    assert all(p.startswith(changed) for d in upstream for p in d.paths)
    assert downstream == [
        ("request", "llm:openai.chat", "router:refund_guard#1"),
        ("missing", "tool:refund", "router:refund_guard#1"),
    ]


def test_a_benign_rewrite_of_the_guard_blocks_it_too(incident, server):
    corpus, _ = incident
    with server.forbid():
        report = cut(corpus, agent_benign)
    assert [s.rate for s in report.traces()] == ["pass 0/2, diverged 2/2 (cut)"]
    assert all(r.check_message.startswith("no unsafe refund") for r in report.results)
    assert server.violations == []


def test_stubbing_every_boundary_cannot_tell_the_fix_from_the_fault(incident, server):
    corpus, _ = incident
    with server.forbid():
        verdicts = {
            agent: replay.run_replay(
                corpus, agent, n=1, check=fleet.check_run, on_divergence="continue", canary=False
            ).results[0]
            for agent in (fleet.agent_v1, fleet.agent_v2)
        }
    # the guard never runs, so the check has no guard decision to judge: both pass it alike
    assert [r.check_passed for r in verdicts.values()] == [True, True]
    assert all(r.rerun.live_crossings == 0 for r in verdicts.values())


def test_cut_point_replay_from_the_command_line(incident, server, tmp_path):
    corpus, _ = incident
    common = [
        "replay",
        str(corpus.path),
        "--mode",
        "cut",
        "--live",
        "router:refund_guard",
        "-n",
        "2",
        "--reset",
        "tailcut.demo.fleet:reset_desk",
        "--check",
        "tailcut.demo.fleet:check_run",
    ]
    with server.forbid():
        faulty = CliRunner().invoke(cli, [*common, "--agent", "tailcut.demo.fleet:agent_v1"])
        fixed = CliRunner().invoke(cli, [*common, "--agent", "tailcut.demo.fleet:agent_v2"])
        benign = CliRunner().invoke(cli, [*common, "--agent", "tests.test_replay_cut:agent_benign"])

    assert (faulty.exit_code, fixed.exit_code, benign.exit_code) == (1, 1, 1), fixed.output
    assert "never 0/2 (cut)" in faulty.output
    assert "pass 0/2, diverged 2/2 (cut)" in fixed.output
    assert "pass 0/2, diverged 2/2 (cut)" in benign.output
    assert server.violations == []
    with server.forbid():
        reported = CliRunner().invoke(cli, [*common, "--no-strict", "--agent", "tailcut.demo.fleet:agent_v2"])
    assert reported.exit_code == 0, reported.output
    assert "pass 0/2, diverged 2/2 (cut)" in reported.output


def test_a_live_boundary_the_corpus_does_not_have_is_refused(incident):
    corpus, _ = incident
    typo = ["--mode", "cut", "--live", "router:refund_gaurd"]
    result = CliRunner().invoke(
        cli, ["replay", str(corpus.path), "--agent", "tailcut.demo.fleet:agent_v2", *typo]
    )
    assert result.exit_code == 2
    assert result.output.startswith("Error: live boundary router:refund_gaurd is in no run of the corpus")
    assert "Traceback" not in result.output
