"""A smolagents ``ToolCallingAgent``: native tool calls, the answer given through ``final_answer``.

smolagents hands every tool exception, unknown tool, bad argument and unparseable output back to the
model as an ``Error:`` observation, so no tool failure ends its run.
"""

from __future__ import annotations

from typing import Any

from tests.frameworks._common import SYSTEM_PROMPT
from tests.frameworks._documented import run_smolagent

FRAMEWORK = "smolagents"
STYLE = "smolagents_tools"
UNSUPPORTED = {"tool_raises_fatal": "smolagents hands every tool exception back to the model"}
FATAL: frozenset[str] = frozenset()


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final answer."""
    return run_smolagent("ToolCallingAgent", FRAMEWORK, run_input, system_prompt)
