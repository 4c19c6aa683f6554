"""Fixtures shared by test modules: the scripted model server, fresh for every test, and SDK clients of it."""

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
