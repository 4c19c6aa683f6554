"""``findings/``: a Parquet table of every data dir, seen without a classify step and never stale."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import polars as pl
from click.testing import CliRunner

from tailcut.analysis import Dataset, Thresholds, _findings
from tailcut.cli import cli
from tests.test_collector_helpers import KEEP_ERRORS, export_request, post, simple_trace, start_collector

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"


def silent_fixture(tmp_path: Path) -> Path:
    """``tailcut_sdk.json`` with its failed tool attempt made clean: a run whose outcome is fail with no
    failed boundary and no failure observation (a ``silent_degradation``; the fixture as it is shows an
    ``error``: its first search timed out)."""
    import json

    document = json.loads((FIXTURES / "tailcut_sdk.json").read_text())
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span.pop("status", None)
                span.pop("events", None)
    path = tmp_path / "silent.json"
    path.write_text(json.dumps(document))
    return path


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def sql_rows(data: Path, query: str) -> list[dict]:
    result = run("sql", query, "--data", str(data), "--format", "json")
    assert result.exit_code == 0, result.output
    import json

    return json.loads(result.output)


def test_findings_right_after_ingest_and_after_more_files_land(tmp_path):
    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "genai_old.json"), "--data", str(data)).exit_code == 0
    assert sql_rows(data, "SELECT count(*) AS n FROM findings") == [{"n": 0}]
    stored = _findings.path(str(data))
    first_key = _findings.stored_key(str(data))
    assert stored.is_file() and first_key is not None

    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
    rows = sql_rows(data, "SELECT trace_id, category, recovered FROM findings")
    assert [(row["category"], row["recovered"]) for row in rows] == [("error", False)]  # its outcome is fail
    assert _findings.stored_key(str(data)) not in (None, first_key)
    # the stored file is what a fresh classification gives, and other engines read it as it is
    fresh = Dataset(data).classify(thresholds=Thresholds(cost_z=6.0000001))
    assert (
        pl.read_parquet(stored).select("trace_id", "category").to_dicts()
        == fresh.select("trace_id", "category").to_dicts()
    )
    assert duckdb.sql(f"SELECT count(*) FROM '{data}/findings/*.parquet'").fetchall() == [(1,)]


def test_findings_right_after_a_collector_run(tmp_path):
    collector = start_collector(tmp_path, policies=KEEP_ERRORS)
    try:
        for index in range(6):
            trace_id = bytes([index + 1]) * 16
            status, _, _ = post(collector.ports.http, export_request(simple_trace(trace_id, error=index < 2)))
            assert status == 200
        assert collector.wait_idle(30)
    finally:
        collector.stop()
    rows = sql_rows(tmp_path / "data", "SELECT trace_id, category FROM findings ORDER BY trace_id")
    assert rows == [
        {"trace_id": "01" * 16, "category": "error"},
        {"trace_id": "02" * 16, "category": "error"},
    ]


def test_a_stored_file_is_read_not_recomputed_and_custom_thresholds_are_not_stored(tmp_path):
    data = tmp_path / "data"
    assert run("ingest", str(silent_fixture(tmp_path)), "--data", str(data)).exit_code == 0
    first = Dataset(data)
    assert first.findings().height == 1
    stamp = os.stat(_findings.path(str(data))).st_mtime_ns
    second = Dataset(data)
    assert second.findings().height == 1
    assert os.stat(_findings.path(str(data))).st_mtime_ns == stamp  # the same key: read, not rewritten
    custom = second.classify(thresholds=Thresholds(score_threshold=0.1))
    assert custom["signals"].to_list() == [["outcome fail"]]  # 0.25 is no longer a low score
    assert second.findings()["signals"].to_list() == [["outcome fail"]]  # this session keeps its own
    assert os.stat(_findings.path(str(data))).st_mtime_ns == stamp  # the stored file is untouched
    second.ensure_findings(default=True)
    assert second.findings()["signals"].to_list() == [["outcome fail", "low score"]]


def test_removed_files_make_the_findings_stale(tmp_path):
    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "genai_old.json"), "--data", str(data)).exit_code == 0
    before = set(data.glob("*/**/*.parquet"))
    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
    assert len(sql_rows(data, "SELECT * FROM findings")) == 1
    for part in set(data.glob("*/**/*.parquet")) - before:
        if part.parent.name != "findings":
            part.unlink()  # the second ingest's spans and traces, as a compaction or retention job might
    assert sql_rows(data, "SELECT count(*) AS n FROM findings") == [{"n": 0}]


def test_tables_and_schema_list_findings_before_any_query(tmp_path):
    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "genai_old.json"), "--data", str(data)).exit_code == 0
    dataset = Dataset(data)
    assert "findings" in dataset.tables()
    assert ("category", "VARCHAR") in dataset.schema("findings")


def stored_findings(data: Path) -> list[tuple[str, str]]:
    """``(trace_id, category)`` of ``findings/`` read with pyarrow alone, as another engine would."""
    import pyarrow.parquet as pq

    table = pq.read_table(_findings.path(str(data)), columns=["trace_id", "category"])
    return sorted(zip(table["trace_id"].to_pylist(), table["category"].to_pylist(), strict=True))


def test_ingest_refreshes_findings_for_readers_that_are_not_tailcut(tmp_path):
    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "genai_old.json"), "--data", str(data)).exit_code == 0
    assert stored_findings(data) == []
    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
    # no tailcut read in between: the ingest itself brought the file up to date
    assert [category for _, category in stored_findings(data)] == ["error"]
    assert _findings.stored_key(str(data)) == _findings.source_key(Dataset(data))


def test_ingest_succeeds_when_findings_cannot_be_written(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "findings").write_text("a file where the findings folder should be")
    result = CliRunner().invoke(cli, ["ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)])
    assert result.exit_code == 0, result.output
    assert "ingested" in result.output
    assert Dataset(data).sql("SELECT count(*) AS n FROM findings").item() == 1  # still computed on read


def wait_for(condition, timeout: float = 60.0) -> bool:
    """Poll ``condition`` until it holds (correctness only: no assertion on how long it took)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_running_collector_refreshes_findings_after_each_publish(tmp_path):
    data = tmp_path / "data"
    # The refresher runs at most once per roll_age (at least 5 s apart).
    collector = start_collector(tmp_path, policies=KEEP_ERRORS, parquet={"roll_age": "1s"})
    try:
        for index in range(4):
            trace_id = bytes([index + 1]) * 16
            post(collector.ports.http, export_request(simple_trace(trace_id, error=index < 1)))
        assert collector.wait_idle(30)
        collector.sink.request_flush()
        assert wait_for(lambda: stored_findings_or_none(data) == [("01" * 16, "error")])
        for index in range(4, 8):
            trace_id = bytes([index + 1]) * 16
            post(collector.ports.http, export_request(simple_trace(trace_id, error=index < 6)))
        assert collector.wait_idle(30)
        collector.sink.request_flush()
        expected = [(f"{i:02x}" * 16, "error") for i in (1, 5, 6)]
        assert wait_for(lambda: stored_findings_or_none(data) == expected)
        refresher = findings_hook(collector)
        # The counter moves just after the file is replaced.
        assert wait_for(lambda: refresher.refreshes >= 2) and refresher.failures == 0
    finally:
        collector.stop()


