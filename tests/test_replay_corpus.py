"""Corpus export (``tailcut export-corpus``) and loading: a corpus is replayed only if it is intact."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tailcut
from tailcut import replay
from tailcut.canonical import canonical_json
from tailcut.cli import cli
from tailcut.errors import CorpusError
from tailcut.exporters import DataDirWriter, corpus_format, schema
from tailcut.replay._corpus import Envelope
from tests.replay_support import record_corpus, recording_into, rewrite_corpus_file, trace_ids


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict:
    return {"order_id": order_id, "status": "shipped"}


def agent(order: dict) -> dict:
    with tailcut.run("agent", input=order) as run:
        found = lookup(order["order_id"])
        run.set_outcome("pass")
        return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    corpus, ids = record_corpus(
        tmp_path_factory.mktemp("pristine"), [lambda: agent({"order_id": 1}), lambda: agent({"order_id": 2})]
    )
    return corpus, ids


@pytest.fixture
def corpus(pristine, tmp_path):
    copy = tmp_path / "corpus"
    shutil.copytree(pristine[0], copy)
    return copy


def test_an_intact_corpus_loads_with_its_runs_and_envelopes(corpus, pristine):
    loaded = replay.load_corpus(corpus)
    assert list(loaded.runs) == pristine[1]
    assert [loaded.run(t).input for t in pristine[1]] == [{"order_id": 1}, {"order_id": 2}]
    assert [e.key for e in loaded.envelopes(pristine[1][1])] == ["tool:lookup#1"]
    assert loaded.boundaries() == {"tool:lookup"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_served_payloads_decode_to_exactly_what_was_recorded(value):
    envelope = Envelope(1, "tool:t", 1, "tool", "{}", None, canonical_json(value), None)
    assert envelope.served().response == value  # integers beyond 64 bits included


# -- integrity -----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["runs.parquet", "envelopes.parquet"]),
    where=st.floats(0, 1),
    mask=st.integers(1, 255),
)
def test_a_flipped_byte_in_a_data_file_is_refused_naming_the_file(corpus, name, where, mask):
    path = corpus / name
    original = path.read_bytes()
    flipped = bytearray(original)
    offset = min(int(where * len(original)), len(original) - 1)
    flipped[offset] ^= mask
    path.write_bytes(bytes(flipped))
    try:
        with pytest.raises(CorpusError) as refused:
            replay.load_corpus(corpus)
    finally:
        path.write_bytes(original)
    assert str(refused.value) == (
        f"corpus refused: {name} does not match its sha256 in manifest.json; re-run tailcut export-corpus"
    )


def _another_digest(digest):
    """A different digest of the same length (changing the first hex digit, whatever it is)."""
    return ("1" if digest[0] == "0" else "0") + digest[1:]


def _reseal(corpus):
    """Rewrite manifest.sha256 to match the (edited) manifest, as a consistent forgery would."""
    digest = hashlib.sha256((corpus / "manifest.json").read_bytes()).hexdigest()
    (corpus / "manifest.sha256").write_text(f"{digest}  manifest.json\n")


def _edit_manifest(corpus, edit):
    path = corpus / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    _reseal(corpus)


def test_a_manifest_that_does_not_match_its_digest_is_refused(corpus):
    path = corpus / "manifest.json"
    path.write_text(path.read_text().replace('"created_at": "', '"created_at": "1'))
    with pytest.raises(
        CorpusError, match=re.escape("manifest.json does not match its sha256 in manifest.sha256")
    ):
        replay.load_corpus(corpus)
    (corpus / "manifest.sha256").unlink()
    with pytest.raises(CorpusError, match=re.escape("manifest.sha256 is missing or unreadable")):
        replay.load_corpus(corpus)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["files"]["runs.parquet"].update(
                sha256=_another_digest(m["files"]["runs.parquet"]["sha256"])
            ),
            "corpus refused: runs.parquet does not match its sha256 in manifest.json",
        ),
        (
            lambda m: m["traces"][0].update(trace_id="e" * 32),
            "corpus refused: manifest.json does not agree with runs.parquet on its traces",
        ),
        (
            lambda m: m["traces"][1].update(replayable=False),
            "corpus refused: manifest.json does not agree with runs.parquet on its traces",
        ),
        (
            lambda m: m.update(schema_version="99"),
            "corpus refused: schema version '99' is unknown (this tailcut reads 1, 2)",
        ),
        (
            lambda m: m.update(format="other"),
            "corpus refused: manifest.json is not a tailcut corpus manifest",
        ),
        (
            lambda m: m["files"].pop("envelopes.parquet"),
            "corpus refused: manifest.json lists no sha256 for env",
        ),
    ],
    ids=["file hash", "trace id", "replayable flag", "schema version", "format", "file entry"],
)
def test_a_changed_manifest_is_refused(corpus, edit, message):
    _edit_manifest(corpus, edit)
    with pytest.raises(CorpusError, match="^" + re.escape(message)):
        replay.load_corpus(corpus)


def test_a_missing_unreadable_or_truncated_file_is_refused(corpus, tmp_path):
    envelopes = corpus / "envelopes.parquet"
    envelopes.write_bytes(envelopes.read_bytes()[:-10])
    with pytest.raises(CorpusError, match=re.escape("envelopes.parquet is not the size manifest.json lists")):
        replay.load_corpus(corpus)
    (corpus / "manifest.json").write_text('{"format": "tailcut-corpus", ')
    _reseal(corpus)
    with pytest.raises(CorpusError, match=r"^corpus refused: manifest\.json is unreadable \("):
        replay.load_corpus(corpus)
    (corpus / "manifest.json").unlink()
    with pytest.raises(CorpusError, match=r"^corpus refused: manifest\.sha256 is missing or unreadable"):
        replay.load_corpus(corpus)
    with pytest.raises(CorpusError, match="is not a directory"):
        replay.load_corpus(tmp_path / "nowhere")


def test_no_verify_skips_the_hashes_but_not_the_manifest(corpus):
    _edit_manifest(corpus, lambda m: m["files"]["runs.parquet"].update(sha256="0" * 64))
    with pytest.raises(CorpusError):
        replay.load_corpus(corpus)
    assert len(replay.load_corpus(corpus, verify=False).runs) == 2
    _edit_manifest(corpus, lambda m: m.update(schema_version="0"))
    with pytest.raises(CorpusError, match="schema version '0' is unknown"):
        replay.load_corpus(corpus, verify=False)


def test_the_replay_command_refuses_a_modified_corpus_in_one_line(corpus):
    envelopes = corpus / "envelopes.parquet"
    data = bytearray(envelopes.read_bytes())
    data[len(data) // 2] ^= 1
    envelopes.write_bytes(bytes(data))
    args = ["replay", str(corpus), "--agent", "tests.test_replay_corpus:agent"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.output == (
        "Error: corpus refused: envelopes.parquet does not match its sha256 in manifest.json; "
        "re-run tailcut export-corpus\n"
    )


# -- tailcut export-corpus -----------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path):
    data = tmp_path / "data"
    with recording_into(data):
        agent({"order_id": 1})
        agent({"order_id": 2})
    return data


def _decide_again(data, trace_id, *, baseline: bool, probability: float) -> None:
    """A later decision about the trace (a collector's), with its own π and baseline membership."""
    dataset = ds.dataset(data / "traces", format="parquet", partitioning="hive", schema=schema.TRACES)
    table = dataset.to_table(filter=ds.field("trace_id") == trace_id)
    for name in ("start_time", "end_time", "decided_at"):  # as ns integers, as write_traces takes them
        nanoseconds = table[name].cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
        table = table.set_column(table.schema.get_field_index(name), name, nanoseconds)
    row = table.to_pylist()[0]
    row.update(baseline=baseline, inclusion_probability=probability, decided_at=row["decided_at"] + 1)
    with DataDirWriter(data) as writer:
        writer.write_traces([row])


def test_export_corpus_takes_pi_and_baseline_from_the_traces_table(data_dir, tmp_path):
    first, second = trace_ids(data_dir)
    _decide_again(data_dir, second, baseline=True, probability=0.05)
    out = tmp_path / "corpus"
    result = CliRunner().invoke(
        cli,
        [
            "export-corpus",
            "--data",
            str(data_dir),
            "--trace",
            first,
            "--trace",
            second.upper(),
            "--out",
            str(out),
        ],
    )

    assert result.exit_code == 0, result.output
    assert result.output == f"wrote corpus {out}: 2 run(s), 2 boundary crossing(s)\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert [
        (t["trace_id"], t["reason"], t["baseline"], t["inclusion_probability"]) for t in manifest["traces"]
    ] == [
        (first, "exported by id", False, 1.0),
        (second, "exported by id", True, 0.05),
    ]
    assert replay.load_corpus(out).run(second).baseline is True


