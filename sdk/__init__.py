"""tailcut: record every non-deterministic boundary of an LLM agent run as OpenTelemetry spans.

Examples
--------
::

    import tailcut

    tailcut.init(service_name="support-agent", endpoint="http://127.0.0.1:4318")
    tailcut.instrument_openai()

    @tailcut.tool(name="search_kb")
    def search_kb(query: str) -> list[dict]: ...

    with tailcut.run("support-agent", input={"ticket": 42}, prompt_version="v7") as run:
        ...
        run.set_outcome("pass", score=0.92)

Importing this package is cheap and never imports pyarrow, duckdb or polars: those belong to the
pipeline (``pip install "tailcut[pipeline]"``).
"""

from tailcut._decorators import Retry, agent, chain, embedding, llm, memory, retriever, router, tool
from tailcut._manual import boundary, span
from tailcut._run import Attempt, Run, retry, run, tool_call_id
from tailcut._setup import force_flush, init, shutdown, stats
from tailcut._version import __version__
from tailcut.errors import Divergence, RecordedError, TailcutError
from tailcut.instrumentation import (
    instrument_anthropic,
    instrument_openai,
    uninstrument_anthropic,
    uninstrument_openai,
)
from tailcut.interceptor import BoundaryInterceptor, Crossing, Served, use_interceptor

__all__ = [
    "Attempt",
    "BoundaryInterceptor",
    "Crossing",
    "Divergence",
    "RecordedError",
    "Retry",
    "Run",
    "Served",
    "TailcutError",
    "__version__",
    "agent",
    "boundary",
    "chain",
    "embedding",
    "force_flush",
    "init",
    "instrument_anthropic",
    "instrument_openai",
    "llm",
    "memory",
    "retriever",
    "retry",
    "router",
    "run",
    "shutdown",
    "span",
    "stats",
    "tool",
    "tool_call_id",
    "uninstrument_anthropic",
    "uninstrument_openai",
    "use_interceptor",
]
