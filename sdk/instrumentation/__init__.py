"""Auto-instrumentation of the real ``openai`` and ``anthropic`` SDKs.

Each instrumentor patches the SDK's resource methods (listed as data in its module), records every
call as an ``llm`` boundary span with the request exactly as sent and the provider's raw response, and
lets an active replay interceptor serve the call instead. Instrumenting twice is a no-op;
``uninstrument_*()`` restores the originals. The modules are imported only when asked for, so
``import tailcut`` never imports either SDK.
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


def instrument_all() -> list[str]:
    """Instrument every supported SDK that is installed; returns the names instrumented."""
    done = []
    for name, instrument in (("openai", instrument_openai), ("anthropic", instrument_anthropic)):
        try:
            instrument()
        except ImportError:
            _logger.debug("tailcut: %s is not installed; not instrumenting it", name)
            continue
        done.append(name)
    return done
