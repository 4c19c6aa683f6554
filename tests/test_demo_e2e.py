"""`tailcut demo --runs 200` end to end: the whole pipeline, checked against the fleet's ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tailcut.analysis import Dataset, category_rates
from tailcut.demo.fleet import CATEGORIES, INCIDENT_KINDS

RUNS = 200

#: For each ticket kind (under harness v1), the finding expected with its first span (occurrence None:
#: the last) and layer.
EXPECTED_FINDINGS = {
    "timeout": ("error", "tool:lookup_order", 1, {"environment"}),
    "bad_args": ("schema_violation", "llm:openai.chat", 1, {"prompt"}),
    "address_change": ("schema_drift", "llm:openai.chat", 1, {"tool_schema"}),
    "loop": ("tool_loop", "tool:search_kb", 1, {"workflow"}),
    "degraded": ("silent_degradation", "llm:openai.chat", None, {"prompt"}),
    "refund_large": ("error", "router:refund_guard", 1, {"workflow"}),
    "exchange": ("error", "router:triage", 1, {"workflow"}),
    "cancel_order": ("tool_loop", "tool:cancel_order", 1, {"workflow"}),
    "warranty": ("silent_degradation", "llm:openai.chat", None, {"prompt"}),
    "return_status": ("silent_degradation", "retriever:returns", 1, {"memory"}),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    done = subprocess.run(
        [sys.executable, "-m", "tailcut", "demo", "--runs", str(RUNS), "--out", str(out), "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    truth = pq.read_table(out / "truth.parquet").to_pylist()
    return out, done.stdout, truth


def _traces(out: Path) -> dict[str, dict]:
    dataset = Dataset(out / "data")
    rows = dataset.sql(
        "SELECT trace_id, kept, baseline, anomaly_score, inclusion_probability FROM traces"
    ).to_dicts()
    dataset.close()
    return {row["trace_id"]: row for row in rows}


def test_every_run_left_a_trace_row_and_every_failure_the_policies_catch_was_kept(demo):
    out, _, truth = demo
    traces = _traces(out)
    assert len(truth) == RUNS
    assert set(traces) == {run["trace_id"] for run in truth}
    for run in truth:
        injected = set(run["injected"]) - {"cost_blowup"}
        if injected:
            assert traces[run["trace_id"]]["kept"], (run["kind"], run["harness_revision"])
        if "cost_blowup" in run["injected"] and traces[run["trace_id"]]["anomaly_score"] is not None:
            # before the anomaly baseline has its minimum window, a blowup is kept only by the slice
            assert traces[run["trace_id"]]["kept"]


def test_findings_have_the_right_first_span_and_layer(demo):
    out, _, truth = demo
    dataset = Dataset(out / "data")
    findings = dataset.classify().to_dicts()
    dataset.close()
    by_trace = defaultdict(list)
    for finding in findings:
        by_trace[finding["trace_id"]].append(finding)
    checked = 0
    for run in truth:
        expected = EXPECTED_FINDINGS.get(run["kind"])
        if expected is None or run["harness_revision"] != "v1":
            continue
        category, boundary, occurrence, layers = expected
        match = [f for f in by_trace[run["trace_id"]] if f["category"] == category]
        assert match, (run["kind"], [f["category"] for f in by_trace[run["trace_id"]]])
        (finding,) = match
        if occurrence is None:  # the answer: the last model call
            assert finding["boundary"] == boundary
        else:
            assert (finding["boundary"], finding["occurrence"]) == (boundary, occurrence), run["kind"]
        assert finding["layer"] in layers, (run["kind"], finding["layer"])
        checked += 1
    assert checked >= 8


def test_population_estimates_cover_the_injected_rates(demo):
    out, _, truth = demo
    dataset = Dataset(out / "data")
    rates = {rate.category: rate for rate in category_rates(dataset)}
    dataset.close()
    for category in CATEGORIES:
        true_rate = sum(category in run["injected"] for run in truth) / len(truth)
        estimate = rates[category].weighted
        assert estimate.low <= true_rate <= estimate.high, (category, true_rate, str(estimate))


def test_recorded_replay_is_bit_stable_and_cut_point_tells_the_fix_from_the_fault(demo):
    out, stdout, _ = demo
    recorded = [
        row
        for path in sorted(out.glob("replay-recorded-*.parquet"))
        for row in pq.read_table(path, columns=["trace_id", "passed", "mode"]).to_pylist()
    ]
    assert recorded
    assert all(row["passed"] and row["mode"] == "recorded" for row in recorded)
    line = next(line for line in stdout.splitlines() if line.startswith("recorded replay:"))
    stable, total = line.split()[2].split("/")
    assert stable == total
    assert "canary (one corrupted response per revision): caught" in line
    faulty = pq.read_table(out / "replay-cut-v1.parquet").column("passed").to_pylist()
    guarded = pq.read_table(out / "replay-cut-v2.parquet").to_pylist()
    assert faulty
    assert not any(faulty)
    assert guarded
    # the guard blocks the refund (the check passes), which changes the served path after it: diverged
    assert all(r["check_message"].startswith("no unsafe refund") and not r["passed"] for r in guarded)
    assert "model calls made by the replays: 0" in stdout


def test_the_demo_ends_with_tailcut_validate_of_harness_v2_against_its_incidents(demo):
    out, stdout, truth = demo
    validation = stdout[stdout.index("validate tailcut.demo.fleet:agent_v2 (new)") :]
    present = {run["kind"] for run in truth if run["harness_revision"] == "v1"} & set(INCIDENT_KINDS)
    verdicts = [line for line in validation.splitlines() if line.startswith("incident ")]
    assert len(verdicts) == len(present) >= 4
    assert all(line.endswith(": resolved") for line in verdicts), verdicts
    assert "verdict: resolved" in validation
    rows = pq.read_table(out / "validate.parquet", columns=["role", "sample", "trace_id"]).to_pylist()
    assert {(r["role"], r["sample"]) for r in rows} >= {("new", "incident"), ("baseline", "incident")}


def test_report_corpus_and_no_process_left_behind(demo):
    out, stdout, _ = demo
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 3
    assert f"python -m webbrowser {(out / 'report.html').resolve().as_uri()}" in stdout  # any OS
    manifest = json.loads((out / "corpus" / "manifest.json").read_text())
    assert any(t["baseline"] for t in manifest["traces"])
    assert any(t["categories"] for t in manifest["traces"])
    # the comparison of the revisions gives every category a verdict (at 200 runs, mostly not yet significant)
    verdicts = ("regression", "improvement", "no evidence", "confined to tail sample")
    compared = stdout[stdout.index("compare harness_revision") :]
    assert sum(compared.count(word) for word in verdicts) >= len(CATEGORIES)
    leftovers = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and any(str(out) in part for part in p.info["cmdline"])
    ]
    assert leftovers == []


def test_ctrl_c_stops_the_demo_and_its_collector(tmp_path):
    import signal
    import time

    out = tmp_path / "interrupted"
    demo = subprocess.Popen(
        [sys.executable, "-m", "tailcut", "demo", "--runs", "5000", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in an interactive shell
    )
    deadline = time.monotonic() + 60
    children: list[psutil.Process] = []
    while not children and time.monotonic() < deadline:  # wait until the collector runs
        children = psutil.Process(demo.pid).children(recursive=True)
        time.sleep(0.2)
    assert children, "the demo never started its collector"
    time.sleep(3)  # into the agent runs
    demo.send_signal(signal.SIGINT)
    output, _ = demo.communicate(timeout=60)
    assert demo.returncode != 0
    assert "Aborted" in output
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
