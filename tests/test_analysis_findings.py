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
    rows = sql_rows(data, "SELECT trace_id, category FROM findings")
    assert [row["category"] for row in rows] == ["silent_degradation"]
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
    assert run("ingest", str(FIXTURES / "tailcut_sdk.json"), "--data", str(data)).exit_code == 0
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
