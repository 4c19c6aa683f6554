"""Agents built on real frameworks, driven against ``tailcut.testing.ModelServer`` by a scenario script.

Each framework module (``langgraph_agent``, ``openai_agents_agent``, ``smolagents_agent`` for
``ToolCallingAgent``, ``smolagents_code_agent`` for ``CodeAgent``, ``llama_index_agent`` for a LlamaIndex
``FunctionAgent``) builds a small agent with the two tools
of :mod:`tests.frameworks.tools` and exposes ``agent(run_input)``, the entry point a replay calls.
:mod:`tests.frameworks.scenarios` is the script the model follows, run by run (a clean run, a tool that
raises, an HTTP error text, a malformed call, an unparseable output, a repeated call), and each scenario
carries its label: which finding, at which span. :mod:`tests.frameworks.harness` records runs through a
real ``tailcut collect`` with a chosen recorder (tailcut's own SDK, or the framework's OpenInference or
OpenLLMetry instrumentor) and returns the data dir.
"""
