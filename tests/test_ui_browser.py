"""`tailcut ui` in a real browser: Playwright driving the system's Chromium against the real server.

The data dir is a small `tailcut demo` run (the fleet through the collector: kept and dropped traces,
findings, a corpus and replay results with divergences), plus one hand-built trace of 2,000 spans with
a payload too large to show inline. Every page is saved as a screenshot under ``tests/artifacts/ui/``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tailcut.analysis import Dataset, compare_by
from tailcut.exporters import DataDirWriter, compute_signals, facts_from_row, traces_row
from tests.analysis_support import spans_table

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts" / "ui"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BIG_TRACE = "b16b16b16b16b16b16b16b16b16b16b1"
BIG_PAYLOAD_CHARS = 150_000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (CI installs it with apt-get)"),
]


def _big_trace(data: Path) -> None:
    """Add a trace of 2,000 spans (a root, 40 agents, LLM and tool calls under them) to ``data``."""
    start = 1_790_000_000_000_000_000
    spans = [
        {
            "trace_id": BIG_TRACE,
            "span_id": f"{1:016x}",
            "parent_span_id": None,
            "name": "big-run",
            "kind": "root",
            "start": start,
            "end": start + 2_000 * 1_000_000,
        }
    ]
    for i in range(1, 2_000):
        agent = (i - 1) // 50 * 50 + 1  # spans 1, 51, 101, ... are agents under the root
        parent = 1 if i == agent else agent + 1
        kind = "agent" if i == agent else ("llm" if i % 2 else "tool")
        request = (
            {"messages": [{"role": "user", "content": f"step {i}"}], "model": "m"} if kind == "llm" else None
        )
        if i == 1_999:
            request = {"messages": [{"role": "user", "content": "x" * BIG_PAYLOAD_CHARS}], "model": "m"}
        spans.append(
            {
                "trace_id": BIG_TRACE,
                "span_id": f"{i + 1:016x}",
                "parent_span_id": f"{parent:016x}",
                "name": f"{kind} {i}",
                "kind": kind,
                "start": start + i * 1_000_000,
                "end": start + i * 1_000_000 + 900_000,
                "boundary": f"{kind}:step" if kind in ("llm", "tool") else None,
                "occurrence": i if kind in ("llm", "tool") else None,
                "seq": i if kind in ("llm", "tool") else None,
                "request": json.dumps(request) if request else None,
            }
        )
    table = spans_table(spans)
    row = traces_row(
        compute_signals(facts_from_row(r) for r in table.to_pylist()), kept=True, decision_reason="embedded"
    )
    with DataDirWriter(data) as writer:
        writer.write_spans(table)
        writer.write_traces([row])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("ui-demo") / "out"
    done = subprocess.run(
        [sys.executable, "-m", "tailcut", "demo", "--runs", "200", "--out", str(out), "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    _big_trace(out / "data")
    return out


@pytest.fixture(scope="module")
def server(demo):
    """`tailcut ui` as a user starts it, on an ephemeral loopback port; yields its URL."""
    command = [sys.executable, "-m", "tailcut", "ui", "--data", str(demo / "data"), "--port", "0"]
    command += ["--corpus", str(demo / "corpus")]
    for name in ("cut-v2", "recorded-v1"):
        command += ["--results", str(demo / f"replay-{name}.parquet")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("http://"):
                url = line.strip()
                break
        assert url, process.stderr.read() if process.stderr else "no URL printed"
        yield url.rstrip("/")
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def _trace_ids(demo: Path, query: str) -> list[str]:
    with Dataset(demo / "data") as data:
        return [row[0] for row in data.connection.execute(query).fetchall()]


def test_from_a_failure_category_to_the_argument_that_broke_the_schema(server, page):
    page.goto(server + "/")
    seen = page.locator("#summary").inner_text()
    assert re.search(r"kept of [\d,]+ seen", seen), seen
    page.select_option("select[name=category]", "schema_violation")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"category=schema_violation"))
    summary = page.locator("#summary").inner_text()
    assert re.search(r"\d+ kept of \d+ seen", summary) and "Σ 1/π" in summary, summary
    rows = page.locator("table.traces tbody tr")
    assert rows.count() >= 1
    for i in range(rows.count()):
        assert "schema_violation" in rows.nth(i).inner_text()
    shot(page, "1-traces-schema-violation")
    page.click("table.traces thead a:has-text('tokens')")
    page.wait_for_url(re.compile(r"sort=tokens"))
    tokens = [
        int(t.replace(",", "")) for t in page.locator("table.traces tbody td:nth-child(4)").all_inner_texts()
    ]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == rows.count()
    assert "category=schema_violation" in page.url  # sorting keeps the filters

    rows.first.locator("a.trace-link").click()
    page.wait_for_url(re.compile(r"/traces/[0-9a-f]{32}$"))
    decision = page.locator("#decision").inner_text()
    assert "policies matched" in decision and "π" in decision and "reason" in decision
    finding = page.locator("#findings li", has_text="schema_violation")
    assert "prompt" in finding.inner_text() and "is not of type 'integer'" in finding.inner_text()
    shot(page, "2-trace")

    finding.locator("a.span-link").click()
    detail = page.locator("#detail .span-detail")
    detail.wait_for()
    assert detail.locator("h2").inner_text().lower().startswith("llm")
    offending = detail.locator("table.args tr.offending")
    assert offending.count() == 1
    assert offending.locator("th").inner_text() == "order_id"
    assert "ORD-" in offending.locator("td").first.inner_text()
    assert page.locator(".wf-row.selected").count() == 1
    assert "?span=" in page.url
    response = detail.locator("section.payload[data-part=response]")
    response.locator("details.raw summary").click()
    assert '"tool_calls"' in response.locator("details.raw pre").inner_text()
    request = detail.locator("section.payload[data-part=request]")
    assert request.locator(".msg.role-system").count() == 1 and request.locator(".msg.role-user").count() >= 1
    offending.scroll_into_view_if_needed()
    shot(page, "3-span-offending-argument")


def test_a_replay_divergence_side_by_side_and_its_recorded_span(server, page):
    page.goto(server + "/replays")
    assert page.locator("section.results-file").count() == 2
    rate = page.locator("table.replays tbody tr", has_text="(cut)").first.inner_text()
    # the demo's guarded cut passes its check but its path diverged after the cut: never shown as a pass
    assert re.search(r"pass 0/(\d+), diverged \1/\1 \(cut\)", rate), rate
    divergence = page.locator("details.divergence").first
    divergence.locator("summary").click()
    changed = divergence.locator("table.sxs tr.changed, table.sxs tr.removed, table.sxs tr.added")
    assert changed.count() >= 1
    assert divergence.locator("table.sxs thead").inner_text().startswith("recorded")
    shot(page, "4-replay-divergence")
    divergence.locator("a.recorded-span").click()
    page.wait_for_url(re.compile(r"/traces/[0-9a-f]{32}\?span=[0-9a-f]{16}$"))
    assert page.locator("#detail .span-detail").count() == 1
    assert page.locator(".wf-row.selected").count() == 1
    assert "Replay" in page.locator(".trace-head").inner_text()


def test_a_dropped_trace_shows_its_row_and_says_its_spans_were_not_kept(server, demo, page):
    dropped = _trace_ids(demo, "SELECT trace_id FROM traces WHERE NOT kept ORDER BY trace_id LIMIT 1")[0]
    page.goto(f"{server}/traces/{dropped}")
    notice = page.locator(".dropped-notice").inner_text()
    assert "its spans were not kept" in notice
    assert dropped in page.locator(".dropped-notice table.kv").inner_text()
    assert "dropped" in page.locator("#decision").inner_text()
    shot(page, "5-dropped-trace")


def test_an_unknown_trace_id_is_a_404_that_says_what_to_do(server, page):
    response = page.goto(f"{server}/traces/{'0' * 32}")
    assert response is not None and response.status == 404
    text = page.locator("main").inner_text()
    assert "no trace 00000000000000000000000000000000" in text and "What to do" in text
    shot(page, "6-unknown-trace-404")


def test_a_trace_of_2000_spans_and_a_payload_loaded_on_demand(server, page):
    page.goto(f"{server}/traces/{BIG_TRACE}")
    assert page.locator(".wf-row").count() == 2_000
    last = page.locator(".wf-row").last
    last.scroll_into_view_if_needed()
    last.click()
    detail = page.locator("#detail .span-detail")
    detail.wait_for()
    request = detail.locator("section.payload[data-part=request]")
    assert "load request" in request.locator("button.load-payload").inner_text()
    request.locator("button.load-payload").click()
    request.locator(".loaded .msg.role-user").wait_for()
    assert len(request.locator(".loaded .msg.role-user pre").inner_text()) == BIG_PAYLOAD_CHARS
    shot(page, "7-2000-spans")


def test_compare_draws_the_verdict_table_with_intervals(server, page, demo):
    page.goto(f"{server}/compare?by=harness_revision&a=v1&b=v2")
    rows = page.locator("table.verdicts tbody tr")
    assert rows.count() == 6
    # one interval per estimate the comparison has: population and tail-kept for every category, the
    # census for the census ones (those whose census flag agrees with every kept trace's findings), the
    # baseline slice where both arms have baseline traces (the demo's trace ids are random, so a small
    # run's slice can leave an arm empty, and which categories are census varies with the data)
    with Dataset(demo / "data") as data:
        verdicts = [row.verdict for row in compare_by(data, "harness_revision", "v1", "v2").categories]
    cells = [getattr(v, part) for v in verdicts for part in ("census", "population", "baseline", "tail")]
    drawn = sum(cell is not None for cell in cells)
    assert drawn >= 12 + sum(v.census is not None for v in verdicts) >= 12 + 1
    assert page.locator("table.verdicts svg.interval").count() == drawn
    assert "schema_drift" in rows.nth(2).inner_text()
    text = page.locator("table.verdicts").inner_text()
    assert "[95%]" not in text and "p = " in text and "census (every trace seen)" in text
    assert page.locator("table.verdicts small.level").count() == drawn
    shot(page, "8-compare")
    response = page.goto(f"{server}/compare?by=no_such_column&a=1&b=2")
    assert response is not None and response.status == 400
    assert "traces has no column 'no_such_column'" in page.locator("main").inner_text()


def test_results_files_are_what_tailcut_replay_wrote(demo):
    """The fixture's results files carry divergences (so the replay test above can fail)."""
    rows = pq.read_table(demo / "replay-cut-v2.parquet").to_pylist()
    assert any(row["divergence"] for row in rows)
    assert os.path.isdir(demo / "corpus")
