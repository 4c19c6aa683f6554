"""Object-storage faults against a real S3 API (moto's server on loopback): a bucket that does not exist
at start, and one removed while the collector runs and then created again.

The collector must say so at once (one line, exit 1), answer ``/healthz`` with 503 and the reason while
writes fail, say "writing works again" only after a write succeeded, lose nothing it acknowledged, and
count each trace and span once in its stop summary however often it replayed its write-ahead log.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable

import boto3
from click.testing import CliRunner

from tailcut.cli import cli
from tailcut.collector import Collector, load_config
from tests.test_collector_helpers import (
    export_request,
    post,
    python_env,
    simple_trace,
    trace_ids,
    write_config,
)
from tests.test_storage_s3 import BUCKET, s3  # noqa: F401  (the moto S3 server fixture)

COLLECT = [sys.executable, "-m", "tailcut", "collect", "--metrics", "127.0.0.1:0"]
ALL = [{"name": "all", "type": "always_sample"}]


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _health(port: int) -> tuple[int, str]:
    status, _, payload = post(port, b"", path="/healthz", method="GET")
    return status, payload.decode().strip()


def _empty_and_delete(bucket: str) -> None:
    client = boto3.client("s3")
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])
    client.delete_bucket(Bucket=bucket)


def test_a_missing_bucket_stops_collect_at_start_in_one_line(s3, tmp_path):  # noqa: F811
    result = subprocess.run(
        [*COLLECT, "--data", "s3://no-such-bucket/x", "--http", "127.0.0.1:0", "--no-grpc"],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist "
        "(create it, or check the URL and AWS_ENDPOINT_URL)"
    ]
    assert '"ready"' not in result.stdout


def test_sql_on_a_missing_bucket_names_the_bucket(s3):  # noqa: F811
    result = CliRunner().invoke(cli, ["sql", "SELECT 1", "--data", "s3://no-such-bucket/x"])
    assert result.exit_code != 0
    assert "bucket 'no-such-bucket' does not exist" in result.output
    assert "no Parquet files" not in result.output


def test_a_bucket_removed_mid_run_is_unhealthy_until_a_write_succeeds_and_nothing_is_lost(
    s3,  # noqa: F811
    tmp_path,
    caplog,
):
    bucket = "comes-and-goes"
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    config = write_config(
        tmp_path,
        policies=ALL,
        parquet={"path": f"s3://{bucket}/data", "roll_age": "200ms"},
        tailcut={"wal": {"dir": str(tmp_path / "wal")}},
    )
    collector = Collector(load_config(config))
    ports = collector.start()
    ids = iter(trace_ids(30))
    first = [next(ids) for _ in range(10)]
    later = [next(ids) for _ in range(10)]
    caplog.set_level(logging.WARNING, logger="tailcut")
    try:
        for trace_id in first:
            assert post(ports.http, export_request(simple_trace(trace_id)))[0] == 200
        assert collector.wait_idle(30)
        assert _health(ports.metrics) == (200, "ok")

        _empty_and_delete(bucket)
        for trace_id in later:  # acknowledged into the write-ahead log; their upload fails
            status = post(ports.http, export_request(simple_trace(trace_id)))[0]
            assert status in (200, 503)
            if status == 503:
                later.remove(trace_id)
                break
        _until(lambda: _health(ports.metrics)[0] == 503, "/healthz to answer 503")
        status, reason = _health(ports.metrics)
        assert reason.startswith("writing failed, retrying: ") and "bucket" in reason.lower(), reason
        metrics = post(ports.metrics, b"", path="/metrics", method="GET")[2].decode()
        assert "tailcut_writing_failed 1.0" in metrics
        assert not any("works again" in record.getMessage() for record in caplog.records)

        client.create_bucket(Bucket=bucket)
        _until(lambda: _health(ports.metrics) == (200, "ok"), "/healthz to recover")
        assert any("works again" in record.getMessage() for record in caplog.records)
    finally:
        collector.stop()
    summary = collector.processor.summary()
    acknowledged = first + later
    assert summary["traces"] == len(acknowledged), summary
    assert summary["spans_written"] == 3 * len(acknowledged), summary
    from tailcut.analysis import Dataset

    stored = Dataset(f"s3://{bucket}/data").sql("SELECT trace_id, count(*) AS n FROM spans GROUP BY 1")
    assert sorted(stored["trace_id"]) == sorted(trace_id.hex() for trace_id in acknowledged)
    assert set(stored["n"]) == {3}
