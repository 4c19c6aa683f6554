"""The replay runner and ``tailcut replay``: live counting, reset hooks, honest rates, the results file,
Ctrl-C, the canary, and one-line errors."""

from __future__ import annotations

import itertools
import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tailcut
from tailcut import _config, replay
from tailcut.cli import cli
from tailcut.exporters import schema
from tailcut.exporters.corpus import Selection, write_corpus
from tailcut.interceptor import active_interceptor
from tailcut.replay import _records as replay_output
from tests.replay_support import record_corpus

CALLS: list[str] = []
INTERRUPT_ON = {"call": 0}
_calls_made = itertools.count(1)


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict:
    CALLS.append("lookup")
    return {"order_id": order_id, "amount": 120.0}


@tailcut.tool(name="refund")
def refund(order_id: int, amount: float) -> dict:
    CALLS.append("refund")
    return {"order_id": order_id, "refunded": amount}


def shop(order: dict) -> dict:
    with tailcut.run("shop", input=order, harness_revision="h-7") as run:
        found = lookup(order["order_id"])
        done = refund(found["order_id"], found["amount"])
        run.set_outcome("pass")
        return done


def shop_ignoring_the_record(order: dict) -> dict:
    """Calls the same boundaries but never reads what lookup returns (it assumes the amount)."""
    with tailcut.run("shop", input=order, harness_revision="h-7") as run:
        lookup(order["order_id"])
        done = refund(order["order_id"], 120.0)
        run.set_outcome("pass")
        return done


def shop_uninstrumented(order: dict) -> dict:
    """Runs the same logic through undecorated functions: no boundary is ever crossed."""
    with tailcut.run("shop", input=order) as run:
        found = lookup.__wrapped__(order["order_id"])
        done = refund.__wrapped__(found["order_id"], found["amount"])
        run.set_outcome("pass")
        return done


def shop_interrupted(order: dict) -> dict:
    """Pressing Ctrl-C during the n-th rerun (``INTERRUPT_ON``) looks like this to the runner."""
    if next(_calls_made) == INTERRUPT_ON["call"]:
        raise KeyboardInterrupt
    return shop(order)


def passes_on_1_4_7(rerun: replay.Rerun) -> tuple[bool, str]:
    return rerun.index in (1, 4, 7), f"rerun {rerun.index}"


def always_passes(rerun: replay.Rerun) -> bool:
    return True


def never_passes(rerun: replay.Rerun) -> bool:
    assert rerun.live_crossings == 0, f"{rerun.live_crossings} live crossings"
    return True


@pytest.fixture(autouse=True)
def _clear():
    CALLS.clear()


@pytest.fixture
def corpus(tmp_path):
    path, (trace_id,) = record_corpus(tmp_path, [lambda: shop({"order_id": 7})])
    CALLS.clear()
    return replay.load_corpus(path), trace_id


# -- live mode -----------------------------------------------------------------------------------------------


def test_live_reruns_run_every_boundary_and_count_them_per_kind(corpus):
    loaded, _ = corpus
    report = replay.run_replay(loaded, shop, mode="live", n=3)

    assert CALLS == ["lookup", "refund"] * 3
    assert [(r.rerun.live_counts, r.rerun.served_crossings) for r in report.results] == [({"tool": 2}, 0)] * 3
    assert [s.rate for s in report.traces()] == ["always 3/3 (live)"]
    assert report.canary is None  # the canary is on by default in recorded mode only
    assert "NOT LIVE" not in "\n".join(report.summary_lines())


def test_a_live_rerun_that_crossed_no_boundary_is_flagged_not_live(corpus):
    loaded, _ = corpus
    report = replay.run_replay(loaded, shop_uninstrumented, mode="live", n=2)

    assert CALLS == ["lookup", "refund"] * 2  # the work happened, but nothing tailcut could count
    (summary,) = report.traces()
    assert summary.not_live and all(r.rerun.not_live for r in report.results)
    assert summary.line().endswith("NOT LIVE: no live crossing was made")