def findings_hook(collector):
    """The post-write hook of the collector's writer that refreshes ``findings/``."""
    from tailcut.analysis._refresh import FindingsRefresher

    (refresher,) = [hook for hook in collector.sink.hooks if isinstance(hook, FindingsRefresher)]
    return refresher


def stored_findings_or_none(data: Path) -> list[tuple[str, str]] | None:
    try:
        return stored_findings(data)
    except OSError:
        return None


def test_a_failed_refresh_is_counted_and_logged_never_raised(tmp_path, caplog):
    from tailcut.analysis._refresh import FindingsRefresher

    refresher = FindingsRefresher(str(tmp_path / "missing"), interval=0)
    try:
        refresher.poke()
        assert refresher.wait_idle(60)
        assert (refresher.failures, refresher.refreshes) == (1, 0)
        assert "refreshing the findings of" in caplog.text
    finally:
        refresher.close()


def test_pokes_while_a_refresh_waits_for_its_interval_make_one_refresh(tmp_path):
    from tailcut.analysis._refresh import FindingsRefresher

    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
    refresher = FindingsRefresher(str(data), interval=3600)
    refresher.poke()
    assert wait_for(lambda: refresher.refreshes == 1)
    for _ in range(20):
        refresher.poke()  # all wait for the interval, merged into one pending refresh
    assert not refresher.wait_idle(0.2)
    refresher.close(timeout=0.2)  # shutting down drops the pending refresh instead of waiting an hour
    assert (refresher.refreshes, refresher.failures) == (1, 0)


def test_a_collector_refreshes_findings_at_most_once_per_roll_age(tmp_path):
    collector = start_collector(tmp_path, policies=KEEP_ERRORS, parquet={"roll_age": "90s"})
    try:
        assert findings_hook(collector).interval == 90.0
    finally:
        collector.stop()


def test_a_bounded_refresh_gives_the_same_findings_as_an_unbounded_one(tmp_path):
    # the collector's background refresh runs on one thread with a memory limit; it must agree
    from tailcut.analysis._refresh import BACKGROUND_MEMORY_LIMIT, refresh

    data = tmp_path / "data"
    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
    unbounded = pl.read_parquet(_findings.path(str(data)))
    _findings.path(str(data)).unlink()
    assert refresh(str(data), threads=1, memory_limit=BACKGROUND_MEMORY_LIMIT)
    assert pl.read_parquet(_findings.path(str(data))).equals(unbounded)
    with Dataset(data, threads=1, memory_limit=BACKGROUND_MEMORY_LIMIT) as bounded:
        settings = bounded.sql("SELECT current_setting('threads') AS t, current_setting('memory_limit') AS m")
        assert settings.row(0) == (1, "122.0 MiB")
