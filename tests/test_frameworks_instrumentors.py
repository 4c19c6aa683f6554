"""The framework instrumentors are OpenTelemetry instrumentors: found by ``opentelemetry-instrument``,
applied once, undone exactly, and never importing their framework at ``import tailcut``."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

import tailcut
from tailcut.instrumentation import FRAMEWORKS, instrument_framework, uninstrument_framework

#: framework -> (the class patched, its method that records)
PATCHED = {
    "langchain": ("langchain_core.tools:StructuredTool", "_run"),
    "openai_agents": ("agents.run:AgentRunner", "run"),
    "smolagents": ("smolagents:Tool", "__call__"),
    "llama_index": ("llama_index.core.tools:FunctionTool", "acall"),
}


def test_every_framework_instrumentor_is_an_entry_point_of_opentelemetry_instrument():
    found = {e.name: e.value for e in entry_points(group="opentelemetry_instrumentor")}
    for name in FRAMEWORKS:
        assert found[f"tailcut_{name}"].startswith(f"tailcut.instrumentation.{name}:")


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_instrumenting_is_idempotent_and_uninstrumenting_restores_the_original(framework):
    target, method = PATCHED[framework]
    module, _, name = target.partition(":")
    owner = getattr(pytest.importorskip(module), name)
    original = owner.__dict__[method]
    assert instrument_framework(framework) is True
    try:
        assert owner.__dict__[method] is not original
        assert instrument_framework(framework) is False
    finally:
        assert uninstrument_framework(framework) is True
    assert owner.__dict__[method] is original
    assert uninstrument_framework(framework) is False


def test_import_tailcut_imports_no_framework():
    frameworks = "{'langchain_core', 'langgraph', 'agents', 'smolagents', 'llama_index', 'workflows'}"
    code = (
        "import sys, tailcut, tailcut.instrumentation.langchain, tailcut.instrumentation.smolagents, "
        "tailcut.instrumentation.openai_agents, tailcut.instrumentation.llama_index; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {frameworks}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_smolagents_tool_called_positionally_records_its_argument_by_name(tmp_path):
    """A ``CodeAgent``'s code calls ``final_answer(x)``: the request is ``{"answer": x}``, not ``{}`` (the
    argument bound to ``forward``'s ``self``), so a replay compares the answer, not nothing."""
    pytest.importorskip("smolagents")
    import duckdb
    from smolagents.default_tools import FinalAnswerTool

    from tests.replay_support import recording_into

    instrument_framework("smolagents")
    try:
        with recording_into(tmp_path / "data"), tailcut.run("question"):
            assert FinalAnswerTool()("It is sunny") == "It is sunny"
    finally:
        uninstrument_framework("smolagents")
    spans = f"read_parquet('{tmp_path / 'data' / 'spans'}/**/*.parquet')"
    [(request,)] = duckdb.connect().sql(f"SELECT request FROM {spans} WHERE kind = 'tool'").fetchall()
    assert json.loads(request) == {"answer": "It is sunny"}
