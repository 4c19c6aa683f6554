"""Census flags against findings: for every kept trace, the flag of each census category that its
``traces`` row carries equals "``classify`` found that category" (issue 29).

Random batches of traces (a failed root, retried and repeated tool calls, outcomes and scores, a token
blow-up, slow runs) go through ``tailcut collect`` with an errors policy and a 50% baseline slice, so the
reference for the z-scores is the slice and some traces are dropped; the flags are then read from the
``_census`` table of :mod:`tailcut.analysis._census` and compared with the findings.

Tool results may carry a failure report (an HTTP 429 text, a refused argument): the collector reads it from
the span's payload, so such a trace is an ``error`` or a ``schema_violation`` whether or not a span failed,
and whether or not a policy kept it. Not generated: schema violations the SDK counted (they need the
payloads it counted them from).
A data dir written before the census columns (census version 0) flags ``error`` by any failed span, which
differs from the classifier's rule where a run survived a failed tool call: the census then leaves
``error`` out (:func:`test_rows_without_the_census_columns_take_error_off_the_census`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailcut.analysis import Dataset, Thresholds, _census
from tailcut.exporters.conventions import observations
from tests.census_support import Shape, feed

pytestmark = pytest.mark.slow

#: Ordinary traces beside the generated ones, so the baseline slice holds an agent's reference.
ORDINARY = 60
#: Tool results: failures reported in them (an error, a refusal of the model's arguments) and clean ones.
REPORTS = (
    "HTTP Error 429: Too Many Requests",
    "Error: 1 validation error for SearchArgs\nquery\n  Field required",
    "in stock: 4",
    "The page says error 404 pages are customisable.",
)

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
    reporting_tool=st.one_of(st.none(), st.integers(0, 5)),
    report=st.sampled_from(REPORTS),
)


def flags_and_findings(
    directory: Path, generated: list[Shape], **tailcut: Any
) -> tuple[list[tuple], set[str]]:
    rng = random.Random(len(generated))
    ordinary = [Shape("h", llm_tokens=(rng.randint(38, 42),)) for _ in range(ORDINARY)]
    dataset = Dataset(feed(directory, [*ordinary, *generated], baseline_percent=50.0, tailcut=tailcut))
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


def test_a_failure_reported_only_in_a_tool_result_is_counted_on_every_trace_seen(tmp_path):
    """No span failed, so the errors policy keeps none of these; the collector still read each tool result,
    so the census counts every 429 as an ``error`` and every refused argument as a ``schema_violation``,
    dropped traces included."""
    throttled = [Shape("h", reporting_tool=0, report=REPORTS[0]) for _ in range(12)]
    refused = [Shape("h", reporting_tool=0, report=REPORTS[1]) for _ in range(12)]
    clean = [Shape("h", reporting_tool=0, report=REPORTS[3]) for _ in range(12)]
    _, covered = flags_and_findings(tmp_path, [*throttled, *refused, *clean])
    assert {"error", "schema_violation"} <= covered
    dataset = Dataset(tmp_path / "data")
    _census.build(dataset)
    census = _census.group_census(dataset, "root_name = ?", ["support-run"])
    assert census.seen == ORDINARY + 36
    assert (census.hits["error"], census.hits["schema_violation"]) == (12, 12)
    [(dropped,)] = dataset.connection.execute(
        "SELECT count(*) FROM traces WHERE NOT kept AND (error_spans > 0 OR refused_calls > 0)"
    ).fetchall()
    assert dropped > 0  # counted though their spans are gone


def test_the_collector_reads_payloads_with_the_observation_rules_of_its_config(tmp_path):
    """A house failure format in ``processors.tailcut.observation_rules``: the collector counts it in the rows
    and ``classify --config`` finds it, so ``error`` stays a census category; a collector without the rule
    does not count it, and the census then says the flag differs rather than miscount."""
    house = {"name": "acme.error", "pattern": r"^ACME-E\d+", "kind": "service"}
    failing = [Shape("h", reporting_tool=0, report="ACME-E42: stock service down") for _ in range(8)]
    limits = Thresholds(observation_rules=observations.with_extra(observations.rules_from_config([house])))
    for name, config in (("configured", {"observation_rules": [house]}), ("plain", {})):
        dataset = Dataset(feed(tmp_path / name, failing, baseline_percent=50.0, tailcut=config))
        assert dataset.classify(thresholds=limits).filter(category="error").height > 0  # the kept ones
        coverage = _census.build(dataset, limits)
        hits = _census.group_census(dataset, "true", []).hits["error"]
        if name == "configured":
            assert "error" in coverage.categories and hits == 8, coverage.reasons
        else:
            assert "error" not in coverage.categories and hits == 0
