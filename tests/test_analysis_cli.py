"""The analysis commands through the `tailcut` group, and the Dataset behind them, on real data dirs."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tailcut.analysis import Dataset, NoDataError, QueryError, compare_results
from tailcut.cli import cli
from tailcut.exporters import schema
from tests.analysis_support import fleet_data, read_table, tail_sample


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return fleet_data(tmp_path_factory)


@pytest.fixture(scope="module")
def sampled(fleet, tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "data"
    tail_sample(fleet.path, path, fleet.failing, 0.2)
    return path


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input, env={"COLUMNS": "240"})


# --- Dataset ---------------------------------------------------------------------------------------------


def test_views_and_frames_read_the_same_rows(sampled):
    data = Dataset(sampled)
    assert set(data.tables()) >= {
        "spans",
        "traces",
        "llm_calls",
        "tool_calls",
        "retrievals",
        "kept_traces",
        "baseline_traces",
    }
    n_spans = data.sql("SELECT count(*) AS n FROM spans").item()
    assert (
        data.spans_lazy().select(pl.len()).collect().item() == n_spans == len(data.spans(columns=["span_id"]))
    )
    assert len(data.traces()) == data.sql("SELECT count(*) FROM traces").item()
    assert (
        data.sql("SELECT count(*) FROM llm_calls").item()
        == data.sql("SELECT count(*) FROM spans WHERE kind = 'llm'").item()
    )
    assert data.sql("SELECT bool_and(kept) FROM kept_traces").item() is True
    assert data.sql("SELECT bool_and(baseline) FROM baseline_traces").item() is True
    with pytest.raises(QueryError, match="no column"):
        data.spans_lazy(columns=["nope"])


def test_views_survive_files_written_before_a_column_existed(fleet, tmp_path):
    """An old file lacks `scope_name` and `is_orphan`; queries naming them still run (NULL there)."""
    (tmp_path / "data" / "spans" / "dt=2026-01-01").mkdir(parents=True)
    old = read_table(fleet.path, "spans").slice(0, 50).drop_columns(["scope_name", "is_orphan"])
    pq.write_table(old, tmp_path / "data" / "spans" / "dt=2026-01-01" / "part-old.parquet")
    data = Dataset(tmp_path / "data")
    assert data.sql("SELECT count(*) FILTER (WHERE is_orphan IS NULL) FROM spans").item() == 50
    assert data.sql("SELECT count(*) FROM traces").item() == 0  # no traces files yet: an empty view
    assert data.traces_lazy().collect().columns == [*schema.TRACES.names, "dt"]
    assert data.spans_lazy().select("is_orphan").collect()["is_orphan"].null_count() == 50


def test_missing_and_empty_data_dirs_are_clear_errors(tmp_path):
    with pytest.raises(NoDataError, match="no such data dir"):
        Dataset(tmp_path / "nowhere")
    (tmp_path / "empty" / "spans").mkdir(parents=True)
    with pytest.raises(NoDataError, match="no Parquet files under spans/ or traces/"):
        Dataset(tmp_path / "empty")


def _damaged_copy(sampled, tmp_path, damage) -> tuple[str, str]:
    """A copy of the data dir with one spans file damaged by ``damage(bytes) -> bytes``; (dir, file)."""
    import shutil

    data = tmp_path / "damaged"
    shutil.copytree(sampled, data)
    victim = sorted((data / "spans").glob("**/*.parquet"))[0]
    victim.write_bytes(damage(victim.read_bytes()))
    return str(data), str(victim.relative_to(data))


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[: len(raw) // 3], id="truncated"),
        pytest.param(
            lambda raw: raw[:8] + bytes(b ^ 0x5A for b in raw[8:-8]) + raw[-8:], id="scrambled-inside"
        ),
    ],
)
@pytest.mark.parametrize("command", [["classify"], ["report"], ["select", "--baseline", "3"]])
def test_a_damaged_parquet_file_is_one_line_naming_it(sampled, tmp_path, damage, command):
    data, victim = _damaged_copy(sampled, tmp_path, damage)
    extra = ["--out", str(tmp_path / "corpus")] if command[0] == "select" else []
    result = run(*command, "--data", data, *extra)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: cannot read the data dir: ")
    assert victim in line
    assert "move it out of the data dir" in line
    assert not (tmp_path / "corpus").exists()


def test_query_errors_carry_duckdbs_message_and_position(sampled):
    data = Dataset(sampled)
    with pytest.raises(QueryError) as caught:
        data.sql("SELECT trace_id,\n       count(* FROM spans")
    assert caught.value.message == 'Parser Error: syntax error at or near "FROM"'
    assert (caught.value.line, caught.value.column) == (2, 16)
    with pytest.raises(QueryError, match='Binder Error: Referenced column "nosuch" not found'):
        data.sql("SELECT nosuch FROM spans")


# --- tailcut sql -----------------------------------------------------------------------------------------


QUERY = "SELECT kind, count(*) AS n FROM spans GROUP BY kind ORDER BY kind"


def test_sql_formats(sampled, tmp_path):
    expected = Dataset(sampled).sql(QUERY).rows()
    table = run("sql", QUERY, "--data", str(sampled))
    assert table.exit_code == 0, table.output
    for kind, n in expected:
        assert kind in table.output and str(n) in table.output
    assert f"{len(expected)} rows" in table.output
    as_csv = run("sql", QUERY, "--data", str(sampled), "--format", "csv")
    assert [tuple(r) for r in csv.reader(io.StringIO(as_csv.output))][1:] == [
        (k, str(n)) for k, n in expected
    ]
    as_json = run("sql", QUERY, "--data", str(sampled), "--format", "json")
    assert [(r["kind"], r["n"]) for r in json.loads(as_json.output)] == expected
    out = tmp_path / "kinds.parquet"
    written = run("sql", QUERY, "--data", str(sampled), "--format", "parquet", "--out", str(out))
    assert written.exit_code == 0
    assert pq.read_table(out).to_pylist() == [{"kind": k, "n": n} for k, n in expected]
    nested = run(
        "sql",
        "SELECT attributes, events FROM spans WHERE kind = 'root' LIMIT 1",
        "--data",
        str(sampled),
        "--format",
        "json",
    )
    assert "tailcut.run.input" in json.loads(nested.output)[0]["attributes"]


def test_sql_errors_are_one_line_without_traceback(sampled, tmp_path):
    bad = run("sql", "SELECT * FORM spans", "--data", str(sampled))
    assert bad.exit_code == 1
    assert bad.output.strip() == 'Error: Parser Error: syntax error at or near "spans" (at line 1, column 15)'
    missing = run("sql", "SELECT 1", "--data", str(tmp_path / "nowhere"))
    assert (
        missing.exit_code == 1 and "no such data dir" in missing.output and "Traceback" not in missing.output
    )
    no_out = run("sql", QUERY, "--data", str(sampled), "--format", "parquet")
    assert no_out.exit_code == 2 and "--out" in no_out.output


def test_sql_shell_reads_multiline_statements_and_dot_commands(sampled):
    script = "SELECT count(*) AS spans_seen\nFROM spans;\n.tables\n.schema traces\nSELECT nosuch;\n.quit\n"
    result = run("sql", "--data", str(sampled), input=script)
    assert result.exit_code == 0, result.output
    assert "spans_seen" in result.output
    assert "baseline_traces" in result.output and "kept_traces" in result.output
    assert "inclusion_probability" in result.output
    assert "Error: Binder Error" in result.output


# --- tailcut tree, classify, report ------------------------------------------------------------------------


def test_tree_text_and_json(fleet, sampled):
    timeout = next(r for r in fleet.runs if r.kind == "timeout").trace_id
    text = run("tree", timeout, "--data", str(sampled))
    assert text.exit_code == 0, text.output
    assert (
        "tool:lookup_order#3" in text.output
        and "BackendTimeout" in text.output
        and "attempt 3" in text.output
    )
    as_json = json.loads(run("tree", timeout, "--data", str(sampled), "--json").output)
    root = as_json["spans"][0]
    assert root["kind"] == "root" and root["status_code"] == "ERROR"
    assert [c["kind"] for c in root["children"]][:3] == ["memory", "retriever", "llm"]
    assert as_json["trace"]["kept"] is True
    unknown = run("tree", "f" * 32, "--data", str(sampled))
    assert unknown.exit_code == 1 and f"no trace {'f' * 32}" in unknown.output


def test_tree_of_a_dropped_trace_says_sampling_dropped_it_and_shows_its_decision(sampled):
    data = Dataset(sampled)
    dropped, policies = data.sql(
        "SELECT trace_id, policies FROM traces WHERE NOT kept ORDER BY trace_id LIMIT 1"
    ).row(0)
    data.close()
    text = run("tree", dropped, "--data", str(sampled))
    assert text.exit_code == 0, text.output
    assert "dropped by sampling" in text.output and "decision " in text.output
    assert "only its traces row is kept" in text.output
    as_json = json.loads(run("tree", dropped, "--data", str(sampled), "--json").output)
    assert as_json["spans"] == [] and as_json["trace"]["kept"] is False
    assert as_json["trace"]["policies"] == policies


def test_classify_prints_a_summary_and_writes_findings(sampled, tmp_path):
    out = tmp_path / "findings.parquet"
    result = run("classify", "--data", str(sampled), "--out", str(out))
    assert result.exit_code == 0, result.output
    findings = pq.read_table(out)
    assert findings.num_rows > 0
    for category in set(findings.column("category").to_pylist()):
        assert category in result.output
    strict = run("classify", "--data", str(sampled), "--loop-min-repeats", "9", "--show", "0")
    assert "tool_loop" not in strict.output
    refused = run("classify", "--data", str(sampled), "--loop-min-repeats", "1")
    assert refused.exit_code == 1 and "loop_min_repeats must be at least 2" in refused.output


def test_report_terminal_and_html(sampled, tmp_path):
    html = tmp_path / "report.html"
    result = run("report", "--data", str(sampled), "--html", str(html))
    assert result.exit_code == 0, result.output
    for heading in (
        "traffic",
        "decisions by policy",
        "failure categories",
        "layers implicated",
        "top offending boundaries",
    ):
        assert heading in result.output
    assert "1/π weighted (HT), n=" in result.output and "baseline slice, n=" in result.output
    page = html.read_text()
    assert page.count("<svg") == 3  # tokens and latency, category rates, decisions over time
    assert "<script" not in page and 'src="http' not in page and 'href="http' not in page  # self-contained
    assert "silent_degradation" in page


# --- tailcut compare ---------------------------------------------------------------------------------------


def test_compare_by_column(sampled):
    result = run("compare", "--data", str(sampled), "--by", "harness_revision", "v1", "v2")
    assert result.exit_code == 0, result.output
    assert "schema_drift" in result.output and "baseline slice" in result.output and " pp [" in result.output
    wrong = run("compare", "--data", str(sampled), "--by", "harness_revision", "v1", "v9")
    assert wrong.exit_code == 2 and "values present: v1, v2" in wrong.output
    usage = run("compare", "--data", str(sampled), "--by", "harness_revision", "v1")
    assert usage.exit_code == 2


def test_compare_windows(sampled):
    start, end = Dataset(sampled).sql("SELECT min(start_time), max(start_time) FROM traces").row(0)
    middle = start + (end - start) / 2
    later = end + dt.timedelta(seconds=1)
    args = [
        "--window",
        start.isoformat(),
        middle.isoformat(),
        "--window",
        middle.isoformat(),
        later.isoformat(),
    ]
    result = run("compare", "--data", str(sampled), *args)
    assert result.exit_code == 0, result.output
    assert "window" in result.output
    backwards = run(
        "compare", "--data", str(sampled), "--window", later.isoformat(), start.isoformat(), *args[3:]
    )
    assert backwards.exit_code == 2 and "ends before it starts" in backwards.output


def results_file(path, outcomes: dict[str, tuple[bool, list[bool]]], revision: str) -> str:
    """A replay-results file: trace -> (baseline, passed per rerun)."""
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    rows = [
        {
            "trace_id": trace,
            "mode": "cut",
            "rerun": i + 1,
            "passed": passed,
            "divergence_count": 0,
            "live_crossings": 1,
            "served_crossings": 3,
            "duration_ms": 5.0,
            "harness_revision": revision,
            "category": None if baseline else "silent_degradation",
            "baseline": baseline,
            "inclusion_probability": 0.1 if baseline else 1.0,
            "started_at": now,
        }
        for trace, (baseline, reruns) in outcomes.items()
        for i, passed in enumerate(reruns)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.REPLAY_RESULTS), path)
    return str(path)


def test_compare_replay_results_paired(tmp_path):
    incidents = {f"{i:032x}": (False, [False, False]) for i in range(30)}
    baseline = {f"{i + 100:032x}": (True, [True, True]) for i in range(40)}
    before = results_file(tmp_path / "a.parquet", {**incidents, **baseline}, "v1")
    fixed = {t: (False, [True, i % 5 != 0]) for i, t in enumerate(incidents)}  # 24 fixed, 6 still fail once
    after = results_file(tmp_path / "b.parquet", {**fixed, **baseline}, "v2")
    comparison = compare_results(before, after)
    assert (comparison.incidents.fixed, comparison.incidents.broken) == (24, 0)
    assert comparison.incidents.first.value == 0 and comparison.incidents.second.value == 24 / 30
    assert comparison.incidents.test.exact_p_value < 1e-6
    assert comparison.baseline.change.value == 0
    assert comparison.verdict.label == "confined to tail sample"
    assert comparison.weighted[0].sample == "kept (1/π weighted)"
    result = run("compare", "--results", before, after)
    assert result.exit_code == 0, result.output
    assert "incident corpus" in result.output and "baseline slice" in result.output
    assert "confined to tail sample" in result.output and "all its reruns passed" in result.output


def test_compare_results_refuses_bad_files(tmp_path):
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    good = results_file(tmp_path / "a.parquet", {"0" * 32: (True, [True])}, "v1")
    result = run("compare", "--results", good, str(tmp_path / "other.parquet"))
    assert result.exit_code == 2 and "not a replay-results file" in result.output
    result = run("compare", "--results", good, str(tmp_path / "missing.parquet"))
    assert result.exit_code == 2 and "no such replay-results file" in result.output


# --- tailcut select ----------------------------------------------------------------------------------------


def manifest_traces(path) -> list[dict]:
    return json.loads((path / "manifest.json").read_text())["traces"]


def test_select_is_reproducible_from_the_seed(sampled, tmp_path):
    args = [
        "select",
        "--data",
        str(sampled),
        "--category",
        "tool_loop",
        "--category",
        "error",
        "--baseline",
        "12",
    ]
    first = run(*args, "--seed", "1", "--out", str(tmp_path / "c1"))
    assert first.exit_code == 0, first.output
    assert run(*args, "--seed", "1", "--out", str(tmp_path / "c2")).exit_code == 0
    assert run(*args, "--seed", "2", "--out", str(tmp_path / "c3")).exit_code == 0
    one, same, other = (manifest_traces(tmp_path / c) for c in ("c1", "c2", "c3"))
    assert json.dumps(one) == json.dumps(same)
    baseline_one = {t["trace_id"] for t in one if t["reason"].startswith("baseline")}
    baseline_other = {t["trace_id"] for t in other if t["reason"].startswith("baseline")}
    assert baseline_one != baseline_other
    incidents = [t for t in one if t["reason"].startswith("incident")]
    assert incidents and all(set(t["categories"]) <= {"tool_loop", "error"} for t in incidents)
    assert all(t["inclusion_probability"] == 1.0 for t in incidents)
    baseline = [t for t in one if "baseline slice sample" in t["reason"]]
    assert len(baseline) == 12 and all(t["baseline"] for t in baseline)
    description = json.loads((tmp_path / "c1" / "manifest.json").read_text())["selection"]
    stratum = description["strata"]["support-agent"]
    assert description["seed"] == 1 and stratum["selected"] == 12
    fraction = 12 / stratum["available"]  # π in the corpus: the data dir's π times the sampling fraction
    data_pi = dict(Dataset(sampled).sql("SELECT trace_id, inclusion_probability FROM traces").iter_rows())
    for entry in baseline:
        if not entry["categories"]:
            assert entry["inclusion_probability"] == pytest.approx(data_pi[entry["trace_id"]] * fraction)


def test_select_errors(sampled, tmp_path):
    bad = run("select", "--data", str(sampled), "--category", "nope", "--out", str(tmp_path / "c"))
    assert bad.exit_code == 1 and "unknown category 'nope'" in bad.output
    where = run("select", "--data", str(sampled), "--where", "nosuch > 1", "--out", str(tmp_path / "c"))
    assert where.exit_code == 1 and "Binder Error" in where.output
    assert not (tmp_path / "c").exists()


def test_select_per_category_caps_incidents_reproducibly(sampled, tmp_path):
    def chosen(out, *extra):
        result = run("select", "--data", str(sampled), "--seed", "1", "--out", str(tmp_path / out), *extra)
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / out / "manifest.json").read_text())["traces"]

    everything = chosen("all")
    capped = chosen("capped", "--per-category", "2")
    assert chosen("again", "--per-category", "2") == capped
    categories = {c for trace in everything for c in trace["categories"]}
    assert len(capped) <= 2 * len(categories) < len(everything)
    assert {c for trace in capped for c in trace["categories"]} == categories  # every category still shown
    assert all(trace["inclusion_probability"] < 1.0 for trace in capped)  # sampled, so pi shrinks


def test_a_column_of_estimates_states_a_shared_denominator_once():
    from tailcut.analysis import stats
    from tailcut.analysis._report import _estimate_column

    a = stats.proportion(3, 100, sample="baseline slice")
    b = stats.proportion(9, 100, sample="baseline slice")
    shared = _estimate_column([a, None, b])
    assert shared.header == ", n=100"
    assert shared.cell(a, "-") == "3.0% [1.0%, 8.5%]" == a.interval()
    assert shared.cell(None, "-") == "-"
    mixed = _estimate_column([a, stats.proportion(9, 300, sample="baseline slice")])
    assert mixed.header == ""
    assert mixed.cell(a, "-") == "3.0% [1.0%, 8.5%] (n=100, baseline slice)"
