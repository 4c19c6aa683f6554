"""Object storage end to end: a real S3 API (moto's server) on loopback, no DuckDB extension.

``tailcut collect`` writes its data dir to ``s3://``; ``sql``, ``report``, ``select``, ``export-corpus``
and ``replay`` then run against the bucket, and every answer matches the same commands on local disk:
once against a second collector fed the same requests (the deterministic columns), and once against a
local copy of the bucket's objects (every byte of every answer).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

import tailcut
from tailcut.analysis import Dataset
from tailcut.cli import cli
from tailcut.collector import Collector, load_config
from tailcut.exporters import _location
from tailcut.exporters._location import location
from tailcut.testing import capture_spans
from tests.test_collector_helpers import post, write_config

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "tailcut-test"
POLICIES = [
    {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
    {"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 30}},
]


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict:
    if order_id % 5 == 0:
        raise LookupError(f"no order {order_id}")
    return {"order_id": order_id, "amount": 10.0 * order_id}


@tailcut.tool(name="refund")
def refund(order_id: int, amount: float) -> dict:
    return {"order_id": order_id, "refunded": amount}


def shop(order: dict) -> dict:
    with tailcut.run("shop", input=order, harness_revision="h-1") as run:
        found = lookup(order["order_id"])
        done = refund(found["order_id"], found["amount"])
        run.set_outcome("pass")
        return done


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server on loopback with one bucket; the standard AWS variables point at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield f"s3://{BUCKET}"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _location._s3_for.cache_clear()
        server.stop()


def _requests() -> list[bytes]:
    """OTLP requests of 20 real SDK runs (every fifth fails), one request per run."""
    bodies = []
    for order_id in range(1, 21):
        with capture_spans() as spans:
            try:
                shop({"order_id": order_id})
            except LookupError:
                pass
        bodies.append(encode_spans(list(spans)).SerializeToString())
    return bodies


def _collect(directory: Path, data: str, bodies: list[bytes]) -> None:
    directory.mkdir()
    config = load_config(write_config(directory, policies=POLICIES), overrides={"data": data})
    collector = Collector(config)
    ports = collector.start()
    try:
        for body in bodies:
            status, _, _ = post(ports.http, body)
            assert status == 200
    finally:
        collector.stop()


@pytest.fixture(scope="module")
def runs(s3, tmp_path_factory) -> tuple[str, Path, Path]:
    """The same requests collected into the bucket and into a local data dir; and a copy of the bucket."""
    root = tmp_path_factory.mktemp("s3")
    bodies = _requests()
    remote = f"{s3}/data"
    _collect(root / "remote-collector", remote, bodies)
    _collect(root / "local-collector", str(root / "local"), bodies)
    mirror = root / "mirror"
    pafs.copy_files(f"{BUCKET}/data", str(mirror), source_filesystem=location(remote).filesystem)
    return remote, root / "local", mirror


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def _words(text: str, place: str) -> list[str]:
    """``text`` line by line with ``place`` named ``HERE`` and runs of spaces as one (titles pad by width)."""
    return [" ".join(line.split()) for line in text.replace(place, "HERE").splitlines()]


def test_the_collector_publishes_whole_parquet_objects_and_nothing_else(runs):
    remote, _, mirror = runs
    place = location(remote)
    names = [
        info.base_name
        for info in place.filesystem.get_file_info(pafs.FileSelector(place.path, recursive=True))
    ]
    files = [n for n in names if "." in n]
    assert files and all(n.startswith("part-") and n.endswith(".parquet") for n in files)
    for path in mirror.rglob("*.parquet"):
        assert pq.read_metadata(path).num_rows > 0  # each object is a complete Parquet file


DETERMINISTIC = (
    "SELECT trace_id, kept, baseline, inclusion_probability, policies, span_count, error_count, "
    "start_time, start_time_ns, end_time_ns, harness_revision FROM traces ORDER BY trace_id"
)


def test_sql_on_the_bucket_matches_a_collector_writing_to_local_disk(runs):
    remote, local, _ = runs
    for query in (
        DETERMINISTIC,
        "SELECT trace_id, span_id, name, kind, start_time_ns, request, response FROM spans ORDER BY 1, 2",
    ):
        answer = _run("sql", query, "--data", remote, "--format", "csv")
        assert answer == _run("sql", query, "--data", str(local), "--format", "csv")
    counts = _run("sql", "SELECT count(*) FILTER (kept), count(*) FROM traces", "--data", remote)
    assert "20" in counts


def test_report_select_export_and_replay_on_the_bucket_match_local_disk(runs, s3, tmp_path):
    remote, _, mirror = runs
    report = _words(_run("report", "--data", remote), remote)
    assert report == _words(_run("report", "--data", str(mirror)), str(mirror))

    corpus_remote = f"{s3}/corpus"
    select = ["select", "--baseline", "3", "--seed", "1"]
    _run(*select, "--data", remote, "--out", corpus_remote)
    _run(*select, "--data", str(mirror), "--out", str(tmp_path / "corpus"))
    local_corpus = tmp_path / "corpus"
    with _location.local_directory(location(corpus_remote)) as copy:
        for name in ("runs.parquet", "envelopes.parquet"):
            assert pq.read_table(copy / name).equals(pq.read_table(local_corpus / name))

    replay = ["replay", "--agent", "tests.test_storage_s3:shop", "-n", "2"]
    remote_replay = _words(_run(*replay[:1], corpus_remote, *replay[1:]), corpus_remote)
    local_replay = _words(_run(*replay[:1], str(local_corpus), *replay[1:]), str(local_corpus))
    assert remote_replay == local_replay
    assert "recorded" in "".join(remote_replay)

    (trace_id,) = Dataset(remote).sql("SELECT trace_id FROM traces WHERE kept ORDER BY trace_id LIMIT 1")[
        "trace_id"
    ]
    _run("export-corpus", "--data", remote, "--trace", trace_id, "--out", f"{s3}/incident")
    _run("export-corpus", "--data", str(mirror), "--trace", trace_id, "--out", str(tmp_path / "incident"))
    with _location.local_directory(location(f"{s3}/incident")) as copy:
        assert pq.read_table(copy / "envelopes.parquet").equals(
            pq.read_table(tmp_path / "incident" / "envelopes.parquet")
        )
    tree = _words(_run("tree", trace_id, "--data", remote), remote)
    assert tree == _words(_run("tree", trace_id, "--data", str(mirror)), str(mirror))


def test_dataset_frames_classify_compare_and_ingest_work_on_the_bucket(runs, s3, tmp_path):
    remote, _, mirror = runs
    with Dataset(remote) as bucket, Dataset(mirror) as disk:
        assert bucket.spans().drop("dt").sort("span_id").equals(disk.spans().drop("dt").sort("span_id"))
        assert bucket.traces_lazy(columns=["trace_id"]).collect().height == 20
        assert bucket.tables() == disk.tables()
    for command in (["classify"], ["compare", "--by", "harness_revision", "h-1", "h-1"]):
        on_bucket = _words(_run(*command, "--data", remote), remote)
        assert on_bucket == _words(_run(*command, "--data", str(mirror)), str(mirror))

    otlp = tmp_path / "spans.binpb"
    otlp.write_bytes(_requests()[0])
    _run("ingest", str(otlp), "--data", f"{s3}/ingested")
    _run("ingest", str(otlp), "--data", str(tmp_path / "ingested"))
    query = "SELECT trace_id, span_id, start_time_ns, kind FROM spans ORDER BY span_id"
    assert _run("sql", query, "--data", f"{s3}/ingested") == _run(
        "sql", query, "--data", str(tmp_path / "ingested")
    )


def test_the_readmes_offline_duckdb_example_reads_the_bucket(runs):
    """The README's pyarrow-filesystem way gives DuckDB the bucket's spans with no extension download."""
    import re

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    marker = "<!-- readme-s3-example: tests/test_storage_s3.py runs this block -->"
    assert readme.count(marker) == 1
    match = re.match(r"\s*```python\n(.*?)\n```", readme.split(marker, 1)[1], flags=re.S)
    assert match, "the marker must be followed by a ```python block"
    remote, local, _ = runs
    code = match.group(1).replace("bucket/prefix", remote.removeprefix("s3://"))
    # In a fresh interpreter, as a reader runs it (DuckDB's default connection is per process: another
    # test's unfinished result on it must not decide this one).
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    expected = Dataset(local).sql("SELECT kind, count(*) AS spans FROM spans GROUP BY kind ORDER BY kind")
    assert ran.stdout.strip() == str(list(expected.iter_rows()))


def test_a_bad_location_is_one_line(s3):
    result = CliRunner().invoke(cli, ["sql", "SELECT 1", "--data", "gs://bucket/data"])
    assert result.exit_code != 0
    assert "unsupported URL scheme" in result.output
    assert "Traceback" not in result.output
    empty = CliRunner().invoke(cli, ["sql", "SELECT 1", "--data", f"{s3}/nothing-here"])
    assert empty.exit_code != 0 and "no Parquet files" in empty.output
