"""Replaying what other instrumentors recorded: OpenInference, OpenLLMetry and the OTel GenAI instrumentor.

For each convention, ``tests.thirdparty_agent`` (the real ``openai`` SDK, a hand-made root span and tool
span in that convention, no tailcut SDK) runs in a process of its own under that convention's OpenAI
instrumentor against the scripted model server, exporting OTLP/HTTP to a real ``tailcut collect``. The
data dir is exported with ``tailcut export-corpus`` and replayed with ``tailcut replay``: recorded (bit-stable
3/3, no model call, the canary catches its corruption), with a corrupted record, and cut at the tool with
a changed tool. A corpus with nothing replayable exits 3 and says what to record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tailcut import replay
from tailcut.cli import cli
from tailcut.demo._collector_process import CollectorProcess
from tailcut.exporters import ParquetSpanExporter, corpus_format
from tests import thirdparty_agent
from tests.replay_support import ModelServer, ScriptedReply, ToolCall, rewrite_corpus_file, trace_ids
from tests.test_collector_helpers import write_config

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["What is the weather in Paris?", "And in Oslo? Please stream the answer."]
CONVENTIONS = ["openinference", "openllmetry", "genai"]
AGENT = "tests.thirdparty_agent:agent"
#: What each convention's runs.parquet says the run's fields came from.
SOURCES = {
    "openinference": ("agent", "input.value", "output.value"),
    "openllmetry": ("chain", "traceloop.entity.input", "traceloop.entity.output"),
    "genai": ("agent", "gen_ai.input.messages", "gen_ai.output.messages"),
}


def weather_model(request) -> ScriptedReply:
    """Calls get_weather for the city asked about, then reports what the tool said."""
    last = request.body["messages"][-1]
    if last["role"] == "tool":
        found = json.loads(last["content"])
        degrees = found.get("celsius", found.get("fahrenheit"))
        return ScriptedReply(text=f"It is {found['sky']} ({degrees} degrees).")
    city = "Oslo" if "Oslo" in request.last_user_text else "Paris"
    return ScriptedReply(tool_calls=[ToolCall("get_weather", {"city": city})])


@pytest.fixture(scope="module")
def server():
    model_server = ModelServer(responder=weather_model, clock=lambda: 1_700_000_000.0)
    with model_server:
        yield model_server


@pytest.fixture(scope="module", params=CONVENTIONS)
def recorded(request, server, tmp_path_factory):
    """``(convention, corpus path)``: two runs recorded through ``tailcut collect`` and exported."""
    convention = request.param
    directory = tmp_path_factory.mktemp(convention)
    config = write_config(directory, policies=[{"name": "all", "type": "always_sample"}])
    data = directory / "data"
    with CollectorProcess(data, directory / "collector.log", config=config) as collector:
        environment = {**os.environ, thirdparty_agent.MODEL_URL_ENV: server.openai_base_url}
        subprocess.run(
            [sys.executable, "-m", "tests.thirdparty_record", convention, collector.endpoint, *QUESTIONS],
            cwd=REPO,
            env=environment,
            check=True,
            timeout=120,
        )
        collector.wait_decided(len(QUESTIONS))
    ids = trace_ids(data)
    assert len(ids) == len(QUESTIONS)
    corpus = directory / "corpus"
    args = ["export-corpus", "--data", str(data), "--out", str(corpus)]
    exported = CliRunner().invoke(cli, [*args, *(f"--trace={t}" for t in ids)])
    assert exported.exit_code == 0, exported.output
    assert "not replayable" not in exported.output, exported.output
    return convention, corpus


@pytest.fixture
def model_url(monkeypatch, server):
    """The agent points at the model server, so any call a replay let through would be seen."""
    monkeypatch.setenv(thirdparty_agent.MODEL_URL_ENV, server.openai_base_url)


def replay_json(corpus: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["replay", str(corpus), "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_the_corpus_says_where_each_run_field_came_from(recorded):
    convention, corpus = recorded
    runs = corpus_format.read_rows(corpus / corpus_format.RUNS, corpus_format.RUNS_SCHEMA)
    assert [(r["root_kind"], r["run_input_source"], r["run_output_source"]) for r in runs] == [
        SOURCES[convention]
    ] * 2
    assert sorted(replay.load_corpus(corpus).runs[r["trace_id"]].input for r in runs) == sorted(QUESTIONS)
    envelopes = pq.read_table(corpus / "envelopes.parquet").to_pylist()
    keys = [
        (e["boundary"], e["occurrence"], e["convention"])
        for e in envelopes
        if e["trace_id"] == runs[0]["trace_id"]
    ]
    assert keys == [
        ("llm:openai.chat", 1, convention),
        ("tool:get_weather", 1, convention),
        ("llm:openai.chat", 2, convention),
    ]


def test_a_recorded_replay_is_bit_stable_makes_no_model_call_and_the_canary_catches_corruption(
    recorded, server, model_url
):
    _, corpus = recorded
    with server.forbid():
        before = server.request_count
        status, report = replay_json(corpus, "--agent", AGENT, "-n", "3")
        assert server.request_count == before
    assert server.violations == []
    assert status == 0, report["canary"]["detail"]
    assert [(t["rate"], t["bit_stable"], t["diverged"]) for t in report["traces"]] == [
        ("bit-stable 3/3 (recorded)", True, 0)
    ] * 2
    assert report["canary"]["caught"] is True, report["canary"]
    assert report["canary"]["trace_id"] in {t["trace_id"] for t in report["traces"]}


def test_a_corrupted_recorded_response_makes_the_replay_diverge_and_fail(
    recorded, server, model_url, tmp_path
):
    _, corpus = recorded
    copy = tmp_path / "corpus"
    subprocess.run(["cp", "-r", str(corpus), str(copy)], check=True)
    table = pq.read_table(copy / "envelopes.parquet")
    rows = table.to_pylist()
    first = next(r for r in rows if r["boundary"] == "llm:openai.chat")
    assert '\\"city\\":\\"Paris\\"' in first["response"] or '\\"city\\": \\"Paris\\"' in first["response"]
    first["response"] = first["response"].replace("Paris", "Lyon")
    rewrite_corpus_file(copy, "envelopes.parquet", pa.Table.from_pylist(rows, schema=table.schema))
    with server.forbid():
        status, report = replay_json(copy, "--agent", AGENT, "--no-canary")
    assert server.violations == []
    assert status == 1
    rates = sorted(t["rate"] for t in report["traces"])
    assert rates[0] == "always 1/1 (recorded)"  # the other run is untouched
    assert rates[1] == "pass 0/1, diverged 1/1 (recorded)"
    diverged = next(t for t in report["traces"] if t["diverged"])
    assert diverged["first_divergence"].startswith("request differs at tool:get_weather#1")


def test_a_cut_point_replay_runs_the_changed_tool_live_and_serves_the_model_around_it(
    recorded, server, model_url
):
    _, corpus = recorded
    cut = ["--mode", "cut", "--live", "tool:get_weather"]
    with server.forbid():
        status, report = replay_json(corpus, "--agent", "tests.thirdparty_agent:agent_fahrenheit", *cut)
        same_tool = replay.run_replay(corpus, thirdparty_agent.agent, mode="cut", live=["tool:get_weather"])
        changed = replay.run_replay(
            corpus, thirdparty_agent.agent_fahrenheit, mode="cut", live=["tool:get_weather"]
        )
    assert server.violations == []
    assert status == 1
    assert [t["rate"] for t in report["traces"]] == ["pass 0/1, diverged 1/1 (cut)"] * 2
    assert all(r.passed for r in same_tool.results)  # the unchanged tool answers as recorded
    for result in changed.results:
        assert (result.rerun.live_counts, result.rerun.served_counts) == ({"tool": 1}, {"llm": 2})
        first = result.rerun.first_divergence
        assert (first.kind, first.boundary, first.downstream_of) == (
            "request",
            "llm:openai.chat",
            "tool:get_weather#1",
        )
        assert any("fahrenheit" in path for path in first.paths), first.paths


def test_relax_matches_a_third_party_llm_boundary_on_its_occurrence_alone(recorded, server, model_url):
    _, corpus = recorded
    reworded = ["--agent", "tests.thirdparty_agent:agent_reworded", "--no-canary"]
    with server.forbid():
        strict_status, strict = replay_json(corpus, *reworded)
        relaxed_status, relaxed = replay_json(corpus, *reworded, "--relax", "llm:openai.chat")
    assert server.violations == []
    assert strict_status == 1
    assert all(
        t["first_divergence"].startswith("request differs at llm:openai.chat#1") for t in strict["traces"]
    )
    assert relaxed_status == 0, relaxed["traces"]
    assert [t["rate"] for t in relaxed["traces"]] == ["always 1/1 (recorded)"] * 2


def test_a_tool_the_agent_does_not_wrap_runs_live_and_is_reported(recorded, server, model_url, monkeypatch):
    convention, corpus = recorded
    monkeypatch.setattr(thirdparty_agent, "get_weather", thirdparty_agent.get_weather.__wrapped__)
    with server.forbid():
        result = CliRunner().invoke(cli, ["replay", str(corpus), "--agent", AGENT, "--no-canary"])
    assert server.violations == []
    assert result.exit_code == 0, result.output
    assert f"ran live, not wrapped for replay: tool:get_weather#1 ({convention})" in result.output


def test_a_corpus_with_nothing_replayable_exits_3_and_says_what_to_record(tmp_path, model_url):
    data = tmp_path / "data"
    exporter = ParquetSpanExporter(data, root_grace=0.0)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("uninstrumented")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"}
    with tracer.start_as_current_span("agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
        tracer.start_span("chat", attributes=chat).end()
    provider.shutdown()
    (trace_id,) = trace_ids(data)
    corpus = tmp_path / "corpus"
    exported = CliRunner().invoke(
        cli, ["export-corpus", "--data", str(data), "--trace", trace_id, "--out", str(corpus)]
    )
    assert exported.exit_code == 0, exported.output

    result = CliRunner().invoke(cli, ["replay", str(corpus), "--agent", AGENT])
    assert result.exit_code == 3
    assert "NOTHING REPLAYED" in result.stdout
    assert "no trace of the corpus could be replayed" in result.stderr
    assert "the run's input was not recorded: pass input= to tailcut.run" in result.stdout
    assert "llm:openai.chat#1 (genai): its request and response was not recorded" in result.stdout
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in result.stdout
    status, report = replay_json(corpus, "--agent", AGENT, "--no-strict")
    assert (status, report["exit_code"], report["traces"]) == (3, 3, [])
    assert report["skipped"][0]["trace_id"] == trace_id


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("1 validation error for WeatherArgs\nunits\n  Extra inputs are not permitted", True),
        ("get_weather() got an unexpected keyword argument 'units'", True),
        ("RuntimeError: the order service is down", False),  # the tool ran and raised: it runs live again
        ("HTTP Error 429: Too Many Requests", False),
        (None, False),
    ],
)
def test_only_a_call_refused_for_its_arguments_counts_as_refused_before_the_tool_ran(message, refused):
    from tailcut.replay._corpus import Envelope
    from tailcut.replay._session import _refusal

    envelope = Envelope(
        seq=2,
        boundary="tool:get_weather",
        occurrence=1,
        kind="tool",
        request='{"city":"Paris","units":"kelvin"}',
        request_sha256=None,
        response=None,
        response_sha256=None,
        error_type="ValidationError" if message else None,
        error_message=message,
        convention="openinference",
    )
    quote = _refusal(envelope)
    assert (quote is not None) == refused
    if refused:  # the record's own words, quoted
        assert quote is not None and ("validation error for" in quote or "unexpected keyword" in quote)
