"""``tailcut ingest``: OTLP files of every encoding; one-line errors and nothing partial for bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
from click.testing import CliRunner, Result
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.cli import cli

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"


def ingest(*args: str) -> Result:
    return CliRunner().invoke(cli, ["ingest", *args])


def count(data: Path, table: str = "spans") -> int:
    if not list(data.glob(f"{table}/dt=*/*.parquet")):
        return 0
    source = f"read_parquet('{data}/{table}/**/*.parquet', union_by_name=true, hive_partitioning=true)"
    return duckdb.sql(f"SELECT count(*) FROM {source}").fetchall()[0][0]


def to_protobuf(document: dict) -> bytes:
    """OTLP/JSON to the protobuf encoding (ids are hex in OTLP/JSON, base64 in generic protobuf JSON)."""
    import base64

    def fix(node: object) -> object:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    value = base64.b64encode(bytes.fromhex(value)).decode()
                out[key] = fix(value)
            return out
        return [fix(v) for v in node] if isinstance(node, list) else node

    return json_format.ParseDict(fix(document), ExportTraceServiceRequest()).SerializeToString()


def test_every_fixture_at_once(tmp_path: Path) -> None:
    files = sorted(str(p) for p in FIXTURES.glob("*.json"))
    result = ingest(*files, "--data", str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    assert result.output == f"ingested 28 spans in 7 traces from 7 file(s) into {tmp_path / 'data'}\n"
    assert (count(tmp_path / "data"), count(tmp_path / "data", "traces")) == (28, 7)


def test_json_lines_protobuf_and_gzip(tmp_path: Path) -> None:
    first = json.loads((FIXTURES / "openinference.json").read_text())
    second = json.loads((FIXTURES / "openllmetry.json").read_text())
    lines = tmp_path / "collector.jsonl"
    lines.write_text(json.dumps(first) + "\n\n" + json.dumps(second) + "\n")
    binary = tmp_path / "request.pb"
    binary.write_bytes(to_protobuf(json.loads((FIXTURES / "tailcut_sdk.json").read_text())))
    packed = tmp_path / "request.pb.gz"
    packed.write_bytes(gzip.compress(to_protobuf(json.loads((FIXTURES / "genai_old.json").read_text()))))
    result = ingest(str(lines), str(binary), str(packed), "--data", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    assert "ingested 20 spans in 4 traces from 3 file(s)" in result.output
    [(kinds,)] = duckdb.sql(
        f"SELECT list(DISTINCT kind ORDER BY kind) FROM read_parquet('{tmp_path}/d/spans/**/*.parquet')"
    ).fetchall()
    assert kinds == ["agent", "chain", "embedding", "llm", "other", "retriever", "root", "tool"]


def test_truncated_json_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text((FIXTURES / "openinference.json").read_text()[:3000])
    result = ingest(str(bad), "--data", str(tmp_path / "d"))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {bad}: invalid JSON at line ")
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert count(tmp_path / "d") == 0


def test_truncated_protobuf_and_wrong_formats(tmp_path: Path) -> None:
    data = to_protobuf(json.loads((FIXTURES / "tailcut_sdk.json").read_text()))
    cases = {
        "cut.pb": (data[: len(data) // 2], "not OTLP"),
        "table.csv": (b"trace_id,span_id\n1,2\n", "not OTLP"),
        "other.json": (b'{"traces": []}', "not OTLP/JSON (expected an object with a resourceSpans list)"),
        "empty.json": (b"  \n", "empty file (no OTLP data)"),
        "bad.gz": (b"\x1f\x8b\x08garbage", "broken gzip data"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        result = ingest(str(path), "--data", str(tmp_path / "d"))
        assert result.exit_code == 1, name
        assert result.output.startswith(f"Error: {path}: ") and message in result.output, result.output
        assert result.output.count("\n") == 1
    assert count(tmp_path / "d") == 0


def test_a_bad_line_is_reported_with_its_number_or_skipped(tmp_path: Path) -> None:
    good = json.dumps(json.loads((FIXTURES / "genai_old.json").read_text()))
    other = json.dumps(json.loads((FIXTURES / "unknown.json").read_text()))
    bad_span = good.replace('"spanId": "b7ad6b7169203331"', '"spanId": "xyz"')
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([good, other, "{not json", bad_span]) + "\n")
    result = ingest(str(path), "--data", str(tmp_path / "d"))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {path}, line 3: invalid JSON at column 2")
    assert count(tmp_path / "d") == 0  # nothing of the file, not even its good lines
    result = ingest(str(path), "--data", str(tmp_path / "d"), "--skip-bad")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"ingested 2 spans in 2 traces from 1 file(s) into {tmp_path / 'd'}",
        f"skipped 2 bad record(s); first: {path}, line 3: invalid JSON at column 2: "
        "unexpected character, expected a string key",
    ]
    assert count(tmp_path / "d") == 2


def test_files_before_a_bad_one_stay_written(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    result = ingest(
        str(FIXTURES / "unknown.json"),
        str(empty),
        str(FIXTURES / "genai_old.json"),
        "--data",
        str(tmp_path / "d"),
    )
    assert result.exit_code == 1 and f"{empty}: empty file" in result.output
    assert count(tmp_path / "d") == 1
    result = ingest(str(empty), str(FIXTURES / "genai_old.json"), "--data", str(tmp_path / "e"), "--skip-bad")
    assert result.exit_code == 0 and "skipped 1 bad record(s)" in result.output
    assert count(tmp_path / "e") == 1


def test_huge_attribute_values_are_kept_whole(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "tailcut_sdk.json").read_text())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * 5_000_000}]})
    for attribute in span["attributes"]:
        if attribute["key"] == "tailcut.request":
            attribute["value"] = {"stringValue": huge}
    span["attributes"].append({"key": "notes", "value": {"stringValue": "y" * 3_000_000}})
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(document))
    result = ingest(str(path), "--data", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    [(request, notes)] = duckdb.sql(
        f"SELECT length(request::VARCHAR), length(attributes['notes']) "
        f"FROM read_parquet('{tmp_path}/d/spans/**/*.parquet') WHERE kind = 'llm'"
    ).fetchall()
    assert (request, notes) == (len(huge), 3_000_000)


def test_missing_file_and_help(tmp_path: Path) -> None:
    result = ingest(str(tmp_path / "nope.json"), "--data", str(tmp_path / "d"))
    assert result.exit_code != 0 and "nope.json" in result.output
    result = CliRunner().invoke(cli, ["ingest", "--help"])
    assert (
        result.exit_code == 0
        and "--skip-bad" in result.output
        and "tailcut.exporters.ingest" in result.output
    )
