"""What every framework agent module shares: the model's address and reading a run's input back."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.frameworks.scenarios import Scenario, parse_tag

#: The scripted model server's OpenAI base URL (``.../v1``), set by the recording process or the test.
MODEL_URL_ENV = "FRAMEWORKS_MODEL_URL"
MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = "You are a concise assistant. Use the tools to check facts before you answer."


def model_url() -> str:
    url = os.environ.get(MODEL_URL_ENV)
    if not url:
        raise RuntimeError(f"set {MODEL_URL_ENV} to the scripted model server's OpenAI base URL")
    return url


def scenario_of(run_input: Any) -> Scenario:
    """The scenario a run's input names, whatever shape the recorder gave it (text, messages, a dict)."""
    text = run_input if isinstance(run_input, str) else json.dumps(run_input, default=str)
    return parse_tag(text)[1]
