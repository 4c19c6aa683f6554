"""Parquet every engine opens: DuckDB, polars, ClickHouse (chdb) and Spark 4 give identical answers.

One data dir (the demo fleet, tail-sampled so π varies) and the same questions put to each engine
reading the raw files with default settings: rows per table; kept traces by harness revision; the
1/π-weighted count of kept traces; spans per kind with their maximum depth; and the earliest span start
as a timestamp (in microseconds) beside its integer nanosecond twin.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from tests.analysis_support import fleet_data, tail_sample

Answers = dict[str, list[tuple[Any, ...]]]

QUESTIONS = {
    "rows": "SELECT '{t}' AS name, count(*) AS n FROM {t}",
    "kept_by_revision": (
        "SELECT harness_revision, count(*) AS n FROM traces WHERE kept GROUP BY harness_revision "
        "ORDER BY harness_revision"
    ),
    "weighted_kept": "SELECT round(sum(1.0 / inclusion_probability), 6) AS n FROM traces WHERE kept",
    "kinds": "SELECT kind, count(*) AS n, max(depth) AS d FROM spans GROUP BY kind ORDER BY kind",
    # the earliest start as a timestamp, in microseconds, and its nanosecond twin
    "first_start": "SELECT {micros} AS us, min(start_time_ns) AS ns FROM spans",
}
MICROS = {
    "duckdb": "epoch_us(min(start_time))",
    "chdb": "toUnixTimestamp64Micro(min(start_time))",
    "spark": "unix_micros(min(start_time))",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    fleet = fleet_data(tmp_path_factory)
    target = tmp_path_factory.mktemp("engines") / "data"
    tail_sample(fleet.path, target, fleet.failing, 0.25)
    return target


def _sql_answers(data: Path, engine: str, run) -> Answers:  # type: ignore[no-untyped-def]
    answers: Answers = {}
    answers["rows"] = [row for table in ("spans", "traces") for row in run(QUESTIONS["rows"].format(t=table))]
    for name in ("kept_by_revision", "weighted_kept", "kinds"):
        answers[name] = run(QUESTIONS[name])
    answers["first_start"] = run(QUESTIONS["first_start"].format(micros=MICROS[engine]))
    return {name: [tuple(_plain(v) for v in row) for row in rows] for name, rows in answers.items()}


def _plain(value: Any) -> Any:
    """CSV text (chdb's answers) as the int or float it spells, so engines' answers compare."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def duckdb_answers(data: Path) -> Answers:
    connection = duckdb.connect()
    for table in ("spans", "traces"):
        connection.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{data}/{table}/**/*.parquet', "
            "hive_partitioning = true)"
        )
    assert connection.execute("SELECT typeof(start_time) FROM spans LIMIT 1").fetchone() == (
        "TIMESTAMP WITH TIME ZONE",
    )
    return _sql_answers(data, "duckdb", lambda q: connection.execute(q).fetchall())


def chdb_answers(data: Path) -> Answers:
    chdb = pytest.importorskip("chdb")

    def run(query: str) -> list[tuple[Any, ...]]:
        for table in ("spans", "traces"):
            query = query.replace(f"FROM {table}", f"FROM file('{data}/{table}/*/*.parquet', Parquet)")
        text = str(chdb.query(query, "CSV"))
        return [tuple(row) for row in csv.reader(io.StringIO(text)) if row]

    assert run("SELECT toTypeName(start_time) FROM spans LIMIT 1") == [("DateTime64(6, 'UTC')",)]
    return _sql_answers(data, "chdb", run)


def polars_answers(data: Path) -> Answers:
    spans = pl.scan_parquet(f"{data}/spans/**/*.parquet", hive_partitioning=True)
    traces = pl.scan_parquet(f"{data}/traces/**/*.parquet", hive_partitioning=True)
    assert spans.collect_schema()["start_time"] == pl.Datetime("us", "UTC")
    kept = traces.filter(pl.col("kept"))
    answers: Answers = {
        "rows": [
            ("spans", spans.select(pl.len()).collect().item()),
            ("traces", traces.select(pl.len()).collect().item()),
        ],
        "kept_by_revision": kept.group_by("harness_revision")
        .agg(pl.len())
        .sort("harness_revision", nulls_last=False)
        .collect()
        .rows(),
        "weighted_kept": [
            (round(kept.select((1.0 / pl.col("inclusion_probability")).sum()).collect().item(), 6),)
        ],
        "kinds": spans.group_by("kind").agg(pl.len(), pl.col("depth").max()).sort("kind").collect().rows(),
        "first_start": [
            spans.select(pl.col("start_time").min().dt.epoch("us"), pl.col("start_time_ns").min())
            .collect()
            .row(0)
        ],
    }
    return {name: [tuple(_plain(v) for v in row) for row in rows] for name, rows in answers.items()}


def test_duckdb_polars_and_clickhouse_give_identical_answers(data):
    expected = duckdb_answers(data)
    assert expected["rows"][0][1] > 0 and expected["kept_by_revision"]
    ((us, ns),) = expected["first_start"]
    assert us == ns // 1000  # the timestamp is the nanosecond time truncated to the microsecond
    assert polars_answers(data) == expected
    assert chdb_answers(data) == expected


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning")  # pyspark's note about the installed pandas
def test_spark_4_gives_the_same_answers_with_default_settings(data):
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime (17 or later); none is on PATH")
    pyspark_sql = pytest.importorskip("pyspark.sql")
    spark = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("tailcut-engines")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        for table in ("spans", "traces"):
            spark.read.parquet(str(data / table)).createOrReplaceTempView(table)
        types = dict(spark.table("spans").dtypes)
        assert types["start_time"] == "timestamp" and types["start_time_ns"] == "bigint"
        answers = _sql_answers(data, "spark", lambda q: [tuple(row) for row in spark.sql(q).collect()])
    finally:
        spark.stop()
    assert answers == duckdb_answers(data)
