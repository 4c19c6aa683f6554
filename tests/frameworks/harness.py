"""Record scenario runs of a framework agent through a real ``tailcut collect``, and return the data dir.

Examples
--------
::

    server = scenario_server()
    with server:
        data = record("langgraph", "openinference", ["clean", "tool_raises_caught"], tmp_path, server)

Tests keep the server and the recordings module-scoped: each :func:`record` starts a collector and one
agent process.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from tailcut.demo._collector_process import CollectorProcess
from tailcut.testing import ModelServer
from tests.frameworks._common import MODEL_URL_ENV
from tests.frameworks.record import AGENTS, INSTRUMENTORS, quiet_agents_sdk_tracing
from tests.frameworks.scenarios import SCENARIOS, TAG, Label, ScenarioModel
from tests.test_collector_helpers import write_config

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = tuple(AGENTS)
RECORDERS = ("tailcut", *INSTRUMENTORS)
#: Recorders that run tailcut and a framework instrumentor in one process.
COMBINED = ("tailcut+openinference",)
#: framework -> the distribution it needs (for the skip reason when it is not installed)
_PACKAGES = {
    "langgraph": ("langgraph", "langchain_openai"),
    "openai_agents": ("agents",),
    "smolagents": ("smolagents",),
    "smolagents_code": ("smolagents",),
    "llamaindex": ("llama_index.core", "llama_index.llms.openai"),
}
#: module -> how to get it, where that is not the dev extra
_INSTALL = {
    "llama_index.llms.openai": "llama-index-llms-openai needs openai<3; .ci/run tests it in .venv-openai2",
}
_DEV = "pip install -e '.[dev]'"


def agent_module(framework: str) -> ModuleType:
    """The module of ``framework``'s agent (its ``agent`` entry point, ``STYLE``, ``UNSUPPORTED``)."""
    return importlib.import_module(AGENTS[framework])


def entry_point(framework: str) -> str:
    """``module:function`` of the framework agent, as ``tailcut replay --agent`` takes it."""
    return f"{AGENTS[framework]}:agent"


def missing(framework: str, recorder: str = "tailcut") -> str | None:
    """Why ``framework`` cannot be recorded by ``recorder`` here (what to install), or None."""
    third_party = recorder.removeprefix("tailcut+")
    if third_party != "tailcut" and framework not in INSTRUMENTORS.get(third_party, {}):
        return f"{third_party} has no instrumentor for {framework}"
    modules = list(_PACKAGES[framework])
    if third_party != "tailcut":
        modules.append(INSTRUMENTORS[third_party][framework][0])
    for module in modules:
        if importlib.util.find_spec(module.split(".")[0]) is None or _absent(module):
            return f"{module} is not installed: {_INSTALL.get(module, _DEV)}"
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def scenario_server() -> ModelServer:
    """The scripted model that plays every framework's scenarios (byte-identical replies)."""
    styles = {framework: agent_module(framework).STYLE for framework in FRAMEWORKS}
    return ModelServer(responder=ScenarioModel(styles), clock=lambda: 1_700_000_000.0)


def runs(framework: str, scenarios: Iterable[str] | None = None, *, repeat: int = 1) -> list[str]:
    """The scenario names to run for ``framework`` (default: all it supports), each ``repeat`` times."""
    unsupported = agent_module(framework).UNSUPPORTED
    names = [name for name in (scenarios or SCENARIOS) if name not in unsupported]
    return [name for name in names for _ in range(repeat)]


def record(
    framework: str,
    recorder: str,
    scenarios: Sequence[str],
    directory: Path,
    server: ModelServer,
    *,
    timeout: float = 240.0,
) -> Path:
    """Run one ``framework`` run per scenario name under ``recorder`` into a fresh collector's data dir.

    The collector keeps every trace (``always_sample``) and is stopped (deciding everything pending)
    after the agent process has exported and exited. Returns the data dir.
    """
    directory.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, policies=[{"name": "all", "type": "always_sample"}])
    data = directory / "data"
    with CollectorProcess(data, directory / "collector.log", config=config) as collector:
        environment = {**os.environ, MODEL_URL_ENV: server.openai_base_url}
        command = [sys.executable, "-m", "tests.frameworks.record", framework, recorder, collector.endpoint]
        done = subprocess.run(
            [*command, *scenarios],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"recording {framework} with {recorder} failed:\n{done.stderr[-4000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        (directory / "record.json").write_text(json.dumps(summary))
    return data


__all__ = [
    "FRAMEWORKS",
    "INSTRUMENTORS",
    "RECORDERS",
    "SCENARIOS",
    "agent_module",
    "entry_point",
    "export_corpus",
    "fails",
    "labels",
    "missing",
    "quiet_agents_sdk_tracing",
    "record",
    "runs",
    "scenario_server",
    "scenarios_by_trace",
]


def labels(framework: str, scenario: str) -> tuple[Label, ...]:
    """The findings a correct analysis makes on a ``framework`` run of ``scenario``.

    The scenario's labels, with ``recovered`` false where the injected failure ends the run in this
    framework (a fatal tool error, or e.g. the Agents SDK's unknown tool).
    """
    found = SCENARIOS[scenario]
    if found.catch_tool_errors and scenario not in agent_module(framework).FATAL:
        return found.labels
    return tuple(dataclasses.replace(label, recovered=False) for label in found.labels)


def fails(framework: str, scenario: str) -> bool:
    """Whether a ``framework`` run of ``scenario`` raises."""
    return not SCENARIOS[scenario].catch_tool_errors or scenario in agent_module(framework).FATAL


def scenarios_by_trace(data: Path) -> dict[str, tuple[str, str]]:
    """trace id -> (framework, scenario) of every stored trace, read from the question its spans carry."""
    import duckdb

    spans = f"""
        select trace_id, coalesce(request::varchar, '') || coalesce(attributes::varchar, '') as text
        from read_parquet('{data / "spans"}/**/*.parquet', union_by_name = true)
    """
    if list((data / "pieces").glob("**/*.parquet")):  # tailcut's requests keep their messages there
        spans += f"union all select trace_id, text from read_parquet('{data / 'pieces'}/**/*.parquet')"
    query = f"select trace_id, string_agg(text, ' ') from ({spans}) group by trace_id"
    found = {}
    for trace_id, text in duckdb.connect().sql(query).fetchall():
        match = TAG.search(text or "")
        if match is not None:
            found[trace_id] = (match["framework"], match["scenario"])
    return found


def export_corpus(data: Path, out: Path) -> dict[str, str]:
    """``tailcut export-corpus`` of every scenario run in ``data``; returns scenario -> trace id (the
    last run of each scenario)."""
    from click.testing import CliRunner

    from tailcut.cli import cli

    by_scenario = {scenario: trace_id for trace_id, (_, scenario) in scenarios_by_trace(data).items()}
    traces = [f"--trace={trace_id}" for trace_id in scenarios_by_trace(data)]
    result = CliRunner().invoke(cli, ["export-corpus", "--data", str(data), "--out", str(out), *traces])
    if result.exit_code != 0:
        raise RuntimeError(f"export-corpus failed: {result.output}")
    return by_scenario
