"""An OpenAI Agents SDK agent on the Chat Completions model, with the two tools as function tools.

A caught tool exception is handed to the model as the SDK's default error output ("An error occurred
while running the tool..."); with ``failure_error_function=None`` it fails the run (``UserError: Error
running tool ...``). The SDK's own tracing uploads to the provider by default: the recording process
replaces its processors (see :mod:`tests.frameworks.record`), and this module never exports anything.
"""

from __future__ import annotations

from typing import Any

from tests.frameworks._common import MODEL, SYSTEM_PROMPT, model_url, scenario_of
from tests.frameworks._documented import get_weather, lookup_order
from tests.frameworks.scenarios import Scenario

FRAMEWORK = "openai_agents"
STYLE = "tools"
UNSUPPORTED = {"unparseable_output": "the Agents SDK takes any text reply as the final output"}
#: Scenarios whose injected failure ends the run here (``ModelBehaviorError: Tool ... not found``).
FATAL = frozenset({"unknown_tool"})


def build(scenario: Scenario, *, system_prompt: str = SYSTEM_PROMPT) -> Any:
    """The agent for one run of ``scenario``."""
    import openai
    from agents import Agent, OpenAIChatCompletionsModel, function_tool

    client = openai.AsyncOpenAI(base_url=model_url(), api_key="test", max_retries=0)
    failure: dict[str, Any] = {} if scenario.catch_tool_errors else {"failure_error_function": None}
    return Agent(
        name="weather-and-orders",
        instructions=system_prompt,
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        tools=[function_tool(get_weather, **failure), function_tool(lookup_order, **failure)],
    )


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final output."""
    from agents import Runner

    scenario = scenario_of(run_input)
    result = Runner.run_sync(build(scenario, system_prompt=system_prompt), scenario.question(FRAMEWORK))
    return str(result.final_output)
