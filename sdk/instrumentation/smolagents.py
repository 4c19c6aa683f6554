"""Auto-instrumentation of smolagents: tools (``final_answer`` included) as ``tool`` boundaries, agent
runs as runs.

Patched: ``Tool.__call__`` (every tool a ``ToolCallingAgent`` calls and every tool the code of a
``CodeAgent`` calls, the built-in ``final_answer`` too), its request the arguments bound to the tool's
``forward`` parameters; and ``MultiStepAgent.run`` (not streamed) as the run, its input the task and
its output the final answer. The model calls are the ``openai`` SDK's (``OpenAIModel``), recorded by its
instrumentor. And ``smolagents.models.is_rate_limit_error``, the retry predicate a model takes when it is
built: a replay's :class:`~tailcut.errors.Divergence` (or any tailcut error) raised from a model call is
not a rate limit to wait out, though its text may well contain ``429`` (a request that quotes an
``HTTP 429`` tool result): smolagents would sleep a minute or more before each of its retries.
"""

from __future__ import annotations

import functools
from typing import Any

from tailcut.errors import TailcutError
from tailcut.instrumentation._frameworks import ToolCrossing, is_tailcut_boundary, recording, run_call
from tailcut.instrumentation._otel import TailcutInstrumentor
from tailcut.instrumentation._patching import Patch, PatchSet

__all__ = ["INSTRUMENTOR", "SmolagentsInstrumentor"]

FRAMEWORK = "smolagents"


def _arguments(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict]:
    """The arguments as smolagents hands them to ``forward``: one dict of the tool's inputs is unpacked."""
    inputs = getattr(tool, "inputs", None) or {}
    if len(args) == 1 and not kwargs and isinstance(args[0], dict) and all(k in inputs for k in args[0]):
        return (), dict(args[0])
    return args, kwargs


def _tool_call(original: Any) -> Any:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        forward = getattr(type(self), "forward", None)
        if forward is None or not recording() or is_tailcut_boundary(forward):
            return original(self, *args, **kwargs)
        call_kwargs = {key: value for key, value in kwargs.items() if key != "sanitize_inputs_outputs"}
        call_args, call_kwargs = _arguments(self, args, call_kwargs)
        # bound, so a positional argument binds to the tool's first input, not to ``self``
        crossing = ToolCrossing(str(self.name), forward.__get__(self), call_args, call_kwargs)
        return crossing.run(lambda: original(self, *args, **kwargs))

    return call


def _agent_run(original: Any) -> Any:
    @functools.wraps(original)
    def run(self: Any, task: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("stream") or (args and args[0] is True):  # a stream is consumed after run returns
            return original(self, task, *args, **kwargs)
        name = str(getattr(self, "name", None) or type(self).__name__)
        return run_call(FRAMEWORK, name, task, lambda: original(self, task, *args, **kwargs))

    return run


def _rate_limit_predicate(original: Any) -> Any:
    @functools.wraps(original)
    def is_rate_limit_error(exception: BaseException) -> bool:
        return not isinstance(exception, TailcutError) and bool(original(exception))

    return is_rate_limit_error


def _patches() -> list[Patch]:
    from smolagents import MultiStepAgent, Tool, models

    return [
        Patch(Tool, "__call__", _tool_call),
        Patch(MultiStepAgent, "run", _agent_run),
        Patch(models, "is_rate_limit_error", _rate_limit_predicate),
    ]


#: The patches of smolagents (``tailcut.init(auto_instrument=True)`` applies them).
INSTRUMENTOR = PatchSet(_patches)


class SmolagentsInstrumentor(TailcutInstrumentor):
    """OpenTelemetry instrumentor for smolagents tools and agent runs."""

    patch_set = INSTRUMENTOR
    dependencies = ("smolagents >= 1.26",)