# -- hooks ---------------------------------------------------------------------------------------------------


def test_the_reset_hook_runs_before_every_rerun_with_the_input_if_it_takes_one(corpus):
    loaded, _ = corpus
    seen: list[object] = []

    def reset_with_input(order):
        seen.append(("with", order, list(CALLS)))

    def reset_without_input():
        seen.append("without")

    replay.run_replay(loaded, shop, mode="live", n=3, reset=reset_with_input)
    assert seen == [
        ("with", {"order_id": 7}, []),
        ("with", {"order_id": 7}, ["lookup", "refund"]),
        ("with", {"order_id": 7}, ["lookup", "refund"] * 2),
    ]
    seen.clear()
    replay.run_replay(loaded, shop, n=2, reset=reset_without_input)  # recorded: + canary's two reruns
    assert seen == ["without"] * 4


def test_a_failing_reset_hook_stops_the_replay_and_keeps_finished_results(corpus, tmp_path):
    loaded, trace_id = corpus
    resets = itertools.count(1)

    def reset():
        if next(resets) == 3:
            raise RuntimeError("desk unavailable")

    out = tmp_path / "results.parquet"
    with pytest.raises(tailcut.TailcutError, match=f"reset hook failed before rerun 3 of trace {trace_id}"):
        replay.run_replay(loaded, shop, mode="live", n=5, reset=reset, out=out)
    assert pq.read_table(out).num_rows == 2


# -- rates, words and the results file -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "rate", "interval", "status", "why"),
    [
        ("passes_on_1_4_7", "intermittent 3/10 (live)", "[0.11, 0.60]", 1, "rerun 2"),
        ("always_passes", "always 10/10 (live)", "[0.72, 1.00]", 0, None),
        ("never_passes", "never 0/10 (live)", "[0.00, 0.28]", 1, "2 live crossings"),
    ],
)
def test_the_summary_gives_each_trace_a_rate_with_its_denominator_mode_and_interval(
    corpus, tmp_path, check, rate, interval, status, why
):
    loaded, trace_id = corpus
    out = tmp_path / "results.parquet"
    args = ["replay", str(loaded.path), "--agent", "tests.test_replay_runner:shop", "--mode", "live"]
    result = CliRunner().invoke(
        cli, [*args, "-n", "10", "--check", f"tests.test_replay_runner:{check}", "--out", str(out)]
    )

    assert result.exit_code == status, result.output  # any failed rerun fails the command
    header = "1 trace(s), 10 rerun(s) each, live mode (rate, then its 95% Wilson interval)"
    lines = result.output.splitlines()
    if why is not None:  # the first failed rerun says why (the check's message, pytest adds its own)
        assert lines.pop(2).startswith(f"    first failure: {why}")
    assert lines == [
        f"replay of {loaded.path}: {header}",
        f"  {trace_id}  {rate:<28}  {interval}",
        f"results: {out} (10 rows)",
    ]


def shop_offline(order: dict) -> dict:
    """A live rerun whose model endpoint cannot be reached."""
    raise ConnectionError("Connection error: [Errno 111] Connection refused")


def test_a_failed_rerun_says_why_in_the_terminal_not_only_in_the_results_file(corpus):
    loaded, _ = corpus
    args = ["replay", str(loaded.path), "--agent", "tests.test_replay_runner:shop_offline", "--mode", "live"]
    result = CliRunner().invoke(cli, [*args, "-n", "2"])
    assert result.exit_code == 1, result.output
    assert "    first failure: ConnectionError: Connection error: [Errno 111] Connection refused" in (
        result.output.splitlines()
    )
    as_json = CliRunner().invoke(cli, [*args, "-n", "1", "--format", "json"])
    (trace,) = json.loads(as_json.output)["traces"]
    assert trace["first_failure"].startswith("ConnectionError: Connection error")