def test_a_data_dir_given_as_a_corpus_is_named_a_data_dir_with_the_command_that_makes_one(data_dir):
    with pytest.raises(CorpusError, match=r"is a data dir \(spans/, traces/\), not a replay corpus"):
        replay.load_corpus(data_dir)
    result = CliRunner().invoke(cli, ["replay", str(data_dir), "--agent", "tests.test_replay_corpus:agent"])
    assert result.exit_code != 0 and "tailcut select --data" in result.output
    assert "damaged" not in result.output and "manifest" not in result.output


def test_export_corpus_lists_a_trace_it_cannot_replay_and_refuses_bad_ids(data_dir, tmp_path):
    ghost = "a" * 32
    out = tmp_path / "corpus"
    result = CliRunner().invoke(
        cli, ["export-corpus", "--data", str(data_dir), "--trace", ghost, "--out", str(out)]
    )
    assert result.exit_code == 0
    assert (
        result.output.splitlines()[-1]
        == f"not replayable: {ghost}: no spans of this trace are in the data dir"
    )
    again = CliRunner().invoke(
        cli, ["export-corpus", "--data", str(data_dir), "--trace", ghost, "--out", str(out)]
    )
    assert again.exit_code == 1 and "already exists" in again.output and "--overwrite" in again.output

    bad = CliRunner().invoke(cli, ["export-corpus", "--data", str(data_dir), "--trace", "xyz", "--out", "x"])
    assert bad.exit_code == 1
    assert bad.output == "Error: --trace 'xyz' is not a trace id (32 hex characters)\n"


