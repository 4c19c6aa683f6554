"""Auto-instrumentation of the OpenAI Agents SDK: function tools as ``tool`` boundaries, runs as runs.

Patched: the SDK's function-tool invoker (``_FailureHandlingFunctionToolInvoker.__call__``, which every
``function_tool`` goes through): the crossing wraps the invocation itself, inside the SDK's failure
handling, so a tool that raises is a failed boundary whether the SDK then hands the model its error
output or fails the run; its request is the arguments the model sent (as a mapping), its call id the
model's. ``AgentRunner.run`` (``Runner.run`` and ``Runner.run_sync``) is the run, its input the run's
input and its output ``final_output``. The model calls are the ``openai`` SDK's, recorded by its
instrumentor; the SDK's own tracing goes on as configured.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tailcut.instrumentation._frameworks import ToolCrossing, recording, run_call_async
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet

__all__ = ["INSTRUMENTOR", "OpenAIAgentsInstrumentor"]

FRAMEWORK = "openai_agents"
_RECORDED = "__tailcut_recorded__"


def _arguments(text: Any) -> dict[str, Any]:
    """The model's arguments as a mapping; text that is not a JSON object is kept as it came."""
    try:
        value = json.loads(text) if isinstance(text, str) and text.strip() else {}
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": text}


def _recorded(invoke: Any) -> Any:
    """The invocation of one function tool, as a tool boundary (while the instrumentor is applied)."""

    async def recorded(ctx: Any, input: Any) -> Any:
        if not INSTRUMENTOR.applied or not recording():
            return await invoke(ctx, input)
        name = str(getattr(ctx, "tool_name", None) or "function_tool")
        crossing = ToolCrossing(name, None, (), _arguments(input), call_id=getattr(ctx, "tool_call_id", None))
        return await crossing.run_async(lambda: invoke(ctx, input))

    setattr(recorded, _RECORDED, True)
    functools.update_wrapper(recorded, invoke)
    return recorded


def _invoker_call(original: Any) -> Any:
    @functools.wraps(original)
    async def call(self: Any, ctx: Any, input: Any) -> Any:
        invoke = getattr(self, "_invoke_tool_impl", None)
        if invoke is not None and not getattr(invoke, _RECORDED, False):
            self._invoke_tool_impl = _recorded(invoke)
        return await original(self, ctx, input)

    return call


def _final_output(result: Any) -> Any:
    return getattr(result, "final_output", result)


def _runner_run(original: Any) -> Any:
    @functools.wraps(original)
    async def run(self: Any, starting_agent: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(getattr(starting_agent, "name", None) or "Agent")
        return await run_call_async(
            FRAMEWORK,
            name,
            input,
            lambda: original(self, starting_agent, input, *args, **kwargs),
            _final_output,
        )

    return run


def _patches() -> list[Patch]:
    from agents.run import AgentRunner
    from agents.tool import _FailureHandlingFunctionToolInvoker

    return [
        Patch(_FailureHandlingFunctionToolInvoker, "__call__", _invoker_call),
        Patch(AgentRunner, "run", _runner_run),
    ]


#: The patches of the OpenAI Agents SDK (``tailcut.init(auto_instrument=True)`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class OpenAIAgentsInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for OpenAI Agents SDK function tools and runs."""

    patch_set = INSTRUMENTOR
    dependencies = ("openai-agents >= 0.24, < 0.25",)