def test_recorded_replays_that_repeat_exactly_are_bit_stable(corpus):
    loaded, _ = corpus
    report = replay.run_replay(loaded, shop, n=5)
    assert [s.rate for s in report.traces()] == ["bit-stable 5/5 (recorded)"]
    assert CALLS == []
    single = replay.run_replay(loaded, shop, n=1, canary=False)
    assert [s.rate for s in single.traces()] == ["always 1/1 (recorded)"]  # one run shows no stability


def test_a_recorded_rerun_that_diverged_never_passes_even_when_served_to_the_end(corpus):
    loaded, _ = corpus

    def overpaying(order):
        with tailcut.run("shop", input=order) as run:
            done = refund(lookup(order["order_id"])["order_id"], 121.0)
            run.set_outcome("pass")
            return done

    report = replay.run_replay(loaded, overpaying, n=1, on_divergence="continue", canary=False)
    (result,) = report.results
    assert result.rerun.outcome == "pass" and result.rerun.stopped_by is None
    assert not result.passed
    assert result.check_message == (
        "outcome pass reproduced; diverged: "
        "request differs at tool:refund#1 (seq 2): $.amount: 120.0 -> 121.0"
    )


def test_the_results_file_follows_the_replay_results_schema(corpus, tmp_path):
    loaded, trace_id = corpus

    def changed(order):
        with tailcut.run("shop", input=order, harness_revision="h-8"):
            return refund(order["order_id"], 99.0)

    out = tmp_path / "results.parquet"
    replay.run_replay(loaded, changed, n=2, out=out, canary=False)

    table = pq.read_table(out)
    assert table.schema.equals(schema.REPLAY_RESULTS, check_metadata=True)
    rows = table.to_pylist()
    assert [(r["trace_id"], r["mode"], r["rerun"], r["passed"]) for r in rows] == [
        (trace_id, "recorded", 1, False),
        (trace_id, "recorded", 2, False),
    ]
    first = rows[0]
    divergence = json.loads(first["divergence"])
    assert (divergence["kind"], divergence["boundary"], divergence["occurrence"]) == (
        "request",
        "tool:refund",
        1,
    )
    assert divergence["message"] == "request differs at tool:refund#1 (seq 1): $.amount: 120.0 -> 99.0"
    assert first["divergence_count"] == 1 and first["served_crossings"] == 0 and first["live_crossings"] == 0
    assert first["error"].startswith("tailcut.errors.Divergence: request differs at tool:refund#1")
    assert first["check_message"].startswith("stopped at divergence: request differs")
    assert first["harness_revision"] == "h-8"
    assert (first["baseline"], first["inclusion_probability"], first["category"]) == (False, 1.0, None)
    assert first["started_at"].tzinfo is not None and first["duration_ms"] > 0


def test_traces_that_cannot_be_replayed_are_skipped_and_named(tmp_path):
    data = tmp_path / "data"
    _, (trace_id,) = record_corpus(tmp_path, [lambda: shop({"order_id": 7})], name="one")
    ghost = "f" * 32
    both = tmp_path / "both"
    write_corpus(tmp_path / "one-data", [Selection(trace_id, "x"), Selection(ghost, "asked for")], both)
    report = replay.run_replay(both, shop, n=1, canary=False)

    assert [r.trace_id for r in report.results] == [trace_id]
    assert report.skipped == {ghost: "no spans of this trace are in the data dir"}
    lines = report.summary_lines()
    assert lines[-2:] == [
        "skipped 1 trace(s) that cannot be replayed:",
        f"  {ghost}: no spans of this trace are in the data dir",
    ]
    assert not data.exists()


# -- Ctrl-C --------------------------------------------------------------------------------------------------


