"""A smolagents ``CodeAgent``: the model writes Python that calls the tools and ``final_answer``.

Its failures are observations: ``Code execution failed at line ...`` (a tool that raised, an unknown
function, an unexpected argument), ``Code parsing failed ... SyntaxError`` and ``Error in code parsing``
(no code block).
"""

from __future__ import annotations

from typing import Any

from tests.frameworks._common import SYSTEM_PROMPT
from tests.frameworks._documented import run_smolagent

FRAMEWORK = "smolagents_code"
STYLE = "code"
UNSUPPORTED = {"tool_raises_fatal": "smolagents hands every tool exception back to the model"}
FATAL: frozenset[str] = frozenset()


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final answer."""
    return run_smolagent("CodeAgent", FRAMEWORK, run_input, system_prompt)