def test_a_corpus_written_before_the_optional_columns_existed_still_loads(corpus, pristine):
    for name, dropped in (
        (corpus_format.ENVELOPES, ["convention", "parent_seq"]),
        (
            corpus_format.RUNS,
            ["root_kind", "run_input_source", "run_output", "run_output_source", "outcome_source"],
        ),
    ):
        table = pq.read_table(corpus / name)
        rewrite_corpus_file(corpus, name, table.drop_columns(dropped))
    loaded = replay.load_corpus(corpus)
    (envelope,) = loaded.envelopes(pristine[1][0])
    assert (envelope.convention, envelope.third_party, envelope.parent_seq) == ("tailcut", False, None)
    assert loaded.run(pristine[1][0]).input == {"order_id": 1}


def test_a_corpus_without_a_required_column_is_refused_naming_it(corpus):
    table = pq.read_table(corpus / corpus_format.ENVELOPES)
    rewrite_corpus_file(corpus, corpus_format.ENVELOPES, table.drop_columns(["request_sha256"]))
    with pytest.raises(
        CorpusError, match=re.escape("envelopes.parquet has no column request_sha256; re-run tailcut")
    ):
        replay.load_corpus(corpus)


def test_the_run_is_its_parentless_span_and_runs_parquet_says_where_its_fields_came_from(corpus):
    runs = corpus_format.read_rows(corpus / corpus_format.RUNS, corpus_format.RUNS_SCHEMA)
    assert [(r["root_kind"], r["run_input_source"], r["outcome_source"]) for r in runs] == [
        ("root", "tailcut.run.input", "tailcut.outcome")
    ] * 2