def test_ctrl_c_stops_cleanly_and_keeps_the_reruns_that_finished(corpus, tmp_path, monkeypatch):
    loaded, _ = corpus
    monkeypatch.setitem(INTERRUPT_ON, "call", next(_calls_made) + 3)  # the third rerun from now
    out = tmp_path / "results.parquet"
    report = replay.run_replay(loaded, shop_interrupted, mode="live", n=5, out=out)

    assert report.interrupted and len(report.results) == 2
    assert pq.read_table(out).num_rows == 2
    assert report.summary_lines()[-2] == "interrupted: kept the 2 rerun(s) that finished"
    assert active_interceptor() is None and not _config.current().enabled  # the session was undone

    monkeypatch.setitem(INTERRUPT_ON, "call", next(_calls_made) + 2)
    agent = "tests.test_replay_runner:shop_interrupted"
    result = CliRunner().invoke(
        cli, ["replay", str(loaded.path), "--agent", agent, "--mode", "live", "-n", "4", "--out", str(out)]
    )
    assert result.exit_code == 130
    assert "interrupted: kept the 1 rerun(s) that finished" in result.output
    assert pq.read_table(out).num_rows == 1


# -- the canary ----------------------------------------------------------------------------------------------


def test_the_canary_confirms_a_replay_follows_the_record(corpus):
    loaded, trace_id = corpus
    report = replay.run_replay(loaded, shop, n=1)
    assert report.canary.caught is True
    assert str(report.canary) == (
        f"canary: corrupted tool:lookup#1 of trace {trace_id} (value 120.0); the recorded replay diverged: "
        "request differs at tool:refund#1 (seq 2): $.amount: 120.0 -> 121.0"
    )


