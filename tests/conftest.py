"""Fixtures shared by test modules: the scripted model server, fresh for every test."""

from __future__ import annotations

import pytest

from tailcut.testing import ModelServer

#: The model server's clock in tests, so ids and timestamps in recorded responses are reproducible.
NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def model_server():
    """One scripted model server per test module (starting one per test would be slow)."""
    with ModelServer(clock=lambda: NOW) as server:
        yield server


@pytest.fixture
def server(model_server):
    """The module's model server, with its queues, recorded requests and violations cleared."""
    model_server.reset()
    return model_server
