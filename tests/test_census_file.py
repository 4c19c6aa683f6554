"""The stored census (``census/census.parquet``, :mod:`tailcut.analysis._census_file`) that ``compare``
reads: written once per change of the data dir, read while its source key matches, lined up with the
``traces`` rows by position, and never trusted when it cannot be (issue 29's speed goal rests on it).

One data dir of two harness revisions goes through the real collector; each test copies it, so the stored
files one test writes or breaks are its own.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tailcut.analysis import Dataset, _findings, compare_by
from tailcut.analysis import _census_file as census_file
from tests.census_support import draw, feed, viewer_compare

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    rng = random.Random(41)
    runs = draw("v1", 80, {"error": 0.1, "silent_degradation": 0.1, "tool_loop": 0.05}, rng)
    runs += draw("v2", 80, {"error": 0.3, "silent_degradation": 0.1, "tool_loop": 0.05}, rng)
    return feed(tmp_path_factory.mktemp("census-file"), runs, baseline_percent=20.0, seed=5)


@pytest.fixture
def data(collected, tmp_path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(collected, copy)
    shutil.rmtree(copy / "findings", ignore_errors=True)
    shutil.rmtree(copy / "census", ignore_errors=True)
    return copy


def _record(data: Path) -> dict:
    with Dataset(data) as dataset:
        return compare_by(dataset, "harness_revision", "v1", "v2").to_record()


def _counts(record: dict) -> dict[str, tuple]:
    """Per category: the census counts of both groups, and the tail-kept and baseline-slice counts."""
    counts = {}
    for row in record["categories"]:
        cells = [row[key] for key in ("census", "tail", "baseline")]
        counts[row["category"]] = tuple(
            None
            if cell is None
            else (
                cell["a"]["numerator"],
                cell["a"]["denominator"],
                cell["b"]["numerator"],
                cell["b"]["denominator"],
            )
            for cell in cells
        )
    return counts


def test_the_first_comparison_stores_the_census_and_the_next_reads_it(data):
    first = _record(data)
    stored = census_file.path(str(data))
    assert stored.exists()
    written = stored.stat().st_mtime_ns
    with Dataset(data) as dataset:
        dataset.ensure_findings()
        census = census_file.current(dataset)
        assert census.relation.startswith("read_parquet(")
        assert [Path(name).name for name in census.files] == sorted(
            path.name for path in (data / "traces").glob("**/*.parquet")
        )
    assert _record(data) == first
    assert stored.stat().st_mtime_ns == written, "a current census must be read, not written again"
    rows = pq.read_table(stored)
    traces = pq.read_table(sorted((data / "traces").glob("**/*.parquet")), columns=["kept"])
    assert rows.num_rows == sum(
        pq.ParquetFile(path).metadata.num_rows for path in (data / "traces").glob("**/*.parquet")
    )
    kept = pc.not_equal(pc.bit_wise_and(rows.column("bits"), census_file.bit("kept")), 0)
    assert kept.to_pylist() == traces.column("kept").to_pylist(), "the rows line up with traces by position"


def test_new_traces_make_the_stored_census_stale(data, collected, tmp_path):
    before = _counts(_record(data))
    extra = feed(tmp_path / "more", draw("v2", 30, {"error": 1.0}, random.Random(3)), baseline_percent=20.0)
    for path in [*(extra / "traces").glob("**/*.parquet"), *(extra / "spans").glob("**/*.parquet")]:
        target = data / path.relative_to(extra)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target.with_name(f"late-{path.name}"))
    after = _counts(_record(data))
    a_before, a_after = before["error"][0], after["error"][0]
    assert a_after[:2] == a_before[:2], "group A is untouched"
    assert a_after[2:] == (a_before[2] + 30, a_before[3] + 30), "the 30 failing v2 traces are counted"


def test_a_trace_with_several_rows_counts_once(data):
    """A late row (a trace's spans that came after its decision) repeats a trace_id: the trace is counted
    once, whether or not it has such a row."""
    before = _counts(_record(data))
    [path] = list((data / "traces").glob("**/*.parquet"))[:1]
    table = pq.read_table(path)
    mask = pc.and_(pc.invert(table.column("baseline")), pc.equal(table.column("harness_revision"), "v2"))
    late = table.filter(mask).slice(0, 5)
    assert late.num_rows == 5
    pq.write_table(late, path.with_name(f"late-{path.name}"))
    shutil.rmtree(data / "findings")
    assert _counts(_record(data)) == before
    with Dataset(data) as dataset:
        dataset.ensure_findings()
        assert census_file.current(dataset).duplicates


def test_a_listed_file_gone_since_the_census_was_read_is_recovered_from(data, monkeypatch):
    """The census lists the files it lines up with; one compacted away between listing and reading fails
    the read, and compare computes the census of the files now."""
    expected = _record(data)
    real = census_file.current
    calls = []

    def stale(dataset, **options):
        census = real(dataset, **options)
        calls.append(census)
        if len(calls) == 1:
            gone = str(Path(census.files[0]).with_name("compacted-away.parquet"))
            return dataclasses.replace(census, files=(gone, *census.files[1:]))
        return census

    monkeypatch.setattr(census_file, "current", stale)
    assert _record(data) == expected
    assert len(calls) == 2


def test_a_damaged_or_foreign_census_file_is_computed_again(data):
    expected = _record(data)
    stored = census_file.path(str(data))
    stored.write_bytes(b"PAR1 not a parquet file")
    assert _record(data) == expected
    assert pq.read_schema(stored).metadata[b"tailcut.census.bits"]  # rewritten whole
    table = pq.read_table(stored)
    pq.write_table(table.replace_schema_metadata({}), stored)  # no source key: not trusted
    assert _record(data) == expected


def test_a_data_dir_that_cannot_take_the_census_keeps_it_in_memory(data, monkeypatch):
    expected = _record(data)
    census_file.path(str(data)).unlink()
    monkeypatch.setattr(census_file, "_write", lambda *args: None)  # as on a full disk or read-only dir
    assert _record(data) == expected
    assert not census_file.path(str(data)).exists()


def test_a_census_kept_in_memory_serves_the_session_until_the_files_or_findings_change(
    data, collected, tmp_path, monkeypatch
):
    """Without a stored census (here: the viewer's ``store=False``) a session computes it once, compares
    from it again while the files and its findings stay the same, and computes it again after either
    changes."""
    from tailcut.analysis import Thresholds, _census

    real = _census.build
    builds = []
    monkeypatch.setattr(_census, "build", lambda *args, **options: builds.append(1) or real(*args, **options))
    with Dataset(data) as dataset:
        first = compare_by(dataset, "harness_revision", "v1", "v2", store=False).to_record()
        assert compare_by(dataset, "harness_revision", "v1", "v2", store=False).to_record() == first
        assert len(builds) == 1
        dataset.classify(thresholds=Thresholds(loop_min_repeats=2))  # other findings: another census
        compare_by(dataset, "harness_revision", "v1", "v2", store=False)
        assert len(builds) == 2
        extra = feed(
            tmp_path / "more", draw("v2", 10, {"error": 1.0}, random.Random(3)), baseline_percent=20.0
        )
        for path in [*(extra / "traces").glob("**/*.parquet"), *(extra / "spans").glob("**/*.parquet")]:
            target = data / path.relative_to(extra)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target.with_name(f"late-{path.name}"))
        dataset.refresh()
        dataset.classify()  # the default findings of the files now, as `ensure_findings` would make them
        grown = compare_by(dataset, "harness_revision", "v1", "v2", store=False).to_record()
        assert len(builds) == 3
        assert grown["b"]["seen"] == first["b"]["seen"] + 10
    assert not (data / "census").exists()


def test_the_viewer_compares_without_writing_into_the_data_dir(data):
    """The viewer is read-only: its /compare computes findings and census in its session and writes
    neither, and shows the numbers a stored census gives."""
    page = viewer_compare(data)
    assert page.status_code == 200, page.text
    assert not (data / "census").exists() and not (data / "findings").exists()
    record = _record(data)
    error = next(row for row in record["categories"] if row["category"] == "error")["census"]
    assert f"{error['a']['numerator']:.0f}/{error['a']['denominator']} → " in page.text


def test_the_collector_leaves_a_current_census_for_the_next_compare(collected):
    """The collector's background refresh writes the census with the findings, so a CI gate's compare
    reads it rather than computing it."""
    stored = census_file.path(str(collected))
    assert stored.exists()
    with Dataset(collected) as dataset:
        key = _findings.source_key(dataset)
    assert pq.read_schema(stored).metadata[b"tailcut.census.source"] == key.encode()
