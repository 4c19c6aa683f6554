"""Fixtures shared by test modules: the scripted model server, fresh for every test, and SDK clients of it;
the framework scenarios' model server (``tests/frameworks``) and the environment their agents run in."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tailcut.testing import ModelServer

#: The model server's clock in tests, so ids and timestamps in recorded responses are reproducible.
NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def model_server():
    """One scripted model server per test module (starting one per test would be slow)."""
    server = ModelServer(clock=lambda: NOW)
    with server:
        yield server


@pytest.fixture
def server(model_server):
    """The module's model server, with its queues, recorded requests and violations cleared."""
    model_server.reset()
    return model_server


@pytest.fixture
def oai(server):
    """A real ``openai`` client of the ``server`` fixture (whichever the test module defines), no retries."""
    with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server):
    """A real ``anthropic`` client of the ``server`` fixture, no retries."""
    with anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def scenario_server():
    """One model server per test module that plays every framework agent's scenarios."""
    from tests.frameworks import harness

    server = harness.scenario_server()
    with server:
        yield server


@pytest.fixture
def scenario_model(scenario_server, monkeypatch):
    """The scenario server, its URL given to the framework agents, tool executions counted from zero, and
    the Agents SDK kept from uploading its traces."""
    from tests.frameworks import harness, tools
    from tests.frameworks._common import MODEL_URL_ENV

    monkeypatch.setenv(MODEL_URL_ENV, scenario_server.openai_base_url)
    harness.quiet_agents_sdk_tracing()
    tools.EXECUTIONS.clear()
    return scenario_server
