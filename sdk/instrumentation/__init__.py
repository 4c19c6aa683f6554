"""Auto-instrumentation of the real ``openai`` and ``anthropic`` SDKs, and of the agent frameworks.

Each instrumentor patches the SDK's resource methods (listed as data in its module), records every
call as an ``llm`` boundary span with the request exactly as sent and the provider's raw response, and
lets an active replay interceptor serve the call instead. Instrumenting twice is a no-op;
``uninstrument_*()`` restores the originals. The modules are imported only when asked for, so
``import tailcut`` never imports either SDK.

The agent frameworks (:data:`FRAMEWORKS`: LangChain/LangGraph, the OpenAI Agents SDK, smolagents,
LlamaIndex) get one module each: their tools become ``tool`` boundaries, recorded and served like
``@tailcut.tool``, and their runs ``tailcut.run`` roots (see :mod:`tailcut.instrumentation._frameworks`).
"""

from __future__ import annotations

import importlib
import logging

_logger = logging.getLogger("tailcut")


def _instrumentor(module: str) -> object:
    return importlib.import_module(f"tailcut.instrumentation.{module}").INSTRUMENTOR


def instrument_openai() -> bool:
    """Record every ``openai`` chat-completions and responses call; False if already instrumented."""
    return _instrumentor("openai").apply()  # type: ignore[attr-defined]


def uninstrument_openai() -> bool:
    """Restore the ``openai`` SDK's original methods; False if it was not instrumented."""
    return _instrumentor("openai").restore()  # type: ignore[attr-defined]


def instrument_anthropic() -> bool:
    """Record every ``anthropic`` messages call (``create`` and ``stream``); False if already instrumented."""
    return _instrumentor("anthropic").apply()  # type: ignore[attr-defined]


def uninstrument_anthropic() -> bool:
    """Restore the ``anthropic`` SDK's original methods; False if it was not instrumented."""
    return _instrumentor("anthropic").restore()  # type: ignore[attr-defined]


#: Instrumented framework -> its module under ``tailcut.instrumentation``.
FRAMEWORKS = {
    "langchain": "langchain",
    "openai_agents": "openai_agents",
    "smolagents": "smolagents",
    "llama_index": "llama_index",
}


def instrument_framework(name: str) -> bool:
    """Instrument one agent framework of :data:`FRAMEWORKS`; False if already instrumented.

    Raises ``ImportError`` when the framework is not installed.
    """
    return _instrumentor(FRAMEWORKS[name]).apply()  # type: ignore[attr-defined]


def uninstrument_framework(name: str) -> bool:
    """Restore one framework's original methods; False if it was not instrumented."""
    return _instrumentor(FRAMEWORKS[name]).restore()  # type: ignore[attr-defined]


def instrument_all() -> list[str]:
    """Instrument every supported SDK and agent framework that is installed; returns their names."""
    steps = [("openai", instrument_openai), ("anthropic", instrument_anthropic)]
    steps += [(name, lambda name=name: instrument_framework(name)) for name in FRAMEWORKS]
    done = []
    for name, instrument in steps:
        try:
            instrument()
        except ImportError:
            _logger.debug("tailcut: %s is not installed; not instrumenting it", name)
            continue
        done.append(name)
    return done
