"""Payloads over the collector's receive limit, through real processes: the SDK in an agent process,
``tailcut collect`` in another, both with their default limits (32 MiB requests at the collector).

A 40 MiB tool result and a 40 MiB model response, and a batch of many mid-size spans over the limit,
arrive whole; carriers leave no row and count in no signal; a damaged or missing chunk is refused.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tailcut.analysis import Dataset, QueryError
from tailcut.canonical import sha256_hex
from tests.test_pieces_e2e import collector, run_agent, stored_requests

MIB = 1024 * 1024


def record(tmp_path, steps: int, protocol: str, *extra: str, env: dict[str, str] | None = None):
    # The trace is decided once its root arrived, however long its carriers take to cross.
    with collector(tmp_path / "collector", decision_wait="600s") as ready:
        address = ready["http" if protocol == "http/protobuf" else "grpc"]
        sent = run_agent(tmp_path / "agent", steps, protocol, f"http://{address}", *extra, env=env)
    return tmp_path / "collector" / "data", sent


def spans(data):
    return ds.dataset(data / "spans", format="parquet", partitioning="hive").to_table(
        ["trace_id", "name", "kind", "depth", "span_index", "subtree_end", "child_count", "attributes"]
    )


def assert_no_carriers_and_whole_trees(data, sent) -> None:
    table = spans(data)
    assert "tailcut.pieces" not in table.column("name").to_pylist()
    assert not any("tailcut.carrier" in dict(a) for a in table.column("attributes").to_pylist())
    n = table.num_rows
    assert sorted(table.column("span_index").to_pylist()) == list(range(n))
    assert max(table.column("subtree_end").to_pylist()) == n - 1
    assert sent["stats"]["spans_exported"] == n and sent["stats"]["spans_dropped"] == 0
    kinds = table.column("kind").to_pylist()
    with Dataset(data) as dataset:
        row = dataset.sql("SELECT span_count, llm_calls, tool_calls, max_depth FROM traces").rows()
    depth = max(table.column("depth").to_pylist())
    assert row == [(n, kinds.count("llm"), kinds.count("tool"), depth)]
    children = [c for k, c in zip(kinds, table.column("child_count").to_pylist(), strict=True) if k == "tool"]
    assert set(children) == {0}


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_40_mib_tool_result_and_llm_response_arrive_whole(tmp_path, protocol):
    data, sent = record(tmp_path, 2, protocol, "--big=40")
    requests = stored_requests(data)
    assert [sha for _, sha in requests] == sent["requests"]
    assert all(sha256_hex(text) == sha for text, sha in requests)
    assert len(requests[-1][0]) > 40 * MIB  # the 40 MiB tool result went back to the model
    with Dataset(data) as dataset:
        big = dataset.sql(
            "SELECT kind, response_sha256 AS sha, sha256(response::VARCHAR) AS got, "
            "length(response::VARCHAR) AS n FROM spans WHERE length(response::VARCHAR) > 40000000 "
            "ORDER BY kind"
        ).rows()
    assert [kind for kind, *_ in big] == ["llm", "tool"]
    assert all(sha == got and n > 40 * MIB for _, sha, got, n in big)
    assert_no_carriers_and_whole_trees(data, sent)


def test_a_batch_of_many_mid_size_spans_over_the_limit_arrives_whole(tmp_path):
    # One batch (a long schedule delay) of 90 tool spans with 400 KB results: ~36 MB, over 32 MiB.
    data, sent = record(
        tmp_path, 90, "http/protobuf", "--result-kb=400", env={"OTEL_BSP_SCHEDULE_DELAY": "600000"}
    )
    assert [sha for _, sha in stored_requests(data)] == sent["requests"]
    assert_no_carriers_and_whole_trees(data, sent)


def test_without_the_bound_the_same_batch_is_refused(tmp_path):
    _, sent = record(
        tmp_path,
        90,
        "http/protobuf",
        "--result-kb=400",
        env={"OTEL_BSP_SCHEDULE_DELAY": "600000", "TAILCUT_MAX_EXPORT_BYTES": str(1024 * MIB)},
    )
    assert sent["stats"]["spans_dropped"] > 0


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """A run whose 8 MiB tool result is one piece (a 64 MiB inline limit), cut into chunks to fit
    1 MiB export requests, the later model request naming the chunked piece."""
    tmp_path = tmp_path_factory.mktemp("chunked")
    env = {"TAILCUT_INLINE_LIMIT": str(64 * MIB), "TAILCUT_MAX_EXPORT_BYTES": str(MIB)}
    data, sent = record(tmp_path, 2, "grpc", "--big=8", env=env)
    return data, sent


def test_a_piece_too_big_for_one_request_is_chunked_and_comes_back_whole(chunked):
    data, sent = chunked
    requests = stored_requests(data)
    assert [sha for _, sha in requests] == sent["requests"]
    assert all(sha256_hex(text) == sha for text, sha in requests)
    pieces = pq.read_table(data / "pieces").to_pylist()
    assert max(len(p["text"]) for p in pieces) < MIB  # every stored piece is a chunk or smaller
    assert_no_carriers_and_whole_trees(data, sent)


@pytest.mark.parametrize("damage", ["damaged", "missing"])
def test_a_damaged_or_missing_chunk_is_refused_naming_trace_boundary_and_hash(chunked, tmp_path, damage):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(chunked[0], data)
    with Dataset(data) as dataset:
        trace_id, sha = dataset.sql(
            "SELECT trace_id, sha256 FROM read_parquet(?) WHERE length(text) > 500000 LIMIT 1",
            params=[str(data / "pieces" / "**" / "*.parquet")],
        ).rows()[0]
    for path in (data / "pieces").rglob("*.parquet"):
        table = pq.read_table(path)
        hit = pc.equal(table.column("sha256"), sha)
        if damage == "missing":
            table = table.filter(pc.invert(hit))
        else:
            text = table.column("text")
            table = table.set_column(2, table.schema.field(2), pc.if_else(hit, pc.utf8_upper(text), text))
        pq.write_table(table, path)
    with Dataset(data) as dataset, pytest.raises(QueryError) as refused:
        dataset.sql("SELECT request FROM llm_calls ORDER BY seq")
    message = str(refused.value)
    assert f"trace {trace_id}, boundary llm:openai.chat" in message
    assert f"piece sha256:{sha} is {damage}" in message
