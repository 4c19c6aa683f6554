"""A smolagents ``ToolCallingAgent``: native tool calls, the answer given through ``final_answer``.

smolagents hands every tool exception, unknown tool, bad argument and unparseable output back to the
model as an ``Error:`` observation, so no tool failure ends its run.
"""

from __future__ import annotations

from typing import Any

from tests.frameworks._common import SYSTEM_PROMPT, scenario_of
from tests.frameworks._documented import model, smolagents_tools
from tests.frameworks.scenarios import Scenario

FRAMEWORK = "smolagents"
STYLE = "smolagents_tools"
UNSUPPORTED = {"tool_raises_fatal": "smolagents hands every tool exception back to the model"}
FATAL: frozenset[str] = frozenset()


def build(scenario: Scenario, *, system_prompt: str = SYSTEM_PROMPT) -> Any:
    from smolagents import ToolCallingAgent

    agent = ToolCallingAgent(tools=smolagents_tools(), model=model(), max_steps=6, verbosity_level=-1)
    agent.prompt_templates["system_prompt"] = system_prompt + "\n\n" + agent.prompt_templates["system_prompt"]
    return agent


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final answer."""
    scenario = scenario_of(run_input)
    return str(build(scenario, system_prompt=system_prompt).run(scenario.question(FRAMEWORK)))
