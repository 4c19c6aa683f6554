"""Each framework agent with a changed system prompt: the harness change a replay must report.

``tailcut replay --agent tests.frameworks.changed:langgraph`` replays a LangGraph corpus with it.
"""

from __future__ import annotations

import functools

from tests.frameworks import (
    langgraph_agent,
    llama_index_agent,
    openai_agents_agent,
    smolagents_agent,
    smolagents_code_agent,
)

CHANGED_PROMPT = "You are a terse assistant. Answer from memory; call tools only when you must."

langgraph = functools.partial(langgraph_agent.agent, system_prompt=CHANGED_PROMPT)
openai_agents = functools.partial(openai_agents_agent.agent, system_prompt=CHANGED_PROMPT)
smolagents = functools.partial(smolagents_agent.agent, system_prompt=CHANGED_PROMPT)
smolagents_code = functools.partial(smolagents_code_agent.agent, system_prompt=CHANGED_PROMPT)
llamaindex = functools.partial(llama_index_agent.agent, system_prompt=CHANGED_PROMPT)
