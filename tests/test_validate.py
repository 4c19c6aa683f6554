"""`tailcut validate` through the CLI on the demo's six incidents.

The test data is built once for the module: one harness-v1 run of each incident kind the demo's v2
harness fixes, and clean runs of other kinds under both revisions, recorded by the real ``openai`` SDK
against the scripted model server into a data dir (the embedded exporter), then sampled as the collector
would keep it (every incident kept, the clean runs in the baseline slice, one clean run dropped).
Cuts at an ``llm`` boundary run the scripted model live; the server stays up for the module.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

import tailcut
from tailcut import replay
from tailcut.cli import cli
from tailcut.demo import fleet
from tailcut.demo import support_env as env
from tailcut.demo.harness import HARNESSES
from tailcut.demo.support_model import support_responder
from tailcut.replay import ReplayMode, Rerun
from tailcut.replay._rerun import RerunResult
from tailcut.replay._validate import GoldenResult, IncidentResult, Reruns, path_changes
from tailcut.testing import ModelServer
from tests.analysis_support import tail_sample
from tests.replay_support import recording_into, trace_ids

#: The boundary each incident kind's finding points at: the cut ``tailcut validate`` makes by default.
CUTS = {
    "refund_large": "router:refund_guard",
    "exchange": "router:triage",
    "address_change": "llm:openai.chat",
    "cancel_order": "tool:cancel_order",
    "warranty": "llm:openai.chat",
    "return_status": "retriever:returns",
}
#: Clean runs in the baseline slice (the golden candidates), by kind and revision.
GOLDEN = [
    ("faq", "v1"),
    ("faq", "v2"),
    ("order_status", "v1"),
    ("refund_small", "v1"),
    ("refund_small", "v2"),
    ("address_change", "v2"),
    ("bad_args", "v2"),
    ("warranty", "v2"),
    ("address_change", "v1"),  # another run of an incident kind: the fix changes its path
]
#: One rerun per agent, no golden slice, JSON: the quick look at the incidents alone.
QUICK_JSON = ["-n", "1", "--golden-size", "0", "--format", "json"]
COMMON = [
    "--agent",
    "tailcut.demo.fleet:agent_v2",
    "--baseline-agent",
    "tailcut.demo.fleet:agent_v1",
    "--check",
    "tailcut.demo.fleet:check_run",
    "--reset",
    "tailcut.demo.fleet:reset_desk",
]


@tailcut.router(name="refund_guard")
def deny_every_refund(order_id: int, amount: float) -> dict:
    """A guard that blocks the unsafe refund, and every other refund too."""
    return {"allow": False, "reason": "every refund needs a human"}


STRICT = dataclasses.replace(HARNESSES["v2"], guard=deny_every_refund)


def agent_v2_strict(ticket: dict) -> str:
    """Harness v2 with a guard that also escalates the small refunds it should allow."""
    return fleet.handle_ticket(ticket, STRICT)


@dataclasses.dataclass(frozen=True)
class Fleet:
    data: Path
    kinds: dict[str, tuple[str, str]]  # trace id -> (kind, revision)
    incidents: dict[str, str]  # trace id -> kind, in the order they were recorded
    golden: set[str]
    server: ModelServer

    def ids(self, kind: str, revision: str = "v1") -> list[str]:
        """The incident of ``kind`` first (under v1), then the golden runs of it."""
        return [t for t, found in self.kinds.items() if found == (kind, revision)]

    def incident_args(self) -> list[str]:
        return [arg for trace_id in self.incidents for arg in ("--incident", trace_id)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tickets: dict[str, list[dict]] = {}
    for ticket, _ in fleet.make_tickets(800, seed=11):
        tickets.setdefault(ticket["kind"], []).append(ticket)
    runs = [(tickets[kind][0], "v1") for kind in fleet.INCIDENT_KINDS]
    runs += [(tickets[kind][1], revision) for kind, revision in GOLDEN]
    runs += [(tickets["order_status"][2], "v2")]  # clean, and not in the baseline slice: dropped
    root = tmp_path_factory.mktemp("validate")
    server = ModelServer(responder=support_responder, clock=lambda: 1_700_000_000.0)
    with server, pytest.MonkeyPatch.context() as patch:
        patch.setenv(fleet.MODEL_URL_ENV, server.openai_base_url)
        assert tailcut.instrument_openai() is True
        try:
            with recording_into(root / "recorded"):
                for ticket, revision in runs:
                    fleet.reset_desk(ticket)
                    env.DESK.outage_probability = 1.0
                    try:
                        fleet.handle_ticket(ticket, HARNESSES[revision])
                    except Exception:
                        pass  # a run that fails is an incident like any other
        finally:
            tailcut.uninstrument_openai()
        ids = trace_ids(root / "recorded")
        kinds = {t: (ticket["kind"], revision) for t, (ticket, revision) in zip(ids, runs, strict=True)}
        incidents = dict(zip(ids, fleet.INCIDENT_KINDS, strict=False))
        golden = set(ids[len(incidents) : len(incidents) + len(GOLDEN)])
        tail_sample(root / "recorded", root / "data", set(incidents), 0.5, member=golden.__contains__)
        yield Fleet(root / "data", kinds, incidents, golden, server)


def validate(recorded: Fleet, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["validate", "--data", str(recorded.data), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def resolved(recorded, tmp_path_factory):
    """The v2 harness validated against the six incidents, as JSON, with its results file."""
    out = tmp_path_factory.mktemp("resolved") / "validate.parquet"
    code, stdout, _ = validate(
        recorded, *recorded.incident_args(), *COMMON, "-n", "2", "--format", "json", "--out", str(out)
    )
    return code, json.loads(stdout), out


def test_the_v2_harness_resolves_all_six_incidents_and_breaks_nothing(recorded, resolved):
    code, report, _ = resolved
    assert (code, report["verdict"], report["exit_code"]) == (0, "resolved", 0)
    for incident in report["incidents"]:
        kind = recorded.incidents[incident["trace_id"]]
        assert incident["verdict"] == "resolved", (kind, incident)
        assert (incident["cut"], incident["cut_from"]) == ([CUTS[kind]], "finding"), kind
        assert incident["finding"]["boundary"] == CUTS[kind]
        assert incident["new"]["rate"] == "always 2/2 (cut)"
        assert incident["baseline"]["rate"] == "never 0/2 (cut)"
        assert incident["baseline"]["first_failure"]  # the check says what the old code did wrong
    assert [i["trace_id"] for i in report["incidents"]] == list(recorded.incidents)
    golden = report["golden"]
    assert {g["trace_id"] for g in golden["list"]} == recorded.golden
    assert (golden["traces"], golden["broken"]) == (len(GOLDEN), 0)
    assert golden["source"] == f"{len(GOLDEN)} baseline-slice traces (seed 0)"
    assert set(golden["cut"]) == {"router:refund_guard", "llm:openai.chat"}  # the golden runs cross no other
    statuses = {g["trace_id"]: g["status"] for g in golden["list"]}
    # the old harness shows v2's address change the old shipping schema and drops the warranty rule: the
    # fix fixes them; v1's own address change fails under the old harness, and the fix changes its path
    assert statuses.pop(recorded.ids("address_change", "v2")[0]) == "fixed"
    assert statuses.pop(recorded.ids("warranty", "v2")[0]) == "fixed"
    changed = next(g for g in golden["list"] if g["trace_id"] == recorded.ids("address_change")[1])
    assert (statuses.pop(changed["trace_id"]), changed["new"]["diverged"]) == ("fixed", 2)
    assert set(statuses.values()) == {"unchanged"}


def test_the_json_keys_are_as_documented(resolved):
    _, report, out = resolved
    assert set(report) == {
        "verdict",
        "exit_code",
        "agent",
        "baseline_agent",
        "check",
        "reruns_per_trace",
        "estimated_cost",
        "live_model_calls",
        "incidents",
        "golden",
        "results_file",
    }
    assert set(report["incidents"][0]) == {
        "trace_id",
        "label",
        "verdict",
        "cut",
        "cut_from",
        "finding",
        "new",
        "baseline",
    }
    assert set(report["incidents"][0]["finding"]) == {
        "category",
        "boundary",
        "occurrence",
        "layer",
        "evidence",
    }
    side = {"rate", "mode", "reruns", "passed", "diverged", "pass_rate", "first_failure", "first_divergence"}
    assert set(report["incidents"][0]["new"]) == side
    assert set(report["golden"]) == {"source", "cut", "traces", "broken", "list"}
    assert set(report["golden"]["list"][0]) == {
        "trace_id",
        "label",
        "status",
        "reason",
        "first_divergence",
        "new",
        "baseline",
    }
    assert set(report["estimated_cost"]) == {
        "usd",
        "calls",
        "input_tokens",
        "output_tokens",
        "unpriced_models",
        "max_cost",
    }
    assert report["estimated_cost"]["unpriced_models"] == [fleet.MODEL]  # the scripted model has no price
    assert report["estimated_cost"]["calls"] > 0 and report["live_model_calls"] > 0
    assert (report["agent"], report["reruns_per_trace"]) == ("tailcut.demo.fleet:agent_v2", 2)
    assert report["results_file"] == str(out)


def test_the_table_says_each_verdict_and_rate(recorded):
    (trace_id,) = recorded.ids("refund_large")
    code, stdout, stderr = validate(
        recorded, "--incident", trace_id, *COMMON, "-n", "1", "--golden-size", "0"
    )
    assert code == 0, stderr
    assert stdout.splitlines() == [
        "validate tailcut.demo.fleet:agent_v2 (new) against tailcut.demo.fleet:agent_v1 (baseline): "
        "1 incident(s), 1 rerun(s) each per agent",
        "  check: tailcut.demo.fleet:check_run",
        f"incident {trace_id}: resolved",
        "  cut at router:refund_guard (from its finding: error at router:refund_guard#1 (layer workflow))",
        "  new (must pass)      always 1/1 (cut)      passes; the path diverged in 1/1 (reported, not a "
        "failure)",
        "  baseline (must fail) never 0/1 (cut)       fails: unsafe refund of 1419.16 went through (served "
        "from the record)",
        "golden slice: none (--golden-size 0): no unrelated behaviour checked",
        "verdict: resolved",
    ]


def test_the_old_harness_as_the_new_one_is_not_resolved(recorded):
    args = [
        *recorded.incident_args(),
        *COMMON,
        *QUICK_JSON,
    ]
    args[args.index("tailcut.demo.fleet:agent_v2")] = "tailcut.demo.fleet:agent_v1"
    code, stdout, _ = validate(recorded, *args)
    report = json.loads(stdout)
    assert (code, report["verdict"]) == (1, "not resolved")
    assert {i["verdict"] for i in report["incidents"]} == {"not resolved"}
    assert all(i["new"]["rate"] == "never 0/1 (cut)" for i in report["incidents"])


def test_a_fix_that_also_breaks_an_unrelated_kind_lists_what_it_broke(recorded):
    args = [*recorded.incident_args(), *COMMON, "-n", "1", "--format", "json"]
    args[args.index("tailcut.demo.fleet:agent_v2")] = "tests.test_validate:agent_v2_strict"
    code, stdout, _ = validate(recorded, *args)
    report = json.loads(stdout)
    small_refunds = set(recorded.ids("refund_small", "v1") + recorded.ids("refund_small", "v2"))
    assert (code, report["verdict"]) == (1, f"resolved, but breaks 2 of {len(GOLDEN)} unrelated")
    assert {i["verdict"] for i in report["incidents"]} == {"resolved"}  # it does block the unsafe refund
    broken = [g for g in report["golden"]["list"] if g["status"] == "broken"]
    assert {g["trace_id"] for g in broken} == small_refunds
    for trace in broken:
        # the small refund is escalated: the recorded refund is never sent, which the old harness did
        assert trace["reason"].startswith("diverges after the cut where the baseline agent did not: ")
        assert "missing boundary tool:refund#1" in trace["reason"]
        assert trace["first_divergence"].startswith("missing boundary tool:refund#1")
    code, stdout, _ = validate(recorded, *args[: args.index("--format")])
    assert code == 1
    assert f"  2 of {len(GOLDEN)} broken;" in stdout
    assert sum(line.startswith("  broken ") for line in stdout.splitlines()) == 2


def test_a_harness_that_differs_before_the_cut_too_breaks_nothing_it_did_not_change(recorded):
    """Cut at the guard alone, the model calls are served: v2's prompt differs from every recorded request,
    before the guard and after it. v2's guard also words its verdict on a small refund otherwise, so the
    requests after it count as downstream of it; they differ only as the ones before it do."""
    (refund,) = recorded.ids("refund_large")
    code, stdout, _ = validate(recorded, "--incident", refund, *COMMON, "-n", "1", "--format", "json")
    report = json.loads(stdout)
    assert (code, report["verdict"], report["golden"]["cut"]) == (0, "resolved", ["router:refund_guard"])
    validation = replay.validate(
        recorded.data,
        incidents=[refund],
        agent=fleet.agent_v2,
        baseline_agent=fleet.agent_v1,
        check=fleet.check_run,
        reset=fleet.reset_desk,
        n=1,
    )
    small = next(g for g in validation.golden if g.trace_id == recorded.ids("refund_small")[0])
    (result,) = small.new.results
    after = [d for d in result.rerun.divergences if d.expected]
    assert after and all(d.downstream_of == "router:refund_guard#1" for d in after)
    assert (small.status, path_changes(result.rerun)) == ("unchanged", {})


def test_a_cut_at_a_boundary_the_fix_does_not_touch_does_not_exercise_the_change(recorded):
    (trace_id,) = recorded.ids("refund_large")
    code, stdout, _ = validate(
        recorded,
        "--incident",
        trace_id,
        "--live",
        "memory:customer_history",
        *COMMON,
        *QUICK_JSON,
    )
    report = json.loads(stdout)
    assert (code, report["verdict"]) == (1, "does not exercise the change")
    (incident,) = report["incidents"]
    assert (incident["cut"], incident["cut_from"]) == (["memory:customer_history"], "--live")
    # the guard was served: both agents let the recorded refund through, the check judges neither
    assert incident["baseline"]["rate"] == incident["new"]["rate"] == "always 1/1 (cut)"


def test_max_cost_refuses_before_any_model_call(recorded, tmp_path, monkeypatch):
    (warranty,) = recorded.ids("warranty")
    args = ["--incident", warranty, *COMMON, "-n", "2", "--golden-size", "0", "--format", "json"]
    before = recorded.server.request_count
    code, stdout, stderr = validate(recorded, *args, "--max-cost", "100")
    assert code == 2
    assert json.loads(stdout) == {
        "error": "refusing to start: the live model calls are estimated at unknown (4 calls), "
        "over --max-cost 100"
    }
    assert f"{fleet.MODEL} has no price in pricing.toml" in stderr
    pricing = tmp_path / "prices.toml"
    pricing.write_text(f'[models."{fleet.MODEL}"]\ninput = 2.0\noutput = 8.0\n')
    monkeypatch.setenv("TAILCUT_PRICING", str(pricing))
    code, stdout, stderr = validate(recorded, *args, "--max-cost", "0.0001")
    assert code == 2
    assert json.loads(stdout)["error"].startswith(
        "refusing to start: the live model calls are estimated at $"
    )
    assert recorded.server.request_count == before  # nothing ran
    code, stdout, stderr = validate(recorded, *args, "--max-cost", "1")
    report = json.loads(stdout)
    assert code == 0, report
    # one model call per rerun, 2 reruns per agent: 4 calls at the recorded call's tokens
    assert report["estimated_cost"]["calls"] == 4 == report["live_model_calls"]
    assert report["estimated_cost"]["usd"] == pytest.approx(
        (report["estimated_cost"]["input_tokens"] * 2.0 + report["estimated_cost"]["output_tokens"] * 8.0)
        / 1e6
    )
    assert report["estimated_cost"]["max_cost"] == 1
    assert stderr.startswith("estimated cost of the live model calls: $")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--incident", "f" * 32], "incident ffffffffffffffffffffffffffffffff is not in"),
        (["--incident", "not-a-trace"], "--incident 'not-a-trace' is not a trace id (32 hex characters)"),
        ([], "name the incidents: --incident TRACE_ID (repeatable) or --corpus INCIDENTS"),
        (
            ["--incident", "0" * 32, "--golden", "g", "--golden-size", "3"],
            "give --golden CORPUS or --golden-size",
        ),
    ],
)
def test_what_cannot_run_exits_2_with_one_line(recorded, args, error):
    code, stdout, stderr = validate(recorded, *args, *COMMON, "--format", "json")
    assert code == 2
    assert json.loads(stdout)["error"].startswith(error)
    code, stdout, stderr = validate(recorded, *args, *COMMON)
    assert (code, stdout) == (2, "")
    assert stderr.startswith(f"Error: {error}") and stderr.count("\n") == 1
    assert "Traceback" not in stderr


def test_an_incident_that_was_dropped_or_has_no_finding_cannot_run(recorded):
    (dropped,) = recorded.ids("order_status", "v2")
    code, stdout, _ = validate(recorded, "--incident", dropped, *COMMON, "--format", "json")
    assert (code, json.loads(stdout)) == (
        2,
        {"error": f"incident {dropped} was not kept (its spans were dropped): nothing to replay"},
    )
    (clean,) = recorded.ids("faq", "v1")
    code, stdout, _ = validate(recorded, "--incident", clean, *COMMON, "--format", "json")
    assert code == 2
    assert json.loads(stdout)["error"] == (
        f"incident {clean} has no finding to take the cut from: name the boundary with --live"
    )


def test_an_incident_corpus_can_be_given_instead_of_trace_ids(recorded, tmp_path):
    from tailcut.exporters.corpus import Selection, write_corpus

    chosen = recorded.ids("cancel_order") + recorded.ids("exchange")
    write_corpus(recorded.data, [Selection(t, "incident") for t in chosen], tmp_path / "incidents")
    code, stdout, _ = validate(
        recorded,
        "--corpus",
        str(tmp_path / "incidents"),
        *COMMON,
        *QUICK_JSON,
    )
    report = json.loads(stdout)
    assert code == 0, report
    assert [(i["trace_id"], i["cut"]) for i in report["incidents"]] == [
        (chosen[0], ["tool:cancel_order"]),
        (chosen[1], ["router:triage"]),
    ]


def test_the_results_file_opens_in_compare_and_the_viewer(recorded, resolved):
    _, _, out = resolved
    rows = pq.read_table(out).to_pylist()
    assert {(r["role"], r["sample"]) for r in rows} == {
        ("new", "incident"),
        ("baseline", "incident"),
        ("new", "golden"),
        ("baseline", "golden"),
    }
    assert len(rows) == 2 * 2 * (6 + len(GOLDEN))
    compared = CliRunner().invoke(cli, ["compare", "--results", str(out), str(out), "--format", "json"])
    samples = {s["sample"]: s for s in json.loads(compared.stdout)["samples"]}
    assert (samples["incident corpus"]["fixed"], samples["incident corpus"]["broken"]) == (6, 0)
    assert samples["baseline slice"]["broken"] == 0

    from tailcut.ui import Viewer, create_app

    viewer = Viewer(recorded.data, results=[out])
    try:
        client = TestClient(create_app(viewer))
        page = client.get("/replays").text
        assert "Validation of <code>tailcut.demo.fleet:agent_v2</code>" in page and "resolved" in page
        (refund,) = recorded.ids("refund_large")
        incident = client.get(f"/replays/{out.name}/incidents/{refund}")
        assert incident.status_code == 200
        text = incident.text
        assert "always 2/2 (cut)" in text and "never 0/2 (cut)" in text
        assert "router:refund_guard" in text and "Golden slice" in text
        assert all(trace_id in text for trace_id in recorded.golden)
        assert client.get(f"/replays/{out.name}/incidents/{'0' * 32}").status_code == 404
        trace = client.get(f"/traces/{refund}").text
        assert f'href="/replays/{out.name}/incidents/{refund}"' in trace
    finally:
        viewer.close()


# -- the verdicts, from reruns judged by a check ------------------------------------------------------------


def _reruns(role: str, passes: list[bool]) -> Reruns:
    results = tuple(
        RerunResult(
            Rerun("t", ReplayMode.CUT, i + 1, None, None, None, (), (), None, None),
            passed,
            "ok" if passed else "the check failed",
            check_passed=passed,
        )
        for i, passed in enumerate(passes)
    )
    return Reruns(role, ReplayMode.CUT, results)  # type: ignore[arg-type]


@given(
    new=st.lists(st.booleans(), min_size=1, max_size=4), old=st.lists(st.booleans(), min_size=1, max_size=4)
)
def test_an_incident_is_resolved_only_when_every_new_rerun_passes_and_every_old_one_fails(new, old):
    incident = IncidentResult(
        "t", "", ("router:x",), "finding", None, _reruns("new", new), _reruns("baseline", old)
    )
    if any(old):
        assert incident.verdict == "does not exercise the change"
    elif all(new):
        assert incident.verdict == "resolved"
    else:
        assert incident.verdict == "not resolved"


@given(
    new=st.lists(st.booleans(), min_size=1, max_size=4), old=st.lists(st.booleans(), min_size=1, max_size=4)
)
def test_a_golden_trace_is_broken_when_the_new_agent_fails_where_the_old_one_passed(new, old):
    trace = GoldenResult("t", "", _reruns("new", new), _reruns("baseline", old))
    expected = {
        (True, True): "unchanged",
        (True, False): "fixed",
        (False, True): "broken",
        (False, False): "fails with both",
    }[all(new), all(old)]
    assert trace.status == expected
    assert (trace.reason is not None) == (expected == "broken")
