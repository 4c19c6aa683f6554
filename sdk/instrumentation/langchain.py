"""Auto-instrumentation of LangChain and LangGraph: tools as ``tool`` boundaries, graph runs as runs.

Patched: ``StructuredTool._run``/``_arun`` and ``Tool._run``/``_arun`` (what ``@tool``,
``StructuredTool.from_function`` and ``Tool`` build: the step where LangChain calls the user's function,
after it has parsed and validated the arguments (the wrappers keep the originals' signatures, which
LangChain reads to decide what to pass) and before it formats the result into a
``ToolMessage``), and ``Pregel.invoke``/``ainvoke`` (every compiled LangGraph graph, the prebuilt ReAct
agent included) as the run, its input the graph's input and its output the last message's content.
A tool whose function is already ``@tailcut.tool`` records itself. Chat models reach the provider through the
``openai``/``anthropic`` SDKs, recorded by their instrumentors.
"""

from __future__ import annotations

import functools
from typing import Any

from tailcut.instrumentation._frameworks import (
    ToolCrossing,
    is_tailcut_boundary,
    recording,
    run_call,
    run_call_async,
)
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet

__all__ = ["INSTRUMENTOR", "LangChainInstrumentor"]

FRAMEWORK = "langgraph"
#: Parameters LangChain passes a tool's function besides its arguments.
_PLUMBING = frozenset({"callbacks", "config", "run_manager"})


def _crossing(tool: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ToolCrossing:
    arguments = {key: value for key, value in kwargs.items() if key not in _PLUMBING}
    return ToolCrossing(tool.name, func, args, arguments, exclude=_PLUMBING)


def _sync_run(original: Any) -> Any:
    @functools.wraps(original)
    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
        func = getattr(self, "func", None)
        if func is None or not recording() or is_tailcut_boundary(func):
            return original(self, *args, **kwargs)
        return _crossing(self, func, args, kwargs).run(lambda: original(self, *args, **kwargs))

    return _run


def _async_run(original: Any) -> Any:
    @functools.wraps(original)
    async def _arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        coroutine = getattr(self, "coroutine", None)
        if coroutine is None or not recording() or is_tailcut_boundary(coroutine):
            # No coroutine: LangChain runs the sync ``_run`` in an executor, which records it.
            return await original(self, *args, **kwargs)
        return await _crossing(self, coroutine, args, kwargs).run_async(
            lambda: original(self, *args, **kwargs)
        )

    return _arun


def _graph_name(graph: Any) -> str:
    return str(getattr(graph, "name", None) or "LangGraph")


def _answer(state: Any) -> Any:
    """A graph run's output: the last message's content when the state is a message list (the messages
    themselves carry ids LangGraph draws at random), else the final state."""
    messages = state.get("messages") if isinstance(state, dict) else None
    if isinstance(messages, list) and messages:
        return getattr(messages[-1], "content", messages[-1])
    return state


def _invoke(original: Any) -> Any:
    @functools.wraps(original)
    def invoke(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        return run_call(
            FRAMEWORK, _graph_name(self), input, lambda: original(self, input, *args, **kwargs), _answer
        )

    return invoke


def _ainvoke(original: Any) -> Any:
    @functools.wraps(original)
    async def ainvoke(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        return await run_call_async(
            FRAMEWORK, _graph_name(self), input, lambda: original(self, input, *args, **kwargs), _answer
        )

    return ainvoke


def _patches() -> list[Patch]:
    from langchain_core.tools import StructuredTool, Tool

    patches = [
        Patch(cls, name, make)
        for cls in (StructuredTool, Tool)
        for name, make in (("_run", _sync_run), ("_arun", _async_run))
    ]
    try:
        from langgraph.pregel import Pregel
    except ImportError:  # LangChain without LangGraph: tools only
        return patches
    return [*patches, Patch(Pregel, "invoke", _invoke), Patch(Pregel, "ainvoke", _ainvoke)]


#: The patches of LangChain/LangGraph (``tailcut.init(auto_instrument=True)`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class LangChainInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for LangChain tools and LangGraph runs."""

    patch_set = INSTRUMENTOR
    dependencies = ("langchain-core >= 1.0",)
