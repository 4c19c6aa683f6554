"""``trace_features``: the classifier's per-trace features, written with the spans, give the same findings
as reading the spans, and are set aside whenever they do not describe exactly the spans present."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut import attributes as attr
from tailcut._pieces import placeholder
from tailcut.analysis import Dataset, Thresholds, _features, _features_compute, _features_coverage
from tailcut.exporters import schema
from tests.analysis_support import pipeline_writer, read_table, spans_table
from tests.test_analysis_classify import record_census

#: The exhaustive classification: every span read, every tool call re-validated.
EXHAUSTIVE = {"trust_recorded_counts": False, "trust_trace_signals": False}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """Every classifier scenario once plus normal runs, recorded by the SDK through the embedded exporter
    with the features hooked in (as the collector and ``tailcut ingest`` write them)."""
    data = tmp_path_factory.mktemp("features") / "data"
    record_census(data, features=True)
    return data


def classify_both(data: Path, partly: bool = False, **thresholds) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The findings from the features (of every trace, or ``partly``) and from reading every span."""
    dataset = Dataset(data)
    coverage = _features_coverage.usable(dataset, Thresholds(**thresholds))
    assert coverage is not None and coverage.partial == partly, coverage
    fast = dataset.classify(thresholds=Thresholds(**thresholds))
    slow = dataset.classify(thresholds=Thresholds(**thresholds, **EXHAUSTIVE))
    return fast, slow


@pytest.mark.parametrize(
    "thresholds",
    [
        {},
        {"loop_min_repeats": 2},
        {"cost_z": 3.0, "duration_z": 4.0},
        {"score_threshold": 0.95},
        {"min_baseline": 5},
    ],
    ids=["default", "loop_2", "cost_3", "score_95", "baseline_5"],
)
def test_the_written_features_find_what_reading_every_span_finds(recorded, thresholds):
    fast, slow = classify_both(recorded, **thresholds)
    assert fast.equals(slow), (fast.to_dicts(), slow.to_dicts())
    if not thresholds:
        assert {"error", "schema_violation", "schema_drift", "tool_loop", "silent_degradation"} <= set(
            fast["category"]
        )


def test_one_row_per_trace_with_its_roles_and_local_findings(recorded):
    features = read_table(recorded, "trace_features")
    checks = read_table(recorded, "trace_checks")
    spans = read_table(recorded, "spans")
    assert features.num_rows == len(set(spans["trace_id"].to_pylist()))
    assert sum(features["span_count"].to_pylist()) == spans.num_rows
    assert set(features["roots"].to_pylist()) == {1}
    assert set(features["root_kind"].to_pylist()) == {"root"}
    local = [f["category"] for row in checks["local_findings"].to_pylist() for f in row or ()]
    assert "error" in local and "schema_drift" in local  # identical failed retries need only the trace
    rules = set(features["rules"].to_pylist())
    assert rules == {_features.rules_key(Thresholds().drift_min_attempts, Thresholds().transient_errors)}


