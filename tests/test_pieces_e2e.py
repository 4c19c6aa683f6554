"""Long agent loops through real processes: the SDK in an agent process, ``tailcut collect`` in another.

Agent and collector run in separate working directories with no payload dir configured; the requests
must come back byte-identical from the collector's data dir, ``select``/``export-corpus`` run from a
third directory, and a recorded replay of the corpus is bit-stable with zero model calls.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pyarrow.dataset as ds
import pytest

import tailcut
from tailcut import replay
from tailcut.analysis import Dataset, QueryError
from tailcut.canonical import sha256_hex
from tests.loop_agent import CLIENT, loop_agent
from tests.test_collector_helpers import python_env, write_config

AGENT = Path(__file__).with_name("loop_agent.py")
COLLECT = [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect"]
TAILCUT = [sys.executable, "-c", "from tailcut.cli import cli; cli()"]
KEEP_ALL = [{"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 100}}]


@contextlib.contextmanager
def collector(directory: Path, **tail_sampling: str) -> Iterator[dict]:
    """``tailcut collect`` running in ``directory`` (its data dir there); stopped with SIGTERM."""
    directory.mkdir()
    config = write_config(directory, policies=KEEP_ALL, **tail_sampling)
    process = subprocess.Popen(
        [*COLLECT, "--config", str(config)],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        ready = json.loads(process.stdout.readline())
        yield ready
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()


def run_agent(
    directory: Path, steps: int, protocol: str, endpoint: str, *extra: str, env: dict[str, str] | None = None
) -> dict:
    directory.mkdir()
    result = subprocess.run(
        [sys.executable, str(AGENT), str(steps), protocol, endpoint, *extra],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
        env={**python_env(), "PYTHONPATH": str(AGENT.parent.parent), **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def record(tmp_path: Path, steps: int, protocol: str, *extra: str) -> tuple[Path, dict]:
    with collector(tmp_path / "collector") as ready:
        address = ready["http" if protocol == "http/protobuf" else "grpc"]
        sent = run_agent(tmp_path / "agent", steps, protocol, f"http://{address}", *extra)
    assert sent["stats"]["spans_dropped"] == 0 and sent["stats"]["payloads_lost"] == 0
    assert list((tmp_path / "agent").iterdir()) == []  # nothing on the agent's disk
    return tmp_path / "collector" / "data", sent


@pytest.fixture
def replaying() -> Iterator[None]:
    """The test process replays :func:`loop_agent` through an instrumented client of a forbidding server."""
    from tailcut.testing import ModelServer

    server = ModelServer()
    with server, server.forbid():
        tailcut.instrument_openai()
        try:
            with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
                CLIENT["openai"] = client
                yield
        finally:
            tailcut.uninstrument_openai()
            CLIENT.clear()
        assert server.violations == [] and server.request_count == 0


def stored_requests(data: Path) -> list[tuple[str, str]]:
    with Dataset(data) as dataset:
        return dataset.sql(
            "SELECT request::VARCHAR AS text, request_sha256 FROM llm_calls ORDER BY seq"
        ).rows()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_160_step_loop_comes_back_whole_and_replays_with_no_model_calls(
    tmp_path, protocol, replaying, monkeypatch
):
    data, sent = record(tmp_path, 160, protocol)
    requests = stored_requests(data)
    assert [sha for _, sha in requests] == sent["requests"]  # what the model server received
    assert all(sha256_hex(text) == sha for text, sha in requests)  # byte-identical canonical text
    stored = ds.dataset(data / "spans", format="parquet", partitioning="hive").to_table(["request"])
    longest = max(len(v) for v in stored.column("request").to_pylist() if v)
    assert longest < 4096 < len(requests[-1][0]) / 100  # skeletons on disk, not whole transcripts

    third = tmp_path / "analyst"
    third.mkdir()
    monkeypatch.chdir(third)
    selected = subprocess.run(
        [*TAILCUT, "select", "--data", str(data), "--baseline", "1", "--out", "corpus"],
        capture_output=True,
        text=True,
        env=python_env(),
    )
    assert selected.returncode == 0, selected.stderr
    with Dataset(data) as dataset:
        (trace_id,) = dataset.sql("SELECT trace_id FROM traces").to_series().to_list()
    exported = subprocess.run(
        [*TAILCUT, "export-corpus", "--data", str(data), "--trace", trace_id, "--out", "exported"],
        capture_output=True,
        text=True,
        env=python_env(),
    )
    assert exported.returncode == 0, exported.stderr
    for name in ("corpus", "exported"):
        corpus = replay.load_corpus(third / name)
        envelopes = [e for e in corpus.envelopes(trace_id) if e.kind == "llm"]
        assert [sha256_hex(e.request) for e in envelopes] == sent["requests"]
    report = replay.run_replay(third / "exported", loop_agent, n=2, canary=False)
    assert [s.rate for s in report.traces()] == ["bit-stable 2/2 (recorded)"]


def test_20_mb_tool_result_and_llm_response_are_recorded_whole_and_replay(tmp_path, replaying):
    data, sent = record(tmp_path, 3, "grpc", "--big")
    requests = stored_requests(data)
    assert [sha for _, sha in requests] == sent["requests"]
    assert all(sha256_hex(text) == sha for text, sha in requests)
    with Dataset(data) as dataset:
        tool, llm = dataset.sql(
            "SELECT length(response::VARCHAR) AS n, response_sha256 AS sha, response::VARCHAR AS text "
            "FROM spans WHERE kind IN ('tool', 'llm') AND length(response::VARCHAR) > 20000000 "
            "ORDER BY kind DESC"
        ).rows()
    assert tool[0] > 20 * 1024 * 1024 and llm[0] > 20 * 1024 * 1024
    assert sha256_hex(tool[2]) == tool[1] and sha256_hex(llm[2]) == llm[1]
    with Dataset(data) as dataset:
        (trace_id,) = dataset.sql("SELECT trace_id FROM traces").to_series().to_list()
    from tailcut.exporters.corpus import Selection, write_corpus

    summary = write_corpus(data, [Selection(trace_id, "big")], tmp_path / "corpus")
    assert summary.not_replayable == {}
    report = replay.run_replay(tmp_path / "corpus", loop_agent, n=2, canary=False)
    assert [s.rate for s in report.traces()] == ["bit-stable 2/2 (recorded)"]


def test_a_damaged_piece_is_refused_naming_trace_boundary_and_hash(tmp_path):
    data, _ = record(tmp_path, 4, "http/protobuf")
    with Dataset(data) as dataset:
        trace_id, sha = dataset.sql(
            "SELECT trace_id, sha256 FROM read_parquet(?) ORDER BY length(text) DESC LIMIT 1",
            params=[str(data / "pieces" / "**" / "*.parquet")],
        ).rows()[0]
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in (data / "pieces").rglob("*.parquet"):
        table = pq.read_table(path)
        text = table.column("text")
        damaged = pc.if_else(pc.equal(table.column("sha256"), sha), pc.utf8_upper(text), text)
        pq.write_table(table.set_column(2, table.schema.field(2), damaged), path)
    with Dataset(data) as dataset, pytest.raises(QueryError) as refused:
        dataset.sql("SELECT request FROM llm_calls ORDER BY seq")
    message = str(refused.value)
    assert f"trace {trace_id}, boundary llm:openai.chat" in message
    assert f"piece sha256:{sha} is damaged" in message
    with Dataset(data) as dataset:  # queries that do not read the payloads are unaffected
        assert dataset.sql("SELECT count(*) AS n FROM llm_calls").item() == 4