def test_the_canary_catches_a_replay_that_ignores_the_record(corpus):
    loaded, _ = corpus
    report = replay.run_replay(loaded, shop_ignoring_the_record, n=3)
    assert [s.rate for s in report.traces()] == ["bit-stable 3/3 (recorded)"]  # green, and meaningless
    assert report.canary.failed
    assert str(report.canary).startswith("CANARY FAILED: corrupting tool:lookup#1")

    args = ["replay", str(loaded.path), "--agent", "tests.test_replay_runner:shop_ignoring_the_record"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "CANARY FAILED" in result.output
    no_canary = CliRunner().invoke(cli, [*args, "--no-canary"])
    assert no_canary.exit_code == 0
    assert not [line for line in no_canary.output.splitlines() if line.lower().startswith("canary")]


# -- errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "nope"], "Error: --agent must be module:function; got 'nope'"),
        (["--agent", "tests.no_such_module:run"], "Error: --agent tests.no_such_module:run: cannot import"),
        (
            ["--agent", "tests.test_replay_runner:missing"],
            "Error: --agent tests.test_replay_runner:missing: ",
        ),
        (
            ["--mode", "cut"],
            "Error: cut mode needs at least one live boundary, e.g. --live router:refund_guard",
        ),
        (["--live", "tool:refund"], "Error: live boundaries are for cut mode only; this replay is recorded"),
        (["--mode", "cut", "--live", "refund"], "Error: live boundary 'refund' must be kind:name"),
        (["--trace", "0" * 32], f"Error: trace {'0' * 32} is not in the corpus at "),
        (["--check", "tests.test_replay_runner:CALLS"], "is not callable"),
    ],
)
def test_bad_options_get_a_one_line_error(corpus, args, message):
    loaded, _ = corpus
    base = ["replay", str(loaded.path)]
    if "--agent" not in args:
        base += ["--agent", "tests.test_replay_runner:shop"]
    result = CliRunner().invoke(cli, [*base, *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


# -- exit codes, machine-readable output and the canary's choice of trace ------------------------------------


def overpaying(order: dict) -> dict:
    """Refunds a cent more than the record: a served boundary diverges, the outcome still reproduces."""
    with tailcut.run("shop", input=order) as run:
        done = refund(lookup(order["order_id"])["order_id"], 120.01)
        run.set_outcome("pass")
        return done


def shop_failing(order: dict) -> dict:
    """Follows the record exactly but ends with another outcome: the check fails, nothing diverges."""
    with tailcut.run("shop", input=order) as run:
        done = refund(lookup(order["order_id"])["order_id"], 120.0)
        run.set_outcome("fail")
        return done


def overpaying_on_order_7(order: dict) -> dict:
    return overpaying(order) if order["order_id"] == 7 else shop(order)


TRACE_KEYS = {
    "trace_id",
    "label",
    "mode",
    "reruns",
    "passed",
    "failed",
    "diverged",
    "rate",
    "pass_rate",
    "bit_stable",
    "not_live",
    "first_divergence",
    "first_failure",
    "unwrapped",
    "rejected",
    "not_compared",
}
REPORT_KEYS = {
    "corpus",
    "mode",
    "reruns_per_trace",
    "passed",
    "exit_code",
    "traces",
    "skipped",
    "canary",
    "interrupted",
    "results_file",
}


@pytest.mark.parametrize(
    ("agent", "strictness", "status", "counts"),
    [
        ("shop", [], 0, (2, 0, 0)),
        ("shop_failing", [], 1, (0, 2, 0)),
        ("shop_failing", ["--strict"], 1, (0, 2, 0)),
        ("shop_failing", ["--no-strict"], 0, (0, 2, 0)),
        ("overpaying", [], 1, (0, 0, 2)),
        ("overpaying", ["--no-strict"], 0, (0, 0, 2)),
    ],
)
def test_replay_exits_1_on_a_failing_or_diverging_rerun_unless_told_to_only_report(
    corpus, agent, strictness, status, counts
):
    loaded, _ = corpus
    args = ["replay", str(loaded.path), "--agent", f"tests.test_replay_runner:{agent}", "-n", "2"]
    result = CliRunner().invoke(cli, [*args, "--no-canary", "--format", "json", *strictness])

    assert result.exit_code == status, result.output
    report = json.loads(result.stdout)
    assert set(report) == REPORT_KEYS
    assert report["exit_code"] == status
    (trace,) = report["traces"]
    assert set(trace) == TRACE_KEYS
    assert (trace["passed"], trace["failed"], trace["diverged"]) == counts
    figure = trace["pass_rate"]
    assert set(figure) == {
        "value",
        "numerator",
        "denominator",
        "low",
        "high",
        "confidence",
        "method",
        "sample",
    }
    assert (figure["numerator"], figure["denominator"], figure["value"]) == (counts[0], 2, counts[0] / 2)
    assert (figure["confidence"], figure["method"], figure["sample"]) == (0.95, "wilson", "reruns")
    assert 0.0 <= figure["low"] <= figure["high"] <= 1.0
    if counts[2]:
        assert trace["rate"] == "pass 0/2, diverged 2/2 (recorded)"
        assert (
            trace["first_divergence"] == "request differs at tool:refund#1 (seq 2): $.amount: 120.0 -> 120.01"
        )


def test_replay_writes_one_csv_row_per_trace(corpus):
    loaded, trace_id = corpus
    args = ["replay", str(loaded.path), "--agent", "tests.test_replay_runner:overpaying", "--no-canary"]
    result = CliRunner().invoke(cli, [*args, "--format", "csv", "--no-strict"])
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split(",") == list(replay_output.CSV_COLUMNS)
    assert row.startswith(f"{trace_id},,recorded,1,0,0,1,")


def test_the_canary_uses_a_trace_whose_clean_replay_passed_and_names_it(tmp_path):
    out, (first, second) = record_corpus(
        tmp_path, [lambda: shop({"order_id": 7}), lambda: shop({"order_id": 8})]
    )
    report = replay.run_replay(out, overpaying_on_order_7, n=1)
    assert report.canary is not None and report.canary.caught is True
    assert report.canary.plan.trace_id == second
    assert f"of trace {second}" in report.canary.detail

    nothing_clean = replay.run_replay(out, overpaying, n=1)
    assert nothing_clean.canary.caught is None
    assert nothing_clean.canary.detail == (
        f"canary: not run: no trace replayed cleanly to corrupt (tried {first}, {second})"
    )