def test_a_data_dir_written_before_the_features_is_classified_from_its_spans(recorded, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(recorded, old)
    shutil.rmtree(old / "trace_features")
    shutil.rmtree(old / "findings", ignore_errors=True)
    dataset = Dataset(old)
    assert not _features_coverage.usable(dataset, Thresholds())
    assert dataset.classify().equals(Dataset(recorded).classify())


def test_features_of_other_retry_thresholds_are_not_used(recorded):
    assert not _features_coverage.usable(Dataset(recorded), Thresholds(drift_min_attempts=3))
    assert not _features_coverage.usable(Dataset(recorded), Thresholds(transient_errors="timeout"))
    assert not _features_coverage.usable(Dataset(recorded), Thresholds(**EXHAUSTIVE))


def test_the_writers_judge_tool_loop_and_silent_degradation_by_the_trace_alone(recorded):
    checks = read_table(recorded, "trace_checks")
    local = {f["category"] for row in checks["local_findings"].to_pylist() for f in row or ()}
    assert {"tool_loop", "silent_degradation"} <= local
    dataset = Dataset(recorded)
    coverage = _features_coverage.usable(dataset, Thresholds())
    assert coverage == _features_coverage.Coverage(uncovered=0, restated=False)
    assert _features_coverage.written_judgments_hold(coverage, Thresholds())
    assert not _features_coverage.written_judgments_hold(coverage, Thresholds(score_threshold=0.95))
    assert not _features_coverage.written_judgments_hold(coverage, Thresholds(loop_min_repeats=2))
    _features_coverage.drop(dataset)


def test_a_traces_row_that_restates_an_outcome_is_judged_by_it(recorded, tmp_path):
    """A ``traces`` row whose outcome is not its root span's (edited, or written by another tool): the
    written ``silent_degradation`` findings, which read the root span's, are set aside for the trace rows'."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    findings = Dataset(recorded).classify()
    found = set(findings["trace_id"])
    features = read_table(recorded, "trace_features").to_pylist()
    # a trace silent_degradation judges (a root that did not fail) with no finding at all: a trace with a
    # failed boundary or a failure report is never silent_degradation, whatever its outcome
    judged = [f for f in features if f["root_status_code"] in ("OK", "UNSET") and not f["root_is_orphan"]]
    clean = min(f["trace_id"] for f in judged if f["trace_id"] not in found)
    edited = tmp_path / "edited"
    shutil.copytree(recorded, edited)
    shutil.rmtree(edited / "findings", ignore_errors=True)
    for part in (edited / "traces").glob("**/*.parquet"):
        table = pq.read_table(part)
        ours = pc.equal(table["trace_id"], clean)
        if pc.any(ours).as_py():
            outcome = pc.if_else(ours, pa.scalar("fail"), table["outcome"])
            pq.write_table(
                table.set_column(table.schema.get_field_index("outcome"), "outcome", outcome), part
            )
    coverage = _features_coverage.usable(Dataset(edited), Thresholds())
    assert coverage == _features_coverage.Coverage(uncovered=0, restated=True)
    fast, slow = classify_both(edited)
    assert fast.equals(slow), (fast.to_dicts(), slow.to_dicts())
    [evidence] = fast.filter(trace_id=clean, category="silent_degradation")["evidence"].to_list()
    assert evidence.startswith("the run completed but its outcome is fail")


def late_copy(recorded: Path, target: Path, trace_id: str) -> None:
    """``recorded`` copied to ``target`` (no findings file), plus a late span of ``trace_id`` in a batch of
    its own: a copy of its most repeated tool call (a new span id, last in the tree), so that call counts
    one more."""
    import pyarrow.compute as pc

    shutil.copytree(recorded, target)
    shutil.rmtree(target / "findings", ignore_errors=True)
    spans = read_table(recorded, "spans")
    own = spans.filter(pc.equal(spans["trace_id"], trace_id))
    calls = own.filter(pc.and_(pc.equal(own["kind"], "tool"), pc.equal(own["attempt"], 1)))
    shas = calls["request_sha256"].to_pylist()
    repeated = max(shas, key=shas.count)
    tool = calls.slice(shas.index(repeated), 1)
    last = max(own["span_index"].to_pylist())
    tool = tool.set_column(tool.schema.get_field_index("span_id"), "span_id", pa.array(["feed" * 4]))
    for name in ("span_index", "subtree_end"):
        tool = tool.set_column(tool.schema.get_field_index(name), name, pa.array([last + 1], pa.int32()))
    with pipeline_writer(target) as writer:
        writer.write_spans(tool)


@pytest.mark.parametrize(
    "thresholds",
    [{}, {"loop_min_repeats": 2}, {"score_threshold": 0.95}],
    ids=["default", "loop_2", "score_95"],
)
def test_a_late_span_sends_only_its_own_trace_to_the_spans(recorded, tmp_path, thresholds):
    looping = Dataset(recorded).classify().filter(category="tool_loop")["trace_id"][0]
    late = tmp_path / "late"
    late_copy(recorded, late, looping)
    coverage = _features_coverage.usable(Dataset(late), Thresholds(**thresholds))
    assert coverage == _features_coverage.Coverage(uncovered=1)  # not the whole data dir
    fast, slow = classify_both(late, partly=True, **thresholds)
    assert fast.equals(slow), (fast.to_dicts(), slow.to_dicts())
    before = Dataset(recorded).classify().filter(trace_id=looping, category="tool_loop")["evidence"][0]
    after = fast.filter(trace_id=looping, category="tool_loop")["evidence"][0]
    assert before != after  # the late call is counted: the trace was read from its spans


def test_a_batch_whose_features_are_lost_sends_only_its_traces_to_the_spans(recorded, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(recorded, mixed)
    shutil.rmtree(mixed / "findings", ignore_errors=True)
    before = {p for table in ("trace_features", "trace_checks") for p in (mixed / table).glob("**/*.parquet")}
    with pipeline_writer(mixed) as writer:
        writer.write_spans(spans_table(trace_spans("ef" * 16, 100, 3)))
    for table in ("trace_features", "trace_checks"):  # as if written before the features existed
        for part in set((mixed / table).glob("**/*.parquet")) - before:
            part.unlink()
    assert _features_coverage.usable(Dataset(mixed), Thresholds()) == _features_coverage.Coverage(uncovered=1)
    fast, slow = classify_both(mixed, partly=True)
    assert fast.equals(slow), (fast.to_dicts(), slow.to_dicts())
    assert fast.filter(trace_id="ef" * 16)["category"].to_list() == ["error"]
    assert fast.filter(pl.col("trace_id") != "ef" * 16).equals(Dataset(recorded).classify())


def trace_spans(trace_id: str, first: int, count: int) -> list[dict]:
    """A root and ``count - 1`` failing tool calls under it, span ids from ``first``."""
    root = {
        "trace_id": trace_id,
        "span_id": f"{first:016x}",
        "parent_span_id": None,
        "name": "agent",
        "kind": "root",
        "start": 1_700_000_000_000_000_000,
        "end": 1_700_000_000_100_000_000,
        "status_code": "ERROR",
    }
    children = [
        {
            "trace_id": trace_id,
            "span_id": f"{first + i:016x}",
            "parent_span_id": f"{first:016x}",
            "name": "lookup",
            "kind": "tool",
            "tool_name": "lookup",
            "boundary": "tool:lookup",
            "start": 1_700_000_000_000_000_000 + i * 1_000_000,
            "end": 1_700_000_000_000_500_000 + i * 1_000_000,
            "status_code": "ERROR",
            "error_type": "LookupError",
        }
        for i in range(1, count)
    ]
    return [root, *children]


def test_a_request_pieced_from_an_earlier_batch_leaves_the_batch_to_the_spans_quietly(caplog):
    """A request put together from a piece written with an earlier batch: the batch cannot be described on
    its own, which is expected (its traces are classified from their spans), so nothing is logged."""
    root, call = trace_spans("ab" * 16, 1, 2)
    request = '{"messages": [' + placeholder("0" * 64) + "]}"
    call |= {"kind": "llm", "tool_name": None, "request": request}
    call["attributes"] = {attr.REQUEST_PIECED: "true"}
    with caplog.at_level(logging.WARNING):
        pieces = schema.PIECES.empty_table()
        assert _features_compute.trace_features(spans_table([root, call]), pieces) is None
    assert not caplog.records, caplog.text


def test_a_trace_written_in_two_batches_is_classified_from_its_spans(tmp_path):
    data = tmp_path / "data"
    trace_id = "ab" * 16
    spans = trace_spans(trace_id, 1, 4)
    with pipeline_writer(data) as writer:
        writer.write_spans(spans_table(spans[:2]))
        writer.flush()
        writer.write_spans(spans_table(spans[2:]))  # late spans: their own batch, their own features row
    dataset = Dataset(data)
    assert not _features_coverage.usable(dataset, Thresholds())
    assert dataset.classify()["category"].to_list() == ["error"]


def test_write_calls_between_flushes_share_their_features_rows(tmp_path):
    data = tmp_path / "data"
    spans = trace_spans("ab" * 16, 1, 4)
    with pipeline_writer(data) as writer:
        writer.write_spans(spans_table(spans[:2]))
        writer.write_spans(spans_table(spans[2:]))  # gathered with the first: one features row
    dataset = Dataset(data)
    assert _features_coverage.usable(dataset, Thresholds())
    assert dataset.classify().equals(dataset.classify(thresholds=Thresholds(**EXHAUSTIVE)))


def test_batches_computed_one_after_the_other_in_one_session_keep_their_own_rows(tmp_path):
    data = tmp_path / "data"
    with pipeline_writer(data) as writer:
        writer.write_spans(spans_table(trace_spans("ab" * 16, 1, 4)))
        writer.flush()  # the first computation; the second runs in the same DuckDB connection
        writer.write_spans(spans_table(trace_spans("cd" * 16, 10, 2)))
    dataset = Dataset(data)
    assert sorted(read_table(data, "trace_features")["trace_id"].to_pylist()) == ["ab" * 16, "cd" * 16]
    assert _features_coverage.usable(dataset, Thresholds())
    assert dataset.classify().equals(dataset.classify(thresholds=Thresholds(**EXHAUSTIVE)))


def test_one_batch_of_the_same_spans_is_classified_from_its_features(tmp_path):
    data = tmp_path / "data"
    with pipeline_writer(data) as writer:
        writer.write_spans(spans_table(trace_spans("ab" * 16, 1, 4) + trace_spans("cd" * 16, 10, 2)))
    dataset = Dataset(data)
    assert _features_coverage.usable(dataset, Thresholds())
    fast = dataset.classify()
    assert fast.select("trace_id", "category", "span_kind").rows() == [
        ("ab" * 16, "error", "tool"),
        ("cd" * 16, "error", "tool"),
    ]
    assert fast.equals(dataset.classify(thresholds=Thresholds(**EXHAUSTIVE)))


def test_features_whose_checks_rows_are_missing_are_not_used(recorded, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(recorded, partial)
    shutil.rmtree(partial / "findings", ignore_errors=True)
    shutil.rmtree(partial / "trace_checks")  # as if read between the two files' publication
    dataset = Dataset(partial)
    assert not _features_coverage.usable(dataset, Thresholds())
    assert dataset.classify().equals(Dataset(recorded).classify())


KINDS = ("llm", "tool", "retriever", "memory", "agent")


@st.composite
def traces(draw) -> list[dict]:
    """A few traces of random shape: kinds, failures, retries, repeated calls, tokens, outcomes."""
    spans: list[dict] = []
    for t in range(draw(st.integers(4, 12))):
        trace_id = f"{t + 1:032x}"
        base = 1_700_000_000_000_000_000 + t * 10**10
        count = draw(st.integers(1, 7))
        root_outcome = draw(st.sampled_from([None, "pass", "fail"]))
        spans.append(
            {
                "trace_id": trace_id,
                "span_id": f"{t + 1:08x}{0:08x}",
                "parent_span_id": None,
                "name": "agent",
                "kind": "root",
                "agent_name": "support",
                "start": base,
                "end": base + (count + 1) * 10**6 * draw(st.integers(1, 40)),
                "status_code": draw(st.sampled_from(["UNSET", "UNSET", "ERROR"])),
                "attributes": [("tailcut.outcome", root_outcome)] if root_outcome else [],
            }
        )
        for i in range(1, count):
            kind = draw(st.sampled_from(KINDS))
            parent = draw(st.integers(0, i - 1))
            start = base + i * 10**6 + draw(st.integers(0, 3)) * 10**5  # ties in start order happen
            span = {
                "trace_id": trace_id,
                "span_id": f"{t + 1:08x}{i:08x}",
                "parent_span_id": f"{t + 1:08x}{parent:08x}",
                "name": kind,
                "kind": kind,
                "start": start,
                "end": start + draw(st.integers(1, 9)) * 10**5,
                "status_code": draw(st.sampled_from(["UNSET", "UNSET", "ERROR"])),
                "error_type": draw(st.sampled_from([None, "TimeoutError", "Rejected"])),
                "seq": i,
                "boundary": f"{kind}:x" if kind != "agent" else None,
            }
            if kind == "llm":
                span["input_tokens"] = draw(st.integers(0, 2000))
                span["output_tokens"] = draw(st.integers(0, 300))
                span["finish_reason"] = draw(st.sampled_from([None, "stop", "length"]))
            if kind == "tool":
                span["tool_name"] = draw(st.sampled_from(["lookup", "ship"]))
                span["attempt"] = draw(st.sampled_from([1, 1, 2]))
                span["request_sha256"] = draw(st.sampled_from(["a" * 64, "b" * 64, None]))
            spans.append(span)
    return spans


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=traces(), late=st.sets(st.integers(2, 12), max_size=4))
def test_features_agree_with_the_spans_on_random_traces(tmp_path_factory, spans, late):
    """The last span of each trace in ``late`` comes in a second batch (its trace then has two rows, and only
    the others are classified from their features)."""
    import pyarrow.compute as pc

    from tailcut.exporters._signals import trace_rows

    data = tmp_path_factory.mktemp("random") / "data"
    table = spans_table(spans)
    last = {s["trace_id"]: s["span_id"] for s in spans if int(s["trace_id"], 16) in late}
    second = pc.is_in(
        pc.binary_join_element_wise(table["trace_id"], table["span_id"], ""),
        value_set=pa.array([t + s for t, s in last.items()], pa.string()),
    )
    with pipeline_writer(data) as writer:
        writer.write_spans(table.filter(pc.invert(second)))
        writer.flush()
        writer.write_spans(table.filter(second))
        writer.write_traces(
            trace_rows(table, kept=True, decision_reason="ingested", inclusion_probability=1.0)
        )
    for thresholds in ({"min_baseline": 3, "cost_z": 1.5, "structure_z": 1.0}, {"loop_min_repeats": 2}):
        split = any(sum(s["trace_id"] == t for s in spans) > 1 for t in last)
        fast, slow = classify_both(data, **thresholds, partly=split)
        assert fast.equals(slow), (thresholds, fast.to_dicts(), slow.to_dicts())


def test_a_log_replay_reads_back_spans_and_traces_files_only(tmp_path):
    from tailcut.collector._journal import published

    data = tmp_path / "data"
    with pipeline_writer(data) as writer:
        writer.write_spans(spans_table(trace_spans("ab" * 16, 1, 3)))
    names = sorted(p.relative_to(data).as_posix() for p in data.glob("*/**/*.parquet"))
    assert {name.split("/")[0] for name in names} == {"spans", "trace_features", "trace_checks"}
    found = published(str(data), names)  # the features files hold no span positions: skipped, not an error
    assert found.spans == {("ab" * 16, 0), ("ab" * 16, 1), ("ab" * 16, 2)}
