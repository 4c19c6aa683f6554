"""The two tools with Google-style docstrings, from which smolagents and the Agents SDK read each tool's
description and argument docs; and the smolagents model and tool objects."""

from __future__ import annotations

from typing import Any

from tests.frameworks import tools


def get_weather(city: str) -> str:
    """Current weather of a city: sky and temperature in Celsius.

    Args:
        city: The city's name, such as Paris.
    """
    return tools.get_weather(city)


def lookup_order(order_id: str) -> str:
    """Status of a customer order, by its id.

    Args:
        order_id: The order's id, such as A-17.
    """
    return tools.lookup_order(order_id)


def smolagents_tools() -> list[Any]:
    from smolagents import tool

    return [tool(get_weather), tool(lookup_order)]


def model() -> Any:
    from smolagents import OpenAIModel

    from tests.frameworks._common import MODEL, model_url

    return OpenAIModel(model_id=MODEL, api_base=model_url(), api_key="test", client_kwargs={"max_retries": 0})
