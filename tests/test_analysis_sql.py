"""``tailcut sql`` and ``tree`` that help: DuckDB's hints, one-shot dot commands, payloads, nanoseconds."""

from __future__ import annotations

import doctest
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailcut.cli import cli

FIXTURE = Path(__file__).parent / "fixtures" / "otlp" / "tailcut_sdk.json"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def data(tmp_path) -> Path:
    """The SDK fixture with nanosecond digits in every start time (…123456789 past the millisecond)."""
    text = re.sub(
        r'"startTimeUnixNano": "(\d+)000000"',
        lambda m: f'"startTimeUnixNano": "{m.group(1)}123456"',
        FIXTURE.read_text(),
    )
    source = tmp_path / "spans.json"
    source.write_text(text)
    path = tmp_path / "data"
    assert run("ingest", str(source), "--data", str(path)).exit_code == 0
    return path


def test_errors_keep_duckdbs_hints_on_one_line(data):
    table = run("sql", "SELECT * FROM trace", "--data", str(data))
    assert table.exit_code == 2
    assert 'Table with name trace does not exist! Did you mean "traces"?' in table.output
    column = run("sql", "SELECT tracid FROM traces", "--data", str(data))
    assert 'Candidate bindings: "trace_id"' in column.output
    syntax = run("sql", "SELEC 1", "--data", str(data))
    assert "(at line 1, column 1)" in syntax.output and "LINE" not in syntax.output
    assert all(len(r.output.strip().splitlines()) == 1 for r in (table, column, syntax))


def test_dot_commands_run_as_one_shot_queries(data):
    tables = json.loads(run("sql", ".tables", "--data", str(data), "--format", "json").output)
    assert {"spans", "traces", "findings", "llm_calls"} <= {row["name"] for row in tables}
    schema = run("sql", ".schema traces", "--data", str(data), "--format", "csv")
    assert schema.exit_code == 0 and schema.output.startswith("column,type\n")
    assert "trace_id,VARCHAR" in schema.output
    terminal = run("sql", ".schema findings", "--data", str(data))
    assert "category" in terminal.output and "VARCHAR" in terminal.output
    missing = run("sql", ".schema", "--data", str(data))
    assert missing.exit_code == 2 and ".schema needs a view name" in missing.output
    shell_only = run("sql", ".quit", "--data", str(data))
    assert shell_only.exit_code == 2 and "works in the shell only" in shell_only.output


def test_outputs_keep_nanoseconds(data, tmp_path):
    query = "SELECT start_time FROM spans ORDER BY start_time LIMIT 1"
    as_json = json.loads(run("sql", query, "--data", str(data), "--format", "json").output)
    assert as_json[0]["start_time"] == "2026-01-01T00:00:00.000123456+00:00"
    as_csv = run("sql", query, "--data", str(data), "--format", "csv").output
    assert "2026-01-01T00:00:00.000123456+00:00" in as_csv
    assert ".000123456" in run("sql", query, "--data", str(data)).output
    (trace,) = json.loads(
        run("sql", "SELECT trace_id FROM traces", "--data", str(data), "--format", "json").output
    )
    tree = json.loads(run("tree", trace["trace_id"], "--data", str(data), "--json").output)
    assert tree["spans"][0]["start_time"] == "2026-01-01T00:00:00.000123456+00:00"


def test_tree_payloads_abridged_and_full(data):
    trace_id = json.loads(
        run("sql", "SELECT trace_id FROM traces", "--data", str(data), "--format", "json").output
    )[0]["trace_id"]
    plain = run("tree", trace_id, "--data", str(data))
    assert "request:" not in plain.output
    abridged = run("tree", trace_id, "--data", str(data), "--payloads")
    assert abridged.exit_code == 0, abridged.output
    assert "→ request:" in abridged.output and "← response:" in abridged.output
    assert "--full shows all" in abridged.output  # the 252-character response is cut at 200
    full = json.loads(run("tree", trace_id, "--data", str(data), "--payloads", "--full", "--json").output)
    llm = full["spans"][0]["children"][0]
    assert json.loads(llm["response"])["choices"][0]["finish_reason"] == "tool_calls"
    short = json.loads(run("tree", trace_id, "--data", str(data), "--payloads", "--json").output)
    assert short["spans"][0]["children"][0]["response"].endswith("(252 characters; --full shows all)")


def test_abridge_examples_run():
    from tailcut.analysis import _tree

    result = doctest.testmod(_tree)
    assert result.attempted >= 2 and result.failed == 0


def test_a_file_rewritten_in_place_is_read_anew_by_an_open_dataset(data):
    """The dataset keeps parsed Parquet footers between statements; a file rewritten under the same name
    (with other rows) must still be read as it is now, not as it was."""
    import pyarrow.parquet as pq

    from tailcut.analysis import Dataset

    with Dataset(data) as dataset:
        [(before,)] = dataset.connection.execute("SELECT count(*) FROM spans").fetchall()
        assert before > 1
        [file] = sorted(Path(data, "spans").rglob("*.parquet"))
        pq.write_table(pq.read_table(file).slice(0, 1), file)  # same name, same second
        [(after,)] = dataset.connection.execute("SELECT count(*) FROM spans").fetchall()
    assert after == 1
