"""Importing the runner's hooks from ``module:function`` strings, and calling them the way they accept."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from tailcut.errors import ReplayError


def load_callable(spec: str, what: str) -> Callable[..., Any]:
    """The callable named by ``module:function`` (``function`` may be dotted: ``module:Class.method``).

    The working directory is importable, as it is for ``python -m``, so ``--agent my_agent:run`` works
    from the project that holds ``my_agent.py``.

    Raises
    ------
    ReplayError
        Naming the option (``what``) and why the callable cannot be had.
    """
    module_name, sep, path = spec.partition(":")
    if not sep or not module_name or not path:
        raise ReplayError(f"{what} must be module:function; got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ReplayError(
            f"{what} {spec}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    for part in path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ReplayError(f"{what} {spec}: {module_name} has no {path}") from None
    if not callable(target):
        raise ReplayError(f"{what} {spec}: {path} is not callable")
    return target  # type: ignore[no-any-return]


def takes_argument(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` can be called with one positional argument."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def call_agent(agent: Callable[[Any], Any], run_input: Any) -> Any:
    """Call the entry point with the run input; a coroutine function runs on a fresh event loop."""
    if inspect.iscoroutinefunction(agent):
        return asyncio.run(agent(run_input))
    return agent(run_input)
