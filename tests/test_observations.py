"""The failure-observation rules: each documented report is found, clean texts are not, SQL agrees."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.exporters.conventions import observations as obs

#: (text as the framework writes it, rule, sub-kind)
REPORTS = [
    (
        "Error when executing tool page_down with arguments {'x': 1}: TypeError: PageDownTool.forward() "
        "got an unexpected keyword argument 'x'\nYou should only use this tool with a correct input.",
        "python.arguments",
        "tool_exception",
    ),
    (
        'Error executing tool \'check_stock\' with arguments {"sku": "A1"}: RuntimeError: warehouse down\n'
        "Please try again or use another tool",
        "smolagents.tool_error",
        "tool_exception",
    ),
    (
        "Error executing tool 'fetch' with arguments {}: HTTPError: 429 Client Error: Too Many Requests",
        "smolagents.tool_error",
        "rate_limited",
    ),
    (
        "Invalid call to tool 'lookup' with arguments {\"q\": 1}: lookup() got an unexpected keyword "
        "argument 'q'\nYou should call this tool with correct input arguments.",
        "smolagents.tool_call",
        "tool_exception",
    ),
    (
        "Unknown tool serch, should be one of: search, final_answer.",
        "smolagents.unknown_tool",
        "tool_exception",
    ),
    (
        "Code execution failed at line 'x = fetch()' due to: InterpreterError: Forbidden function evaluation",
        "smolagents.code_execution",
        "tool_exception",
    ),
    (
        "Code parsing failed on line 9 due to: SyntaxError\nprint(1",
        "smolagents.code_parsing",
        "tool_exception",
    ),
    (
        "Error while parsing tool call from model output: bad JSON",
        "smolagents.tool_call_parsing",
        "tool_exception",
    ),
    ("Error: serch is not a valid tool, try one of [search].", "langgraph.invalid_tool", "tool_exception"),
    ("Error: ValueError('boom')\n Please fix your mistakes.", "langgraph.tool_error", "tool_exception"),
    (
        '{"type": "tool", "content": "nope", "status": "error", "tool_call_id": "c1"}',
        "langchain.tool_message_error",
        "tool_exception",
    ),
    (
        "An error occurred while running the tool. Please try again. Error: boom",
        "openai_agents.tool_error",
        "tool_exception",
    ),
    ("Invalid JSON input for tool lookup_order: {oops", "openai_agents.invalid_json", "tool_exception"),
    ("Tool lookup not found in agent Support", "openai_agents.unknown_tool", "tool_exception"),
    ("404 Client Error: Not Found for url: http://127.0.0.1/x", "http.status", "not_found"),
    ("Error 403: Forbidden", "http.status", "auth"),
    ("HTTP Error 429: Too Many Requests", "http.status", "rate_limited"),
    ("Error code: 503 - {'error': 'unavailable'}", "http.status", "service"),
    (
        '{"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}',
        "provider.error_body",
        "rate_limited",
    ),
    ('{"error": {"code": "insufficient_quota"}}', "provider.error_body", "resource_exhausted"),
    ("Request timed out after 30s", "timeout", "timeout"),
    ("httpx.ReadTimeout: the read operation timed out", "timeout", "timeout"),
]

CLEAN = [
    "The page says error 404 pages are customisable.",
    "Paris: 18 degrees, sunny",
    '{"status": "ok", "items": [1, 2, 3]}',
    "Order M-1044 was delivered on 14 August 2026.",
    "Timeouts are configurable in the settings page.",
    "",
]


@pytest.mark.parametrize(("text", "rule", "kind"), REPORTS)
def test_each_report_is_found_with_its_kind(text: str, rule: str, kind: str) -> None:
    found = obs.observe(text)
    assert found is not None and (found.rule.name, found.kind) == (rule, kind)
    assert found.quote and found.quote in text.replace("\n", " ")


@pytest.mark.parametrize("text", CLEAN)
def test_clean_results_are_not_failures(text: str) -> None:
    assert obs.observe(text) is None


def _sql(texts: list[str | None], rules: tuple[obs.ObservationRule, ...] = obs.RULES) -> list[object]:
    with duckdb.connect() as connection:
        connection.execute(
            "CREATE TABLE t AS SELECT unnest(?) AS text, generate_subscripts(?, 1) AS i", [texts, texts]
        )
        rows = connection.execute(f"SELECT {obs.sql_observation('text', rules)} FROM t ORDER BY i").fetchall()
    return [row[0] for row in rows]


def _python(text: str | None, rules: tuple[obs.ObservationRule, ...] = obs.RULES) -> object:
    found = obs.observe(text, rules)
    if found is None:
        return None
    rule = found.rule
    return {
        "rule": rule.name,
        "category": rule.category,
        "layer": rule.layer,
        "kind": found.kind,
        "quote": found.quote,
    }


def test_sql_agrees_with_python_on_the_documented_texts() -> None:
    texts = [t for t, _, _ in REPORTS] + CLEAN
    assert _sql(texts) == [_python(t) for t in texts]


_SNIPPETS = st.sampled_from([t for t, _, _ in REPORTS] + CLEAN + ["404", "Error", "time out", "\n", "'"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_SNIPPETS, st.text(max_size=20)), max_size=4).map("".join))
def test_sql_agrees_with_python_on_any_text(text: str) -> None:
    assert _sql([text]) == [_python(text)]


def test_configured_rules_come_first_and_are_checked() -> None:
    extra = obs.rules_from_config([{"name": "acme.down", "pattern": "ACME-E\\d+", "kind": "service"}])
    rules = obs.with_extra(extra)
    found = obs.observe("ACME-E42 backend unavailable; 404 Client Error", rules)
    assert found is not None and found.rule.name == "acme.down"
    assert _sql(["ACME-E42 backend"], rules) == [_python("ACME-E42 backend", rules)]
    with pytest.raises(ValueError, match=r"observation_rules\[0\].*kind must be one of"):
        obs.rules_from_config([{"name": "x", "pattern": "y", "kind": "weird"}])
    with pytest.raises(ValueError, match=r"observation_rules\[0\]: unknown key 'regex'"):
        obs.rules_from_config([{"name": "x", "regex": "y"}])
    with pytest.raises(ValueError, match="look-arounds"):
        obs.rules_from_config([{"name": "x", "pattern": "(?<=a)b"}])
    assert obs.rules_key(rules) != obs.rules_key(obs.RULES)
