"""Per-trace signals and findings agree (issue 27): a trace a policy keeps for a failure has the finding for
it, and a finding of one of those failures is on a trace whose signal shows it.

Random agent runs, recorded the way production records them, then classified with real DuckDB over the
real Parquet files:

* **through the SDK**: the real ``openai`` SDK, instrumented by tailcut, against the scripted model server;
  tools decorated with ``@tailcut.tool`` (one with a schema) that return, raise (the agent catches it and
  goes on, as frameworks do) or return an HTTP error text; the model's tool calls valid, breaking the
  schema, not JSON, naming a tool it was not offered, or repeating an earlier call; spans written by the
  embedded ``ParquetSpanExporter``, so the ``traces`` row is the writers' signals;
* **through ``tailcut ingest``**: OpenInference-shaped span trees of random kinds, statuses, ``exception``
  events and tool calls with repeats (the writers' signals of third-party spans).

For each trace of its ``traces`` row:

* ``error_spans > 0`` or ``root_failed`` iff an ``error`` finding (the census flag: failures reported in
  payloads and events included), and ``refused_calls > 0`` only with a ``schema_violation`` finding;
* ``error_count > 0`` iff an ``error`` finding, except that an ``error`` found from a **failure
  observation** alone (a report in a payload or an event of a span whose status is not ERROR: a tool result
  ``Error 403``) has ``error_count`` 0, and a failed span whose failure is the harness refusing the call is
  a ``schema_violation``;
* ``schema_violations > 0`` iff a ``schema_violation`` finding (SDK spans, whose recorded count is what
  the collector samples on);
* ``max_tool_repeat >= loop_min_repeats`` iff a ``tool_loop`` finding (each data dir holds fewer traces
  than an agent needs for a reference, so no structure z-score can make one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tailcut
from tailcut.analysis import Dataset, Thresholds
from tailcut.cli import cli
from tailcut.testing import ModelServer, ScriptedReply, ToolCall
from tests import findings_trees as trees
from tests.analysis_support import record
from tests.conftest import NOW

LOOP = Thresholds().loop_min_repeats
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "integer"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": LOOKUP_SCHEMA}},
    {"type": "function", "function": {"name": "fetch", "parameters": {"type": "object"}}},
]


class Outage(RuntimeError):
    """The backend behind a tool is down."""


@tailcut.tool(name="lookup", schema=LOOKUP_SCHEMA)
def lookup(order_id: int, behaviour: str = "ok") -> str:
    return _behave(behaviour, f"order {order_id}: shipped")


@tailcut.tool(name="fetch")
def fetch(url: str, behaviour: str = "ok") -> str:
    return _behave(behaviour, f"page {url}: 200 OK")


def _behave(behaviour: str, result: str) -> str:
    if behaviour == "raise":
        raise Outage("backend offline")
    if behaviour == "forbidden":
        return "Error 403: Forbidden"
    return result


# --- one step of a run: what the model answers, and what the tool then does --------------------------
#: The model's tool call: (tool, arguments as sent) with ``None`` for a reply of text.
_CALLS = (
    ("lookup", {"order_id": 1}),
    ("lookup", {"order_id": 2}),
    ("lookup", {"order_id": "A-1"}),  # breaks the schema (the tool is not run)
    ("lookup", '{"order_id": 1'),  # not JSON (not run)
    ("fetch", {"url": "http://127.0.0.1/a"}),
    ("delete_order", {"order_id": 1}),  # a tool the request did not offer (not run)
)
_STEP = st.tuples(st.integers(0, len(_CALLS) - 1), st.sampled_from(("ok", "ok", "raise", "forbidden")))


def _runs_tool(name: str, arguments: Any) -> bool:
    """Whether the agent runs the call: an offered tool with JSON arguments that fit its schema."""
    if name == "delete_order" or isinstance(arguments, str):
        return False
    return name != "lookup" or isinstance(arguments.get("order_id"), int)


def _agent(client: openai.OpenAI, steps: Sequence[tuple[int, str]]) -> None:
    """One run: per step a model call, then the tool it asked for (a failure is caught and reported)."""
    with tailcut.run("agree-agent", input={"steps": len(steps)}) as run:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is my order?"}]
        for _ in steps:
            completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
            message = completion.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or ():
                name, raw = call.function.name, call.function.arguments
                try:
                    arguments = json.loads(raw)
                except ValueError:
                    arguments = raw
                if not _runs_tool(name, arguments):
                    result = f"could not run {name}"
                else:
                    tool = lookup if name == "lookup" else fetch
                    try:
                        result = tool(**arguments, behaviour=_BEHAVIOUR[call.id])
                    except Outage as exc:  # the agent hands the error back to the model
                        result = f"the tool failed: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        run.set_outcome("pass")


#: What each scripted call's tool does, by call id (set as the script is enqueued).
_BEHAVIOUR: dict[str, str] = {}


@pytest.fixture(scope="module")
def scripted():
    assert tailcut.instrument_openai() is True
    server = ModelServer(clock=lambda: NOW)
    with server, openai.OpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0) as client:
        yield server, client
    tailcut.uninstrument_openai()


def _record(
    data: Path, server: ModelServer, client: openai.OpenAI, runs: list[list[tuple[int, str]]]
) -> None:
    def body() -> None:
        for r, steps in enumerate(runs):
            server.reset()
            for s, (call, behaviour) in enumerate(steps):
                call_id = f"call_{r}_{s}"
                _BEHAVIOUR[call_id] = behaviour
                name, arguments = _CALLS[call]
                server.enqueue(ScriptedReply(tool_calls=[ToolCall(name, arguments, id=call_id)]))
            _agent(client, steps)

    record(data, body)


def _findings(data: Path) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, list[str]]]]:
    """Every ``traces`` row's signals, and per trace its findings: category -> signals."""
    dataset = Dataset(data)
    found: dict[str, dict[str, list[str]]] = {}
    for row in dataset.classify().to_dicts():
        found.setdefault(row["trace_id"], {})[row["category"]] = list(row["signals"])
    rows = dataset.sql(
        "SELECT trace_id, error_count, schema_violations, max_tool_repeat, error_spans, root_failed, "
        "refused_calls FROM traces ORDER BY trace_id"
    ).rows()
    return rows, found


