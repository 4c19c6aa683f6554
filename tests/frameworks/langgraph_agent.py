"""A LangGraph prebuilt ReAct agent (``create_react_agent``, ``ChatOpenAI``) with the two tools.

Tool arguments are checked by pydantic models that forbid extra fields (so an unexpected argument is an
error ``ToolMessage``, and the schema sent to the model says ``additionalProperties: false``). A caught
tool exception comes back to the model as a ``ToolMessage`` with ``status="error"``
(``handle_tool_errors=True``); with the default handler it ends the run.
"""

from __future__ import annotations

import warnings
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tests.frameworks import tools
from tests.frameworks._common import MODEL, SYSTEM_PROMPT, model_url, scenario_of
from tests.frameworks.scenarios import Scenario

FRAMEWORK = "langgraph"
STYLE = "tools"
UNSUPPORTED = {"unparseable_output": "LangGraph takes any text reply as the final answer"}
#: Scenarios whose injected failure ends the run here (invalid JSON arguments end the graph, with
#: an empty answer, rather than fail it).
FATAL: frozenset[str] = frozenset()


class WeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(description="The city's name, such as Paris.")


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="The order's id, such as A-17.")


def build(scenario: Scenario, *, system_prompt: str = SYSTEM_PROMPT) -> Any:
    """The compiled graph for one run of ``scenario``."""
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import ToolNode, create_react_agent

    llm = ChatOpenAI(model=MODEL, base_url=model_url(), api_key="test", max_retries=0, temperature=0)
    agent_tools = [
        StructuredTool.from_function(
            tools.get_weather, name="get_weather", description=tools.WEATHER_DOC, args_schema=WeatherArgs
        ),
        StructuredTool.from_function(
            tools.lookup_order, name="lookup_order", description=tools.ORDER_DOC, args_schema=OrderArgs
        ),
    ]
    handling = {"handle_tool_errors": True} if scenario.catch_tool_errors else {}
    node = ToolNode(agent_tools, **handling)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's deprecation notice: it is what users run
        return create_react_agent(llm, node, prompt=system_prompt)


def agent(run_input: Any, *, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The entry point: run the scenario the input names; returns the final answer."""
    scenario = scenario_of(run_input)
    graph = build(scenario, system_prompt=system_prompt)
    result = graph.invoke({"messages": [("user", scenario.question(FRAMEWORK))]})
    return str(result["messages"][-1].content)
