"""A LlamaIndex ``FunctionAgent`` (``llama-index-llms-openai``'s ``OpenAI``) with the two tools as
``FunctionTool``s, streaming the model's replies as the agent does by default.

The agent workflow hands every tool exception back to the model as the tool's output (its text), so no
tool failure ends its run. ``llama-index-llms-openai`` needs ``openai<3``: ``.ci/run`` records and
replays this agent in its second environment (``.venv-openai2``).
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from tests.frameworks._common import MODEL, SYSTEM_PROMPT, model_url, scenario_of
from tests.frameworks._documented import get_weather, lookup_order

FRAMEWORK = "llamaindex"
STYLE = "tools"
UNSUPPORTED = {
    "tool_raises_fatal": "LlamaIndex's agent workflow hands every tool exception back to the model",
    "unparseable_output": "FunctionAgent takes any text reply as the final answer",
}
FATAL: frozenset[str] = frozenset()


def build(*, system_prompt: str = SYSTEM_PROMPT) -> Any:
    """The agent for one run."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI

    llm = OpenAI(model=MODEL, api_base=model_url(), api_key="test", max_retries=0, temperature=0)
    return FunctionAgent(
        name="weather-and-orders",
        tools=[FunctionTool.from_defaults(get_weather), FunctionTool.from_defaults(lookup_order)],
        llm=llm,
        system_prompt=system_prompt,
    )


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final response's text."""
    scenario = scenario_of(run_input)

    async def run() -> Any:
        return await build(system_prompt=system_prompt).run(user_msg=scenario.question(FRAMEWORK))

    with warnings.catch_warnings():
        # pydantic's deprecation notices, raised each time the workflow lists its own steps (on building
        # the agent and on every run): it is what users run
        warnings.simplefilter("ignore", DeprecationWarning)
        return str(asyncio.run(run()).response.content)
