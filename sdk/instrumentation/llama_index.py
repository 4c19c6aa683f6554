"""Auto-instrumentation of LlamaIndex: function tools as ``tool`` boundaries, agent workflow runs as runs.

Patched: ``FunctionTool.call``/``acall`` (what an agent workflow calls for every tool the model picks,
after LlamaIndex has parsed the model's arguments): the crossing wraps the user's function itself, on a
copy of the tool whose function is the recorded one, so LlamaIndex builds its ``ToolOutput`` from the
recorded (or served) value exactly as from a live one, and a function that raises is a failed boundary
whose error the workflow hands back to the model. Its request is the arguments bound to the function's
parameters (the workflow ``Context`` a tool may take left out).

``BaseWorkflowAgent.run`` (``FunctionAgent``, ``ReActAgent``, ``CodeActAgent``) and
``AgentWorkflow.run`` are the run, its input the user message and its output the final response's
text. ``run`` only schedules the workflow and returns a handler: the run is opened in a copy of the
caller's context, in which the workflow's task is created (so the model calls and tools inside are
children of the run span, while the caller's context is left as it was), and it ends when the handler's
result is set, before whoever awaits the handler resumes. The model calls are the ``openai`` SDK's
(``llama-index-llms-openai``), recorded by its instrumentor; LlamaIndex's own instrumentation goes on
as configured.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
from typing import Any

from tailcut._guard import internal_error
from tailcut._run import Run
from tailcut.instrumentation._frameworks import (
    ToolCrossing,
    enter_run,
    is_tailcut_boundary,
    jsonable,
    opens_run,
    recording,
)
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet

__all__ = ["INSTRUMENTOR", "LlamaIndexInstrumentor"]

FRAMEWORK = "llama_index"


def _crossing(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ToolCrossing:
    """The crossing of one call of ``tool``'s function with the arguments it receives."""
    context = getattr(tool, "ctx_param_name", None)
    exclude = frozenset({context}) if context else frozenset()
    arguments = {key: value for key, value in kwargs.items() if key not in exclude}
    return ToolCrossing(tool.metadata.get_name(), tool.real_fn, args, arguments, exclude=exclude)


def _records(tool: Any) -> bool:
    return recording() and not is_tailcut_boundary(getattr(tool, "_real_fn", None))


def _tool_call(original: Any) -> Any:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _records(self):
            return original(self, *args, **kwargs)
        function = self._fn

        def recorded(*fn_args: Any, **fn_kwargs: Any) -> Any:
            return _crossing(self, fn_args, fn_kwargs).run(lambda: function(*fn_args, **fn_kwargs))

        tool = copy.copy(self)
        tool._fn = recorded
        return original(tool, *args, **kwargs)

    return call


def _tool_acall(original: Any) -> Any:
    @functools.wraps(original)
    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _records(self):
            return await original(self, *args, **kwargs)
        function = self._async_fn

        async def recorded(*fn_args: Any, **fn_kwargs: Any) -> Any:
            crossing = _crossing(self, fn_args, fn_kwargs)
            return await crossing.run_async(lambda: function(*fn_args, **fn_kwargs))

        tool = copy.copy(self)
        tool._async_fn = recorded
        return await original(tool, *args, **kwargs)

    return acall


def _run_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the run was asked: the user message (text, or the chat message's fields), else the start
    event's fields."""
    message = kwargs.get("user_msg", args[0] if args else None)
    if message is not None and not hasattr(message, "is_running"):  # not a resumed Context
        return getattr(message, "content", None) or jsonable(message)
    return jsonable(kwargs.get("start_event"))


def _resumes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call continues a run already going on (``ctx=`` a running Context)."""
    ctx = kwargs.get("ctx") or next((a for a in args if hasattr(a, "is_running")), None)
    return bool(getattr(ctx, "is_running", False))


def _answer(stop_event: Any) -> Any:
    """A workflow's output: the final response's text (an agent's ``AgentOutput``), else the result."""
    from llama_index.core.workflow import StopEvent

    # What awaiting the handler returns: a plain StopEvent's result, or the (subclassed) event itself.
    result = stop_event.result if type(stop_event) is StopEvent else stop_event
    response = getattr(result, "response", None)
    content = getattr(response, "content", None)
    return content if content is not None else jsonable(result)


def _end(run: Run, result: asyncio.Future[Any]) -> None:
    """Close the run with the workflow's result (in the context it was opened in)."""
    try:
        if result.cancelled():
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = result.exception()
            if error is None:
                run.set_output(_answer(result.result()))
        run.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)
    except Exception as exc:  # the agent's result is not ours to break
        internal_error("ending a LlamaIndex run", exc)


def _workflow_run(original: Any) -> Any:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not opens_run(FRAMEWORK) or _resumes(args, kwargs):
            return original(self, *args, **kwargs)
        name = str(getattr(self, "name", None) or type(self).__name__)
        context = contextvars.copy_context()
        span = context.run(enter_run, FRAMEWORK, name, _run_input(args, kwargs))
        try:
            handler = context.run(original, self, *args, **kwargs)
        except BaseException as exc:
            context.run(span.__exit__, type(exc), exc, exc.__traceback__)
            raise
        # The handler's own result task, whose callbacks run before any awaiter of the handler resumes.
        done = getattr(handler, "_result_task", None) or asyncio.ensure_future(handler)
        done.add_done_callback(functools.partial(_end, span), context=context)
        return handler

    return run


def _patches() -> list[Patch]:
    from llama_index.core.agent.workflow import AgentWorkflow
    from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
    from llama_index.core.tools import FunctionTool

    return [
        Patch(FunctionTool, "call", _tool_call),
        Patch(FunctionTool, "acall", _tool_acall),
        Patch(BaseWorkflowAgent, "run", _workflow_run),
        Patch(AgentWorkflow, "run", _workflow_run),
    ]


#: The patches of LlamaIndex (``tailcut.init(auto_instrument=True)`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class LlamaIndexInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for LlamaIndex function tools and agent workflow runs."""

    patch_set = INSTRUMENTOR
    dependencies = ("llama-index-core >= 0.14.25, < 0.15",)
