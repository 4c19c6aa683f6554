"""Census flags against findings: for every kept trace, the flag of each census category that its
``traces`` row carries equals "``classify`` found that category" (issue 29).

Random batches of traces (a failed root, retried and repeated tool calls, outcomes and scores, a token
blow-up, slow runs) go through ``tailcut collect`` with an errors policy and a 50% baseline slice, so the
reference for the z-scores is the slice and some traces are dropped; the flags are then read from the
``_census`` table of :mod:`tailcut.analysis._census` and compared with the findings.

Not generated: schema violations (a violation the SDK counted needs the payloads it counted it from).
A data dir written before the census columns (census version 0) flags ``error`` by any failed span, which
differs from the classifier's rule where a run survived a failed tool call: the census then leaves
``error`` out (:func:`test_rows_without_the_census_columns_take_error_off_the_census`).
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut.analysis import Dataset, _census
from tests.census_support import Shape, feed

pytestmark = pytest.mark.slow

#: Ordinary traces beside the generated ones, so the baseline slice holds an agent's reference.
ORDINARY = 60

shapes = st.builds(
    Shape,
    group=st.just("h"),
    root_failed=st.booleans(),
    outcome=st.sampled_from(["pass", "fail", None]),
    score=st.one_of(st.none(), st.floats(0, 1)),
    llm_tokens=st.lists(st.sampled_from([40, 40, 41, 5000]), min_size=1, max_size=3).map(tuple),
    tools=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2)), max_size=6).map(tuple),
    failed_tool=st.one_of(st.none(), st.integers(0, 5)),
    slow=st.booleans(),
)


def flags_and_findings(directory: Path, generated: list[Shape]) -> tuple[list[tuple], set[str]]:
    rng = random.Random(len(generated))
    ordinary = [Shape("h", llm_tokens=(rng.randint(38, 42),)) for _ in range(ORDINARY)]
    dataset = Dataset(feed(directory, [*ordinary, *generated], baseline_percent=50.0))
    coverage = _census.build(dataset)
    columns = ", ".join(f"c.flag_{c}" for c in _census.CENSUS_CATEGORIES)
    rows = dataset.connection.execute(
        f"""
        SELECT c.trace_id, {columns}, coalesce(list(DISTINCT f.category), []) AS found
        FROM {_census.TABLE} c LEFT JOIN findings f USING (trace_id) WHERE c.kept GROUP BY ALL
        """
    ).fetchall()
    return rows, set(coverage.categories)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(shapes, min_size=5, max_size=40))
def test_for_kept_traces_the_census_flags_are_the_findings(tmp_path_factory, generated):
    rows, covered = flags_and_findings(tmp_path_factory.mktemp("flags"), generated)
    assert rows  # the errors policy and the slice kept some
    for trace_id, *flags, found in rows:
        for category, flag in zip(_census.CENSUS_CATEGORIES, flags, strict=True):
            if category == "schema_violation":
                assert not flag and category not in found
                continue
            assert flag == (category in found), (trace_id, category, found)
    assert covered == set(_census.CENSUS_CATEGORIES)


def test_rows_written_before_root_failed_keep_every_census_category(tmp_path):
    """A data dir from before the ``root_failed`` column: its flags read only older columns, so each
    category stays a census category, and the counts are those of the new rows."""
    survived = [Shape("h", tools=((1, 1), (1, 2)), failed_tool=0) for _ in range(5)]
    rows, covered = flags_and_findings(tmp_path / "new", survived)
    assert len(rows) >= 5 and "error" in covered  # the runs survived their failed tool: still errors
    data = tmp_path / "new" / "data"
    before = _census.build(Dataset(data))
    for path in (data / "traces").glob("dt=*/*.parquet"):  # as a collector before issue 29 wrote them
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["root_failed"]), path)
    after = _census.build(Dataset(data))
    assert after == before and set(after.categories) == set(_census.CENSUS_CATEGORIES)