def _check_agreement(rows: list[tuple[Any, ...]], found: dict[str, dict[str, list[str]]]) -> None:
    for trace_id, errors, violations, repeats, error_spans, root_failed, refused in rows:
        categories = found.get(trace_id, {})
        where = (trace_id, errors, violations, repeats, error_spans, root_failed, refused, categories)
        error = categories.get("error")
        # the row's reports (the census flag): exactly the traces with an error finding, observations included
        assert (error_spans > 0 or bool(root_failed)) == (error is not None), where
        if refused:
            assert "schema_violation" in categories, where
        if errors:
            assert error is not None or "schema_violation" in categories, where
        elif error is not None:  # the error was reported in a payload or an event, no span failed
            assert "failure observation" in error, where
        assert (violations > 0) == ("schema_violation" in categories), where
        assert (repeats >= LOOP) == ("tool_loop" in categories), where


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs=st.lists(st.lists(_STEP, min_size=1, max_size=6), min_size=4, max_size=8))
def test_sdk_runs_signals_and_findings_agree(scripted, tmp_path_factory, runs):
    server, client = scripted
    data = tmp_path_factory.mktemp("agree") / "data"
    _record(data, server, client, runs)
    rows, found = _findings(data)
    assert len(rows) == len(runs)
    _check_agreement(rows, found)


# --- third-party trees through ingest ------------------------------------------------------------------
_KINDS = ("LLM", "TOOL", "TOOL", "CHAIN", "AGENT", "RETRIEVER")
_RESULTS = (None, "in stock: 4", "Error 403: Forbidden", "The page says error 404 pages are customisable.")
_ARGUMENTS = ({"sku": "A1"}, {"sku": "B2"})
_SPAN = st.tuples(
    st.sampled_from(_KINDS),
    st.booleans(),  # status ERROR
    st.booleans(),  # an exception event
    st.sampled_from(_RESULTS),
    st.integers(0, len(_ARGUMENTS) - 1),  # a tool's arguments (repeats are likely)
    st.integers(min_value=0, max_value=50),  # the parent: any earlier span
)


def _tree(specs: list[tuple[str, bool, bool, str | None, int, int]], root_failed: bool) -> list[trees.Span]:
    spans = [trees.Span("run", "AGENT", None, 0, 10_000, error="boom" if root_failed else None)]
    for index, (kind, failed, raised, result, arguments, parent) in enumerate(specs):
        start = 10 + 20 * index
        parent_name = spans[parent % len(spans)].name
        if kind == "TOOL":
            span = trees.tool(
                f"check_stock#{index}", parent_name, start, start + 10, _ARGUMENTS[arguments], result
            )
        elif kind == "LLM":
            span = trees.llm(f"generate#{index}", parent_name, start, start + 10)
        else:
            attributes = {"output.value": result} if result is not None and kind == "RETRIEVER" else {}
            span = trees.Span(f"{kind.lower()}#{index}", kind, parent_name, start, start + 10, attributes)
        span.error = "boom" if failed else None
        span.events = [trees.exception("RuntimeError", "boom")] if raised else []
        spans.append(span)
    return spans


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(_SPAN, min_size=1, max_size=10), st.booleans()), min_size=4, max_size=8))
def test_ingested_trees_signals_and_findings_agree(tmp_path_factory, forest):
    folder = tmp_path_factory.mktemp("agree-ingest")
    ids = [f"{i + 1:032x}" for i in range(len(forest))]
    source = trees.write(
        folder / "forest.json",
        {t: _tree(specs, root_failed) for t, (specs, root_failed) in zip(ids, forest, strict=True)},
    )
    data = folder / "data"
    result = CliRunner().invoke(cli, ["ingest", str(source), "--data", str(data)])
    assert result.exit_code == 0, result.output
    rows, found = _findings(data)
    assert len(rows) == len(forest)
    _check_agreement(rows, found)
