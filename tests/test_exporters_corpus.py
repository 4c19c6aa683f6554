"""The replay-corpus writer: complete, verifiable corpora; unreplayable traces listed with the reason."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tailcut
from tailcut import _config
from tailcut.exporters import ParquetSpanExporter
from tailcut.exporters.conventions import corpus as conventions
from tailcut.exporters.corpus import CorpusWriteError, Selection, write_corpus
from tailcut.payloads import PayloadStore


@tailcut.tool(name="lookup")
def lookup(order_id: int) -> dict:
    return {"order": order_id, "notes": "x" * 3000}


@tailcut.tool(name="flaky", retry=tailcut.Retry(attempts=2, on=(TimeoutError,)))
def flaky(order_id: int) -> dict:
    raise TimeoutError("backend timed out")


def record(data: Path, payloads: Path) -> list[str]:
    """Three runs through the embedded exporter: a plain one, a failing one, one with a big payload."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = ParquetSpanExporter(data, root_grace=0.0, payload_stores=[PayloadStore(payloads)])
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = _config.install(
        _config.Config(
            enabled=True,
            tracer=provider.get_tracer("t"),
            inline_limit=1024,
            payload_store=PayloadStore(payloads),
            self_contained=True,  # over the limit: the payload store, whose stubs this file resolves
        )
    )
    ids = []
    try:
        for order_id, fail in ((1, False), (2, True), (3, False)):
            with tailcut.run("agent", input={"order_id": order_id}, harness_revision="v1") as run:
                ids.append(run.trace_id)
                try:
                    flaky(order_id) if fail else lookup(order_id)
                except TimeoutError:
                    pass
                run.set_outcome("fail" if fail else "pass")
    finally:
        _config.install(previous)
        provider.shutdown()
    return ids


@pytest.fixture
def recorded(tmp_path):
    data = tmp_path / "data"
    return data, record(data, tmp_path / "agent-payloads")


def test_corpus_has_runs_envelopes_and_hashed_manifest(recorded, tmp_path):
    data, ids = recorded
    out = tmp_path / "corpus"
    summary = write_corpus(data, [Selection(i, "incident: test", ("error",), 1.0) for i in ids], out)
    assert (summary.runs, summary.envelopes) == (3, 4)
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"runs.parquet", "envelopes.parquet"}
    runs = pq.read_table(out / "runs.parquet").drop_columns(["start_time"]).to_pylist()
    assert [r["trace_id"] for r in runs] == ids
    assert json.loads(runs[0]["run_input"]) == {"order_id": 1}
    assert runs[1]["outcome"] == "fail"
    assert all(r["replayable"] for r in runs)
    envelopes = pq.read_table(out / "envelopes.parquet").to_pylist()
    failing = [e for e in envelopes if e["trace_id"] == ids[1]]
    assert [(e["boundary"], e["occurrence"], e["attempt"], e["error_type"]) for e in failing] == [
        ("tool:flaky", 1, 1, "TimeoutError"),
        ("tool:flaky", 2, 2, "TimeoutError"),
    ]
    big = next(e for e in envelopes if e["trace_id"] == ids[0])
    assert json.loads(big["response"])["notes"] == "x" * 3000  # resolved from the payload store


def test_missing_payload_makes_a_trace_not_replayable_never_dropped(recorded, tmp_path):
    data, ids = recorded
    for path in (data / "payloads").rglob("*.json"):
        path.unlink()
    summary = write_corpus(data, [Selection(i, "baseline slice") for i in ids], tmp_path / "corpus")
    assert summary.runs == 3
    assert list(summary.not_replayable) == [ids[0], ids[2]]  # the two runs with an offloaded payload
    assert "is in none of the payload stores" in summary.not_replayable[ids[0]]


def test_unknown_trace_is_listed_as_not_replayable(recorded, tmp_path):
    data, _ = recorded
    summary = write_corpus(data, [Selection("f" * 32, "asked for")], tmp_path / "corpus")
    assert summary.not_replayable == {"f" * 32: "no spans of this trace are in the data dir"}


def test_refuses_to_overwrite_and_leaves_nothing_on_failure(recorded, tmp_path):
    data, ids = recorded
    out = tmp_path / "corpus"
    write_corpus(data, [Selection(ids[0], "x")], out)
    with pytest.raises(CorpusWriteError, match="already exists"):
        write_corpus(data, [Selection(ids[0], "x")], out)
    with pytest.raises(CorpusWriteError, match="no spans/ directory"):
        write_corpus(tmp_path / "nowhere", [Selection(ids[0], "x")], tmp_path / "other")
    assert not (tmp_path / "other").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -- what a corpus takes from other conventions --------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "attributes", "expected"),
    [
        ({"kind": "root"}, {"tailcut.run.input": '{"a": 1}'}, ('{"a": 1}', "tailcut.run.input")),
        ({"kind": "agent"}, {"input.value": "hi", "input.mime_type": "text/plain"}, ('"hi"', "input.value")),
        (
            {"kind": "agent"},
            {"input.value": "[1]", "input.mime_type": "application/json"},
            ("[1]", "input.value"),
        ),
        (
            {"kind": "chain"},
            {"traceloop.entity.input": '{"args": ["q"], "kwargs": {}}'},
            ('"q"', "traceloop.entity.input"),
        ),
        (
            {"kind": "agent"},
            {"gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "q"}]}]'},
            ('"q"', "gen_ai.input.messages"),
        ),
        # ingest moved OpenInference's input.value of an agent span into its request column
        ({"kind": "agent", "request": '"q"'}, {"openinference.span.kind": "AGENT"}, ('"q"', "input.value")),
        ({"kind": "root"}, {}, (None, None)),
    ],
)
def test_the_run_input_comes_from_the_first_convention_that_holds_it(row, attributes, expected):
    assert tuple(conventions.run_fields(row, attributes)["input"]) == expected


def test_a_genai_reply_is_rebuilt_as_the_chat_completion_the_sdk_parses():
    messages = [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    span = {
        "span_id": "ab" * 8,
        "request": None,
        "response": json.dumps({"messages": messages}),
        "start_time": dt.datetime.fromtimestamp(1_700_000_000, tz=dt.UTC),
        "model": "gpt-4o-mini",
        "input_tokens": 47,
        "output_tokens": 7,
    }
    exchange = conventions.openai_chat_exchange("genai", span, {"gen_ai.response.id": "chatcmpl-1"})
    body = json.loads(exchange.response)
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 47, "completion_tokens": 7, "total_tokens": 54},
    }
    no_output = conventions.openai_chat_exchange("genai", {**span, "response": '{"other": 1}'}, {})
    assert no_output.problem == "its recorded reply holds no output messages"
